"""One Enter saves once, whatever the load (issue 32, "also seen"): a keyboard press is claimed in the study
database by its browser page, form and sequence number, so the same trigger delivered twice (a resend after a
reconnect, another script thread, another server process, or a server restarted in between) stores one reading
or note and is answered with the first answer.

The second delivery here goes through another AppTest session after the process's memory of answered presses is
emptied (as in a second server process, or after a restart); the browser test delivers it from a real browser
first and from the AppTest inbox path second, to a server process of its own.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from test_app_pages import app_script, assert_clean, form_data, open_page, workbench

from workbench.store.tables import AppliedPress, ReadingSave
from workbench.ui import keyboard, state


@pytest.fixture
def study(demo_template, tmp_path):
    import shutil

    target = tmp_path / "study"
    shutil.copytree(demo_template, target)
    return target


@pytest.fixture(autouse=True)
def fresh_answers():
    """Each test starts with an empty memory of answered presses (the process-wide table)."""
    keyboard.ANSWERS.answers.clear()
    yield
    keyboard.ANSWERS.answers.clear()


def deliver(at, form_key: str, payload: dict) -> dict:
    """Deliver one trigger through the AppTest inbox path; the form's data after it (its answer included)."""
    keyboard.replay(at, form_key, ("action", payload))
    at.run()
    assert_clean(at)
    return form_data(at, form_key)


def in_another_process(study, page: str, session: dict | None = None):
    """A new session of the app in a process that has not seen the press (its answers forgotten)."""
    keyboard.ANSWERS.answers.clear()
    return open_page(study, page, session)


def saves(wb, reader: str) -> int:
    with wb.session() as s:
        return s.scalar(select(func.count()).select_from(ReadingSave).where(ReadingSave.reader_id == reader))


def test_the_same_enter_delivered_twice_saves_one_reading_and_answers_it_as_stored(study):
    wb = workbench(study)
    at = open_page(study, "annotate")
    at.text_input(key=state.NEW_READER).input("dr-twice").run()
    data = form_data(at, state.ANN_FORM)
    report = data["item"]["id"]
    first = wb.vocab.asked_ids[0]
    payload = {
        "seq": 1,
        "kind": "save",
        "item": report,
        "values": {**data["values"], "labels": [first]},
        "context": data["context"],
        "page": "page-of-a-reader",
    }
    assert deliver(at, state.ANN_FORM, payload)["error"] is None
    assert at.session_state[state.ANN_REPORT] != report, "on to the next report"

    again = in_another_process(study, "annotate")
    again.text_input(key=state.NEW_READER).input("dr-twice").run()
    answer = deliver(again, state.ANN_FORM, payload)
    assert answer["error"] is None, answer["error"]  # it was stored: no conflict with itself
    assert answer["acked"] == 1
    assert saves(wb, "dr-twice") == 1, "one Enter, one save"
    assert wb.my_readings("dr-twice", report).set_index("label")["value"].astype(int)[first] == 1
    with wb.session() as s:
        press = s.scalars(select(AppliedPress)).one()
    assert (press.page, press.form, press.seq, press.done, press.error) == (
        "page-of-a-reader",
        state.ANN_FORM,
        1,
        True,
        "",
    )


def test_the_same_note_delivered_twice_is_stored_once(study):
    wb = workbench(study)
    at = open_page(study, "disagreements")
    report, label = at.session_state[state.DIS_PICK]
    data = form_data(at, state.DIS_FORM)
    payload = {
        "seq": 1,
        "kind": "save",
        "item": data["item"]["id"],
        "values": {
            **data["values"],
            "category": "negation missed",
            "significance": "does not change management",
            "text": "many nodules unchanged",
        },
        "context": data.get("context"),
        "page": "page-of-a-triager",
    }
    deliver(at, state.DIS_FORM, payload)
    assert len(wb.notes(label, report)) == 1
    again = in_another_process(study, "disagreements")
    deliver(again, state.DIS_FORM, payload)
    assert wb.notes(label, report)["text"].tolist() == ["many nodules unchanged"], "the note was stored twice"


def test_a_press_being_applied_elsewhere_is_not_applied_again_and_an_interrupted_one_says_so(study):
    from workbench.services import Workbench

    wb = Workbench(study)
    claim = wb.claim_press("page-x", state.ANN_FORM, 7)
    assert claim.state == "new"
    pending = wb.claim_press("page-x", state.ANN_FORM, 7)
    assert pending.state == "pending" and pending.seconds_ago < keyboard.PENDING_S
    calls = []
    keyboard._apply_action(state.ANN_FORM, {"seq": 7, "kind": "next", "item": "x", "page": "page-x"}, calls.append, wb)
    assert calls == [] and keyboard.ANSWERS.get(("page-x", state.ANN_FORM))["seq"] == 0, "no answer yet"
    wb.finish_press("page-x", state.ANN_FORM, 7, "Not saved: refused")
    assert wb.claim_press("page-x", state.ANN_FORM, 7).state == "done"
    keyboard._apply_action(state.ANN_FORM, {"seq": 7, "kind": "next", "item": "x", "page": "page-x"}, calls.append, wb)
    assert calls == [] and keyboard.ANSWERS.get(("page-x", state.ANN_FORM)) == {
        "seq": 7,
        "error": "Not saved: refused",
    }


def test_presses_older_than_a_day_are_forgotten(study):
    from workbench.services import Workbench
    from workbench.store import queries as q

    wb = Workbench(study)
    with wb.session(write=True) as s:
        q.claim_press(s, "old-page", state.ANN_FORM, 1, "someone", "2020-01-01T00:00:00.000000+00:00")
    wb.claim_press("new-page", state.ANN_FORM, 1)
    with wb.session() as s:
        assert [p.page for p in s.scalars(select(AppliedPress))] == ["new-page"]


__all__ = ["app_script"]


@pytest.mark.browser
def test_an_enter_from_a_real_browser_delivered_again_to_another_process_saves_once(demo_template, tmp_path_factory):
    """The browser's Enter reaches the app's server process; the same press (its page id and sequence number, read
    from the form) then arrives again through the AppTest inbox path, in this test's process."""
    from test_browser import CHROMIUM, CHROMIUM_ARGS, serve, sign_in
    from test_reading_keyboard import NO_SAVE_GUARD, READER, new_page, signed_in_demo, wait_ready

    from workbench.services import Actor, Workbench
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    if not CHROMIUM.exists():
        pytest.skip("needs Chromium at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    study = signed_in_demo(demo_template, tmp_path_factory, NO_SAVE_GUARD)
    wb = Workbench(study).as_actor(Actor(READER[0], "reader"))
    first_label = wb.vocab.asked_ids[0]
    ids = wb.work_list(READER[0], "dev")["report_id"].tolist()
    server = serve(study)
    base = next(server)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            context, pg, watch = new_page(browser, base)
            sign_in(pg, base, *READER)
            wait_ready(pg, ids[0])
            pg.keyboard.press(LABEL_KEYS[0])
            pg.keyboard.press("Enter")
            wait_ready(pg, ids[1])
            sent = pg.locator(".wbk").first
            page_id, seq = sent.get_attribute("data-page"), int(sent.get_attribute("data-seq"))
            watch.check(pg)
            browser.close()
    finally:
        server.close()
    assert saves(wb, READER[0]) == 1

    at = in_another_process(study, "annotate", {state.ACTOR: Actor(READER[0], "reader")})
    data = form_data(at, state.ANN_FORM)
    payload = {
        "seq": seq,
        "kind": "save",
        "item": ids[0],
        "values": {"labels": [first_label], "unsure": None, "comment": ""},
        "context": {"versions": {lab: 0 for lab in wb.vocab.asked_ids}},  # as the browser had it: nothing saved yet
        "page": page_id,
    }
    assert data["item"]["id"] == ids[1]
    answer = deliver(at, state.ANN_FORM, payload)
    assert answer["error"] is None and answer["acked"] == seq, answer["error"]
    assert saves(wb, READER[0]) == 1, "the browser's Enter was applied a second time"


def test_a_press_from_a_disabled_account_is_answered_not_applied(study):
    from workbench.services import Workbench

    boss = Workbench(study)
    boss.add_user("boss", "admin", "boss-password-1")
    boss = boss.as_actor(boss.actor_for("boss"))
    boss.add_user("dr-gone", "reader", "reader-password-1")
    reader = boss.as_actor(boss.actor_for("dr-gone"))
    boss.set_disabled("dr-gone")
    calls = []
    keyboard._apply_action(state.ANN_FORM, {"seq": 1, "kind": "save", "item": "x", "page": "p"}, calls.append, reader)
    answer = keyboard.ANSWERS.get(("p", state.ANN_FORM))
    assert calls == [] and answer["seq"] == 1 and "disabled" in answer["error"], answer


def test_a_press_interrupted_by_a_rerun_after_its_store_is_not_applied_again_by_the_replay(study):
    """The cause of "one Enter stored the note twice": Streamlit checks for a newer rerun request at each session
    state access, even in a callback, and raises RerunException there; the next run replays the interrupted run's
    trigger. A handler interrupted after its store (Disagreements: add_note, then state.bump) was applied again."""
    from streamlit.runtime.scriptrunner_utils.exceptions import RerunException
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

    from workbench.services import Workbench
    from workbench.services.results import PressClaim

    wb = Workbench(study)
    stored = []

    def handler(payload):
        stored.append(payload["seq"])  # the note is stored ...
        raise RerunException(RerunData())  # ... and the next session-state access finds a newer rerun request

    payload = {"seq": 1, "kind": "save", "item": "r|edema", "values": {"category": "other"}, "page": "p"}
    with pytest.raises(RerunException):
        keyboard._apply_action(state.DIS_FORM, payload, handler, wb)
    keyboard._apply_action(state.DIS_FORM, payload, handler, wb)  # the next run replays the trigger
    assert stored == [1], "the replayed trigger was applied again"
    assert keyboard.ANSWERS.get(("p", state.DIS_FORM))["error"] is None  # answered as applied
    assert wb.claim_press("p", state.DIS_FORM, 1) == PressClaim("done", None)
    keyboard.ANSWERS.answers.clear()  # the same press in a process that did not see it: answered, not applied
    keyboard._apply_action(state.DIS_FORM, payload, handler, wb)
    assert stored == [1]


def test_a_handler_runs_to_its_end_though_a_newer_rerun_is_waiting(monkeypatch):
    """Streamlit's session state raises RerunException at an access when a newer rerun is waiting (its yield
    check): inside a press's handler it does not, and it does again once the handler is done."""
    from types import SimpleNamespace

    from streamlit.runtime.scriptrunner_utils.exceptions import RerunException
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
    from streamlit.runtime.state.safe_session_state import SafeSessionState
    from streamlit.runtime.state.session_state import SessionState

    def newer_rerun_waiting():
        raise RerunException(RerunData())

    safe = SafeSessionState(SessionState(), yield_callback=newer_rerun_waiting)
    monkeypatch.setattr(
        keyboard, "get_script_run_ctx", lambda suppress_warning=False: SimpleNamespace(session_state=safe)
    )
    steps = []

    def handler(payload):
        steps.append("stored")
        safe["wb.next"] = "the next item"  # a session-state access after the store: Streamlit's yield point
        steps.append("moved on")

    keyboard._apply_action(state.DIS_FORM, {"seq": 1, "kind": "save", "item": "i", "page": "q"}, handler)
    assert steps == ["stored", "moved on"] and keyboard.ANSWERS.get(("q", state.DIS_FORM))["error"] is None
    with pytest.raises(RerunException):  # the newer rerun is taken at the next access, after the press
        safe["wb.next"]
