"""The one labelling path: build the calls, look up the call cache, choose the engine, call, parse,
store each answer through the caller's callback, count failures (label_calls).

Runs (services/runs.py), optimisation (services/optimising.py), scoring and robustness
(scoring.py, through label_texts) all label through it, so a new model-backed capability is added
here once. label_texts is the light path for texts that are not study reports, with a pluggable
extraction cache so reference reports are extracted once per bundle and text and every generator
is scored against the same reference labels.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from workbench.core import parsing
from workbench.core.prompts import PromptSet, call_keyer, label_call_keyer, render_joint_call, report_json
from workbench.core.vocab import Vocabulary, derive_frame
from workbench.labeller import llm
from workbench.labeller.endpoints import RULES_PREFIX, is_offline  # noqa: F401 (RULES_PREFIX re-exported)
from workbench.labeller.llm import CallRequest, ModelConfig
from workbench.study import StudyError


class ExtractionCache(Protocol):
    """Where labels of (bundle, text) are kept between calls."""

    def get_many(self, keys: list[str]) -> dict[str, str]: ...

    def put(self, key: str, bundle_sha: str, text_hash: str, labels_json: str) -> None: ...


class MemoryCache:
    """An in-process extraction cache (the default without a study database)."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def get_many(self, keys: list[str]) -> dict[str, str]:
        """Cached labels for keys."""
        return {k: self.data[k] for k in keys if k in self.data}

    def put(self, key: str, bundle_sha: str, text_hash: str, labels_json: str) -> None:
        """Store labels."""
        self.data[key] = labels_json


def text_sha(text: str) -> str:
    """sha256 of a text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def extraction_key(bundle_sha: str, model_params: dict, text: str) -> str:
    """Cache key: bundle, the model that labels, and the text."""
    blob = json.dumps({"bundle": bundle_sha, "model": model_params, "text": text_sha(text)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


MODEL_FIELDS = (
    "model",
    "api_base",
    "api_key_env",
    "endpoints",
    "temperature",
    "seed",
    "max_tokens",
    "timeout_s",
    "max_retries",
    "backoff_base_s",
    "backoff_max_s",
    "concurrency",
    "json_mode",
    "workers",
    "response_schema",
    "max_reply_chars",
)
# labeller settings that are about the study's budget, not the model call (never part of a ModelConfig)
BUDGET_FIELDS = ("confirm_above", "price")
REUSE_BATCH = 8000  # cached answers handed to the caller's store at a time
OFFLINE_BATCH = 5000  # offline answers stored at a time (they cost nothing to redo; paid ones are stored one by one)
PROGRESS_EVERY_S = 0.2  # progress callbacks at most five times a second
# failure kinds that say what to change, shown beside their counts
HINTS = {
    "truncated": "the reply was cut off at max_tokens: raise labeller.max_tokens (reasoning models need 1000+)",
    "looping": "the model repeated itself until max_tokens, so more tokens will not help: turn on labeller.json_mode "
    "or labeller.response_schema (llama.cpp and vLLM then end the reply after the JSON object), or use a larger model",
    "prose": "the model answered in prose without the JSON the prompt asks for: turn on labeller.json_mode or "
    "labeller.response_schema (llama.cpp and vLLM then constrain the reply to JSON)",
    "oversized": "the reply was longer than labeller.max_reply_chars: check the server, or raise the limit",
    "refusal": "the model declined to answer: reword the prompt, or use another model",
    "wrong_label": "the model answered about another label than the one asked: turn on labeller.response_schema (the "
    "answer is then only a value and its evidence), or use a larger model; the raw reply is in `workbench case`",
    "parse_error": "the reply had no usable 0/1: tighten the prompt's output format, or turn on labeller.response_schema",
    "timeout": "calls took longer than labeller.timeout_s: a server that answers one call at a time needs "
    "labeller.concurrency 1 (a run lowers it after a timeout) or a larger timeout_s; then `workbench run --resume {run}`",
    "connection": "no server answered: start it (or fix labeller.api_base), then `workbench run --resume {run}`",
}


LABEL_MODES = ("per_label", "joint")  # calls whose replies are label answers (a label schema fits them)


def model_config(settings: dict, strict: bool = True):
    """The one ModelConfig builder: from labeller settings (a study's, a run's record, a bundle's).

    strict: an unknown key is refused (a study's settings); otherwise keys that are not model
    parameters are left out (a bundle's or run's record carries more)."""
    unknown = sorted(set(settings) - set(MODEL_FIELDS) - set(BUDGET_FIELDS))
    if unknown and strict:
        raise StudyError(
            f"labeller settings: unknown key {unknown[0]!r} (allowed: {', '.join(MODEL_FIELDS + BUDGET_FIELDS)})"
        )
    values = {k: v for k, v in settings.items() if v is not None and k in MODEL_FIELDS}
    if "endpoints" in values:
        values["endpoints"] = tuple(values["endpoints"])
    return ModelConfig(**values)


def engine_for(cfg) -> Callable:
    """The offline labeller, worker processes or litellm, behind one complete_all interface."""
    if is_offline(cfg.model):
        from workbench.labeller import rules

        return rules.complete_all
    if cfg.workers > 1:
        from workbench.labeller import workers

        return workers.complete_all_workers

    return llm.complete_all_sync


def call_params(cfg) -> dict:
    """The parameters in every call key: the answer-changing ones, the server when it was chosen (one
    model name on two servers may be two models), the offline engine's version."""
    params = dict(cfg.params())
    if is_offline(cfg.model):
        from workbench.labeller import rules

        params["engine_version"] = getattr(rules, "ENGINE_VERSION", "1")
        return params
    ends = cfg.resolved()
    if len(ends) == 1 and ends[0].source != "provider default":
        params["api_base"] = ends[0].url
    return params


def build_requests(
    ps: PromptSet,
    items: Iterable[tuple[str, str]],
    labels: list[str],
    mode: str,
    names: dict[str, str],
    params: dict,
    done: set | frozenset = frozenset(),
) -> list:
    """Every call for (item id, text) pairs and labels, with its cache key and what the offline labeller reads;
    (item id, label) pairs in done are left out. meta["report_id"] is the item id."""
    cues = ps.task.cue_lists()
    specs = ps.attributes  # label -> its attributes: the parser checks them, the offline labeller reads them
    if "engine_version" in params:  # the offline labeller reads the cue lists beside the text: an edit re-asks
        params = {**params, "cues": cue_digest(cues)}
    key_of = call_keyer(params)
    keyed = {lab: label_call_keyer(ps, lab, names[lab], params) for lab in labels} if mode != "joint" else {}
    vocabulary = tuple(names.items())  # one tuple shared by every request: what a wrong-label reply is checked with
    asked = {lab: parsing.Asked(lab, vocabulary) for lab in labels}
    prompts = {lab: [ps.label(lab)] for lab in labels}
    out = []
    for item, text in items:
        if mode == "joint":
            todo = [lab for lab in labels if (item, lab) not in done]
            if not todo:
                continue
            messages = render_joint_call(ps, {lab: names[lab] for lab in todo}, text)
            out.append(
                CallRequest(
                    key_of(messages),
                    messages,
                    {
                        "report_id": item,
                        "labels": todo,
                        "report": text,
                        "mode": "joint",
                        "prompts": [ps.label(lab) for lab in todo],
                        "cues": cues,
                        "attributes": {lab: specs[lab] for lab in todo if lab in specs},
                    },
                )
            )
            continue
        text_json = report_json(text)
        for lab in labels:
            if (item, lab) in done:
                continue
            messages, key = keyed[lab](text, text_json)
            out.append(
                CallRequest(
                    key,
                    messages,
                    {
                        "report_id": item,
                        "labels": [lab],
                        "report": text,
                        "mode": "per_label",
                        "prompts": prompts[lab],
                        "cues": cues,
                        "attributes": {lab: specs[lab]} if lab in specs else {},
                        "asked": asked[lab],
                    },
                )
            )
    return out


def cue_digest(cues: dict) -> str:
    """A short hash of the task's cue lists (negation, hedge, temporal and attribute cues)."""
    return hashlib.sha256(json.dumps(sorted((k, list(v)) for k, v in cues.items())).encode()).hexdigest()[:12]


def decide(req, text: str | None, res=None, replies: parsing.ReplyMemo | None = None) -> dict[str, parsing.Answer]:
    """label -> Answer for one call's reply; a failed call is a recorded failure, never a 0.

    res: the CallResult when the call was made now (None for a cached reply); its reply shape
    (finish reason, a refusal field) decides before the text is read."""
    meta = req.meta
    if text is None:
        detail = ((res.error if res is not None else "no reply") or "no reply")[:2000]
        return {lab: parsing.Answer(None, "", "call_error", detail) for lab in meta["labels"]}
    asked = meta.get("asked")  # per label: the label asked, so a reply about another is a failure of its own kind
    shape = reply_shape_failure(res)
    if shape is not None:
        return {lab: parsing.off_label_prose(shape, text, asked) for lab in meta["labels"]}
    if meta["mode"] == EXTRACT_MODE:
        return {lab: extraction_decision(text) for lab in meta["labels"]}
    specs = meta.get("attributes") or {}
    try:
        if meta["mode"] == "joint":
            return parsing.parse_joint_reply(text, meta["labels"], meta["report"], specs)
        parse = replies.parse if replies is not None else parsing.parse_reply
        decision = parse(text, meta["report"], specs.get(meta["labels"][0], ()), asked)
        return {meta["labels"][0]: parsing.off_label_prose(parsing.prose_failure(decision, text), text, asked)}
    except Exception as exc:  # the parser's contract is never to raise; if it does, one failure, not a dead run
        return {
            lab: parsing.Answer(None, "", "parse_error", f"parser error ({type(exc).__name__})")
            for lab in meta["labels"]
        }


EXTRACT_MODE = "extract"  # label-set mining: one call lists a report's findings (workbench/core/labelset.py)


def extraction_decision(text: str) -> parsing.Answer:
    """A findings-list reply as one decision: value 1 with the findings as JSON evidence, or a parse failure
    naming what is wrong (never an empty list in its place)."""
    from workbench.core.labelset import parse_entities

    try:
        found = parse_entities(text)
    except ValueError as exc:
        return parsing.Answer(None, "", "parse_error", str(exc))
    return parsing.Answer(1, json.dumps(found), "ok")


def reply_shape_failure(res) -> parsing.Answer | None:
    """A reply that is not an answer by its shape: cut off at max_tokens, or declined by the provider."""
    if res is None:
        return None
    finish = getattr(res, "finish_reason", None)
    if finish == "length" and parsing.leading_object(res.text) is not None:
        return None  # the stop rule: the answer ended with its JSON object; what follows is rambling, not the answer
    if finish == "length" and parsing.looping(res.text):
        return parsing.Answer(
            None,
            "",
            "looping",
            f"the reply repeats itself until max_tokens ({res.completion_tokens} completion tokens): {res.text[-150:]!r}",
        )
    if finish == "length" and _cut_prose(res.text):
        return parsing.Answer(  # more tokens would only buy more prose: the fix is the JSON the prompt asks for
            None,
            "",
            "prose",
            f"prose without the JSON answer asked for, cut off at max_tokens ({res.completion_tokens} completion "
            f"tokens): {res.text[:150]!r}",
        )
    if finish == "length":
        return parsing.Answer(
            None,
            "",
            "truncated",
            f"reply cut off at max_tokens (finish_reason length, {res.completion_tokens} completion tokens)",
        )
    refusal = getattr(res, "refusal", None)
    if refusal or finish == "content_filter":
        why = f"provider refusal: {refusal}" if refusal else "the provider's content filter stopped the reply"
        return parsing.Answer(None, "", "refusal", why[:2000])
    return None


def _cut_prose(text: str | None) -> bool:
    """A reply cut at max_tokens that is prose, not an answer under way: no JSON begun, no reasoning block (a
    reasoning model cut while thinking needs more tokens), no stated 0/1."""
    text = text or ""
    return "{" not in text and "<think>" not in text.lower() and not parsing.reply_in_text(text)


@dataclass
class CallOutcome:
    """One call's outcome: the request, the engine's result (None when answered from the cache), its decisions."""

    req: object
    res: object | None
    decisions: dict

    def failure(self) -> tuple[str, str] | None:
        """(kind, detail) of the first failed label, None when every label has a value."""
        for d in self.decisions.values():
            if d.value is None:
                kind = (self.res.error_kind if self.res is not None else None) or d.status
                return kind, d.detail
        return None


@dataclass
class Progress:
    """Progress of a labelling job for a bar: done of total, with counts so far."""

    done: int
    total: int
    made: int
    reused: int
    failures: int
    remaining_s: float | None = None  # time left, measured on this run's calls so far (None before the first one)

    def left(self) -> str:
        """The time left for a person ("about 12 min left"), or "" before a call was measured or once done."""
        if self.remaining_s is None or self.done >= self.total:
            return ""
        return f"about {duration(self.remaining_s)} left"


@dataclass
class LabelCounts:
    """What one pass of label_calls did: calls needed, made and reused; failed calls by kind, with an example each."""

    calls: int = 0
    made: int = 0
    reused: int = 0
    failed: int = 0
    failure_kinds: dict = field(default_factory=dict)
    failure_examples: dict = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    response_format: str = ""  # how the reply format was asked for (see with_response_schema)
    notes: list = field(default_factory=list)  # what the run chose on the way (concurrency fitted to the server ...)
    rambling: int = 0  # replies answered by the JSON object they began with, and then went on


LABEL_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["value", "evidence"],
    "properties": {"value": {"type": "integer", "enum": [0, 1]}, "evidence": {"type": "string"}},
}


def label_schema(spec: tuple = ()) -> dict:
    """One label's answer as a JSON schema; a label with attributes also has an `attributes` object naming
    each of them with its closed values or null (strict schemas need every key required, so "not stated"
    is null; the parser reads null as no value)."""
    if not spec:
        return LABEL_SCHEMA
    attributes = {
        "type": "object",
        "additionalProperties": False,
        "required": [name for name, _ in spec],
        "properties": {name: {"type": ["string", "null"], "enum": [*values, None]} for name, values in spec},
    }
    return {
        **LABEL_SCHEMA,
        "required": [*LABEL_SCHEMA["required"], "attributes"],
        "properties": {**LABEL_SCHEMA["properties"], "attributes": attributes},
    }


def response_schema(mode: str, labels: list[str] | None = None, specs: dict | None = None) -> dict:
    """The response_format that asks for a label's answer (per label) or every asked label's (joint) as JSON;
    with labels (and their attribute specs) it names exactly those labels and their attributes."""
    specs = specs or {}
    if mode != "joint":
        schema = label_schema(specs.get(labels[0], ())) if labels else LABEL_SCHEMA
    elif labels:
        schema = {
            "type": "object",
            "additionalProperties": False,
            "required": ["labels"],
            "properties": {
                "labels": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": list(labels),
                    "properties": {lab: label_schema(specs.get(lab, ())) for lab in labels},
                }
            },
        }
    else:
        schema = {
            "type": "object",
            "additionalProperties": False,
            "required": ["labels"],
            "properties": {"labels": {"type": "object", "additionalProperties": LABEL_SCHEMA}},
        }
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "label_answer" if mode != "joint" else "label_answers",
            "schema": schema,
            "strict": mode != "joint",
        },
    }


def with_request_schemas(requests: list, cfg) -> None:
    """Give each request the schema of its own labels and their attributes when cfg sends a JSON schema (one
    schema per label set, shared by its requests)."""
    if not cfg.response_format:
        return
    made: dict = {}
    for r in requests:
        labels, mode = tuple(r.meta.get("labels") or ()), r.meta.get("mode", "per_label")
        if not labels:
            continue
        if (mode, labels) not in made:
            made[(mode, labels)] = in_form_of(
                cfg.response_format, response_schema(mode, list(labels), r.meta.get("attributes"))
            )
        r.response_format = made[(mode, labels)]


def in_form_of(sent: dict | None, schema_format: dict) -> dict:
    """A json_schema response_format in the form of the one cfg sends: llama-cpp-python's server takes a schema
    only as {"type": "json_object", "schema": ...} (and refuses "json_schema" with HTTP 500)."""
    if not sent or sent.get("type") != "json_object":
        return schema_format
    return {"type": "json_object", "schema": schema_format["json_schema"]["schema"]}


def with_response_schema(cfg, mode: str, facts=None):
    """cfg with a JSON schema as response_format when asked for (labeller.response_schema) and litellm says the
    model supports it, or the server is on this machine; otherwise unchanged: the prompt's output format (and
    json_mode, if set) applies. facts: llm.server_facts of cfg, when known. Returns (cfg, how the format was asked for)."""
    if not cfg.response_schema or is_offline(cfg.model) or mode not in LABEL_MODES:
        return cfg, "the prompt's output format" + (" and JSON mode" if cfg.json_mode else "")

    sent = dataclasses.replace(cfg, response_format=response_schema(mode))
    if llm.supports_response_schema(cfg.model):
        return sent, "a JSON schema sent as response_format"
    if llm.all_local(cfg.base_urls()):  # llama.cpp, vLLM, Ollama: the server turns the schema into a grammar
        kind = (facts or llm.server_facts(cfg)).kind
        if kind == "llama-cpp-python":
            sent = dataclasses.replace(sent, response_format=in_form_of({"type": "json_object"}, sent.response_format))
        return sent, (
            f"a JSON schema sent as response_format to the server on this machine{' (' + kind + ')' if kind else ''}; "
            f"litellm does not list {cfg.model} as supporting one, and a server that ignores it answers as the prompt asks"
        )
    return cfg, (
        f"the prompt's output format: litellm does not list {cfg.model} as supporting a JSON schema "
        "(response_schema asked for, not sent)"
    )


def prefix_order(requests: list) -> list:
    """The requests with those that share a label prompt one after another (report order kept within), so a
    provider's prefix cache serves their common start (the system message and the label's part before the report)."""
    return sorted(requests, key=lambda r: (r.meta.get("mode", ""), tuple(r.meta.get("labels", ()))))


def label_calls(
    requests: list,
    cfg,
    lookup: Callable[[list[str]], dict[str, str]],
    store: Callable[[list[CallOutcome]], None],
    *,
    store_reused: Callable[[list[CallOutcome]], None] | None = None,
    defer: Callable | None = None,
    on_answer: Callable[[CallOutcome], None] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    cancel=None,
    on_start: Callable[[LabelCounts], None] | None = None,
    engine: Callable | None = None,
    decide: Callable = decide,
) -> LabelCounts:
    """Label requests: cached replies (lookup: keys -> reply text) are parsed and handed to store_reused (else
    store) in batches; the rest go to the engine, and each answer is parsed and handed to store.

    A paid answer is stored the moment it returns, in the engine's thread (kill -9 loses nothing); the
    offline labeller's answers cost nothing to redo, so they are stored in batches, through defer (a
    background writer) when given. on_answer sees every new answer after it is queued for storing;
    on_start sees the counts once the cache is read, before any call. engine: another engine with
    complete_all's interface (workbench/labeller/batch.py's BatchEngine; its store_every answers are stored per
    transaction, and it is given flush to store the rest before it records a job as collected). decide: what a
    reply means, label -> Answer (the label parser; the model proposer gives its own, so its calls share this
    engine, governance, cache, counts and call records). Raises what the engine raises, after storing what was
    answered."""
    counts = LabelCounts(calls=len(requests))
    facts = _local_facts(cfg, engine)
    cfg, counts.response_format = with_response_schema(
        cfg, requests[0].meta.get("mode") if requests else "per_label", facts
    )
    if "response_schema asked for" in counts.response_format or "this machine" in counts.response_format:
        counts.notes.append(f"reply format: {counts.response_format}")
    with_request_schemas(requests, cfg)
    cached = lookup([r.key for r in requests]) if requests else {}
    todo = [r for r in requests if r.key not in cached]
    todo, twins = distinct_calls(todo) if engine is None and not is_offline(cfg.model) else (todo, {})
    engine, cfg = _paced(engine, cfg, todo, counts.notes, facts)
    counts.reused = len(requests) - len(todo)  # a twin (the same text in another report) is answered by one call
    if on_start:
        on_start(counts)
    replies = parsing.ReplyMemo()
    _hand_reused(requests, cached, replies, store_reused or store, decide)
    progress = Progress(done=counts.reused, total=len(requests), made=0, reused=counts.reused, failures=0)
    next_report = [time.monotonic() + PROGRESS_EVERY_S]
    started = time.monotonic()  # the calls' own pace: what the time left is measured on
    if on_progress:
        on_progress(progress)
    offline = is_offline(cfg.model)
    if not offline:
        todo = prefix_order(todo)
    every = OFFLINE_BATCH if offline else getattr(engine, "store_every", 1)
    pending: list[CallOutcome] = []

    def flush() -> None:
        if not pending:
            return
        answered = pending[:]
        pending.clear()
        if offline and defer is not None:
            defer(lambda: store(answered))
        else:
            store(answered)

    def on_result(req, res) -> None:
        answer = CallOutcome(req, res, decide(req, res.text, res, replies))
        pending.append(answer)
        if len(pending) >= every:
            flush()
        _count(counts, answer)
        progress.done += 1
        progress.made += 1
        progress.failures = counts.failed
        progress.remaining_s = time_left(time.monotonic() - started, progress)
        if on_answer:
            on_answer(answer)
        for twin in twins.pop(req.key, ()):
            _hand_twin(twin, res, replies, store_reused or store, counts, decide)
            progress.done += 1
        if on_progress and (progress.done == progress.total or time.monotonic() >= next_report[0]):
            next_report[0] = time.monotonic() + PROGRESS_EVERY_S  # a bar needs a few updates a second, not 43,000
            on_progress(progress)

    try:
        if todo:
            if engine is not None and getattr(engine, "store_every", 1) > 1:
                engine(todo, cfg, on_result, cancel, flush=flush)  # it stores what it handed before it says so
            else:
                (engine or engine_for(cfg))(todo, cfg, on_result, cancel)
    finally:
        flush()  # also when the engine raised: what was answered is kept
        if counts.rambling:
            counts.notes.append(rambling_note(counts.rambling))
    return counts


def rambling_note(n: int) -> str:
    """The note for replies that went on after their JSON object (the stop rule read the object and ignored the rest)."""
    return (
        f"{n} repl{'y' if n == 1 else 'ies'} went on after the JSON object (rambling): each answer was read from the "
        "object the reply began with and the rest ignored (kept in the answer's detail); labeller.json_mode or "
        "labeller.response_schema ends replies there (a grammar on llama.cpp and vLLM)"
    )


def at_pace(elapsed: float, done: int, left: int) -> float:
    """Seconds the `left` units of work take at the pace of the `done` ones (elapsed seconds for those)."""
    return elapsed / max(done, 1) * max(left, 0)


def time_left(elapsed: float, progress: Progress) -> float:
    """Seconds left at the pace of the calls made so far (twins and cached answers cost no call, so they count as
    done without time): the estimate that replaces a guess once a model has answered."""
    return at_pace(elapsed, progress.made, progress.total - progress.done)


def _local_facts(cfg, engine):
    """What the local server of a direct (not batch, not offline) run says about itself, None otherwise."""
    if engine is not None or is_offline(cfg.model):
        return None
    try:
        return llm.server_facts(cfg)
    except llm.EndpointError:  # no endpoint to ask: the run says so when it checks the endpoint
        return None


def _paced(engine, cfg, todo: list, notes: list, facts) -> tuple:
    """The engine and cfg for the calls to make: on one local server, no more calls in flight than it answers at
    once, and fewer after each timeout (llm.Throttle); notes gets a line for each choice."""
    if engine is not None or not todo or is_offline(cfg.model) or cfg.workers > 1:
        return engine, cfg
    cfg, chosen = llm.fitted_to_server(cfg, facts)
    if chosen:
        notes.append(chosen)
    throttle = llm.Throttle(cfg.concurrency, notes.append)

    def paced(requests, cfg_, on_result, cancel=None):
        return llm.complete_all_sync(requests, cfg_, on_result, cancel, throttle=throttle)

    return paced, cfg


def distinct_calls(todo: list) -> tuple[list, dict]:
    """One request per call key (reports with the same text ask the same call), and key -> the other requests."""
    first: dict = {}
    twins: dict = {}
    for r in todo:
        if r.key in first:
            twins.setdefault(r.key, []).append(r)
        else:
            first[r.key] = r
    return list(first.values()), twins


def _hand_twin(
    twin, res, replies, store: Callable[[list[CallOutcome]], None], counts: LabelCounts, decide: Callable = decide
) -> None:
    """A request whose call was made for another report with the same text: its answer, stored as reused."""
    answer = CallOutcome(twin, None, decide(twin, res.text, res, replies))
    store([answer])
    if answer.failure() is not None:
        counts.failed += 1


def _hand_reused(
    requests: list, cached: dict, replies, store: Callable[[list[CallOutcome]], None], decide: Callable = decide
) -> None:
    """Answers of the calls found in the cache, handed to store in batches as they are parsed."""
    batch: list[CallOutcome] = []
    n_decisions = 0
    for r in requests:
        hit = cached.get(r.key)
        if hit is None:
            continue
        decisions = decide(r, hit, None, replies)
        batch.append(CallOutcome(r, None, decisions))
        n_decisions += len(decisions)
        if n_decisions >= REUSE_BATCH:
            store(batch)
            batch, n_decisions = [], 0
    if batch:
        store(batch)


def _count(counts: LabelCounts, answer: CallOutcome) -> None:
    """Add one new answer to the counts: made, tokens, cost, and its failure kind."""
    res = answer.res
    counts.made += 1
    counts.prompt_tokens += res.prompt_tokens or 0
    counts.completion_tokens += res.completion_tokens or 0
    counts.cost += res.cost or 0.0
    if any(d.detail.startswith(parsing.RAMBLING) for d in answer.decisions.values()):
        counts.rambling += 1
    failed = answer.failure()
    if failed is not None:
        kind, detail = failed
        counts.failed += 1
        counts.failure_kinds[kind] = counts.failure_kinds.get(kind, 0) + 1
        counts.failure_examples.setdefault(kind, example(detail))


def example(detail: str) -> str:
    """A failure message fit to print: the model's quoted reply (it may quote the report) cut off."""
    cut = min((i for i in (detail.find(": '"), detail.find(': "')) if i >= 0), default=-1)
    text = detail[:cut] if cut >= 0 else detail
    return text if len(text) <= 200 else text[:197] + "..."


def cacheable(answer: CallOutcome) -> bool:
    """A new reply worth caching: the call succeeded and every label got a value (failures are never cached)."""
    return (
        answer.res is not None
        and answer.res.text is not None
        and all(d.value is not None for d in answer.decisions.values())
    )


def call_facts(run_id: int | None, answers: list[CallOutcome]) -> list[tuple]:
    """Per-call facts of new answers, as rows for the callfact table (store.queries.FACT_COLUMNS)."""
    return [
        (
            a.req.key,
            run_id,
            ",".join(a.req.meta["labels"]),
            round(a.res.latency_s, 4),
            a.res.attempts,
            a.res.prompt_tokens or 0,
            a.res.completion_tokens or 0,
            a.res.cached_tokens,
            a.res.cost,
            a.res.finish_reason,
            a.res.reported_model,
            a.res.reasoning,
            a.res.peer,
        )
        for a in answers
        if a.res is not None
    ]


def failed_replies(answers: list[CallOutcome]) -> list[tuple[str, str]]:
    """(raw reply, call key) of new answers that got a reply but are not cached (failures): the case view shows it."""
    return [
        (a.res.text, a.req.key) for a in answers if a.res is not None and a.res.text is not None and not cacheable(a)
    ]


NO_HISTORY = (
    "no history for this model with these settings (server, max_tokens, JSON mode): not estimated before its first "
    "calls; the run measures them and shows the time left as it goes"
)
ASSUMED_REPLY_TOKENS = 30  # completion tokens of one label's {"value": 0, "evidence": "..."} when none are recorded
TOKEN_SAMPLE = 200  # calls counted with litellm's token counter; the rest are scaled by characters


@dataclass(frozen=True)
class Estimate:
    """What a labelling job will cost before any call: calls after the cache, tokens, cost and wall time."""

    model: str
    calls: int
    cached: int
    to_make: int
    prompt_tokens: int
    completion_tokens: int
    completion_tokens_max: int
    cost: float | None  # None: no price known (litellm has none and the study registered none)
    cost_max: float | None  # every reply as long as max_tokens allows
    seconds: float | None  # None: no call of this model with these settings to measure it by (never a guess)
    concurrency: int
    how: dict  # how each figure was obtained, in words

    def over(self, limit: float | None) -> bool:
        """True when the job may cost more than limit (an unknown cost counts as more)."""
        return limit is not None and self.to_make > 0 and (self.cost is None or self.cost > float(limit))

    def lines(self) -> list[str]:
        """The estimate for a person, one figure per line."""
        cost = "unknown" if self.cost is None else f"${self.cost:,.4f}"
        worst = "" if self.cost_max is None else f" (at most ${self.cost_max:,.4f} if every reply used max_tokens)"
        return [
            f"estimate for {self.model}: no model call was made",
            f"calls: {self.calls:,} needed, {self.cached:,} answered from the cache, {self.to_make:,} to make",
            f"prompt tokens: {self.prompt_tokens:,} ({self.how['tokens']})",
            f"completion tokens: {self.completion_tokens:,}, at most {self.completion_tokens_max:,} ({self.how['completion']})",
            f"cost: {cost}{worst} ({self.how['cost']})",
            f"wall time: about {duration(self.seconds)} at concurrency {self.concurrency} ({self.how['time']})"
            if self.seconds is not None
            else f"wall time: {self.how['time']}",
        ]

    def to_json(self) -> dict:
        """The estimate as plain data."""
        return dict(self.__dict__)


def duration(seconds: float) -> str:
    """Seconds as a short duration (45 s, 12 min, 3.2 h)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_calls(
    requests: list,
    cfg,
    cached_keys: set,
    *,
    price: dict | None = None,
    local: bool = False,
    history: list[tuple[float, int]] = (),
    batch: bool = False,
) -> Estimate:
    """Estimate the calls not in cached_keys, without making any: prompt tokens by litellm's token counter
    (on a sample, scaled by characters), completion tokens from this model's recorded calls (else a stated
    assumption), cost from the study's registered price or litellm's price map, wall time from recorded
    latencies at the configured concurrency. price: {"input_per_million": $, "output_per_million": $};
    history: (latency_s, completion_tokens) of this model's recorded calls; batch: priced and timed as a
    provider batch job (workbench/labeller/batch.py)."""
    todo = [r for r in requests if r.key not in cached_keys]
    n = len(todo)
    offline = is_offline(cfg.model)
    prompt_tokens, tokens_how = _prompt_tokens(todo, cfg.model, offline)
    labels_per_call = sum(len(r.meta.get("labels", ())) for r in todo) / n if n else 1.0
    recorded = [c for _, c in history if c]
    per_call = sum(recorded) / len(recorded) if recorded else ASSUMED_REPLY_TOKENS * labels_per_call
    per_call = min(per_call, cfg.max_tokens)
    completion_how = (
        f"mean of {len(recorded):,} recorded calls of this model"
        if recorded
        else f"assumed {ASSUMED_REPLY_TOKENS} per label asked; no call of this model recorded yet"
    )
    completion, completion_max = round(per_call * n), n * cfg.max_tokens
    prices, cost_how = _prices(cfg.model, price, local or offline, batch)
    cost = cost_max = None
    if prices is not None:
        cost = prompt_tokens * prices[0] + completion * prices[1]
        cost_max = prompt_tokens * prices[0] + completion_max * prices[1]
    latencies = sorted(lat for lat, _ in history if lat)
    latency: float | None
    if offline:
        latency, time_how = 0.0005, "the offline labeller: about 2,000 calls a second"
    elif latencies:
        latency, time_how = (
            latencies[len(latencies) // 2],
            f"median latency {latencies[len(latencies) // 2]:.2f} s of {len(latencies):,} recorded calls",
        )
    else:  # a model's speed depends on its server and settings: an assumed figure was 50-400 times off (issue 33)
        latency, time_how = None, NO_HISTORY
    concurrency = 1 if offline else cfg.concurrency
    seconds = (-(-n // concurrency) * latency if latency is not None else None) if n else 0.0
    if batch and n:
        time_how += "; as a batch job the provider answers within its 24 h completion window instead"
    return Estimate(
        cfg.model,
        len(requests),
        len(requests) - n,
        n,
        prompt_tokens,
        completion,
        completion_max,
        cost,
        cost_max,
        seconds,
        concurrency,
        {"tokens": tokens_how, "completion": completion_how, "cost": cost_how, "time": time_how},
    )


def _prompt_tokens(todo: list, model: str, offline: bool) -> tuple[int, str]:
    """Prompt tokens of the calls to make, and how they were counted."""
    if not todo:
        return 0, "no call to make"
    chars = [sum(len(m.get("content") or "") for m in r.messages) for r in todo]
    if offline:
        return sum(chars) // 4, "characters / 4 (the offline labeller reads no tokens)"

    step = max(1, len(todo) // TOKEN_SAMPLE)
    sample = list(range(0, len(todo), step))[:TOKEN_SAMPLE]
    counted = sum(llm.count_tokens(model, todo[i].messages) for i in sample)
    if len(sample) == len(todo):
        return counted, "litellm's token counter, every call"
    per_char = counted / max(1, sum(chars[i] for i in sample))
    return round(
        per_char * sum(chars)
    ), f"litellm's token counter on {len(sample)} of {len(todo):,} calls, scaled by characters"


def _prices(model: str, price: dict | None, free: bool, batch: bool = False) -> tuple[tuple[float, float] | None, str]:
    """(input, output) price per token and where it came from; batch: litellm's batch price when it lists one."""
    if price:
        return (
            (float(price.get("input_per_million", 0)) / 1e6, float(price.get("output_per_million", 0)) / 1e6),
            "the study's registered price (labeller.price)" + ("; assumed for a batch job too" if batch else ""),
        )
    if free and is_offline(model):
        return (0.0, 0.0), "the offline labeller: no charge"

    if batch:
        found = llm.batch_token_prices(model)
        if found is not None:
            return found, "litellm's batch price map"
    found = llm.token_prices(model)
    if found is not None:
        return found, "litellm's price map" + (
            f"; it lists no batch price for {model}: assumed the normal price" if batch else ""
        )
    if free:  # as the engine records it: a model on this machine that litellm has no price for costs nothing
        return (0.0, 0.0), "on this machine, no price known: no charge"
    return (
        None,
        f"litellm has no price for {model}: register one as labeller.price (input_per_million, output_per_million)",
    )


def label_texts(
    ps: PromptSet,
    vocab: Vocabulary,
    texts: dict[str, str],
    cfg,
    bundle_sha: str,
    cache: ExtractionCache | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Reports x labels (derived labels filled) for texts keyed by id; NaN where the labeller failed.

    Returns (labels, stats) with stats: texts, extracted, reused, failures.
    """
    labels, _, stats = label_texts_with_attributes(ps, vocab, texts, cfg, bundle_sha, cache, on_progress)
    return labels, stats


ATTRIBUTES_KEY = "_attributes"  # beside the label values in a cached extraction: {label: {attribute: value}}


def label_texts_with_attributes(
    ps: PromptSet,
    vocab: Vocabulary,
    texts: dict[str, str],
    cfg,
    bundle_sha: str,
    cache: ExtractionCache | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    engine: Callable | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """label_texts plus the attributes of positive findings: (labels, attributes long frame with report_id,
    label, attribute, value, stats); stats also counts attribute parse failures. engine: as label_calls'."""
    cache = cache or MemoryCache()
    params = dict(cfg.params())
    keys = {rid: extraction_key(bundle_sha, params, t) for rid, t in texts.items()}
    cached = cache.get_many(list(set(keys.values())))
    asked = [lab for lab in vocab.asked_ids if lab in ps.labels]
    results: dict[str, dict[str, int | None]] = {}
    found: dict[str, dict] = {}  # report id -> {label: {attribute: value}}
    for rid, key in keys.items():
        if key in cached:
            results[rid] = json.loads(cached[key])
            found[rid] = results[rid].pop(ATTRIBUTES_KEY, {})
    todo_ids = sorted({rid for rid in texts if rid not in results})
    # texts that repeat (same text under two ids) are labelled once
    by_key: dict[str, list[str]] = {}
    for rid in todo_ids:
        by_key.setdefault(keys[rid], []).append(rid)
    items = [(key, texts[rids[0]]) for key, rids in by_key.items()]
    requests = build_requests(ps, items, asked, ps.task.mode, vocab.names(), call_params(cfg))
    partial: dict[str, dict[str, int | None]] = {k: {} for k in by_key}
    partial_attrs: dict[str, dict[str, dict[str, str]]] = {k: {} for k in by_key}
    causes: dict[str, int] = {}
    attribute_failures = [0]

    def store(answers: list[CallOutcome]) -> None:
        for answer in answers:
            ext_key = answer.req.meta["report_id"]
            for lab, d in answer.decisions.items():
                partial[ext_key][lab] = d.value
                if d.attributes:
                    partial_attrs[ext_key][lab] = dict(d.attributes)
                if d.attribute_error:  # counted, never guessed; the presence value still counts
                    attribute_failures[0] += len(by_key[ext_key])
                if d.value is None:  # counted by cause, per (text, label): a failure is never a silent 0
                    kind = (answer.res.error_kind if answer.res is not None else None) or d.status
                    causes[kind] = causes.get(kind, 0) + len(by_key[ext_key])

    done = [0]

    def tick(_answer: CallOutcome) -> None:
        done[0] += 1
        on_progress(done[0], len(requests))

    label_calls(requests, cfg, lambda _keys: {}, store, on_answer=tick if on_progress else None, engine=engine)
    failures = 0
    for key, rids in by_key.items():
        values = {lab: partial[key].get(lab) for lab in asked}
        if all(v is not None for v in values.values()):
            stored = {**values, ATTRIBUTES_KEY: partial_attrs[key]} if partial_attrs[key] else values
            cache.put(key, bundle_sha, text_sha(texts[rids[0]]), json.dumps(stored, sort_keys=True))
        failures += sum(v is None for v in values.values()) * len(rids)
        for rid in rids:
            results[rid] = values
            found[rid] = partial_attrs[key]
    frame = pd.DataFrame.from_dict(results, orient="index").reindex(index=list(texts), columns=vocab.asked_ids)
    frame = derive_frame(vocab, frame.astype(float))[vocab.ids]
    stats = {
        "texts": len(texts),
        "extracted": len(by_key),
        "reused": len(texts) - len(todo_ids),
        "failures": failures,
        "failure_causes": causes,
        "attribute_parse_failures": attribute_failures[0],
    }
    rows = [
        (rid, lab, name, value)
        for rid in texts
        for lab, values in found.get(rid, {}).items()
        for name, value in values.items()
    ]
    return frame, pd.DataFrame(rows, columns=["report_id", "label", "attribute", "value"]), stats


def nan_to_none(frame: pd.DataFrame) -> pd.DataFrame:
    """Integers where known, None where not (for CSV/JSON output)."""
    return frame.astype(object).where(frame.notna(), None).map(lambda v: v if v is None else int(v))


__all__ = [
    "label_texts",
    "label_texts_with_attributes",
    "label_calls",
    "build_requests",
    "decide",
    "model_config",
    "call_params",
    "CallOutcome",
    "Progress",
    "LabelCounts",
    "MemoryCache",
    "extraction_key",
    "text_sha",
    "engine_for",
    "nan_to_none",
    "np",
]
