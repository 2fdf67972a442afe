"""Is the labeller's quoted evidence in the report, and where: the one rule the parser, the app and the CLI share.

The rule: case (Unicode case folding), compatibility forms (NFKC), quote marks, punctuation and runs of whitespace do not
count ("left  pleural effusions" is "Left pleural effusions."); an ellipsis ("...", "…" or "[...]") joins
fragments that must each be found, each starting after the one before ("left pleural ... size normal"). A stored prediction's
`evidence_found` is this function's answer at parse time, so every face that shows it agrees with it.
"""

from __future__ import annotations

import re
import unicodedata

_ELLIPSIS = re.compile(r"\[\.\.\.\]|\.\.\.|\u2026")
_QUOTES = frozenset("\"'`\u2018\u2019\u201c\u201d\u00ab\u00bb")
_QUOTE_RUN = re.compile("[" + re.escape("".join(sorted(_QUOTES))) + "]")
_NON_WORD = re.compile(r"[^\w]+")


def evidence_found(evidence: str, report_text: str) -> bool:
    """True when the evidence (each ellipsis-joined fragment, in order) is in the report under the rule above."""
    if not evidence or not report_text:
        return False
    fragments = [f for f in (_fold(piece) for piece in _ELLIPSIS.split(evidence)) if f]
    return bool(fragments) and _in_order(fragments, _fold(report_text)) is not None


def evidence_spans(evidence: str, report_text: str) -> list[tuple[int, int]]:
    """Where the evidence's fragments are in the report text (start, end offsets, in order, overlaps joined), or
    [] when any is missing (for highlighting: whether it is found is evidence_found's answer)."""
    if not evidence or not report_text:
        return []
    haystack, where = _folded(report_text)
    fragments = [f for f in (_fold(piece) for piece in _ELLIPSIS.split(evidence)) if f]
    starts = _in_order(fragments, haystack) if fragments else None
    if starts is None:
        return []
    spans: list[tuple[int, int]] = []
    for at, fragment in zip(starts, fragments, strict=True):
        start, end = where[at][0], where[at + len(fragment) - 1][1]
        if spans and start <= spans[-1][1]:  # overlapping fragments are one marked stretch
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _in_order(fragments: list[str], haystack: str) -> list[int] | None:
    """Where each fragment starts in the haystack, each after the one before, or None when one is missing."""
    starts, pos = [], 0
    for fragment in fragments:
        at = haystack.find(fragment, pos)
        if at < 0:
            return None
        starts.append(at)
        pos = at + 1  # fragments may overlap (two quotes of one sentence): their starts are in order
    return starts


def _fold(text: str) -> str:
    """The text folded for matching (the parser's fast path: regular expressions over the whole string)."""
    text = _QUOTE_RUN.sub("", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(_NON_WORD.sub(" ", text).split())


def in_report_order(quotes: list[str], report_text: str) -> list[str]:
    """Separate quotes ordered by where they first occur in the report (those not found keep their order, last),
    so that joined with an ellipsis they read as the report does and match under the rule."""
    found = {q: evidence_spans(q, report_text) for q in quotes}
    placed = sorted((found[q][0][0], i) for i, q in enumerate(quotes) if found[q])
    return [quotes[i] for _, i in placed] + [q for q in quotes if not found[q]]


def _folded(text: str) -> tuple[str, list[tuple[int, int]]]:
    """The text folded as _fold folds it (NFKC, case-folded, no quote marks, words separated by one space) and,
    for each folded character, the (start, end) of the original characters it came from."""
    out: list[str] = []
    where: list[tuple[int, int]] = []
    gap = False
    for start, end in _clusters(text):
        for char in unicodedata.normalize("NFKC", text[start:end]).casefold():
            if char in _QUOTES:
                continue
            if not (char.isalnum() or char == "_"):  # what \w is: anything else separates words
                gap = True
                continue
            if gap and out:
                out.append(" ")
                where.append((start, start))
            gap = False
            out.append(char)
            where.append((start, end))
    return "".join(out), where


def _clusters(text: str) -> list[tuple[int, int]]:
    """(start, end) of each character with the combining marks that follow it (NFKC composes them together)."""
    bounds: list[tuple[int, int]] = []
    for i, char in enumerate(text):
        if bounds and unicodedata.combining(char):
            bounds[-1] = (bounds[-1][0], i + 1)
        else:
            bounds.append((i, i + 1))
    return bounds
