"""Adaptive reading on a simulated 3,000-report x 6-reader x 21-label study, under both 4-of-6 rules.

The two rules (--rule, default both side by side): `at_least` 4 of 6 (4 votes on either side, a 3-3
tie goes to adjudication: the rule the workbench has always applied) and `positive_at_least` 4 of
6 (positive when at least 4 of 6 mark it, otherwise negative: the Ran Score paper's rule).

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
query (median, p95; wall and this process's CPU). Targets: >= 30% saved, 0 items changed, median
<= 50 ms on SQLite.

    python bench/bench_adaptive.py [--rule both|at_least|positive_at_least] [--reports 3000] [--readers 6]
                                   [--calls 200] [--db URL (one rule at a time)]
"""

from __future__ import annotations

import argparse
import os
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


RULES = ("at_least", "positive_at_least")


def make_study(folder: Path, inputs: dict, db: str | None, kind: str = "at_least"):
    """A 4-of-6 study under the given rule kind on the generated reports."""
    wb = init_study(folder, vocab=str(inputs["vocab"]), prompt_set=str(inputs["prompts"]), db_url=db,
                    rule={"rule": kind, "k": 4, "n": 6})
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


def time_next_report(wb, values, ids, readers, labels, reads, calls: int) -> tuple[list[float], list[float], int]:
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
    return times, cpu, same


def demo_figures(rule) -> list[str]:
    """The same in-memory replay on the demo study's own readings (180 reports x 6 readers x 20 labels)."""
    readings = pd.read_csv(ROOT / "annotations" / "demo" / "readings.csv")
    ids, labels, readers = (sorted(readings[c].unique()) for c in ("report_id", "label", "reader"))
    grid = readings.pivot_table(index=["report_id", "reader"], columns="label", values="value")
    values = grid.reindex(pd.MultiIndex.from_product([ids, readers]))[labels].to_numpy().reshape(len(ids), len(readers), -1)
    out = []
    for share in (0.0, 0.2):
        sample = np.random.default_rng(0).uniform(size=len(ids)) < share
        reads, _ = simulate_replay(values.astype(int), rule, labels, sample)
        total = len(ids) * len(readers)
        out.append(f"{(total - len(reads)) / total:.1%} ({total - len(reads)} of {total}) with a {share:.0%} sample")
    return out


def fewest_reads(rule) -> int:
    """The fewest reads that can settle every label of a report under the rule (what bounds the savings)."""
    if rule.kind == "positive_at_least":  # K positives, or N - K + 1 readers leaving it unticked
        return min(rule.k, rule.n - rule.k + 1)
    return rule.k if rule.kind == "at_least" else rule.n // 2 + 1


def bench_rule(kind: str, tmp: Path, inputs: dict, values: np.ndarray, args) -> dict:
    """One rule: the study, its agreement sample, the replay, the guarantee check and the next-report timing."""
    from workbench.core.reference import reference_from_counts

    wb = make_study(tmp / kind, inputs, args.db, kind)
    wb.import_reports(inputs["reports"], "dev")
    labels = list(wb.vocab.asked_ids)
    assert labels == _labels(inputs), "the simulated values follow the vocabulary's label order"
    ids = pd.read_csv(inputs["reports"])["id"].tolist()
    readers = [f"reader-{c}" for c in "abcdefgh"[:args.readers]]
    start = time.perf_counter()
    wb.start_run("dev")  # the offline labeller: the agreement sample is stratified by its predictions
    print(f"[{kind}] offline labeller: {time.perf_counter() - start:.1f} s", flush=True)
    wb.set_adaptive(enabled=True, agreement_share=0.2, seed=0)
    wb.work_list(readers[0], "dev")  # draws the agreement sample
    sample_ids = set(wb.agreement_sample_reports("dev"))
    sample = np.array([r in sample_ids for r in ids])
    rule = wb.rule()
    start = time.perf_counter()
    reads, read = simulate_replay(values, rule, labels, sample)
    print(f"[{kind}] adaptive replay in memory: {len(reads):,} reads in {time.perf_counter() - start:.0f} s", flush=True)
    key = ["report_id", "label"]
    want = reference_from_counts(counts_of(values, np.ones(read.shape, dtype=bool), ids, labels), rule)
    want = want.set_index(key)[["value", "status"]]
    got = reference_from_counts(counts_of(values, read, ids, labels), rule, panel=rule.n).set_index(key)
    got = got[["value", "status"]].reindex(want.index)
    same_value = (got["value"] == want["value"]) | (got["value"].isna() & want["value"].isna())
    no_sample, _ = simulate_replay(values, rule, labels, np.zeros(len(ids), dtype=bool))
    times, cpu, same = time_next_report(wb, values, ids, readers, labels, reads, args.calls)
    out = {"rule": rule, "total": len(ids) * len(readers), "reads": len(reads), "no_sample_reads": len(no_sample),
           "changed": int((~same_value | (got["status"] != want["status"])).sum()), "items": len(want),
           "decided": int(want["value"].notna().sum()), "waiting": int(want["value"].isna().sum()),
           "spread": pd.Series(read.sum(axis=1)[~sample]).value_counts().sort_index(),
           "bound": (1 - sample.mean()) * (rule.n - fewest_reads(rule)) / rule.n,
           "wall": np.asarray(times), "cpu": np.asarray(cpu), "same": same, "dialect": wb.engine.dialect.name,
           "sample_ids": sample_ids, "ids": ids, "readers": readers, "labels": labels,
           "demo": demo_figures(rule)}
    wb.engine.dispose()
    return out


def _ms(a: np.ndarray, q: float) -> str:
    return f"{np.percentile(a, q) * 1000:.1f} ms"


def print_side_by_side(results: list[dict]) -> None:
    """The figures of each rule in one column each."""
    width = 34
    rows = [("rule", lambda r: r["rule"].describe().split(" (")[0].split(";")[0])]
    rows += [
        ("reads saved", lambda r: f"{(r['total'] - r['reads']) / r['total']:.1%} ({r['total'] - r['reads']:,} of {r['total']:,})"),
        ("  at most (rule and sample)", lambda r: f"{r['bound']:.1%}"),
        ("  without an agreement sample", lambda r: f"{(r['total'] - r['no_sample_reads']) / r['total']:.1%}"),
        ("  outside the sample, closed after", lambda r: ", ".join(f"{int(k)}: {int(v):,}" for k, v in r["spread"].items())),
        ("reference items changed", lambda r: f"{r['changed']} of {r['items']:,}"),
        ("  decided / waiting (full panel)", lambda r: f"{r['decided']:,} / {r['waiting']:,}"),
        ("next report, wall median / p95", lambda r: f"{_ms(r['wall'], 50)} / {_ms(r['wall'], 95)}"),
        ("next report, CPU median / p95", lambda r: f"{_ms(r['cpu'], 50)} / {_ms(r['cpu'], 95)}"),
        ("  same report as the replay", lambda r: f"{r['same']} of {len(r['wall'])} ({r['dialect']})"),
        ("demo study's readings, saved", lambda r: r["demo"][0]),
        ("", lambda r: r["demo"][1]),
    ]
    print()
    print(" " * width + "".join(f"{r['rule'].kind:<44}" for r in results))
    for name, cell in rows:
        print(f"{name:<{width}}" + "".join(f"{cell(r):<44}" for r in results))


def print_kappa(values: np.ndarray, result: dict) -> None:
    """Fleiss kappa per label on the agreement sample beside the full panel (the same for every rule)."""
    ids, sample_ids = result["ids"], result["sample_ids"]
    full = long_readings(values, ids, result["readers"], result["labels"])
    mine = fleiss_interval(full[full["report_id"].isin(sample_ids)])
    panel = fleiss_interval(full)
    inside = int(((panel["kappa"] >= mine["lo"]) & (panel["kappa"] <= mine["hi"])).sum())
    print(f"\nFleiss kappa per label: agreement sample (n = {len(sample_ids):,} reports, {len(sample_ids) / len(ids):.0%}, "
          f"full overlap) beside the full panel (n = {len(ids):,}), 95% bootstrap intervals over reports")
    for label in result["labels"]:
        a, b = mine.loc[label], panel.loc[label]
        print(f"  {label:<38} {a['kappa']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}]   {b['kappa']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}]")
    print(f"  {'mean over labels':<38} {mine['kappa'].mean():.3f}                   {panel['kappa'].mean():.3f}")
    print(f"  the full panel's kappa lies inside the sample's interval for {inside} of {len(mine)} labels")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule", choices=("both", *RULES), default="both", help="the 4-of-6 rule(s) to run")
    parser.add_argument("--reports", type=int, default=3000)
    parser.add_argument("--readers", type=int, default=6)
    parser.add_argument("--calls", type=int, default=200, help="next-report queries timed on the database")
    parser.add_argument("--db", default=None, help="a database URL for the study (default: SQLite in the study); one rule at a time")
    args = parser.parse_args()
    kinds = RULES if args.rule == "both" else (args.rule,)
    if args.db and len(kinds) > 1:
        parser.error("--db holds one study: give --rule at_least or --rule positive_at_least with it")
    print(f"load average at the start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} cores)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs = write_study_inputs(tmp / "inputs", n_reports=args.reports, n_readers=args.readers)
        n_reports = len(pd.read_csv(inputs["reports"]))
        values = simulate(n_reports, [f"reader-{c}" for c in "abcdefgh"[:args.readers]], _labels(inputs))
        results = [bench_rule(kind, tmp, inputs, values, args) for kind in kinds]
    print_side_by_side(results)
    print_kappa(values, results[0])
    if len(results) > 1 and results[0]["sample_ids"] != results[1]["sample_ids"]:
        print("  (the rules' agreement samples differ: the figures above are the first rule's)")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def _labels(inputs: dict) -> list[str]:
    """The asked labels of the generated vocabulary, in its order."""
    import yaml

    return [lab["id"] for lab in yaml.safe_load(Path(inputs["vocab"]).read_text())["labels"]]


if __name__ == "__main__":
    main()
