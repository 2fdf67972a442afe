"""Every page of the app through Streamlit's AppTest, on a temporary copy of the demo study.

Each test drives a page's main action through its widgets and checks the database changed as
expected; one test checks that report text containing HTML and Markdown is shown verbatim.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from workbench.services.results import CaseRef, ReadingNote
from workbench.shipped import shipped_dir
from workbench.ui import keyboard, state

PAGES = ["home", "annotate", "adjudicate", "disagreements", "prompts", "runs", "freeze", "settings", "audit"]
TITLES = {
    "home": "Study: demo",
    "annotate": "Annotate",
    "adjudicate": "Adjudicate",
    "disagreements": "Disagreements",
    "prompts": "Prompts",
    "runs": "Runs",
    "freeze": "Freeze and score",
    "settings": "Settings",
    "audit": "Audit log",
}
EVIL = "<script>alert(1)</script> **bold** <b>not bold</b> [link](http://x) :red[red] $x^2$"


@pytest.fixture
def study(demo_template, tmp_path) -> Path:
    """A private copy of the demo study."""
    target = tmp_path / "study"
    shutil.copytree(demo_template, target)
    return target


def app_script(study_path: str, start: str) -> None:
    """The app opened on one page (AppTest runs this function's body as the script)."""
    from workbench.ui import app

    app.main(study=study_path, start=start)


def open_page(study: Path, page: str, session: dict | None = None) -> AppTest:
    """Run the app on a page and check it raised nothing."""
    at = AppTest.from_function(app_script, args=(str(study), page), default_timeout=60)
    for key, value in (session or {}).items():
        at.session_state[key] = value
    at.run()
    assert_clean(at)
    return at


def assert_clean(at: AppTest) -> None:
    """No exception on the page."""
    assert not at.exception, [e.value for e in at.exception]


def workbench(study: Path):
    from workbench.services import Workbench

    return Workbench(study)


def button(at: AppTest, label: str):
    """The (form submit) button with exactly this label."""
    found = [b for b in list(at.button) if b.label == label]
    assert found, f"no button {label!r}; buttons: {[b.label for b in at.button]}"
    return found[0]


def form_data(at: AppTest, form_key: str) -> dict:
    """What the page sent to a keyboard form (what its browser half shows)."""
    import json

    for element in at.get("bidi_component"):
        if element.proto.id.endswith(form_key):
            return json.loads(element.proto.json)
    raise AssertionError(f"no keyboard form {form_key} on the page")


def press(at: AppTest, form_key: str, kind: str = "save", **values) -> AppTest:
    """Send a keyboard form's trigger as its browser half does: Enter (save) or an arrow (prev/next/skip),
    with the values on screen (the shown ones, changed by `values`)."""
    data = form_data(at, form_key)
    payload = {
        "seq": data["acked"] + 1,
        "kind": kind,
        "item": data["item"]["id"],
        "values": {**data["values"], **values},
        "context": data.get("context"),
    }
    keyboard.replay(at, form_key, ("action", payload))
    at.run()
    assert_clean(at)
    return at


def draft(at: AppTest, form_key: str, **values) -> AppTest:
    """Send a keyboard form's debounced draft (the values on screen after some keys)."""
    data = form_data(at, form_key)
    keyboard.replay(
        at, form_key, ("draft", {"item": data["item"]["id"], "values": {**data["values"], **values}, "n": 1})
    )
    at.run()
    assert_clean(at)
    return at


def wait_for_job(at: AppTest, name: str, timeout: float = 120) -> None:
    """Let a background job of the page finish, then rerun the page."""
    job = at.session_state[state.JOBS][name]
    assert job.done.wait(timeout), f"job {name} still running after {timeout} s"
    at.run()
    assert_clean(at)


def all_text(at: AppTest) -> str:
    """Every markdown, caption, text, alert and html body on the page, joined, as a reader sees it
    (Markdown backslash escapes of text from users and files removed)."""
    import re

    parts = []
    for kind in ("markdown", "caption", "success", "info", "warning", "error", "toast"):
        parts += [re.sub(r"\\(.)", r"\1", str(e.value)) for e in getattr(at, kind)]
    for kind in ("text", "html", "code"):
        parts += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(parts)


# ---------------------------------------------------------------- every page


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_with_title_and_help(study, page):
    at = open_page(study, page)
    assert at.title[0].value == TITLES[page]
    assert at.caption, "every page has a one-line help caption"
    assert "rule-based baseline, not an LLM" in all_text(at)  # the model notice in the sidebar


def test_app_file_reads_the_study_from_the_environment(study, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STUDY", str(study))
    app_file = Path(__file__).resolve().parents[2] / "workbench" / "ui" / "app.py"
    at = AppTest.from_file(str(app_file), default_timeout=60).run()
    assert_clean(at)
    assert at.title[0].value == TITLES["home"]


@pytest.mark.parametrize("page", PAGES)
def test_page_on_an_empty_study(study_templates, tmp_path, page):
    root = tmp_path / "empty"
    shutil.copytree(study_templates["empty"], root)
    at = open_page(root, page)
    assert at.title


def test_reader_does_not_see_other_pages(study):
    from workbench.services import Actor

    path = study / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    reader = {state.ACTOR: Actor("reader-a", "reader")}
    assert open_page(study, "settings", reader).title[0].value == TITLES["annotate"]  # not allowed: a reader's page
    assert open_page(study, "annotate", reader).title[0].value == TITLES["annotate"]
    at = open_page(study, "home")  # nobody signed in: the sign-in form, nothing else
    assert at.title[0].value == "Sign in"


def test_local_sign_in_then_reader_pages_only(study):
    wb = workbench(study)
    wb.add_user("boss", "admin", "boss-password")
    wb.add_user("reader-a", "reader", "reader-password")
    path = study / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    at = open_page(study, "settings")
    assert at.title[0].value == "Sign in"
    at.text_input(key=state.SIGNIN_USER).input("reader-a")
    at.text_input(key=state.SIGNIN_PASSWORD).input("wrong-password")
    button(at, "Sign in").click().run()
    assert_clean(at)
    assert at.error and "wrong password" in at.error[0].value
    at.text_input(key=state.SIGNIN_PASSWORD).input("reader-password")
    button(at, "Sign in").click().run()
    assert_clean(at)
    assert at.title[0].value == TITLES["annotate"]  # settings is not a reader's page: a reader lands on Annotate
    assert "Acting as **reader-a** (reader)" in all_text(at)
    assert at.session_state[state.ACTOR].role == "reader"
    signed_in = {key: at.session_state[key] for key in (state.ACTOR, state.SESSION_TOKEN)}
    at = open_page(study, "home", signed_in)  # the same signed-in session, on Home
    # a blinded reader's Home: their own progress only, no figure about the reference, the labeller or others
    labels = [m.label for m in at.metric]
    assert "Your readings saved" in labels and "Left to read" in labels, labels
    assert not {"Latest run: macro F1", "Waiting", "Reference decided", "Open adjudications"} & set(labels), labels
    text = all_text(at)
    assert "hidden until" not in text and "Readers" not in [s.value for s in at.subheader]
    assert not [r for r in wb.reader_progress("dev")["reader"] if r != "reader-a" and r in text], "no other reader"
    token = at.session_state[state.SESSION_TOKEN]  # the browser session behind the cookie: a reload resumes it
    assert wb.resume_web_session(token).user == "reader-a"
    button(at, "Sign out").click().run()
    assert_clean(at)
    assert at.title[0].value == "Sign in"
    from workbench.services import PermissionDenied

    with pytest.raises(PermissionDenied):
        wb.resume_web_session(token)


def test_reader_sees_only_disagreements_of_reports_they_finished(study):
    from workbench.services import Actor

    path = study / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    at = open_page(study, "disagreements", {state.ACTOR: Actor("dr-late", "reader")})
    assert "0 of 0 with a note" in all_text(at)  # dr-late has read nothing yet: everything stays blinded
    assert not at.html


def test_a_reader_who_opened_a_disagreement_cannot_change_that_reading_afterwards(study):
    from workbench.errors import UserError
    from workbench.services import Actor

    path = study / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    wb = workbench(study)
    reader = wb.readers()[0]
    at = open_page(study, "disagreements", {state.ACTOR: Actor(reader, "reader")})
    report = at.session_state[state.DIS_PICK][0]  # its reference, votes and labeller answer are on screen
    mine = wb.as_actor(Actor(reader, "reader"))
    before = mine.my_readings(reader, report).set_index("label")["value"].astype(int).to_dict()
    flipped = {**before, next(iter(before)): 1 - before[next(iter(before))]}
    with pytest.raises(UserError, match="stays as saved"):
        mine.submit_reading(reader, report, flipped)
    assert mine.my_readings(reader, report).set_index("label")["value"].astype(int).to_dict() == before
    assert f"{report}/{reader}" in wb.audit_log(entity="report_look")["entity_key"].tolist()


# ---------------------------------------------------------------- annotate


def test_annotate_saves_a_reading_and_moves_on(study):
    at = open_page(study, "annotate")
    at.text_input(key=state.NEW_READER).input("dr-new").run()
    assert_clean(at)
    report = at.session_state[state.ANN_REPORT]
    assert not at.dataframe or "reader" not in str(at.dataframe[0].value.columns), "blinding: nobody else's readings"
    assert "reader-a" not in all_text(at)
    assert "0 of 180 read" in all_text(at) or any("0 of 180 read" in str(p.proto.text) for p in at.get("progress"))
    assert form_data(at, state.ANN_FORM)["item"]["id"] == report
    draft(at, state.ANN_FORM, labels=["pleural_effusion"])
    wb = workbench(study)
    assert wb.reading_draft("dr-new", report) == {**{lab: 0 for lab in wb.vocab.asked_ids}, "pleural_effusion": 1}
    assert form_data(at, state.ANN_FORM)["values"]["labels"] == ["pleural_effusion"]
    press(at, state.ANN_FORM, labels=["pleural_effusion"])
    mine = wb.my_readings("dr-new", report)
    assert len(mine) == 20
    assert dict(zip(mine["label"], mine["value"], strict=False))["pleural_effusion"] == 1
    assert int(mine["value"].sum()) == 1
    assert wb.reading_draft("dr-new", report) is None, "the draft is dropped once saved"
    assert at.toast and "Saved" in at.toast[0].value
    shown = form_data(at, state.ANN_FORM)
    assert at.session_state[state.ANN_REPORT] != report and shown["item"]["id"] == at.session_state[state.ANN_REPORT]
    assert shown["acked"] == 1 and shown["error"] is None, "the browser learns that its Enter was stored"


def test_annotate_unsure_comment_undo_and_my_readings(study):
    at = open_page(study, "annotate")
    at.text_input(key=state.NEW_READER).input("dr-undo").run()
    report = at.session_state[state.ANN_REPORT]
    data = form_data(at, state.ANN_FORM)
    assert data["nav"]["undo"] is False and data["values"]["unsure"] is None and data["values"]["comment"] == ""
    assert [o["key"] for g in data["groups"] if g["id"] == "unsure" for o in g["options"]] == ["."]
    press(at, state.ANN_FORM, labels=["edema"], unsure="unsure", comment="basal, faint")
    wb = workbench(study)
    assert wb.reading_note("dr-undo", report) == ReadingNote("basal, faint", unsure=True)
    assert form_data(at, state.ANN_FORM)["nav"]["undo"] is True
    at.toggle(key=state.widget_key("my-readings-on", "dev")).set_value(True).run()
    assert_clean(at)
    mine = [d.value for d in at.dataframe if "ticked" in d.value.columns][0]
    assert mine["report_id"].tolist() == [report] and bool(mine["unsure"].iloc[0]) and "reader-a" not in all_text(at)
    at.text_input(key=state.widget_key("my-readings-search", "dev")).input("no such words anywhere").run()
    assert "No saved reading or draft matches." in all_text(at)
    press(at, state.ANN_FORM, "undo")
    assert at.session_state[state.ANN_REPORT] == report, "undo opens the report again"
    assert wb.my_readings("dr-undo", report).empty and wb.reading_note("dr-undo", report) is None
    assert form_data(at, state.ANN_FORM)["values"]["labels"] == ["edema"], "its ticks are back as the draft"
    press(at, state.ANN_FORM, "undo")
    assert "Nothing undone: nothing to undo" in form_data(at, state.ANN_FORM)["error"]


def test_annotate_a_resent_trigger_is_applied_once(study):
    at = open_page(study, "annotate")
    at.text_input(key=state.NEW_READER).input("dr-twice").run()
    first = form_data(at, state.ANN_FORM)["item"]["id"]
    payload = {"seq": 1, "kind": "save", "item": first, "values": {"labels": ["edema"]}, "context": {"versions": {}}}
    keyboard.replay(at, state.ANN_FORM, ("action", payload))
    at.run()
    second = at.session_state[state.ANN_REPORT]
    keyboard.replay(at, state.ANN_FORM, ("action", {**payload, "values": {"labels": []}}))  # the same seq again
    at.run()
    assert_clean(at)
    assert at.session_state[state.ANN_REPORT] == second, "a resend does not move on again"
    assert workbench(study).my_readings("dr-twice", first).set_index("label")["value"].to_dict()["edema"] == 1


def test_annotate_saves_the_report_the_trigger_names_not_the_open_one(study):
    at = open_page(study, "annotate")
    at.text_input(key=state.NEW_READER).input("dr-name").run()
    ids = workbench(study).work_list("dr-name", "dev")["report_id"].tolist()
    at.session_state[state.ANN_REPORT] = ids[5]  # the server moved on (another tab, a row click) ...
    at.run()
    payload = {
        "seq": 1,
        "kind": "save",
        "item": ids[0],
        "values": {"labels": ["fracture"]},
        "context": {"versions": {}},
    }
    keyboard.replay(at, state.ANN_FORM, ("action", payload))  # ... but the browser's Enter was for the first report
    at.run()
    wb = workbench(study)
    assert wb.my_readings("dr-name", ids[0]).set_index("label")["value"].to_dict()["fracture"] == 1
    assert len(wb.my_readings("dr-name", ids[5])) == 0


def test_annotate_every_label_has_a_visible_key_and_navigation_keys(study):
    at = open_page(study, "annotate")
    at.text_input(key=state.NEW_READER).input("dr-keys").run()
    wb = workbench(study)
    data = form_data(at, state.ANN_FORM)
    options = data["groups"][0]["options"]
    keys = [o["key"] for o in options]
    assert [o["id"] for o in options] == wb.vocab.asked_ids
    assert all(keys) and len(set(keys)) == len(keys), keys
    assert not {"c", "r", "s", ".", "/"} & set(keys), "S skips, . marks unsure, / opens the comment"
    assert all(o["hint"] for o in options), "every chip carries its label's definition"
    rows = {row["title"]: row for row in data["help"]}  # how to read, the order, then one row per label
    assert list(rows)[:2] == ["How to read:", "Order:"]
    for o, help_row in zip(options, [rows[o["label"]] for o in options], strict=True):  # tooltip and ? panel
        lab = wb.vocab.label(o["id"])
        look_for = "Look for: " + "; ".join(lab.look_for) + "."
        assert o["hint"] == f"{lab.definition} {look_for}" and help_row["text"] == o["hint"], o["id"]
    assert data["nav"] == {"prev": False, "next": True, "skip": True, "undo": False}


def test_annotate_ticks_survive_navigation_and_reload(study):
    at = open_page(study, "annotate")
    at.text_input(key=state.NEW_READER).input("dr-draft").run()
    report = at.session_state[state.ANN_REPORT]
    press(at, state.ANN_FORM, "next", labels=["cardiomegaly", "edema"])  # → keeps the ticks on screen as the draft
    assert at.session_state[state.ANN_REPORT] != report
    progress = " ".join(str(p.proto.text) for p in at.get("progress"))
    assert "· 1 draft" in progress and "1 drafts" not in progress + all_text(at), progress  # issue 32, item 14
    press(at, state.ANN_FORM, "prev")
    assert at.session_state[state.ANN_REPORT] == report
    assert form_data(at, state.ANN_FORM)["values"]["labels"] == ["cardiomegaly", "edema"]
    # a new session (reload, lost connection): the draft is still there, nothing was saved as a reading
    again = open_page(study, "annotate", {state.NEW_READER: "dr-draft"})
    assert again.session_state[state.ANN_REPORT] == report
    assert form_data(again, state.ANN_FORM)["values"]["labels"] == ["cardiomegaly", "edema"]
    assert len(workbench(study).my_readings("dr-draft", report)) == 0
    table = [d.value for d in again.dataframe if "state" in d.value.columns][0]
    assert set(table["state"]) == {"draft (not saved)", "unread"}


def test_annotate_conflict_is_refused_with_a_clear_message(study):
    at = open_page(study, "annotate")
    at.selectbox(key=state.READER).select("reader-a").run()
    report = at.session_state[state.ANN_REPORT]
    wb = workbench(study)
    before = wb.my_readings("reader-a", report).set_index("label")["value"].to_dict()
    shown = [lab for lab in form_data(at, state.ANN_FORM)["values"]["labels"]]
    ticks = sorted(set(shown) ^ {"fracture"})
    wb.record_reading("reader-a", report, {"edema": 1 - before["edema"]})  # someone else saves first
    press(at, state.ANN_FORM, labels=ticks)
    data = form_data(at, state.ANN_FORM)
    assert data["error"] and "press enter to save yours" in data["error"].lower() and data["item"]["id"] == report
    assert "Edema: saved" in data["error"], "both versions are named (issue 32, item 6)"
    after = wb.my_readings("reader-a", report).set_index("label")["value"].to_dict()
    assert after["fracture"] == before["fracture"], "nothing of the refused save was written"
    assert wb.reading_draft("reader-a", report)["fracture"] == 1 - before["fracture"], "the ticks are kept as a draft"


def test_annotate_admin_assigns_work_lists_and_a_reader_sees_only_theirs(study):
    from workbench.services import Actor

    at = open_page(study, "annotate")
    at.toggle(key=state.widget_key("work-lists", "dev")).set_value(True).run()
    form_inputs = [t for t in at.text_input if t.label.startswith("Readers")]
    form_inputs[0].input("dr-1, dr-2, dr-3")
    [n for n in at.number_input if n.label.startswith("Readers per report")][0].set_value(2)
    button(at, "Assign").click().run()
    assert_clean(at)
    wb = workbench(study)
    status = wb.work_list_status("dev")
    assert sorted(status["assigned"]) == [120, 120, 120]
    path = study / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    at = open_page(study, "annotate", {state.ACTOR: Actor("dr-2", "reader")})
    assert any("0 of 120 read" in str(p.proto.text) for p in at.get("progress"))
    assert at.session_state[state.ANN_REPORT] in set(
        wb.as_actor(Actor("dr-2", "reader")).work_list("dr-2", "dev")["report_id"]
    )


# ---------------------------------------------------------------- adjudicate


def test_adjudicate_by_keys_flagged_first_then_next(study):
    wb = workbench(study)
    before = wb.adjudication_worklist("dev")
    tie = before[before["why"] == "tie"].iloc[0]
    decided = wb.reference("dev")
    decided = decided[decided["status"] == "decided"].iloc[0]
    wb.add_note(
        decided["report_id"],
        decided["label"],
        "reference label wrong",
        "changes management",
        "looks wrong",
        reference_wrong=True,
    )
    at = open_page(study, "adjudicate")
    assert at.session_state[state.ADJ_ITEM] == (decided["report_id"], decided["label"]), "flagged items first"
    queue = wb.adjudication_worklist("dev")
    assert list(queue["why"].iloc[:2]) == ["flagged: the reference may be wrong", "tie"]
    assert queue.iloc[1]["report_id"] == tie["report_id"]
    data = form_data(at, state.ADJ_FORM)
    assert [o["key"] for o in data["groups"][0]["options"]] == ["1", "0"]
    assert data["groups"][1]["options"][0]["key"] == "q"
    press(at, state.ADJ_FORM, value=None)
    assert "choose the value" in form_data(at, state.ADJ_FORM)["error"].lower(), (
        "a value is needed (the browser checks it too)"
    )
    press(at, state.ADJ_FORM, value="0", reason="Hedged wording: absent per study policy")
    history = wb.adjudication_history(decided["report_id"], decided["label"])
    assert len(history) == 1 and int(history["value"].iloc[0]) == 0
    assert history["reason"].iloc[0] == "Hedged wording: absent per study policy"
    assert at.session_state[state.ADJ_ITEM] == (tie["report_id"], tie["label"]), "the next item, not the top"
    assert form_data(at, state.ADJ_FORM)["item"]["id"] == f"{tie['report_id']}|{tie['label']}"
    # free text only is enough; preset plus text are joined
    press(at, state.ADJ_FORM, value="1", text="clear on re-reading")
    assert wb.adjudication_history(tie["report_id"], tie["label"])["reason"].iloc[0] == "clear on re-reading"


# ---------------------------------------------------------------- disagreements


def _note(at: AppTest, category: str, significance: str, text: str = "") -> AppTest:
    """Save a quick note as the keyboard form sends it."""
    return press(at, state.DIS_FORM, category=category, significance=significance, text=text)


def test_disagreements_note_moves_to_the_next_case_without_a_note(study):
    wb = workbench(study)
    queue = wb.disagreements(int(wb.runs().iloc[0]["id"]))
    # a later case already has a note: saving must skip it
    wb.add_note(queue["report_id"].iloc[1], queue["label"].iloc[1], "other", "unsure", "seen already")
    at = open_page(study, "disagreements")
    report, label = at.session_state[state.DIS_PICK]
    assert (report, label) == (queue["report_id"].iloc[0], queue["label"].iloc[0])
    assert at.html, "the report with the labeller's evidence highlighted"
    assert f"1 of {len(queue)} with a note" in all_text(at)
    assert form_data(at, state.DIS_FORM)["item"]["id"] == f"{report}|{label}"
    _note(at, "negation missed", "does not change management", "missed the collapse wording")
    notes = wb.notes(label, report)
    assert len(notes) == 1 and notes["category"].iloc[0] == "negation missed"
    assert notes["text"].iloc[0] == "missed the collapse wording"
    assert at.toast and f"Note saved on {report}" in at.toast[0].value.replace("\\", "")
    assert at.session_state[state.DIS_PICK] == (queue["report_id"].iloc[2], queue["label"].iloc[2])
    assert f"2 of {len(queue)} with a note" in all_text(at)


def test_disagreements_keys_are_shown_on_the_buttons(study):
    at = open_page(study, "disagreements")
    wb = workbench(study)
    data = form_data(at, state.DIS_FORM)
    assert [o["key"] for o in data["groups"][0]["options"]][:10] == list("1234567890")  # categories 11+ have no key
    assert [o["key"] for o in data["groups"][1]["options"]] == ["m", "n", "u"]
    assert data["nav"] == {"prev": False, "next": True}
    assert [o["id"] for o in data["groups"][0]["options"]] == wb.config.error_categories
    assert "adjudication" in data["groups"][0]["options"][8]["label"], "the category is the flag: one control"


def test_disagreements_reference_wrong_keeps_the_position(study):
    at = open_page(study, "disagreements")
    press(at, state.DIS_FORM, "next")
    press(at, state.DIS_FORM, "next")
    report, label = at.session_state[state.DIS_PICK]
    assert at.session_state[state.DIS_POS] == 2
    wb = workbench(study)
    queue = wb.disagreements(int(wb.runs().iloc[0]["id"]))
    _note(at, "reference label wrong", "changes management")
    assert wb.notes(label, report)["reference_wrong"].iloc[0]
    assert (report, label) not in set(
        zip(*(wb.disagreements(int(wb.runs().iloc[0]["id"]))[c] for c in ("report_id", "label")), strict=False)
    )
    assert at.session_state[state.DIS_PICK] == (queue["report_id"].iloc[3], queue["label"].iloc[3]), (
        "not back to the top"
    )


def test_disagreements_example(study):
    at = open_page(study, "disagreements")
    report, label = at.session_state[state.DIS_PICK]
    wb = workbench(study)
    before = len(wb.draft(label)[0].examples)
    [t for t in at.text_input if t.label.startswith("Why")][0].input("collapse is atelectasis wording")
    button(at, "Add as few-shot example").click().run()
    assert_clean(at)
    lp, _, exists = wb.draft(label)
    assert exists and len(lp.examples) == before + 1
    assert lp.examples[-1].source_report_id == report


def test_disagreements_filters_and_order(study):
    at = open_page(study, "disagreements")
    at.selectbox(key=state.DIS_KIND).select("FP").run()
    assert_clean(at)
    table = at.dataframe[0].value
    assert set(table["type"]) <= {"FP"}
    at.radio(key=state.DIS_ORDER).set_value("broken").run()
    assert_clean(at)
    assert "broken" in all_text(at)


def test_highlights_say_what_they_are():
    from workbench.ui.components import highlight_html, phrase_spans

    text = "Small left pleural effusions. No pneumothorax."
    body = highlight_html(text, "No pneumothorax", ["Pleural Effusion"])
    assert '<mark class="wb-evidence"' in body and "No pneumothorax</mark>" in body
    assert '<mark class="wb-look-for"' in body and "pleural effusions</mark>" in body
    assert phrase_spans("an effusion", ["effusion"]) == [(3, 11)]
    assert phrase_spans("noneffusion", ["effusion"]) == [], "whole words only"


# ---------------------------------------------------------------- prompts


def test_prompts_draft_then_commit(study):
    wb = workbench(study)
    versions = len(wb.prompt_history())
    at = open_page(study, "prompts", {state.PROMPT_LABEL: "atelectasis"})
    [t for t in at.text_area if t.label.startswith("Look for")][0].input("atelectasis\ncollapse\nvolume loss")
    button(at, "Save draft").click().run()
    assert_clean(at)
    lp, _, exists = wb.draft("atelectasis")
    assert exists and "collapse" in lp.look_for
    at.text_input(key=state.COMMIT_MESSAGE).input("atelectasis: collapse and volume loss are atelectasis")
    button(at, "Save version").click().run()
    assert_clean(at)
    history = wb.prompt_history()
    assert len(history) == versions + 1
    assert "collapse" in wb.label_prompt("atelectasis").look_for
    assert not wb.draft("atelectasis")[2]


def test_a_saved_contradiction_is_a_warning_and_the_policy_tab_marks_drafts(study):
    import dataclasses

    wb = workbench(study)
    lp, base, _ = wb.draft("atelectasis")
    exclusion = "the report only mentions 'possible'"
    wb.save_draft(
        dataclasses.replace(lp, hedged="positive", do_not_label_when=(*lp.do_not_label_when, exclusion)), base
    )
    assert wb.policy_table().set_index("label").loc["atelectasis", "draft"]
    at = open_page(study, "prompts", {state.PROMPT_LABEL: "atelectasis"})
    at.text_input(key=state.COMMIT_MESSAGE).input("atelectasis: hedges count")
    button(at, "Save version").click().run()
    assert_clean(at)
    shown = [w.value.replace("\\", "") for w in at.warning]  # the message is shown as escaped Markdown
    assert any("Saved version" in w and "contradiction" in w and "excludes 'possible'" in w for w in shown), shown
    assert not wb.draft("atelectasis")[2]


def test_prompts_conflict_keeps_the_draft(study):
    wb = workbench(study)
    at = open_page(study, "prompts", {state.PROMPT_LABEL: "edema"})
    [t for t in at.text_area if t.label == "Definition"][0].input("Fluid in the lungs (draft).")
    button(at, "Save draft").click().run()
    from workbench.services import Actor

    other = wb.as_actor(Actor("other", "prompt_engineer"))
    lp = other.label_prompt("edema")
    other.save_prompts(
        [lp.__class__(**{**lp.__dict__, "definition": "Changed by someone else."})], "other", other.prompt_commit()
    )
    at.text_input(key=state.COMMIT_MESSAGE).input("mine")
    button(at, "Save version").click().run()
    assert_clean(at)
    assert at.error and "someone else saved first" in at.error[0].value.lower()
    assert wb.draft("edema")[2], "the draft is kept"


# ---------------------------------------------------------------- runs


def test_runs_starts_a_run_with_progress(study):
    wb = workbench(study)
    before = len(wb.runs())
    at = open_page(study, "runs")
    at.multiselect[0].select("atelectasis").select("edema")
    button(at, "Start run").click().run()
    assert_clean(at)
    wait_for_job(at, "run")
    runs = wb.runs()
    assert len(runs) == before + 1 and runs.iloc[0]["status"] == "finished"
    assert any(f"run {runs.iloc[0]['id']} finished" in s.value for s in at.success), all_text(at)


def test_runs_compare_opens_a_case_in_disagreements(study):
    wb = workbench(study)
    lp = wb.label_prompt("atelectasis")
    wb.save_prompts(
        [lp.__class__(**{**lp.__dict__, "look_for": lp.look_for + ("collapse",)})], "collapse", wb.prompt_commit()
    )
    wb.start_run("dev")
    at = open_page(study, "runs", {state.RUNS_TAB: "Compare two runs"})
    newest = wb.runs()["id"].tolist()
    cmp = wb.compare_runs(newest[1], newest[0])
    assert len(cmp.cases) > 0
    assert "fixed" in all_text(at)
    button(at, "Open in Disagreements").click().run()
    assert_clean(at)
    assert at.title[0].value == "Disagreements"
    first = cmp.cases.iloc[0]
    assert at.session_state[state.DIS_PICK] == (first["report"], first["label"])
    assert "Before and after" in all_text(at), "both runs' answers and the prompt diff"
    assert any("look_for" in c.value or "collapse" in c.value for c in at.code), [c.value for c in at.code]


def test_runs_compare_sorted_by_change_with_verdict_and_explained_numbers(study):
    wb = workbench(study)
    lp = wb.label_prompt("atelectasis")
    wb.save_prompts(
        [lp.__class__(**{**lp.__dict__, "look_for": lp.look_for + ("collapse",)})], "collapse", wb.prompt_commit()
    )
    wb.start_run("dev")
    at = open_page(study, "runs", {state.RUNS_TAB: "Compare two runs"})
    table = [d.value for d in at.dataframe if "verdict" in d.value.columns][0]
    assert list(table.columns[:3]) == ["label", "verdict", "change in F1"], "the verdict sits next to the label"
    view = wb.compare_view(*wb.runs()["id"].tolist()[1::-1])
    changed = view.table[view.table["changed"]]
    assert len(table) == len(changed) < len(view.table), "only changed labels by default"
    significant = table["verdict"].isin(["better", "worse"]).to_numpy()
    assert not (significant[1:] & ~significant[:-1]).any(), "significant rows first"
    rest = table[~significant]["change in F1"].abs().fillna(0).to_numpy()
    assert (rest[:-1] >= rest[1:]).all(), "then by size of the change"
    assert "The Metrics tab scores each run alone" in all_text(at)
    assert (view.table["delta_f1_lo"] <= view.table["delta_f1"] + 1e-12).all()
    at.toggle(key=state.widget_key("only-changed")).set_value(False).run()
    assert_clean(at)
    assert len([d.value for d in at.dataframe if "verdict" in d.value.columns][0]) == len(view.table)


def test_runs_clopper_pearson_interval(study):
    at = open_page(study, "runs")
    at.radio(key=state.CI).set_value("clopper-pearson").run()
    assert_clean(at)
    assert any("[" in str(v) for v in at.dataframe[1].value["accuracy [95% CI]"])
    at.toggle(key=state.widget_key("ceiling")).set_value(True).run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert "readers' Fleiss kappa" in at.dataframe[-1].value.columns


# ---------------------------------------------------------------- freeze and score


def test_freeze_makes_a_bundle_and_scores(study, tmp_path):
    at = open_page(study, "freeze")
    [t for t in at.text_input if t.label == "Bundle name"][0].input("demo-v1")
    button(at, "Freeze").click().run()
    assert_clean(at)
    assert (study / "bundles" / "demo-v1.json").exists()
    assert "Frozen demo-v1" in all_text(at)
    assert "few-shot example(s) quoting report text" in all_text(at)
    reports = pd.read_csv(shipped_dir("annotations") / "demo" / "reports.csv").head(12)
    generated = reports.assign(impression="No acute cardiopulmonary process.")
    at.file_uploader[0].upload("reference.csv", reports.to_csv(index=False).encode(), "text/csv")
    at.file_uploader[1].upload("gen-a.csv", generated.to_csv(index=False).encode(), "text/csv")
    button(at, "Score").click().run()
    assert_clean(at)
    wait_for_job(at, "score")
    assert "gen-a" in all_text(at) and "Ran Score" in all_text(at)
    assert len(at.download_button) >= 4


def test_scoring_and_pairs_uploads_are_deleted_from_the_temp_folder_after_use(study, tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the page writes uploads (the importers read files)
    workbench(study).freeze("demo-v1")
    at = open_page(study, "freeze")
    reports = pd.read_csv(shipped_dir("annotations") / "demo" / "reports.csv").head(6)
    at.file_uploader[0].upload("reference.csv", reports.to_csv(index=False).encode(), "text/csv")
    at.file_uploader[1].upload("gen-a.csv", reports.to_csv(index=False).encode(), "text/csv")
    button(at, "Score").click().run()
    wait_for_job(at, "score")
    assert "gen-a" in all_text(at)
    pairs = shipped_dir("annotations") / "robustness" / "pairs.csv"
    at.file_uploader(key=state.widget_key("pairs")).upload("pairs.csv", pairs.read_bytes(), "text/csv")
    button(at, "Check robustness").click().run()
    assert_clean(at)
    assert at.session_state[state.ROBUST_RESULT].pairs is not None
    assert not list(temp.glob("workbench-*")), "report text left in the temp folder"


def test_robustness_with_shipped_pairs(study):
    wb = workbench(study)
    wb.freeze("demo-v1")
    at = open_page(study, "freeze")
    button(at, "Check robustness").click().run()
    assert_clean(at)
    result = at.session_state[state.ROBUST_RESULT]
    assert set(result.per_kind["kind"]) == {"paraphrase", "significant"}


# ---------------------------------------------------------------- settings and audit


def test_settings_saves_the_config(study):
    from workbench.study import load_config

    at = open_page(study, "settings")
    at.number_input[0].set_value(3)
    [n for n in at.number_input if n.label.startswith("Ask before saving")][0].set_value(4.0)
    [t for t in at.text_input if t.label.startswith("Model")][0].input("openai/gpt-4o-mini")
    button(at, "Save settings").click().run()
    assert_clean(at)
    cfg = load_config(study)
    assert cfg.labeller["concurrency"] == 3 and cfg.labeller["model"] == "openai/gpt-4o-mini"
    assert cfg.reading == {"min_seconds_empty": 4.0}
    text = all_text(at)
    assert "Report text will be sent to" in text and "not among the allowed endpoints" in text


def test_settings_refuses_an_impossible_rule(study):
    from workbench.study import load_config

    at = open_page(study, "settings")
    at.number_input[1].set_value(7)  # K = 7 of N = 6
    button(at, "Save settings").click().run()
    assert_clean(at)
    assert at.error
    assert load_config(study).reference["k"] == 4


def test_settings_offers_the_papers_rule(study):
    from workbench.study import load_config

    at = open_page(study, "settings")
    rule = [b for b in at.selectbox if b.label == "Rule"][0]
    assert "positive when at least K of N mark it, otherwise negative" in rule.options
    rule.set_value("positive_at_least")
    button(at, "Save settings").click().run()
    assert_clean(at)
    assert load_config(study).reference == {"rule": "positive_at_least", "k": 4, "n": 6}


def test_audit_shows_the_log(study):
    at = open_page(study, "audit")
    log = at.dataframe[0].value
    assert len(log) > 0 and {"who", "action", "entity", "change (old → new)"} <= set(log.columns)
    assert not log["change (old → new)"].str.contains('{"', regex=False).any(), "readable, not raw JSON"
    assert log["when"].str.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d [A-Z]+$").all(), "to the minute, with the zone"
    at.selectbox(key=state.AUDIT_ENTITY).select("run").run()
    assert_clean(at)
    assert set(at.dataframe[0].value["entity"]) == {"run"}
    assert at.download_button


def test_audit_change_reads_as_old_to_new():
    from workbench.ui.components import audit_change

    assert audit_change('{"value": 0}', '{"value": 1}') == "value: 0 → 1"
    assert audit_change("", '{"edema": 1, "fracture": 0}') == "edema: 1; fracture: 0"
    assert audit_change('{"allowed": ["a"]}', '{"allowed": ["a", "b"]}') == "allowed: a → a, b"
    assert audit_change('{"role": "reader", "x": 1}', '{"role": "admin", "x": 1}') == "role: reader → admin"


def test_settings_endpoint_changes_are_audited(study):
    at = open_page(study, "settings")
    area = [t for t in at.text_area if t.label.startswith("Allowed endpoints")][0]
    area.input(area.value + "\nhttp://10.0.0.5:8000")
    button(at, "Save settings").click().run()
    assert_clean(at)
    wb = workbench(study)
    assert "http://10.0.0.5:8000" in wb.config.allowed_endpoints
    assert "http://10.0.0.5:8000" in set(wb.audit_log(entity="endpoint")["entity_key"])


# ---------------------------------------------------------------- report text is never rendered


def _import_evil_report(study: Path, tmp_path: Path) -> str:
    wb = workbench(study)
    pd.DataFrame({"id": ["evil-1"], "findings": [EVIL], "impression": ["Heart size normal."]}).to_csv(
        tmp_path / "evil.csv", index=False
    )
    wb.import_reports(tmp_path / "evil.csv", "evil")
    rows = [
        {"report_id": "evil-1", "label": lab, "reader": f"reader-{r}", "value": int(lab == "pleural_effusion")}
        for lab in wb.vocab.asked_ids
        for r in "abcdef"
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "evil_readings.csv", index=False)
    wb.import_readings(tmp_path / "evil_readings.csv")
    return wb.start_run("evil").run_id


def test_report_with_html_and_markdown_is_shown_verbatim(study, tmp_path):
    run_id = _import_evil_report(study, tmp_path)
    at = open_page(study, "annotate", {state.COHORT: "evil"})
    at.text_input(key=state.NEW_READER).input("dr-x").run()
    assert_clean(at)
    assert EVIL in form_data(at, state.ANN_FORM)["item"]["text"], "the form shows it as text (textContent)"
    assert not any("<script>" in m.value or "**bold**" in m.value for m in at.markdown)
    at = open_page(study, "disagreements", {state.CASE: CaseRef(run_id, "evil-1", "pleural_effusion")})
    body = at.html[0].value
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "**bold**" in body and "&lt;b&gt;not bold&lt;/b&gt;" in body
    assert not any("<script>" in m.value for m in at.markdown)


# ---------------------------------------------------------------- text from users and files is never Markdown

INJECT = "![x](http://127.0.0.2/x.png) **bold**"


def _rendered_markdown(at: AppTest) -> list[str]:
    """Every body Streamlit renders as Markdown (markdown, captions, alerts, titles, metric help)."""
    parts = []
    for kind in ("markdown", "caption", "success", "info", "warning", "error", "title", "subheader", "header"):
        parts += [str(e.value) for e in getattr(at, kind)]
    parts += [str(m.proto.help) for m in at.metric]
    return parts


def test_commit_message_and_report_id_are_not_markdown(study, tmp_path):
    from workbench.ui.components import md

    wb = workbench(study)
    lp = wb.label_prompt("edema")
    wb.save_prompts([lp.__class__(**{**lp.__dict__, "definition": "Fluid."})], INJECT, wb.prompt_commit())
    pd.DataFrame({"id": [INJECT], "findings": ["Small left pleural effusion."], "impression": [""]}).to_csv(
        tmp_path / "inj.csv", index=False
    )
    wb.import_reports(tmp_path / "inj.csv", "inj")
    at = open_page(study, "home")
    shown = _rendered_markdown(at)
    assert not any(INJECT in s for s in shown), "raw Markdown from a commit message reached the page"
    assert INJECT in [t.value for t in at.text], (
        "the commit message is shown as typed, as plain text (issue 20, item 12)"
    )
    # a report id: the report heading and the 'saved' message
    at = open_page(study, "annotate", {state.COHORT: "inj"})
    at.text_input(key=state.NEW_READER).input("dr-inj").run()
    assert_clean(at)
    shown = _rendered_markdown(at)
    assert not any(INJECT in s for s in shown), shown
    assert INJECT in form_data(at, state.ANN_FORM)["item"]["heading"], "shown by the form as text (textContent)"
    press(at, state.ANN_FORM)
    assert at.toast and md(INJECT) in at.toast[0].value and INJECT not in at.toast[0].value


def test_md_escapes_every_markdown_construct():
    import re

    from workbench.ui.components import md

    for raw in [
        "**b**",
        "_i_",
        "`c`",
        "[l](http://h)",
        "![i](http://h/x.png)",
        ":red[r]",
        "$x^2$",
        "# h",
        "<b>x</b>",
        "http://127.0.0.2/x",
        "a\\*b",
        "1. item",
    ]:
        out = md(raw)
        tokens = re.findall(r"\\.|.", out, flags=re.S)  # an escape pair or one character
        assert "".join(t[-1] for t in tokens) == raw, (raw, out)
        bare = [t for t in tokens if len(t) == 1 and t in "\\*_`[]()!:$#<>.-"]
        assert not bare, (raw, out, bare)


def test_home_leads_with_f1_and_shows_prevalence(study):
    at = open_page(study, "home")
    labels = [m.label for m in at.metric]
    assert labels.index("Latest run: macro F1") < labels.index("Latest run: macro accuracy")
    worst = [d.value for d in at.dataframe if "F1" in d.value.columns][0]
    assert list(worst.columns[:2]) == ["label", "F1"] and {"precision", "recall", "accuracy", "prevalence"} <= set(
        worst.columns
    )
    f1 = pd.to_numeric(worst["F1"], errors="coerce").fillna(-1).to_numpy()
    assert (f1[:-1] <= f1[1:]).all(), "lowest F1 first"
    wb = workbench(study)
    assert set(worst["label"]) <= set(wb.vocab.names().values()), "display names, not ids"
    assert "Labels with the lowest F1" in all_text(at)


def test_long_queues_are_windowed_around_the_open_item():
    from workbench.ui.components import window

    assert window(3000, 0) == (0, 100)
    assert window(3000, 1500) == (1480, 1580)
    assert window(3000, 2999) == (2900, 3000)
    assert window(40, 30) == (0, 40)


def test_prompt_field_changes_read_as_text(study):
    from workbench.core.policy import diff_label_prompts
    from workbench.ui.components import field_changes

    assert field_changes({}) == []
    lines = field_changes(
        {
            "changed": {"definition": ("Old.", "New.")},
            "added": {"look_for": ["collapse"]},
            "removed": {"do_not_label_when": ["scar"]},
        }
    )
    assert lines == ["definition: Old. → New.", "look for: + collapse", "do not label when: − scar"]
    assert field_changes({"created": True}) == ["the label's prompt was created"]
    old = workbench(study).label_prompt("edema")
    new = old.__class__(**{**old.__dict__, "look_for": old.look_for + ("bat wing",)})
    assert field_changes(diff_label_prompts(old, new)) == ["look for: + bat wing"]


# ---------------------------------------------------------------- links that carry state


def open_url(study: Path, page: str, params: dict, session: dict | None = None) -> AppTest:
    """Open a page as a reload or a shared link would: a fresh session with these query parameters."""
    at = AppTest.from_function(app_script, args=(str(study), page), default_timeout=60)
    for key, value in (session or {}).items():
        at.session_state[key] = value
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert_clean(at)
    return at


def url(at: AppTest) -> dict:
    """The query parameters the page wrote (one value each)."""
    return {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}


def test_annotate_link_returns_to_the_report(study):
    at = open_url(study, "annotate", {"report": "demo-007", "cohort": "dev"}, {state.NEW_READER: "dr-url"})
    assert at.session_state[state.ANN_REPORT] == "demo-007"
    assert form_data(at, state.ANN_FORM)["item"]["id"] == "demo-007"
    press(at, state.ANN_FORM)
    assert (
        url(at) == {"cohort": "dev", "report": at.session_state[state.ANN_REPORT]} and url(at)["report"] != "demo-007"
    )
    unknown = open_url(study, "annotate", {"report": "no-such-report"}, {state.NEW_READER: "dr-url"})
    assert unknown.session_state[state.ANN_REPORT] != "no-such-report", "a stale link opens the work list as usual"


def test_disagreements_link_returns_to_the_case_and_run(study):
    wb = workbench(study)
    runs = wb.runs()
    older = int(runs.iloc[1]["id"])
    queue = wb.disagreements(older, "edema")
    case = f"{queue['report_id'].iloc[2]}|edema"
    at = open_url(study, "disagreements", {"run": str(older), "label": "edema", "case": case})
    assert at.session_state[state.RUN] == older and at.session_state[state.DIS_LABEL] == "edema"
    assert form_data(at, state.DIS_FORM)["item"]["id"] == case
    assert url(at) == {"run": str(older), "label": "edema", "case": case}
    bad = open_url(study, "disagreements", {"label": "not-a-label", "case": "x"})
    assert bad.session_state[state.DIS_LABEL] is None


def test_adjudicate_link_returns_to_the_item(study):
    queue = workbench(study).adjudication_worklist("dev")
    item = f"{queue['report_id'].iloc[3]}|{queue['label'].iloc[3]}"
    at = open_url(study, "adjudicate", {"item": item, "cohort": "dev"})
    assert form_data(at, state.ADJ_FORM)["item"]["id"] == item
    assert url(at) == {"cohort": "dev", "item": item}


def test_runs_link_carries_the_comparison(study):
    ids = workbench(study).runs()["id"].tolist()
    at = open_url(study, "runs", {"tab": "1", "a": str(ids[0]), "b": str(ids[1])})
    assert (at.session_state[state.RUN_A], at.session_state[state.RUN_B]) == (ids[0], ids[1])
    assert url(at)["tab"] == "1" and url(at)["a"] == str(ids[0]) and url(at)["b"] == str(ids[1])


def test_home_link_carries_the_cohort(study, tmp_path):
    wb = workbench(study)
    pd.DataFrame({"id": ["other-1"], "findings": ["No acute disease."], "impression": ["Normal."]}).to_csv(
        tmp_path / "other.csv", index=False
    )
    wb.import_reports(tmp_path / "other.csv", "other")
    at = open_url(study, "home", {})
    assert url(at) == {"cohort": "dev"}, "the page writes the cohort it shows"
    at = open_url(study, "home", {"cohort": "other"})
    assert at.session_state[state.COHORT] == "other" and url(at) == {"cohort": "other"}
    assert open_url(study, "home", {"cohort": "no-such"}).session_state[state.COHORT] == "dev"


def test_prompts_link_carries_the_label(study):
    at = open_url(study, "prompts", {"label": "edema"})
    assert at.session_state[state.PROMPT_LABEL] == "edema" and url(at)["label"] == "edema"
    at.selectbox(key=state.PROMPT_LABEL).select("atelectasis").run()
    assert_clean(at)
    assert url(at)["label"] == "atelectasis"
    assert open_url(study, "prompts", {"label": "not-a-label"}).session_state[state.PROMPT_LABEL] != "not-a-label"


def test_optimise_link_carries_the_tab_run_and_comparison(study):
    ids = workbench(study).runs()["id"].tolist()
    at = open_url(study, "optimise", {"tab": "1", "run": str(ids[1]), "compare": str(ids[0])})
    assert at.session_state[state.OPT_RUN] == ids[1] and at.session_state[state.OPT_COMPARE] == ids[0]
    assert url(at) == {"tab": "1", "run": str(ids[1]), "compare": str(ids[0])}


def test_compare_offers_no_derived_case_and_says_why(study):
    """No Finding is derived: its changed cases headed the list and opened an empty "0 of 0" queue."""
    wb = workbench(study)
    a, b = sorted(wb.runs()["id"].tolist())
    assert (wb.compare_runs(a, b).cases["label"] == "no_finding").any(), "the comparison has derived cases"
    at = open_url(study, "runs", {"tab": "1", "a": str(a), "b": str(b)})
    shown = [d.value for d in at.dataframe if "label" in d.value.columns and "change" in d.value.columns]
    assert shown and "No Finding" not in set(shown[0]["label"])
    assert "No Finding is derived from the asked labels" in all_text(at)
    button(at, "Open in Disagreements").click().run()
    assert_clean(at)
    assert at.session_state[state.DIS_PICK][1] != "no_finding"
    assert form_data(at, state.DIS_FORM)["item"]["id"].split("|")[1] != "no_finding"


def test_every_default_error_category_has_a_key():
    from workbench.study import DEFAULT_CATEGORIES
    from workbench.ui.app_pages.disagreements import CATEGORY_KEYS, SIGNIFICANCE_KEYS

    assert len(CATEGORY_KEYS) >= len(DEFAULT_CATEGORIES), "categories 11 and 12 (severity, comparison) had no key"
    taken = {k.lower() for k in SIGNIFICANCE_KEYS.values()} | {"/", "?", "s"}
    assert len(set(CATEGORY_KEYS)) == len(CATEGORY_KEYS) and not taken & set(CATEGORY_KEYS)


def test_an_admin_adds_an_account_resets_its_password_and_changes_its_role_in_settings(study):
    from workbench.services import PermissionDenied

    wb = workbench(study)
    wb.add_user("boss", "admin", "boss-password-1")
    path = study / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    at = open_page(study, "settings", {state.ACTOR: wb.actor_for("boss")})
    at.text_input(key=state.widget_key("account-new-id")).input("dr-new")
    at.selectbox(key=state.widget_key("account-new-role")).select("reader")
    button(at, "Add account").click().run()
    assert_clean(at)
    shown = [c.value for c in at.code]
    assert len(shown) == 1 and wb.authenticate("dr-new", shown[0]).role == "reader", "the password shown once works"
    at.run()
    assert not at.code, "shown once: gone at the next run"
    at.selectbox(key=state.widget_key("account")).select("dr-new").run()
    button(at, "Reset password").click().run()
    new = [c.value for c in at.code]
    assert len(new) == 1 and new[0] != shown[0] and wb.authenticate("dr-new", new[0]).user == "dr-new"
    with pytest.raises(PermissionDenied):
        wb.authenticate("dr-new", shown[0])
    at.selectbox(key=state.widget_key("account-role", "dr-new")).select("adjudicator").run()
    button(at, "Change role").click().run()
    assert_clean(at)
    assert wb.actor_for("dr-new").role == "adjudicator"
    at.text_input(key=state.widget_key("account-new-id")).input("bad id!")
    button(at, "Add account").click().run()
    assert "letters, digits" in all_text(at) and not at.code, "the CLI's rules, with a clear error"
