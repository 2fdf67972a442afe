"""The offline label-set miner: finding mentions of a corpus by rules, asserted with the labeller's own cues.

Deterministic and local (no model, no network): clauses are split and each mention's assertion is judged
exactly as the offline labeller judges a look-for phrase (workbench/labeller/rules.py: negation within 8
words, post-negations, hedges, resolved and prior wording), so a finding written only as "no
pneumothorax" is never evidence that the corpus holds one. What a mention is comes from the corpus: a
run of words between function words (scikit-learn's English stop words), report verbs and cue words.
Three patterns a radiologist writes every day are read as one mention: "the heart is mildly enlarged"
(a subject and its predicate: "enlarged heart", severity mild), "changes of the thoracic spine" (the
place after "of"/"in" qualifies, it is no finding of its own) and "effusion, pleural, left" (an
inverted index term). A clause that calls its subject normal, clear or intact affirms no finding.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

from workbench.core import labelset as ls
from workbench.core.prompts import DEFAULT_CUES, TaskSpec
from workbench.labeller.rules import MODIFIER_WORDS, _CueSet, _judge  # the labeller's own assertion rules

# what the report says about the finding, as the labeller's judge names it
_OUTCOME = {"positive": ls.AFFIRMED, "negated": ls.NEGATED, "resolved": ls.NEGATED}
# a judge that treats every hedge as uncertain and resolved/prior wording as not present now
_NEUTRAL = SimpleNamespace(hedge_positive=False, temporal_positive={"resolved": False, "prior": False})
# words of report-writing, not findings: verbs of seeing, the study itself, comparison wording
REPORT_WORDS = frozenset(
    [
        "seen",
        "noted",
        "note",
        "notes",
        "identified",
        "demonstrated",
        "demonstrate",
        "demonstrates",
        "visualized",
        "visualised",
        "present",
        "presence",
        "appear",
        "appears",
        "appeared",
        "appearance",
        "suggest",
        "suggests",
        "suggesting",
        "suggestive",
        "represent",
        "represents",
        "representing",
        "consistent",
        "compatible",
        "evidence",
        "likely",
        "unlikely",
        "probably",
        "given",
        "view",
        "views",
        "exam",
        "exams",
        "examination",
        "study",
        "studies",
        "comparison",
        "compared",
        "prior",
        "previous",
        "previously",
        "radiograph",
        "radiographs",
        "radiographic",
        "film",
        "films",
        "finding",
        "findings",
        "impression",
        "patient",
        "patients",
        "chest",
        "xray",
        "x-ray",
        "xxxx",
        "cxr",
        "pa",
        "ap",
        "frontal",
        "portable",
        "upright",
        "image",
        "images",
        "imaging",
        "limits",
        "limit",
        "acute",
        "visible",
        "shown",
        "showing",
        "show",
        "shows",
        "projecting",
        "projects",
        "overlies",
        "overlying",
        "measuring",
        "measures",
        "measure",
        "cm",
        "mm",
        "given",
        "history",
        "clinical",
        "correlation",
        "recommend",
        "recommended",
        "followup",
        "follow-up",
        "ct",
        "exclude",
        "excluded",
        "evaluate",
        "evaluation",
        "assessment",
        "assess",
        "limited",
        "today",
        "date",
        "dated",
        "time",
        "technique",
        "specifically",
        "approximately",
        "obtained",
        "consider",
        "considered",
        "considering",
        "consideration",
        "consist",
        "consists",
        "reveal",
        "reveals",
        "revealed",
        "confirm",
        "confirmed",
        "include",
        "includes",
        "including",
        "reflect",
        "reflects",
        "reflecting",
        "favor",
        "favoring",
        "favored",
        "due",
        "related",
        "status",
        "post",
        "known",
        "unknown",
        "appearing",
        "grossly",
        "overall",
        "remaining",
        "remarkable",
        "significantly",
        "causing",
        "telephone",
        "discussed",
        "dr",
        "called",
        "age",
        "terminate",
        "terminates",
        "terminating",
        "ends",
        "extends",
        "extending",
        "courses",
        "coursing",
        "positioned",
        "placed",
        "located",
    ]
)
# a clause that says its subject is normal affirms nothing about it
NORMAL_WORDS = frozenset(["normal", "normally", "unremarkable", "clear", "intact", "negative"])
# words that call a structure normal only as its predicate ("the trachea is midline", "airways are patent",
# "the angles are sharp", "lungs are well expanded"): before a noun they may name a finding ("midline sternotomy")
NORMAL_PREDICATES = frozenset(["midline", "patent", "sharp", "expanded", "aerated"])
COPULA = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "appears",
        "appear",
        "remain",
        "remains",
        "remained",
        "seems",
        "seem",
        "now",
        "still",
        "also",
    ]
)
# words that put what follows them in place of the finding before them ("changes of the spine")
PLACE_LINKS = frozenset(
    [
        "of",
        "in",
        "on",
        "within",
        "at",
        "above",
        "below",
        "near",
        "along",
        "involving",
        "overlying",
        "over",
        "the",
        "a",
        "an",
        "both",
        "this",
    ]
)
# nouns that name no finding of their own: in "X of Y" the finding is Y
GENERAL_NOUNS = frozenset(
    [
        "change",
        "changes",
        "sign",
        "signs",
        "feature",
        "features",
        "sequela",
        "sequelae",
        "area",
        "areas",
        "amount",
        "degree",
        "focus",
        "foci",
        "component",
    ]
)
# nouns for a part of something ("catheter tip", "the tip of the catheter"): the finding is the thing, so a form
# ending in one is named without it, and one alone names no finding
PART_NOUNS = frozenset(["tip", "tips", "end", "ends", "portion", "portions", "part", "parts", "segment", "segments"])
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+(?:\.\d+)?(?:st|nd|rd|th)?|[^\sA-Za-z\d]")


def attribute_cues_of(task: TaskSpec) -> dict[str, dict[str, tuple[str, ...]]]:
    """The task's attribute cues as {attribute: {value: phrases}}."""
    return {name: dict(values) for name, values in task.attribute_cues}


def lexicon(task: TaskSpec) -> ls.Lexicon:
    """The word lists of a study's task: its attribute cues, the labeller's placing words, stop words."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    attrs = ls.attribute_words(attribute_cues_of(task))
    cue_words = {w for key, phrases in task.cue_lists().items() if ":" not in key for p in phrases for w in p.split()}
    stop = (set(ENGLISH_STOP_WORDS) | REPORT_WORDS | NORMAL_WORDS | NORMAL_PREDICATES | COPULA | cue_words) - set(attrs)
    return ls.Lexicon(attributes=attrs, placing=frozenset(MODIFIER_WORDS - set(attrs)), stop=frozenset(stop))


class Miner:
    """Finds finding mentions in reports with one task's cues (build once, mine many reports)."""

    def __init__(self, task: TaskSpec):
        cues = {k: v for k, v in task.cue_lists().items() if k in DEFAULT_CUES}
        self.cues = _CueSet(cues)
        self.lex = lexicon(task)

    def mentions(self, report_id: str, text: str) -> list[ls.Mention]:
        """Every finding mention of one report, with its assertion and attribute words."""
        out = []
        for a, b in self.cues.split(text):
            clause = text[a:b]
            info = None
            for chunk in self._chunks(clause):
                info = info or self.cues.clause(clause)
                out.append(self._mention(report_id, clause, chunk, info))
        return [m for m in out if m is not None]

    def _chunks(self, clause: str) -> list[dict]:
        """Runs of content words of a clause, joined by the subject-predicate, place and inverted patterns."""
        tokens = [(m.group(0).lower(), m.start(), m.end()) for m in _TOKEN.finditer(clause)]
        # "no significant change": comparison wording that names no finding
        pseudo = [m.span() for m in self.cues.pseudo.finditer(clause)]
        runs, gap, cur = [], [], None
        for i, (w, s, e) in enumerate(tokens):
            content = w[0].isalpha() and w not in self.lex.stop and not any(a <= s < b for a, b in pseudo)
            if content:
                if cur is None:
                    cur = {"words": [], "spans": [], "gap": gap, "first": i}
                    runs.append(cur)
                cur["words"].append(w)
                cur["spans"].append((s, e))
                cur["last"] = i
                gap = []
            else:
                cur = None
                gap.append(w)
        normal = [i for i, (w, _, _) in enumerate(tokens) if w in NORMAL_WORDS]
        predicates = [i for i, (w, _, _) in enumerate(tokens) if w in NORMAL_PREDICATES]
        chunks: list[dict] = []
        for run in runs:
            # "heart size and vascularity are within normal limits", "clear lungs": the subject or the next words
            run["normal"] = any(
                n < run["first"] and "," not in (w for w, _, _ in tokens[n : run["first"]]) or run["last"] < n
                for n in normal
            ) or any(
                run["last"] < n and set(w for w, _, _ in tokens[run["last"] + 1 : n]) <= COPULA | {"well"}
                for n in predicates
            )
            prev = chunks[-1] if chunks else None
            if prev is not None and self._joins(prev, run):
                continue
            run["shown"], run["qualifier"] = list(run["words"]), []
            chunks.append(run)
        return chunks

    def _joins(self, prev: dict, run: dict) -> bool:
        """Fold run into the chunk before it when it is its predicate, its place or its inverted modifier."""
        gap, lex = run["gap"], self.lex
        bare = [w for w in run["words"] if w not in lex.attributes and w not in lex.placing]
        if gap == [","] and not bare:  # "effusion, pleural, left": an index term written backwards
            prev["shown"] = [w for w in run["words"] if w in lex.placing] + prev["shown"]
        elif gap and set(gap) <= COPULA and len(bare) <= 2 and not prev.get("predicate"):  # "heart is enlarged"
            prev["shown"] = bare + prev["shown"]
            prev["predicate"] = True
        elif gap and gap[0] == "of" and set(prev["shown"]) <= GENERAL_NOUNS | PART_NOUNS:
            prev["shown"] = list(run["words"])  # "changes of COPD", "areas of atelectasis": the finding follows "of"
        elif gap and set(gap) <= PLACE_LINKS and gap[0] in PLACE_LINKS - {"the", "a", "an", "both", "this"}:
            pass  # "changes of the thoracic spine": the place qualifies the finding
        else:
            return False
        prev["qualifier"] = prev.get("qualifier", []) + run["words"]
        prev["spans"] = prev["spans"] + run["spans"]
        prev["normal"] = prev["normal"] or run["normal"]
        return True

    def _mention(self, report_id: str, clause: str, chunk: dict, info) -> ls.Mention | None:
        """One chunk as a mention: its surface form, assertion and attribute evidence (None without a finding word)."""
        lex = self.lex
        shown = [w for w in chunk["shown"] if w not in lex.attributes]
        while len(shown) > 1 and shown[-1] in PART_NOUNS:  # "catheter tip": the catheter
            shown = shown[:-1]
        core = lex.core(" ".join(shown))
        if not core or set(core) <= GENERAL_NOUNS | PART_NOUNS:  # "change", "the tip": no finding named
            return None
        attrs = sorted({lex.attributes[w] for w in chunk["words"] + chunk["qualifier"] if w in lex.attributes})
        written = {clause[a:b].lower(): clause[a:b] for a, b in chunk["spans"]}  # each word as the report spells it
        return ls.Mention(
            report_id=report_id,
            sentence=clause,
            text=" ".join(shown),
            assertion=ls.NEGATED if chunk["normal"] else self._assertion(clause, chunk, info),
            attributes=tuple(attrs),
            normal=chunk["normal"],
            capitals=all(written.get(w, w).isupper() for w in shown),
        )

    def _assertion(self, clause: str, chunk: dict, info) -> str:
        """Affirmed, negated or uncertain, by the labeller's judge on the chunk's first and last word."""
        spans = chunk["spans"]
        # the finding's own words: "resolved" or "new" before it are cues about it, not part of it
        own = [sp for w, sp in zip(chunk["words"], spans, strict=False) if w not in self.lex.attributes] or spans[:1]
        outcomes = {_judge(clause, (own[0][0], own[-1][1]), info, _NEUTRAL)}
        if len(spans) > len(chunk["words"]):  # a joined predicate or place: judge its words too
            outcomes.add(_judge(clause, (spans[len(chunk["words"])][0], spans[-1][1]), info, _NEUTRAL))
        if ls.NEGATED in {_OUTCOME.get(o) for o in outcomes}:
            return ls.NEGATED
        return ls.AFFIRMED if outcomes == {"positive"} else ls.UNCERTAIN


def mine(reports, task: TaskSpec, min_reports: int = 1, abbrev: dict[str, str] | None = None) -> list[ls.Candidate]:
    """Ranked candidates from (report id, text) pairs with the offline miner."""
    miner = Miner(task)
    mentions = [m for rid, text in reports for m in miner.mentions(rid, text)]
    return ls.candidates_from(mentions, miner.lex, min_reports, abbrev)


def prompt_look_for(folder, label_id: str) -> tuple[str, ...]:
    """The look-for phrases of one label's prompt file in a prompt folder (none when it has no file)."""
    from workbench.core.yaml_text import load_yaml

    path = folder / f"{label_id}.yaml"
    if not path.exists():
        return ()
    data = load_yaml(path.read_text(encoding="utf-8")) or {}
    return tuple(str(p) for p in data.get("look_for") or ())
