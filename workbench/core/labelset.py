"""The label set from the corpus: finding mentions normalised, grouped into candidate labels and compared.

A study on a new report type should not start from a vocabulary typed by hand: the corpus says which
findings it holds. Candidates come from the corpus' own words (no built-in list of findings): each
mention is a noun phrase of a clause, asserted as affirmed, negated or uncertain by the engine that
found it; side, severity and change words become attribute evidence; placing words (lobe, base,
pleural ...) and word order do not split a finding; plural and abbreviated forms join their full form.
Candidates are ranked by the number of reports with an affirmed mention, so a finding only ever
written as "no pneumothorax" is no candidate. Pure functions over plain values.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

AFFIRMED, NEGATED, UNCERTAIN = "affirmed", "negated", "uncertain"
ASSERTIONS = (AFFIRMED, NEGATED, UNCERTAIN)
MAX_EXAMPLES = 5
MAX_LOOK_FOR = 6
# a head word is "generic" (disease, change, aorta) when it stands alone in fewer than this share of its
# mentions: its modifier then names the finding ("granulomatous disease", "degenerative change")
GENERIC_BARE_SHARE = 0.2
# two head words are one finding's word family when they share a stem this long, covering this share of
# the shorter word ("atelectasis"/"atelectatic", "calcified"/"calcification", "nodule"/"nodular")
STEM_MIN = 5
STEM_SHARE = 0.7
_WORD = re.compile(r"[a-z][a-z'-]*")
# English plurals that no suffix rule undoes (grammar, not findings)
_LATIN_PLURALS = {
    "apices": "apex",
    "vertices": "vertex",
    "cortices": "cortex",
    "indices": "index",
    "bronchi": "bronchus",
}


@dataclass(frozen=True)
class Mention:
    """One finding mention: where it is, its words and what the report asserts about it."""

    report_id: str
    sentence: str
    text: str  # the surface form as written (attribute words left out), lower case
    assertion: str
    attributes: tuple[tuple[str, str], ...] = ()
    normal: bool = False  # said to be normal, clear or intact ("the heart is normal in size")
    capitals: bool | None = None  # written in capital letters ("COPD"); None when the source does not say


@dataclass
class Candidate:
    """A candidate label: surface forms grouped under one name with their support and evidence."""

    key: str
    name: str
    forms: list[tuple[str, int]]
    affirmed_reports: int
    negated_reports: int
    uncertain_reports: int
    affirmed_mentions: int
    examples: list[dict] = field(default_factory=list)
    attributes: dict[str, dict[str, int]] = field(default_factory=dict)
    definition: str = ""
    look_for: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    affirmed_forms: dict[str, int] = field(default_factory=dict)  # form -> its affirmed mentions

    def to_json(self) -> dict:
        """A JSON-ready dict (forms as {text, count}, most frequent first)."""
        return {
            "key": self.key,
            "name": self.name,
            "forms": [{"text": t, "count": n} for t, n in self.forms],
            "affirmed_reports": self.affirmed_reports,
            "negated_reports": self.negated_reports,
            "uncertain_reports": self.uncertain_reports,
            "affirmed_mentions": self.affirmed_mentions,
            "examples": self.examples,
            "attributes": self.attributes,
            "definition": self.definition,
            "look_for": self.look_for,
            "overlaps": self.overlaps,
            "affirmed_forms": self.affirmed_forms,
        }


# ---------------------------------------------------------------- words


@functools.lru_cache(maxsize=65536)
def singular(word: str) -> str:
    """A word's singular for grouping ("opacities" -> "opacity", "effusions" -> "effusion"); Latin/Greek
    singulars ending in -is/-us/-ss ("atelectasis", "bronchus") stay as they are."""
    w = word.lower()
    if len(w) <= 3 or w.endswith(("ss", "us", "is", "ous", "ics")):
        return w
    if w in _LATIN_PLURALS:
        return _LATIN_PLURALS[w]
    if w.endswith("aces") and len(w) > 6:  # "pneumothoraces", "hemithoraces"
        return w[:-3] + "x"
    if w.endswith("ies"):
        return w[:-3] + "y"
    if w.endswith("ses") and w[:-2].endswith(("sis", "xis")):
        return w[:-2]
    if w.endswith(("ches", "shes", "xes", "sses")):
        return w[:-2]
    if w.endswith("s") and not w.endswith("'s"):
        return w[:-1]
    return w


def shared_stem(a: str, b: str) -> bool:
    """Whether two head words are one word family (a common stem of STEM_MIN letters and STEM_SHARE of the shorter)."""
    if a == b:
        return True
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n >= STEM_MIN and n >= STEM_SHARE * min(len(a), len(b))


def initials(words: list[str], skip: frozenset[str]) -> str:
    """The initials of a phrase's words, function words aside ("chronic obstructive pulmonary disease" -> "copd")."""
    return "".join(w[0] for w in words if w not in skip)


# ---------------------------------------------------------------- attributes of a chunk


def attribute_words(attribute_cues: dict[str, dict[str, tuple[str, ...]]]) -> dict[str, tuple[str, str]]:
    """Single-word attribute cues -> (attribute, value), from the study's attribute cues (side, severity, change).

    Cues that name a finding in the plural ("effusions", "pneumothoraces" say bilateral) are not attribute
    words here: they are the finding itself."""
    out: dict[str, tuple[str, str]] = {}
    for name, values in attribute_cues.items():
        for value, phrases in values.items():
            for phrase in phrases:
                words = phrase.lower().split()
                if len(words) == 1 and words[0] not in out and not _plural_noun_cue(words[0]):
                    out[words[0]] = (name, value)
    return out


def _plural_noun_cue(word: str) -> bool:
    """A cue like "effusions" or "pneumothoraces" (a finding in the plural), not a placing word like "bases"."""
    return word.endswith(("ions", "aces")) or (word.endswith("s") and len(word) > 8)


# ---------------------------------------------------------------- grouping


@dataclass(frozen=True)
class Lexicon:
    """The word lists that normalise forms: attribute words, placing words and function words."""

    attributes: dict[str, tuple[str, str]]
    placing: frozenset[str]
    stop: frozenset[str]

    def core(self, text: str) -> list[str]:
        """A form's finding words: singular, attribute, placing and function words left out."""
        return [
            singular(w)
            for w in _WORD.findall(text.lower())
            if w not in self.attributes and w not in self.placing and w not in self.stop
        ]


def form_key(words: list[str], generic: set[str], anatomy: frozenset[str] | set[str] = frozenset()) -> tuple[str, ...]:
    """What a form groups under: its last finding word, with the nearest word before it that is no structure
    when that head is generic or a structure ("granulomatous disease", "tortuous aorta", "enlarged heart");
    () when every word names a structure (the heart, the mediastinal contour: anatomy, no finding)."""
    if not words or all(w in anatomy for w in words):
        return ()
    head = words[-1]
    if head in generic or head in anatomy:
        mods = [w for w in words[:-1] if w not in anatomy]
        return (mods[-1], head) if mods else (head,)
    return (head,)


def anatomy_words(mentions: list[Mention], lex: Lexicon, min_normal: int = 3, share: float = 0.1) -> set[str]:
    """Words the corpus calls normal ("the heart is normal in size", "osseous structures are intact"): the
    head words of at least min_normal normal mentions, and of at least this share of their mentions."""
    normal: Counter = Counter()
    total: Counter = Counter()
    for m in mentions:
        words = lex.core(m.text)
        if not words:
            continue
        total[words[-1]] += 1
        if m.normal:
            normal.update(set(words))
    return {w for w, n in normal.items() if n >= min_normal and n >= share * max(total[w], 1)}


def generic_heads(core_counts: Counter) -> set[str]:
    """Head words that mostly come with a modifier ("disease", "change"): the modifier names the finding."""
    bare: Counter = Counter()
    total: Counter = Counter()
    for words, n in core_counts.items():
        if not words:
            continue
        total[words[-1]] += n
        if len(words) == 1:
            bare[words[-1]] += n
    return {h for h, n in total.items() if bare[h] < GENERIC_BARE_SHARE * n}


def abbreviations(
    forms: Counter, lex: Lexicon, min_letters: int = 2, capitals: set[str] | None = None
) -> dict[str, str]:
    """Abbreviation -> the corpus' multi-word form whose initials it spells ("copd" -> "chronic obstructive
    pulmonary disease"); the most frequent such form wins, and only forms seen in this corpus count.

    capitals: the one-word forms the reports mostly write in capital letters, when the mentions say how they are
    written. Only those are taken for abbreviations: "COPD" is one, while "old" (which spells "obstructive lung
    disease") is a word. A corpus written all in capitals makes every form eligible, as without case."""
    by_initials: dict[str, tuple[int, str]] = {}
    for text, n in forms.items():
        words = _WORD.findall(text)
        if len(words) < 2:
            continue
        key = initials(words, lex.stop)
        if len(key) >= min_letters and (key not in by_initials or n > by_initials[key][0]):
            by_initials[key] = (n, text)
    out = {}
    for text in forms:
        words = _WORD.findall(text)
        if capitals is not None and text not in capitals:
            continue
        if len(words) == 1 and words[0] in by_initials and by_initials[words[0]][1] != text:
            out[words[0]] = by_initials[words[0]][1]
    return out


def written_in_capitals(mentions: list[Mention]) -> set[str] | None:
    """The forms written in capital letters in at least half their mentions; None when no mention says how it is
    written (an extraction that returns lower-case text)."""
    known = [m for m in mentions if m.capitals is not None]
    if not known:
        return None
    total, upper = Counter(m.text for m in known), Counter(m.text for m in known if m.capitals)
    return {t for t, n in total.items() if 2 * upper[t] >= n}


def same_family(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether two keys name one finding: their defining words share a stem ("atelectasis"/"atelectatic",
    "granuloma"/"granulomatous disease"); two modified generic heads need both words to agree."""
    if len(a) == 2 and len(b) == 2:
        return shared_stem(a[0], b[0]) and shared_stem(a[1], b[1])
    return shared_stem(a[0], b[0])


def cluster_keys(keys: Counter) -> dict[tuple, tuple]:
    """key -> the key of its word family (the most frequent member), families found by shared stems."""
    order = sorted(keys, key=lambda k: (-keys[k], k))
    root: dict[tuple, tuple] = {}
    by_prefix: dict[str, list[tuple]] = defaultdict(list)  # a shared stem starts with the same STEM_MIN letters
    for k in order:
        near = by_prefix[k[0][:STEM_MIN]] if len(k[0]) >= STEM_MIN else [r for r in by_prefix[k[0]]]
        found = next((r for r in near if same_family(k, r)), None)
        root[k] = found or k
        if found is None:
            by_prefix[k[0][:STEM_MIN] if len(k[0]) >= STEM_MIN else k[0]].append(k)
    return root


def group_mentions(mentions: list[Mention], lex: Lexicon, abbrev: dict[str, str] | None = None) -> dict[str, list]:
    """Candidate key (its family's words) -> its mentions; plural, inverted, abbreviated and attribute-qualified forms share a key."""
    form_counts = Counter(m.text for m in mentions)
    abbrev = {**abbreviations(form_counts, lex, capitals=written_in_capitals(mentions)), **(abbrev or {})}
    cores = {t: tuple(lex.core(abbrev.get(t, t))) for t in form_counts}
    core_counts: Counter = Counter()
    for t, n in form_counts.items():
        core_counts[cores[t]] += n
    generic = generic_heads(core_counts)
    anatomy = anatomy_words(mentions, lex)
    keys = {t: form_key(list(cores[t]), generic, anatomy) for t in form_counts}
    key_counts: Counter = Counter()
    for t, n in form_counts.items():
        if keys[t]:
            key_counts[keys[t]] += n
    family = cluster_keys(key_counts)
    groups: dict[str, list] = defaultdict(list)
    for m in mentions:
        k = keys[m.text]
        if k:
            groups[" ".join(family[k])].append(m)
    return dict(groups)


def display_form(text: str) -> str:
    """A surface form as shown: lower case, last word singular ("Pleural effusions" -> "pleural effusion")."""
    words = text.lower().split()
    return " ".join(words[:-1] + [singular(words[-1])]) if words else ""


def build_candidate(key: str, mentions: list[Mention]) -> Candidate:
    """One candidate from its mentions: forms with counts, report counts per assertion, examples, attributes."""
    reports: dict[str, set] = {a: set() for a in ASSERTIONS}
    affirmed_forms: Counter = Counter()
    all_forms: Counter = Counter()
    attrs: dict[str, Counter] = defaultdict(Counter)
    for m in mentions:
        reports[m.assertion].add(m.report_id)
        shown = display_form(m.text)
        all_forms[shown] += 1
        if m.assertion == AFFIRMED:
            affirmed_forms[shown] += 1
            for name, value in m.attributes:
                attrs[name][value] += 1
    forms = sorted(all_forms.items(), key=lambda tn: (-affirmed_forms[tn[0]], -tn[1], tn[0]))
    name = forms[0][0] if forms else key
    cand = Candidate(
        key=key,
        name=name,
        forms=forms,
        affirmed_reports=len(reports[AFFIRMED]),
        negated_reports=len(reports[NEGATED]),
        uncertain_reports=len(reports[UNCERTAIN]),
        affirmed_mentions=sum(1 for m in mentions if m.assertion == AFFIRMED),
        examples=_examples(mentions),
        attributes={a: dict(c.most_common()) for a, c in sorted(attrs.items())},
        affirmed_forms=dict(affirmed_forms.most_common()),
    )
    cand.look_for = [t for t, _ in forms[:MAX_LOOK_FOR] if affirmed_forms[t]]
    cand.definition = suggested_definition(cand)
    return cand


def _examples(mentions: list[Mention]) -> list[dict]:
    """Up to MAX_EXAMPLES affirmed sentences (then uncertain, then negated), one per report."""
    rank = {AFFIRMED: 0, UNCERTAIN: 1, NEGATED: 2}
    seen, out = set(), []
    for m in sorted(mentions, key=lambda m: rank[m.assertion]):
        if m.report_id in seen:
            continue
        seen.add(m.report_id)
        out.append({"report_id": m.report_id, "sentence": m.sentence, "assertion": m.assertion})
        if len(out) == MAX_EXAMPLES:
            break
    return out


def suggested_definition(c: Candidate) -> str:
    """A starting definition from the corpus' own wording, for the reviewers to correct."""
    others = [t for t, _ in c.forms[1:4]]
    also = f" (also written {', '.join(repr(t) for t in others)})" if others else ""
    attrs = f"; reports qualify it by {', '.join(c.attributes)}" if c.attributes else ""
    return f"The report describes {c.name}{also}{attrs}."


def rank(candidates: list[Candidate], min_reports: int = 1) -> list[Candidate]:
    """Candidates with at least min_reports affirmed reports, most affirmed reports first (then name)."""
    kept = [c for c in candidates if c.affirmed_reports >= max(1, min_reports)]
    return sorted(kept, key=lambda c: (-c.affirmed_reports, -c.affirmed_mentions, c.name))


def candidates_from(
    mentions: list[Mention], lex: Lexicon, min_reports: int = 1, abbrev: dict[str, str] | None = None
) -> list[Candidate]:
    """Mentions -> ranked candidates (the whole offline grouping step)."""
    groups = group_mentions(mentions, lex, abbrev)
    return rank([build_candidate(k, ms) for k, ms in groups.items()], min_reports)


# ---------------------------------------------------------------- comparison with a vocabulary


@dataclass(frozen=True)
class LabelWords:
    """What a vocabulary label is called and how its prompt says to look for it."""

    id: str
    name: str
    phrases: tuple[str, ...]


@dataclass
class Comparison:
    """Candidates against a vocabulary: additions, unsupported labels and look-for gaps."""

    vocabulary: str
    covered: dict[str, list[str]]  # label id -> candidate keys
    additions: list[Candidate]
    unsupported: list[str]
    missing_forms: dict[str, list[tuple[str, int]]]

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {
            "vocabulary": self.vocabulary,
            "covered": self.covered,
            "additions": [
                {"name": c.name, "affirmed_reports": c.affirmed_reports, "forms": [t for t, _ in c.forms[:5]]}
                for c in self.additions
            ],
            "unsupported": self.unsupported,
            "missing_forms": {k: [{"text": t, "count": n} for t, n in v] for k, v in self.missing_forms.items()},
        }


def label_keys(label: LabelWords, lex: Lexicon, candidates: list[Candidate]) -> set[str]:
    """The candidate keys a label's name and look-for phrases fall under (with the corpus' word families)."""
    keys = {c.key: tuple(c.key.split()) for c in candidates}
    out = set()
    for phrase in (label.name, *label.phrases):
        words = lex.core(phrase)
        mine = [tuple(words[-n:]) for n in (1, 2) if len(words) >= n]
        # a label's own word covers its modified forms too ("opacity" covers "reticular opacity")
        out |= {
            ck
            for ck, k in keys.items()
            if any(same_family(m, k) or (len(words) == 1 and same_family(m, k[-1:])) for m in mine)
        }
        shown = display_form(phrase)
        out |= {c.key for c in candidates if any(shown == t for t, _ in c.forms)}
    return out


def _covers(phrases: tuple[str, ...], form: str) -> bool:
    """Whether a look-for phrase occurs in a form (word-bounded, singular or plural)."""
    return any(re.search(rf"(?<!\w){re.escape(display_form(p))}(?!\w)", form) for p in phrases if p.strip())


def compare(
    candidates: list[Candidate], labels: list[LabelWords], lex: Lexicon, vocabulary: str = "", min_form: int = 2
) -> Comparison:
    """Side by side: candidates no label covers (additions), labels no candidate supports (unsupported), and
    per covered label the forms (seen at least min_form times, affirmed) its look-for phrases lack."""
    covered, missing = {}, {}
    taken: set[str] = set()
    for lab in labels:
        keys = label_keys(lab, lex, candidates)
        hits = [c for c in candidates if c.key in keys and c.affirmed_reports > 0]
        covered[lab.id] = [c.key for c in hits]
        taken |= {c.key for c in hits}
        lacks = [
            (t, n)
            for c in hits
            for t, n in c.affirmed_forms.items()
            if n >= min_form and not _covers((lab.name, *lab.phrases), t)
        ]
        if lacks:
            missing[lab.id] = sorted(lacks, key=lambda tn: (-tn[1], tn[0]))[:10]
    return Comparison(
        vocabulary=vocabulary,
        covered=covered,
        additions=[c for c in candidates if c.key not in taken],
        unsupported=[lab.id for lab in labels if not covered[lab.id]],
        missing_forms=missing,
    )


def mark_overlaps(candidates: list[Candidate], labels: list[LabelWords], lex: Lexicon) -> None:
    """Set each candidate's `overlaps` to the vocabulary labels whose words fall under it."""
    for lab in labels:
        keys = label_keys(lab, lex, candidates)
        for c in candidates:
            if c.key in keys and lab.id not in c.overlaps:
                c.overlaps.append(lab.id)


# ---------------------------------------------------------------- the long tail


def coverage_curve(candidates: list[Candidate]) -> list[float]:
    """Share of all affirmed mentions covered by the top k candidates, for k = 1..n."""
    total = sum(c.affirmed_mentions for c in candidates)
    out, run = [], 0
    for c in candidates:
        run += c.affirmed_mentions
        out.append(run / total if total else 0.0)
    return out


def top_share(candidates: list[Candidate], k: int) -> float:
    """Share of affirmed mentions covered by the top k candidates (0 when there are none)."""
    curve = coverage_curve(candidates)
    return curve[min(k, len(curve)) - 1] if curve and k > 0 else 0.0


# ---------------------------------------------------------------- review


RULES = ("unanimous", "k_of_n")
ACTIONS = ("approve", "reject", "merge", "rename")
OPEN, SETTLED = "open", "settled"


@dataclass(frozen=True)
class ReviewRule:
    """How many reviewers must agree on a candidate: all of them (Ran Score's rule) or k of the n named."""

    reviewers: tuple[str, ...]
    rule: str = "unanimous"
    k: int = 0

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"approval rule {self.rule!r}: use one of {', '.join(RULES)}")
        if not self.reviewers:
            raise ValueError("the approval rule needs at least one reviewer")
        if self.rule == "k_of_n" and not 1 <= self.k <= len(self.reviewers):
            raise ValueError(f"k of n: k must be 1..{len(self.reviewers)} (the reviewers named), got {self.k}")

    @property
    def needed(self) -> int:
        """Agreeing votes that settle a candidate."""
        return len(self.reviewers) if self.rule == "unanimous" else self.k

    def describe(self) -> str:
        """One line for people."""
        who = ", ".join(self.reviewers)
        return f"unanimous ({who})" if self.rule == "unanimous" else f"{self.k} of {len(self.reviewers)} ({who})"


@dataclass(frozen=True)
class Outcome:
    """Where one candidate stands: settled on a decision, or open with who has not agreed."""

    status: str
    decision: tuple[str, str] | None  # (action, argument): ("merge", target key), ("rename", name), ("approve", "")
    waiting_on: tuple[str, ...]
    adjudicated: bool = False


def outcome(votes: dict[str, tuple[str, str]], rule: ReviewRule, settled: tuple[str, str] | None = None) -> Outcome:
    """A candidate's outcome from its reviewers' votes (reviewer -> (action, argument)) under the rule; an
    adjudicator's settlement wins. Votes of people who are not reviewers do not count."""
    if settled is not None:
        return Outcome(SETTLED, settled, (), adjudicated=True)
    counted = {r: v for r, v in votes.items() if r in rule.reviewers}
    tally = Counter(counted.values())
    top = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))
    if top and top[0][1] >= rule.needed:
        return Outcome(SETTLED, top[0][0], ())
    # the leading vote, when one leads: with a tie nobody's vote is the one the others must join
    lead = top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None
    waiting = tuple(r for r in rule.reviewers if counted.get(r) is None or counted[r] != lead)
    return Outcome(OPEN, None, waiting)


def check_vote(action: str, argument: str, keys: set[str], key: str) -> tuple[str, str]:
    """A vote made safe to store: a known action, a merge target that exists and is another candidate, a name."""
    if action not in ACTIONS:
        raise ValueError(f"unknown review action {action!r}: use one of {', '.join(ACTIONS)}")
    argument = (argument or "").strip()
    if action == "merge":
        if argument not in keys:
            raise ValueError(f"merge target {argument!r} is not a candidate of this label set")
        if argument == key:
            raise ValueError("a candidate cannot be merged into itself")
    elif action == "rename" and not argument:
        raise ValueError("rename needs the new name")
    elif action in ("approve", "reject"):
        argument = ""
    return action, argument


# ---------------------------------------------------------------- adoption


def label_id(name: str) -> str:
    """A vocabulary id from a display name ("Pleural effusion" -> "pleural_effusion")."""
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return slug if slug and slug[0].isalpha() else f"label_{slug}"


def approved_labels(rows: list[dict]) -> list[dict]:
    """Vocabulary labels from reviewed candidates (dicts with key, name, definition, look_for, forms, attributes
    and decision): approved and renamed ones, with the forms of the candidates merged into them."""
    kept = [r for r in rows if r["decision"] and r["decision"][0] in ("approve", "rename")]
    out, used = [], set()
    for r in kept:
        name = r["decision"][1] if r["decision"][0] == "rename" else r["name"]
        merged = [m for m in rows if m["decision"] and m["decision"] == ("merge", r["key"])]
        look_for = list(dict.fromkeys([*r["look_for"], *(t for m in merged for t in m["look_for"][:3])]))
        lid = label_id(name)
        while lid in used:
            lid += "_2"
        used.add(lid)
        attrs = sorted({a for x in [r, *merged] for a in x.get("attributes", {})})
        out.append(
            {
                "id": lid,
                "name": name,
                "category": "corpus",
                "definition": r["definition"],
                "look_for": look_for,
                "attributes": attrs,
                "from": [r["key"], *(m["key"] for m in merged)],
            }
        )
    return out


def vocabulary_document(vocab_id: str, name: str, labels: list[dict], source: str) -> dict:
    """The vocabulary file (as data) of an adopted label set; a derived No Finding closes it, as in every shipped one."""
    body = [
        {k: v for k, v in lab.items() if k != "from" and (v or k in ("id", "name", "definition"))} for lab in labels
    ]
    body.append(
        {
            "id": "no_finding",
            "name": "No Finding",
            "category": "global",
            "definition": "None of the other labels is positive (derived, never asked).",
            "derived": "none_of_others",
        }
    )
    return {
        "id": vocab_id,
        "name": name,
        "description": "Mined from the corpus and approved by its reviewers.",
        "source": source,
        "labels": body,
    }


def starter_prompt(label: dict) -> dict:
    """A label's starter prompt (iteration 1) written from its definition and look-for phrases."""
    look_for = list(label.get("look_for") or []) or [label["name"].lower()]
    first = look_for[0]
    return {
        "label": label["id"],
        "task": f"Does this chest X-ray report describe {label['name'].lower()}?",
        "definition": label.get("definition") or f"The report describes {label['name'].lower()}.",
        "look_for": look_for,
        "do_not_label_when": [f"the finding is negated (for example 'no {first}')."],
        "hedged": "negative",
        "temporal": {"resolved": "negative", "stable": "positive", "improving": "positive", "prior": "negative"},
        "examples": [{"text": f"No {first}.", "value": 0, "why": "The finding is negated."}],
    }


@dataclass
class VocabularyChange:
    """What adopting a label set does to a vocabulary: labels added, renamed, merged and dropped."""

    added: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    merged: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line per kind of change, for the CLI and the app."""
        out = [f"added: {', '.join(self.added) or 'none'}"]
        out.append(f"renamed: {', '.join(f'{a} -> {b}' for a, b in self.renamed) or 'none'}")
        out.append(f"merged: {', '.join(f'{a} into {b}' for a, b in self.merged) or 'none'}")
        out.append(f"dropped (their readings and runs are kept): {', '.join(self.dropped) or 'none'}")
        return out


def vocabulary_change(old: list[tuple[str, str]], new: list[dict], merges: list[tuple[str, str]]) -> VocabularyChange:
    """Compare an old vocabulary's (id, name) pairs with the adopted labels: a label keeps its id when the id or
    name matches, is renamed when its name changed, and is dropped when nothing adopted carries it."""
    change = VocabularyChange()
    old_ids = {i for i, _ in old}
    old_by_name = {n.lower(): i for i, n in old}
    carried = set()
    for lab in new:
        was = lab["id"] if lab["id"] in old_ids else old_by_name.get(lab["name"].lower())
        if was is None:
            change.added.append(lab["id"])
            continue
        carried.add(was)
        name = dict(old)[was]
        (change.renamed.append((name, lab["name"])) if name != lab["name"] else change.kept.append(was))
    change.merged = list(merges)
    change.dropped = [i for i, _ in old if i not in carried and i != "no_finding"]
    return change


# ---------------------------------------------------------------- the model engine's replies


EXTRACTION_INSTRUCTIONS = (
    "List every finding this chest X-ray report mentions, one entry per finding, as JSON: "
    '{"findings": [{"text": "<the finding as written, without side or size words>", '
    '"assertion": "affirmed" | "negated" | "uncertain"}]}. Use "negated" for findings the report rules out '
    '("no pneumothorax") and "uncertain" for hedged ones ("possible pneumonia"). Answer with the JSON only.'
)


def parse_entities(text: str) -> list[tuple[str, str]]:
    """A model's extraction reply -> [(finding text, assertion)]; ValueError names what is wrong (never guessed)."""
    import json

    body = text.strip()
    fenced = re.match(r"^```(?:json)?\s*(.*?)\s*```$", body, re.DOTALL)
    body = fenced.group(1) if fenced else body
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the reply is not JSON ({exc.msg} at character {exc.pos})") from None
    items = data.get("findings") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError('the reply has no "findings" list')
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise ValueError(f"finding {i + 1} has no text")
        assertion = str(item.get("assertion", "")).strip().lower()
        if assertion not in ASSERTIONS:
            raise ValueError(
                f"finding {i + 1}: assertion {item.get('assertion')!r} is not one of {', '.join(ASSERTIONS)}"
            )
        out.append((item["text"].strip(), assertion))
    return out


def entity_mentions(report_id: str, entities: list[tuple[str, str]], lex: Lexicon) -> list[Mention]:
    """Mentions from a model's entities: attribute words become attributes, as in the offline engine."""
    out = []
    for text, assertion in entities:
        words = _WORD.findall(text.lower())
        shown = [w for w in words if w not in lex.attributes]
        attrs = tuple(sorted({lex.attributes[w] for w in words if w in lex.attributes}))
        if lex.core(" ".join(shown)):
            out.append(Mention(report_id, text, " ".join(shown), assertion, attrs))
    return out


def trim_attribute_cues(task: dict, carried: set[str]) -> dict:
    """A task file's data without the attribute cues of attributes no label of the vocabulary carries (the
    prompt set refuses cues for an attribute it does not know)."""
    cues = task.get("attribute_cues")
    if not isinstance(cues, dict):
        return task
    kept = {name: values for name, values in cues.items() if name in carried}
    out = {k: v for k, v in task.items() if k != "attribute_cues"}
    if kept:
        out["attribute_cues"] = kept
    return out
