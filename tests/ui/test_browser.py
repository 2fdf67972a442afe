"""The whole loop in a real browser: the Streamlit server on a copy of the demo study, Chromium
through Playwright. Screenshots of every step go to test-artifacts/browser/ (git-ignored).

annotate -> open a disagreement -> error note -> few-shot example -> save the prompt ->
run the offline labeller -> see the change in the comparison -> freeze and download a bundle.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
TIMEOUT_MS = 120_000  # a condition wait: it only runs this long when something is wrong (CI may be loaded)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Chromium at /usr/bin/chromium (apt-get install -y chromium chromium-driver)",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def study(demo_template, tmp_path_factory) -> Path:
    """A fresh copy of the demo study for the server."""
    root = tmp_path_factory.mktemp("browser") / "demo"
    shutil.copytree(demo_template, root)
    config = root / "workbench.yaml"  # the whole loop at a machine's pace: no save guard
    config.write_text(config.read_text() + "reading:\n  min_seconds_shown: 0\n")
    return root


@pytest.fixture(scope="module")
def server(study):
    """`streamlit run` on the app with WORKBENCH_STUDY set; yields the base URL."""
    yield from serve(study)


def serve(study: Path):
    """Run the app on a study until the generator is closed; yields its base URL."""
    port = _free_port()
    env = {**os.environ, "WORKBENCH_STUDY": str(study), "LITELLM_OFFLINE_MODE": "true"}
    from workbench.cli import app_command

    cmd = app_command(port, "127.0.0.1", "--server.fileWatcherType=none")  # what `workbench app` runs
    log = open(study.parent / "streamlit.log", "wb")  # noqa: SIM115 (open while the server runs; closed below)
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
def page(server, browser):
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    pg = browser.new_page(viewport={"width": 1400, "height": 2000}, accept_downloads=True)
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(server)
    yield pg
    pg.close()


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module (Playwright's sync API allows one driver at a time)."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def settle(pg) -> None:
    """Wait until the script run has finished (Streamlit shows a status widget while running)."""
    pg.wait_for_timeout(300)  # a click's rerun request reaches the server (the page shows no sign of it before)
    pg.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(timeout=TIMEOUT_MS)
    pg.locator('[data-testid="stStatusWidget"]').wait_for(state="detached", timeout=TIMEOUT_MS)
    pg.wait_for_function("document.querySelectorAll('[data-stale=\"true\"]').length === 0", timeout=TIMEOUT_MS)
    assert pg.locator('[data-testid="stException"]').count() == 0, pg.locator(
        '[data-testid="stException"]'
    ).first.inner_text()


def shot(pg, name: str) -> None:
    settle(pg)
    # the last deltas are painted after the status widget goes: two animation frames later they are
    pg.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
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


def keyed_button(pg, label: str):
    """A button by its label; buttons with a keyboard shortcut also show the key after the label."""
    import re

    return pg.get_by_role("button", name=re.compile("^" + re.escape(label) + r"(\s|$)")).first


def chip(pg, label: str):
    """A chip of a keyboard form (inside its shadow root) by its label."""
    return pg.locator(".wbk-chip", has=pg.locator(".wbk-label", has_text=label)).first


def see(pg, text: str) -> None:
    pg.get_by_text(text).first.wait_for()


def until(pg, condition, what: str) -> None:
    """Poll a condition on the stored study (a save's honest outcome: a toast saying so lasts 4 s and a loaded
    machine may not paint it in time) while the page keeps running."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while not condition():
        if time.monotonic() > deadline:
            pg.screenshot(path=str(ARTIFACTS / f"not-{what.replace(' ', '-')}.png"))
            raise AssertionError(f"{what}: not stored after {TIMEOUT_MS / 1000:.0f} s")
        pg.wait_for_timeout(250)


def form_moves_on(pg, item: str) -> None:
    """The keyboard form shows another item than this one and waits for no answer."""
    pg.locator(f".wbk[data-state=ready]:not([data-item='{item}'])").wait_for()


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
    see(pg, "dr-browser: 0 of 180 read")
    chip(pg, "Pleural Effusion").click()
    settle(pg)
    shot(pg, "02-annotate")
    pg.locator(".wbk-btn[data-kind=save]").click()
    until(pg, lambda: len(wb.my_readings("dr-browser", "demo-001")) == 20, "the reading of demo-001")
    form_moves_on(pg, "demo-001")
    assert wb.my_readings("dr-browser", "demo-001").set_index("label")["value"].astype(int).sum() == 1
    shot(pg, "03-annotate-saved")

    # open the first Lung Opacity disagreement, make it a few-shot example, write an error note
    goto(pg, "Disagreements")
    label = "lung_opacity"
    choose(pg, "Label", "Lung Opacity")
    report = wb.disagreements(int(wb.runs().iloc[0]["id"]), label).iloc[0]["report_id"]
    see(pg, "Case 1 of")
    see(pg, f"{report} · Lung Opacity")
    pg.locator(".wb-report").wait_for()
    shot(pg, "04-disagreement")
    pg.get_by_role("button", name="Add as few-shot example", exact=True).click()
    see(pg, f"Added {report} to your draft of {label}")
    assert wb.draft(label)[2]
    shot(pg, "05-example-added")
    chip(pg, "synonym or abbreviation").click()
    chip(pg, "does not change management").click()
    pg.get_by_role("textbox", name="Note (optional)").fill("collapse of a lobe is an opacity")
    pg.locator(".wbk-btn[data-kind=save]").click()
    until(pg, lambda: len(wb.notes(label, report)) == 1, f"the note on {report}")
    form_moves_on(pg, f"{report}|{label}")
    note = wb.notes(label, report).iloc[0]
    assert (note["category"], note["significance"], note["text"]) == (
        "synonym or abbreviation",
        "does not change management",
        "collapse of a lobe is an opacity",
    )
    shot(pg, "06-note-saved")

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
    pg.get_by_label("Message (what changed and why)", exact=True).fill(
        f"{label}: lobar collapse; example from {report}"
    )
    shot(pg, "07-prompt-draft")
    pg.get_by_role("button", name="Save version", exact=True).click()
    # the condition is the commit itself (the page's message is a passing flash a loaded machine can miss)
    until(pg, lambda: len(wb.prompt_history()) >= versions + 1, "the prompt version")
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
    change = cmp.macro_f1_b - cmp.macro_f1_a
    assert change > 0 and cmp.table.loc[label, "c"] > 0  # 'collapse' fixed some missed opacities
    see(pg, f"{change:+.3f} from run {newest[1]}")
    see(pg, f"{int((cmp.cases['change'] == 'fixed').sum())} fixed")
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
    assert (
        json.loads(saved.read_text())["sha256"]
        == json.loads((study / "bundles" / "browser-v1.json").read_text())["sha256"]
    )
    shot(pg, "11-frozen")


def test_report_markup_is_not_rendered_in_the_browser(page, study, tmp_path):
    """A report with a script tag and Markdown shows as text; the script never runs."""
    import pandas as pd

    from workbench.services import Workbench

    wb = Workbench(study)
    evil = "<script>window.__pwned = 1</script> **bold** <img src=x onerror=window.__pwned=2>"
    pd.DataFrame({"id": ["evil-1"], "findings": [evil], "impression": ["Normal."]}).to_csv(
        tmp_path / "evil.csv", index=False
    )
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


# ---------------------------------------------------------------- the reading room, keyboard first

INJECT = "![x](http://127.0.0.2/x.png) **bold**"
# counts every pointer event from the moment a document starts: the keyboard walks assert it stays 0
# (a click that Enter on a focused link fires has detail 0: only a real pointer click has detail > 0)
MOUSE_SPY = """
window.__mouse = 0;
for (const kind of ['mousedown', 'mouseup', 'click', 'pointerdown', 'dblclick', 'contextmenu', 'wheel']) {
  document.addEventListener(kind, (e) => {
    if (e.isTrusted && (kind !== 'click' || e.detail > 0)) window.__mouse += 1;
  }, true);
}
"""


@pytest.fixture(scope="module")
def team_study(demo_template, tmp_path_factory) -> Path:
    """The demo study with sign-in: an admin and a reader; one commit message tries Markdown injection."""
    from workbench.services import Workbench

    root = tmp_path_factory.mktemp("keyboard") / "demo"
    shutil.copytree(demo_template, root)
    wb = Workbench(root)
    wb.add_user("boss", "admin", "boss-password-1")
    wb.add_user("dr-kbd", "reader", "reader-password-1")
    lp = wb.label_prompt("edema")
    wb.save_prompts([lp.__class__(**{**lp.__dict__, "definition": lp.definition + " "})], INJECT, wb.prompt_commit())
    config = root / "workbench.yaml"
    # keys at a machine's pace: Enter at once on a report that just appeared (the save guard is tested in
    # test_reading_edges.py)
    config.write_text(config.read_text().replace("auth: none", "auth: local") + "reading:\n  min_seconds_shown: 0\n")
    wb.engine.dispose()
    return root


@pytest.fixture(scope="module")
def team_server(team_study):
    yield from serve(team_study)


class Watch:
    """What a browser page did: hosts it asked, console errors, pointer events."""

    def __init__(self, pg, base: str):
        self.base_host = base.split("/")[2]
        self.hosts: set[str] = set()
        self.errors: list[str] = []
        pg.on("request", lambda r: self.hosts.add(r.url.split("/")[2] if "://" in r.url else r.url.split(":")[0]))
        pg.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: self.errors.append(str(e)))

    def check(self, pg) -> None:
        """Only the app's own host was asked (data: URLs aside), nothing logged an error."""
        assert self.hosts <= {self.base_host, "data"}, self.hosts
        assert not self.errors, self.errors


def sign_in(pg, base: str, user: str, password: str) -> None:
    """Open the app and sign in with the keyboard (focus is given to the first field, no mouse)."""
    pg.goto(base)
    field = pg.get_by_label("User", exact=True)
    field.wait_for()
    settle(pg)  # the form is drawn and idle: keys typed now reach it
    field.focus()
    pg.keyboard.type(user)
    pg.keyboard.press("Tab")
    pg.keyboard.type(password)
    pg.keyboard.press("Enter")
    try:  # a reader lands on Annotate, everyone else on Home
        pg.get_by_role("heading", name=re.compile(r"^(Study: demo|Annotate)$")).first.wait_for()
    except Exception:
        pg.screenshot(path=str(ARTIFACTS / f"sign-in-failed-{user}.png"))
        raise
    settle(pg)


def open_by_keyboard(pg, title: str) -> None:
    """Open a page from the sidebar with the keyboard: focus its link, press Enter (nothing when already there:
    a reader lands on Annotate, and the focus left on its link would take the next Enter)."""
    if pg.get_by_role("heading", name=title, exact=True).count():
        settle(pg)
        return
    pg.get_by_test_id("stSidebarNav").get_by_role("link", name=title).focus()
    pg.keyboard.press("Enter")
    pg.get_by_role("heading", name=title, exact=True).wait_for()
    settle(pg)


def heading(pg) -> str:
    """The item the keyboard form shows (the report id on Annotate)."""
    return pg.locator(".wbk").first.get_attribute("data-item")


def new_page(browser, base: str):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.add_init_script(MOUSE_SPY)
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    return context, pg, Watch(pg, base)


def test_reader_annotates_five_reports_with_the_keyboard_alone(browser, team_server, team_study):
    from workbench.services import Actor, Workbench
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = Workbench(team_study).as_actor(Actor("dr-kbd", "reader"))
    asked = wb.vocab.asked_ids
    context, pg, watch = new_page(browser, team_server)
    sign_in(pg, team_server, "dr-kbd", "reader-password-1")
    assert pg.locator("img[src*='127.0.0.2']").count() == 0 and pg.locator("strong", has_text="bold").count() == 0
    open_by_keyboard(pg, "Annotate")
    plans = [[0, 3], [], [7], [1, 2, 12], [19]]  # label positions to tick on each report
    presses = []
    for ticks in plans:
        report = heading(pg)
        count = 0
        for i in ticks:
            pg.keyboard.press(LABEL_KEYS[i])
            count += 1
            settle(pg)
        pg.keyboard.press("Enter")
        count += 1
        pg.locator(f".wbk[data-state=ready]:not([data-item='{report}'])").wait_for()
        settle(pg)
        presses.append(count)
        saved = wb.my_readings("dr-kbd", report).set_index("label")["value"].to_dict()
        assert saved == {lab: int(j in ticks) for j, lab in enumerate(asked)}, report
    assert all(n <= len(t) + 2 for n, t in zip(presses, plans, strict=False)), presses
    shot(pg, "20-keyboard-annotate")
    # mid-report: tick two, leave the app (a new session), come back: the ticks are there
    report = heading(pg)
    pg.keyboard.press(LABEL_KEYS[4])
    settle(pg)
    pg.keyboard.press(LABEL_KEYS[5])
    settle(pg)
    assert pg.evaluate("window.__mouse") == 0, "no mouse event after the page loaded"
    pg.goto(team_server)  # a new Streamlit session: the browser-session cookie signs the reader in again
    pg.get_by_role("heading", name="Annotate", exact=True).wait_for()  # a reader's first page
    settle(pg)
    open_by_keyboard(pg, "Annotate")
    assert heading(pg) == report
    pg.locator(f".wbk-chip.on[data-option='{asked[4]}']").wait_for()
    assert pg.locator(f".wbk-chip.on[data-option='{asked[5]}']").count() == 1
    assert wb.reading_draft("dr-kbd", report) == {lab: int(j in (4, 5)) for j, lab in enumerate(asked)}
    assert len(wb.my_readings("dr-kbd", report)) == 0, "a draft is not a reading"
    assert pg.evaluate("window.__mouse") == 0, "no mouse event after the page loaded"
    watch.check(pg)
    context.close()


def test_triage_five_disagreements_with_the_keyboard_then_open_one_by_click(browser, team_server, team_study):
    from workbench.services import Workbench

    wb = Workbench(team_study)
    before = len(wb.notes())
    context, pg, watch = new_page(browser, team_server)
    sign_in(pg, team_server, "boss", "boss-password-1")
    open_by_keyboard(pg, "Disagreements")
    case = pg.locator("text=/^Case \\d+ of \\d+/").first
    for _ in range(5):
        shown = case.inner_text()
        for key in ("3", "n", "Enter"):
            pg.keyboard.press(key)
            settle(pg)
        pg.locator(".wbk[data-state=ready]", has_not_text=shown).wait_for()
        settle(pg)
    notes = wb.notes()
    assert len(notes) == before + 5
    assert set(notes["category"].iloc[-5:]) == {"synonym or abbreviation"}
    assert set(notes["significance"].iloc[-5:]) == {"does not change management"}
    assert pg.evaluate("window.__mouse") == 0, "triaged with the keyboard alone"
    shot(pg, "21-keyboard-triage")
    # a click on a queue row opens that case
    queue, _ = wb.disagreement_queue(int(wb.runs().iloc[0]["id"]))
    grid = pg.get_by_test_id("stDataFrame").first
    box = grid.bounding_box()
    row = 7
    pg.mouse.click(box["x"] + 18, box["y"] + 35 * (row + 1) + 17)  # header row, then 35 px per row
    settle(pg)
    see(pg, f"Case {row + 1} of {len(queue)}")
    see(pg, f"{queue['report_id'].iloc[row]} · {wb.vocab.names()[queue['label'].iloc[row]]}")
    assert pg.evaluate("window.__mouse") > 0, "the spy does see a real click"
    shot(pg, "22-row-click")
    watch.check(pg)
    context.close()
