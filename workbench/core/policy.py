"""Policies across labels, and what changed between two versions of a label's prompt.

Released prompt sets contradict themselves ("cannot exclude pneumonia" positive but "cannot
exclude consolidation" negative); putting every label's hedge and temporal policy side by side
and flagging related labels that disagree is how a team notices and decides on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from workbench.core.prompts import DEFAULT_CUES, HEDGE_NAMED, TEMPORAL_KEYS, Example, LabelPrompt, PromptSet
from workbench.core.vocab import Label, Vocabulary

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
_WORD = re.compile(r"[a-z]+")


def _wordset(text: str) -> frozenset[str]:
    """A set of words written as one string."""
    return frozenset(text.split())


# Where, not what: a look-for phrase needs a finding word beside these ("heart" alone names no finding).
ANATOMY_WORDS = _wordset(
    "heart cardiac lung lungs pulmonary pleura pleural chest thorax thoracic mediastinum mediastinal hilar hilum "
    "hila lobe lobes lobar base bases basilar basal apex apical apices diaphragm hemidiaphragm costophrenic "
    "silhouette tissue tissues space spaces airway airways trachea tracheal bronchus bronchi bronchial vessel "
    "vessels vascular vasculature rib ribs spine bone bones soft contour contours border borders parenchyma "
    "parenchymal segment segmental upper lower middle left right bilateral zone zones field fields region area "
    "aorta aortic abdominal abdomen"
)
# How the image was taken, not what it shows: never a finding on its own.
IMAGE_QUALITY_WORDS = _wordset(
    "quality limited limitation limitations technique technical rotation rotated portable underpenetrated "
    "overpenetrated penetration exposure inspiration inspiratory motion artifact artifacts projection view views "
    "positioning obscured suboptimal lordotic film films image images study exam examination radiograph frontal "
    "lateral supine upright semi erect"
)
# What was done to the patient: a finding only for a label about devices or surgery (its own vocabulary says so).
PROCEDURE_WORDS = _wordset(
    "surgical surgery postoperative postsurgical operative sternotomy clip clips wire wires catheter catheters tube "
    "tubes line lines terminating terminates terminate tip projects projecting overlying device devices pacemaker "
    "placement removal resection lobectomy pneumonectomy cabg stent stents valve hardware fixation drain port"
)
# Words of a definition that describe how a finding is reported rather than what it is.
_GENERIC = _wordset(
    "stated directly described reported named such example usually often including include includes whatever "
    "cause caused single multiple whole about larger smaller than with from into that which their there other "
    "some part parts form forms seen visible image radiograph report reports what when where only more most less "
    "normal size position any and the for are its not but all has one two few was were can may"
)


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


def policy_conflicts(
    ps: PromptSet, names: dict[str, str] | None = None, vocab: Vocabulary | None = None
) -> list[Finding]:
    """Related labels with different hedge/temporal policies, and contradictions inside a label (with the
    vocabulary: look-for phrases that name no finding of the label, or another label)."""
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
        out.extend(label_contradictions(lp, names.get(label_id, label_id), ps.task.cue_lists(), vocab))
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


# ---------------------------------------------------------------- consistency inside one label's prompt

CONTRADICTION_KINDS = (
    "exclusion contradicts hedge policy",
    "look-for contradicts hedge policy",
    "example contradicts hedge policy",
    "example contradicts temporal policy",
    "look-for names no finding",
    "look-for names another label",
)


def _has(text: str, phrase: str) -> bool:
    """Whether text contains phrase as whole words (case-insensitive)."""
    return re.search(r"(?<![a-z])" + re.escape(phrase.lower()) + r"(?![a-z])", text.lower()) is not None


def _cue_in(text: str, cues) -> str | None:
    """The first cue of cues that text contains as whole words."""
    return next((c for c in cues if _has(text, c)), None)


def label_contradictions(
    lp: LabelPrompt, name: str, cues: dict | None = None, vocab: Vocabulary | None = None
) -> list[Finding]:
    """Instructions of one label's prompt that a reader (or an LLM) cannot follow together: an exclusion or
    look-for phrase against the hedge policy, an example whose answer the hedge or temporal policy
    contradicts, a look-for phrase that names no finding of the label (or names another label)."""
    cues = cues or DEFAULT_CUES
    found = _hedge_rule_contradictions(lp, name)
    found += _example_contradictions(lp, name, cues)
    if vocab is not None and lp.label in vocab.ids:
        for phrase in lp.look_for:
            why = look_for_refusal(phrase, lp, vocab)
            if why:
                kind = "look-for names another label" if "another label" in why else "look-for names no finding"
                found.append(Finding(kind, (lp.label,), f"{name}: look-for {phrase!r} {why}"))
    return found


def _hedge_rule_contradictions(lp: LabelPrompt, name: str) -> list[Finding]:
    """Exclusions of the hedge cues the prompt says count (hedged positive), look-for phrases built on a hedge
    cue when hedges do not count (hedged negative)."""
    found = []
    if lp.hedged == "positive":
        for rule in lp.do_not_label_when:
            named = [c for c in HEDGE_NAMED if any(_has(p, c) for p in QUOTED.findall(rule))]
            if named:
                found.append(
                    Finding(
                        "exclusion contradicts hedge policy",
                        (lp.label,),
                        f"{name}: 'Do NOT label ... when {rule}' excludes {', '.join(repr(c) for c in named)}, "
                        "which the hedge policy counts as positive (1)",
                    )
                )
    else:
        for phrase in lp.look_for:
            cue = _cue_in(phrase, DEFAULT_CUES["hedge"])
            if cue:
                found.append(
                    Finding(
                        "look-for contradicts hedge policy",
                        (lp.label,),
                        f"{name}: look-for {phrase!r} is hedged wording ({cue!r}), which the hedge policy "
                        "counts as negative (0)",
                    )
                )
    return found


def example_policy_value(ex: Example, lp: LabelPrompt, cues: dict) -> tuple[str, int] | None:
    """(policy, the answer it gives) for an example the hedge or a temporal policy decides, else None: a mention
    of the finding with a hedge cue (and no negation) or a temporal cue, not taken back by an exclusion."""
    text = ex.text
    if any(_has(text, p) for rule in lp.do_not_label_when for p in QUOTED.findall(rule)):
        return None  # an exclusion decides it: that is its own, checked rule
    if not _mentions(text, lp):
        return None
    for key in TEMPORAL_KEYS:
        if _cue_in(text, cues.get(key, ())):
            return f"temporal {key}", int(lp.temporal_policy()[key] == "positive")
    if _cue_in(text, cues.get("hedge", ())) and not _cue_in(text, cues.get("negation", ())):
        return "hedged", int(lp.hedged == "positive")
    return None


def _mentions(text: str, lp: LabelPrompt) -> bool:
    """Whether text mentions the label's finding (a look-for phrase, or a word of the label's id)."""
    words = [w for w in lp.label.split("_") if len(w) > 3]
    return any(_has(text, p) or _has(text, p + "s") for p in lp.look_for) or any(w in text.lower() for w in words)


def _example_contradictions(lp: LabelPrompt, name: str, cues: dict) -> list[Finding]:
    """Examples whose answer the label's own hedge or temporal policy contradicts."""
    found = []
    for ex in lp.examples:
        decided = example_policy_value(ex, lp, cues)
        if decided is None or decided[1] == ex.value:
            continue
        which, value = decided
        kind = "example contradicts hedge policy" if which == "hedged" else "example contradicts temporal policy"
        found.append(
            Finding(
                kind,
                (lp.label,),
                f"{name}: the example {ex.text[:60]!r} answers {ex.value}, but the {which} policy "
                f"({lp.hedged if which == 'hedged' else lp.temporal_policy()[which.split()[1]]}) makes it {value}",
            )
        )
    return found


def align_examples(lp: LabelPrompt, cues: dict | None = None) -> LabelPrompt:
    """The prompt with its examples made to agree with its hedge and temporal policy (after a policy change):
    a hand-written example takes the policy's answer, an example from a report (whose reference answered it)
    is dropped, since the new policy says the opposite of that report's reference."""
    cues = cues or DEFAULT_CUES
    kept = []
    for ex in lp.examples:
        decided = example_policy_value(ex, lp, cues)
        if decided is None or decided[1] == ex.value:
            kept.append(ex)
        elif ex.source_report_id is None:
            which, value = decided
            why = f"{which.capitalize()} wording counts as {'positive' if value else 'negative'} for this label."
            kept.append(Example(ex.text, value, why, None, ex.note))
    return LabelPrompt(**{**lp.__dict__, "examples": tuple(kept)})


def _stem(word: str) -> str:
    """A word's stem for matching wordings of one finding: plural endings dropped, then its first 5 letters."""
    for end, by in (("ies", "y"), ("ses", "s"), ("s", "")):
        if word.endswith(end) and len(word) - len(end) >= 3 and not word.endswith("ss"):
            word = word[: len(word) - len(end)] + by
            break
    return word[:5]


def _stems(text: str) -> set[str]:
    """Stems of the content words of a text."""
    return {_stem(w) for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _GENERIC}


def finding_stems(label: Label, lp: LabelPrompt | None = None) -> set[str]:
    """Stems of the words that name a label's finding: its vocabulary phrases and its definition up to
    "Excludes" (and the prompt's own definition and task), anatomy left out; and its name's words, anatomy
    included (a label named for its anatomy, "pulmonary vascular abnormal", is about that anatomy)."""
    texts = [*label.look_for, _included(label.definition)]
    if lp is not None:
        texts += [_included(lp.definition), lp.task]
    words = {w for t in texts for w in _compounds(t)}
    return {_stem(w) for w in words if len(w) > 2 and w not in _GENERIC and w not in ANATOMY_WORDS} | _stems(
        _name_words(label)
    )


def _compounds(text: str) -> list[str]:
    """The words of a text and each adjacent pair written as one ("air spaces" -> "airspaces"): reports spell a
    finding both ways."""
    words = _WORD.findall(text.lower())
    return words + [a + b for a, b in zip(words, words[1:], strict=False)]


def _name_words(label: Label) -> str:
    """A label's name and id as lower-case words."""
    return f"{label.name} {label.id.replace('_', ' ')}".lower()


def _included(definition: str) -> str:
    """The part of a definition that says what the label is (before "Excludes ...")."""
    return re.split(r"\bexclud", definition, maxsplit=1, flags=re.I)[0]


def look_for_refusal(phrase: str, lp: LabelPrompt, vocab: Vocabulary) -> str:
    """Why a look-for phrase cannot stand in a label's prompt ("" when it can): it must not be another label's
    name, and must contain a word naming the label's own finding (from its name, vocabulary or definition), not
    only anatomy, image-quality or procedure wording (nor only another label's listed phrase)."""
    label = vocab.label(lp.label)
    own = finding_stems(label, lp)
    low = " ".join(_WORD.findall(phrase.lower()))
    other, by_name = _other_label_named(low, lp.label, vocab)
    if other is not None and by_name:
        return f"names another label ({other.name})"
    words = _WORD.findall(low)
    named = set(_WORD.findall(_name_words(label)))
    if any((w not in ANATOMY_WORDS and _stem(w) in own) or w in named for w in words if len(w) > 2):
        return ""
    if other is not None:
        return f"is a phrase of another label ({other.name}) with no word naming {label.name}"
    quality = [w for w in words if w in IMAGE_QUALITY_WORDS]
    procedure = [w for w in words if w in PROCEDURE_WORDS]
    if quality:
        return f"is image-quality wording ({', '.join(quality)}), not a finding of {label.name}"
    if procedure:
        return f"is procedure or device wording ({', '.join(procedure)}), not a finding of {label.name}"
    anatomy = [w for w in words if w in ANATOMY_WORDS]
    where = f" ({', '.join(anatomy)} {'are' if len(anatomy) > 1 else 'is'} anatomy)" if anatomy else ""
    return f"has no word naming {label.name} (its name, definition or listed phrases){where}"


def _other_label_named(words: str, label: str, vocab: Vocabulary) -> tuple[Label | None, bool]:
    """(the other asked label whose name, id or listed phrase these words are, whether by its name or id)."""
    for other in vocab.labels:
        if other.id == label or other.derived:
            continue
        names = {" ".join(_WORD.findall(x.lower())) for x in (other.name, other.id.replace("_", " "))}
        if words in names:
            return other, True
        if words in {" ".join(_WORD.findall(x.lower())) for x in other.look_for}:
            return other, False
    return None, False


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
