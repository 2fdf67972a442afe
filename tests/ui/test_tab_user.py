"""A tab never changes user without saying so (issue 32 item 7): a tab reloaded after another tab of the same
browser signed in as someone else resumes with that cookie, and the page says whose it was and whose it is."""

from __future__ import annotations

import pytest
from test_browser import CHROMIUM, TIMEOUT_MS, browser, serve, settle, sign_in  # noqa: F401
from test_reading_keyboard import BOSS, READER, new_page, signed_in_demo  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def tab_study(demo_template, tmp_path_factory):
    return signed_in_demo(demo_template, tmp_path_factory)


@pytest.fixture(scope="module")
def tab_server(tab_study):
    yield from serve(tab_study)


def acting_as(pg, user: str) -> None:
    """Wait until the sidebar says who is acting."""
    pg.get_by_text(f"Acting as {user}").first.wait_for(timeout=TIMEOUT_MS)


def test_a_reloaded_tab_that_became_another_user_says_so(browser, tab_server):
    context, first, _ = new_page(browser, tab_server)
    try:
        sign_in(first, tab_server, *READER)
        acting_as(first, READER[0])
        first.reload()  # the same user after a reload: nothing to say
        acting_as(first, READER[0])
        settle(first)
        assert first.get_by_text("This tab was signed in as").count() == 0
        second = context.new_page()
        second.set_default_timeout(TIMEOUT_MS)
        second.goto(tab_server)
        acting_as(second, READER[0])  # the browser's cookie signs the new tab in
        second.get_by_role("button", name="Sign out", exact=True).click()
        sign_in(second, tab_server, *BOSS)  # typed in that tab: no surprise there
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
