"""Benchmark of the offline rule-based labeller on the OpenI reports with the ChestX-ray14 starter prompts.

Prints the labelling speed (reports per second on one core, target >= 500) and the per-label
precision, recall, F1 and support against the OpenI gold standard (labels14.csv), with micro
and macro F1. Run alone: ``python bench/bench_offline_labeller.py [--wait SECONDS]``.
The reports are real; the figures describe the rule-based baseline, not an LLM.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import pandas as pd
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench import rules  # noqa: E402
from workbench.core.prompts import parse_prompt_set  # noqa: E402
from workbench.core.vocab import parse_vocabulary  # noqa: E402
from workbench.shipped import shipped_dir  # noqa: E402

DATASET = ROOT.parent / "shared" / "datasets" / "openi"
PROMPTS = shipped_dir("prompts") / "chestxray14"
VOCAB = shipped_dir("vocab") / "chestxray14.yaml"
TARGET_RPS = 500


def load_reports(folder: pathlib.Path) -> tuple[list[str], pd.DataFrame]:
    """Report texts (findings + impression) and the gold table (rows keyed CXR<uid>)."""
    if not (folder / "reports.csv").exists() or not (folder / "labels14.csv").exists():
        sys.exit(
            f"OpenI dataset not found at {folder} (needs reports.csv and labels14.csv); see "
            "../shared/datasets/README.md"
        )
    reports = pd.read_csv(folder / "reports.csv")
    gold = pd.read_csv(folder / "labels14.csv").set_index("filename")
    keys = "CXR" + reports["uid"].astype(str)
    missing = (~keys.isin(gold.index)).sum()
    if missing:
        sys.exit(f"{missing} reports have no row in labels14.csv")
    texts = [report_text(f, i) for f, i in zip(reports["findings"], reports["impression"], strict=False)]
    return texts, gold.loc[keys]


def report_text(findings, impression) -> str:
    """The text the labeller reads: findings then impression, one per line, blanks left out."""
    return "\n".join(str(x).strip() for x in (findings, impression) if isinstance(x, str) and x.strip())


def wait_for(paths: list[pathlib.Path], seconds: float) -> None:
    """Poll until every path exists (the starter prompts may still be being written)."""
    deadline = time.monotonic() + seconds
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            missing = ", ".join(str(p) for p in paths if not p.exists())
            sys.exit(f"still missing after {seconds:.0f} s: {missing}")
        print("waiting for " + ", ".join(str(p) for p in paths if not p.exists()), file=sys.stderr)
        time.sleep(15)


def load_prompts(wait_s: float):
    """Vocabulary and parsed starter prompt set, retrying while the files are incomplete."""
    wait_for([VOCAB, PROMPTS / "_task.yaml"], wait_s)
    deadline = time.monotonic() + wait_s
    while True:
        vocab = parse_vocabulary(yaml.safe_load(VOCAB.read_text()), str(VOCAB))
        files = {p.name: yaml.safe_load(p.read_text()) for p in sorted(PROMPTS.glob("*.yaml"))}
        try:
            return vocab, parse_prompt_set(files, vocab.asked_ids)
        except Exception as exc:  # noqa: BLE001 - files may be half-written; report after the deadline
            if time.monotonic() > deadline:
                sys.exit(f"prompt set {PROMPTS} does not parse: {exc}")
            print(f"prompt set not ready ({exc}); waiting", file=sys.stderr)
            time.sleep(15)


def gold_columns(vocab, gold: pd.DataFrame) -> dict[str, str]:
    """label id -> labels14.csv column, matched through the vocabulary's display names."""
    out = {}
    for col in gold.columns:
        label_id = vocab.resolve(col)
        if label_id is not None:
            out[label_id] = col
    missing = [i for i in vocab.asked_ids if i not in out]
    if missing:
        sys.exit(f"no labels14.csv column for label(s) {', '.join(missing)}")
    return out


def label_all(texts: list[str], prompts: list, cues: dict) -> tuple[np.ndarray, float]:
    """reports x labels 0/1 predictions and the elapsed seconds (cold caches)."""
    rules.clear_caches()
    pred = np.zeros((len(texts), len(prompts)), dtype=np.int8)
    start = time.perf_counter()
    for r, text in enumerate(texts):
        for c, lp in enumerate(prompts):
            pred[r, c] = rules.label_one(text, lp, cues)["value"]
    return pred, time.perf_counter() - start


def engine_rate(texts: list[str], prompts: list, cues: dict) -> float | None:
    """Reports per second through rules.complete_all with one per-label request per (report, label)."""
    try:
        from workbench.labeller.llm import CallRequest, ModelConfig
    except ImportError:
        return None
    rules.clear_caches()
    reqs = [
        CallRequest(f"{r}:{lp.label}", [], {"report": t, "mode": "per_label", "prompts": [lp], "cues": cues})
        for r, t in enumerate(texts)
        for lp in prompts
    ]
    seen = []
    start = time.perf_counter()
    rules.complete_all(reqs, ModelConfig(model=rules.RULES_MODEL), lambda req, res: seen.append(res))
    elapsed = time.perf_counter() - start
    assert len(seen) == len(reqs)
    return len(texts) / elapsed


def scores(pred: np.ndarray, gold: np.ndarray, names: list[str]) -> pd.DataFrame:
    """Per-label TP/FP/FN, precision, recall, F1 and support, plus micro and macro rows (zero_division=0)."""
    tp = ((pred == 1) & (gold == 1)).sum(axis=0)
    fp = ((pred == 1) & (gold == 0)).sum(axis=0)
    fn = ((pred == 0) & (gold == 1)).sum(axis=0)
    table = pd.DataFrame({"tp": tp, "fp": fp, "fn": fn, "support": tp + fn}, index=names)
    table = _prf(table)
    macro = table[["precision", "recall", "f1"]].mean()
    micro = _prf(table[["tp", "fp", "fn", "support"]].sum().to_frame().T).iloc[0]
    table.loc["micro"] = micro
    table.loc["macro"] = [np.nan] * 4 + list(macro)
    return table


def _prf(t: pd.DataFrame) -> pd.DataFrame:
    """Add precision, recall and F1 columns (0 where undefined, as sklearn's zero_division=0)."""
    t = t.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        t["precision"] = np.where(t.tp + t.fp > 0, t.tp / (t.tp + t.fp), 0.0)
        t["recall"] = np.where(t.tp + t.fn > 0, t.tp / (t.tp + t.fn), 0.0)
        denom = t.precision + t.recall
        t["f1"] = np.where(denom > 0, 2 * t.precision * t.recall / denom, 0.0)
    return t


def main(argv: list[str] | None = None) -> int:
    """Load, label, time and score; print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wait", type=float, default=1500, help="seconds to wait for the prompt files (default 1500)")
    ap.add_argument("--dataset", type=pathlib.Path, default=DATASET, help="folder with reports.csv and labels14.csv")
    args = ap.parse_args(argv)
    texts, gold = load_reports(args.dataset)
    vocab, ps = load_prompts(args.wait)
    cols = gold_columns(vocab, gold)
    ids = vocab.asked_ids
    prompts = [ps.label(i) for i in ids]
    pred, elapsed = label_all(texts, prompts, ps.task.cue_lists())
    rps = len(texts) / elapsed
    print(
        f"offline rule-based labeller (not an LLM): {len(texts)} OpenI reports x {len(ids)} labels "
        f"in {elapsed:.2f} s on one core = {rps:,.0f} reports/s "
        f"({'meets' if rps >= TARGET_RPS else 'BELOW'} the {TARGET_RPS}/s target)"
    )
    via_engine = engine_rate(texts, prompts, ps.task.cue_lists())
    if via_engine is not None:
        print(
            f"through complete_all ({len(texts) * len(ids):,} per-label requests, JSON replies): "
            f"{via_engine:,.0f} reports/s"
        )
    names = [vocab.names()[i] for i in ids]
    table = scores(pred, gold[[cols[i] for i in ids]].to_numpy(), names)
    with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 120):
        print(
            table[["precision", "recall", "f1", "support", "tp", "fp", "fn"]].to_string(
                formatters={k: "{:.0f}".format for k in ("support", "tp", "fp", "fn")}, na_rep=""
            )
        )
    per_label = table.iloc[:-2]
    empty = list(per_label.index[per_label.support == 0])
    print(
        f"micro F1 {table.loc['micro', 'f1']:.3f}  macro F1 {table.loc['macro', 'f1']:.3f} "
        "(zero_division=0: a label without gold or predicted positives scores 0)"
    )
    if empty:
        print(
            f"macro F1 leaving out labels with no gold positive ({', '.join(empty)}): "
            f"{per_label.f1[per_label.support > 0].mean():.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
