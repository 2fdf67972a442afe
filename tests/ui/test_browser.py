"""The whole loop in a real browser: the Streamlit server on a copy of the demo study, Chromium
through Playwright. Screenshots of every step go to test-artifacts/browser/ (git-ignored).

annotate -> open a disagreement -> error note -> few-shot example -> save the prompt ->
run the offline labeller -> see the change in the comparison -> freeze and download a bundle.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
TIMEOUT_MS = 60_000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium "
                       "(apt-get install -y chromium chromium-driver)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A fresh demo study for the server."""
    from workbench.demo import create_demo

    root = tmp_path_factory.mktemp("browser") / "demo"
    create_demo(root, echo=lambda _m: None).engine.dispose()
    return root


@pytest.fixture(scope="module")
def server(study):
    """`streamlit run` on the app with WORKBENCH_STUDY set; yields the base URL."""
    port = _free_port()
    env = {**os.environ, "WORKBENCH_STUDY": str(study), "LITELLM_OFFLINE_MODE": "true"}
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "workbench" / "ui" / "app.py"),
           "--server.headless=true", "--server.address=127.0.0.1", f"--server.port={port}",
           "--browser.gatherUsageStats=false", "--server.fileWatcherType=none"]
    log = open(study.parent / "streamlit.log", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start: {(study.parent / 'streamlit.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 2000}, accept_downloads=True)
        pg.set_default_timeout(TIMEOUT_MS)
        pg.goto(server)
        yield pg
        browser.close()


def settle(pg) -> None:
    """Wait until the script run has finished (Streamlit shows a status widget while running)."""
    pg.wait_for_timeout(300)
    pg.locator('[data-testid="stStatusWidget"]').wait_for(state="detached", timeout=TIMEOUT_MS)
    pg.wait_for_function("document.querySelectorAll('[data-stale=\"true\"]').length === 0", timeout=TIMEOUT_MS)
    assert pg.locator('[data-testid="stException"]').count() == 0, pg.locator('[data-testid="stException"]').first.inner_text()


def shot(pg, name: str) -> None:
    settle(pg)
    pg.wait_for_timeout(700)  # the last deltas are painted after the status widget goes
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def goto(pg, title: str) -> None:
    """Open a page from the sidebar navigation and wait for its heading."""
    pg.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True).click()
    heading = "Audit log" if title == "Audit" else title
    pg.get_by_role("heading", name=heading, exact=True).wait_for()
    settle(pg)


def choose(pg, label: str, option: str) -> None:
    """Pick an option in a Streamlit selectbox by its label."""
    box = pg.get_by_label(label, exact=True)
    box.click()
    pg.get_by_role("option", name=option, exact=True).click()
    settle(pg)


def see(pg, text: str) -> None:
    pg.get_by_text(text).first.wait_for()


def test_the_whole_loop(page, study):
    from workbench.services import Workbench

    wb = Workbench(study)
    pg = page
    pg.get_by_role("heading", name="Study: demo", exact=True).wait_for()
    see(pg, "rule-based baseline, not an LLM")
    shot(pg, "01-home")

    # annotate one report as a new reader
    goto(pg, "Annotate")
    pg.get_by_label("... or a new reader name", exact=True).fill("dr-browser")
    pg.keyboard.press("Enter")
    see(pg, "dr-browser: 0 of 180 reports complete")
    pg.get_by_text("Pleural Effusion", exact=True).click()
    shot(pg, "02-annotate")
    pg.get_by_role("button", name="Save and next", exact=True).click()
    see(pg, "Saved demo-001 for dr-browser")
    assert len(wb.my_readings("dr-browser", "demo-001")) == 20
    shot(pg, "03-annotate-saved")

    # open the first Lung Opacity disagreement and write an error note
    goto(pg, "Disagreements")
    label = "lung_opacity"
    choose(pg, "Label", "Lung Opacity")
    report = wb.disagreements(int(wb.runs().iloc[0]["id"]), label).iloc[0]["report_id"]
    see(pg, f"{report}: Lung Opacity")
    pg.locator(".wb-report").wait_for()
    shot(pg, "04-disagreement")
    choose(pg, "What went wrong", "synonym or abbreviation")
    pg.get_by_text("does not change management", exact=True).click()
    pg.get_by_label("Note", exact=True).fill("collapse of a lobe is an opacity")
    pg.get_by_role("button", name="Save note", exact=True).click()
    see(pg, f"Note saved on {report} / {label}")
    assert len(wb.notes(label, report)) == 1
    shot(pg, "05-note-saved")

    # one click: the case becomes a few-shot example in the draft
    pg.get_by_role("button", name="Add as few-shot example", exact=True).click()
    see(pg, f"Added {report} to your draft of {label}")
    assert wb.draft(label)[2]
    shot(pg, "06-example-added")

    # save the prompt as a new version
    versions = len(wb.prompt_history())
    goto(pg, "Prompts")
    choose(pg, "Label", wb.vocab.names()[label])
    see(pg, "Your draft")
    look_for = pg.get_by_label("Look for (one phrase per line)", exact=True)
    look_for.fill(look_for.input_value() + "\ncollapse")
    pg.get_by_role("button", name="Save draft", exact=True).click()
    see(pg, f"Draft of {label} saved")
    assert "collapse" in wb.draft(label)[0].look_for
    pg.get_by_label("Message (what changed and why)", exact=True).fill(f"{label}: lobar collapse; example from {report}")
    shot(pg, "07-prompt-draft")
    pg.get_by_role("button", name="Save version", exact=True).click()
    see(pg, "Saved version")
    assert len(wb.prompt_history()) == versions + 1
    shot(pg, "08-prompt-saved")

    # run the offline labeller with the new version (progress bar, then the result)
    goto(pg, "Runs")
    runs_before = len(wb.runs())
    pg.get_by_role("button", name="Start run", exact=True).click()
    pg.get_by_text("finished:").first.wait_for(timeout=180_000)
    assert len(wb.runs()) == runs_before + 1
    shot(pg, "09-run-finished")

    # the comparison shows the change
    pg.get_by_role("tab", name="Compare two runs", exact=True).click()
    settle(pg)
    newest = wb.runs()["id"].tolist()
    cmp = wb.compare_runs(newest[1], newest[0])
    change = cmp["macro_f1_b"] - cmp["macro_f1_a"]
    assert change > 0 and cmp["table"].loc[label, "c"] > 0  # 'collapse' fixed some missed opacities
    see(pg, f"{change:+.3f} from run {newest[1]}")
    see(pg, f"{int((cmp['cases']['change'] == 'fixed').sum())} fixed")
    shot(pg, "10-comparison")

    # freeze the version into a bundle and download it
    goto(pg, "Freeze and score")
    pg.get_by_label("Bundle name", exact=True).fill("browser-v1")
    pg.get_by_role("button", name="Freeze", exact=True).click()
    see(pg, "Frozen browser-v1")
    assert (study / "bundles" / "browser-v1.json").exists()
    with pg.expect_download() as download:
        pg.get_by_role("button", name="Download browser-v1.json", exact=True).click()
    saved = ARTIFACTS / "browser-v1.json"
    download.value.save_as(saved)
    assert json.loads(saved.read_text())["sha256"] == json.loads((study / "bundles" / "browser-v1.json").read_text())["sha256"]
    shot(pg, "11-frozen")


def test_report_markup_is_not_rendered_in_the_browser(page, study, tmp_path):
    """A report with a script tag and Markdown shows as text; the script never runs."""
    import pandas as pd
    from workbench.services import Workbench

    wb = Workbench(study)
    evil = "<script>window.__pwned = 1</script> **bold** <img src=x onerror=window.__pwned=2>"
    pd.DataFrame({"id": ["evil-1"], "findings": [evil], "impression": ["Normal."]}).to_csv(tmp_path / "evil.csv", index=False)
    wb.import_reports(tmp_path / "evil.csv", "evil")
    pg = page
    pg.get_by_role("button", name="Reload data", exact=True).click()
    goto(pg, "Annotate")
    pg.get_by_label("... or a new reader name", exact=True).fill("dr-evil")
    pg.keyboard.press("Enter")
    settle(pg)
    choose(pg, "Cohort", "evil (1 reports)")
    see(pg, "**bold**")
    assert pg.evaluate("window.__pwned === undefined")
    assert pg.locator("strong", has_text="bold").count() == 0
    shot(pg, "12-markup-shown-as-text")
