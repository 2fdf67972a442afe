"""Turn a model's reply into a decision (value, evidence, status) without ever guessing.

The released Ran Score parser takes the first 0/1 it sees and silently defaults to 0 when
there is none, so a refusal or a rambling reply becomes a confident "negative". Here every
reply gets a status: strict JSON is "ok", a value recovered from plain text is
"ok_tolerant", a refusal is "refusal", anything else (no value, two values, a value that is
not 0/1) is "parse_error" with the reason. Pure functions: no I/O; bad output never raises.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
import unicodedata
import zlib
from dataclasses import dataclass, replace
from typing import ClassVar

from workbench.core.attributes import ATTRIBUTE_PARSE_ERROR, AttributeParseError, Spec, parse_attributes
from workbench.core.evidence import evidence_found, in_report_order

PARSER_VERSION = "1"
STATUSES = ("ok", "ok_tolerant", "parse_error", "refusal", "call_error")
_DETAIL_CHARS = 120

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"```[a-zA-Z]*\s*|```")
_ANSWER_WORDS = r"(?:final\s+answer|answer|value|label|result|prediction|output|classification)"
_EXPLICIT = re.compile(
    rf"\b{_ANSWER_WORDS}\b[\s*\"']*(?:is|[:=]|-|\u2192|->)[\s*\"'`]*"
    r"(?:(0|1)\b(?![.,]\d|\s*(?:cm|mm|%|or\b|/|,\s*[01]\b))|(yes|no|true|false)(?=\s*(?:$|[.,;!)\]\"'`*])))",
    re.I,
)
_LONE = re.compile(r"^[\s*_`\"'(\[{]*(0|1)[\s*_`\"')\]}.!]*$")
_YES_NO_WHOLE = re.compile(r"^[\s*_`\"']*(yes|no)[\s*_`\"'.!]*$", re.I)
_YES_NO_LEAD = re.compile(r"^[\s*_`\"']*(yes|no)\s*[,.;:!\-\u2013\u2014]", re.I)
_REFUSAL = re.compile(
    r"\b(?:i\s*(?:cannot|can't|can\u2019t|can not|won't|will not|am unable to|am not able to|'m unable to"
    r"|\u2019m unable to|'m not able to|\u2019m not able to)\s+(?:help|assist|provide|comply|answer|do that"
    r"|determine|interpret|give|offer|make)"
    r"|i(?:'m|\u2019m| am) sorry,? but"
    r"|as an ai\b|as a language model|as an ai language model"
    r"|consult (?:a|your) (?:qualified )?(?:healthcare|medical|health care)"
    r"|not able to provide medical|cannot provide medical|can't provide medical)",
    re.I,
)
_VALUE_WORDS = {"1": 1, "0": 0, "true": 1, "false": 0, "yes": 1, "no": 0}


@dataclass(frozen=True)
class Answer:
    """One label's answer for one report, or why there is none: the parser's result and, field for field, the
    stored prediction (its COLUMNS are the prediction table's answer columns; attributes go to their own table).
    A new reply field is one field here, its column in store/tables.py and a migration in store/db.py."""

    value: int | None
    evidence: str
    status: str
    detail: str = ""
    evidence_found: bool | None = None
    # (attribute, value) pairs of a positive finding; a malformed `attributes` object leaves them empty
    # and says why in attribute_error, while the presence value still counts
    attributes: tuple[tuple[str, str], ...] = ()
    attribute_error: str = ""

    COLUMNS: ClassVar[tuple[str, ...]] = ("value", "evidence", "evidence_found", "status", "detail")
    DETAIL_LIMIT: ClassVar[int] = 2000  # what the prediction row keeps of a failure's detail

    @property
    def ok(self) -> bool:
        """True when a 0/1 value was obtained."""
        return self.status in ("ok", "ok_tolerant")

    def row(self) -> dict:
        """The stored prediction's answer columns (and the attributes, when there are any, for their table)."""
        out = {c: getattr(self, c) for c in self.COLUMNS}
        out["detail"] = self.detail[: self.DETAIL_LIMIT]
        if self.attributes or self.attribute_error:
            out.update(attributes=self.attributes, attribute_error=self.attribute_error)
        return out

    @classmethod
    def from_row(cls, row) -> Answer:
        """The answer a stored prediction row (a mapping or a named tuple of the COLUMNS) holds."""
        get = row.get if hasattr(row, "get") else lambda c: getattr(row, c)
        value, found = get("value"), get("evidence_found")
        return cls(
            value=None if _missing(value) else int(value),
            evidence=get("evidence") or "",
            status=get("status"),
            detail=get("detail") or "",
            evidence_found=None if _missing(found) else bool(found),
        )


def _missing(value) -> bool:
    """None, or the NaN a data frame puts where a stored value is NULL."""
    return value is None or (isinstance(value, float) and math.isnan(value))


# -- public API ---------------------------------------------------------------------------


def parse_reply(
    text: str | None, report_text: str | None = None, spec: Spec = (), asked: Asked | None = None
) -> Answer:
    """Parse a per-label reply: {"value": 0|1, "evidence": "...", "attributes": {...}} or a tolerated plain
    answer; spec: the label's attributes (none asked when empty: an `attributes` object is then ignored);
    asked: the label the call asked about, so an answer about another label is a "wrong_label" failure."""
    try:
        return _parse_reply(text, report_text, spec, asked)
    except (_TooDeep, RecursionError):  # RecursionError: e.g. repr of a value nested just under the limit
        return _fail(TOO_DEEP)


def _parse_reply(text: str | None, report_text: str | None, spec: Spec = (), asked: Asked | None = None) -> Answer:
    if text is None:
        return Answer(None, "", "call_error", "no reply: the call failed")
    if not isinstance(text, str):
        return _fail(f"reply is not text: {type(text).__name__}")
    whole = text.strip()
    if whole[:1] == "{" and whole[-1:] == "}" and "think>" not in whole.lower() and "`" not in whole:
        # the usual well-formed reply: one JSON object and nothing else (no fences, no thinking)
        try:
            obj = json.loads(whole)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict):
            return _from_objects([(obj, False)], whole, report_text, spec, asked)
    body, truncated = _strip_think(text)
    if not body.strip():
        return _fail("reply ended inside <think> (raise max_tokens?)" if truncated else "empty reply")
    objects = _json_objects(body)
    if objects:
        return _rambling(_from_objects(objects, body, report_text, spec, asked), body)
    return _from_text(body, report_text)


class ReplyMemo:
    """parse_reply over many replies: a decision that quotes no evidence does not depend on the report
    (only evidence is looked up in it), so a reply seen before with no evidence ({"value": 0,
    "evidence": ""} thousands of times in a run) is parsed once."""

    def __init__(self, limit: int = 20_000) -> None:
        self._seen: dict[object, Answer] = {}
        self._limit = limit

    def parse(self, text: str | None, report_text: str | None, spec: Spec = (), asked: Asked | None = None) -> Answer:
        """parse_reply(text, report_text, spec, asked), remembered when the report cannot change it."""
        # the same reply can fit one label's attributes and not another's, and name one label and not another
        key = (text, spec, asked.label) if asked is not None else (text, spec) if spec else text
        seen = self._seen.get(key) if isinstance(text, str) else None
        if seen is not None:
            return seen
        decision = parse_reply(text, report_text, spec, asked)
        if isinstance(text, str) and not decision.evidence and len(self._seen) < self._limit:
            self._seen[key] = decision
        return decision


def parse_joint_reply(
    text: str | None, label_ids: list[str], report_text: str | None = None, specs: dict[str, Spec] | None = None
) -> dict[str, Answer]:
    """Parse a joint reply for several labels; a missing label fails alone; specs: label -> its attributes."""
    try:
        return _parse_joint_reply(text, label_ids, report_text, specs or {})
    except (_TooDeep, RecursionError):  # RecursionError: e.g. repr of a value nested just under the limit
        return {lid: _fail(TOO_DEEP) for lid in label_ids}


def _parse_joint_reply(
    text: str | None, label_ids: list[str], report_text: str | None, specs: dict[str, Spec]
) -> dict[str, Answer]:
    if text is None:
        return {lid: Answer(None, "", "call_error", "no reply: the call failed") for lid in label_ids}
    if not isinstance(text, str):
        return {lid: _fail(f"reply is not text: {type(text).__name__}") for lid in label_ids}
    body, _ = _strip_think(text)
    mapping, tolerant = _joint_mapping(body, label_ids)
    if mapping is None:
        status = "refusal" if _REFUSAL.search(body) else "parse_error"
        why = "model refused" if status == "refusal" else "no JSON object with the labels found"
        return {lid: Answer(None, "", status, f"{why}: {_quote(body)}") for lid in label_ids}
    index = {_norm_key(k): v for k, v in mapping.items()}
    out = {}
    for lid in label_ids:
        key = lid if lid in mapping else None
        entry = mapping[key] if key is not None else index.get(_norm_key(lid), _MISSING)
        out[lid] = _decision_from_entry(entry, lid, report_text, tolerant, specs.get(lid, ()))
    return out


LOOPING_RATIO = 0.3  # compressed / raw size under which a cut-off reply is one phrase said again and again
_LOOPING_MIN_CHARS = 120


def looping(text: str | None) -> bool:
    """True when a reply repeats itself (a small model's loop until max_tokens): it compresses to under
    LOOPING_RATIO of its size; an answer, prose or JSON, compresses to about half."""
    raw = (text or "").encode("utf-8", "replace")
    return len(raw) >= _LOOPING_MIN_CHARS and len(zlib.compress(raw, 9)) < LOOPING_RATIO * len(raw)


def reply_in_text(text: str | None) -> bool:
    """True when a plain-text reply states a 0/1 answer the tolerant parser would take."""
    return bool(text) and parse_reply(text).status == "ok_tolerant"


def prose_failure(decision: Answer, text: str | None) -> Answer:
    """A parse failure whose reply is plain prose (no JSON object tried, no 0/1 found) as its own kind, "prose";
    any other decision unchanged."""
    if decision.status != "parse_error" or not decision.detail.startswith("no 0/1 value found") or "{" in (text or ""):
        return decision
    return replace(decision, status="prose", detail="prose without the JSON answer asked for: " + decision.detail)


def off_label_prose(decision: Answer, text: str | None, asked: Asked | None) -> Answer:
    """A prose failure that names another label of the vocabulary and never the one asked, as its own kind,
    "wrong_label"; any other decision unchanged. A 0/1 stated in plain text is kept: prose may name the asked
    finding by a synonym ("the heart is enlarged"), so a name check alone never discards an answer."""
    other = _other_label(text or "", asked) if decision.status == "prose" and asked is not None else None
    if other is None or asked is None:
        return decision
    return _wrong_label(other, asked, text or "")


def leading_object(text: str | None) -> tuple[str, str] | None:
    """(the JSON object a reply begins with, the text after it) when that object is complete and parses; None
    otherwise. The stop rule: a reply that begins with its answer ends there, whatever follows (even when the
    model went on until max_tokens), and what follows is rambling, recorded but never read."""
    body, _ = _strip_think(text or "")
    body = _LEADING_FENCE.sub("", body, count=1).lstrip()
    if body[:1] != "{":
        return None
    first = next(_brace_chunks(body), None)
    if first is None or not body.startswith(first) or not isinstance(_load(first)[0], dict):
        return None
    return first, body[len(first) :]


# -- helpers: text --------------------------------------------------------------------------


_MISSING = object()
_LEADING_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*")
RAMBLING = "rambling"  # the detail of an answer read from a reply's first JSON object, with text after it
TOO_DEEP = "reply is nested too deeply to parse (a model looping on brackets?)"


class _TooDeep(Exception):
    """A reply whose nesting exceeds what the JSON/literal parsers can walk: a parse failure, not a crash."""


def _fail(detail: str, status: str = "parse_error") -> Answer:
    return Answer(None, "", status, detail)


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= _DETAIL_CHARS else flat[:_DETAIL_CHARS] + "...")


def _strip_think(text: str) -> tuple[str, bool]:
    """Drop reasoning blocks (<think>...</think>); report whether one was left unclosed."""
    body = _THINK.sub("", text)
    lower = body.lower()
    if "<think>" in lower:  # unclosed: the reply was cut while reasoning
        return body[: lower.index("<think>")], True
    if "</think>" in lower:  # some servers strip the opening tag only
        body = body[lower.rindex("</think>") + len("</think>") :]
    return body, False


def _norm_key(key: object) -> str:
    return re.sub(r"[^a-z0-9\u4e00-\u9fff]+", "_", unicodedata.normalize("NFKC", str(key)).lower()).strip("_")


# -- helpers: JSON ---------------------------------------------------------------------------


def _json_objects(text: str) -> list[tuple[dict, bool]]:
    """Every top-level {...} in the text that parses, with True when it needed leniency."""
    found = []
    for chunk in _brace_chunks(_FENCE.sub("\n", text)):
        obj, lenient = _load(chunk)
        if isinstance(obj, dict):
            found.append((obj, lenient))
    return found


def _brace_chunks(text: str):
    """Balanced {...} substrings, skipping braces inside string literals."""
    depth, start, quote, escaped = 0, -1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch == '"' and depth > 0:
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                yield text[start : i + 1]


def _load(chunk: str) -> tuple[object, bool]:
    try:
        return json.loads(chunk), False
    except ValueError:
        pass
    except RecursionError as exc:
        raise _TooDeep from exc
    relaxed = re.sub(r",\s*([}\]])", r"\1", chunk)  # trailing commas
    try:
        return json.loads(relaxed), True
    except ValueError:
        pass
    except RecursionError as exc:
        raise _TooDeep from exc
    pythonish = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", relaxed)))
    try:
        return ast.literal_eval(pythonish), True  # single-quoted keys, Python literals
    except (ValueError, SyntaxError, TypeError, MemoryError):
        return None, False
    except RecursionError as exc:
        raise _TooDeep from exc


def _coerce(value: object) -> tuple[int | None, bool]:
    """0/1 from 0, 1, 1.0, "0", "1", true/false (strict) or "yes"/"no" (tolerant); None otherwise."""
    if isinstance(value, bool):
        return int(value), True
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value), True
    if isinstance(value, str):
        word = value.strip().strip(".").lower()
        return _VALUE_WORDS.get(word), word in ("0", "1", "true", "false")
    return None, False


def _evidence_of(entry: dict, report_text: str | None) -> str:
    """The evidence text; a list of quotes is joined with an ellipsis in the order they occur in the report, so
    the stored text is found by the same rule the app and the CLI apply to it."""
    for key in ("evidence", "quote", "evidence_text", "span"):
        value = entry.get(key)
        if isinstance(value, str):
            return value.strip()
        if isinstance(value, list):
            parts = [str(v).strip() for v in value if str(v).strip()]
            return " ... ".join(in_report_order(parts, report_text) if report_text else parts)
    return ""


def _with_evidence(value: int, evidence: str, status: str, report_text: str | None) -> Answer:
    found = evidence_found(evidence, report_text) if evidence and report_text else None
    return Answer(value, evidence, status, "", found)


def _value_from_dict(obj: dict) -> tuple[object, str | None]:
    """The raw value and the key it came from ('value' is strict, aliases are tolerant)."""
    if "value" in obj:
        return obj["value"], "value"
    lowered = {str(k).lower(): k for k in obj}
    for alias in ("value", "answer", "label", "result", "prediction", "present", "output"):
        if alias in lowered:
            return obj[lowered[alias]], alias
    return _MISSING, None


def _with_attributes(decision: Answer, entry: object, spec: Spec) -> Answer:
    """Attach a positive answer's attributes; a malformed object is an attribute parse failure, never a guess.

    A negative answer carries no attributes (whatever it sends), and a missing (or null) object gives none."""
    if not spec or decision.value != 1 or not isinstance(entry, dict) or entry.get("attributes") is None:
        return decision
    try:
        values = parse_attributes(entry["attributes"], spec)
    except AttributeParseError as exc:
        return replace(decision, attribute_error=f"{ATTRIBUTE_PARSE_ERROR}: {exc}")
    order = [name for name, _ in spec]
    return replace(decision, attributes=tuple(sorted(values.items(), key=lambda kv: order.index(kv[0]))))


def _from_objects(
    objects: list[tuple[dict, bool]], body: str, report_text: str | None, spec: Spec = (), asked: Asked | None = None
) -> Answer:
    candidates = []
    for obj, lenient in objects:
        raw, key = _value_from_dict(obj)
        if key is None and len(obj) == 1:  # {"pneumothorax": 0}
            raw, key = next(iter(obj.values())), "single key"
        if key is not None:
            candidates.append((obj, lenient, raw, key))
    other = _off_label_object(candidates[0][0] if candidates else objects[0][0], asked)
    if other is not None and asked is not None:
        return _wrong_label(other, asked, body)
    if not candidates:
        keys = sorted(str(k) for k in objects[0][0])
        return _fail(f"JSON has no 'value' key (keys: {keys[:8]}): {_quote(body)}")
    obj, lenient, raw, key = candidates[0]
    value, strict = _coerce(raw)
    if value is None:
        hint = " (-1 is 'uncertain' in CheXpert; this task wants 0 or 1)" if raw == -1 else ""
        return _fail(f"value must be 0 or 1, got {raw!r}{hint}: {_quote(body)}")
    others = {_coerce(r)[0] for _, _, r, _ in candidates[1:]} - {None}
    if others - {value}:
        return _fail(f"conflicting JSON objects give both 0 and 1: {_quote(body)}")
    status = "ok" if key == "value" and strict and not lenient else "ok_tolerant"
    return _with_attributes(_with_evidence(value, _evidence_of(obj, report_text), status, report_text), obj, spec)


def _rambling(decision: Answer, body: str) -> Answer:
    """An answer read from the JSON object its reply begins with, marked when text follows that object (the
    stop rule: that text is ignored, and counted as rambling by the run)."""
    cut = leading_object(body) if decision.ok and not decision.detail else None
    tail = cut[1].strip().strip("`").strip() if cut else ""
    if not tail:
        return decision
    return replace(
        decision, detail=f"{RAMBLING}: {len(tail)} characters after the JSON object, ignored: {_quote(tail)}"
    )


# -- helpers: the label a reply is about --------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """The label a per-label call asks about and the vocabulary's labels ((id, display name) pairs): what the
    wrong-label check compares a reply with."""

    label: str
    names: tuple[tuple[str, str], ...]


# JSON fields in which an answer may say which label it is about
_LABEL_FIELDS = frozenset({"label", "label_id", "label_name", "finding", "name", "condition", "diagnosis", "id"})
# keys of one label's answer that are not the name of a label
_ANSWER_KEYS = _LABEL_FIELDS | frozenset(
    {"value", "answer", "result", "prediction", "present", "output", "evidence", "quote", "evidence_text", "span"}
    | {"attributes", "reason", "reasoning", "explanation", "confidence", "side", "severity", "change"}
)


def _wrong_label(other: str, asked: Asked, text: str) -> Answer:
    names = dict(asked.names)
    return _fail(
        f"the reply is about {names.get(other, other)!r}, not the label asked ({names.get(asked.label, asked.label)!r})"
        f": {_quote(text)}",
        "wrong_label",
    )


def _off_label_object(obj: dict, asked: Asked | None) -> str | None:
    """The other label a JSON answer says it is about, by a field ({"label": "Effusion", ...}) or by a key
    ({"effusion": 1}); None when it also names the label asked, or names no label."""
    if asked is None:
        return None
    said = [str(v) for k, v in obj.items() if _norm_key(k) in _LABEL_FIELDS and isinstance(v, str)]
    said += [str(k) for k in obj if _norm_key(k) not in _ANSWER_KEYS]
    return _other_label(" ; ".join(said), asked) if said else None


def _words(text: str) -> str:
    """Lower-case words of a text, space-separated and padded, for whole-word matching."""
    return " " + " ".join(re.findall(r"[a-z0-9]+", unicodedata.normalize("NFKC", text).lower())) + " "


def _terms(label: str, name: str) -> tuple[str, ...]:
    """A label's id and display name as padded words, each also in the plural."""
    out: list[str] = []
    for term in dict.fromkeys((_words(label.replace("_", " ")), _words(name))):
        out += [term, term[:-1] + "s "]
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _label_terms(asked: Asked) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """The asked label's terms, and each other label's. Left out: labels that are not a finding of their own ("No
    Finding", "Pleural Other"), and labels whose terms contain the asked one's or lie inside them ("effusion" and
    "pleural effusion"): naming them does not name another finding."""
    names = dict(asked.names)
    mine = _terms(asked.label, names.get(asked.label, asked.label))
    others = []
    for lab, name in asked.names:
        terms = _terms(lab, name)
        if lab == asked.label or any(w in ("no", "other") for t in terms for w in t.split()):
            continue
        if any(a in t or t in a for a in mine for t in terms):
            continue
        others.append((lab, terms))
    return mine, tuple(others)


def _other_label(text: str, asked: Asked | None) -> str | None:
    """The first other label of the vocabulary a text names when it never names the label asked; None otherwise."""
    if asked is None or not text:
        return None
    mine, others = _label_terms(asked)
    words = _words(text)
    if any(t in words for t in mine):
        return None
    return next((lab for lab, terms in others if any(t in words for t in terms)), None)


# -- helpers: plain text ---------------------------------------------------------------------


def _text_candidates(body: str) -> tuple[set[int], bool]:
    """Values stated as answers in plain text; True when one is explicit ("Answer: 1")."""
    explicit = {_VALUE_WORDS[(m.group(1) or m.group(2)).lower()] for m in _EXPLICIT.finditer(body)}
    values = set(explicit)
    stripped = body.strip()
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    for line in {lines[0], lines[-1]} if lines else set():
        match = _LONE.match(line)
        if match:
            values.add(int(match.group(1)))
    whole = _YES_NO_WHOLE.match(stripped) or _YES_NO_LEAD.match(stripped)
    if whole:
        values.add(_VALUE_WORDS[whole.group(1).lower()])
    return values, bool(explicit)


def _from_text(body: str, report_text: str | None) -> Answer:
    values, explicit = _text_candidates(body)
    refusal = _REFUSAL.search(body)
    if len(values) > 1:
        return _fail(f"ambiguous: both 0 and 1 appear as answers: {_quote(body)}")
    if values and (explicit or not refusal):
        return Answer(values.pop(), "", "ok_tolerant", "value taken from plain text")
    if refusal:
        return _fail(f"model refused: {_quote(body)}", "refusal")
    return _fail(f"no 0/1 value found in reply: {_quote(body)}")


# -- helpers: joint mode -----------------------------------------------------------------------


def _joint_mapping(body: str, label_ids: list[str]) -> tuple[dict | None, bool]:
    """The {label: answer} mapping of a joint reply, and whether it needed tolerance."""
    wanted = {_norm_key(lid) for lid in label_ids}
    for obj, lenient in _json_objects(body):
        labels = obj.get("labels", obj)
        if isinstance(labels, list):  # [{"id": "...", "value": 1}, ...]
            labels = {str(e.get("id") or e.get("label") or e.get("name")): e for e in labels if isinstance(e, dict)}
        if isinstance(labels, dict) and wanted & {_norm_key(k) for k in labels}:
            return labels, lenient
    lines = {}
    for line in body.splitlines():  # "pleural_effusion: 1" one per line
        match = re.match(r"^[\s*\-\u2022`\"']*([^:=]+?)[\s*`\"']*[:=]\s*[\"'`*]*(0|1|yes|no|true|false)\b", line, re.I)
        if match and _norm_key(match.group(1)) in wanted:
            lines[match.group(1).strip()] = match.group(2)
    return (lines, True) if lines else (None, False)


def _decision_from_entry(entry: object, lid: str, report_text: str | None, tolerant: bool, spec: Spec = ()) -> Answer:
    if entry is _MISSING:
        return _fail(f"label {lid!r} missing from the reply")
    evidence = ""
    strict_key = True
    if isinstance(entry, dict):
        raw, key = _value_from_dict(entry)
        if key is None:
            return _fail(f"label {lid!r} has no 'value' (keys: {sorted(map(str, entry))[:8]})")
        strict_key = key == "value"
        evidence = _evidence_of(entry, report_text)
    else:
        raw = entry
    value, strict = _coerce(raw)
    if value is None:
        return _fail(f"label {lid!r}: value must be 0 or 1, got {raw!r}")
    status = "ok" if strict_key and strict and not tolerant else "ok_tolerant"
    return _with_attributes(_with_evidence(value, evidence, status, report_text), entry, spec)
