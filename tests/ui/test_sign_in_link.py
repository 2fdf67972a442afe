"""Sign-in from a deep link (issue 32, item 8): the reader lands on the page and item of the link, at its own
address, and a reload right after the sign-in keeps the session; a reader with nothing else to do lands on
Annotate, not on Home; and a tab never changes user without saying so (item 7)."""

from __future__ import annotations

from urllib.parse import parse_qs, quote, urlparse

import pytest
from test_browser import ARTIFACTS, CHROMIUM, TIMEOUT_MS, browser, serve, settle, sign_in  # noqa: F401
from test_reading_keyboard import BOSS, READER, new_page, signed_in_demo  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def link_study(demo_template, tmp_path_factory):
    return signed_in_demo(demo_template, tmp_path_factory)


@pytest.fixture(scope="module")
def link_server(link_study):
    yield from serve(link_study)


def sign_in_from(pg, url: str, user: str, password: str) -> None:
    """Open a link signed out, and sign in on the form it shows (the shared sign_in waits for Home)."""
    pg.goto(url)
    field = pg.get_by_label("User", exact=True)
    field.wait_for()
    settle(pg)
    field.fill(user)
    pg.get_by_label("Password", exact=True).fill(password)
    pg.keyboard.press("Enter")


def on_page(pg, title: str) -> None:
    """Wait for a page's heading (a screenshot when it does not come)."""
    try:
        pg.get_by_role("heading", name=title, exact=True).wait_for()
    except Exception:
        pg.screenshot(path=str(ARTIFACTS / f"link-not-{title}.png"))
        raise


def has_session_cookie(context) -> bool:
    """Whether the browser holds the study's session cookie yet (it comes after the sign-in's page)."""
    return any(c["name"].startswith("wb_session_") for c in context.cookies())


def wait_for_session_cookie(pg, context) -> None:
    """Wait (on the condition, not a fixed time) until the session cookie has arrived."""
    for _ in range(TIMEOUT_MS // 250):  # polled: Playwright has no wait for a cookie
        if has_session_cookie(context):
            return
        pg.wait_for_timeout(250)
    raise AssertionError("the session cookie never arrived")


def test_a_reader_with_nothing_else_to_do_lands_on_annotate(browser, link_server):
    context, pg, _ = new_page(browser, link_server)
    try:
        sign_in_from(pg, link_server, *READER)
        on_page(pg, "Annotate")  # not Home
    finally:
        context.close()


def test_a_signed_in_readers_link_to_annotate_keeps_its_address(browser, link_server, link_study):
    from workbench.services import Workbench

    wb = Workbench(link_study)
    report = wb.work_list(READER[0], "dev")["report_id"].iloc[4]
    wb.engine.dispose()
    context, pg, watch = new_page(browser, link_server)
    try:
        sign_in_from(pg, link_server, *READER)
        on_page(pg, "Annotate")  # a reader still lands on Annotate, now at its own address
        assert urlparse(pg.url).path == "/annotate", pg.url
        wait_for_session_cookie(pg, context)
        pg.goto(f"{link_server}/annotate?report={report}")  # a link, signed in: Annotate is no longer "not found"
        on_page(pg, "Annotate")
        pg.locator(f".wbk[data-item='{report}']").wait_for()
        settle(pg)
        address = urlparse(pg.url)
        assert address.path == "/annotate" and parse_qs(address.query).get("report") == [report], pg.url
        pg.get_by_test_id("stSidebarNav").get_by_role("link", name="Home", exact=True).click()
        on_page(pg, "Study: demo")  # Home stays Home: the start page opens once
        settle(pg)
        assert urlparse(pg.url).path == "/", pg.url
        watch.check(pg)
    finally:
        context.close()


def test_a_reload_at_once_after_sign_in_keeps_the_session(browser, link_server):
    context, pg, _ = new_page(browser, link_server)
    try:
        sign_in_from(pg, link_server, *READER)
        on_page(pg, "Annotate")
        pg.reload()  # at once: the session cookie must already be there
        on_page(pg, "Annotate")
    finally:
        context.close()


def test_the_app_opens_only_once_the_browser_holds_the_session(browser, link_server):
    """A slow answer to the cookie's request (a loaded server) must not open the app before the cookie is
    there: a reload in that gap lost the session (it was a race, won or lost by the machine's load)."""
    context, pg, _ = new_page(browser, link_server)
    held = []
    context.route("**/_wb/session", lambda route: held.append(route))  # the answer waits until released
    try:
        sign_in_from(pg, link_server, *READER)
        waiting = pg.get_by_role("heading", name="Signing in", exact=True)
        opened = pg.get_by_role("heading", name="Annotate", exact=True)
        waiting.or_(opened).first.wait_for(timeout=TIMEOUT_MS)
        for _ in range(TIMEOUT_MS // 250):  # until the page has asked for its cookie
            if held:
                break
            pg.wait_for_timeout(250)
        assert held, "the page never asked the server for its session cookie"
        assert not opened.is_visible() and not has_session_cookie(context), "the app opened without the cookie"
        held[0].continue_()
        on_page(pg, "Annotate")
        assert has_session_cookie(context)
        pg.reload()
        on_page(pg, "Annotate")
    finally:
        context.close()


def test_a_disagreements_link_opens_its_case_after_sign_in_and_a_reload_keeps_it(browser, link_server, link_study):
    from workbench.services import Workbench

    wb = Workbench(link_study)
    run_id = int(wb.runs("dev").iloc[0]["id"])
    queue = wb.disagreements(run_id)
    case = f"{queue['report_id'].iloc[3]}|{queue['label'].iloc[3]}"  # not the first case: the link's own
    wb.engine.dispose()
    context, pg, _ = new_page(browser, link_server)
    try:
        sign_in_from(pg, f"{link_server}/disagreements?run={run_id}&case={quote(case)}", *BOSS)
        on_page(pg, "Disagreements")
        pg.locator(f".wbk[data-item='{case}']").wait_for()  # the form shows the link's case
        settle(pg)
        address = urlparse(pg.url)
        assert address.path == "/disagreements" and parse_qs(address.query).get("case") == [case], pg.url
        wait_for_session_cookie(pg, context)
        pg.reload()  # the link's page and item, not Home
        on_page(pg, "Disagreements")
        pg.locator(f".wbk[data-item='{case}']").wait_for(timeout=TIMEOUT_MS)
    finally:
        context.close()


# ---------------------------------------------------------------- a tab never changes user silently (item 7)


def acting_as(pg, user: str) -> None:
    """Wait until the sidebar says who is acting."""
    pg.get_by_text(f"Acting as {user}").first.wait_for(timeout=TIMEOUT_MS)


def test_a_reloaded_tab_that_became_another_user_says_so(browser, link_server):
    context, first, _ = new_page(browser, link_server)
    try:
        sign_in(first, link_server, *READER)
        acting_as(first, READER[0])
        first.reload()  # the same user after a reload: nothing to say
        acting_as(first, READER[0])
        settle(first)
        assert first.get_by_text("This tab was signed in as").count() == 0
        second = context.new_page()
        second.set_default_timeout(TIMEOUT_MS)
        second.goto(link_server)
        acting_as(second, READER[0])  # the browser's cookie signs the new tab in
        settle(second)  # idle: a click during a rerun may be taken by the rerun's new page
        second.get_by_role("button", name="Sign out", exact=True).click()
        second.get_by_label("User", exact=True).wait_for(timeout=TIMEOUT_MS)  # signed out
        sign_in(second, link_server, *BOSS)  # typed in that tab: no surprise there
        acting_as(second, BOSS[0])
        settle(second)
        assert second.get_by_text("This tab was signed in as").count() == 0
        first.reload()  # the first tab now resumes with the boss's cookie
        acting_as(first, BOSS[0])
        notice = first.get_by_text(f"This tab was signed in as {READER[0]}")
        notice.wait_for(timeout=TIMEOUT_MS)
        assert BOSS[0] in notice.inner_text()
    finally:
        context.close()
