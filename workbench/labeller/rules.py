"""The offline labeller: a deterministic, rule-based baseline (not an LLM) behind the model interface.

It reads the same structured prompt an LLM is given (look-for phrases, quoted exclusions, hedge
and temporal policy, few-shot examples) and applies NegEx-style rules to it, so that a
clinician's prompt edit changes its answers the way it would change a model's, with no network
and no weights. It is the default "model" of a fresh study and the labeller of every offline
test.

How one label is decided for one report:

1. The report is split into clauses: at sentence ends (". ", "?", "!", a period glued to the
   next capital as in "apex.There"), at ";", at blank lines, at line breaks before a capital,
   a number or a bullet (not inside hard-wrapped sentences), at a section header opening a line
   ("FINDINGS:", left out of every clause), and before every ``scope_break``
   cue ("but", "however", "which", ...; the cue starts the new clause).
2. Mentions are occurrences of a ``look_for`` phrase or of the text of a value-1 few-shot
   example of at most 6 words: case-insensitive, starting at a word boundary, whitespace
   inside a phrase matching any whitespace, and a plural allowed on the last word
   ("effusion" -> "effusions", "opacity" -> "opacities", "atelectasis" -> "atelectases",
   "pneumothorax" -> "pneumothoraces"). Other derived forms ("nodular", "emphysematous") must
   be listed: that is what look-for phrases are for.
3. Exclusion phrases are the single-quoted fragments of the ``do_not_label_when`` rules
   (rules without quotes are for the model only). A mention does not count when it overlaps an
   exclusion phrase ("effusion" inside 'pericardial effusion', while "pleural effusion" later in
   the same clause still counts), nor anywhere in a clause that contains an exclusion phrase
   overlapping no mention (context such as 'calcified granuloma' next to "nodule"). A mention
   also does not count when its clause overlaps an occurrence of a value-0 few-shot example's
   text.
4. A counted mention is negated (0) by a ``negation`` cue before it in the same clause, within
   8 words of each list item ("no effusion, consolidation or pneumothorax" negates all three;
   "no focal airspace opacity to suggest pneumonia" reaches pneumonia), unless a hedge cue or
   "there is/are" comes in between; or by a built-in post-negation at most 3 words after it
   ("is not seen", "not definitely seen", "are absent", "is excluded", "ruled out").
   Pseudo-negations ("no interval change", "without significant change", "not only") negate
   nothing. The windows were chosen on OpenI (6 -> 8 words before lifted pneumonia and mass).
5. Otherwise it is hedged when a ``hedge`` cue is within 8 words before or 3 words after it
   (``lp.hedged`` then decides), and it carries the temporal kind of the first cue kind found
   anywhere in the clause in the order resolved > improving > stable > prior
   (``lp.temporal_policy()`` then decides). Resolved wins because "improved and now resolved" is resolved; improving
   beats stable because "stable to slightly improved" reports a change; prior is weakest
   because "prior"/"previous" mostly name the comparison study: a prior cue preceded by a
   comparison word ("compared to prior", "unchanged from the previous") or followed by a study
   word ("prior exam", "previous radiograph") is ignored. A mention is positive only when
   every policy that applies to it (hedge, temporal) says positive.
6. Cues that overlap the mention itself are ignored (a look-for phrase "chronic obstructive
   pulmonary disease" is not a prior cue), and a negation cue that overlaps a hedge or temporal
   cue yields to it ("no longer" is resolved, "cannot be excluded" is a hedge, "interval
   resolution of" is resolved).
7. A value-1 few-shot example longer than 6 words that occurs in the report (word for word,
   punctuation aside) makes the label positive, as an LLM shown that exact case would answer.

The report is positive when any mention is positive; the evidence is that clause, verbatim from
the report. Otherwise the value is 0 and the evidence is the clause of the first mention that was
set aside (negated, hedged, temporal, excluded or suppressed), or "" when nothing was mentioned.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.core.attributes import CATEGORY, combine
from workbench.core.prompts import ATTRIBUTE_CUE_PREFIX, LabelPrompt
from workbench.errors import UserError
from workbench.labeller.llm import CallResult

RULES_MODEL = "workbench/rules"
# Part of every call-cache key of this engine: any change to these rules changes the answers, so
# cached answers of an older engine must not be reused (a hash of the sources that decide an answer:
# this module and the one that combines attribute values, computed once).
ENGINE_SOURCES = (Path(__file__), Path(__file__).parents[1] / "core" / "attributes.py")
ENGINE_VERSION = hashlib.sha256(b"".join(p.read_bytes() for p in ENGINE_SOURCES)).hexdigest()[:12]
PRE_WINDOW = 8
POST_WINDOW = 3
SHORT_EXAMPLE_WORDS = 6
TEMPORAL_PRECEDENCE = ("resolved", "improving", "stable", "prior")
# Built-in cue patterns (regex sources) that are not prompt content: negations that negate nothing
# ("no interval change in the effusion" says the effusion is there) and negations after the mention.
PSEUDO_NEGATION = (
    r"(?:no|without)\s+(?:(?:significant|substantial|appreciable|interval|other|definite|visible|marked)\s+){0,3}"
    r"(?:change|changes|increase|progression|worsening)",
    r"not\s+only",
    r"not\s+(?:significantly\s+)?changed",
)
POST_NEGATION = (
    r"not\s+(?:\w+ly\s+)?(?:seen|identified|present|visualized|visualised|evident|appreciated|demonstrated"
    r"|detected|noted|apparent)",
    r"absent",
    r"excluded",
    r"ruled\s+out",
)
TERMINATORS = ("there is", "there are", "there has been", "there have been", "there was", "there were")
_STUDY_WORDS = (
    "exam",
    "exams",
    "examination",
    "examinations",
    "study",
    "studies",
    "film",
    "films",
    "radiograph",
    "radiographs",
    "image",
    "images",
    "imaging",
    "ct",
    "x-ray",
    "xray",
    "chest",
    "comparison",
    "one",
    "pa",
    "ap",
    "cxr",
)
_CACHE_LIMIT = 4096

_WORD = re.compile(r"\w+")
_LIST_SEP = re.compile(r",|(?<!\w)(?:or|nor)(?!\w)", re.IGNORECASE)
# A single line break ends a clause only before what starts a line of its own (a capital, "1.", a
# bullet): hard-wrapped reports ("no effusion or\n pneumothorax") keep their negation scope.
# A section header at the start of a line ("FINDINGS:", "IMPRESSION:") is a delimiter, not evidence.
_SENTENCE_END = re.compile(
    r"[.!?]+(?=\s|$)|\.(?=[A-Z])|;|\r?\n\s*\n|\r?\n(?=[ \t]*(?:[A-Z]|\d+[.)]|[-*\u2022]))"
    r"|(?:^|(?<=\n))[ \t]*[A-Z][A-Z /&-]{2,}:"
)
_TRIM = " \t\r\n,:-"
_QUOTED = re.compile(r"(?<![\w'‘’])['‘]([^'‘’\n]+?)['’](?!\w)")
_COMPARISON_BEFORE = re.compile(
    r"(?<!\w)(?:compared\s+(?:to|with)|from|since|than|to|versus|vs\.?)\s+(?:the\s+|a\s+|an\s+)?$", re.IGNORECASE
)
_COMPARISON_WORDS = ("prior", "previous", "previously", "earlier")
_STUDY_AFTER = re.compile(r"^\s+(?:" + "|".join(re.escape(w) for w in _STUDY_WORDS) + r")(?!\w)", re.IGNORECASE)


# ---------------------------------------------------------------- regex building


def phrase_pattern(phrase: str, plural: bool = True) -> str:
    """Regex source for one phrase: escaped, whitespace-tolerant, word-bounded, plural on the last word."""
    words = phrase.split()
    if not words:
        raise ValueError("empty phrase")
    head = [re.escape(w) for w in words[:-1]]
    last = words[-1]
    tail = _plural_tail(last) if plural else re.escape(last)
    return r"(?<!\w)" + r"\s+".join(head + [tail]) + r"(?!\w)"


def _plural_tail(word: str) -> str:
    """The last word with its plural forms allowed."""
    low = word.lower()
    if not word[-1:].isalpha():
        return re.escape(word)
    if re.search(r"[^aeiou]y$", low):
        return re.escape(word[:-1]) + "(?:y|ies)"
    if low.endswith("is") and len(low) > 4:
        return re.escape(word[:-2]) + "(?:is|es)"
    if low.endswith(("ax", "ex", "ix")):
        return re.escape(word[:-1]) + "(?:x|ces)"
    return re.escape(word) + "(?:s|es)?"


def _alternation(phrases, plural: bool) -> re.Pattern | None:
    """One case-insensitive regex matching any phrase, longest first; None when there are none."""
    uniq = sorted({p.strip() for p in phrases if p and p.strip()}, key=lambda p: (-len(p), p.lower()))
    if not uniq:
        return None
    return re.compile("|".join(f"(?:{phrase_pattern(p, plural)})" for p in uniq), re.IGNORECASE)


def _loose_pattern(text: str) -> re.Pattern | None:
    """Regex matching text word for word with any punctuation or spacing between words."""
    words = _WORD.findall(text)
    if not words:
        return None
    return re.compile(r"(?<!\w)" + r"\W+".join(re.escape(w) for w in words) + r"(?!\w)", re.IGNORECASE)


def exclusion_phrases(rules) -> tuple[str, ...]:
    """Every single-quoted fragment of the do_not_label_when rules, in order, without repeats."""
    out: list[str] = []
    for rule in rules:
        for frag in _QUOTED.findall(rule):
            frag = frag.strip()
            if frag and frag.lower() not in {f.lower() for f in out}:
                out.append(frag)
    return tuple(out)


def _example_phrase(text: str) -> str:
    """An example's text as a look-for phrase (surrounding punctuation dropped)."""
    return text.strip().strip(".;:,!?\"' ").strip()


# ---------------------------------------------------------------- compiled cues and prompts


def _overlaps(a: tuple[int, int], spans) -> bool:
    """Whether span a shares at least one character with any of spans."""
    return any(s < a[1] and a[0] < e for s, e in spans)


@dataclass
class _Clause:
    """Cue spans found in one clause (clause-relative offsets)."""

    negation: list
    post_negation: list
    hedge: list
    terminators: list
    temporal: dict


class _CueSet:
    """Compiled cue lists plus the per-report and per-clause caches that depend only on them."""

    def __init__(self, cues: dict[str, tuple[str, ...]]):
        self.negation = _alternation(cues.get("negation", ()), plural=False)
        self.hedge = _alternation(cues.get("hedge", ()), plural=False)
        self.temporal = {k: _alternation(cues.get(k, ()), plural=False) for k in TEMPORAL_PRECEDENCE}
        self.scope_break = _alternation(cues.get("scope_break", ()), plural=False)
        self.pseudo = _builtin(PSEUDO_NEGATION)
        self.post = _builtin(POST_NEGATION)
        self.terminators = _alternation(TERMINATORS, plural=False)
        self._splits: dict[str, list[tuple[int, int]]] = {}
        self._clauses: dict[str, _Clause] = {}

    def split(self, report: str) -> list[tuple[int, int]]:
        """Clause spans of a report, cached."""
        spans = self._splits.get(report)
        if spans is None:
            if len(self._splits) >= _CACHE_LIMIT:
                self._splits.clear()
            spans = self._splits[report] = self._split(report)
        return spans

    def _split(self, report: str) -> list[tuple[int, int]]:
        """Sentence ends, ';' and line breaks end a clause; a scope-break cue starts one."""
        cuts = [0]
        for m in _SENTENCE_END.finditer(report):
            cuts += [m.start(), m.end()]
        cuts.append(len(report))
        spans: list[tuple[int, int]] = []
        for s, e in zip(cuts[::2], cuts[1::2], strict=False):
            starts = [s] + ([m.start() for m in self.scope_break.finditer(report, s, e)] if self.scope_break else [])
            for a, b in zip(starts, starts[1:] + [e], strict=False):
                span = _trim(report, a, b)
                if span and _WORD.search(report, span[0], span[1]):
                    spans.append(span)
        return spans

    def clause(self, text: str) -> _Clause:
        """Cue spans of one clause text, cached."""
        info = self._clauses.get(text)
        if info is None:
            if len(self._clauses) >= _CACHE_LIMIT:
                self._clauses.clear()
            info = self._clauses[text] = self._analyse(text)
        return info

    def _analyse(self, text: str) -> _Clause:
        """Find every cue in a clause and settle overlaps between cue kinds."""
        hedge = _spans(self.hedge, text)
        temporal = {k: _spans(p, text) for k, p in self.temporal.items()}
        temporal["prior"] = [sp for sp in temporal["prior"] if not _is_comparison(text, sp)]
        pseudo = _spans(self.pseudo, text)
        yielding = hedge + [sp for spans in temporal.values() for sp in spans] + pseudo
        negation = [sp for sp in _spans(self.negation, text) if not _overlaps(sp, yielding)]
        post = [sp for sp in _spans(self.post, text) if not _overlaps(sp, yielding)]
        return _Clause(
            negation=negation,
            post_negation=post,
            hedge=hedge,
            terminators=_spans(self.terminators, text),
            temporal=temporal,
        )


def _builtin(sources) -> re.Pattern:
    """A case-insensitive, word-bounded alternation of regex sources."""
    return re.compile(r"(?<!\w)(?:" + "|".join(sources) + r")(?!\w)", re.IGNORECASE)


def _spans(pattern: re.Pattern | None, text: str) -> list[tuple[int, int]]:
    """Non-overlapping match spans of pattern in text."""
    return [] if pattern is None else [m.span() for m in pattern.finditer(text)]


def _is_comparison(text: str, span: tuple[int, int]) -> bool:
    """Whether a prior cue ("prior", "previous") names the comparison study rather than an old finding."""
    if text[span[0] : span[1]].lower() not in _COMPARISON_WORDS:
        return False
    return bool(_COMPARISON_BEFORE.search(text, 0, span[0]) or _STUDY_AFTER.match(text[span[1] :]))


def _trim(text: str, a: int, b: int) -> tuple[int, int] | None:
    """Span [a, b) without surrounding spaces and list punctuation; None when empty."""
    while a < b and text[a] in _TRIM:
        a += 1
    while b > a and text[b - 1] in _TRIM:
        b -= 1
    return (a, b) if a < b else None


@dataclass(frozen=True)
class _Label:
    """One LabelPrompt compiled for matching."""

    mention: re.Pattern | None
    exclusion: re.Pattern | None
    suppress: tuple
    force: tuple
    hedge_positive: bool
    temporal_positive: dict


def _compile_label(lp: LabelPrompt) -> _Label:
    """Precompile a label's phrases, exclusions and examples."""
    short_pos = [
        _example_phrase(ex.text) for ex in lp.examples if ex.value == 1 and len(ex.text.split()) <= SHORT_EXAMPLE_WORDS
    ]
    long_pos = [ex.text for ex in lp.examples if ex.value == 1 and len(ex.text.split()) > SHORT_EXAMPLE_WORDS]
    neg = [ex.text for ex in lp.examples if ex.value == 0]
    return _Label(
        mention=_alternation(list(lp.look_for) + short_pos, plural=True),
        exclusion=_alternation(exclusion_phrases(lp.do_not_label_when), plural=True),
        suppress=tuple(p for p in map(_loose_pattern, neg) if p is not None),
        force=tuple(p for p in map(_loose_pattern, long_pos) if p is not None),
        hedge_positive=lp.hedged == "positive",
        temporal_positive={k: v == "positive" for k, v in lp.temporal_policy().items()},
    )


_CUESETS: dict[tuple, _CueSet] = {}
_LABELS: dict[LabelPrompt, _Label] = {}


def _cueset(cues: dict[str, tuple[str, ...]]) -> _CueSet:
    """The compiled cue set for a cue dict (by content)."""
    key = tuple(sorted((k, tuple(v)) for k, v in cues.items()))
    found = _CUESETS.get(key)
    if found is None:
        if len(_CUESETS) >= 64:
            _CUESETS.clear()
        found = _CUESETS[key] = _CueSet(cues)
    return found


def _label(lp: LabelPrompt) -> _Label:
    """The compiled form of a LabelPrompt (by content: an edited prompt compiles afresh)."""
    found = _LABELS.get(lp)
    if found is None:
        if len(_LABELS) >= _CACHE_LIMIT:
            _LABELS.clear()
        found = _LABELS[lp] = _compile_label(lp)
    return found


def clear_caches() -> None:
    """Forget compiled prompts, cue sets and split reports (benchmarks start cold with this)."""
    _CUESETS.clear()
    _LABELS.clear()


# ---------------------------------------------------------------- deciding


def _in_scope(text: str, a: int, b: int, window: int, blockers) -> bool:
    """Whether a cue ending at a reaches a mention starting at b (or the reverse for post cues)."""
    if a > b or any(a <= s and e <= b for s, e in blockers):
        return False
    return all(len(_WORD.findall(seg)) <= window for seg in _LIST_SEP.split(text[a:b]))


def _outside(spans, span: tuple[int, int]) -> list:
    """The spans that do not overlap span (cues inside a mention are part of the phrase)."""
    return [sp for sp in spans if not _overlaps(sp, [span])]


def _judge(text: str, span: tuple[int, int], info: _Clause, comp: _Label) -> str:
    """Outcome of one mention in its clause: positive, negated, hedged or the temporal kind."""
    ms, me = span
    pre_blockers = info.hedge + info.terminators
    if any(e <= ms and _in_scope(text, e, ms, PRE_WINDOW, pre_blockers) for _, e in _outside(info.negation, span)):
        return "negated"
    if any(
        s >= me and _in_scope(text, me, s, POST_WINDOW, info.terminators) for s, _ in _outside(info.post_negation, span)
    ):
        return "negated"
    hedge = _outside(info.hedge, span)
    hedged = any(e <= ms and _in_scope(text, e, ms, PRE_WINDOW, info.terminators) for _, e in hedge) or any(
        s >= me and _in_scope(text, me, s, POST_WINDOW, info.terminators) for s, _ in hedge
    )
    if hedged and not comp.hedge_positive:
        return "hedged"
    for kind in TEMPORAL_PRECEDENCE:
        if _outside(info.temporal[kind], span):
            return "positive" if comp.temporal_positive.get(kind, True) else kind
    return "positive"


def explain(report: str, lp: LabelPrompt, cues: dict[str, tuple[str, ...]]) -> list[dict]:
    """Every mention of the label with its clause and why it counts or not, in report order.

    Each item: start/end/clause (the clause, verbatim), mention (the matched words), rule (cues,
    exclusion or example) and outcome: positive, negated, hedged, resolved, improving, stable,
    prior, excluded or suppressed.
    """
    comp, cs = _label(lp), _cueset(cues)
    out: list[dict] = []
    for pattern in comp.force:
        for m in pattern.finditer(report):
            out.append(
                {
                    "start": m.start(),
                    "end": m.end(),
                    "clause": report[m.start() : m.end()],
                    "mention": m.group(0),
                    "outcome": "positive",
                    "rule": "example",
                    "at": m.span(),
                }
            )
    if comp.mention is None or comp.mention.search(report) is None:
        return sorted(out, key=lambda d: d["start"])
    spans = cs.split(report)
    suppressed = _suppressed_clauses(report, spans, comp)
    for i, (a, b) in enumerate(spans):
        text = report[a:b]
        found = list(comp.mention.finditer(text))
        if not found:
            continue
        excluded = _excluded(text, [m.span() for m in found], comp)
        info = None if i in suppressed or all(excluded) else cs.clause(text)
        for m, is_excluded in zip(found, excluded, strict=False):
            if i in suppressed:
                outcome, rule = "suppressed", "example"
            elif is_excluded:
                outcome, rule = "excluded", "exclusion"
            else:
                outcome, rule = _judge(text, m.span(), info, comp), "cues"
            out.append(
                {
                    "start": a,
                    "end": b,
                    "clause": text,
                    "mention": m.group(0),
                    "outcome": outcome,
                    "rule": rule,
                    "at": (a + m.start(), a + m.end()),
                }
            )
    return sorted(out, key=lambda d: d["start"])


def _excluded(text: str, mentions: list[tuple[int, int]], comp: _Label) -> list[bool]:
    """Per mention: inside an exclusion phrase, or in a clause whose exclusion phrase is context."""
    spans = _spans(comp.exclusion, text)
    context = any(not _overlaps(sp, mentions) for sp in spans)
    return [context or _overlaps(m, spans) for m in mentions]


def _suppressed_clauses(report: str, spans: list[tuple[int, int]], comp: _Label) -> set[int]:
    """Indexes of clauses that overlap an occurrence of a value-0 example's text."""
    hit: set[int] = set()
    starts = [a for a, _ in spans]
    for pattern in comp.suppress:
        for m in pattern.finditer(report):
            i = max(bisect.bisect_right(starts, m.start()) - 1, 0)
            while i < len(spans) and spans[i][0] < m.end():
                if spans[i][1] > m.start():
                    hit.add(i)
                i += 1
    return hit


def label_one(report: str, lp: LabelPrompt, cues: dict[str, tuple[str, ...]], spec: tuple = ()) -> dict:
    """Label one report for one label: {"value": 0|1, "evidence": clause verbatim from the report}, plus
    "attributes" for a positive answer when the label has attributes (spec)."""
    comp = _label(lp)
    if not comp.force and (comp.mention is None or comp.mention.search(report) is None):
        return {"value": 0, "evidence": ""}
    mentions = explain(report, lp, cues)
    positive = [d for d in mentions if d["outcome"] == "positive"]
    if positive:
        out = {"value": 1, "evidence": positive[0]["clause"]}
        if spec:
            out["attributes"] = attributes_of(report, positive, cues, spec)
        return out
    return {"value": 0, "evidence": mentions[0]["clause"] if mentions else ""}


def label_report(report: str, prompts, cues: dict[str, tuple[str, ...]], specs: dict | None = None) -> dict[str, dict]:
    """Label one report for several labels: {label id: {"value", "evidence"[, "attributes"]}}."""
    specs = specs or {}
    return {lp.label: label_one(report, lp, cues, specs.get(lp.label, ())) for lp in prompts}


# ---------------------------------------------------------------- attributes


# Words that only modify or place a finding: a coordinated chunk made of these and attribute cues belongs
# to the finding next to it ("small right and moderate left effusions", "effusions, left greater than
# right"); a chunk with any other word names another finding and its attributes stay its own.
MODIFIER_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "these",
        "there",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "seen",
        "noted",
        "present",
        "identified",
        "again",
        "also",
        "now",
        "still",
        "on",
        "in",
        "at",
        "of",
        "to",
        "than",
        "from",
        "into",
        "within",
        "involving",
        "along",
        "greater",
        "larger",
        "more",
        "less",
        "worse",
        "equal",
        "similar",
        "side",
        "sides",
        "lung",
        "lungs",
        "base",
        "bases",
        "basal",
        "basilar",
        "apex",
        "apices",
        "apical",
        "hemithorax",
        "hemithoraces",
        "lobe",
        "lobes",
        "lower",
        "upper",
        "middle",
        "mid",
        "zone",
        "zones",
        "field",
        "fields",
        "region",
        "regions",
        "lingula",
        "lingular",
        "perihilar",
        "hilar",
        "posterior",
        "anterior",
        "lateral",
        "medial",
        "costophrenic",
        "angle",
        "angles",
        "pleural",
        "space",
        "spaces",
        "lobar",
        "segmental",
        "subsegmental",
        "sided",
        "size",
        "sized",
        "before",
        "previously",
        "prior",
        "previous",
        "since",
        "compared",
        "comparison",
        "study",
        "exam",
        "examination",
        "radiograph",
        "film",
    ]
)  # the last line: comparison words ("slightly larger than before" describes the finding's change)
_COORDINATION = re.compile(r",|(?<!\w)(?:and|with|plus|as well as)(?!\w)", re.IGNORECASE)


def _attribute_patterns(cues: dict, spec: tuple) -> tuple[list, re.Pattern | None]:
    """([(attribute, (pattern, value of each group))], one pattern of every cue) for the attributes of
    spec that have cues; cached per cue dict object (a run passes the same dict with every request, and
    cue dicts are built afresh, never changed in place)."""
    hit = _ATTRIBUTE_PATTERNS.get((id(cues), spec))
    if hit is not None and hit[0] is cues:
        return hit[1]
    found, phrases = [], []
    for name, values in spec:
        pairs = [(w.strip(), v) for v in values for w in cues.get(f"{ATTRIBUTE_CUE_PREFIX}{name}:{v}", ()) if w.strip()]
        if not pairs:
            continue
        pairs.sort(key=lambda pv: (-len(pv[0]), pv[0].lower()))  # longest first, as _alternation does
        phrases += [w for w, _ in pairs]
        # one pattern per attribute, a group per phrase: the matched group says which value it names
        pattern = re.compile("|".join(f"({phrase_pattern(w, plural=False)})" for w, _ in pairs), re.IGNORECASE)
        firsts = frozenset(_WORD.findall(w)[0].lower() for w, _ in pairs if _WORD.search(w))
        found.append((name, (pattern, [v for _, v in pairs], firsts)))
    if len(_ATTRIBUTE_PATTERNS) >= 256:
        _ATTRIBUTE_PATTERNS.clear()
    # a cue that names a plural finding ("effusions", "pneumothoraces": plural, not a placing word) says
    # bilateral of its own finding, but a chunk holding it names that finding: it never joins another's scope
    placing = [w for w in phrases if not _names_a_finding(w)]
    result = (found, _alternation(placing, plural=False))
    _ATTRIBUTE_PATTERNS[(id(cues), spec)] = (cues, result)  # the dict is kept, so its id is not reused
    return result


_ATTRIBUTE_PATTERNS: dict = {}


def _names_a_finding(phrase: str) -> bool:
    """Whether a cue phrase ends in a plural noun that is not a placing word (a finding named in the plural)."""
    words = _WORD.findall(phrase.lower())
    return bool(words) and words[-1].endswith("s") and words[-1] not in MODIFIER_WORDS


def _modifier_only(text: str, any_cue: re.Pattern | None) -> bool:
    """Whether a chunk holds only attribute cues and placing words (no finding of its own)."""
    rest = any_cue.sub(" ", text) if any_cue is not None else text
    return all(w.lower() in MODIFIER_WORDS for w in _WORD.findall(rest))


def attribute_scope(clause: str, start: int, end: int, any_cue: re.Pattern | None) -> str:
    """The part of a clause that describes the mention at [start, end): its coordinated chunk plus
    neighbouring chunks that hold no other finding."""
    cuts = [0] + [x for m in _COORDINATION.finditer(clause) for x in m.span()] + [len(clause)]
    chunks = list(zip(cuts[::2], cuts[1::2], strict=False))
    here = next((i for i, (a, b) in enumerate(chunks) if a <= start < b or (a < end <= b)), 0)
    lo = hi = here
    while lo > 0 and _modifier_only(clause[chunks[lo - 1][0] : chunks[lo - 1][1]], any_cue):
        lo -= 1
    while hi + 1 < len(chunks) and _modifier_only(clause[chunks[hi + 1][0] : chunks[hi + 1][1]], any_cue):
        hi += 1
    return clause[chunks[lo][0] : chunks[hi][1]]


def _values_in(text: str, compiled) -> list[str]:
    """The values whose cues occur in text, in text order."""
    pattern, values, firsts = compiled
    out, end = [], -1
    for word in _WORD.finditer(text):  # try the pattern only where a cue can start: 10x faster than finditer
        if word.start() >= end and word.group().lower() in firsts:
            m = pattern.match(text, word.start())
            if m:
                out.append(values[m.lastindex - 1])
                end = m.end()
    return out


def attributes_of(report: str, positives: list[dict], cues: dict, spec: tuple) -> dict[str, str]:
    """Attribute values of a positive finding read from the scope of each positive mention; several
    mentions combine (left + right is bilateral, the largest severity wins). Attributes without a cue
    in scope are left out (not stated)."""
    patterns, any_cue = _attribute_patterns(cues, spec)
    if not patterns:
        return {}
    seen: dict[str, list[str]] = {}
    for d in positives:
        clause_start = d["start"]
        ms, me = d.get("at", (d["start"], d["end"]))
        scope = attribute_scope(d["clause"], ms - clause_start, me - clause_start, any_cue)
        for name, pats in patterns:
            found = _values_in(scope, pats)
            if not found and CATEGORY.get(name) == "laterality/location":
                # a place stated once in a clause places every finding there that states none of its own:
                # "consolidation and atelectasis in the right base", "left base opacity, likely atelectasis";
                # a clause naming two places ("atelectasis, right effusion and left pneumothorax") places none
                found = _values_in(d["clause"], pats)
                found = found if len(set(found)) == 1 else []
            seen.setdefault(name, []).extend(found)
    out = {}
    for name, _ in spec:
        value = combine(name, seen.get(name, []))
        if value is not None:
            out[name] = value
    return out


# ---------------------------------------------------------------- engine interface


_ABSENT = {"value": 0, "evidence": ""}
_ABSENT_JSON = json.dumps(_ABSENT, ensure_ascii=False)


def answer(meta: dict) -> str:
    """The JSON reply a well-behaved model would give for one request's meta."""
    for key in ("report", "mode", "prompts", "cues"):
        if key not in meta:
            raise KeyError(f"rules engine: request.meta needs {key!r} (has {sorted(meta)})")
    prompts, mode = list(meta["prompts"]), meta["mode"]
    if mode == "per_label":
        if len(prompts) != 1:
            raise ValueError(f"rules engine: per_label mode needs exactly one prompt, got {len(prompts)}")
        decision = label_one(
            meta["report"], prompts[0], meta["cues"], (meta.get("attributes") or {}).get(prompts[0].label, ())
        )
        if decision == _ABSENT:  # most answers of a run: the same text, serialised once
            return _ABSENT_JSON
        return json.dumps(decision, ensure_ascii=False)
    if mode == "joint":
        return json.dumps(
            {"labels": label_report(meta["report"], prompts, meta["cues"], meta.get("attributes"))}, ensure_ascii=False
        )
    raise ValueError(f"rules engine: unknown mode {mode!r} (per_label or joint)")


def _message_chars(messages) -> int:
    """Characters of rendered chat messages (for the token estimate)."""
    return sum(len(str(m.get("content") or "")) for m in messages or ())


def complete_all(requests: list, cfg, on_result, cancel=None) -> None:
    """Answer every request in order, calling on_result(request, CallResult) once each; stops when cancel is set."""
    model = getattr(cfg, "model", RULES_MODEL)
    if model != RULES_MODEL:
        raise UserError(f"rules engine: unknown offline model {model!r} (only {RULES_MODEL!r})")
    for request in requests:
        if cancel is not None and cancel.is_set():
            return
        started = time.perf_counter()
        text = answer(request.meta)
        on_result(
            request,
            CallResult(
                key=request.key,
                text=text,
                error=None,
                error_kind=None,
                prompt_tokens=_message_chars(request.messages) // 4,
                completion_tokens=len(text) // 4,
                cost=0.0,
                latency_s=time.perf_counter() - started,
                attempts=1,
            ),
        )
