"""The Label set page's keyboard review in a real browser: a approves, j moves on, x rejects, k goes back;
each vote is checked where it is stored (the study's database), never on a toast."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_browser import TIMEOUT_MS, browser, serve, settle, until  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Chromium at /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def mined_study(demo_template, tmp_path_factory) -> Path:
    """A copy of the demo study with its dev cohort mined into the label set 'dev'."""
    from workbench.services import Workbench

    root = tmp_path_factory.mktemp("labelset-browser") / "demo"
    shutil.copytree(demo_template, root)
    wb = Workbench(root)
    wb.mine_labelset("dev")
    wb.engine.dispose()
    return root


def test_review_with_the_keyboard_alone(browser, mined_study):  # noqa: F811
    from workbench.services import Workbench

    wb = Workbench(mined_study)
    first, second = (c["key"] for c in wb.labelset_candidates("dev")[:2])
    server = serve(mined_study)
    base = next(server)
    try:
        pg = browser.new_page(viewport={"width": 1400, "height": 2000})
        pg.set_default_timeout(TIMEOUT_MS)
        pg.goto(f"{base}/labelset")
        pg.get_by_role("heading", name="Label set", exact=True).wait_for()
        settle(pg)
        pg.get_by_role("heading", name="Label set", exact=True).click()  # the page, not an input, has the focus
        pg.keyboard.press("a")
        until(pg, lambda: wb.candidate_votes("dev", first) == {"local": ("approve", "")}, "approve by key")
        settle(pg)
        pg.get_by_text("votes: local: approve").first.wait_for()  # unblinded once voted
        pg.keyboard.press("j")
        settle(pg)
        pg.get_by_text("2 / ").first.wait_for()
        pg.keyboard.press("x")
        until(pg, lambda: wb.candidate_votes("dev", second) == {"local": ("reject", "")}, "reject by key")
        settle(pg)
        pg.keyboard.press("k")
        settle(pg)
        pg.get_by_text("1 / ").first.wait_for()
        pg.close()
    finally:
        server.close()
