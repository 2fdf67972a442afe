"""Provider batch jobs: the calls of a labelling job sent as one file through the provider's batch API
(OpenAI's /v1/files and /v1/batches, which vLLM and other OpenAI-compatible servers copy, and Azure
OpenAI's /openai/files and /openai/batches; batch prices are often half the normal ones), driven
through litellm.

BatchEngine has the engine interface of labelling.label_calls (requests, cfg, on_result, cancel): it
writes the JSONL of the same request bodies a chat call sends (custom_id = the call key), uploads it,
creates the batch, records it in a journal before the first poll (a restart polls the same batch
instead of uploading again), polls with the batch's status and request counts, then hands every
output line to on_result as a CallResult, so answers, the call cache, parse failures and failure
kinds are exactly those of a normal run. Every request goes through llm.pinned: the batch endpoint is
the model endpoint, under the same guard. Azure (litellm's custom_llm_provider "azure") differs only
in what litellm builds from the same arguments (the resource endpoint as api_base, its api-version
query, the api-key header) and in a line's url, "/chat/completions", whose model is the deployment. This is the only module besides llm.py that calls litellm's
batch and file functions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime
from io import BytesIO

from workbench.errors import UserError, WorkbenchError
from workbench.labeller import llm
from workbench.labeller.endpoints import is_offline

POLL_S = 30.0  # seconds between polls (WORKBENCH_BATCH_POLL_S overrides: tests poll fast)
WINDOW_S = 24 * 3600.0  # the completion window every batch is created with ("24h"): polling is worth it until then
POLL_BACKOFF_MAX_S = 600.0  # the longest wait between polls that failed (a provider down for hours is polled slowly)
ENDPOINT = "/v1/chat/completions"
# the url of a line (and the batch's endpoint) where it is not ENDPOINT: Azure's batch lines name the deployment's
# chat path without the version prefix
ENDPOINTS = {"azure": "/chat/completions"}
FAILED = ("failed", "expired", "cancelled", "cancelling")  # a batch that ends like this gives no answers
# litellm's batch surfaces the workbench drives: OpenAI-compatible (model strings openai/..., hosted_vllm/...) and
# Azure OpenAI (azure/DEPLOYMENT)
PROVIDERS = ("openai", "hosted_vllm", "azure")


class BatchFailed(WorkbenchError):
    """A batch ended failed, expired or cancelled: nothing of it was stored."""

    exit_code = 3  # the run stopped with its calls unanswered, as a run with failures does


class BatchUnavailable(WorkbenchError):
    """The provider's batch API could not be used (upload, create, poll or download failed)."""

    exit_code = 3

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # the failure's error_kind (timeout, connection, server ...): a poll retries the passing ones


class MemoryJournal:
    """Batch jobs kept in this process only (scoring without a study: a restart uploads again)."""

    def __init__(self) -> None:
        self.jobs: list[dict] = []

    def pending(self, scope: str) -> dict | None:
        """The newest job of scope still to poll or collect."""
        return next(
            (j for j in reversed(self.jobs) if j["scope"] == scope and j["status"] not in (*FAILED, "collected")), None
        )

    def record(self, job: dict) -> None:
        """Keep a new job."""
        self.jobs.append(dict(job))

    def update(self, batch_id: str, **fields) -> None:
        """Change a job's status or file ids."""
        for job in self.jobs:
            if job["batch_id"] == batch_id:
                job.update(fields)


def check_batchable(cfg) -> None:
    """Refuse (UserError, nothing sent) a labeller that has no batch API to use."""
    if is_offline(cfg.model):
        raise UserError(
            f"--batch: {cfg.model} is the offline labeller; it answers at once on this machine and has no "
            "batch API: run without --batch"
        )
    provider = cfg.model.split("/", 1)[0]
    if provider not in PROVIDERS:
        raise UserError(
            f"--batch needs an OpenAI-compatible batch endpoint (model openai/NAME with --api-base, or "
            f"hosted_vllm/NAME) or Azure OpenAI's (azure/DEPLOYMENT); {cfg.model} is served by "
            f"{provider!r}: run without --batch"
        )
    if len(cfg.endpoints) > 1:
        raise UserError(
            "--batch sends one file to one endpoint; this labeller is a pool of "
            f"{len(cfg.endpoints)}: give a single api_base"
        )


def keys_sha(keys) -> str:
    """sha256 of a set of call keys (the scope of a job that belongs to no run)."""
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()


def poll_seconds() -> float:
    """Seconds between polls."""
    try:
        return max(0.01, float(os.environ.get("WORKBENCH_BATCH_POLL_S", POLL_S)))
    except ValueError:
        return POLL_S


def status_line(batch) -> str:
    """One progress line: the batch id, its status and request counts."""
    counts = getattr(batch, "request_counts", None)
    done = f", {counts.completed or 0:,} of {counts.total or 0:,} done, {counts.failed or 0:,} failed" if counts else ""
    return f"batch {batch.id}: {batch.status}{done}"


class BatchEngine:
    """label_calls' engine that sends the calls as a provider batch (see the module docstring).

    journal: where jobs are recorded (pending/record/update); run_id: the run the job belongs to (its
    scope), else the call keys are; on_status: sees a line each time the batch's status or counts change."""

    store_every = 500  # answers stored per transaction: a batch's answers all arrive at once

    def __init__(
        self,
        journal,
        run_id: int | None = None,
        on_status: Callable[[str], None] | None = None,
        poll_s: float | None = None,
    ) -> None:
        self.journal, self.run_id, self.on_status = journal, run_id, on_status
        self.poll_s = poll_s if poll_s is not None else poll_seconds()
        self.uploads = 0  # files uploaded by this engine (a resumed job uploads none)

    def scope(self, keys) -> str:
        """The journal scope: the run, else the set of call keys."""
        return f"run:{self.run_id}" if self.run_id is not None else f"calls:{keys_sha(keys)}"

    def __call__(
        self,
        requests: list,
        cfg,
        on_result: Callable,
        cancel: threading.Event | None = None,
        flush: Callable[[], None] | None = None,
    ) -> None:
        """Answer requests through batches: a pending job of this scope first, then one new job for the rest.
        flush: stores every answer handed so far (a job is recorded collected only after that: a kill before
        it leaves the job to collect again, never to pay again)."""
        check_batchable(cfg)
        # reports that share a text share a call key: one line per key is sent (a batch's custom_ids must be
        # unique), and its answer goes to every (report, label) pair that asked it
        asking: dict[str, list] = {}
        for r in requests:
            asking.setdefault(r.key, []).append(r)
        todo = {key: reqs[0] for key, reqs in asking.items()}
        on_result = _to_every_pair(asking, on_result)
        scope = self.scope(todo)
        try:
            self._answer(todo, cfg, on_result, cancel, flush, scope)
        except BatchUnavailable as exc:
            raise BatchUnavailable(f"{exc}; {self.resume_hint(scope)}", exc.kind) from exc
        except BatchFailed as exc:
            raise BatchFailed(f"{exc}; {self.resume_hint(scope)}") from exc

    def _answer(self, todo: dict, cfg, on_result: Callable, cancel, flush, scope: str) -> None:
        """The jobs of __call__: a pending one of the scope first, then one new job for the rest."""
        with llm.pinned(cfg):
            litellm = llm.litellm_for(cfg)
            while todo:
                job = self.journal.pending(scope)
                fresh = job is None
                if fresh:
                    job = self._submit(litellm, cfg, list(todo.values()), scope)
                batch = self._wait(litellm, cfg, job, cancel)
                if batch is None:  # cancelled: the job stays in the journal for a resume
                    return
                self._collect(litellm, cfg, job, batch, todo, on_result, fresh)
                if flush is not None:
                    flush()
                self.journal.update(job["batch_id"], status="collected")

    def resume_hint(self, scope: str) -> str:
        """The exact command that picks up where a stopped batch left off."""
        pending = self.journal.pending(scope)
        if self.run_id is None:
            return "run the same command again" + (f" (it polls batch {pending['batch_id']})" if pending else "")
        if pending:
            return (
                f"resume with `workbench run --resume {self.run_id}` (it polls batch {pending['batch_id']}; "
                "nothing is uploaded again)"
            )
        return (
            f"resume with `workbench run --resume {self.run_id} --batch` (a new batch for the calls still "
            "unanswered; without --batch they go as normal calls)"
        )

    def _submit(self, litellm, cfg, requests: list, scope: str) -> dict:
        """Upload the JSONL, create the batch, record it; the job's record."""
        endpoint = endpoint_of(cfg)
        lines = [
            json.dumps(
                {
                    "custom_id": r.key,
                    "method": "POST",
                    "url": endpoint,
                    "body": llm.request_body(cfg, r.messages, r.response_format),
                }
            )
            for r in requests
        ]
        data = ("\n".join(lines) + "\n").encode()
        kwargs = _kwargs(cfg)
        file = self._ask(
            "upload the batch file",
            cfg,
            lambda: litellm.create_file(file=("workbench-batch.jsonl", BytesIO(data)), purpose="batch", **kwargs),
        )
        self.uploads += 1
        batch = self._ask(
            "create the batch",
            cfg,
            lambda: litellm.create_batch(
                completion_window="24h",
                endpoint=endpoint,
                input_file_id=file.id,
                metadata={"workbench_scope": scope[:64]},
                **kwargs,
            ),
        )
        job = {
            "scope": scope,
            "run_id": self.run_id,
            "batch_id": batch.id,
            "input_file_id": file.id,
            "status": batch.status or "validating",
            "model": cfg.model,
            "api_base": kwargs["api_base"],
            "requests": len(requests),
            "keys_sha": keys_sha(r.key for r in requests),
        }
        self.journal.record(job)
        return job

    def _wait(self, litellm, cfg, job: dict, cancel: threading.Event | None):
        """Poll until the batch completes (the batch object), None when cancelled; BatchFailed when it ended otherwise."""
        kwargs = _kwargs(cfg)
        shown = None
        window_end = _window_end(job)
        failed_polls = 0
        while True:
            try:
                batch = self._ask(
                    f"poll batch {job['batch_id']}",
                    cfg,
                    lambda: litellm.retrieve_batch(batch_id=job["batch_id"], **kwargs),
                )
            except BatchUnavailable as exc:
                # a poll that timed out or found the provider busy says nothing about the batch: ask again later,
                # waiting longer each time, until the batch's own window has passed
                failed_polls += 1
                wait = min(POLL_BACKOFF_MAX_S, self.poll_s * 2**failed_polls)
                if exc.kind not in llm.RETRYABLE or time.time() + wait > window_end:
                    raise
                if self.on_status:
                    self.on_status(f"{exc} (poll {failed_polls} failed; polling again in {wait:.0f} s)")
                if _sleep_unless_cancelled(wait, cancel):
                    return None
                continue
            failed_polls = 0
            window_end = _expires_at(batch, window_end)
            line = status_line(batch)
            if line != shown:
                shown = line
                if batch.status != job["status"]:
                    self.journal.update(job["batch_id"], status=batch.status)
                    job["status"] = batch.status
                if self.on_status:
                    self.on_status(line)
            if batch.status == "completed":
                return batch
            if batch.status in FAILED:
                self.journal.update(job["batch_id"], status=batch.status)
                raise BatchFailed(f"batch {batch.id} ended {batch.status}{_errors(batch)}: no answer of it was stored")
            if _sleep_unless_cancelled(self.poll_s, cancel):
                return None

    def _collect(self, litellm, cfg, job: dict, batch, todo: dict, on_result: Callable, fresh: bool) -> None:
        """Hand every output and error line of a completed batch whose key is in todo to on_result; for a
        job this engine sent, a key in neither file is a failure too."""
        kwargs = _kwargs(cfg)
        self.journal.update(job["batch_id"], output_file_id=batch.output_file_id, error_file_id=batch.error_file_id)
        prices = llm.batch_token_prices(cfg.model) or llm.token_prices(cfg.model)
        sent = set(todo) if fresh else set()
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            content = self._ask(
                f"download {file_id} of batch {batch.id}",
                cfg,
                lambda f=file_id: litellm.file_content(file_id=f, **kwargs),
            )
            for raw in content.content.decode("utf-8").splitlines():
                if not raw.strip():
                    continue
                line = json.loads(raw)
                key = line.get("custom_id")
                if key in todo:
                    on_result(todo.pop(key), _result(key, line, batch.id, prices))
        for key in sorted(sent & set(todo)):
            on_result(
                todo.pop(key),
                llm.CallResult(key, None, f"no reply for this call in batch {batch.id}'s output", "other"),
            )

    @staticmethod
    def _ask(what: str, cfg, call: Callable):
        """One request to the batch API; a failure as BatchUnavailable (a guard's refusal as itself)."""
        try:
            return call()
        except WorkbenchError:
            raise
        except Exception as exc:  # litellm's errors: classified the way a chat call's are
            kind = llm.classify(exc)
            message = llm.describe(kind, exc, 1, cfg)
            if kind == "refused":
                raise llm.EndpointRefused(message) from exc
            raise BatchUnavailable(f"--batch: could not {what} at {cfg.endpoint_label()}: {message}", kind) from exc


def _to_every_pair(asking: dict[str, list], on_result: Callable) -> Callable:
    """on_result for a line's answer, called for every request of its key; tokens and cost are counted once."""

    def hand(req, res) -> None:
        for n, each in enumerate(asking.get(req.key, [req])):
            on_result(
                each, res if n == 0 else dataclasses.replace(res, prompt_tokens=0, completion_tokens=0, cost=None)
            )

    return hand


def _window_end(job: dict) -> float:
    """Epoch seconds when the job's completion window ends (from when it was recorded; now for a job without that)."""
    created = job.get("created_at")
    try:
        start = datetime.fromisoformat(created).timestamp() if created else time.time()
    except ValueError:
        start = time.time()
    return start + WINDOW_S


def _expires_at(batch, fallback: float) -> float:
    """The provider's own end of the batch's window when it says one."""
    expires = getattr(batch, "expires_at", None)
    return float(expires) if isinstance(expires, (int, float)) and expires > 0 else fallback


def _sleep_unless_cancelled(seconds: float, cancel) -> bool:
    """Wait between polls, looking at cancel (an Event or AnyEvent) ten times a second; True when cancelled."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if cancel is not None and cancel.is_set():
            return True
        time.sleep(min(left, 0.1))
    return cancel is not None and cancel.is_set()


def _provider(cfg) -> str:
    """litellm's provider name of the model string."""
    return cfg.model.split("/", 1)[0]


def endpoint_of(cfg) -> str:
    """The url of every line and the batch's endpoint: /v1/chat/completions, Azure's /chat/completions."""
    return ENDPOINTS.get(_provider(cfg), ENDPOINT)


def _kwargs(cfg) -> dict:
    """The provider and connection arguments of every batch API request."""
    return {"custom_llm_provider": _provider(cfg), **llm.connection_kwargs(cfg)}


def _errors(batch) -> str:
    """The provider's error messages of a failed batch, if it gave any."""
    errors = getattr(batch, "errors", None)
    data = getattr(errors, "data", None) or (errors.get("data") if isinstance(errors, dict) else None) or []
    messages = [getattr(e, "message", None) or (e.get("message") if isinstance(e, dict) else None) for e in data]
    messages = [m for m in messages if m]
    return f" ({'; '.join(messages)[:300]})" if messages else ""


def _result(key: str, line: dict, batch_id: str, prices):
    """The CallResult of one output or error line."""
    response = line.get("response") or {}
    status = response.get("status_code")
    body = response.get("body") or {}
    if status == 200 and not line.get("error"):
        usage = body.get("usage") or {}
        cost = (
            None
            if prices is None
            else (usage.get("prompt_tokens", 0) * prices[0] + usage.get("completion_tokens", 0) * prices[1])
        )
        return llm.result_of_reply(key, body, cost)
    error = line.get("error") or body.get("error") or {}
    message = (error.get("message") if isinstance(error, dict) else str(error)) or "no message"
    kind = llm.error_kind_of_status(status) if status else "other"
    return llm.CallResult(key, None, f"HTTP {status or '?'} in batch {batch_id}: {message}"[:2000], kind)
