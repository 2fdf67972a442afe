"""Runs of the labeller: render every call, reuse cached answers, call the model for the rest,
store each prediction as it arrives (so a killed run resumes), and count everything honestly.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlparse

import pandas as pd


from workbench.core.prompts import PromptSet, call_key, render_joint_call, render_label_call
from workbench.store import queries as q
from workbench.study import StudyError

RULES_PREFIX = "workbench/"
MODEL_FIELDS = ("model", "api_base", "api_key_env", "endpoints", "temperature", "seed", "max_tokens", "timeout_s",
                "max_retries", "backoff_base_s", "backoff_max_s", "concurrency", "json_mode")


@dataclass
class RunSummary:
    """Counts of one run (or one resumption of it)."""

    run_id: int
    calls_total: int = 0
    calls_made: int = 0
    calls_reused: int = 0
    already_done: int = 0
    failures: int = 0
    status: str = "running"
    seconds: float = 0.0
    failure_kinds: dict = field(default_factory=dict)

    def message(self) -> str:
        """One line for a person."""
        return (f"run {self.run_id} {self.status}: {self.calls_total} calls needed, {self.calls_made} made, "
                f"{self.calls_reused} answers reused from the cache, {self.already_done} already done, "
                f"{self.failures} failures in {self.seconds:.1f} s"
                + (f" ({', '.join(f'{k}: {v}' for k, v in self.failure_kinds.items())})" if self.failure_kinds else ""))


@dataclass
class Progress:
    """Progress of a run for a bar: done of total, with counts so far."""

    done: int
    total: int
    made: int
    reused: int
    failures: int


def model_config(settings: dict):
    """A ModelConfig from the study's labeller settings (unknown keys refused)."""
    from workbench.llm import ModelConfig

    unknown = sorted(set(settings) - set(MODEL_FIELDS))
    if unknown:
        raise StudyError(f"labeller settings: unknown key {unknown[0]!r} (allowed: {', '.join(MODEL_FIELDS)})")
    values = {k: v for k, v in settings.items() if v is not None}
    if "endpoints" in values:
        values["endpoints"] = tuple(values["endpoints"])
    return ModelConfig(**values)


# where litellm sends a provider's calls when no api_base is given (what an admin allows)
PROVIDER_DEFAULTS = {
    "ollama": "http://localhost:11434", "ollama_chat": "http://localhost:11434",
    "openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com", "mistral": "https://api.mistral.ai",
    "deepseek": "https://api.deepseek.com", "groq": "https://api.groq.com", "dashscope": "https://dashscope.aliyuncs.com",
}


def model_endpoints(settings: dict) -> list[str]:
    """The URLs report text would be sent to ([] for the offline labeller or a provider's own API)."""
    model = settings.get("model", "")
    if model.startswith(RULES_PREFIX):
        return []
    bases = [b for b in [settings.get("api_base"), *(settings.get("endpoints") or [])] if b]
    if not bases:
        provider = model.split("/", 1)[0] if "/" in model else "openai"
        if provider in PROVIDER_DEFAULTS:
            return [PROVIDER_DEFAULTS[provider]]
    return bases


def is_local_model(settings: dict) -> bool:
    """True when report text stays on this machine (offline labeller or a loopback server)."""
    if settings.get("model", "").startswith(RULES_PREFIX):
        return True
    bases = model_endpoints(settings)
    return bool(bases) and all((urlparse(b).hostname or "") in ("127.0.0.1", "localhost", "::1") for b in bases)


def endpoint_label(settings: dict) -> str:
    """Where report text is sent, as recorded on the run and shown in the app."""
    model = settings.get("model", "")
    if model.startswith(RULES_PREFIX):
        return model
    bases = model_endpoints(settings)
    if bases:
        return ", ".join(bases)
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return f"{provider} (provider default endpoint)"


def endpoint_allowed(allowed: list[str], settings: dict) -> bool:
    """Governance: every endpoint of the model must match an allowed prefix."""
    model = settings.get("model", "")
    if model.startswith(RULES_PREFIX):
        return any(model.startswith(a) or a == model for a in allowed)
    bases = model_endpoints(settings) or [endpoint_label(settings)]
    return all(any(_url_matches(a, b) for a in allowed) for b in bases)


def _url_matches(allowed: str, url: str) -> bool:
    """Does an endpoint URL fall under an allowed entry? Compared by parts, not as text, so
    http://127.0.0.1.example.com or http://127.0.0.1:80@evil.com do not pass for http://127.0.0.1."""
    if "://" not in allowed:
        return url.startswith(allowed)
    a, u = urlparse(allowed), urlparse(url)
    if u.username or u.password or a.scheme != u.scheme or (a.hostname or "") != (u.hostname or ""):
        return False
    if a.port is not None and a.port != u.port:
        return False
    return (u.path or "/").startswith(a.path or "/")


class RunsService:
    """Starting, resuming and retrying runs; the call cache."""

    # ------------------------------------------------------------ settings

    def labeller_settings(self, model: str | None = None, **overrides) -> dict:
        """The study's labeller settings, with a model chosen for this run."""
        settings = dict(self.config.labeller)
        if model and model != settings.get("model"):
            settings = {k: v for k, v in settings.items() if k in ("concurrency", "temperature", "seed", "max_tokens", "timeout_s", "max_retries")}
            settings["model"] = model
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return settings

    # ------------------------------------------------------------ run lifecycle

    def start_run(self, cohort: str, prompt_ref: str | None = None, model: str | None = None,
                  labels: list[str] | None = None, on_progress: Callable[[Progress], None] | None = None,
                  cancel: threading.Event | None = None, mode: str | None = None, **overrides) -> RunSummary:
        """Label a cohort with a prompt version and a model; returns the run's counts."""
        self.require("run")
        settings = self.labeller_settings(model, **overrides)
        self._check_endpoint(settings)
        commit = self.prompt_commit(prompt_ref)
        ps = self.prompt_set(commit)
        labels = self._check_labels(labels)
        cid = self.cohort_id(cohort)
        cfg = model_config(settings)
        with self.session() as s:
            run = q.add_run(
                s, cohort_id=cid, prompt_commit=commit, prompt_ref=prompt_ref or "HEAD", model=cfg.model,
                params_json=json.dumps(self._run_params(cfg, settings), sort_keys=True), mode=mode or ps.task.mode,
                labels_json=json.dumps(labels), sections=",".join(self.config.sections),
                endpoint=endpoint_label(settings), created_by=self.actor.user,
            )
            q.add_audit(s, self.actor.user, "start", "run", str(run.id), None,
                        {"model": cfg.model, "endpoint": run.endpoint, "prompt": commit[:12], "cohort": cohort})
            run_id = run.id
        return self._execute(run_id, on_progress, cancel)

    def resume_run(self, run_id: int, on_progress=None, cancel=None) -> RunSummary:
        """Finish a run that stopped (killed, cancelled, failures): finished calls are not repeated."""
        self.require("run")
        return self._execute(run_id, on_progress, cancel)

    def retry_failed(self, run_id: int, on_progress=None, cancel=None) -> RunSummary:
        """Call again every (report, label) of a run whose answer failed (failures are never cached)."""
        return self.resume_run(run_id, on_progress, cancel)

    def _check_labels(self, labels: list[str] | None) -> list[str]:
        """Resolve label names to ids; only asked labels are labelled (derived ones follow)."""
        if not labels:
            return list(self.vocab.asked_ids)
        out = []
        for key in labels:
            label_id = self.vocab.resolve(key)
            if label_id is None:
                raise StudyError(f"unknown label {key!r}; labels: {', '.join(self.vocab.asked_ids)}")
            if label_id not in self.vocab.asked_ids:
                raise StudyError(f"label {label_id!r} is derived from the others and is not asked")
            out.append(label_id)
        return out

    def _check_endpoint(self, settings: dict) -> None:
        """Refuse to send report text to an endpoint the study does not allow."""
        if not endpoint_allowed(self.config.allowed_endpoints, settings):
            raise StudyError(
                f"report text may not be sent to {endpoint_label(settings)}: it is not in this study's allowed endpoints "
                f"({', '.join(self.config.allowed_endpoints)}). An admin can allow it in Settings or with "
                "`workbench allow-endpoint URL`."
            )

    @staticmethod
    def _run_params(cfg, settings: dict) -> dict:
        """What is recorded on the run: the answer-changing parameters plus concurrency/endpoints."""
        params = dict(cfg.params())
        keep = ("api_base", "api_key_env", "endpoints", "concurrency", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s")
        params.update({k: settings[k] for k in keep if settings.get(k) is not None})
        return params

    # ------------------------------------------------------------ execution

    def _execute(self, run_id: int, on_progress, cancel) -> RunSummary:
        """Do every call a run still needs; store each answer as it arrives."""
        started = time.monotonic()
        with self.session() as s:
            run = q.get_run(s, run_id)
            if run is None:
                raise StudyError(f"no run {run_id}")
            params = json.loads(run.params_json)
            labels = json.loads(run.labels_json)
            reports = q.reports_frame(s, cohort_id=run.cohort_id)
            done = q.done_prediction_keys(s, run_id)
            q.update_run(s, run_id, status="running", finished_at=None)
        settings = self._settings_from_params(params)
        self._check_endpoint(settings)
        cfg = model_config(settings)
        ps = self.prompt_set(run.prompt_commit)
        sections = run.sections.split(",")
        requests = self._build_requests(ps, reports, labels, run.mode, sections, cfg, done)
        summary = RunSummary(run_id, calls_total=len(requests), already_done=len(done))
        total = len(requests)
        with self.session() as s:
            cache = q.cached_calls(s, [r.key for r in requests])
        todo = [r for r in requests if r.key not in cache]
        reused_rows = []
        for r in requests:
            if r.key in cache:
                reused_rows.extend(self._prediction_rows(r, cache[r.key].response, None))
        summary.calls_reused = total - len(todo)
        with self.session() as s:
            q.upsert_predictions(s, run_id, reused_rows)
            q.update_run(s, run_id, calls_total=run.calls_total or (total + len(done)))
            q.add_run_counts(s, run_id, calls_reused=summary.calls_reused)
        progress = Progress(done=summary.calls_reused, total=total, made=0, reused=summary.calls_reused, failures=0)
        if on_progress:
            on_progress(progress)

        # a paid call is stored the moment it returns (kill -9 loses nothing); the offline labeller's
        # answers cost nothing to redo, so they are stored in batches (one transaction per 500)
        batch = 500 if cfg.model.startswith(RULES_PREFIX) else 1
        pending: list = []

        def flush() -> None:
            if not pending:
                return
            rows = [row for _, _, r in pending for row in r]
            cost = sum(res.cost for _, res, _ in pending if res.cost is not None)
            with self.session() as s:
                q.upsert_predictions(s, run_id, rows)
                for req, res, r in pending:
                    if res.text is not None and not any(x["value"] is None for x in r):
                        q.put_cached_call(s, req.key, cfg.model, res.text, res.prompt_tokens, res.completion_tokens, res.cost)
                q.add_run_counts(s, run_id, calls_made=len(pending),
                                 prompt_tokens=sum(res.prompt_tokens or 0 for _, res, _ in pending),
                                 completion_tokens=sum(res.completion_tokens or 0 for _, res, _ in pending))
                if any(res.cost is not None for _, res, _ in pending):
                    q.update_run(s, run_id, cost=(q.get_run(s, run_id).cost or 0.0) + cost)
            pending.clear()

        def on_result(req, res) -> None:
            rows = self._prediction_rows(req, res.text, res)
            pending.append((req, res, rows))
            if len(pending) >= batch:
                flush()
            summary.calls_made += 1
            progress.done += 1
            progress.made += 1
            if any(r["value"] is None for r in rows):
                kind = res.error_kind or next(r["status"] for r in rows if r["value"] is None)
                summary.failure_kinds[kind] = summary.failure_kinds.get(kind, 0) + 1
                progress.failures += 1
            if on_progress:
                on_progress(progress)

        try:
            if todo:
                self._engine(cfg)(todo, cfg, on_result, cancel)
        finally:
            flush()  # also when the engine raised: what was answered is kept
        return self._finish(run_id, labels, len(reports), summary, started, cancel)

    def _finish(self, run_id: int, labels: list[str], n_reports: int, summary: RunSummary, started: float, cancel) -> RunSummary:
        """Recount failures from the stored predictions and set the run's status."""
        with self.session() as s:
            preds = q.predictions_frame(s, run_id)
            failures = int(preds["value"].isna().sum())
            complete = len(preds) == n_reports * len(labels)
            status = "cancelled" if cancel is not None and cancel.is_set() and not complete else (
                "finished" if complete else "incomplete")
            q.update_run(s, run_id, failures=failures, status=status, finished_at=q.now())
        summary.failures = failures
        summary.status = status
        summary.seconds = time.monotonic() - started
        return summary

    @staticmethod
    def _settings_from_params(params: dict) -> dict:
        """Rebuild labeller settings from what a run recorded."""
        settings = {k: v for k, v in params.items() if k in MODEL_FIELDS}
        return settings

    def _engine(self, cfg) -> Callable:
        """The offline labeller or litellm, behind the same complete_all interface."""
        if cfg.model.startswith(RULES_PREFIX):
            from workbench import rules

            return rules.complete_all
        from workbench import llm

        return llm.complete_all_sync

    def _build_requests(self, ps: PromptSet, reports: pd.DataFrame, labels: list[str], mode: str,
                        sections: list[str], cfg, done: set) -> list:
        """Every call the run still needs, with its cache key and what the offline labeller reads."""
        from workbench.llm import CallRequest
        from workbench.core.text import compose_text

        params = dict(cfg.params())
        if cfg.api_base:  # one model name on two servers may be two models: never share their answers
            params["api_base"] = cfg.api_base
        if cfg.model.startswith(RULES_PREFIX):
            from workbench import rules

            params["engine_version"] = getattr(rules, "ENGINE_VERSION", "1")
        names = self.vocab.names()
        cues = ps.task.cue_lists()
        out = []
        for row in reports.itertuples(index=False):
            text = compose_text(row.findings, row.impression, row.text, sections)
            if mode == "joint":
                todo = [lab for lab in labels if (row.report_id, lab) not in done]
                if not todo:
                    continue
                messages = render_joint_call(ps, {lab: names[lab] for lab in todo}, text)
                out.append(CallRequest(call_key(messages, params), messages, {
                    "report_id": row.report_id, "labels": todo, "report": text, "mode": "joint",
                    "prompts": [ps.label(lab) for lab in todo], "cues": cues}))
                continue
            for lab in labels:
                if (row.report_id, lab) in done:
                    continue
                messages = render_label_call(ps, lab, names[lab], text)
                out.append(CallRequest(call_key(messages, params), messages, {
                    "report_id": row.report_id, "labels": [lab], "report": text, "mode": "per_label",
                    "prompts": [ps.label(lab)], "cues": cues}))
        return out

    @staticmethod
    def _prediction_rows(req, text: str | None, res) -> list[dict]:
        """Parse a reply into prediction rows; a failed call is a recorded failure, never a 0."""
        from workbench.core import parsing

        meta = req.meta
        if text is None:
            detail = (res.error if res is not None else "no reply") or "no reply"
            return [{"report_id": meta["report_id"], "label": lab, "value": None, "evidence": "", "evidence_found": None,
                     "status": "call_error", "detail": detail[:2000], "call_key": req.key} for lab in meta["labels"]]
        if meta["mode"] == "joint":
            decisions = parsing.parse_joint_reply(text, meta["labels"], meta["report"])
        else:
            decisions = {meta["labels"][0]: parsing.parse_reply(text, meta["report"])}
        return [{"report_id": meta["report_id"], "label": lab, "value": d.value, "evidence": d.evidence,
                 "evidence_found": d.evidence_found, "status": d.status, "detail": d.detail[:2000], "call_key": req.key}
                for lab, d in decisions.items()]

    # ------------------------------------------------------------ reading runs

    def runs(self, cohort: str | None = None) -> pd.DataFrame:
        """Runs newest first."""
        cid = self.cohort_id(cohort) if cohort else None
        with self.session() as s:
            return q.list_runs(s, cid)

    def run_info(self, run_id: int):
        """One run row."""
        with self.session() as s:
            run = q.get_run(s, run_id)
        if run is None:
            raise StudyError(f"no run {run_id}")
        return run

    def predictions(self, run_id: int) -> pd.DataFrame:
        """A run's predictions (long); a reader sees those of reports they have finished reading."""
        with self.session() as s:
            return self._blind_rows(q.predictions_frame(s, run_id))

    def prediction_matrix(self, run_id: int) -> pd.DataFrame:
        """Reports x labels predicted values (NaN = failure or not labelled), derived labels filled."""
        from workbench.core.vocab import derive_frame

        run = self.run_info(run_id)
        with self.session() as s:
            ids = q.report_ids(s, run.cohort_id)
            preds = q.predictions_frame(s, run_id)
        wide = preds.pivot(index="report_id", columns="label", values="value") if not preds.empty else pd.DataFrame()
        scope = self.blind_scope()  # a reader: only the reports they have finished reading
        ids = ids if scope is None else [i for i in ids if i in scope]
        wide = wide.reindex(index=ids, columns=self.vocab.asked_ids).astype(float)
        return derive_frame(self.vocab, wide)[self.vocab.ids]
