"""Adaptive reading on a simulated 3,000-report x 6-reader x 21-label study (4 of 6 rule).

Readers are simulated per label with a prevalence and, per reader and label, a sensitivity and a
specificity (stated below; the demo's readers disagree on 1.5% of clear items and more on hedged
ones, which these rates bracket). Every reader's value for every report is drawn once, so the two
replays read the same values:

- adaptive reading on: the six readers in turn take the first report their work list offers and
  read it, until every list is done. The replay runs in memory on core/adaptive.py's rules (what
  the services apply), then the database check: the first half of those reads is imported into
  the study and `next_report` is timed on it for --calls queries (each followed by
  `submit_reading`), and the report it gives is compared with the in-memory replay's;
- adaptive reading off: every reader reads every report (the old work lists); the order does not
  change the outcome.

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


def simulate_replay(values: np.ndarray, rule, labels: list[str], sample: np.ndarray, order: str = "finish"):
    """The adaptive replay without a database: the six readers in turn take the first report their list offers
    (core.adaptive's rules: open, not read by them, room under the cap; finishing order) and read it.
    Returns the reads in order and the final reports x readers read mask."""
    from workbench.core import adaptive

    n_reports, n_readers, _ = values.shape
    read = np.zeros((n_reports, n_readers), dtype=bool)
    is_open = np.ones(n_reports, dtype=bool)
    readers = np.zeros(n_reports, dtype=np.int64)
    seq = np.arange(n_reports)
    group = lambda: np.where(sample, adaptive.SAMPLE, np.where(readers > 0, adaptive.STARTED, adaptive.UNREAD))  # noqa: E731
    reads, active = [], list(range(n_readers))
    while active:
        for k in list(active):
            free = np.flatnonzero(is_open & ~read[:, k] & (readers < rule.n))
            if not len(free):
                active.remove(k)
                continue
            if order == "cohort":
                pick = free[0]
            else:
                pick = free[np.lexsort((seq[free], -readers[free], group()[free]))[0]]
            read[pick, k] = True
            readers[pick] += 1
            reads.append((k, pick))
            who = read[pick]  # report_status for one report, without building a frame (no escalation here)
            _, _, final = adaptive.settled_vote(values[pick][who].sum(axis=0), np.full(len(labels), who.sum()), rule, rule.n)
            is_open[pick] = (not final.all() or (sample[pick] and readers[pick] < rule.n)) and readers[pick] < rule.n
    return reads, read


def counts_of(values: np.ndarray, read: np.ndarray, ids: list[str], labels: list[str]) -> pd.DataFrame:
    """Vote counts (report_id, label, positives, n_readers) of the readings a read mask selects."""
    positives = np.einsum("rkl,rk->rl", values, read.astype(int))
    n = np.repeat(read.sum(axis=1), len(labels))
    frame = pd.DataFrame({"report_id": np.repeat(ids, len(labels)), "label": np.tile(labels, len(ids)),
                          "positives": positives.ravel(), "n_readers": n})
    return frame[frame["n_readers"] > 0]


def time_next_report(wb, values, ids, readers, labels, reads, calls: int) -> tuple[list[float], int]:
    """Import the first half of the replay's reads, then time `calls` next-report queries (each followed by its reading)."""
    half = reads[: len(reads) // 2]
    rows = [(ids[i], lab, readers[k], int(v)) for k, i in half for lab, v in zip(labels, values[i, k])]
    path = Path(wb.root) / "half.csv"
    pd.DataFrame(rows, columns=["report_id", "label", "reader", "value"]).to_csv(path, index=False)
    wb.import_readings(path)
    index = {r: i for i, r in enumerate(ids)}
    times, same, made = [], 0, 0
    cpu = []
    for step in range(calls):
        reader_k, expected = reads[len(half) + step] if len(half) + step < len(reads) else (step % len(readers), None)
        start, start_cpu = time.perf_counter(), time.process_time()
        report = wb.next_report(readers[reader_k], "dev")
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        if report is None:
            continue
        same += expected is not None and report == ids[expected]
        wb.submit_reading(readers[reader_k], report, dict(zip(labels, values[index[report], reader_k].tolist())))
        made += 1
    print(f"  CPU of this process per next-report query: median {np.median(cpu) * 1000:.1f} ms "
          "(the database runs in-process on SQLite; on a loaded machine wall time waits for a core)")
    return times, same


def demo_figures(rule) -> None:
    """The same in-memory replay on the demo study's own readings (180 reports x 6 readers x 20 labels)."""
    readings = pd.read_csv(ROOT / "annotations" / "demo" / "readings.csv")
    ids, labels, readers = (sorted(readings[c].unique()) for c in ("report_id", "label", "reader"))
    grid = readings.pivot_table(index=["report_id", "reader"], columns="label", values="value")
    values = grid.reindex(pd.MultiIndex.from_product([ids, readers]))[labels].to_numpy().reshape(len(ids), len(readers), -1)
    for share in (0.0, 0.2):
        sample = np.random.default_rng(0).uniform(size=len(ids)) < share
        reads, _ = simulate_replay(values.astype(int), rule, labels, sample)
        total = len(ids) * len(readers)
        print(f"demo study's readings, agreement sample {share:.0%} (random): reads saved "
              f"{(total - len(reads)) / total:.1%} ({total - len(reads)} of {total})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=3000)
    parser.add_argument("--readers", type=int, default=6)
    parser.add_argument("--calls", type=int, default=200, help="next-report queries timed on the database")
    parser.add_argument("--db", default=None, help="a database URL for the adaptive study (default: SQLite in the study)")
    args = parser.parse_args()
    from workbench.core.reference import reference_from_counts

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
        print(f"offline labeller run {run.run_id}: {time.perf_counter() - start:.1f} s (the agreement sample is stratified by it)",
              flush=True)
        wb.set_adaptive(enabled=True, agreement_share=0.2, seed=0)
        wb.work_list(readers[0], "dev")  # draws the agreement sample
        sample_ids = set(wb.agreement_sample_reports("dev"))
        sample = np.array([r in sample_ids for r in ids])
        start = time.perf_counter()
        reads, read = simulate_replay(values, wb.rule(), labels, sample)
        print(f"adaptive replay (the services' rules, in memory): {len(reads):,} reads in {time.perf_counter() - start:.0f} s",
              flush=True)
        key = ["report_id", "label"]
        full_mask = np.ones(read.shape, dtype=bool)
        want = reference_from_counts(counts_of(values, full_mask, ids, labels), wb.rule()).set_index(key)[["value", "status"]]
        got = reference_from_counts(counts_of(values, read, ids, labels), wb.rule(), panel=wb.rule().n).set_index(key)
        got = got[["value", "status"]].reindex(want.index)
        changed = int((~((got["value"] == want["value"]) | (got["value"].isna() & want["value"].isna()))
                       | (got["status"] != want["status"])).sum())
        total = len(ids) * len(readers)
        print(f"reads saved: {(total - len(reads)) / total:.1%} ({total - len(reads):,} of {total:,})")
        rule = wb.rule()
        bound = (1 - sample.mean()) * (rule.n - rule.k) / rule.n
        spread = pd.Series(read.sum(axis=1)[~sample]).value_counts().sort_index()
        print(f"  at most {bound:.1%} can be saved with this rule and sample (every report needs {rule.k} reads, "
              f"the sample all {rule.n}); reports outside the sample closed after "
              + ", ".join(f"{int(k)} reads: {int(v):,}" for k, v in spread.items()))
        no_sample, _ = simulate_replay(values, rule, labels, np.zeros(len(ids), dtype=bool))
        print(f"  without an agreement sample: {(total - len(no_sample)) / total:.1%} saved "
              f"({total - len(no_sample):,} of {total:,})", flush=True)
        print(f"reference items changed: {changed} (of {len(want):,}; decided {int(want['value'].notna().sum()):,}, "
              f"waiting {int(want['value'].isna().sum()):,})")
        full = long_readings(values, ids, readers, labels)
        mine = fleiss_interval(full[full["report_id"].isin(sample_ids)])
        panel = fleiss_interval(full)
        print(f"Fleiss kappa per label: agreement sample (n = {len(sample_ids):,} reports, "
              f"{len(sample_ids) / len(ids):.0%}) beside the full panel (n = {len(ids):,}), 95% bootstrap intervals")
        for label in labels:
            a, b = mine.loc[label], panel.loc[label]
            print(f"  {label:<38} {a['kappa']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}]   {b['kappa']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}]")
        print(f"  {'mean over labels':<38} {mine['kappa'].mean():.3f}                   {panel['kappa'].mean():.3f}", flush=True)
        times, same = time_next_report(wb, values, ids, readers, labels, reads, args.calls)
        t = np.asarray(times)
        print(f"next-report query on the database, half the reads done: median {np.median(t) * 1000:.1f} ms, "
              f"p95 {np.percentile(t, 95) * 1000:.1f} ms over {len(t):,} calls ({wb.engine.dialect.name}); "
              f"the service gave the in-memory replay's next report {same} of {len(t)} times")
        wb.engine.dispose()
        demo_figures(rule)


if __name__ == "__main__":
    main()
