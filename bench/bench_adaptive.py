"""Adaptive reading on a simulated 3,000-report x 6-reader x 21-label study (4 of 6 rule).

Readers are simulated per label with a prevalence and, per reader and label, a sensitivity and a
specificity (stated below; the demo's readers disagree on 1.5% of clear items and more on hedged
ones, which these rates bracket). Every reader's value for every report is drawn once, so the two
replays read the same values:

- adaptive reading on: the six readers in turn ask for their next report (`next_report`, timed)
  and save their reading of it (`submit_reading`), in work-list order, until every list is done;
- adaptive reading off: every reader reads every report (the old work lists); the order does not
  change the outcome, so its 378,000 readings are imported in one go instead of replayed.

Prints `reads saved: X% (A of B)`, `reference items changed: N`, the agreement sample's Fleiss
kappa per label with a bootstrap interval beside the full panel's, and the seconds per next-report
query (median, p95). Targets: >= 30% saved, 0 items changed, median <= 50 ms on SQLite.

    python bench/bench_adaptive.py [--reports 3000] [--readers 6] [--db sqlite|URL]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from synthetic import write_study_inputs  # noqa: E402
from workbench.core.agreement import fleiss_kappa_table  # noqa: E402
from workbench.services import init_study  # noqa: E402

PREVALENCE = (0.01, 0.30)      # per label, log-uniform between these
SENSITIVITY = (0.80, 0.97)     # per reader and label, uniform
SPECIFICITY = (0.97, 0.995)    # per reader and label, uniform


def simulate(n_reports: int, readers: list[str], labels: list[str], seed: int = 0) -> np.ndarray:
    """reports x readers x labels 0/1: each reader's reading of each report."""
    rng = np.random.default_rng(seed)
    prevalence = np.exp(rng.uniform(np.log(PREVALENCE[0]), np.log(PREVALENCE[1]), len(labels)))
    truth = rng.uniform(size=(n_reports, len(labels))) < prevalence
    sens = rng.uniform(*SENSITIVITY, size=(len(readers), len(labels)))
    spec = rng.uniform(*SPECIFICITY, size=(len(readers), len(labels)))
    u = rng.uniform(size=(n_reports, len(readers), len(labels)))
    positive = np.where(truth[:, None, :], u < sens[None], u >= spec[None])
    return positive.astype(int)


def make_study(folder: Path, inputs: dict, db: str | None):
    """A 4-of-6 study on the generated reports, labelled once by the offline labeller (the sample is stratified by it)."""
    wb = init_study(folder, vocab=str(inputs["vocab"]), prompt_set=str(inputs["prompts"]), db_url=db,
                    rule={"rule": "at_least", "k": 4, "n": 6})
    wb.import_reports(inputs["reports"], "dev")
    return wb


def replay(wb, values: np.ndarray, ids: list[str], readers: list[str], labels: list[str]) -> tuple[int, list[float]]:
    """Readers in turn take their next report and read it until every list is done: reads, next-report seconds."""
    index = {r: i for i, r in enumerate(ids)}
    times, reads, active = [], 0, list(range(len(readers)))
    while active:
        for k in list(active):
            start = time.perf_counter()
            report = wb.next_report(readers[k], "dev")
            times.append(time.perf_counter() - start)
            if report is None:
                active.remove(k)
                continue
            wb.submit_reading(readers[k], report, dict(zip(labels, values[index[report], k].tolist())))
            reads += 1
            if reads % 1000 == 0:
                print(f"  {reads:,} reads, next-report median so far {np.median(times) * 1000:.1f} ms", flush=True)
    return reads, times


def long_readings(values: np.ndarray, ids: list[str], readers: list[str], labels: list[str]) -> pd.DataFrame:
    """Every reading of the full panel as a long frame."""
    r, k, j = np.meshgrid(np.arange(len(ids)), np.arange(len(readers)), np.arange(len(labels)), indexing="ij")
    return pd.DataFrame({"report_id": np.asarray(ids)[r.ravel()], "label": np.asarray(labels)[j.ravel()],
                         "reader": np.asarray(readers)[k.ravel()], "value": values.ravel()})


def fleiss_interval(readings: pd.DataFrame, n_resamples: int = 300, seed: int = 0) -> pd.DataFrame:
    """Per label: Fleiss kappa and a 95% percentile bootstrap interval over reports (every report fully read)."""
    rng = np.random.default_rng(seed)
    rows = []
    for label, part in readings.groupby("label", sort=False):
        per = part.groupby("report_id")["value"].agg(["sum", "count"])
        m = per["count"].to_numpy(dtype=float)
        pos = per["sum"].to_numpy(dtype=float)
        p_item = (pos**2 + (m - pos) ** 2 - m) / (m * (m - 1))
        share = pos / m
        idx = rng.integers(0, len(per), size=(n_resamples, len(per)))
        p_bar, rate = p_item[idx].mean(axis=1), share[idx].mean(axis=1)
        p_exp = rate**2 + (1 - rate) ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            boot = np.where(p_exp < 1, (p_bar - p_exp) / (1 - p_exp), np.nan)
        lo, hi = np.nanpercentile(boot, [2.5, 97.5]) if np.isfinite(boot).any() else (np.nan, np.nan)
        rows.append({"label": label, "lo": lo, "hi": hi, "n": len(per)})
    table = pd.DataFrame(rows).set_index("label")
    table["kappa"] = fleiss_kappa_table(readings)["fleiss_kappa"].reindex(table.index)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=3000)
    parser.add_argument("--readers", type=int, default=6)
    parser.add_argument("--db", default=None, help="a database URL for the adaptive study (default: SQLite in the study)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs = write_study_inputs(tmp / "inputs", n_reports=args.reports, n_readers=args.readers)
        wb = make_study(tmp / "on", inputs, args.db)
        labels = list(wb.vocab.asked_ids)
        ids = pd.read_csv(inputs["reports"])["id"].tolist()
        readers = [f"reader-{c}" for c in "abcdefgh"[:args.readers]]
        values = simulate(len(ids), readers, labels)
        start = time.perf_counter()
        run = wb.start_run("dev")
        print(f"offline labeller run {run.run_id}: {time.perf_counter() - start:.1f} s (the agreement sample is stratified by it)")
        wb.set_adaptive(enabled=True, agreement_share=0.2, seed=0)
        start = time.perf_counter()
        reads, times = replay(wb, values, ids, readers, labels)
        print(f"adaptive replay: {reads:,} reads in {time.perf_counter() - start:.0f} s")
        full = long_readings(values, ids, readers, labels)
        off = init_study(tmp / "off", vocab=str(inputs["vocab"]), prompt_set=str(inputs["prompts"]),
                         rule={"rule": "at_least", "k": 4, "n": 6})
        off.import_reports(inputs["reports"], "dev")
        full.to_csv(tmp / "full.csv", index=False)
        off.import_readings(tmp / "full.csv")
        key = ["report_id", "label"]
        got = wb.reference("dev").set_index(key)[["value", "status"]]
        want = off.reference("dev").set_index(key)[["value", "status"]].reindex(got.index)
        changed = int((~((got["value"] == want["value"]) | (got["value"].isna() & want["value"].isna()))
                       | (got["status"] != want["status"])).sum())
        total = len(ids) * len(readers)
        print(f"reads saved: {(total - reads) / total:.1%} ({total - reads:,} of {total:,})")
        print(f"reference items changed: {changed} (of {len(got):,}; decided {int(got['value'].notna().sum()):,}, "
              f"waiting {int(got['value'].isna().sum()):,})")
        sample = wb.agreement_sample_reports("dev")
        mine = fleiss_interval(full[full["report_id"].isin(sample)])
        panel = fleiss_interval(full)
        print(f"Fleiss kappa per label: agreement sample (n = {len(sample):,} reports, "
              f"{len(sample) / len(ids):.0%}) beside the full panel (n = {len(ids):,}), 95% bootstrap intervals")
        for label in labels:
            a, b = mine.loc[label], panel.loc[label]
            print(f"  {label:<38} {a['kappa']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}]   {b['kappa']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}]")
        print(f"  {'mean over labels':<38} {mine['kappa'].mean():.3f}                   {panel['kappa'].mean():.3f}")
        service = wb.agreement("dev")["fleiss"]["fleiss_kappa"]
        print(f"  (the service's figure on the sample, mean over labels: {service.mean():.3f})")
        t = np.asarray(times)
        print(f"next-report query: median {np.median(t) * 1000:.1f} ms, p95 {np.percentile(t, 95) * 1000:.1f} ms "
              f"over {len(t):,} calls ({wb.engine.dialect.name})")
        wb.engine.dispose()
        off.engine.dispose()


if __name__ == "__main__":
    main()
