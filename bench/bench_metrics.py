"""Time the metrics and agreement code at Ran Score scale and print the figures.

Run alone: ``python bench/bench_metrics.py``. Builds a seeded synthetic benchmark cohort
(3,000 reports x 21 labels, a reference and two prediction tables with a few unparsed replies)
and 378,000 readings (3,000 reports x 21 labels x 6 readers), then times each step.
Targets: the metrics pipeline under 1 s and peak memory under 300 MB.
"""

from __future__ import annotations

import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workbench.core import agreement, metrics  # noqa: E402

N_REPORTS, N_LABELS, N_READERS = 3_000, 21, 6
TARGET_SECONDS, TARGET_MB = 1.0, 300


def synthetic_tables(seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Reference and two runs: run B errs less often than run A; 0.5% unparsed cells."""
    rng = np.random.default_rng(seed)
    prevalence = rng.uniform(0.01, 0.3, N_LABELS)
    truth = (rng.random((N_REPORTS, N_LABELS)) < prevalence).astype(float)

    def run(error_rate: float) -> np.ndarray:
        flipped = np.where(rng.random(truth.shape) < error_rate, 1 - truth, truth)
        return np.where(rng.random(truth.shape) < 0.005, np.nan, flipped)

    index = pd.Index([f"r{i:05d}" for i in range(N_REPORTS)], name="report_id")
    columns = [f"label_{j:02d}" for j in range(N_LABELS)]
    frame = lambda values: pd.DataFrame(values, index=index, columns=columns)  # noqa: E731
    return frame(truth), frame(run(0.06)), frame(run(0.03))


def synthetic_readings(seed: int = 1) -> pd.DataFrame:
    """Six readers who each agree with a latent truth 92% of the time."""
    rng = np.random.default_rng(seed)
    truth = rng.random((N_REPORTS, N_LABELS)) < 0.15
    agree = rng.random((N_REPORTS, N_LABELS, N_READERS)) < 0.92
    values = np.where(agree, truth[:, :, None], ~truth[:, :, None]).astype(np.int64)
    report, label, reader = np.meshgrid(np.arange(N_REPORTS), np.arange(N_LABELS), np.arange(N_READERS), indexing="ij")

    def strings(codes: np.ndarray, names: list[str]) -> pd.Series:
        # Via categorical codes: no Python string object per row while building 378,000 rows.
        return pd.Series(pd.Categorical.from_codes(codes.ravel(), names)).astype("str")

    return pd.DataFrame(
        {
            "report_id": strings(report, [f"r{i:05d}" for i in range(N_REPORTS)]),
            "label": strings(label, [f"label_{j:02d}" for j in range(N_LABELS)]),
            "reader": strings(reader, [f"reader_{k}" for k in range(N_READERS)]),
            "value": values.ravel(),
        }
    )


def timed(name: str, func, *args, **kwargs):
    """Run func once, print its wall time, return (result, seconds)."""
    start = time.perf_counter()
    result = func(*args, **kwargs)
    seconds = time.perf_counter() - start
    print(f"  {name:<34s} {seconds:8.4f} s")
    return result, seconds


def metrics_steps(y_true, pred_a, pred_b, run=timed) -> tuple[dict, dict, float]:
    """The per-label table, averages, paired comparison and 1,000-resample bootstrap."""
    table, t1 = run("label_metrics (wilson)", metrics.label_metrics, y_true, pred_b)
    summary, t2 = run("averages", metrics.averages, table)
    _, t3 = run("compare_labels", metrics.compare_labels, y_true, pred_a, pred_b)
    boot, t4 = run("bootstrap_macro_f1 (1,000)", metrics.bootstrap_macro_f1, y_true, pred_b, n_resamples=1000)
    return summary, boot, t1 + t2 + t3 + t4


def agreement_steps(readings, run=timed) -> float:
    """Fleiss per label, Cohen per reader pair, vote split, each reader against the reference."""
    _, t1 = run("fleiss_kappa_table", agreement.fleiss_kappa_table, readings)
    _, t2 = run("pairwise_cohen", agreement.pairwise_cohen, readings)
    votes, t3 = run("vote_split", agreement.vote_split, readings)
    reference = votes.assign(value=np.where(votes["positives"] >= 4, 1.0, 0.0))
    reference.loc[votes["positives"] == 3, "value"] = np.nan  # 3 of 6: awaiting adjudication
    _, t4 = run("reader_vs_reference", agreement.reader_vs_reference, readings, reference)
    return t1 + t2 + t3 + t4


def quietly(name: str, func, *args, **kwargs):
    """Run func without printing (the traced pass), return (result, 0.0)."""
    return func(*args, **kwargs), 0.0


def traced_peak_mb(steps, *args) -> float:
    """Peak Python-visible allocations (numpy included) while running steps once more."""
    tracemalloc.start()
    steps(*args, run=quietly)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def rss_mb() -> float:
    """Process peak resident set size so far, in MB (ru_maxrss is kilobytes on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    """Time both workloads (untraced), then measure their memory; return 1 if a target is missed."""
    baseline = rss_mb()  # interpreter + numpy/pandas/scipy/pyarrow already imported
    tables, readings = synthetic_tables(), synthetic_readings()
    with_data = rss_mb()
    print(f"metrics on {N_REPORTS} reports x {N_LABELS} labels")
    summary, boot, metrics_seconds = metrics_steps(*tables)
    print(f"  {'total':<34s} {metrics_seconds:8.4f} s   (target < {TARGET_SECONDS:.0f} s)")
    print(f"  macro F1 {boot['estimate']:.3f} [{boot['lo']:.3f}, {boot['hi']:.3f}], micro F1 {summary['micro_f1']:.3f}")
    print(f"agreement on {len(readings):,} readings ({N_REPORTS} x {N_LABELS} x {N_READERS})")
    agreement_seconds = agreement_steps(readings)
    print(f"  {'total':<34s} {agreement_seconds:8.4f} s   (target < 2 s)")
    # Traced separately: tracemalloc slows allocation-heavy code several-fold.
    metrics_peak, agreement_peak = traced_peak_mb(metrics_steps, *tables), traced_peak_mb(agreement_steps, readings)
    peak = rss_mb()
    print(
        f"memory: traced peak metrics {metrics_peak:.1f} MB, agreement {agreement_peak:.1f} MB "
        f"(target < {TARGET_MB} MB)"
    )
    print(
        f"        process peak RSS {peak:.1f} MB: interpreter and imports {baseline:.1f} MB, "
        f"building the synthetic data +{with_data - baseline:.1f} MB, computing +{peak - with_data:.1f} MB"
    )
    ok = (
        metrics_seconds < TARGET_SECONDS
        and agreement_seconds < 2.0
        and max(metrics_peak, agreement_peak) < TARGET_MB
        and peak - with_data < TARGET_MB
    )
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
