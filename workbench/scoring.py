"""Score generated reports against reference reports with a frozen bundle (Ran Score).

Both sides are labelled with the bundle's prompts; per label TP, FP (invented findings), FN
(missed findings), precision, recall, F1 and support; micro and macro averages; Ran Score =
macro F1 over the vocabulary's labels under a stated zero-division policy, with a bootstrap
interval over reports. Usable without a study: `from workbench import score`.

Report text goes only where the command allows: the bundle's own local endpoint (recorded at
freeze time), endpoints the caller allows (--allow-endpoint, a study's list with --study), or
the offline labeller; the result says where it went.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from workbench import importers
from workbench.bundle import Bundle, load_bundle
from workbench.core import attributes as attribute_scores
from workbench.core import metrics
from workbench.core.export import json_records, to_csv  # formula cells neutralised (CSV injection)
from workbench.core.text import compose_text
from workbench.errors import UserError, WorkbenchError
from workbench.labeller import endpoints
from workbench.labeller.endpoints import is_offline
from workbench.labeller.labelling import (
    ExtractionCache,
    MemoryCache,
    label_texts,
    label_texts_with_attributes,
    model_config,
    nan_to_none,
)
from workbench.labeller.llm import EndpointError, check_model_name
from workbench.shipped import shipped_dir

ZERO_DIVISION_CHOICES = ("zero", "one", "exclude")
MAX_FAILED_SHARE = 0.10  # above this share of failed extractions a generator gets no score
POLICY_TEXT = {
    "zero": "a label with no positive in either the reference or the generated reports scores F1 = 0 "
    "(as the released Ran Score script, zero_division=0)",
    "one": "a label with no positive on either side scores F1 = 1 (nothing to find, nothing invented)",
    "exclude": "a label with no positive on either side is left out of the macro average (counted and reported)",
}


DEFAULT_PAIRS = shipped_dir("annotations") / "robustness" / "pairs.csv"  # written for ranscore-21's labels


class EndpointNotAllowed(WorkbenchError, ValueError):
    """Report text would be sent to an endpoint this scoring command does not allow."""


@dataclass(frozen=True)  # compared by its fields: two scorings of the same data give equal scores
class RanScore:
    """One generator's Ran Score: macro F1 over the vocabulary's labels with a bootstrap interval.

    estimate, lo and hi are None when the generator gets no score (no_score says why)."""

    estimate: float | None
    lo: float | None
    hi: float | None
    n_resamples: int
    interval: str  # how the interval was made (bias-corrected percentile bootstrap over reports)
    seed: int
    labels: int  # labels in the vocabulary
    labels_undefined: int  # labels with no positive on either side
    labels_used: int  # labels in the macro average under the policy
    policy: str  # the zero-division policy in words
    pairs_total: int  # (report, label) pairs
    pairs_scored: int  # pairs with an extraction on both sides
    failed_share: float
    failed_generated: int
    failed_reference: int
    no_score: str  # "" when scored


@dataclass(frozen=True, eq=False)
class GeneratorScore:
    """The scores of one generator: its Ran Score, per-label and per-report tables, averages."""

    name: str
    per_label: pd.DataFrame  # index label: support, tp, fp, fn, tn, precision, recall, f1, ...
    averages: dict  # micro and macro accuracy, precision, recall, F1
    ran_score: RanScore
    per_report: pd.DataFrame  # one row per report: invented and missed findings
    stats: dict  # texts, extracted, reused from cache, failures
    # accuracy per (label, attribute) on matched findings (empty when the bundle's vocabulary has no attributes)
    attributes: pd.DataFrame = field(default_factory=pd.DataFrame)
    report_errors: dict = field(default_factory=dict)  # presence FP + FN + attribute mismatches, with its rule
    # the same count per finding label (support, fp, fn, attribute_mismatches, errors) and an `all` row
    report_errors_by_label: pd.DataFrame = field(default_factory=pd.DataFrame)


@dataclass(frozen=True, eq=False)
class ScoreResult:
    """Scores of every generator (name -> GeneratorScore) against one reference, and how they were obtained."""

    bundle_sha: str
    bundle_name: str
    model: str
    zero_division: str
    reference_stats: dict
    generators: dict = field(default_factory=dict)
    endpoint: str = ""
    max_failed_share: float = MAX_FAILED_SHARE

    def unscored(self) -> dict[str, str]:
        """Generators with no score (too many failed extractions) and why."""
        return {name: g.ran_score.no_score for name, g in self.generators.items() if g.ran_score.no_score}

    def summary(self) -> pd.DataFrame:
        """Side-by-side table like the paper's Table 5 (one row per generator)."""
        rows = []
        for name, g in self.generators.items():
            a, r = g.averages, g.ran_score
            rows.append(
                {
                    "generator": name,
                    "reports": g.stats["texts"],
                    "micro_accuracy": a["micro_accuracy"],
                    "micro_precision": a["micro_precision"],
                    "micro_recall": a["micro_recall"],
                    "micro_f1": a["micro_f1"],
                    "macro_accuracy": a["macro_accuracy"],
                    "macro_precision": a["macro_precision"],
                    "macro_recall": a["macro_recall"],
                    "macro_f1": a["macro_f1"],
                    "ran_score": r.estimate,
                    "ran_score_lo": r.lo,
                    "ran_score_hi": r.hi,
                    "invented_findings_fp": int(g.per_label["fp"].sum()),
                    "missed_findings_fn": int(g.per_label["fn"].sum()),
                    "pairs_scored": r.pairs_scored,
                    "pairs_total": r.pairs_total,
                    "failed_generated": r.failed_generated,
                    "failed_reference": r.failed_reference,
                    **_attribute_summary(g),
                }
            )
        return pd.DataFrame(rows)

    def to_json(self) -> dict:
        """Everything as plain data."""
        return {
            "bundle": {"name": self.bundle_name, "sha256": self.bundle_sha},
            "model": self.model,
            "endpoint": self.endpoint,
            "zero_division": self.zero_division,
            "zero_division_policy": POLICY_TEXT[self.zero_division],
            "max_failed_share": self.max_failed_share,
            "unscored": self.unscored(),
            "reference": self.reference_stats,
            "summary": json_records(self.summary()),
            "generators": {
                name: {
                    "per_label": json_records(g.per_label.reset_index()),
                    "averages": g.averages,
                    "ran_score": dataclasses.asdict(g.ran_score),
                    "stats": g.stats,
                    "entity_f1": {
                        "per_label": json_records(g.per_label[["support", "tp", "fp", "fn", "f1"]].reset_index()),
                        "rule": ENTITY_F1_RULE,
                    },
                    "attributes": {
                        "per_label": json_records(g.attributes) if len(g.attributes) else [],
                        "rule": attribute_scores.ACCURACY_RULE,
                    },
                    "report_errors": {
                        **g.report_errors,
                        "per_label": json_records(g.report_errors_by_label) if len(g.report_errors_by_label) else [],
                    },
                }
                for name, g in self.generators.items()
            },
        }

    def write(self, out: Path) -> list[Path]:
        """CSV and JSON outputs in a folder, all or none (a full disk leaves no empty or cut file); returns them."""
        writers = {
            "summary.csv": lambda path: to_csv(self.summary(), path),
            "results.json": lambda path: path.write_text(
                json.dumps(self.to_json(), indent=2, ensure_ascii=False, default=str), encoding="utf-8"
            ),
        }
        for name, g in self.generators.items():
            safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
            writers[f"{safe}.per_label.csv"] = lambda path, g=g: to_csv(g.per_label.reset_index(), path)
            writers[f"{safe}.per_report.csv"] = lambda path, g=g: to_csv(g.per_report, path)
            if len(g.attributes):
                writers[f"{safe}.attributes.csv"] = lambda path, g=g: to_csv(g.attributes, path)
            if len(g.report_errors_by_label):
                writers[f"{safe}.report_errors.csv"] = lambda path, g=g: to_csv(g.report_errors_by_label, path)
        return write_all_or_none(out, writers)


def write_all_or_none(out: Path, writers: dict) -> list[Path]:
    """Each file is written to a temporary name beside it and renamed only once every one was written in full;
    on any failure the temporary files (and a folder made for them) are removed and the error goes on."""
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    temps = {out / name: out / f".{name}.partial" for name in writers}
    try:
        for temp, write in zip(temps.values(), writers.values(), strict=True):
            write(temp)
            with open(temp, "rb+") as handle:  # on disk before the rename makes it visible
                os.fsync(handle.fileno())
        for final, temp in temps.items():
            os.replace(temp, final)
    except BaseException:
        for temp in temps.values():
            temp.unlink(missing_ok=True)
        if made and not any(out.iterdir()):
            out.rmdir()
        raise
    return list(temps)


ENTITY_F1_RULE = (
    "entity F1 per label = 2TP / (2TP + FP + FN) over reports, a finding counted once per report "
    "whatever its attributes; support = reference positives"
)


def _attribute_summary(g: GeneratorScore) -> dict:
    """Summary columns: mean report-level errors and the pooled accuracy of each attribute."""
    out = {
        "mean_report_errors": g.report_errors.get("mean"),
        "report_errors": g.report_errors.get("total"),
        "report_errors_reports": g.report_errors.get("reports"),
    }
    if len(g.attributes):
        pooled = g.attributes[g.attributes["label"] == "all"]
        for row in pooled.itertuples(index=False):
            out[f"{row.attribute}_accuracy"] = row.accuracy
            out[f"{row.attribute}_n"] = int(row.n)
    return out


def _attribute_scores(
    b: Bundle, ref_labels: pd.DataFrame, gen_labels: pd.DataFrame, ref_attrs: pd.DataFrame, gen_attrs: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, dict, pd.DataFrame]:
    """(accuracy per label and attribute on matched findings, per-report errors, the report-error summary,
    the report-level errors per label)."""
    asked = [lab for lab in b.vocab.asked_ids if lab in ref_labels.columns]
    matched = attribute_scores.matched_rows(gen_labels, ref_labels, gen_attrs, ref_attrs, b.prompts.attributes)
    table = attribute_scores.attribute_accuracy(matched)
    scored = ref_labels[asked].notna().all(axis=1) & gen_labels[asked].notna().all(axis=1)
    errors = attribute_scores.report_errors(gen_labels[scored], ref_labels[scored], matched, asked)
    summary = {
        "mean": float(errors["errors"].mean()) if len(errors) else None,
        "total": int(errors["errors"].sum()),
        "fp": int(errors["fp"].sum()),
        "fn": int(errors["fn"].sum()),
        "attribute_mismatches": int(errors["attribute_mismatches"].sum()),
        "reports": int(len(errors)),
        "reports_left_out": int((~scored).sum()),
        "rule": attribute_scores.REPORT_ERROR_RULE + "; mean over reports with no failed extraction",
    }
    by_label = attribute_scores.label_errors(gen_labels[scored], ref_labels[scored], matched, asked)
    return table, errors, summary, by_label


def read_texts(path_or_frame, sections: list[str], what: str) -> dict[str, str]:
    """id -> text from a reports file (or DataFrame) using the bundle's sections."""
    frame = importers.read_reports(path_or_frame, source=f"the {what} DataFrame")
    return {
        r.report_id: compose_text(r.findings, r.impression, r.text, sections) for r in frame.itertuples(index=False)
    }


def _check_ids(reference: dict, generated: dict, name: str) -> None:
    """Generated reports must pair one-to-one with reference reports."""
    missing = sorted(set(reference) - set(generated))
    extra = sorted(set(generated) - set(reference))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} reference id(s) have no generated report (e.g. {', '.join(missing[:5])})")
        if extra:
            parts.append(f"{len(extra)} generated id(s) are not in the reference (e.g. {', '.join(extra[:5])})")
        raise UserError(f"generator {name!r}: " + "; ".join(parts))


def model_config_for(bundle: Bundle, model: str | None, api_base: str | None = None):
    """The bundle's model, parameters and recorded endpoint, or an override (which the output records)."""
    recorded = dict(bundle.model)
    if model and model != recorded.get("model"):
        recorded = {"model": model, "temperature": recorded.get("temperature", 0.0), "seed": recorded.get("seed", 0)}
    elif not api_base:  # where the justifying run sent its text, not the provider's default
        own = bundle.endpoint
        if own.get("endpoints"):
            recorded["endpoints"] = own["endpoints"]
        elif own.get("api_base"):
            recorded["api_base"] = own["api_base"]
    if api_base:
        recorded["api_base"] = api_base
    return model_config(recorded, strict=False)


def bundle_local_endpoints(bundle: Bundle) -> list[str]:
    """The bundle's recorded endpoints that are on this machine (allowed for scoring without asking)."""
    return [u for u in bundle.endpoint.get("resolved") or [] if endpoints.is_local(u)]


def check_endpoint(cfg, bundle: Bundle, allow_endpoints: list[str] | None = None) -> str:
    """Refuse (EndpointNotAllowed) unless every endpoint cfg sends text to is allowed; return where text goes."""
    if is_offline(cfg.model):
        return "this machine (offline rule-based labeller, no network)"
    check_model_name(cfg.model)  # UnknownModel first: a typo is not a governance problem
    own = bundle_local_endpoints(bundle)
    allowed = [*own, *(allow_endpoints or [])]
    try:
        ends = cfg.resolved()
    except EndpointError as exc:
        raise EndpointNotAllowed(f"report text will not be sent: {exc}") from exc
    refused = [e for e in ends if not endpoints.may_send(allowed, [e.url])]
    if refused:
        extra = f"; allowed here: {', '.join(allow_endpoints)}" if allow_endpoints else ""
        raise EndpointNotAllowed(
            f"report text may not be sent to {', '.join(e.label() for e in refused)}: scoring sends text only to the "
            f"bundle's own local endpoint ({', '.join(own) or 'none recorded'}){extra}. Allow it for this command with "
            "--allow-endpoint URL (allow_endpoints=[...] in Python), or score with --study S to use that study's allowed endpoints"
        )
    return cfg.endpoint_label()


def routed(cfg, allow_endpoints: list[str] | None):
    """cfg with the proxies it may go through: only those allowed for this command (any other is bypassed)."""
    allowed = tuple(allow_endpoints or ())
    return dataclasses.replace(cfg, proxies=endpoints.allowed_proxies(allowed, os.environ), allowed=allowed)


def score(
    bundle: str | os.PathLike | Bundle,
    reference: str | os.PathLike | pd.DataFrame,
    generated: str | os.PathLike | pd.DataFrame | Mapping[str, str | os.PathLike | pd.DataFrame],
    model: str | None = None,
    out: str | os.PathLike | None = None,
    zero_division: str = "zero",
    n_resamples: int = 1000,
    seed: int = 0,
    cache: ExtractionCache | None = None,
    api_base: str | None = None,
    on_progress=None,
    allow_endpoints: list[str] | None = None,
    max_failed_share: float = MAX_FAILED_SHARE,
    engine=None,
) -> ScoreResult:
    """Score generated reports against reference reports with a frozen bundle (Ran Score).

    bundle: a bundle file (or a loaded Bundle); reference: a reports file or DataFrame (id + text,
    or findings/impression); generated: one reports file or DataFrame (scored as its file name, or
    "generated"), or a mapping name -> file or DataFrame for several generators.
    Report text goes only to the bundle's own local endpoint or one in allow_endpoints (URL prefixes).
    Failed extractions are counted per generator and label and left out of the metrics; a generator
    with more than max_failed_share of its (report, label) pairs failed (or all) gets no score.
    engine: another labelling engine (workbench/labeller/batch.py's BatchEngine: the extractions as batch jobs).
    Returns a ScoreResult: `result.generators["A"].ran_score.estimate` (with .lo and .hi).
    """
    if zero_division not in ZERO_DIVISION_CHOICES:
        raise UserError(f"zero_division must be one of {ZERO_DIVISION_CHOICES}")
    generated = _as_generators(generated)
    if not generated:
        raise UserError("give at least one generator: NAME=generated.csv")
    b = bundle if isinstance(bundle, Bundle) else load_bundle(Path(bundle))
    cfg = model_config_for(b, model, api_base)
    where = check_endpoint(cfg, b, allow_endpoints)
    if engine is not None:
        from workbench.labeller import batch

        batch.check_batchable(cfg)  # before any text is read or sent
    cfg = routed(cfg, allow_endpoints)
    cache = cache or MemoryCache()
    ref_texts = read_texts(reference, b.sections, "reference")
    ref_labels, ref_attrs, ref_stats = label_texts_with_attributes(
        b.prompts, b.vocab, ref_texts, cfg, b.sha256, cache, on_progress, engine
    )
    scores: dict[str, GeneratorScore] = {}
    for name, source in generated.items():
        gen_texts = read_texts(source, b.sections, name)
        _check_ids(ref_texts, gen_texts, name)
        gen_labels, gen_attrs, stats = label_texts_with_attributes(
            b.prompts, b.vocab, gen_texts, cfg, b.sha256, cache, on_progress, engine
        )
        scores[name] = _generator_score(
            b,
            name,
            ref_labels,
            gen_labels.reindex(ref_labels.index),
            ref_attrs,
            gen_attrs,
            stats,
            zero_division,
            n_resamples,
            seed,
            max_failed_share,
        )
    result = ScoreResult(
        b.sha256,
        b.name,
        cfg.model,
        zero_division,
        ref_stats,
        generators=scores,
        endpoint=where,
        max_failed_share=max_failed_share,
    )
    if out is not None:
        result.write(Path(out))
    return result


def _generator_score(
    b: Bundle,
    name: str,
    ref_labels: pd.DataFrame,
    gen_labels: pd.DataFrame,
    ref_attrs,
    gen_attrs,
    stats,
    zero_division: str,
    n_resamples: int,
    seed: int,
    max_failed_share: float,
) -> GeneratorScore:
    """One generator's scores: Ran Score with its interval, the per-label table, per report, attributes."""
    policy = "undefined" if zero_division == "exclude" else zero_division
    table = metrics.label_metrics(ref_labels, gen_labels, zero_division=policy)
    avg = metrics.averages(table, zero_division=policy)
    ran = _ran_score(b, ref_labels, gen_labels, table, avg, stats, zero_division, n_resamples, seed, max_failed_share)
    per_label = table[
        ["support", "tp", "fp", "fn", "tn", "precision", "recall", "f1", "f1_undefined", "accuracy"]
    ].copy()
    per_label.insert(0, "name", [b.vocab.names()[i] for i in per_label.index])
    per_label["n_scored"] = table["n"]
    per_label["failed_generated"] = gen_labels[table.index].isna().sum()
    per_label["failed_reference"] = ref_labels[table.index].isna().sum()
    per_report = _per_report(ref_labels, gen_labels)
    attr_table, errors, error_summary, errors_by_label = _attribute_scores(
        b, ref_labels, gen_labels, ref_attrs, gen_attrs
    )
    per_report = per_report.join(errors, on="report_id")
    return GeneratorScore(name, per_label, avg, ran, per_report, stats, attr_table, error_summary, errors_by_label)


def _ran_score(
    b: Bundle,
    ref_labels: pd.DataFrame,
    gen_labels: pd.DataFrame,
    table: pd.DataFrame,
    avg: dict,
    stats,
    zero_division: str,
    n_resamples: int,
    seed: int,
    max_failed_share: float,
) -> RanScore:
    """Macro F1 with its bias-corrected bootstrap interval, the policy it used and the failures it left out."""
    policy = "undefined" if zero_division == "exclude" else zero_division
    boot = metrics.bootstrap_macro_f1(
        ref_labels, gen_labels, n_resamples=n_resamples, seed=seed, zero_division=policy, method="bc"
    )
    lo, hi, est = boot.get("lo"), boot.get("hi"), avg["macro_f1"]
    widened = bool(not pd.isna(lo) and not pd.isna(hi) and not lo <= est <= hi)
    if (
        widened
    ):  # few reports and rare labels: the resampled macro F1 is biased; never report an interval missing the estimate
        lo, hi = min(lo, est), max(hi, est)
    ran = {
        "estimate": est,
        "lo": lo,
        "hi": hi,
        "n_resamples": n_resamples,
        "interval": "bias-corrected percentile bootstrap over reports"
        + (", widened to contain the estimate" if widened else ""),
        "seed": seed,
        "labels": len(table),
        "labels_undefined": int(table["f1_undefined"].sum()),
        "labels_used": avg["macro_f1_labels_used"],
        "policy": POLICY_TEXT[zero_division],
    }
    ran.update(_failure_counts(ref_labels, gen_labels, b.vocab.asked_ids, stats, max_failed_share))
    if ran["no_score"]:
        ran.update(estimate=None, lo=None, hi=None)
    return RanScore(**ran)


def _as_generators(generated) -> dict:
    """name -> reports: a mapping as given; one file under its name; one DataFrame as "generated"."""
    if isinstance(generated, pd.DataFrame):
        return {"generated": generated}
    if isinstance(generated, (str, os.PathLike)):
        return {Path(generated).stem or "generated": generated}
    if isinstance(generated, Mapping):
        return dict(generated)
    raise TypeError(f"generated: a reports file, a DataFrame or a mapping name -> file, not {type(generated).__name__}")


def _failure_counts(
    ref_labels: pd.DataFrame, gen_labels: pd.DataFrame, asked: list[str], stats: dict, max_failed_share: float
) -> dict:
    """Failed extractions of one generator: counts, the share of (report, label) pairs left out, and
    why there is no score when too many failed."""
    ref_failed, gen_failed = ref_labels[asked].isna(), gen_labels[asked].isna()
    total = int(ref_failed.size)
    left_out = int((ref_failed | gen_failed).to_numpy().sum())
    share = left_out / total if total else 0.0
    no_score = ""
    counts = f"generated: {int(gen_failed.to_numpy().sum())}, reference: {int(ref_failed.to_numpy().sum())}"
    if total and left_out == total:
        no_score = f"all {total} (report, label) pairs have a failed extraction ({counts})"
    elif share > max_failed_share:
        no_score = (
            f"{left_out} of {total} (report, label) pairs have a failed extraction ({counts}; {share:.1%}, "
            f"more than the {max_failed_share:.0%} allowed)"
        )
    if no_score and stats.get("failure_causes"):
        no_score += "; causes: " + ", ".join(f"{k}: {v}" for k, v in sorted(stats["failure_causes"].items()))
    return {
        "pairs_total": total,
        "pairs_scored": total - left_out,
        "failed_share": share,
        "failed_generated": int(gen_failed.to_numpy().sum()),
        "failed_reference": int(ref_failed.to_numpy().sum()),
        "no_score": no_score,
    }


def _per_report(ref_labels: pd.DataFrame, gen_labels: pd.DataFrame) -> pd.DataFrame:
    """One row per report: invented and missed findings by name, and both label vectors."""
    rows = []
    for rid in ref_labels.index:
        r, g = ref_labels.loc[rid], gen_labels.loc[rid]
        rows.append(
            {
                "report_id": rid,
                "invented_findings": ";".join(c for c in ref_labels.columns if g[c] == 1 and r[c] == 0),
                "missed_findings": ";".join(c for c in ref_labels.columns if g[c] == 0 and r[c] == 1),
                "matched_positive": int(((g == 1) & (r == 1)).sum()),
                "failed_labels": ";".join(c for c in ref_labels.columns if pd.isna(g[c]) or pd.isna(r[c])),
                "reference_labels": json.dumps(nan_to_none(ref_labels.loc[[rid]]).iloc[0].to_dict()),
                "generated_labels": json.dumps(nan_to_none(gen_labels.loc[[rid]]).iloc[0].to_dict()),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True, eq=False)
class RobustnessResult:
    """How a bundle labels text pairs: harmless paraphrases should keep every label, significant changes
    should change the named one."""

    pairs: pd.DataFrame  # one row per pair: pair_id, kind, label, correct, detail
    per_kind: pd.DataFrame  # kind, share_correct, pairs
    per_label: pd.DataFrame  # label, share_detected, pairs, paraphrase_flips
    paraphrase_flips: dict  # label -> paraphrases on which its value changed
    endpoint: str  # where the report text went
    source: str = ""  # which pairs: a file, or the shipped pairs for the bundle's vocabulary


def default_pairs(vocab) -> tuple[pd.DataFrame, str]:
    """The shipped pairs that fit a vocabulary (every paraphrase, the significant changes of its asked
    labels), and a line saying so; UserError when none of its labels has a shipped change."""
    frame = importers.read_table(DEFAULT_PAIRS)
    fits = frame["kind"].eq("paraphrase") | frame["label"].fillna("").astype(str).map(
        lambda lab: vocab.resolve(lab) in vocab.asked_ids
    )
    kept = frame[fits]
    if not kept["kind"].eq("significant").any():
        raise UserError(
            f"no shipped robustness pairs for vocabulary {vocab.id!r} (they change ranscore-21 labels); "
            "write a CSV with columns pair_id,kind,label,text_a,text_b (kind: paraphrase or significant) "
            "for its labels and pass it with --pairs FILE"
        )
    left = int((~fits).sum())
    return kept.reset_index(drop=True), (
        f"the shipped pairs for vocabulary {vocab.id!r}: {int(kept['kind'].eq('paraphrase').sum())} paraphrases, "
        f"{int(kept['kind'].eq('significant').sum())} significant changes"
        + (f" ({left} changes of labels it does not ask left out)" if left else "")
    )


def robustness(
    bundle: str | os.PathLike | Bundle,
    pairs: str | os.PathLike | pd.DataFrame | None = None,
    model: str | None = None,
    cache: ExtractionCache | None = None,
    api_base: str | None = None,
    allow_endpoints: list[str] | None = None,
) -> RobustnessResult:
    """ReEvalMed's point: same labels for harmless paraphrases, different for significant changes.

    pairs: a CSV/DataFrame with pair_id, kind (paraphrase | significant), label (for significant),
    text_a, text_b; None = the shipped pairs that fit the bundle's vocabulary. Returns overall shares,
    a per-label table and where the text went.
    """
    b = bundle if isinstance(bundle, Bundle) else load_bundle(Path(bundle))
    cfg = model_config_for(b, model, api_base)
    where = check_endpoint(cfg, b, allow_endpoints)
    cfg = routed(cfg, allow_endpoints)
    if pairs is None:
        frame, source = default_pairs(b.vocab)
    else:
        frame = pairs if isinstance(pairs, pd.DataFrame) else importers.read_table(pairs)
        source = "a DataFrame" if isinstance(pairs, pd.DataFrame) else str(pairs)
    missing = {"pair_id", "kind", "text_a", "text_b"} - set(frame.columns)
    if missing:
        raise UserError(f"robustness pairs: missing column(s) {sorted(missing)}")
    if "label" not in frame.columns and (frame["kind"] == "significant").any():
        raise UserError(
            "robustness pairs: missing column(s) ['label'] (significant pairs name the label that must change)"
        )
    bad = sorted(set(frame["kind"]) - {"paraphrase", "significant"})
    if bad:
        raise UserError(f"robustness pairs: kind must be paraphrase or significant, got {bad}")
    texts = {}
    for r in frame.itertuples(index=False):
        texts[f"{r.pair_id}:a"], texts[f"{r.pair_id}:b"] = r.text_a, r.text_b
    labels, _ = label_texts(b.prompts, b.vocab, texts, cfg, b.sha256, cache or MemoryCache())
    asked = b.vocab.asked_ids
    rows = []
    for r in frame.itertuples(index=False):
        a, bb = labels.loc[f"{r.pair_id}:a", asked], labels.loc[f"{r.pair_id}:b", asked]
        if r.kind == "paraphrase":
            changed = [lab for lab in asked if a[lab] != bb[lab]]
            rows.append(
                {
                    "pair_id": r.pair_id,
                    "kind": r.kind,
                    "label": "",
                    "correct": not changed,
                    "detail": "changed: " + ", ".join(changed) if changed else "same labels",
                }
            )
        else:
            label = b.vocab.resolve(str(r.label or ""))
            if label is None:
                raise UserError(f"robustness pair {r.pair_id}: unknown label {r.label!r}")
            rows.append(
                {
                    "pair_id": r.pair_id,
                    "kind": r.kind,
                    "label": label,
                    "correct": bool(a[label] != bb[label]),
                    "detail": f"{label}: {a[label]} -> {bb[label]}",
                }
            )
    result = pd.DataFrame(rows)
    per_kind = (
        result.groupby("kind")["correct"]
        .agg(["mean", "count"])
        .rename(columns={"mean": "share_correct", "count": "pairs"})
    )
    sig = result[result["kind"] == "significant"]
    per_label = (
        sig.groupby("label")["correct"]
        .agg(["mean", "count"])
        .rename(columns={"mean": "share_detected", "count": "pairs"})
    )
    para = result[result["kind"] == "paraphrase"]
    flips = {}
    for detail in para.loc[~para["correct"], "detail"]:
        for lab in detail.replace("changed: ", "").split(", "):
            flips[lab] = flips.get(lab, 0) + 1
    per_label["paraphrase_flips"] = pd.Series(flips).reindex(per_label.index).fillna(0).astype(int)
    return RobustnessResult(result, per_kind.reset_index(), per_label.reset_index(), flips, where, source)
