"""Time every page of the app at Ran Score scale, and one annotation save through the form.

Run alone: ``python bench/bench_pages.py [--path DIR] [--rebuild]``. Builds (once; reused from
DIR on later runs) a generated study of 3,000 reports x 6 readers x 21 labels with three runs of
the offline labeller after small prompt edits, then runs each page's script through Streamlit's
AppTest: the first run of a fresh session on an empty read cache ("first") and a rerun ("warm").
Targets: under 1.5 s per page (warm) and under 0.3 s per annotation save.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PAGES = ["home", "annotate", "adjudicate", "disagreements", "prompts", "runs", "freeze", "settings", "audit"]
PAGE_TARGET_S, SAVE_TARGET_S = 1.5, 0.3
EDITS = [("pleural_effusion", "effusions"), ("atelectasis", "volume loss")]


def build_study(folder: Path, n_reports: int = 3000) -> Path:
    """The generated study with three runs that differ (prompt edits between them)."""
    from synthetic import write_study_inputs
    from workbench.services import init_study

    inputs = write_study_inputs(folder / "inputs", n_reports=n_reports)
    wb = init_study(folder / "study", vocab=str(inputs["vocab"]), prompt_set=str(inputs["prompts"]), name="bench")
    started = time.perf_counter()
    wb.import_reports(inputs["reports"], "dev")
    wb.import_readings(inputs["readings"])
    print(f"  imported {n_reports:,} reports and {inputs['n_readings']:,} readings in {time.perf_counter() - started:.1f} s")
    for i in range(3):
        if i:
            label, phrase = EDITS[i - 1]
            lp = wb.label_prompt(label)
            wb.save_prompts([dataclasses.replace(lp, look_for=lp.look_for + (phrase,))], f"bench edit {i}", wb.prompt_commit())
        started = time.perf_counter()
        summary = wb.start_run(cohort="dev")
        print(f"  run {summary.run_id}: {summary.calls_made:,} calls made, {summary.calls_reused:,} reused, "
              f"{time.perf_counter() - started:.1f} s")
    wb.engine.dispose()
    return folder / "study"


def app_script(study_path: str, start: str) -> None:
    """The app opened on one page (AppTest runs this function's body as the script)."""
    from workbench.ui import app

    app.main(study=study_path, start=start)


def timed_run(at) -> float:
    started = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - started
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return elapsed


def time_pages(study: Path) -> list[tuple[str, float, float]]:
    """(page, first run on an empty cache, warm rerun) for every page."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from workbench.ui import state

    warmup = AppTest.from_function(app_script, args=(str(study), "settings"), default_timeout=300)
    timed_run(warmup)  # imports and opening the study once, not charged to any page
    rows = []
    for page in PAGES:
        st.cache_data.clear()
        at = AppTest.from_function(app_script, args=(str(study), page), default_timeout=300)
        if page == "annotate":
            at.session_state[state.READER] = "reader-a"  # a reader with 3,000 reports read
        first = timed_run(at)
        warm = min(timed_run(at) for _ in range(3))
        rows.append((page, first, warm))
    return rows


def time_annotation_saves(study: Path, reader: str | None, n: int = 5) -> list[float]:
    """Seconds from clicking 'Save and next' to the page shown again, n times (reader None: a new one)."""
    from streamlit.testing.v1 import AppTest

    from workbench.ui import state

    at = AppTest.from_function(app_script, args=(str(study), "annotate"), default_timeout=300)
    at.run()
    if reader:
        at.selectbox(key=state.READER).select(reader).run()
    else:
        at.text_input(key=state.NEW_READER).input(f"bench-reader-{time.time_ns()}").run()
    timed_run(at)
    out = []
    for _ in range(n):
        save = [b for b in at.button if b.label == "Save and next"][0]
        save.click()
        out.append(timed_run(at))
        assert at.toast and "Saved" in at.toast[0].value, [e.value for e in at.error]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="/tmp/workbench-bench-pages", help="where the generated study lives (reused)")
    parser.add_argument("--rebuild", action="store_true", help="build the study again")
    args = parser.parse_args()
    folder = Path(args.path)
    study = folder / "study"
    if args.rebuild or not (study / "workbench.yaml").exists():
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        print(f"building the study in {folder} (3,000 reports x 6 readers x 21 labels, 3 runs) ...")
        started = time.perf_counter()
        build_study(folder)
        print(f"  built in {time.perf_counter() - started:.0f} s")
    import shutil

    work = folder / "timed"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(study, work)  # saves below must not accumulate in the reusable study
    rows = time_pages(work)
    saves = {"new reader": time_annotation_saves(work, None), "reader-a": time_annotation_saves(work, "reader-a")}
    print(f"\n{'page':<15}{'first (s)':>11}{'warm (s)':>10}{'target':>9}  ok")
    for page, first, warm in rows:
        print(f"{page:<15}{first:>11.2f}{warm:>10.2f}{PAGE_TARGET_S:>9.1f}  {'yes' if warm < PAGE_TARGET_S else 'NO'}")
    for who, times in saves.items():
        median = statistics.median(times)
        print(f"{'save: ' + who:<15}{max(times):>11.2f}{median:>10.2f}{SAVE_TARGET_S:>9.1f}  "
              f"{'yes' if max(times) < SAVE_TARGET_S else 'NO'}   (annotation save: max and median of {len(times)})")
    print("\nfirst = a new session's first run on an empty read cache (every service call made, as after any "
          "write); warm = a rerun (reads come from the revision-keyed cache). The warm figure is the target's.")


if __name__ == "__main__":
    main()
