"""Time the engineer's view of a case at Ran Score scale: search within a run and the case matrix.

Run alone: ``python bench/bench_case_view.py [--path DIR] [--rebuild] [--repeats 5]``. Builds (once; reused
from DIR, the same study bench_pages.py builds) 3,000 reports x 21 labels with three offline runs (63,000
predictions each), then prints the median seconds of `search_run` over each field (substring and regex) and
of `case_matrix` for one (report, label) and for a whole report, with the matches found.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def median_s(fn, repeats: int) -> tuple[float, object]:
    """Median wall seconds of fn() over repeats calls, and its last result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="/tmp/workbench-bench-pages", help="where the generated study lives (reused)")
    parser.add_argument("--rebuild", action="store_true", help="build the study again")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per figure (median)")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    study = Path(args.path) / "study"
    if args.rebuild or not (study / "workbench.yaml").exists():
        import shutil

        from bench_pages import build_study

        shutil.rmtree(args.path, ignore_errors=True)
        print(f"building the study in {args.path} (3,000 reports x 6 readers x 21 labels, 3 runs) ...")
        build_study(Path(args.path))
    from workbench.services import Workbench

    wb = Workbench(study)
    wb.migrate()  # a study built before this version
    run_id = int(wb.runs()["id"].max())
    print(f"run {run_id}: {len(wb.predictions(run_id)):,} predictions")
    for where, query, regex in (
        ("evidence", "effusion", False),
        ("answer", '"value": 1', False),
        ("report", "pneumothorax", False),
        (None, "effusion", False),
        ("evidence", r"pleural\s+effusion|cardiomegal", True),
    ):
        seconds, found = median_s(
            lambda q=query, w=where, r=regex: wb.search_run(run_id, q, where=w, regex=r), args.repeats
        )
        print(
            f"search --in {where or 'all'} {query!r}{' --regex' if regex else ''}: {len(found.cases):,} matches, "
            f"median {seconds:.3f} s"
        )
    report = wb.predictions(run_id)["report_id"].iloc[0]
    seconds, matrix = median_s(lambda: wb.case_matrix(report, "pleural_effusion"), args.repeats)
    print(f"case_matrix {report} pleural_effusion: {len(matrix.columns)} columns, median {seconds:.3f} s")
    seconds, matrix = median_s(lambda: wb.case_matrix(report), args.repeats)
    print(f"case_matrix {report} (every label): {len(matrix.columns)} columns, median {seconds:.3f} s")


if __name__ == "__main__":
    main()
