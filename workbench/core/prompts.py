"""Prompt sets: one structured prompt per label plus a shared task, rendered strictly to chat messages.

Structure (rather than one free-text prompt per label) lets radiologists edit the parts they own
(definition, look-for phrases, exclusions, hedge and temporal policy, examples), lets the
offline labeller read the same policy, and makes diffs between versions readable field by field.
Rendering is strict and deterministic so that every call has a stable content hash: an
unchanged prompt costs nothing on a re-run (the call cache is keyed by that hash).
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import string
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from workbench.errors import NotFound, WorkbenchError

TASK_FILE = "_task.yaml"
POLICY_VALUES = ("positive", "negative")
TEMPORAL_KEYS = ("resolved", "stable", "improving", "prior")
MODES = ("per_label", "joint")
LABEL_REQUIRED = ("label", "task", "definition", "look_for", "do_not_label_when", "hedged", "temporal", "examples")
LABEL_OPTIONAL = ("notes",)
EXAMPLE_REQUIRED = ("text", "value", "why")
EXAMPLE_OPTIONAL = ("source_report_id", "note")
TASK_REQUIRED = ("mode", "system", "per_label_template", "joint_template", "output_format", "joint_output_format")
TASK_OPTIONAL = ("cues", "attribute_cues", "description")
PER_LABEL_FIELDS = {"label_name", "task", "guidance", "examples", "report", "output_format"}
JOINT_FIELDS = {"labels_guidance", "label_ids", "report", "output_format"}
CUE_KEYS = ("negation", "hedge", "resolved", "stable", "improving", "prior", "scope_break")
ATTRIBUTE_CUE_PREFIX = "attribute:"
# the hedge cues the rendered hedge sentence names: an exclusion of one of them contradicts "count as positive"
HEDGE_NAMED = ("cannot exclude", "possible", "may represent")

# Default cue lists for the offline labeller and for the policy sentences; a task file may override.
DEFAULT_CUES: dict[str, tuple[str, ...]] = {
    "negation": (
        "no",
        "not",
        "without",
        "negative for",
        "free of",
        "absence of",
        "no evidence of",
        "no sign of",
        "no signs of",
        "rule out",
        "ruled out",
        "clear of",
        "removed",
        "resolution of",
    ),
    "hedge": (
        "cannot exclude",
        "cannot be excluded",
        "can not be excluded",
        "not excluded",
        "possible",
        "possibly",
        "may represent",
        "may be",
        "questionable",
        "suspicious for",
        "suggestive of",
        "concerning for",
        "likely",
        "probable",
        "versus",
        "vs",
        "differential",
        "could represent",
        "question of",
        "borderline",
    ),
    "resolved": (
        "resolved",
        "no longer",
        "interval resolution",
        "has cleared",
        "have cleared",
        "removed",
        "interval removal",
    ),
    "stable": ("stable", "unchanged", "persistent", "again seen", "again noted", "redemonstrated", "similar"),
    "improving": (
        "improving",
        "improved",
        "resolving",
        "decreased",
        "decreasing",
        "smaller",
        "less prominent",
        "diminished",
    ),
    # deliberately narrow: "chronic ILD" or "old rib fracture" still describe a present finding
    "prior": ("history of", "previously treated", "on the prior study only"),
    "scope_break": ("but", "however", "although", "though", "except", "which", "otherwise"),
}


class PromptError(WorkbenchError, ValueError):
    """A prompt file is malformed or a template is wrong; the message names file and key."""


@dataclass(frozen=True)
class Example:
    """A few-shot example: a report excerpt, its correct answer and why."""

    text: str
    value: int
    why: str
    source_report_id: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class LabelPrompt:
    """Everything the labeller is told about one label."""

    label: str
    task: str
    definition: str
    look_for: tuple[str, ...]
    do_not_label_when: tuple[str, ...]
    hedged: str
    temporal: tuple[tuple[str, str], ...]
    examples: tuple[Example, ...]
    notes: str = ""

    def temporal_policy(self) -> dict[str, str]:
        """Temporal policy as a dict (resolved/stable/improving/prior -> positive/negative)."""
        return dict(self.temporal)


@dataclass(frozen=True)
class TaskSpec:
    """The shared part of a prompt set: system message, templates, output format and mode."""

    mode: str
    system: str
    per_label_template: str
    joint_template: str
    output_format: str
    joint_output_format: str
    cues: tuple[tuple[str, tuple[str, ...]], ...] = ()
    description: str = ""
    # attribute -> ((value, phrases), ...): the words the offline labeller reads an attribute from
    attribute_cues: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...] = ()

    def cue_lists(self) -> dict[str, tuple[str, ...]]:
        """Cue lists with defaults filled in; attribute cues ride along as "attribute:<name>:<value>"."""
        out = dict(DEFAULT_CUES)
        out.update(dict(self.cues))
        for name, values in self.attribute_cues:
            for value, phrases in values:
                out[f"{ATTRIBUTE_CUE_PREFIX}{name}:{value}"] = phrases
        return out


@dataclass(frozen=True)
class PromptSet:
    """A task plus one LabelPrompt per asked label."""

    task: TaskSpec
    labels: dict = field(default_factory=dict)
    # label id -> its attributes and their values (from the vocabulary); a label absent here is asked none
    attributes: dict = field(default_factory=dict)

    def label(self, label_id: str) -> LabelPrompt:
        """The prompt of one label; KeyError names it."""
        if label_id not in self.labels:
            raise NotFound(f"prompt set has no prompt for label {label_id!r}")
        return self.labels[label_id]

    def example_report_ids(self) -> set[str]:
        """Report ids used as few-shot examples anywhere in the set (left out of evaluation)."""
        return {ex.source_report_id for lp in self.labels.values() for ex in lp.examples if ex.source_report_id}

    def with_label(self, lp: LabelPrompt) -> PromptSet:
        """A copy with one label's prompt replaced."""
        labels = dict(self.labels)
        labels[lp.label] = lp
        return replace(self, labels=labels)


# ---------------------------------------------------------------- parsing


def _require_keys(data: object, required: tuple[str, ...], optional: tuple[str, ...], where: str) -> dict:
    """Check a mapping has exactly the allowed keys; errors name the key."""
    if not isinstance(data, dict):
        raise PromptError(f"{where}: must be a mapping")
    unknown = sorted(set(data) - set(required) - set(optional))
    if unknown:
        raise PromptError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(list(required) + list(optional))})"
        )
    for key in required:
        if key not in data or data[key] is None:
            raise PromptError(f"{where}: missing key {key!r}")
    return data


def _str_list(value: object, where: str) -> tuple[str, ...]:
    """A list of non-empty strings."""
    if not isinstance(value, list) or not all(isinstance(x, str) and x.strip() for x in value):
        raise PromptError(f"{where}: must be a list of non-empty strings")
    return tuple(x.strip() for x in value)


def _policy(value: object, where: str) -> str:
    """'positive' or 'negative'."""
    if value not in POLICY_VALUES:
        raise PromptError(f"{where}: must be 'positive' or 'negative', got {value!r}")
    return str(value)


def parse_example(data: object, where: str) -> Example:
    """Validate one few-shot example."""
    d = _require_keys(data, EXAMPLE_REQUIRED, EXAMPLE_OPTIONAL, where)
    value = d["value"]
    if isinstance(value, bool) or value not in (0, 1):
        raise PromptError(f"{where}.value: must be 0 or 1, got {value!r}")
    if not str(d["text"]).strip():
        raise PromptError(f"{where}.text: must not be empty")
    src = d.get("source_report_id")
    return Example(
        text=str(d["text"]).strip(),
        value=int(value),
        why=str(d["why"]).strip(),
        source_report_id=str(src) if src not in (None, "") else None,
        note=str(d["note"]).strip() if d.get("note") else None,
    )


def parse_label_prompt(data: object, source: str) -> LabelPrompt:
    """Validate one label file (parsed YAML); errors name the file and key."""
    d = _require_keys(data, LABEL_REQUIRED, LABEL_OPTIONAL, source)
    temporal = _require_keys(d["temporal"], TEMPORAL_KEYS, (), f"{source}: temporal")
    if not isinstance(d["examples"], list):
        raise PromptError(f"{source}: examples must be a list")
    for key in ("label", "task", "definition"):
        if not isinstance(d[key], str) or not d[key].strip():
            raise PromptError(f"{source}: {key!r} must be a non-empty string")
    return LabelPrompt(
        label=d["label"].strip(),
        task=d["task"].strip(),
        definition=d["definition"].strip(),
        look_for=_str_list(d["look_for"], f"{source}: look_for"),
        do_not_label_when=_str_list(d["do_not_label_when"], f"{source}: do_not_label_when"),
        hedged=_policy(d["hedged"], f"{source}: hedged"),
        temporal=tuple((k, _policy(temporal[k], f"{source}: temporal.{k}")) for k in TEMPORAL_KEYS),
        examples=tuple(parse_example(ex, f"{source}: examples[{i}]") for i, ex in enumerate(d["examples"])),
        notes=str(d.get("notes") or "").strip(),
    )


def parse_task(data: object, source: str = TASK_FILE) -> TaskSpec:
    """Validate the task file; templates are checked for unknown placeholders."""
    d = _require_keys(data, TASK_REQUIRED, TASK_OPTIONAL, source)
    if d["mode"] not in MODES:
        raise PromptError(f"{source}: mode must be one of {MODES}, got {d['mode']!r}")
    check_template(d["per_label_template"], PER_LABEL_FIELDS, f"{source}: per_label_template")
    check_template(d["joint_template"], JOINT_FIELDS, f"{source}: joint_template")
    cues = d.get("cues") or {}
    if not isinstance(cues, dict):
        raise PromptError(f"{source}: cues must be a mapping")
    for key in cues:
        if key not in CUE_KEYS:
            raise PromptError(f"{source}: cues: unknown key {key!r} (allowed: {', '.join(CUE_KEYS)})")
    return TaskSpec(
        mode=d["mode"],
        system=str(d["system"]).strip(),
        per_label_template=str(d["per_label_template"]),
        joint_template=str(d["joint_template"]),
        output_format=str(d["output_format"]).strip(),
        joint_output_format=str(d["joint_output_format"]).strip(),
        cues=tuple((k, _str_list(v, f"{source}: cues.{k}")) for k, v in sorted(cues.items())),
        description=str(d.get("description") or "").strip(),
        attribute_cues=_attribute_cues(d.get("attribute_cues"), source),
    )


def _attribute_cues(data: object, source: str) -> tuple:
    """attribute_cues: {attribute: {value: [phrases]}} (names are checked against the vocabulary by
    parse_prompt_set, which knows it)."""
    if data is None:
        return ()
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise PromptError(f"{source}: attribute_cues must map an attribute to {{value: [phrases]}}")
    # sorted: a frozen bundle stores the task as canonical (sorted-key) JSON, and must load back equal
    return tuple(
        (
            str(name),
            tuple(
                (str(value), _str_list(phrases, f"{source}: attribute_cues.{name}.{value}"))
                for value, phrases in sorted(values.items())
            ),
        )
        for name, values in sorted(data.items())
    )


def check_attribute_cues(task: TaskSpec, attributes: dict, source: str = TASK_FILE) -> None:
    """Every attribute and value named in attribute_cues exists in the vocabulary (an unknown one is a typo)."""
    known: dict[str, tuple[str, ...]] = {}
    for spec in attributes.values():
        known.update(dict(spec))
    for name, values in task.attribute_cues:
        if name not in known:
            raise PromptError(
                f"{source}: attribute_cues: unknown attribute {name!r} "
                f"(the vocabulary's labels carry: {', '.join(known) or 'none'})"
            )
        for value, _ in values:
            if value not in known[name]:
                raise PromptError(
                    f"{source}: attribute_cues.{name}: unknown value {value!r} (allowed: {', '.join(known[name])})"
                )


def check_template(template: object, allowed: set[str], where: str) -> None:
    """Refuse a template with an unknown placeholder or bad brace syntax."""
    if not isinstance(template, str) or not template.strip():
        raise PromptError(f"{where}: must be a non-empty string")
    try:
        parsed = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)]
    except ValueError as exc:
        raise PromptError(f"{where}: bad template syntax ({exc}); write literal braces as {{{{ and }}}}") from exc
    fields = {name for name, _, _ in parsed if name is not None}
    # {report:>200000000} would pad the report to 200 MB at render time: placeholders are plain names
    dressed = next(((n, sp, cv) for n, sp, cv in parsed if n is not None and (sp or cv)), None)
    if dressed:
        name, spec, conversion = dressed
        shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        raise PromptError(
            f"{where}: placeholder {shown} has a format spec or conversion; write it plainly as {{{name}}}"
        )
    unknown = sorted(f for f in fields if f not in allowed)
    if unknown:
        hint = "; write literal braces (e.g. JSON) as {{ and }}" if not unknown[0].isidentifier() else ""
        raise PromptError(
            f"{where}: unknown placeholder {{{unknown[0]}}} (allowed: {', '.join(sorted(allowed))}){hint}"
        )
    if "report" not in fields:
        raise PromptError(f"{where}: the template must contain {{report}}")


def parse_prompt_set(
    files: dict[str, object],
    label_ids: list[str],
    derived_ids: list[str] | tuple[str, ...] = (),
    attributes: dict | None = None,
) -> PromptSet:
    """Build a PromptSet from {filename: parsed YAML}; every asked label needs exactly one file.

    attributes: label id -> attribute spec (Vocabulary.attribute_specs()); None asks for no attributes."""
    if TASK_FILE not in files:
        raise PromptError(f"prompt set: missing {TASK_FILE}")
    task = parse_task(files[TASK_FILE], TASK_FILE)
    if attributes is not None:
        check_attribute_cues(task, attributes)
    labels: dict[str, LabelPrompt] = {}
    for name, data in sorted(files.items()):
        if name == TASK_FILE:
            continue
        lp = parse_label_prompt(data, name)
        if lp.label in derived_ids:
            raise PromptError(
                f"{name}: label {lp.label!r} is derived from the other labels and is not asked; remove this file"
            )
        if lp.label not in label_ids:
            raise PromptError(f"{name}: label {lp.label!r} is not in the vocabulary")
        if name != f"{lp.label}.yaml":
            raise PromptError(f"{name}: file for label {lp.label!r} must be named {lp.label}.yaml")
        labels[lp.label] = lp
    missing = [i for i in label_ids if i not in labels]
    if missing:
        raise PromptError(f"prompt set: no prompt file for label(s) {', '.join(missing)}")
    return PromptSet(
        task=task,
        labels={i: labels[i] for i in label_ids},
        attributes={k: v for k, v in (attributes or {}).items() if k in label_ids},
    )


# ---------------------------------------------------------------- dumping


def dump_label_prompt(lp: LabelPrompt) -> dict:
    """A LabelPrompt as plain data in the file's key order (for YAML)."""
    out: dict = {
        "label": lp.label,
        "task": lp.task,
        "definition": lp.definition,
        "look_for": list(lp.look_for),
        "do_not_label_when": list(lp.do_not_label_when),
        "hedged": lp.hedged,
        "temporal": dict(lp.temporal),
        "examples": [dump_example(ex) for ex in lp.examples],
    }
    if lp.notes:
        out["notes"] = lp.notes
    return out


def dump_example(ex: Example) -> dict:
    """An Example as plain data."""
    out: dict = {"text": ex.text, "value": ex.value, "why": ex.why}
    if ex.source_report_id:
        out["source_report_id"] = ex.source_report_id
    if ex.note:
        out["note"] = ex.note
    return out


def dump_task(task: TaskSpec) -> dict:
    """A TaskSpec as plain data."""
    out: dict = {
        "mode": task.mode,
        "system": task.system,
        "per_label_template": task.per_label_template,
        "joint_template": task.joint_template,
        "output_format": task.output_format,
        "joint_output_format": task.joint_output_format,
    }
    if task.cues:
        out["cues"] = {k: list(v) for k, v in task.cues}
    if task.attribute_cues:
        out["attribute_cues"] = {name: {value: list(p) for value, p in values} for name, values in task.attribute_cues}
    if task.description:
        out["description"] = task.description
    return out


# ---------------------------------------------------------------- rendering


def label_guidance(lp: LabelPrompt, label_name: str, spec: tuple = ()) -> str:
    """The per-label guidance block: definition, look-for, exclusions, hedge and temporal policy, and the
    attributes a positive answer carries (spec: the label's attributes, none when empty)."""
    lines = [f"Definition of {label_name}: {lp.definition}"]
    if lp.look_for:
        lines.append("Look specifically for phrases such as: " + "; ".join(f'"{p}"' for p in lp.look_for) + ".")
    for rule in lp.do_not_label_when:
        lines.append(f"Do NOT label as {label_name} when {rule}")
    hedge = "positive (1)" if lp.hedged == "positive" else "negative (0)"
    named = ", ".join(f'"{c}"' for c in HEDGE_NAMED)
    lines.append(f"Hedged wording ({named}): count as {hedge}.")
    temporal = ", ".join(f"{k} -> {'1' if v == 'positive' else '0'}" for k, v in lp.temporal)
    lines.append(f"Temporal wording: {temporal}.")
    if spec:
        listed = "; ".join(f"{name} ({', '.join(values)})" for name, values in spec)
        lines.append(
            f"Attributes of a positive {label_name}: {listed}. Give each one the report states for this "
            "finding, null when it does not; no attributes for a 0."
        )
    return "\n".join(lines)


def render_examples(lp: LabelPrompt) -> str:
    """Few-shot examples as text, each with its answer in the output format."""
    if not lp.examples:
        return "(no examples)"
    parts = []
    for i, ex in enumerate(lp.examples, 1):
        answer = json.dumps({"value": ex.value, "evidence": ex.text if ex.value else ""}, ensure_ascii=False)
        parts.append(f"Example {i}:\nReport: {ex.text}\nAnswer: {answer}\nWhy: {ex.why}")
    return "\n\n".join(parts)


def _fill(template: str, values: dict, where: str) -> str:
    """Strict str.format: a missing variable is an error, never an empty string."""
    try:
        return template.format_map(values)
    except KeyError as exc:
        raise PromptError(f"{where}: no value for placeholder {{{exc.args[0]}}}") from exc


def render_label_call(ps: PromptSet, label_id: str, label_name: str, report: str) -> list[dict]:
    """Chat messages asking about one label (per-label mode)."""
    lp = ps.label(label_id)
    user = _fill(
        ps.task.per_label_template,
        {
            "label_name": label_name,
            "task": lp.task,
            "guidance": label_guidance(lp, label_name, ps.attributes.get(label_id, ())),
            "examples": render_examples(lp),
            "report": report,
            "output_format": ps.task.output_format,
        },
        f"{TASK_FILE}: per_label_template",
    )
    return [{"role": "system", "content": ps.task.system}, {"role": "user", "content": user}]


_REPORT_SLOT = "\x00report\x00"  # cannot occur in YAML-loaded prompt text


def _label_call_parts(ps: PromptSet, label_id: str, label_name: str) -> tuple[str, list[str]] | None:
    """A per-label call's system message and its user message split where the report goes (None when a
    prompt value itself contains the split marker, so splitting would be ambiguous)."""
    lp = ps.label(label_id)
    values = {
        "label_name": label_name,
        "task": lp.task,
        "guidance": label_guidance(lp, label_name, ps.attributes.get(label_id, ())),
        "examples": render_examples(lp),
        "output_format": ps.task.output_format,
    }
    if any(_REPORT_SLOT in str(v) for v in values.values()) or _REPORT_SLOT in str(ps.task.system):
        return None
    parts = _fill(
        ps.task.per_label_template, {**values, "report": _REPORT_SLOT}, f"{TASK_FILE}: per_label_template"
    ).split(_REPORT_SLOT)
    return ps.task.system, parts


def label_call_renderer(ps: PromptSet, label_id: str, label_name: str) -> Callable[[str], list[dict]]:
    """render_label_call with the label's part rendered once: report -> the same messages, fast.

    A run renders one call per (report, label); the guidance, examples and template are the same
    for every report, so they are filled once and only the report is spliced in per call."""
    split = _label_call_parts(ps, label_id, label_name)
    if split is None:  # never in practice; stay exact anyway
        return lambda report: render_label_call(ps, label_id, label_name, report)
    system, parts = split

    def render(report: str) -> list[dict]:
        return [{"role": "system", "content": system}, {"role": "user", "content": report.join(parts)}]

    return render


def render_joint_call(ps: PromptSet, names: dict[str, str], report: str) -> list[dict]:
    """Chat messages asking about every label at once (joint mode)."""
    blocks = []
    for label_id, name in names.items():
        lp = ps.label(label_id)
        guidance = label_guidance(lp, name, ps.attributes.get(label_id, ()))
        blocks.append(f"## {label_id} ({name})\n{lp.task}\n{guidance}\n{render_examples(lp)}")
    user = _fill(
        ps.task.joint_template,
        {
            "labels_guidance": "\n\n".join(blocks),
            "label_ids": ", ".join(names),
            "report": report,
            "output_format": ps.task.joint_output_format,
        },
        f"{TASK_FILE}: joint_template",
    )
    return [{"role": "system", "content": ps.task.system}, {"role": "user", "content": user}]


def content_hash(obj: object) -> str:
    """sha256 of the canonical JSON of obj (sorted keys, no whitespace, UTF-8)."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def call_key(messages: list[dict], params: dict) -> str:
    """Cache key of one call: hash of rendered messages and the parameters that change the answer."""
    return content_hash({"messages": messages, "params": params})


def call_keyer(params: dict) -> Callable[[list[dict]], str]:
    """call_key with the parameters serialised once: messages -> the same key, about 3x faster.

    Builds the canonical JSON of plain {role, content} messages by hand (the string encoder is
    json's own), so keys stay identical to call_key's and existing call caches stay valid."""
    tail = ',"params":' + json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "}"
    enc = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) uses for strings

    def key(messages: list[dict]) -> str:
        if not all(
            type(m) is dict and m.keys() == {"role", "content"} and type(m["role"]) is str and type(m["content"]) is str
            for m in messages
        ):
            return call_key(messages, params)
        body = ",".join('{"content":' + enc(m["content"]) + ',"role":' + enc(m["role"]) + "}" for m in messages)
        return hashlib.sha256(('{"messages":[' + body + "]" + tail).encode("utf-8")).hexdigest()

    return key


def report_json(report: str) -> bytes:
    """A report as it appears inside a call's canonical JSON (escaped, UTF-8, without quotes): made once per
    report and shared by all its labels' keys (see label_call_keyer)."""
    return json.encoder.encode_basestring(report)[1:-1].encode("utf-8")


def label_call_keyer(
    ps: PromptSet, label_id: str, label_name: str, params: dict
) -> Callable[[str, bytes], tuple[list[dict], str]]:
    """label_call_renderer and call_keyer in one: (report, report_json(report)) -> (messages, call_key).

    A per-label call's canonical JSON is the same text for every report except where the report is
    spliced in, and json escapes character by character, so the escaped report is spliced into the
    escaped template: the hash of everything before the report is computed once per label and copied
    per call. Keys are identical to call_key's (tested), so existing call caches stay valid."""
    split = _label_call_parts(ps, label_id, label_name)
    if split is None or not isinstance(split[0], str) or len(split[1]) < 2:  # < 2: a template without {report}
        render, keyer = label_call_renderer(ps, label_id, label_name), call_keyer(params)

        def render_then_key(report: str, _report_bytes: bytes = b"") -> tuple[list[dict], str]:
            messages = render(report)
            return messages, keyer(messages)

        return render_then_key
    system, parts = split
    enc = json.encoder.encode_basestring
    escaped = [enc(part)[1:-1].encode("utf-8") for part in parts]
    head = ('{"messages":[{"content":' + enc(system) + ',"role":"system"},{"content":"').encode("utf-8")
    tail = (
        '","role":"user"}],"params":'
        + json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        + "}"
    ).encode("utf-8")
    start = hashlib.sha256(head + escaped[0])
    middles, last = escaped[1:-1], escaped[-1] + tail

    def render_and_key(report: str, report_bytes: bytes) -> tuple[list[dict], str]:
        digest = start.copy()
        digest.update(report_bytes)
        for middle in middles:  # a template naming {report} more than once
            digest.update(middle)
            digest.update(report_bytes)
        digest.update(last)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": report.join(parts)},
        ], digest.hexdigest()

    return render_and_key


def prompt_set_from_dictionary(guidance: dict, label_ids: list[str], task: TaskSpec) -> PromptSet:
    """Import a plain {label: free-text guidance} dictionary as a structured prompt set."""
    labels = {}
    for key, text in guidance.items():
        if key not in label_ids:
            raise PromptError(f"prompt dictionary: label {key!r} is not in the vocabulary")
        if not isinstance(text, str) or not text.strip():
            raise PromptError(f"prompt dictionary: guidance for {key!r} must be non-empty text")
        labels[key] = LabelPrompt(
            label=key,
            task=f"Does the report describe {key.replace('_', ' ')}?",
            definition=text.strip(),
            look_for=(),
            do_not_label_when=(),
            hedged="negative",
            temporal=(
                ("resolved", "negative"),
                ("stable", "positive"),
                ("improving", "positive"),
                ("prior", "negative"),
            ),
            examples=(),
        )
    missing = [i for i in label_ids if i not in labels]
    if missing:
        raise PromptError(f"prompt dictionary: no guidance for label(s) {', '.join(missing)}")
    return PromptSet(task=task, labels={i: labels[i] for i in label_ids})
