"""Import 3,000 reports with 6 readers x 21 labels (378,000 readings), then compute the reference
and agreement; prints seconds per step and peak memory. Target: under 15 s and 600 MB in all.

    python bench/bench_foundation.py [--reports 3000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import write_study_inputs  # noqa: E402

from workbench.services import init_study  # noqa: E402


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reports", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inputs = write_study_inputs(Path(tmp) / "inputs", n_reports=args.reports)
        timings = {}
        t0 = time.perf_counter()
        wb = init_study(Path(tmp) / "study", vocab=str(inputs["vocab"]), prompt_set=str(inputs["prompts"]))
        timings["init study"] = time.perf_counter() - t0
        t = time.perf_counter()
        wb.import_reports(inputs["reports"], "dev")
        timings["import reports"] = time.perf_counter() - t
        t = time.perf_counter()
        summary = wb.import_readings(inputs["readings"])
        timings[f"import {summary.added:,} readings"] = time.perf_counter() - t
        t = time.perf_counter()
        ref = wb.reference("dev")
        timings[f"reference ({len(ref):,} items)"] = time.perf_counter() - t
        t = time.perf_counter()
        wb.agreement("dev")
        timings["agreement (Fleiss, pairwise Cohen, reader vs reference)"] = time.perf_counter() - t
        total = sum(timings.values())
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for name, secs in timings.items():
        print(f"{name:60s} {secs:7.2f} s")
    print(f"{'total':60s} {total:7.2f} s   (target < 15 s)")
    print(f"{'peak resident memory of the process':60s} {peak_mb:7.0f} MB  (target < 600 MB)")


if __name__ == "__main__":
    main()
