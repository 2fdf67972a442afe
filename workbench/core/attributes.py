"""Finding attributes (side, severity, change, a study's own): parsing, merging and SPEC-CXR-style scoring.

Presence alone hides what matters in a report: a left pneumothorax matched to a right one is a
location error, not a miss plus an invention. Attributes are therefore scored on matched
findings only (labeller and reference both positive), so a miss is never penalised twice, and a
report's error count is its presence errors plus its attribute mismatches (SPEC-CXR). Pure
functions over plain values and DataFrames: no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.errors import WorkbenchError

if TYPE_CHECKING:  # the parser imports this module in labelling processes: pandas loads only for scoring
    import pandas as pd

# (attribute name, allowed values) per attribute of one label, in the vocabulary's order (hashable)
Spec = tuple[tuple[str, tuple[str, ...]], ...]

SEVERITY_ORDER = ("mild", "moderate", "severe")
SIDES = ("left", "right")
# how a MeSH qualifier of OpenI names a severity (PITFALLS: mild/small/minimal/borderline, moderate,
# severe/large); size words stand for severity the way a radiologist grades an effusion or a heart
MESH_SEVERITY = {
    "mild": "mild",
    "small": "mild",
    "minimal": "mild",
    "borderline": "mild",
    "moderate": "moderate",
    "severe": "severe",
    "large": "severe",
}
MESH_SIDE = {"left": "left", "right": "right", "bilateral": "bilateral"}
# OpenI MeSH headings that name a ChestX-ray14 label (the label gold itself comes from labels14.csv)
OPENI_MESH_LABELS = {
    "pulmonary atelectasis": "atelectasis",
    "atelectasis": "atelectasis",
    "cardiomegaly": "cardiomegaly",
    "pleural effusion": "effusion",
    "infiltrate": "infiltration",
    "mass": "mass",
    "nodule": "nodule",
    "pneumonia": "pneumonia",
    "pneumothorax": "pneumothorax",
    "consolidation": "consolidation",
    "pulmonary edema": "edema",
    "edema": "edema",
    "emphysema": "emphysema",
    "pulmonary emphysema": "emphysema",
    "pulmonary fibrosis": "fibrosis",
    "fibrosis": "fibrosis",
    "hernia, hiatal": "hernia",
    "thickening": "pleural_thickening",
}
# headings whose attributes are gold only with this qualifier: labels14 counts every MeSH "Thickening" as
# Pleural_Thickening, but "Thickening/lung/upper lobe/bronchi/left" places bronchial thickening, not the pleura
MESH_NEEDS = {"thickening": "pleura"}
CATEGORY = {
    "side": "laterality/location",
    "zone": "laterality/location",
    "severity": "severity",
    "change": "comparison",
}
ATTRIBUTE_PARSE_ERROR = "attribute_parse_error"
REPORT_ERROR_RULE = (
    "report errors = presence FP + presence FN + attribute mismatches on matched findings "
    "(an attribute counts only when both sides give it a value; a missed finding is not "
    "also an attribute error), over the asked finding labels (No Finding and other derived "
    "labels are left out: they would count a finding twice)"
)
ACCURACY_RULE = (
    "attribute accuracy = agreeing values / findings where labeller and reference are both "
    "positive and both give the attribute a value; coverage = share of the reference's valued "
    "attributes on matched findings that the labeller gave a value; 95% Wilson intervals"
)


class AttributeParseError(WorkbenchError, ValueError):
    """An `attributes` object that does not fit the label's attributes (never guessed; recorded)."""


# attributes whose values are a scale: keyed by their rank (1, 2, 3), as a reader grades them
ORDINAL = {"severity"}
# keys an attribute value never takes: the form's own (Enter, arrows, ? . /) are not letters; c is Streamlit's
RESERVED_KEYS = {"c"}


def attribute_keys(attribute_values: Spec) -> dict[tuple[str, str], str]:
    """(attribute, value) -> its key in the reading form, one scheme for the whole vocabulary (the same value has the
    same key on every label): a scale by rank (severity 1/2/3), else the first free letter of the value (side l/r/b,
    change n/w/e/u/s); a value with no free letter gets none."""
    keys: dict[tuple[str, str], str] = {}
    used = set(RESERVED_KEYS)
    for name, values in attribute_values:
        for rank, value in enumerate(values, start=1):
            letters = [ch for ch in value.lower() if ch.isalnum()]
            pool = ([str(rank)] if name in ORDINAL and rank <= 9 else []) + letters
            key = next((k for k in pool if k not in used), None)
            if key is not None:
                keys[(name, value)] = key
                used.add(key)
    return keys


def parse_attributes(raw: object, spec: Spec) -> dict[str, str]:
    """Validate a reply's `attributes` object strictly: known names, allowed values (case-insensitive),
    null or "" for "not stated"; anything else raises AttributeParseError naming what is wrong."""
    if not isinstance(raw, dict):
        raise AttributeParseError(f"'attributes' must be a JSON object, got {type(raw).__name__}")
    allowed = dict(spec)
    out: dict[str, str] = {}
    for name, value in raw.items():
        if name not in allowed:
            raise AttributeParseError(
                f"unknown attribute {str(name)!r} (this label has: {', '.join(allowed) or 'none'})"
            )
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise AttributeParseError(f"attribute {name!r} must be a string or null, got {value!r}")
        word = value.strip().lower()
        if word not in allowed[name]:
            raise AttributeParseError(f"attribute {name!r}: {value!r} is not one of {', '.join(allowed[name])}")
        out[name] = word
    return out


def combine(attribute: str, values: list[str]) -> str | None:
    """One value from several mentions of a finding: left + right (or any bilateral) is bilateral, the
    largest severity wins ("small right and moderate left effusions" -> moderate), a stated direction of
    change outranks "unchanged" ("persistent pneumothorax, smaller than before" -> better), otherwise the first."""
    values = [v for v in values if v]
    if not values:
        return None
    if attribute == "side":
        return "bilateral" if "bilateral" in values or set(SIDES) <= set(values) else values[0]
    if attribute == "severity" and all(v in SEVERITY_ORDER for v in values):
        return max(values, key=SEVERITY_ORDER.index)
    if attribute == "change":
        return next((v for v in values if v != "unchanged"), values[0])
    return values[0]


def mesh_attributes(mesh: str, spec_of: dict[str, Spec]) -> dict[str, dict[str, str]]:
    """Attribute gold from one OpenI MeSH cell ("Pleural Effusion/right/small;Cardiomegaly/mild"):
    label -> {attribute: value}, only attributes the label carries; several terms of a label combine."""
    found: dict[str, dict[str, list[str]]] = {}
    for term in str(mesh or "").split(";"):
        parts = [p.strip().lower() for p in term.split("/")]
        label = OPENI_MESH_LABELS.get(parts[0])
        if label is None or label not in spec_of:
            continue
        if parts[0] in MESH_NEEDS and MESH_NEEDS[parts[0]] not in parts[1:]:
            continue
        names = dict(spec_of[label])
        slot = found.setdefault(label, {})
        for qualifier in parts[1:]:
            if "side" in names and qualifier in MESH_SIDE:
                slot.setdefault("side", []).append(MESH_SIDE[qualifier])
            elif "severity" in names and qualifier in MESH_SEVERITY:
                slot.setdefault("severity", []).append(MESH_SEVERITY[qualifier])
    out = {}
    for label, slots in found.items():
        merged = {a: combine(a, vs) for a, vs in slots.items()}
        if merged:
            out[label] = {a: v for a, v in merged.items() if v}
    return out


# ---------------------------------------------------------------- the attribute reference


def reference_attributes(
    readings: pd.DataFrame, values: pd.DataFrame, adjudicated: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per (report, label, attribute): the majority value of the readers who ticked the label, a tie
    settled by the latest adjudication (no reference while it waits).

    readings: report_id, label, reader, value (0/1); values: report_id, label, reader, attribute, value;
    adjudicated: report_id, label, attribute, value (latest last). Returns report_id, label, attribute,
    reference, votes, tie."""
    import pandas as pd

    cols = ["report_id", "label", "attribute", "reference", "votes", "tie"]
    if values.empty:
        return pd.DataFrame(columns=cols)
    top = vote_counts(readings, values).groupby(["report_id", "label", "attribute"]).head(2)
    rows = []
    for key, group in top.groupby(["report_id", "label", "attribute"], sort=True):
        ns = group["n"].tolist()
        tie = len(ns) > 1 and ns[0] == ns[1]
        rows.append((*key, None if tie else group["value"].iloc[0], int(group["n"].sum()), tie))
    out = pd.DataFrame(rows, columns=cols)
    if adjudicated is not None and not adjudicated.empty:
        last = adjudicated.drop_duplicates(["report_id", "label", "attribute"], keep="last")
        out = out.merge(
            last.rename(columns={"value": "adjudicated"}), on=["report_id", "label", "attribute"], how="left"
        )
        settle = out["tie"] & out["adjudicated"].notna()
        out.loc[settle, "reference"] = out.loc[settle, "adjudicated"]
        out = out.drop(columns=["adjudicated"])
    return out


def vote_counts(readings: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """Per (report, label, attribute, value): n, the readers who ticked the label and gave that value,
    most votes first (then by value), as reference_attributes counts them."""
    ticked = readings[readings["value"] == 1][["report_id", "label", "reader"]]
    votes = values.merge(ticked, on=["report_id", "label", "reader"])  # only readers who ticked the label
    counts = votes.groupby(["report_id", "label", "attribute", "value"]).size().rename("n").reset_index()
    return counts.sort_values(
        ["report_id", "label", "attribute", "n", "value"], ascending=[True, True, True, False, True]
    )


TIE_COLUMNS = ["report_id", "label", "attribute", "votes", "tied", "readers"]


def attribute_ties(
    readings: pd.DataFrame, values: pd.DataFrame, adjudicated: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Tied attribute votes no adjudication has settled: report_id, label, attribute, votes (every value
    with its count, "left 1, right 1"), tied (the values sharing the top count), readers (who gave one)."""
    import pandas as pd

    ref = reference_attributes(readings, values, adjudicated)
    waiting = ref[ref["tie"].astype(bool) & ref["reference"].isna()] if len(ref) else ref
    if waiting.empty:
        return pd.DataFrame(columns=TIE_COLUMNS)
    counts = vote_counts(readings, values)
    open_keys = set(zip(waiting["report_id"], waiting["label"], waiting["attribute"], strict=False))
    rows = []
    for key, group in counts.groupby(["report_id", "label", "attribute"], sort=True):
        if key not in open_keys:
            continue
        top = group["n"].max()
        rows.append(
            (
                *key,
                ", ".join(f"{v} {n}" for v, n in zip(group["value"], group["n"], strict=False)),
                ", ".join(group.loc[group["n"] == top, "value"]),
                int(group["n"].sum()),
            )
        )
    return pd.DataFrame(rows, columns=TIE_COLUMNS)


# ---------------------------------------------------------------- scoring on matched findings


def matched_rows(
    pred_presence: pd.DataFrame,
    ref_presence: pd.DataFrame,
    pred_attrs: pd.DataFrame,
    ref_attrs: pd.DataFrame,
    specs: dict[str, Spec],
) -> pd.DataFrame:
    """One row per (report, label, attribute) of every matched finding (both sides positive):
    report_id, label, attribute, value (labeller, None when not given), reference (None when none).

    pred_presence / ref_presence: reports x labels 0/1 (NaN unknown); pred_attrs / ref_attrs: long frames
    report_id, label, attribute, value."""
    import pandas as pd

    rows = []
    pv, rv = lookup(pred_attrs), lookup(ref_attrs)
    for label, spec in specs.items():
        if label not in pred_presence.columns or label not in ref_presence.columns:
            continue
        both = (pred_presence[label] == 1) & (ref_presence.reindex(pred_presence.index)[label] == 1)
        for rid in pred_presence.index[both.to_numpy()]:
            for name, _ in spec:
                rows.append((rid, label, name, pv.get((rid, label, name)), rv.get((rid, label, name))))
    return pd.DataFrame(rows, columns=["report_id", "label", "attribute", "value", "reference"])


def lookup(frame: pd.DataFrame) -> dict:
    """(report_id, label, attribute) -> value of a long attribute frame."""
    if frame is None or frame.empty:
        return {}
    return {
        (r, lab, a): v
        for r, lab, a, v in frame[["report_id", "label", "attribute", "value"]].itertuples(index=False)
        if isinstance(v, str) and v
    }


def attribute_accuracy(matched: pd.DataFrame, ci: str = "wilson") -> pd.DataFrame:
    """Per (label, attribute) on matched findings: reference (valued by the reference), n (both valued),
    correct, accuracy with its interval, coverage (n / reference) with its interval; plus an `all` row
    per attribute pooling the labels (micro)."""
    import numpy as np
    import pandas as pd

    from workbench.core.metrics import proportion_ci_arrays

    cols = [
        "label",
        "attribute",
        "category",
        "matched",
        "reference",
        "n",
        "correct",
        "accuracy",
        "accuracy_lo",
        "accuracy_hi",
        "coverage",
        "coverage_lo",
        "coverage_hi",
    ]
    if matched.empty:
        return pd.DataFrame(columns=cols)
    m = matched.assign(
        has_ref=matched["reference"].notna(), has_both=matched["reference"].notna() & matched["value"].notna()
    )
    m["agree"] = m["has_both"] & (m["value"] == m["reference"])
    per = m.groupby(["label", "attribute"], sort=False).agg(
        matched=("report_id", "size"), reference=("has_ref", "sum"), n=("has_both", "sum"), correct=("agree", "sum")
    )
    pooled = m.groupby("attribute", sort=False).agg(
        matched=("report_id", "size"), reference=("has_ref", "sum"), n=("has_both", "sum"), correct=("agree", "sum")
    )
    pooled.index = pd.MultiIndex.from_tuples([("all", a) for a in pooled.index], names=["label", "attribute"])
    table = pd.concat([per, pooled]).reset_index()
    k, n, ref = (table[c].to_numpy(dtype=float) for c in ("correct", "n", "reference"))
    with np.errstate(divide="ignore", invalid="ignore"):
        table["accuracy"] = np.where(n > 0, k / np.maximum(n, 1), np.nan)
        table["coverage"] = np.where(ref > 0, n / np.maximum(ref, 1), np.nan)
    table["accuracy_lo"], table["accuracy_hi"] = proportion_ci_arrays(k, n, ci)
    table["coverage_lo"], table["coverage_hi"] = proportion_ci_arrays(n, ref, ci)
    table["category"] = table["attribute"].map(lambda a: CATEGORY.get(a, a))
    return table[cols]


def confusion(matched: pd.DataFrame, label: str | None = None, attribute: str | None = None) -> pd.DataFrame:
    """Counts of (reference value, labeller value) on matched findings; "-" where a side gave none."""
    import pandas as pd

    m = matched
    if label is not None:
        m = m[m["label"] == label]
    if attribute is not None:
        m = m[m["attribute"] == attribute]
    if m.empty:
        return pd.DataFrame(columns=["label", "attribute", "reference", "value", "n"])
    filled = m.assign(reference=m["reference"].fillna("-"), value=m["value"].fillna("-"))
    return filled.groupby(["label", "attribute", "reference", "value"]).size().rename("n").reset_index()


def mismatches(matched: pd.DataFrame) -> pd.DataFrame:
    """Matched findings whose attribute values differ (both sides valued), with their error category."""
    both = matched[matched["value"].notna() & matched["reference"].notna()]
    out = both[both["value"] != both["reference"]].copy()
    out["category"] = out["attribute"].map(lambda a: CATEGORY.get(a, a))
    return out.reset_index(drop=True)


LABEL_ERROR_COLUMNS = ["label", "support", "fp", "fn", "attribute_mismatches", "errors"]


def label_errors(
    pred_presence: pd.DataFrame, ref_presence: pd.DataFrame, matched: pd.DataFrame, labels: list[str]
) -> pd.DataFrame:
    """The report-level error count per finding label (support = reference positives), plus an `all` row
    with the sums: the per-finding table beside the report-level figure (SPEC-CXR)."""
    import pandas as pd

    p = pred_presence.reindex(columns=labels).astype(float)
    r = ref_presence.reindex(index=p.index, columns=labels).astype(float)
    wrong = mismatches(matched[matched["report_id"].isin(set(p.index))]) if not matched.empty else matched
    by_label = wrong.groupby("label").size() if len(wrong) else pd.Series(dtype=int)
    out = pd.DataFrame(
        {
            "label": labels,
            "support": (r == 1).sum().to_numpy(),
            "fp": ((p == 1) & (r == 0)).sum().to_numpy(),
            "fn": ((p == 0) & (r == 1)).sum().to_numpy(),
            "attribute_mismatches": by_label.reindex(labels).fillna(0).to_numpy(),
        }
    )
    out["errors"] = out["fp"] + out["fn"] + out["attribute_mismatches"]
    total = out[LABEL_ERROR_COLUMNS[1:]].sum()
    out = pd.concat([out, pd.DataFrame([{"label": "all", **total.to_dict()}])], ignore_index=True)
    return out.astype({c: int for c in LABEL_ERROR_COLUMNS[1:]})[LABEL_ERROR_COLUMNS]


def report_errors(
    pred_presence: pd.DataFrame, ref_presence: pd.DataFrame, matched: pd.DataFrame, labels: list[str]
) -> pd.DataFrame:
    """Per report: presence FP, FN, attribute mismatches and their sum (the SPEC-CXR report-level count)."""
    import pandas as pd

    p = pred_presence.reindex(columns=labels).astype(float)
    r = ref_presence.reindex(index=p.index, columns=labels).astype(float)
    fp = ((p == 1) & (r == 0)).sum(axis=1)
    fn = ((p == 0) & (r == 1)).sum(axis=1)
    wrong = mismatches(matched).groupby("report_id").size() if not matched.empty else pd.Series(dtype=int)
    out = pd.DataFrame({"fp": fp, "fn": fn}).astype(int)
    out["attribute_mismatches"] = wrong.reindex(out.index).fillna(0).astype(int)
    out["errors"] = out["fp"] + out["fn"] + out["attribute_mismatches"]
    out.index.name = "report_id"
    return out
