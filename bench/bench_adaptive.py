"""Adaptive reading on a simulated 3,000-report x 6-reader x 21-label study, under both 4-of-6 rules and two
prevalence profiles.

The two rules (--rule, default both side by side): `at_least` 4 of 6 (4 votes on either side, a 3-3
tie goes to adjudication: the rule the workbench has always applied) and `positive_at_least` 4 of
6 (positive when at least 4 of 6 mark it, otherwise negative: the Ran Score paper's rule).

The two profiles (--profile, default both when the OpenI dataset is present):

- `uniform` (the bench's first profile, kept as it was): the 21 Ran Score labels all asked of the
  readers (No Finding too, as an independent label), each with a prevalence drawn log-uniform in
  1-30%, labels independent of each other; per reader and label a sensitivity uniform in 0.80-0.97
  and a specificity uniform in 0.97-0.995. 85.8% of its reports have a positive label.
- `openi`: measured, not chosen. The reports are 3,000 of OpenI's 3,080 real reports (seeded draw
  among those with text) and each report's truth is what OpenI's MeSH coding says it has, mapped
  onto the 20 Ran Score findings (bench/openi_profile.py: the mapping, and its check against the
  labels14.csv gold standard), so prevalences and co-occurrence are OpenI's (51.8% of its reports
  have none of the 20 findings). The vocabulary is the Ran Score one as shipped: No Finding is
  derived from the other 20, never asked. The readers' per-label sensitivity and specificity are
  measured from the demo study's readings (annotations/demo/readings.csv) against its own 4-of-6
  reference, pooled over the six readers (demo_reader_rates), errors independent between readers.
  Needs the dataset (WORKBENCH_DATASETS or ../shared/datasets); without it only `uniform` runs.

Every reader's value for every report is drawn once, so the replays read the same values:

- adaptive reading on: the six readers in turn take the first report their work list offers and
  read it, until every list is done. The replay runs in memory on core/adaptive.py's rules (what
  the services apply), then the database check: the first half of those reads is imported into
  the study and `next_report` is timed on it for --calls queries (each followed by
  `submit_reading`), and the report it gives is compared with the in-memory replay's;
- adaptive reading off: every reader reads every report (the old work lists); the order does not
  change the outcome.

Prints, per profile and rule, `reads saved: X% (A of B)` and `reference items changed: N`, then the
side-by-side table (with the bounds: readers who never err, and an oracle that picks readers knowing
their values, which no blinded order can), the profiles' prevalences beside OpenI's gold standard,
the agreement sample's Fleiss kappa per label with a bootstrap interval beside the full panel's, and
the seconds per next-report query (median, p95; wall and this process's CPU). Targets: >= 30%
saved, 0 items changed, median <= 50 ms on SQLite.

    python bench/bench_adaptive.py [--rule both|at_least|positive_at_least] [--profile both|uniform|openi]
                                   [--reports 3000] [--readers 6] [--calls 200] [--db URL (one rule, one profile)]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import openi_profile  # noqa: E402
from synthetic import write_study_inputs  # noqa: E402

from workbench.core import adaptive  # noqa: E402
from workbench.core.agreement import fleiss_kappa_table  # noqa: E402
from workbench.services import init_study  # noqa: E402
from workbench.shipped import shipped_dir  # noqa: E402

# the uniform profile
PREVALENCE = (0.01, 0.30)  # per label, log-uniform between these
SENSITIVITY = (0.80, 0.97)  # per reader and label, uniform
SPECIFICITY = (0.97, 0.995)  # per reader and label, uniform
PROFILES = ("uniform", "openi")


def simulate(n_reports: int, readers: list[str], labels: list[str], seed: int = 0) -> np.ndarray:
    """The uniform profile: reports x readers x labels 0/1, each reader's reading of each report."""
    rng = np.random.default_rng(seed)
    prevalence = np.exp(rng.uniform(np.log(PREVALENCE[0]), np.log(PREVALENCE[1]), len(labels)))
    truth = rng.uniform(size=(n_reports, len(labels))) < prevalence
    sens = rng.uniform(*SENSITIVITY, size=(len(readers), len(labels)))
    spec = rng.uniform(*SPECIFICITY, size=(len(readers), len(labels)))
    u = rng.uniform(size=(n_reports, len(readers), len(labels)))
    positive = np.where(truth[:, None, :], u < sens[None], u >= spec[None])
    return positive.astype(int)


def read_truth(truth: np.ndarray, sens: np.ndarray, spec: np.ndarray, rng) -> np.ndarray:
    """Readers reading reports with known truth: reports x readers x labels 0/1 (sens, spec: readers x labels)."""
    u = rng.uniform(size=(truth.shape[0], sens.shape[0], truth.shape[1]))
    return np.where(truth[:, None, :], u < sens[None], u >= spec[None]).astype(int)


def demo_reader_rates(labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per label: the demo readers' sensitivity and specificity against the demo's 4-of-6 reference (3-3 items left
    out), pooled over its six readers."""
    readings = pd.read_csv(shipped_dir("annotations") / "demo" / "readings.csv")
    votes = readings.groupby(["report_id", "label"])["value"].transform("sum")
    known = readings[(votes >= 4) | (votes <= 2)].assign(ref=lambda f: (votes[f.index] >= 4).astype(int))
    rate = known.groupby(["label", "ref"])["value"].mean().unstack()
    return rate[1].reindex(labels).to_numpy(), 1 - rate[0].reindex(labels).to_numpy()


@dataclass
class Profile:
    """A simulated study: its input files, asked labels, every reader's values and the truth they read."""

    name: str
    inputs: dict
    labels: list[str]
    values: np.ndarray
    truth: np.ndarray
    readers: str
    variants: dict = field(default_factory=dict)  # name -> (values, labels): replayed in memory only


def uniform_profile(folder: Path, args) -> Profile:
    """The bench's first profile (see the module's docstring), exactly as before."""
    inputs = write_study_inputs(folder, n_reports=args.reports, n_readers=args.readers)
    labels = _labels(inputs)
    rng = np.random.default_rng(0)  # simulate()'s own draws, repeated to keep the truth they read
    prevalence = np.exp(rng.uniform(np.log(PREVALENCE[0]), np.log(PREVALENCE[1]), len(labels)))
    n_reports = len(pd.read_csv(inputs["reports"]))
    truth = rng.uniform(size=(n_reports, len(labels))) < prevalence
    values = simulate(n_reports, _reader_names(args), labels)
    return Profile(
        "uniform",
        inputs,
        labels,
        values,
        truth.astype(int),
        f"sensitivity U({SENSITIVITY[0]}, {SENSITIVITY[1]}), specificity U({SPECIFICITY[0]}, {SPECIFICITY[1]})",
    )


def openi_profile_of(folder: Path, dataset: Path, args) -> Profile:
    """OpenI's reports and their MeSH findings, read by readers with the demo's per-label rates (module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = shipped_dir("vocab") / "ranscore-21.yaml"
    labels = [lab["id"] for lab in yaml.safe_load(vocab.read_text())["labels"] if not lab.get("derived")]
    texts = openi_profile.sample_rows(openi_profile.report_texts(dataset), args.reports)
    texts.to_csv(folder / "reports.csv", index=False)
    truth = openi_profile.truth(dataset, labels).reindex(texts["id"]).to_numpy()
    rng = np.random.default_rng(0)
    sens, spec = demo_reader_rates(labels)
    n = args.readers
    values = read_truth(truth, np.tile(sens, (n, 1)), np.tile(spec, (n, 1)), rng)
    # the same truth read by the uniform profile's readers: what the readers change, beside what the truth changes
    old = read_truth(
        truth, rng.uniform(*SENSITIVITY, size=(n, len(labels))), rng.uniform(*SPECIFICITY, size=(n, len(labels))), rng
    )
    # No Finding asked of the readers as a 21st label (each marks it when they mark none of the other 20), not derived
    asked = np.concatenate([values, (values.sum(axis=2, keepdims=True) == 0).astype(int)], axis=2)
    inputs = {"vocab": vocab, "prompts": shipped_dir("prompts") / "ranscore-21", "reports": folder / "reports.csv"}
    return Profile(
        "openi",
        inputs,
        labels,
        values,
        truth,
        "the demo's per label: sensitivity "
        f"{sens.min():.3f}-{sens.max():.3f} (mean {sens.mean():.3f}), specificity {spec.min():.3f}-{spec.max():.3f} "
        f"(mean {spec.mean():.3f})",
        variants={
            "the uniform profile's readers instead": (old, labels),
            "No Finding asked of the readers": (asked, [*labels, "no_finding"]),
        },
    )


RULES = ("at_least", "positive_at_least")


def make_study(folder: Path, inputs: dict, db: str | None, kind: str = "at_least"):
    """A 4-of-6 study under the given rule kind on the generated reports."""
    wb = init_study(
        folder,
        vocab=str(inputs["vocab"]),
        prompt_set=str(inputs["prompts"]),
        db_url=db,
        rule={"rule": kind, "k": 4, "n": 6},
    )
    wb.import_reports(inputs["reports"], "dev")
    return wb


def long_readings(values: np.ndarray, ids: list[str], readers: list[str], labels: list[str]) -> pd.DataFrame:
    """Every reading of the full panel as a long frame."""
    r, k, j = np.meshgrid(np.arange(len(ids)), np.arange(len(readers)), np.arange(len(labels)), indexing="ij")
    return pd.DataFrame(
        {
            "report_id": np.asarray(ids)[r.ravel()],
            "label": np.asarray(labels)[j.ravel()],
            "reader": np.asarray(readers)[k.ravel()],
            "value": values.ravel(),
        }
    )


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
            pick = free[0] if order == "cohort" else free[np.lexsort((seq[free], -readers[free], group()[free]))[0]]
            read[pick, k] = True
            readers[pick] += 1
            reads.append((k, pick))
            who = read[pick]  # report_status for one report, without building a frame (no escalation here)
            _, _, final = adaptive.settled_vote(
                values[pick][who].sum(axis=0), np.full(len(labels), who.sum()), rule, rule.n
            )
            is_open[pick] = (not final.all() or (sample[pick] and readers[pick] < rule.n)) and readers[pick] < rule.n
    return reads, read


def counts_of(values: np.ndarray, read: np.ndarray, ids: list[str], labels: list[str]) -> pd.DataFrame:
    """Vote counts (report_id, label, positives, n_readers) of the readings a read mask selects."""
    positives = np.einsum("rkl,rk->rl", values, read.astype(int))
    n = np.repeat(read.sum(axis=1), len(labels))
    frame = pd.DataFrame(
        {
            "report_id": np.repeat(ids, len(labels)),
            "label": np.tile(labels, len(ids)),
            "positives": positives.ravel(),
            "n_readers": n,
        }
    )
    return frame[frame["n_readers"] > 0]


def time_next_report(wb, values, ids, readers, labels, reads, calls: int) -> tuple[list[float], list[float], int]:
    """Import the first half of the replay's reads, then time `calls` next-report queries (each followed by its reading)."""
    half = reads[: len(reads) // 2]
    rows = [(ids[i], lab, readers[k], int(v)) for k, i in half for lab, v in zip(labels, values[i, k], strict=False)]
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
        wb.submit_reading(
            readers[reader_k], report, dict(zip(labels, values[index[report], reader_k].tolist(), strict=False))
        )
        made += 1
    return times, cpu, same


def demo_figures(rule) -> list[str]:
    """The same in-memory replay on the demo study's own readings (180 reports x 6 readers x 20 labels)."""
    readings = pd.read_csv(shipped_dir("annotations") / "demo" / "readings.csv")
    ids, labels, readers = (sorted(readings[c].unique()) for c in ("report_id", "label", "reader"))
    grid = readings.pivot_table(index=["report_id", "reader"], columns="label", values="value")
    values = (
        grid.reindex(pd.MultiIndex.from_product([ids, readers]))[labels].to_numpy().reshape(len(ids), len(readers), -1)
    )
    out = []
    for share in (0.0, 0.2):
        sample = np.random.default_rng(0).uniform(size=len(ids)) < share
        reads, _ = simulate_replay(values.astype(int), rule, labels, sample)
        total = len(ids) * len(readers)
        out.append(f"{(total - len(reads)) / total:.1%} ({total - len(reads)} of {total}) with a {share:.0%} sample")
    return out


def oracle_reads(values: np.ndarray, rule, sample: np.ndarray) -> int:
    """The fewest reads any choice of readers could make: per report outside the sample, the smallest set of its
    readers whose values already settle every label (found knowing every reader's values, which no blinded order
    can know); the sample's reports keep all N. A bound, not a schedule."""
    n_reports, n_readers, n_labels = values.shape
    best = np.full(n_reports, n_readers)
    for mask in range(1, 2**n_readers):
        who = np.array([(mask >> k) & 1 for k in range(n_readers)], dtype=bool)
        positives = values[:, who, :].sum(axis=1)
        _, _, final = adaptive.settled_vote(positives.ravel(), np.full(positives.size, who.sum()), rule, rule.n)
        settled = final.reshape(n_reports, n_labels).all(axis=1)
        best = np.where(settled, np.minimum(best, who.sum()), best)
    best[sample] = rule.n
    return int(best.sum())


def check_reference(
    values: np.ndarray, read: np.ndarray, ids: list[str], labels: list[str], rule
) -> tuple[int, int, int, int]:
    """(items changed, items, decided, waiting): the adaptive reads' reference against the full panel's, item by item."""
    from workbench.core.reference import reference_from_counts

    key = ["report_id", "label"]
    want = reference_from_counts(counts_of(values, np.ones(read.shape, dtype=bool), ids, labels), rule)
    want = want.set_index(key)[["value", "status"]]
    got = reference_from_counts(counts_of(values, read, ids, labels), rule, panel=rule.n).set_index(key)
    got = got[["value", "status"]].reindex(want.index)
    same_value = (got["value"] == want["value"]) | (got["value"].isna() & want["value"].isna())
    changed = int((~same_value | (got["status"] != want["status"])).sum())
    return changed, len(want), int(want["value"].notna().sum()), int(want["value"].isna().sum())


def bench_rule(kind: str, profile: Profile, tmp: Path, args) -> dict:
    """One rule on one profile: the study, its agreement sample, the replays, the guarantee check and the timing."""
    wb = make_study(tmp / f"{profile.name}-{kind}", profile.inputs, args.db, kind)
    labels = list(wb.vocab.asked_ids)
    assert labels == profile.labels, "the simulated values follow the vocabulary's asked labels, in its order"
    ids = pd.read_csv(profile.inputs["reports"])["id"].astype(str).tolist()
    readers = _reader_names(args)
    start = time.perf_counter()
    wb.start_run("dev")  # the offline labeller: the agreement sample is stratified by its predictions
    print(f"[{profile.name}, {kind}] offline labeller: {time.perf_counter() - start:.1f} s", flush=True)
    wb.set_adaptive(enabled=True, agreement_share=0.2, seed=0)
    wb.work_list(readers[0], "dev")  # draws the agreement sample
    sample_ids = set(wb.agreement_sample_reports("dev"))
    sample = np.array([r in sample_ids for r in ids])
    rule = wb.rule()
    values = profile.values
    start = time.perf_counter()
    reads, read = simulate_replay(values, rule, labels, sample)
    print(
        f"[{profile.name}, {kind}] adaptive replay in memory: {len(reads):,} reads in {time.perf_counter() - start:.0f} s",
        flush=True,
    )
    changed, items, decided, waiting = check_reference(values, read, ids, labels, rule)
    total = len(ids) * len(readers)
    saved = lambda n: f"{(total - n) / total:.1%}"  # noqa: E731
    perfect = np.repeat(profile.truth[:, None, :], len(readers), axis=1)
    extra = {
        "readers who never err (a bound)": saved(len(simulate_replay(perfect, rule, labels, sample)[0])),
        "an oracle picking readers by value (a bound)": saved(oracle_reads(values, rule, sample)),
        "without an agreement sample": saved(
            len(simulate_replay(values, rule, labels, np.zeros(len(ids), dtype=bool))[0])
        ),
    }
    for name, (other, other_labels) in profile.variants.items():
        extra[name] = saved(len(simulate_replay(other, rule, other_labels, sample)[0]))
    times, cpu, same = time_next_report(wb, values, ids, readers, labels, reads, args.calls)
    out = {
        "rule": rule,
        "profile": profile,
        "total": total,
        "reads": len(reads),
        "extra": extra,
        "changed": changed,
        "items": items,
        "decided": decided,
        "waiting": waiting,
        "spread": pd.Series(read.sum(axis=1)[~sample]).value_counts().sort_index(),
        "none": float((profile.truth.sum(axis=1) == 0).mean()),
        "wall": np.asarray(times),
        "cpu": np.asarray(cpu),
        "same": same,
        "dialect": wb.engine.dialect.name,
        "sample_ids": sample_ids,
        "ids": ids,
        "readers": readers,
        "labels": labels,
    }
    wb.engine.dispose()
    return out


def _ms(a: np.ndarray, q: float) -> str:
    return f"{np.percentile(a, q) * 1000:.1f} ms"


def print_side_by_side(results: list[dict]) -> None:
    """The figures of each profile and rule in one column each."""
    width, col = 48, 32
    names = list(dict.fromkeys(name for r in results for name in r["extra"]))
    rows = [
        (
            "reads saved",
            lambda r: f"{(r['total'] - r['reads']) / r['total']:.1%} ({r['total'] - r['reads']:,} of {r['total']:,})",
        )
    ]
    rows += [(f"  {name}", lambda r, name=name: r["extra"].get(name, "")) for name in names]
    rows += [
        (
            "  outside the sample, closed after",
            lambda r: ", ".join(f"{int(k)}: {int(v):,}" for k, v in r["spread"].items()),
        ),
        ("reference items changed", lambda r: f"{r['changed']} of {r['items']:,}"),
        ("  decided / waiting (full panel)", lambda r: f"{r['decided']:,} / {r['waiting']:,}"),
        ("reports with no finding (truth)", lambda r: f"{r['none']:.1%}"),
        ("next report, wall median / p95", lambda r: f"{_ms(r['wall'], 50)} / {_ms(r['wall'], 95)}"),
        ("next report, CPU median / p95", lambda r: f"{_ms(r['cpu'], 50)} / {_ms(r['cpu'], 95)}"),
        ("  same report as the replay", lambda r: f"{r['same']} of {len(r['wall'])} ({r['dialect']})"),
    ]
    print()
    print(" " * width + "".join(f"{r['profile'].name + ', ' + r['rule'].kind:<{col}}" for r in results))
    for name, cell in rows:
        print(f"{name:<{width}}" + "".join(f"{cell(r):<{col}}" for r in results))


def print_profiles(profiles: list[Profile], dataset: Path | None) -> None:
    """Per label: each profile's prevalence (its truth), beside OpenI's labels14 gold standard where it has the label."""
    print("\nprevalence per label (the truth the readers read)")
    gold = openi_profile.labels14_figures(dataset) if dataset else None
    back = {lab: col for col, lab in openi_profile.LABELS14.items()}
    labels = list(dict.fromkeys(lab for p in profiles for lab in p.labels))
    header = "".join(f"{p.name:>10}" for p in profiles) + ("   labels14.csv" if gold else "")
    print(f"  {'label':<30}{header}")
    for lab in labels:
        cells = "".join(
            f"{p.truth[:, p.labels.index(lab)].mean():>10.1%}" if lab in p.labels else f"{'derived':>10}"
            for p in profiles
        )
        if gold is not None:  # the labels14 column(s) naming the finding, or one heading of several it has
            cols = (
                [back[lab]]
                if lab in back
                else {
                    "lung_lesion": ["Mass", "Nodule"],
                    "lung_opacity": ["Infiltration"],
                    "pleural_other": ["Pleural_Thickening"],
                    "mediastinal_other": ["Hernia"],
                }.get(lab, [])
            )
            if cols:
                cells += f"   {gold['any'](cols):.1%} ({' or '.join(cols)}{'' if lab in back or lab == 'lung_lesion' else ', one heading of it'})"
        print(f"  {lab:<30}{cells}")
    print(
        f"  {'mean over labels':<30}"
        + "".join(f"{p.truth.mean():>10.1%}" for p in profiles)
        + (f"   {gold['prevalence'].mean():.1%} (14 labels)" if gold else "")
    )
    print(
        f"  {'reports with no positive label':<30}"
        + "".join(f"{(p.truth.sum(axis=1) == 0).mean():>10.1%}" for p in profiles)
        + (f"   {gold['none']:.1%} (of its 14 labels; 'normal' {gold['normal']:.1%})" if gold else "")
    )
    for p in profiles:
        print(f"  {p.name} readers: {p.readers}")
    if dataset:
        table = (
            openi_profile.truth(dataset, next(p for p in profiles if p.name == "openi").labels)
            if any(p.name == "openi" for p in profiles)
            else None
        )
        if table is not None:
            agree = openi_profile.check_against_labels14(dataset, table)
            print(
                f"  the MeSH mapping against labels14.csv (all {len(table):,} reports): agreement "
                + ", ".join(f"{k} {v:.1%}" for k, v in agree.items())
            )


def print_kappa(values: np.ndarray, result: dict) -> None:
    """Fleiss kappa per label on the agreement sample beside the full panel (the same for every rule)."""
    ids, sample_ids = result["ids"], result["sample_ids"]
    full = long_readings(values, ids, result["readers"], result["labels"])
    mine = fleiss_interval(full[full["report_id"].isin(sample_ids)])
    panel = fleiss_interval(full)
    inside = int(((panel["kappa"] >= mine["lo"]) & (panel["kappa"] <= mine["hi"])).sum())
    print(
        f"\n[{result['profile'].name}] Fleiss kappa per label: agreement sample (n = {len(sample_ids):,} reports, "
        f"{len(sample_ids) / len(ids):.0%}, full overlap) beside the full panel (n = {len(ids):,}), 95% bootstrap intervals"
    )
    for label in result["labels"]:
        a, b = mine.loc[label], panel.loc[label]
        print(
            f"  {label:<38} {a['kappa']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}]   {b['kappa']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}]"
        )
    print(f"  {'mean over labels':<38} {mine['kappa'].mean():.3f}                   {panel['kappa'].mean():.3f}")
    print(f"  the full panel's kappa lies inside the sample's interval for {inside} of {len(mine)} labels")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule", choices=("both", *RULES), default="both", help="the 4-of-6 rule(s) to run")
    parser.add_argument(
        "--profile",
        choices=("both", *PROFILES),
        default="both",
        help="prevalence profile(s); openi needs the OpenI dataset",
    )
    parser.add_argument("--reports", type=int, default=3000)
    parser.add_argument("--readers", type=int, default=6)
    parser.add_argument("--calls", type=int, default=200, help="next-report queries timed on the database")
    parser.add_argument(
        "--db",
        default=None,
        help="a database URL for the study (default: SQLite in the study); one rule and one profile at a time",
    )
    args = parser.parse_args()
    kinds = RULES if args.rule == "both" else (args.rule,)
    names = PROFILES if args.profile == "both" else (args.profile,)
    dataset = openi_profile.dataset_dir()
    if "openi" in names and dataset is None:
        if args.profile == "openi":
            sys.exit("the openi profile needs the OpenI dataset (WORKBENCH_DATASETS or ../shared/datasets)")
        print("OpenI dataset not found (WORKBENCH_DATASETS or ../shared/datasets): the openi profile is left out")
        names = ("uniform",)
    if args.db and len(kinds) * len(names) > 1:
        parser.error("--db holds one study: give one --rule and one --profile with it")
    print(
        f"load average at the start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} cores)",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        profiles = [
            uniform_profile(tmp / "uniform", args)
            if name == "uniform"
            else openi_profile_of(tmp / "openi", dataset, args)
            for name in names
        ]
        results = [bench_rule(kind, profile, tmp, args) for profile in profiles for kind in kinds]
    print()
    for r in results:
        print(
            f"[{r['profile'].name}, {r['rule'].kind}] reads saved: {(r['total'] - r['reads']) / r['total']:.1%} "
            f"({r['total'] - r['reads']} of {r['total']})"
        )
        print(f"[{r['profile'].name}, {r['rule'].kind}] reference items changed: {r['changed']}")
    print_side_by_side(results)
    for kind in kinds:
        print(
            f"demo study's readings (180 x 6 x 20), {kind}, saved: "
            + "; ".join(demo_figures(next(r for r in results if r["rule"].kind == kind)["rule"]))
        )
    print_profiles(profiles, dataset)
    for profile in profiles:
        first = next(r for r in results if r["profile"] is profile)
        print_kappa(profile.values, first)
        if any(r["sample_ids"] != first["sample_ids"] for r in results if r["profile"] is profile):
            print("  (the rules' agreement samples differ: the figures above are the first rule's)")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def _reader_names(args) -> list[str]:
    """The simulated readers' names."""
    return [f"reader-{c}" for c in "abcdefgh"[: args.readers]]


def _labels(inputs: dict) -> list[str]:
    """The asked labels of the generated vocabulary, in its order."""
    return [lab["id"] for lab in yaml.safe_load(Path(inputs["vocab"]).read_text())["labels"]]


if __name__ == "__main__":
    main()
