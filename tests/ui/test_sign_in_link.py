"""Sign-in from a deep link (issue 32, item 8): the reader lands on the page and item of the link, at its own
address, and a reload right after the sign-in keeps the session; a reader with nothing else to do lands on
Annotate, not on Home."""

from __future__ import annotations

from urllib.parse import parse_qs, quote, urlparse

import pytest
from test_browser import ARTIFACTS, CHROMIUM, TIMEOUT_MS, browser, serve, settle  # noqa: F401
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
