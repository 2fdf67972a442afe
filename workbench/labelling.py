"""Label arbitrary texts with a prompt set (a frozen bundle's, for scoring generated reports).

Runs on a cohort have their own bookkeeping (services/runs.py); this is the light path for
texts that are not study reports, with a pluggable cache so reference reports are extracted
once per bundle and text and every generator is scored against the same reference labels.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable, Protocol

import numpy as np
import pandas as pd

from workbench.core import parsing
from workbench.core.prompts import PromptSet, call_key, render_joint_call, render_label_call
from workbench.core.vocab import Vocabulary, derive_frame


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


def engine_for(model: str) -> Callable:
    """The offline labeller or litellm behind one complete_all interface."""
    if model.startswith("workbench/"):
        from workbench import rules

        return rules.complete_all
    from workbench import llm

    return llm.complete_all_sync


def label_texts(ps: PromptSet, vocab: Vocabulary, texts: dict[str, str], cfg, bundle_sha: str,
                cache: ExtractionCache | None = None, on_progress: Callable[[int, int], None] | None = None) -> tuple[pd.DataFrame, dict]:
    """Reports x labels (derived labels filled) for texts keyed by id; NaN where the labeller failed.

    Returns (labels, stats) with stats: texts, extracted, reused, failures.
    """
    labels, _, stats = label_texts_with_attributes(ps, vocab, texts, cfg, bundle_sha, cache, on_progress)
    return labels, stats


ATTRIBUTES_KEY = "_attributes"  # beside the label values in a cached extraction: {label: {attribute: value}}


def label_texts_with_attributes(ps: PromptSet, vocab: Vocabulary, texts: dict[str, str], cfg, bundle_sha: str,
                                cache: ExtractionCache | None = None,
                                on_progress: Callable[[int, int], None] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """label_texts plus the attributes of positive findings: (labels, attributes long frame with report_id,
    label, attribute, value, stats); stats also counts attribute parse failures."""
    from workbench.llm import CallRequest

    cache = cache or MemoryCache()
    params = dict(cfg.params())
    keys = {rid: extraction_key(bundle_sha, params, t) for rid, t in texts.items()}
    cached = cache.get_many(list(set(keys.values())))
    asked = [lab for lab in vocab.asked_ids if lab in ps.labels]
    names = vocab.names()
    cues = ps.task.cue_lists()
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
    requests = []
    for key, rids in by_key.items():
        text = texts[rids[0]]
        if ps.task.mode == "joint":
            messages = render_joint_call(ps, {lab: names[lab] for lab in asked}, text)
            requests.append(CallRequest(call_key(messages, params), messages, {
                "ext_key": key, "labels": asked, "report": text, "mode": "joint", "prompts": [ps.label(a) for a in asked], "cues": cues,
                "attributes": {a: ps.attributes[a] for a in asked if a in ps.attributes}}))
        else:
            for lab in asked:
                messages = render_label_call(ps, lab, names[lab], text)
                requests.append(CallRequest(call_key(messages, params), messages, {
                    "ext_key": key, "labels": [lab], "report": text, "mode": "per_label", "prompts": [ps.label(lab)], "cues": cues,
                    "attributes": {lab: ps.attributes[lab]} if lab in ps.attributes else {}}))
    partial: dict[str, dict[str, int | None]] = {k: {} for k in by_key}
    partial_attrs: dict[str, dict[str, dict[str, str]]] = {k: {} for k in by_key}
    state = {"done": 0, "attribute_failures": 0}

    causes: dict[str, int] = {}

    def on_result(req, res) -> None:
        meta = req.meta
        if res.text is None:
            decisions = {lab: parsing.Decision(None, "", res.error_kind or "call_error") for lab in meta["labels"]}
        elif meta["mode"] == "joint":
            decisions = parsing.parse_joint_reply(res.text, meta["labels"], meta["report"], meta["attributes"])
        else:
            lab0 = meta["labels"][0]
            decisions = {lab0: parsing.parse_reply(res.text, meta["report"], meta["attributes"].get(lab0, ()))}
        for lab, d in decisions.items():
            partial[meta["ext_key"]][lab] = d.value
            if d.attributes:
                partial_attrs[meta["ext_key"]][lab] = dict(d.attributes)
            if d.attribute_error:  # counted, never guessed; the presence value still counts
                state["attribute_failures"] += len(by_key[meta["ext_key"]])
            if d.value is None:  # counted by cause, per (text, label): a failure is never a silent 0
                causes[d.status] = causes.get(d.status, 0) + len(by_key[meta["ext_key"]])
        state["done"] += 1
        if on_progress:
            on_progress(state["done"], len(requests))

    if requests:
        engine_for(cfg.model)(requests, cfg, on_result, None)
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
    stats = {"texts": len(texts), "extracted": len(by_key), "reused": len(texts) - len(todo_ids), "failures": failures,
             "failure_causes": causes, "attribute_parse_failures": state["attribute_failures"]}
    rows = [(rid, lab, name, value) for rid in texts for lab, values in found.get(rid, {}).items()
            for name, value in values.items()]
    return frame, pd.DataFrame(rows, columns=["report_id", "label", "attribute", "value"]), stats


def nan_to_none(frame: pd.DataFrame) -> pd.DataFrame:
    """Integers where known, None where not (for CSV/JSON output)."""
    return frame.astype(object).where(frame.notna(), None).map(lambda v: v if v is None else int(v))


__all__ = ["label_texts", "label_texts_with_attributes", "MemoryCache", "extraction_key", "text_sha", "engine_for", "nan_to_none", "np"]
