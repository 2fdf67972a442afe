"""Benchmark of attribute extraction (side, severity) by the offline labeller on OpenI against the MeSH gold.

The OpenI file here is the development split (3,080 reports; the maintainers keep a held-out split
with its MeSH gold apart): the targets apply to the whole file. It is also split as a study would
split it (stratified 70/30 on the labels14.csv gold, seed 0) and each part is printed: the cue
rules were reviewed on misses of the tuning part, so the validation part shows whether they hold
on reports the review read less (not untouched: see docs/attributes.md). The labeller is the offline
rule-based one with the chestxray14 starter prompts and their attribute cues; the attribute gold
is the MeSH qualifiers of reports.csv ("Pleural Effusion/right/small"). Scored on matched findings
only (labeller and labels14 gold both positive): accuracy with 95% Wilson intervals and n, and
coverage = the share of gold attribute values the labeller gave a value.

Run alone: ``python bench/bench_attributes.py [--split whole|tuning|validation|all] [--confusion]``.
Targets on the development split (the whole file): side >= 0.92, severity >= 0.75, coverage >= 0.85.

OpenI has no gold for `change` (MeSH carries no comparison): the bench also prints the change
accuracy on tests/data/attribute_change.csv, 20 sentences written by hand with their expected
presence and change. It is a fixture, not gold: a check of the cue lists, not a measurement.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import pandas as pd
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench import rules  # noqa: E402
from workbench.core import attributes as attrs  # noqa: E402
from workbench.core.prompts import parse_prompt_set  # noqa: E402
from workbench.core.splits import stratified_split  # noqa: E402
from workbench.core.vocab import parse_vocabulary  # noqa: E402
from workbench.shipped import shipped_dir  # noqa: E402

DATASET = next(
    (
        p
        for p in (ROOT.parent / "shared" / "datasets" / "openi", pathlib.Path("/work/shared/datasets/openi"))
        if p.exists()
    ),
    ROOT.parent / "shared" / "datasets" / "openi",
)
PROMPTS = shipped_dir("prompts") / "chestxray14"
VOCAB = shipped_dir("vocab") / "chestxray14.yaml"
TARGETS = {"side": 0.92, "severity": 0.75}
TARGET_COVERAGE = 0.85
CHANGE_FIXTURE = ROOT / "tests" / "data" / "attribute_change.csv"


def load(folder: pathlib.Path):
    """Vocabulary, prompt set, report texts, labels14 presence gold and MeSH attribute gold (long)."""
    if not (folder / "reports.csv").exists() or not (folder / "labels14.csv").exists():
        sys.exit(f"OpenI dataset not found at {folder} (needs reports.csv and labels14.csv)")
    vocab = parse_vocabulary(yaml.safe_load(VOCAB.read_text()), str(VOCAB))
    files = {p.name: yaml.safe_load(p.read_text()) for p in sorted(PROMPTS.glob("*.yaml"))}
    ps = parse_prompt_set(files, vocab.asked_ids, attributes=vocab.attribute_specs())
    reports = pd.read_csv(folder / "reports.csv")
    ids = reports["uid"].astype(str).tolist()
    texts = dict(
        zip(
            ids,
            (
                "\n".join(str(x).strip() for x in (f, i) if isinstance(x, str) and x.strip())
                for f, i in zip(reports["findings"], reports["impression"], strict=False)
            ),
            strict=False,
        )
    )
    gold = pd.read_csv(folder / "labels14.csv")
    gold.index = gold["filename"].str.replace("CXR", "", regex=False)
    presence = pd.DataFrame({lab: gold[vocab.names()[lab]] for lab in vocab.asked_ids}).reindex(ids)
    specs = vocab.attribute_specs()
    rows = [
        (rid, lab, a, v)
        for rid, mesh in zip(ids, reports["MeSH"].fillna(""), strict=False)
        for lab, found in attrs.mesh_attributes(mesh, specs).items()
        for a, v in found.items()
    ]
    return vocab, ps, texts, presence, pd.DataFrame(rows, columns=["report_id", "label", "attribute", "value"])


def label(ps, texts: dict[str, str]):
    """Offline labeller presence (reports x labels) and attributes (long), with evidence clauses."""
    cues, rows, values = ps.task.cue_lists(), [], {}
    for rid, text in texts.items():
        answers = rules.label_report(text, ps.labels.values(), cues, ps.attributes)
        values[rid] = {lab: a["value"] for lab, a in answers.items()}
        rows += [
            (rid, lab, name, v, a["evidence"])
            for lab, a in answers.items()
            for name, v in a.get("attributes", {}).items()
        ]
    return (
        pd.DataFrame.from_dict(values, orient="index"),
        pd.DataFrame(rows, columns=["report_id", "label", "attribute", "value", "evidence"]),
    )


def report(name: str, ids: list[str], presence, gold_attrs, pred, pred_attrs, specs, confusion: bool) -> dict:
    """Print the per-label table of one split; return the pooled figures."""
    matched = attrs.matched_rows(pred.loc[ids], presence.loc[ids], pred_attrs, gold_attrs, specs)
    matched = matched[matched["attribute"].isin(TARGETS)]
    table = attrs.attribute_accuracy(matched)
    table = table[table["reference"] > 0]
    print(
        f"\n== {name}: {len(ids)} reports; matched findings = labeller and labels14 gold both positive; "
        "n = both gave a value; reference = MeSH gave a value"
    )
    shown = table.assign(
        accuracy_ci=[f"[{lo:.3f}, {hi:.3f}]" for lo, hi in zip(table.accuracy_lo, table.accuracy_hi, strict=False)]
    )
    with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 140):
        print(
            shown[["label", "attribute", "reference", "n", "correct", "accuracy", "accuracy_ci", "coverage"]].to_string(
                index=False
            )
        )
    pooled = table[table["label"] == "all"].set_index("attribute")
    both = pooled[["reference", "n"]].sum()
    out = {a: pooled.loc[a, "accuracy"] for a in TARGETS if a in pooled.index}
    out["coverage"] = both["n"] / both["reference"] if both["reference"] else float("nan")
    line = "  ".join(f"{a} {out[a]:.3f} (target {t})" for a, t in TARGETS.items() if a in out)
    print(
        f"pooled: {line}  coverage {out['coverage']:.3f} ({int(both['n'])}/{int(both['reference'])}, "
        f"target {TARGET_COVERAGE})"
    )
    if confusion:
        for a in TARGETS:
            print(
                attrs.confusion(matched, attribute=a).groupby(["reference", "value"])["n"].sum().unstack(fill_value=0)
            )
    return out


def change_on_fixture(ps) -> None:
    """Print the offline labeller's change accuracy on the hand-written fixture (no OpenI gold exists)."""
    from workbench.core.metrics import proportion_ci

    rows = pd.read_csv(CHANGE_FIXTURE, keep_default_na=False)
    cues = ps.task.cue_lists()
    got = [
        rules.label_one(t, ps.label(lab), cues, ps.attributes[lab])
        for t, lab in zip(rows["text"], rows["label"], strict=False)
    ]
    right = [
        (a["value"], a.get("attributes", {}).get("change") or "") == (int(v), c)
        for a, v, c in zip(got, rows["value"], rows["change"], strict=False)
    ]
    k, n = sum(right), len(right)
    lo, hi = proportion_ci(k, n)
    print(
        f"\n== change (FIXTURE, not gold: {n} hand-written sentences in {CHANGE_FIXTURE.relative_to(ROOT)}): "
        f"presence and change both as expected {k}/{n} = {k / n:.3f} [95% Wilson {lo:.3f}, {hi:.3f}]"
    )
    for a, ok, text in zip(got, right, rows["text"], strict=False):
        if not ok:
            print(f"   wrong: {text!r} -> {a}")


def main(argv: list[str] | None = None) -> int:
    """Label OpenI once, score side and severity per split; print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=pathlib.Path, default=DATASET, help="folder with reports.csv and labels14.csv")
    ap.add_argument("--split", choices=("whole", "tuning", "validation", "all"), default="all")
    ap.add_argument("--confusion", action="store_true", help="print the confusion of values per attribute")
    args = ap.parse_args(argv)
    vocab, ps, texts, presence, gold_attrs = load(args.dataset)
    pred, pred_attrs = label(ps, texts)
    parts = stratified_split(presence.fillna(0).astype(int), 0.3, seed=0)
    split = {
        "whole": list(presence.index),
        "tuning": [r for r in presence.index if parts.get(r) == "tuning"],
        "validation": [r for r in presence.index if parts.get(r) == "validation"],
    }
    print(
        f"offline labeller, chestxray14 starter prompts; MeSH attribute gold: "
        f"{len(gold_attrs)} values ({gold_attrs['attribute'].value_counts().to_dict()})"
    )
    for name in split if args.split == "all" else [args.split]:
        report(name, split[name], presence, gold_attrs, pred, pred_attrs, vocab.attribute_specs(), args.confusion)
    change_on_fixture(ps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
