"""Reading-room latency in a real browser at Ran Score scale: save -> next report, note -> next case.

Run alone: ``python bench/bench_reading.py [--path DIR] [--n 20]``. Uses the generated study of
bench_pages.py (3,000 reports x 6 readers x 21 labels, three runs; built once and reused from
DIR), copies it, turns on sign-in, and drives the app in headless Chromium with the keyboard:
a new reader ticks one label and presses Enter, n times; a prompt engineer picks a category and a
significance by key and presses Enter, n times. Prints the median and 95th percentile of the
seconds from the key press to the next report's text (or the next case) on screen.
Targets: median <= 0.5 s, p95 <= 1.0 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

MEDIAN_TARGET_S, P95_TARGET_S = 0.5, 1.0
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
READER, ENGINEER = ("bench-reader", "reader-password-1"), ("bench-engineer", "engineer-password-1")


def prepare(folder: Path, n_reports: int = 3000) -> Path:
    """A fresh copy of the generated study with sign-in on and two accounts."""
    from bench_pages import build_study
    from workbench.services import Workbench

    study = folder / "study"
    if not (study / "workbench.yaml").exists():
        print(f"building the study in {folder} ({n_reports:,} reports x 6 readers x 21 labels, 3 runs) ...")
        build_study(folder, n_reports=n_reports)
    work = folder / "reading"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(study, work)
    wb = Workbench(work)
    wb.migrate()  # a study built by an older workbench is brought up to date first
    wb.add_user("bench-admin", "admin", "admin-password-1")
    wb = wb.as_actor(wb.actor_for("bench-admin"))
    wb.add_user(READER[0], "reader", READER[1])
    wb.add_user(ENGINEER[0], "prompt_engineer", ENGINEER[1])
    wb.engine.dispose()
    config = work / "workbench.yaml"
    config.write_text(config.read_text().replace("auth: none", "auth: local"))
    return work


def serve(study: Path):
    """Start `streamlit run` on the study; returns (process, base URL) once healthy."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "WORKBENCH_STUDY": str(study), "PYTHONPATH": str(ROOT)}
    log = open(study.parent / "streamlit-reading.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "workbench" / "ui" / "app.py"),
                             "--server.headless=true", "--server.address=127.0.0.1", f"--server.port={port}",
                             "--browser.gatherUsageStats=false", "--server.fileWatcherType=none"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise RuntimeError("streamlit did not start")


def settle(pg) -> None:
    """The script run has finished and nothing on the page is stale (a key's rerun may start a moment later)."""
    pg.wait_for_timeout(300)
    pg.locator('[data-testid="stStatusWidget"]').wait_for(state="detached", timeout=120_000)
    pg.wait_for_function("document.querySelectorAll('[data-stale=\"true\"]').length === 0", timeout=120_000)


def sign_in(pg, base: str, user: str, password: str, page_title: str) -> None:
    """Sign in with the keyboard and open a page from the sidebar."""
    pg.goto(base)
    field = pg.get_by_label("User", exact=True)
    field.wait_for()
    settle(pg)
    field.focus()
    pg.keyboard.type(user)
    pg.keyboard.press("Tab")
    pg.keyboard.type(password)
    pg.keyboard.press("Enter")
    pg.get_by_role("heading", name="Study: bench", exact=True).wait_for()
    settle(pg)
    pg.get_by_test_id("stSidebarNav").get_by_role("link", name=page_title).focus()
    pg.keyboard.press("Enter")
    pg.get_by_role("heading", name=page_title, exact=True).wait_for()
    settle(pg)


def time_annotation(pg, texts: dict, n: int) -> list[float]:
    """Seconds from Enter (save) to the next report's id and text on screen, n times."""
    out = []
    for _ in range(n):
        current = pg.locator("h4").first.inner_text().strip()
        nxt = f"b{int(current[1:]) + 1:05d}"
        pg.keyboard.press("1")
        settle(pg)
        started = time.perf_counter()
        pg.keyboard.press("Enter")
        pg.wait_for_function(
            """([rid, text]) => {
                const h = document.querySelector('h4');
                if (!h || h.innerText.trim() !== rid) return false;
                return [...document.querySelectorAll('[data-testid="stText"]')].some(e => e.innerText.includes(text));
            }""", arg=[nxt, texts[nxt][:40]], timeout=120_000, polling="raf")
        out.append(time.perf_counter() - started)
        settle(pg)
    return out


def time_triage(pg, n: int) -> list[float]:
    """Seconds from Enter (save note) to the next case's heading on screen, n times."""
    out = []
    for _ in range(n):
        shown = pg.locator("strong", has_text="Case ").first.inner_text()
        for key in ("1", "n"):
            pg.keyboard.press(key)
            settle(pg)
        assert pg.locator('button[kind="primary"]', has_text="does not change management").count() == 1, "N did not register"
        started = time.perf_counter()
        pg.keyboard.press("Enter")
        pg.wait_for_function(
            """(old) => {
                const fresh = (e) => !e.closest('[data-stale="true"]');
                const heading = [...document.querySelectorAll('strong')].some(
                    s => /^Case \\d+ of \\d+$/.test(s.innerText.trim()) && s.innerText.trim() !== old && fresh(s));
                const report = document.querySelector('.wb-report');
                return heading && report !== null && fresh(report);
            }""", arg=shown.strip(), timeout=120_000, polling="raf")
        out.append(time.perf_counter() - started)
        settle(pg)
    return out


def summary(name: str, times: list[float]) -> str:
    """One line: median and p95 against the targets."""
    ordered = sorted(times)
    median = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    ok = median <= MEDIAN_TARGET_S and p95 <= P95_TARGET_S
    return (f"{name:<34}{median:>9.3f}{p95:>9.3f}{max(ordered):>9.3f}   targets {MEDIAN_TARGET_S} / {P95_TARGET_S}  "
            f"{'ok' if ok else 'MISSED'}  (n={len(ordered)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="/tmp/workbench-bench-pages", help="where the generated study lives (reused)")
    parser.add_argument("--n", type=int, default=20, help="saves and notes to time")
    parser.add_argument("--reports", type=int, default=3000, help="reports in a newly built study (a smaller one only "
                        "checks that the script works; the figures are for 3,000)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from workbench.services import Workbench

    study = prepare(Path(args.path), args.reports)
    wb = Workbench(study)
    texts = {rid: wb.report_text(rid)["text"] for rid in [f"b{i:05d}" for i in range(args.n + 2)]}
    wb.engine.dispose()
    proc, url = serve(study)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            pg = browser.new_page(viewport={"width": 1440, "height": 900})
            pg.set_default_timeout(120_000)
            sign_in(pg, url, *READER, "Annotate")
            saves = time_annotation(pg, texts, args.n)
            pg = browser.new_page(viewport={"width": 1440, "height": 900})
            pg.set_default_timeout(120_000)
            sign_in(pg, url, *ENGINEER, "Disagreements")
            notes = time_triage(pg, args.n)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"\n{'seconds':<34}{'median':>9}{'p95':>9}{'max':>9}")
    print(summary("save -> next report text visible", saves))
    print(summary("save note -> next case visible", notes))


if __name__ == "__main__":
    main()
