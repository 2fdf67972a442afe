"""The edge of the reading flow in a real browser (issue 32): what a reader who reads 200 reports a day meets
every day. Each test is one promise of the issue and failed on the code before its change.
"""

from __future__ import annotations

import pytest
from test_browser import ARTIFACTS, CHROMIUM, TIMEOUT_MS, browser, open_by_keyboard, serve, sign_in  # noqa: F401
from test_reading_keyboard import FORM_STATE, READER, new_page, signed_in_demo, wait_ready  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

STATUS = """() => {
  for (const host of document.querySelectorAll('[data-testid="stBidiComponentIsolated"]')) {
    const s = host.shadowRoot && host.shadowRoot.querySelector('.wbk-status');
    if (s) return s.textContent;
  }
  return null;
}"""


@pytest.fixture(scope="module")
def edge_study(demo_template, tmp_path_factory):
    """The demo study with sign-in on and the reading settings at their defaults."""
    return signed_in_demo(demo_template, tmp_path_factory)


@pytest.fixture(scope="module")
def edge_server(edge_study):
    yield from serve(edge_study)


def reader_wb(study):
    from workbench.services import Actor, Workbench

    return Workbench(study).as_actor(Actor(READER[0], "reader"))


def saved(wb, report: str) -> dict:
    """The reader's stored reading of a report: label -> value ({} when none)."""
    return wb.my_readings(READER[0], report).set_index("label")["value"].astype(int).to_dict()


def test_a_double_enter_saves_the_report_on_screen_once_and_not_the_next_one_unseen(browser, edge_server, edge_study):
    from workbench.core.reading import MIN_SECONDS_SHOWN
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = reader_wb(edge_study)
    ids = wb.work_list(READER[0], "dev")["report_id"].tolist()
    context, pg, watch = new_page(browser, edge_server)
    sign_in(pg, edge_server, *READER)
    open_by_keyboard(pg, "Annotate")
    for n, gap_ms in enumerate((80, 150, 250)):  # the range: Enter twice, 80 to 250 ms apart
        first, following = ids[2 * n], ids[2 * n + 1]
        wait_ready(pg, first)
        pg.wait_for_timeout(MIN_SECONDS_SHOWN * 1000)  # the reader has read it
        pg.keyboard.press(LABEL_KEYS[0])
        pg.keyboard.press("Enter")
        pg.wait_for_timeout(gap_ms)  # an input of the test: the second press of a double Enter
        pg.keyboard.press("Enter")
        wait_ready(pg, following)
        pg.wait_for_function(f"() => ({STATUS})().startsWith('Not saved: Enter')", timeout=TIMEOUT_MS)
        assert saved(wb, first)[wb.vocab.asked_ids[0]] == 1
        assert saved(wb, following) == {}, f"{following} was saved unseen by the second Enter ({gap_ms} ms)"
        pg.wait_for_timeout(MIN_SECONDS_SHOWN * 1000)
        pg.keyboard.press("Enter")  # read now: Enter saves it
        wait_ready(pg, ids[2 * n + 2])
        assert set(saved(wb, following).values()) == {0}
    watch.check(pg)
    context.close()


def read_then_save(pg, wb, report: str, key: str) -> dict:
    """Wait for the report, read it (the save guard), press one label key and Enter; the stored reading."""
    from workbench.core.reading import MIN_SECONDS_SHOWN

    wait_ready(pg, report)
    pg.wait_for_timeout(MIN_SECONDS_SHOWN * 1000)
    pg.keyboard.press(key)
    pg.keyboard.press("Enter")
    if pg.evaluate(FORM_STATE)["state"] != "saving":  # the form takes a save key at once, or never
        return saved(wb, report)
    pg.wait_for_function(
        f"(r) => {{ const s = ({FORM_STATE})(); return s && s.item !== r && s.state === 'ready'; }}",
        arg=report,
        timeout=TIMEOUT_MS,
    )
    return saved(wb, report)


def test_after_a_click_on_any_control_the_reading_keys_still_work(browser, edge_server, edge_study):
    from test_browser import settle

    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = reader_wb(edge_study)
    context, pg, watch = new_page(browser, edge_server)
    sign_in(pg, edge_server, *READER)
    open_by_keyboard(pg, "Annotate")
    first_label = wb.vocab.asked_ids[0]
    clicks = {
        "the work-list expander": lambda: pg.locator("summary", has_text="Work list").click(),
        "My readings": lambda: pg.get_by_text("My readings: review", exact=False).click(),
        "Reload data": lambda: pg.get_by_role("button", name="Reload data", exact=True).click(),
        "the sidebar link": lambda: pg.get_by_test_id("stSidebarNav").get_by_role("link", name="Annotate").click(),
    }
    lost = []
    for what, click in clicks.items():
        report = pg.evaluate(FORM_STATE)["item"]
        click()
        settle(pg)
        if read_then_save(pg, wb, report, LABEL_KEYS[0]).get(first_label) != 1:
            lost.append(what)
    assert lost == [], f"after a click on {lost}, the label key and Enter saved nothing"
    pg.screenshot(path=str(ARTIFACTS / "keys-after-clicks.png"))
    watch.check(pg)
    context.close()


def test_sign_out_in_one_tab_stops_the_other_tab_and_the_audit_has_every_sign_in(browser, edge_server, edge_study):
    from test_browser import settle
    from test_cross_site import signed_in_cookie

    from workbench.core.reading import MIN_SECONDS_SHOWN
    from workbench.services import Workbench
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = reader_wb(edge_study)
    context, first, watch = new_page(browser, edge_server)
    first.goto(edge_server)
    first.get_by_label("User", exact=True).fill(READER[0])
    first.get_by_label("Password", exact=True).fill("not-the-password-1")
    first.get_by_role("button", name="Sign in", exact=True).click()
    first.get_by_text("wrong password").wait_for()
    sign_in(first, edge_server, *READER)
    signed_in_cookie(context)
    second = context.new_page()
    second.set_default_timeout(TIMEOUT_MS)
    second.goto(edge_server + "/annotate")  # the same browser: the session cookie signs this tab in
    second.wait_for_function(f"() => {{ const s = ({FORM_STATE})(); return s && s.state === 'ready'; }}")
    report = second.evaluate(FORM_STATE)["item"]
    first.get_by_role("button", name="Sign out", exact=True).click()
    first.get_by_label("User", exact=True).wait_for()
    second.wait_for_timeout(MIN_SECONDS_SHOWN * 1000)  # the reader has read the report
    second.keyboard.press(LABEL_KEYS[0])
    second.keyboard.press("Enter")
    second.get_by_label("User", exact=True).wait_for()  # the next message of the ended session: the sign-in form
    settle(second)
    assert second.get_by_text("session has ended").count() >= 1
    assert saved(wb, report) == {}, "a tab of a signed-out session saved a reading"
    log = Workbench(edge_study).audit_log(entity="session")
    mine = log[log["entity_key"] == READER[0]]
    assert {"sign_in_failed", "sign_in", "sign_out"} <= set(mine["action"])
    assert "loopback (this machine)" in mine["new"].to_json() and "not-the-password" not in log.to_json()
    context.close()


def test_a_save_from_a_stale_window_is_refused_and_shows_both_versions(browser, edge_server, edge_study):
    from test_cross_site import signed_in_cookie

    from workbench.core.reading import MIN_SECONDS_SHOWN
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = reader_wb(edge_study)
    asked, names = wb.vocab.asked_ids, wb.vocab.names()
    context, first, watch = new_page(browser, edge_server)
    sign_in(first, edge_server, *READER)
    signed_in_cookie(context)
    open_by_keyboard(first, "Annotate")
    report = first.evaluate(FORM_STATE)["item"]
    second = context.new_page()
    second.set_default_timeout(TIMEOUT_MS)
    second.goto(f"{edge_server}/annotate?report={report}")  # the same report in a second window
    wait_ready(second, report)
    wait_ready(first, report)
    first.wait_for_timeout(MIN_SECONDS_SHOWN * 1000)  # both windows have had it on screen long enough
    first.keyboard.press(LABEL_KEYS[0])
    first.keyboard.press("Enter")
    first.wait_for_function(f"(r) => ({FORM_STATE})().item !== r", arg=report)
    assert saved(wb, report)[asked[0]] == 1
    second.keyboard.press(LABEL_KEYS[1])  # the stale copy: label 2 instead of label 1
    second.keyboard.press("Enter")
    second.wait_for_function(f"() => ({STATUS})().startsWith('Not saved')")
    message = second.evaluate(STATUS)
    assert "another window" in message and f"{names[asked[0]]}: saved 1, yours 0" in message, message
    assert f"{names[asked[1]]}: saved 0, yours 1" in message, message
    assert saved(wb, report)[asked[0]] == 1 and saved(wb, report)[asked[1]] == 0, "the earlier save stands"
    wait_ready(second, report)
    second.wait_for_timeout(MIN_SECONDS_SHOWN * 1000)
    second.keyboard.press("Enter")  # the reader chooses theirs: saved over it
    second.wait_for_function(f"(r) => ({FORM_STATE})().item !== r", arg=report)
    assert saved(wb, report)[asked[0]] == 0 and saved(wb, report)[asked[1]] == 1
    context.close()


def test_the_guidelines_open_in_view(browser, edge_server):
    for width, height in ((1440, 900), (1280, 800)):
        context = browser.new_context(viewport={"width": width, "height": height})
        pg = context.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        sign_in(pg, edge_server, *READER)
        open_by_keyboard(pg, "Annotate")
        pg.wait_for_function(f"() => {{ const s = ({FORM_STATE})(); return s && s.state === 'ready'; }}")
        pg.keyboard.press("?")
        box = pg.get_by_test_id("wbGuidelines").bounding_box()
        assert box and box["height"] > 0 and box["y"] >= 0 and box["y"] + min(box["height"], 200) <= height, (
            f"the guidelines open at y = {box and box['y']:.0f} px on a {height} px screen"
        )
        context.close()
