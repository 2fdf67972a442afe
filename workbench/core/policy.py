"""Policies across labels, and what changed between two versions of a label's prompt.

Released prompt sets contradict themselves ("cannot exclude pneumonia" positive but "cannot
exclude consolidation" negative); putting every label's hedge and temporal policy side by side
and flagging related labels that disagree is how a team notices and decides on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from workbench.core.prompts import TEMPORAL_KEYS, Example, LabelPrompt, PromptSet

# Labels whose wording overlaps in reports: a policy difference between them needs a reason.
RELATED_GROUPS: tuple[tuple[str, ...], ...] = (
    ("pneumonia", "consolidation", "lung_opacity", "infiltration"),
    ("pleural_effusion", "effusion", "pleural_other", "pleural_thickening"),
    ("cardiomegaly", "enlarged_cardiomediastinum"),
    ("lung_lesion", "mass", "nodule", "cavity_cyst", "calcification"),
    ("edema", "pulmonary_vascular_abnormal"),
    ("interstitial_lung_disease", "fibrosis", "emphysema"),
    ("atelectasis", "lung_opacity"),
)
QUOTED = re.compile(r"'([^']+)'")


@dataclass(frozen=True)
class Finding:
    """One inconsistency or warning about a prompt set."""

    kind: str
    labels: tuple[str, ...]
    message: str


def policy_table(ps: PromptSet, names: dict[str, str]) -> pd.DataFrame:
    """One row per label: hedge policy, each temporal policy, counts of rules and examples."""
    rows = []
    for label_id, lp in ps.labels.items():
        row = {"label": label_id, "name": names.get(label_id, label_id), "hedged": lp.hedged}
        row.update({k: v for k, v in lp.temporal})
        row.update(
            look_for=len(lp.look_for),
            exclusions=len(lp.do_not_label_when),
            examples=len(lp.examples),
            positive_examples=sum(ex.value == 1 for ex in lp.examples),
        )
        rows.append(row)
    return pd.DataFrame(rows)


def policy_conflicts(ps: PromptSet, names: dict[str, str] | None = None) -> list[Finding]:
    """Related labels with different hedge/temporal policies, and contradictions inside a label."""
    names = names or {}
    out: list[Finding] = []
    present = set(ps.labels)
    for group in RELATED_GROUPS:
        members = [g for g in group if g in present]
        if len(members) < 2:
            continue
        out.extend(_group_conflicts(ps, members, names))
    for label_id, lp in ps.labels.items():
        out.extend(label_warnings(lp, names.get(label_id, label_id)))
    return out


def _group_conflicts(ps: PromptSet, members: list[str], names: dict[str, str]) -> list[Finding]:
    """Policy differences inside one group of related labels."""
    found = []
    hedges = {m: ps.labels[m].hedged for m in members}
    if len(set(hedges.values())) > 1:
        parts = ", ".join(f"{names.get(m, m)}: {v}" for m, v in hedges.items())
        found.append(
            Finding(
                "hedge policy differs",
                tuple(members),
                f'"cannot exclude"/"possible" is counted differently for related labels ({parts})',
            )
        )
    for key in TEMPORAL_KEYS:
        values = {m: ps.labels[m].temporal_policy()[key] for m in members}
        if len(set(values.values())) > 1:
            parts = ", ".join(f"{names.get(m, m)}: {v}" for m, v in values.items())
            found.append(
                Finding(
                    f"temporal policy differs ({key})",
                    tuple(members),
                    f'"{key}" wording is counted differently for related labels ({parts})',
                )
            )
    return found


def label_warnings(lp: LabelPrompt, name: str) -> list[Finding]:
    """Contradictions inside one label's prompt and one-sided few-shot examples."""
    found = []
    excluded = {p.lower() for rule in lp.do_not_label_when for p in QUOTED.findall(rule)}
    both = sorted(p for p in lp.look_for if p.lower() in excluded)
    if both:
        found.append(
            Finding(
                "look-for phrase also excluded",
                (lp.label,),
                f"{name}: {', '.join(both)} is both a look-for phrase and an exclusion",
            )
        )
    values = {ex.value for ex in lp.examples}
    if len(lp.examples) >= 2 and len(values) == 1:
        cls = "positive" if values == {1} else "negative"
        found.append(
            Finding(
                "examples all one class",
                (lp.label,),
                f"{name}: all {len(lp.examples)} few-shot examples are {cls}; add a counter-example",
            )
        )
    texts: dict[str, int] = {}
    for ex in lp.examples:
        key = ex.text.strip().lower()
        if key in texts and texts[key] != ex.value:
            found.append(
                Finding(
                    "contradictory examples",
                    (lp.label,),
                    f"{name}: the example {ex.text[:60]!r} appears as both 0 and 1",
                )
            )
        texts[key] = ex.value
    return found


def _listed(items: tuple | list) -> list[str]:
    """Items as comparable strings (an example as "[value] text")."""
    return [i if isinstance(i, str) else f"[{i.value}] {i.text}" for i in items]


def _example_details(examples: tuple[Example, ...]) -> dict[str, tuple]:
    """ "[value] text" -> (why, source, note) for spotting examples changed in place."""
    return {f"[{e.value}] {e.text}": (e.why, e.source_report_id, e.note) for e in examples}


def diff_label_prompts(old: LabelPrompt | None, new: LabelPrompt | None) -> dict:
    """Field-level difference: scalar fields changed; phrases, rules and examples added/removed."""
    if old is None or new is None:
        return {"created" if old is None else "deleted": True}
    out: dict = {"changed": {}, "added": {}, "removed": {}}
    for fld in ("task", "definition", "hedged", "notes"):
        a, b = getattr(old, fld), getattr(new, fld)
        if a != b:
            out["changed"][fld] = (a, b)
    ta, tb = old.temporal_policy(), new.temporal_policy()
    for key in TEMPORAL_KEYS:
        if ta[key] != tb[key]:
            out["changed"][f"temporal.{key}"] = (ta[key], tb[key])
    for fld in ("look_for", "do_not_label_when", "examples"):
        a, b = _listed(getattr(old, fld)), _listed(getattr(new, fld))
        added = [x for x in b if x not in a]
        removed = [x for x in a if x not in b]
        if added:
            out["added"][fld] = added
        if removed:
            out["removed"][fld] = removed
    old_ex, new_ex = _example_details(old.examples), _example_details(new.examples)
    for key in old_ex.keys() & new_ex.keys():
        if old_ex[key] != new_ex[key]:  # same example, new explanation, source or note
            out["changed"][f"example {key}"] = (old_ex[key], new_ex[key])
    return out


def diff_is_empty(diff: dict) -> bool:
    """True when two versions of a label are the same."""
    return not any(diff.get(k) for k in ("changed", "added", "removed", "created", "deleted"))


def example_from_case(
    report_text: str,
    value: int,
    why: str,
    report_id: str | None,
    note: str | None,
    evidence: str = "",
    max_chars: int = 600,
) -> Example:
    """A few-shot example from a disagreement: the deciding sentence when known, else the report."""
    text = evidence.strip() if evidence and evidence.strip() and evidence in report_text else report_text.strip()
    if len(text) > max_chars:
        text = text[:max_chars].rsplit(" ", 1)[0] + " ..."
    return Example(
        text=text,
        value=int(value),
        why=why.strip() or "taken from a reviewed disagreement",
        source_report_id=report_id,
        note=note,
    )
