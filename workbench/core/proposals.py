"""Proposed prompt revisions: the structured edit both proposers return, and the offline proposer.

An edit replaces some fields of one label's prompt (definition, look-for phrases, do-not-label
rules, hedge and temporal policy, few-shot examples) and must still pass the strict prompt
validation; a model's reply that is not exactly such an edit is reported (malformed, empty,
refusal), never applied. The offline proposer mines candidate changes from the tuning part's
disagreements and error notes (and, when given, an outside phrase list and the reference's hedge
convention pooled over every label), scores each with the real labeller (a function passed in: core
calls no labeller) on tuning only, and combines the few that fix tuning errors without adding new
ones, greedily. A trade mined from tuning must hold on both halves of tuning (a cross-validation
inside it), so the validation part is never used to choose: it is only the keep/reject gate.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import yaml

from workbench.core import policy
from workbench.core.prompts import (
    DEFAULT_CUES,
    HEDGE_NAMED,
    TEMPORAL_KEYS,
    Example,
    LabelPrompt,
    PromptError,
    dump_label_prompt,
    parse_label_prompt,
)
from workbench.core.vocab import Vocabulary
from workbench.core.yaml_text import load_yaml
from workbench.errors import WorkbenchError

EDIT_FIELDS = ("definition", "look_for", "do_not_label_when", "hedged", "temporal", "examples")
REPLY_KEYS = ("edit", "rationale")
STATUSES = ("ok", "malformed", "empty", "refusal", "call_error")
_REFUSAL = re.compile(r"\b(sorry|i can(?:no|')t|i cannot|unable to|not able to|as an ai|i won't|i will not)\b", re.I)
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*?)\n\s*```\s*$", re.S)
_WORDS = re.compile(r"[a-z]+(?:-[a-z]+)?")
_SENTENCES = re.compile(r"[.;:!?\n]+")
_QUOTES = re.compile(r"['\"‘’“”]([^'\"‘’“”\n]{3,80})['\"‘’“”]")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "with",
        "by",
        "from",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "it",
        "its",
        "as",
        "no",
        "not",
        "without",
        "any",
        "some",
        "both",
        "each",
        "than",
        "then",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "while",
        "within",
        "into",
        "onto",
        "over",
        "under",
        "upon",
        "again",
        "also",
        "only",
        "very",
        "more",
        "most",
        "less",
        "least",
        "per",
        "via",
        "may",
        "might",
        "can",
        "could",
        "should",
        "would",
        "will",
        "shall",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "noted",
        "seen",
        "see",
        "shows",
        "show",
        "demonstrates",
        "demonstrated",
        "identified",
        "evidence",
        "findings",
        "impression",
        "left",
        "right",
        "bilateral",
        "mild",
        "mildly",
        "moderate",
        "severe",
        "small",
        "large",
        "minimal",
        "stable",
        "unchanged",
        "new",
        "otherwise",
        "normal",
        "limits",
        "size",
        "appearance",
        "likely",
        "possible",
        "xxxx",
    ]
)
# where, not what: a look-for phrase made only of these (and stopwords) names no finding
LOCATION_WORDS = frozenset(
    [
        "upper",
        "lower",
        "middle",
        "mid",
        "lobe",
        "lobes",
        "lingula",
        "lingular",
        "base",
        "bases",
        "basal",
        "basilar",
        "apex",
        "apices",
        "apical",
        "hilar",
        "hilum",
        "perihilar",
        "lung",
        "lungs",
        "zone",
        "zones",
        "field",
        "fields",
        "chest",
        "thorax",
        "side",
        "sided",
        "anterior",
        "posterior",
        "lateral",
        "medial",
        "superior",
        "inferior",
        "central",
        "peripheral",
        "region",
        "area",
    ]
)
HEDGE_CATEGORIES = ("hedging", "uncertain")
MIN_PRECISION = 0.6  # share of tuning reports containing a look-for candidate that have the finding
TEMPORAL_CATEGORIES = ("temporal",)
OUTSIDE_ORIGINS = ("note", "phrase list")  # candidates not mined from the tuning reports' wording


class EditError(WorkbenchError, ValueError):
    """A proposed edit is not a valid revision of the label's prompt; the message says why."""


@dataclass(frozen=True)
class Edit:
    """A proposed revision of one label: the fields it replaces, why, and where it came from."""

    label: str
    fields: dict
    rationale: str = ""
    source: str = "offline"
    note_ids: tuple[int, ...] = ()
    changes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Plain data (stored with the proposal)."""
        return {
            "label": self.label,
            "fields": self.fields,
            "rationale": self.rationale,
            "source": self.source,
            "note_ids": list(self.note_ids),
            "changes": list(self.changes),
        }


@dataclass(frozen=True)
class ProposalResult:
    """What a proposer returned: status ok with an edit, or why there is none."""

    status: str
    detail: str = ""
    edit: Edit | None = None
    calls_made: int = 0  # model calls the proposer made for it (0: offline, or answered from the call cache)
    reply: str = ""  # a model proposer's reply when it gave no usable edit (shown and stored, never applied)


# ---------------------------------------------------------------- the edit format


def apply_edit(lp: LabelPrompt, fields: dict) -> LabelPrompt:
    """The label prompt with fields replaced, validated as strictly as a prompt file."""
    if not isinstance(fields, dict):
        raise EditError("the edit must be a mapping of prompt fields")
    unknown = sorted(set(fields) - set(EDIT_FIELDS))
    if unknown:
        raise EditError(f"the edit has an unknown field {unknown[0]!r} (allowed: {', '.join(EDIT_FIELDS)})")
    data = dump_label_prompt(lp)
    for key, value in fields.items():
        if key == "temporal" and isinstance(value, dict):
            bad = sorted(set(value) - set(TEMPORAL_KEYS))
            if bad:
                raise EditError(f"temporal: unknown key {bad[0]!r} (allowed: {', '.join(TEMPORAL_KEYS)})")
            value = {**data["temporal"], **value}
        data[key] = value
    try:
        return parse_label_prompt(data, f"proposed edit of {lp.label}")
    except PromptError as exc:
        raise EditError(str(exc)) from exc


def edit_fields(old: LabelPrompt, new: LabelPrompt) -> dict:
    """The fields of new that differ from old, as plain data (the edit that turns old into new)."""
    a, b = dump_label_prompt(old), dump_label_prompt(new)
    return {k: b[k] for k in EDIT_FIELDS if a.get(k) != b.get(k)}


def describe(old: LabelPrompt, new: LabelPrompt) -> tuple[str, ...]:
    """One line per change, for a person."""
    out = []
    for name, attr in (("look-for", "look_for"), ("do-not-label", "do_not_label_when")):
        before, after = getattr(old, attr), getattr(new, attr)
        out += [f"+ {name}: {p}" for p in after if p not in before]
        out += [f"- {name}: {p}" for p in before if p not in after]
    if old.definition != new.definition:
        out.append(f"definition: {new.definition}")
    if old.hedged != new.hedged:
        out.append(f"hedged wording: {old.hedged} -> {new.hedged}")
    for key in TEMPORAL_KEYS:
        a, b = old.temporal_policy()[key], new.temporal_policy()[key]
        if a != b:
            out.append(f"temporal {key}: {a} -> {b}")
    out += [
        f"+ example [{e.value}] {e.text[:80]} (from {e.source_report_id or 'no report'})"
        for e in new.examples
        if e not in old.examples
    ]
    out += [f"- example [{e.value}] {e.text[:80]}" for e in old.examples if e not in new.examples]
    return tuple(out)


def parse_reply(text: str | None, lp: LabelPrompt, allowed_sources: set[str], source: str) -> ProposalResult:
    """A model's reply -> an edit, strictly: a JSON/YAML mapping {"edit": {...}, "rationale": "..."}."""
    if text is None or not text.strip():
        return ProposalResult("empty", "the model returned no text")
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    data = _load_mapping(body)
    if data is None:
        if _REFUSAL.search(text):
            return ProposalResult("refusal", "the model declined to propose a revision")  # its words may quote a report
        return ProposalResult("malformed", "the reply is not a JSON or YAML mapping {edit, rationale}")
    unknown = sorted(set(data) - set(REPLY_KEYS))
    if unknown:
        return ProposalResult("malformed", f"the reply has an unknown key {unknown[0]!r} (allowed: edit, rationale)")
    if "edit" not in data:
        return ProposalResult("malformed", "the reply has no 'edit'")
    fields, rationale = data["edit"], data.get("rationale") or ""
    if not isinstance(rationale, str):
        return ProposalResult("malformed", "'rationale' must be text")
    if fields in (None, {}, []):
        return ProposalResult("empty", "the model proposed no change")
    try:
        new = apply_edit(lp, fields)
        _check_sources(lp, new, allowed_sources)
    except EditError as exc:
        return ProposalResult("malformed", str(exc))
    changed = edit_fields(lp, new)
    if not changed:
        return ProposalResult("empty", "the proposed fields are the same as the current prompt")
    return ProposalResult("ok", "", Edit(lp.label, changed, rationale.strip(), source, changes=describe(lp, new)))


def _load_mapping(body: str) -> dict | None:
    """A mapping parsed from JSON, else YAML; None when the text is neither."""
    try:
        data = json.loads(body)
    except ValueError:
        try:
            data = load_yaml(body)
        except yaml.YAMLError:
            return None
    return data if isinstance(data, dict) else None


def _check_sources(old: LabelPrompt, new: LabelPrompt, allowed: set[str]) -> None:
    """New examples must come from the failing cases shown (tuning reports), by id."""
    for ex in new.examples:
        if ex in old.examples:
            continue
        if ex.source_report_id and ex.source_report_id not in allowed:
            raise EditError(f"example source {ex.source_report_id!r} is not one of the tuning cases shown")


# ---------------------------------------------------------------- the offline proposer


@dataclass
class Candidate:
    """One single change to try: its kind, what it adds, and how it scored on tuning."""

    kind: str
    text: str
    prompt: LabelPrompt
    origin: str = "disagreements"
    note_ids: tuple[int, ...] = ()
    fixed: int = 0
    broken: int = 0
    changed: dict = field(default_factory=dict)


def _tokens(text: str) -> list[list[str]]:
    """Lower-case words per sentence."""
    return [_WORDS.findall(part) for part in _SENTENCES.split(text.lower())]


def _ngrams(text: str, max_n: int) -> set[str]:
    """Distinct 1..max_n word n-grams within sentences, not starting or ending with a stopword."""
    out = set()
    for words in _tokens(text):
        for n in range(1, max_n + 1):
            for i in range(len(words) - n + 1):
                gram = words[i : i + n]
                if gram[0] in STOPWORDS or gram[-1] in STOPWORDS or "xxxx" in gram:
                    continue
                if max(len(w) for w in gram) < 4:
                    continue
                out.add(" ".join(gram))
    return out


def _stem(phrase: str) -> str:
    """A lower-case prefix that every form the labeller matches contains (plural endings dropped)."""
    low = phrase.lower().strip()
    return low[:-2] if len(low.split()[-1]) > 5 else low


def _covered(phrase: str, lp: LabelPrompt) -> bool:
    """Whether a phrase already contains a look-for phrase (adding it would change nothing)."""
    low = f" {phrase.lower()} "
    return any(f" {p.lower()} " in low or f" {p.lower()}s " in low for p in lp.look_for)


def mine_candidates(
    lp: LabelPrompt,
    cases: pd.DataFrame,
    positives_text: list[str],
    negatives_text: list[str],
    notes: pd.DataFrame | None = None,
    max_n: int = 3,
    min_df: int = 2,
    per_kind: int = 25,
    cues: dict | None = None,
    phrases: dict | None = None,
    uncounted_hedges: tuple[str, ...] | None = None,
) -> list[Candidate]:
    """Candidate single changes from the tuning disagreements (and their notes), most promising first.

    cases: report_id, text, reference, prediction, evidence (FN: reference 1, FP: prediction 1).
    positives_text / negatives_text: every tuning report's text by reference value (for precision).
    phrases: an outside phrase list for this label ({"mention": [...], "unmention": [...]}, e.g. the
    CheXpert labeler's), tried as look-for and do-not-label candidates like mined ones.
    uncounted_hedges: hedge cues the reference does not count (see hedge_convention) that hedge this
    label's mentions on tuning: "hedged wording counts, except these" is tried as one candidate.
    """
    notes = notes if notes is not None else pd.DataFrame(columns=["id", "report_id", "category", "text"])
    fn = cases[(cases["reference"] == 1) & (cases["prediction"] == 0)]
    fp = cases[(cases["reference"] == 0) & (cases["prediction"] == 1)]
    out: list[Candidate] = []
    cue_words = {w for phrases in (cues or DEFAULT_CUES).values() for p in phrases for w in _WORDS.findall(p.lower())}
    out += _look_for_candidates(lp, fn, positives_text, negatives_text, max_n, min_df, per_kind, cue_words)
    out += _variant_candidates(lp, fn, min_df, cue_words)
    out += _exclusion_candidates(lp, fp, cases, max_n + 1, min_df, per_kind)
    out += _example_candidates(lp, fp, min_df)
    out += _positive_example_candidates(lp, fn, positives_text, negatives_text, min_df, cue_words)
    out += _note_candidates(lp, fn, fp, notes, cue_words)
    out += _policy_candidates(lp, notes, cases)
    out += _phrase_list_candidates(lp, phrases or {})
    if uncounted_hedges is not None:
        out += _convention_candidates(lp, uncounted_hedges)
    seen: dict[LabelPrompt, Candidate] = {}
    for cand in out:
        if cand.prompt == lp:
            continue
        first = seen.setdefault(cand.prompt, cand)
        if first is not cand and cand.origin in OUTSIDE_ORIGINS and first.origin != "note":
            # the same change, also asked for by a note or an outside phrase list
            first.origin, first.note_ids = cand.origin, tuple(sorted(set(first.note_ids) | set(cand.note_ids)))
    return list(seen.values())


def _look_for_candidates(lp, fn, pos_texts, neg_texts, max_n, min_df, per_kind, cue_words) -> list[Candidate]:
    """Phrases frequent across false-negative reports and rare in reports without the finding.

    A phrase with a cue word in it ("represent mild pulmonary" from "may represent mild pulmonary
    edema") is left out: as a look-for phrase it would hide the cue from the labeller (cues inside a
    mention are ignored) instead of naming the finding; the policy flips are the honest way.
    """
    df = Counter(g for text in fn["text"] for g in _ngrams(text, max_n))
    frequent = [
        g
        for g, c in df.items()
        if c >= min_df
        and not _covered(g, lp)
        and not any(w in cue_words for w in g.split())
        and any(w not in STOPWORDS and w not in LOCATION_WORDS for w in g.split())
    ]
    if not frequent:
        return []
    pos_low, neg_low = [t.lower() for t in pos_texts], [t.lower() for t in neg_texts]

    def precision(g: str) -> float:
        stem = _stem(g)
        pos = sum(stem in t for t in pos_low)
        neg = sum(stem in t for t in neg_low)
        return pos / (pos + neg) if pos + neg else 0.0

    # a phrase that is as common without the finding is not "around the finding": leave it out
    ranked = [(df[g] * p, -len(g.split()), g) for g in frequent if (p := precision(g)) >= MIN_PRECISION]
    out = []
    for _, _, g in sorted(ranked, reverse=True)[:per_kind]:
        new = replace(lp, look_for=lp.look_for + (g,))
        out.append(Candidate("look_for", g, new))
    return out


def _variant_candidates(lp, fn, min_df: int, cue_words: set[str], gap: int = 2) -> list[Candidate]:
    """A multi-word look-for phrase with a word or two inside it, as the missed reports write it.

    "heart is enlarged" does not match "heart is mildly enlarged" (the labeller matches phrases word
    for word), so the wording found in at least min_df missed reports becomes a look-for candidate.
    """
    df: Counter = Counter()
    for phrase in lp.look_for:
        words = _WORDS.findall(phrase.lower())
        if len(words) < 2:
            continue
        filler = rf"(?:\s+[a-z-]+){{0,{gap}}}\s+"
        pattern = re.compile(r"\b" + filler.join(re.escape(w) for w in words) + r"\w*\b")
        for text in fn["text"]:
            low = " ".join(_WORDS.findall(text.lower()))
            df.update({m.group(0) for m in pattern.finditer(low)})
    out = []
    for variant, count in df.most_common():
        if count < min_df:
            break
        if _covered(variant, lp) or any(w in cue_words or w == "xxxx" for w in variant.split()):
            continue
        out.append(Candidate("look_for", variant, replace(lp, look_for=lp.look_for + (variant,))))
    return out


def _exclusion_candidates(lp, fp, cases, max_n, min_df, per_kind) -> list[Candidate]:
    """Phrases frequent in the clauses that made false positives and absent from true positives' clauses."""
    clauses = [e for e in fp["evidence"] if isinstance(e, str) and e.strip()]
    df = Counter(g for c in clauses for g in _ngrams(c, max_n))
    tp = cases[(cases["reference"] == 1) & (cases["prediction"] == 1)]
    tp_low = [e.lower() for e in tp["evidence"] if isinstance(e, str)]
    # excluding a look-for phrase itself would only switch the label off
    existing = {p.lower() for rule in lp.do_not_label_when for p in _QUOTES.findall(rule)} | {
        p.lower() for p in lp.look_for
    }
    scored = []
    for g, c in df.items():
        if c < min_df or g in existing or "'" in g:
            continue
        hits = sum(g in t for t in tp_low)
        scored.append((c - 2 * hits, -len(g.split()), g))
    out = []
    for score, _, g in sorted(scored, reverse=True)[:per_kind]:
        if score <= 0:
            break
        rule = f"the report only mentions '{g}'"
        out.append(Candidate("do_not_label_when", g, replace(lp, do_not_label_when=lp.do_not_label_when + (rule,))))
    return out


def _example_candidates(lp, fp, min_df) -> list[Candidate]:
    """A value-0 example from a false-positive clause that recurs word for word in several reports."""
    norm: Counter[str] = Counter()
    first: dict[str, tuple[str, str]] = {}
    for rid, e in zip(fp["report_id"], fp["evidence"], strict=False):
        if not isinstance(e, str) or not e.strip() or len(e.split()) < 3:
            continue
        key = " ".join(_WORDS.findall(e.lower()))
        norm[key] += 1
        first.setdefault(key, (rid, e.strip()))
    out = []
    for key, count in norm.most_common(5):
        if count < min_df:
            break
        rid, text = first[key]
        ex = Example(
            text=text,
            value=0,
            why=f"a recurring wording that does not describe the finding ({count} tuning reports)",
            source_report_id=str(rid),
        )
        out.append(Candidate("example", text, replace(lp, examples=lp.examples + (ex,))))
    return out


def _sentences(text: str) -> list[str]:
    """The sentences of a report, trimmed of end punctuation."""
    return [x.strip(" .;:") for x in re.split(r"(?<=[.!?;])\s+|\n+", text) if x.strip(" .;:")]


def _positive_example_candidates(lp, fn, pos_texts, neg_texts, min_df, cue_words) -> list[Candidate]:
    """A value-1 example from a sentence that recurs word for word in several missed reports (templated
    wording such as "The heart is mildly enlarged") and mostly in reports that have the finding."""
    df: Counter = Counter()
    first: dict[str, tuple[str, str]] = {}
    for rid, text in zip(fn["report_id"], fn["text"], strict=False):
        for sent in set(_sentences(text)):
            words = _WORDS.findall(sent.lower())
            if len(words) < 3 or "xxxx" in words or any(w in cue_words for w in words):
                continue
            key = " ".join(words)
            df[key] += 1
            first.setdefault(key, (str(rid), sent))
    if not df:
        return []
    pos_norm = [" ".join(_WORDS.findall(t.lower())) for t in pos_texts]
    neg_norm = [" ".join(_WORDS.findall(t.lower())) for t in neg_texts]
    out = []
    for key, count in df.most_common(10):
        if count < min_df:
            break
        pos, neg = sum(key in t for t in pos_norm), sum(key in t for t in neg_norm)
        if pos / (pos + neg) < MIN_PRECISION:
            continue
        rid, sent = first[key]
        ex = Example(
            text=sent,
            value=1,
            why=f"a recurring wording of the finding ({count} missed tuning reports)",
            source_report_id=rid,
        )
        out.append(Candidate("positive_example", key, replace(lp, examples=lp.examples + (ex,))))
    return out


def _note_candidates(lp, fn, fp, notes: pd.DataFrame, cue_words: set[str]) -> list[Candidate]:
    """Quoted text in the error notes: look-for phrases on missed findings, exclusions on false ones
    (a quoted cue such as 'may represent' is a policy matter, left to the policy flips)."""
    out = []
    for frame, kind in ((fn, "look_for"), (fp, "do_not_label_when")):
        mine = notes[notes["report_id"].isin(set(frame["report_id"]))]
        for note_id, text in zip(mine["id"], mine["text"], strict=False):
            for quote in _QUOTES.findall(str(text or "")):
                quote = quote.strip()
                if (
                    kind == "look_for"
                    and not _covered(quote, lp)
                    and not any(w in cue_words for w in _WORDS.findall(quote.lower()))
                ):
                    new = replace(lp, look_for=lp.look_for + (quote,))
                elif kind == "do_not_label_when":
                    quote = quote.replace("'", "")
                    new = replace(lp, do_not_label_when=lp.do_not_label_when + (f"the report only mentions '{quote}'",))
                else:
                    continue
                out.append(Candidate(kind, quote, new, origin="note", note_ids=(int(note_id),)))
    return out


def hedge_convention(clauses: list[tuple[str, int]], cues: dict, min_support: int = 3) -> dict[str, bool]:
    """Which hedge cues the reference counts as the finding: cue -> True when most hedged mentions
    under it are positive in the reference, False when most are not.

    clauses: (clause with a hedged mention, reference) pooled over every label's tuning reports: how
    annotators treat "versus" or "could represent" is a habit of the reference, not of one label, and
    pooling gives each cue the support one label alone rarely has. Cues seen fewer than min_support
    times are left out; where a cue sits inside a longer one ("may" in "may represent") the longer wins.
    """
    hedges = sorted({h.lower() for h in cues.get("hedge", ())}, key=len, reverse=True)
    counts: dict[str, list[int]] = {}
    for clause, reference in clauses:
        text = f" {' '.join(_WORDS.findall(clause.lower()))} "
        for cue in hedges:
            if f" {cue} " in text:
                counts.setdefault(cue, [0, 0])[int(reference)] += 1
                text = text.replace(f" {cue} ", " | ")
    return {cue: pos >= neg for cue, (neg, pos) in counts.items() if pos + neg >= min_support}


def uncounted_hedges(convention: dict[str, bool], clauses: list[tuple[str, int]]) -> tuple[str, ...] | None:
    """The cues the reference does not count that hedge one label's mentions where its reference is 0
    (those would become false findings); None when no cue it counts hedges the label's mentions (then
    counting hedged wording would change nothing)."""
    texts = [(f" {' '.join(_WORDS.findall(c.lower()))} ", int(r)) for c, r in clauses]
    if not any(convention[c] and f" {c} " in t for c in convention for t, _ in texts):
        return None
    return tuple(c for c in sorted(convention) if not convention[c] and any(f" {c} " in t for t, r in texts if r == 0))


def _convention_candidates(lp, uncounted: tuple[str, ...]) -> list[Candidate]:
    """Hedged wording counts except under the cues the reference does not count (as do-not-label phrases)."""
    # the hedge sentence itself names HEDGE_NAMED as counted: excepting one of them would contradict it
    uncounted = tuple(c for c in uncounted if c and "'" not in c and c not in HEDGE_NAMED)
    rules = tuple(f"the report only mentions '{c}'" for c in uncounted)
    new = policy.align_examples(
        replace(
            lp,
            hedged="positive",
            do_not_label_when=lp.do_not_label_when + tuple(r for r in rules if r not in lp.do_not_label_when),
        )
    )
    text = "hedged wording: positive" + (f" except {', '.join(repr(c) for c in uncounted)}" if uncounted else "")
    return [Candidate("hedged", text, new, origin="hedge convention")]


def _phrase_list_candidates(lp, phrases: dict) -> list[Candidate]:
    """Synonyms from an outside phrase list as look-for candidates, its "unmention" phrases as exclusions."""
    out = []
    existing = {p.lower() for p in lp.look_for}
    for phrase in phrases.get("mention", ()):
        phrase = " ".join(str(phrase).split())
        if phrase and phrase.lower() not in existing and not _covered(phrase, lp):
            out.append(
                Candidate("look_for", phrase, replace(lp, look_for=lp.look_for + (phrase,)), origin="phrase list")
            )
    for phrase in phrases.get("unmention", ()):
        phrase = " ".join(str(phrase).replace("'", "").split())
        if phrase:
            rule = f"the report only mentions '{phrase}'"
            out.append(
                Candidate(
                    "do_not_label_when",
                    phrase,
                    replace(lp, do_not_label_when=lp.do_not_label_when + (rule,)),
                    origin="phrase list",
                )
            )
    return out


def _policy_candidates(lp, notes: pd.DataFrame, cases: pd.DataFrame) -> list[Candidate]:
    """Flips of the hedge and temporal policies; those the notes' categories point at say so."""
    mine = notes[notes["report_id"].isin(set(cases["report_id"]))]
    cats = [str(c).lower() for c in mine["category"]]
    ids = tuple(int(i) for i in mine["id"])
    out = []
    flip = {"positive": "negative", "negative": "positive"}
    hedge_notes = tuple(i for i, c in zip(ids, cats, strict=False) if any(h in c for h in HEDGE_CATEGORIES))
    out.append(
        Candidate(
            "hedged",
            f"hedged wording: {flip[lp.hedged]}",
            policy.align_examples(replace(lp, hedged=flip[lp.hedged])),  # the examples follow the policy
            origin="note" if hedge_notes else "disagreements",
            note_ids=hedge_notes,
        )
    )
    temporal_notes = tuple(i for i, c in zip(ids, cats, strict=False) if any(t in c for t in TEMPORAL_CATEGORIES))
    for key in TEMPORAL_KEYS:
        temporal = dict(lp.temporal)
        temporal[key] = flip[temporal[key]]
        new = policy.align_examples(replace(lp, temporal=tuple((k, temporal[k]) for k in TEMPORAL_KEYS)))
        out.append(
            Candidate(
                "temporal",
                f"temporal {key}: {temporal[key]}",
                new,
                origin="note" if temporal_notes else "disagreements",
                note_ids=temporal_notes,
            )
        )
    return out


LabelFn = Callable[[LabelPrompt, list[str]], np.ndarray]


@dataclass
class Tuning:
    """The tuning part for one label: report ids, texts, reference and current predictions (0/1)."""

    ids: list[str]
    texts: list[str]
    reference: np.ndarray
    prediction: np.ndarray

    def __post_init__(self) -> None:
        self.lower = [" ".join(t.lower().split()) for t in self.texts]
        self.words = [" ".join(_WORDS.findall(t)) for t in self.lower]
        self.index = {rid: i for i, rid in enumerate(self.ids)}
        self.halves = _halves(self.ids)


def _could_change(cand: Candidate, base: LabelPrompt, tuning: Tuning, pred: np.ndarray) -> np.ndarray:
    """Indexes of tuning reports whose answer this candidate can change (the rest keep their prediction)."""
    if cand.kind == "look_for":
        stem = _stem(cand.text)
        return np.array([i for i, t in enumerate(tuning.lower) if stem in t and pred[i] == 0], dtype=int)
    if cand.kind == "positive_example":  # text is the sentence's words, lower-case, single-spaced
        return np.array([i for i, t in enumerate(tuning.words) if cand.text in t and pred[i] == 0], dtype=int)
    if cand.kind in ("do_not_label_when", "example"):
        return np.flatnonzero(pred == 1)
    stems = [_stem(p) for p in base.look_for] + [_stem(e.text) for e in base.examples if e.value == 1]
    return np.array([i for i, t in enumerate(tuning.lower) if any(s in t for s in stems)], dtype=int)


def _counts(reference: np.ndarray, prediction: np.ndarray) -> tuple[int, int, int]:
    """(tp, fp, fn)."""
    return (
        int(((prediction == 1) & (reference == 1)).sum()),
        int(((prediction == 1) & (reference == 0)).sum()),
        int(((prediction == 0) & (reference == 1)).sum()),
    )


def f1_of(reference: np.ndarray, prediction: np.ndarray) -> float:
    """F1 of one label (0 when there is nothing on either side)."""
    tp, fp, fn = _counts(reference, prediction)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def _score(prompt: LabelPrompt, rows: np.ndarray, tuning: Tuning, current: np.ndarray, label_fn: LabelFn) -> np.ndarray:
    """Predictions on tuning after a change that can only affect rows."""
    new = current.copy()
    if len(rows):
        new[rows] = label_fn(prompt, [tuning.texts[i] for i in rows])
    return new


POLICY_KINDS = ("hedged", "temporal")


def _halves(ids: list[str]) -> np.ndarray:
    """A fixed two-way division of tuning reports by id (0/1), the same on every machine and run."""
    return np.array([zlib.crc32(str(r).encode("utf-8")) % 2 for r in ids], dtype=int)


def _change(tuning: Tuning, before: np.ndarray, after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of tuning cases fixed and broken going from before to after."""
    right_a, right_b = before == tuning.reference, after == tuning.reference
    return ~right_a & right_b, right_a & ~right_b


def _consistent(tuning: Tuning, fixed: np.ndarray, broken: np.ndarray, origin: str = "disagreements") -> bool:
    """Whether a change mined from tuning holds on each half of tuning on its own: it loses on neither
    half, and one that breaks a tuning case must win on both.

    A trade (fixes here, breaks there) whose gain sits in one half only is a quirk of a few reports
    rather than a habit of the writing, and is what fails on new reports: the halves are a cheap
    cross-validation inside tuning, so validation stays only the gate. What a note or an outside phrase
    list asked for was not picked from these reports: it needs no halves.
    """
    if origin in OUTSIDE_ORIGINS:
        return True
    halves = tuning.halves
    net = [int((fixed & (halves == h)).sum()) - int((broken & (halves == h)).sum()) for h in (0, 1)]
    return min(net) > 0 if broken.any() else min(net) >= 0


def _mention_sentences(text: str, lp: LabelPrompt) -> list[str]:
    """The sentences of a report that contain one of the label's look-for phrases."""
    stems = [_stem(p) for p in lp.look_for] + [_stem(e.text) for e in lp.examples if e.value == 1]
    return [s for s in _sentences(text) if any(st in s.lower() for st in stems)]


def _repaired(
    cand: Candidate, base: LabelPrompt, tuning: Tuning, label_fn: LabelFn, min_df: int, per_kind: int, cues: dict
) -> Candidate | None:
    """A policy flip plus the exclusions that take back the false findings it creates.

    Flipping "hedged wording" to positive fixes the hedges the reference counts ("probable effusion")
    and breaks those it does not ("could reflect effusion"); the cues around the newly false findings,
    mined from their mention sentences, become do-not-label phrases, kept while each fixes enough.
    """
    rows = _could_change(cand, base, tuning, tuning.prediction)
    flipped = _score(cand.prompt, rows, tuning, tuning.prediction, label_fn)
    new_fp = np.flatnonzero((flipped == 1) & (tuning.prediction == 0) & (tuning.reference == 0))
    if len(new_fp) < min_df:
        return None
    tp = np.flatnonzero((flipped == 1) & (tuning.reference == 1))
    clauses = [" ".join(_mention_sentences(tuning.texts[i], cand.prompt)).lower() for i in new_fp]
    words = [" ".join(_WORDS.findall(c)) for c in clauses]
    # the hedge cues themselves ("could represent", "possible") are what usually separates the two kinds
    hedges = {h.lower() for h in cues.get("hedge", ()) if any(f" {h.lower()} " in f" {w} " for w in words)}
    df = Counter(g for c in clauses for g in _ngrams(c, 3) | {h for h in hedges if h in c})
    tp_low = [" ".join(_mention_sentences(tuning.texts[i], cand.prompt)).lower() for i in tp]
    existing = {p.lower() for p in base.look_for}
    scored = sorted(
        (
            (c - sum(g in t for t in tp_low), g in hedges, -len(g.split()), g)
            for g, c in df.items()
            if c >= min_df and g not in existing and "'" not in g and not _named_hedge(g, cand.prompt)
        ),
        reverse=True,
    )
    prompt, pred, added = cand.prompt, flipped, []
    for *_, g in scored[:per_kind]:  # the labeller decides; the order only says what to try first
        rule = f"the report only mentions '{g}'"
        trial = replace(prompt, do_not_label_when=prompt.do_not_label_when + (rule,))
        rows = np.flatnonzero(pred == 1)
        new = _score(trial, rows, tuning, pred, label_fn)
        fixed, broken = _change(tuning, pred, new)
        if fixed.sum() >= min_df and broken.sum() * 2 < fixed.sum():
            prompt, pred = trial, new
            added.append(g)
    if not added:
        return None
    return Candidate(
        cand.kind,
        f"{cand.text} with exclusions {', '.join(repr(a) for a in added)}",
        prompt,
        origin=cand.origin,
        note_ids=cand.note_ids,
    )


def _named_hedge(phrase: str, lp: LabelPrompt) -> bool:
    """Whether excluding phrase would contradict a hedge policy that counts the hedge cues it names."""
    return lp.hedged == "positive" and any(f" {c} " in f" {phrase.lower()} " for c in HEDGE_NAMED)


def consistency_check(lp: LabelPrompt, cues: dict | None, vocab: Vocabulary | None) -> Callable[[LabelPrompt], list]:
    """A function giving the contradictions a revision of lp would add to it (none it already has)."""
    name = vocab.label(lp.label).name if vocab is not None and lp.label in vocab.ids else lp.label
    cues = cues or DEFAULT_CUES
    before = set(policy.label_contradictions(lp, name, cues, vocab))
    return lambda new: [f for f in policy.label_contradictions(new, name, cues, vocab) if f not in before]


def offline_propose(
    lp: LabelPrompt,
    tuning: Tuning,
    label_fn: LabelFn,
    candidates: list[Candidate],
    min_fixed: int = 2,
    broken_ratio: float = 0.25,
    keep: int = 4,
    source: str = "offline",
    level: int = 0,
    min_df: int = 2,
    per_kind: int = 25,
    cues: dict | None = None,
    avoid: frozenset = frozenset(),
    vocab: Vocabulary | None = None,
) -> ProposalResult:
    """Score candidates on tuning with the real labeller; combine the best few into one edit, greedily.

    A candidate counts when it fixes at least min_fixed tuning cases, breaks at most broken_ratio of
    what it fixes, and helps on each half of tuning by itself. Candidates are then added one at a time,
    each step taking the best one scored against the prompt built so far, while each still fixes
    enough. level > 0 asks for a smaller, safer edit (after a proposal was rejected on validation): no
    policy flip, one change that breaks no tuning case. avoid: label prompts already turned down; a
    step that would build one of them takes the next best change instead. A candidate or a combination that
    would make the prompt contradict itself (core/policy.py; with the vocabulary, look-for phrases that name no
    finding of the label) is never proposed.
    """
    base_f1 = f1_of(tuning.reference, tuning.prediction)
    contradictions = consistency_check(lp, cues, vocab)
    pool = list(candidates)
    if level > 0:
        pool = [c for c in pool if c.kind not in POLICY_KINDS]
        keep, broken_ratio = 1, 0.0
    else:
        pool += [
            r
            for c in candidates
            if c.kind == "hedged"
            and (r := _repaired(c, lp, tuning, label_fn, min_df, per_kind, cues or DEFAULT_CUES)) is not None
        ]
    pool = [c for c in pool if not contradictions(c.prompt)]
    good = []
    for cand in pool:
        rows = _could_change(cand, lp, tuning, tuning.prediction)
        fixed, broken = _change(
            tuning, tuning.prediction, _score(cand.prompt, rows, tuning, tuning.prediction, label_fn)
        )
        cand.fixed, cand.broken = int(fixed.sum()), int(broken.sum())
        if _acceptable(cand.fixed, cand.broken, min_fixed, broken_ratio) and _consistent(
            tuning, fixed, broken, cand.origin
        ):
            good.append(cand)
    if not good:
        return ProposalResult(
            "empty",
            f"no candidate change fixes {min_fixed} or more tuning cases on both halves "
            f"of tuning without breaking others ({len(pool)} tried)",
        )
    used: list[Candidate] = []
    current_lp, current_pred, current_f1 = lp, tuning.prediction.copy(), base_f1
    while good and len(used) < keep:
        ranked = []
        for order, cand in enumerate(good):
            combined = _combine(current_lp, lp, cand.prompt)
            rows = _could_change(cand, current_lp, tuning, current_pred)
            new = _score(combined, rows, tuning, current_pred, label_fn)
            fixed, broken = _change(tuning, current_pred, new)
            f, b = int(fixed.sum()), int(broken.sum())
            f1 = f1_of(tuning.reference, new)
            # fewer errors at equal F1 counts too (false positives on a label with no positive at all)
            if (
                combined in avoid
                or contradictions(combined)
                or not (
                    f1 >= current_f1
                    and f > b
                    and _acceptable(f, b, min_fixed, broken_ratio)
                    and _consistent(tuning, fixed, broken, cand.origin)
                )
            ):
                continue
            # best net gain, less one case for each item beyond the first (a small edit generalises better);
            # then what a note or a phrase list asked for; then a phrase or rule before an example (an
            # example's report leaves evaluation); then the shorter phrase
            key = (
                f - 2 * b - _size(lp, cand.prompt) + 1,
                cand.origin in OUTSIDE_ORIGINS,
                "example" not in cand.kind,
                -len(cand.text.split()),
            )
            ranked.append((key, -order, cand, combined, new, f1))  # ties: the order mined
        if not ranked:
            break
        _, _, cand, current_lp, current_pred, current_f1 = max(ranked, key=lambda r: r[:2])
        used.append(cand)
        good = [c for c in good if c is not cand and not (c.kind == cand.kind == "hedged")]  # one hedge policy
    if not used:
        return ProposalResult("empty", "no combination of candidates raised tuning F1")
    note_ids = tuple(sorted({i for c in used for i in c.note_ids}))
    rationale = f"tuning F1 {base_f1:.3f} -> {current_f1:.3f}; " + "; ".join(
        f"{c.kind} {c.text!r}: fixes {c.fixed}, breaks {c.broken}" for c in used
    )
    edit = Edit(lp.label, edit_fields(lp, current_lp), rationale, source, note_ids, describe(lp, current_lp))
    apply_edit(lp, edit.fields)  # the combined edit must pass the strict validation like any other
    return ProposalResult("ok", "", edit)


def _size(base: LabelPrompt, new: LabelPrompt) -> int:
    """How many items an edit adds or changes: phrases, rules, examples, policies."""
    return (
        len(set(new.look_for) - set(base.look_for))
        + len(set(new.do_not_label_when) - set(base.do_not_label_when))
        + len(set(new.examples) - set(base.examples))
        + int(new.hedged != base.hedged)
        + sum(a != b for a, b in zip(new.temporal_policy().values(), base.temporal_policy().values(), strict=False))
    )


def _acceptable(fixed: int, broken: int, min_fixed: int, broken_ratio: float) -> bool:
    """Enough cases fixed, and a new error only where many are fixed (a small gain must be clean)."""
    if fixed < min_fixed:
        return False
    return broken == 0 if fixed < 2 * min_fixed else broken <= broken_ratio * fixed


def _combine(current: LabelPrompt, base: LabelPrompt, single: LabelPrompt) -> LabelPrompt:
    """current plus the one change single makes to base."""
    return replace(
        current,
        look_for=current.look_for + tuple(p for p in single.look_for if p not in base.look_for),
        do_not_label_when=current.do_not_label_when
        + tuple(r for r in single.do_not_label_when if r not in base.do_not_label_when),
        examples=current.examples + tuple(e for e in single.examples if e not in base.examples),
        hedged=single.hedged if single.hedged != base.hedged else current.hedged,
        temporal=tuple(
            (
                k,
                single.temporal_policy()[k]
                if single.temporal_policy()[k] != base.temporal_policy()[k]
                else current.temporal_policy()[k],
            )
            for k in TEMPORAL_KEYS
        ),
    )


__all__ = [
    "Edit",
    "EditError",
    "ProposalResult",
    "Candidate",
    "Tuning",
    "apply_edit",
    "edit_fields",
    "describe",
    "parse_reply",
    "mine_candidates",
    "offline_propose",
    "f1_of",
    "hedge_convention",
    "uncounted_hedges",
]
