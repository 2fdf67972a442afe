"""Runs of the labeller: render every call, reuse cached answers, call the model for the rest,
store each prediction as it arrives (so a killed run resumes), and count everything honestly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from workbench.core.text import compose_text
from workbench.core.vocab import derive_frame
from workbench.errors import StorageFault, WorkbenchError
from workbench.labeller import batch, endpoints, labelling
from workbench.labeller.endpoints import RULES_PREFIX, EndpointError, is_offline  # noqa: F401 (re-exported)
from workbench.labeller.labelling import MODEL_FIELDS, Progress, model_config  # noqa: F401 (re-exported)
from workbench.labeller.llm import (
    UNUSABLE,
    UnknownModel,
    check_model_name,
    fitted_to_server,
    resolve_endpoints,
)
from workbench.runtime import AnyEvent, fewer_collections
from workbench.services import memo
from workbench.services.base import Service, StudyContext
from workbench.services.model_path import NeedsConfirmation
from workbench.store import db
from workbench.store import queries as q
from workbench.store.tables import Run
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.prompting import PromptsService
    from workbench.services.study import StudyService


INTERRUPTED = "interrupted"  # stopped by Ctrl-C or SIGTERM: its answers are kept, it is not a result until resumed


class RunInterrupted(WorkbenchError):
    """A run stopped by Ctrl-C or SIGTERM: marked interrupted, resumable without repeating answered calls."""

    def __init__(self, run_id: int, stored: int, total: int | None, failures: int = 0) -> None:
        self.run_id, self.stored, self.total, self.failures = run_id, stored, total, failures
        of = f" of {total:,}" if total else ""
        failed = f", {failures:,} of them failed (`workbench run --retry-failed {run_id}` after it)" if failures else ""
        super().__init__(
            f"run {run_id} interrupted after {stored:,}{of} answers (kept){failed}: resume with "
            f"`workbench run --resume {run_id}`"
        )


class RunStorageFault(StorageFault):
    """The database or disk failed during a run: the answers stored before it are kept, and resume finishes it."""

    def __init__(self, run_id: int, exc: BaseException, marked: bool, stored: int | None) -> None:
        self.run_id = run_id
        status = "" if marked else " (its status says running until then)"
        kept = {None: "the answers stored before that are kept", 0: "no answer had been stored yet"}.get(
            stored, f"the {stored:,} answers stored before that are kept"
        )
        super().__init__(
            f"run {run_id} stopped: {_storage_cause(exc)}; the run is kept and {kept} (those not stored are asked "
            f"again); when the database or disk is back, `workbench run --resume {run_id}` finishes it without "
            f"repeating what was stored{status}"
        )


def _storage_cause(exc: BaseException) -> str:
    """What failed, in a few words, never the SQL or its parameters (they hold report text)."""
    orig = getattr(exc, "orig", None) or exc
    low = str(orig).lower()
    if getattr(orig, "errno", None) == errno.ENOSPC or "disk is full" in low or "no space" in low:
        return "the disk is full"
    if "disk i/o error" in low:
        return "the disk refused a write (full, or failing)"
    if "read-only" in low or "readonly" in low:
        return "the database became read-only"
    if any(w in low for w in ("connection", "server closed", "terminating", "could not connect", "shutdown")):
        return "the database server could not be reached"
    return f"the database or disk refused a write ({type(orig).__name__})"


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
    failure_examples: dict = field(default_factory=dict)
    stopped_reason: str = ""
    notes: list = field(default_factory=list)  # what the run chose on the way (labelling.LabelCounts.notes)
    # address:port the calls connected to -> calls (each call's own is in callfact.peer)
    peers: dict = field(default_factory=dict)

    def causes(self) -> list[str]:
        """One line per distinct cause of this execution's failures: count and one example message."""
        return [
            f"{kind}: {n} call(s), e.g. {self.failure_examples.get(kind, '')}"
            + (f" (hint: {labelling.HINTS[kind].format(run=self.run_id)})" if kind in labelling.HINTS else "")
            for kind, n in sorted(self.failure_kinds.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    def message(self) -> str:
        """One line for a person."""
        return (
            f"run {self.run_id} {self.status}: {self.calls_total} calls needed, {self.calls_made} made, "
            f"{self.calls_reused} answers reused from the cache, {self.already_done} already done, "
            f"{self.failures} failures in {self.seconds:.1f} s"
            + (f" ({', '.join(f'{k}: {v}' for k, v in self.failure_kinds.items())})" if self.failure_kinds else "")
            + (f"; connected to {', '.join(sorted(self.peers))}" if self.peers else "")
        )


class RunWriter:
    """A run's database writes in one background thread, in order, so the database stores one batch
    while the run parses or labels the next (two cores: about a second saved on 43,000 answers).

    The queue holds at most two batches (memory stays flat); the first error stops later writes and
    is raised to the run at the next submit or at close. Paid answers are not written here: the
    engine stores each one in its own thread the moment it returns."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="run-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        """Queue one write (a function doing one transaction); raises an earlier write's error."""
        self._raise()
        self._queue.put(job)

    def close(self, raise_error: bool = True) -> None:
        """Wait until every queued write is done; raise the first error unless told not to."""
        self._queue.put(None)
        self._thread.join()
        if raise_error:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        while (job := self._queue.get()) is not None:
            if self._error is None:
                try:
                    job()
                except BaseException as exc:  # raised in the run's thread, not lost in this one
                    self._error = exc


def attribute_rows(rows: list[dict]) -> list[dict]:
    """The attribute rows of parsed prediction rows: one per value, or one attribute parse failure."""
    out = []
    for r in rows:
        if r.get("attribute_error"):
            out.append(
                {
                    "report_id": r["report_id"],
                    "label": r["label"],
                    "attribute": "",
                    "value": None,
                    "status": "attribute_parse_error",
                    "detail": r["attribute_error"][:2000],
                }
            )
        for name, value in r.get("attributes", ()):
            out.append(
                {
                    "report_id": r["report_id"],
                    "label": r["label"],
                    "attribute": name,
                    "value": value,
                    "status": "ok",
                    "detail": "",
                }
            )
    return out


def _answer_params(params: dict) -> dict:
    """A run's recorded parameters without those that cannot change an answer (speed, patience)."""
    return {
        k: v
        for k, v in params.items()
        if k not in ("concurrency", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s")
    }


def _speed(cfg) -> dict:
    """The recorded run parameters that change how fast a call is answered: an estimate uses calls that share them."""
    params = cfg.params()
    return {
        "max_tokens": params["max_tokens"],
        "json_mode": params["json_mode"],
        "response_schema": params.get("response_schema"),
        "api_base": cfg.api_base,
    }


def prediction_rows(answers: list) -> list[dict]:
    """Prediction rows of answers (a failed call is a recorded failure, never a 0)."""
    return [
        {"report_id": a.req.meta["report_id"], "label": lab, **answer.row(), "call_key": a.req.key}
        for a in answers
        for lab, answer in a.decisions.items()
    ]


def cache_entries(cfg, answers: list) -> list:
    """Call-cache rows of the new answers worth keeping (failures are never cached)."""
    return [
        q.CachedCall(
            a.req.key, cfg.model, a.res.text, a.res.prompt_tokens or 0, a.res.completion_tokens or 0, a.res.cost
        )
        for a in answers
        if labelling.cacheable(a)
    ]


def _resolved(settings: dict):
    """The endpoints of a model's settings, resolved the way litellm will (environment included)."""
    return resolve_endpoints(settings.get("model", ""), settings.get("api_base"), settings.get("endpoints") or ())


def model_endpoints(settings: dict) -> list[str]:
    """The URLs report text would be sent to ([] for the offline labeller or an unresolvable provider)."""
    try:
        return [e.url for e in _resolved(settings)]
    except endpoints.EndpointError:
        return []


def is_local_model(settings: dict) -> bool:
    """True when report text stays on this machine (offline labeller or a loopback server)."""
    if is_offline(settings.get("model", "")):
        return True
    return endpoints.all_local(model_endpoints(settings))


def endpoint_label(settings: dict) -> str:
    """Where report text is sent, as recorded on the run and shown in the app (with its origin
    when it comes from a provider's environment variable or default)."""
    model = settings.get("model", "")
    if is_offline(model):
        return model
    try:
        return ", ".join(e.label() for e in _resolved(settings))
    except endpoints.EndpointError:
        provider = model.split("/", 1)[0] if "/" in model else "unknown"
        return f"{provider} (endpoint unknown: give api_base)"


def endpoint_allowed(allowed: list[str], settings: dict) -> bool:
    """Governance: every endpoint the model will use must match an allowed entry."""
    model = settings.get("model", "")
    if is_offline(model):
        return any(model.startswith(a) or a == model for a in allowed)
    return endpoints.may_send(allowed, model_endpoints(settings))


class StudyBatchJournal:
    """Batch jobs recorded in the study database (the batchjob table): a restart finds them."""

    def __init__(self, wb) -> None:
        self.wb = wb

    def pending(self, scope: str) -> dict | None:
        """The newest job of scope still to poll or collect."""
        with self.wb.session() as s:
            return q.pending_batch_job(s, scope)

    def record(self, job: dict) -> None:
        """Record a new job (committed before it is polled)."""
        with self.wb.session(write=True) as s:
            q.add_batch_job(s, **job)

    def update(self, batch_id: str, **fields) -> None:
        """Change a job's status or file ids."""
        with self.wb.session(write=True) as s:
            q.update_batch_job(s, batch_id, **fields)


class RunLease:
    """The one executor of a run: a lease on the run row, taken and renewed by conditional UPDATEs.

    A second executor (another process, thread or machine) is refused while the lease is live;
    a heartbeat renews it every ttl/3, so it only expires when its holder stops (killed, hung,
    machine gone); then anyone may take the run over. A holder on this machine whose process is
    gone is taken over at once (the kill -9 case). Clock: the database's (q.db_epoch), never an
    executor's own: a machine whose clock runs ahead must not see a live lease as expired.
    """

    def __init__(self, wb, run_id: int, ttl_s: float) -> None:
        self.wb, self.run_id, self.ttl_s = wb, run_id, ttl_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lost = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self) -> None:
        """Become the executor, or raise StudyError naming the one there is."""
        with self.wb.session() as s:
            now = q.db_epoch(s)
            if q.take_run_lease(s, self.run_id, self.holder, now + self.ttl_s, now):
                return
            run = q.get_run(s, self.run_id)
            holder, until = (run.lease_holder, run.lease_expires_at) if run is not None else (None, None)
            if (
                holder
                and _holder_gone(holder)
                and q.take_run_lease(s, self.run_id, self.holder, now + self.ttl_s, now, dead_holder=holder)
            ):
                return
        when = time.strftime("%H:%M:%S UTC", time.gmtime(until)) if until else "soon"
        raise StudyError(
            f"run {self.run_id} is already being executed by {holder} (its lease is renewed while it works and runs "
            f"until {when}): wait for it to finish; if that process is gone, resume after its lease expires"
        )

    def keep(self, stop: threading.Event, cancel: threading.Event | None) -> None:
        """Renew in the background; set stop when the caller cancels or the lease is lost."""
        interval = max(self.ttl_s / 3, 0.05)

        def beat() -> None:
            due = time.monotonic() + interval
            while not self._done.wait(0.05):
                if cancel is not None and cancel.is_set():
                    stop.set()
                if time.monotonic() < due:
                    continue
                due = time.monotonic() + interval
                try:
                    with self.wb.session() as s:
                        held = q.renew_run_lease(s, self.run_id, self.holder, q.db_epoch(s) + self.ttl_s)
                except Exception:  # a busy database for a moment: try again at the next beat
                    continue
                if not held:
                    self.lost = True
                    stop.set()
                    return

        self._thread = threading.Thread(target=beat, name=f"run-{self.run_id}-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and give the run up (if still ours)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        with self.wb.session() as s:
            q.release_run_lease(s, self.run_id, self.holder)


def _holder_gone(holder: str) -> bool:
    """True when a lease holder ran on this machine and its process no longer exists."""
    host, _, rest = holder.partition(":")
    pid = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _executor_gone(holder: str | None, expires_at: float | None, now: float) -> bool:
    """A `running` run's executor is gone: on this machine, its process has ended (a slow but live one keeps
    its run, whatever the load did to its renewals); elsewhere, it stopped renewing its lease."""
    if holder is None or expires_at is None:
        return True  # a run that starts holds its lease from its first moment: this row's executor never did
    if holder.partition(":")[0] == socket.gethostname():
        return _holder_gone(holder)
    return expires_at < now


class RunsService(Service):
    """Starting, resuming and retrying runs; the call cache."""

    lease_ttl_s = 60.0  # a run's executor renews its lease every third of this

    def __init__(self, ctx: StudyContext, study: StudyService, prompts: PromptsService) -> None:
        super().__init__(ctx)
        self.study = study
        self.prompts = prompts

    # ------------------------------------------------------------ settings

    def labeller_settings(self, model: str | None = None, **overrides) -> dict:
        """The study's labeller settings, with a model chosen for this run."""
        settings = dict(self.config.labeller)
        if model and model != settings.get("model"):
            settings = {
                k: v
                for k, v in settings.items()
                if k
                in (
                    "concurrency",
                    "temperature",
                    "seed",
                    "max_tokens",
                    "timeout_s",
                    "max_retries",
                    "workers",
                    "confirm_above",
                )
            }
            settings["model"] = model
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return settings

    # ------------------------------------------------------------ run lifecycle

    def start_run(
        self,
        cohort: str,
        prompt_ref: str | None = None,
        model: str | None = None,
        labels: list[str] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        cancel: threading.Event | None = None,
        mode: str | None = None,
        confirmed: bool = False,
        batch: bool = False,
        on_batch_status: Callable[[str], None] | None = None,
        **overrides,
    ) -> RunSummary:
        """Label a cohort with a prompt version and a model; returns the run's counts.

        confirmed: the caller has shown the estimate and the user accepted a cost above labeller.confirm_above.
        batch: send the calls as a provider batch job (workbench/labeller/batch.py); on_batch_status sees its progress lines."""
        self.require("run")
        settings = self.labeller_settings(model, **overrides)
        self.check_model_name(settings)
        self.check_endpoint(settings)
        if batch:
            from workbench.labeller import batch as batch_mod

            batch_mod.check_batchable(model_config(settings))  # before the run's row: a refusal leaves nothing
        if not confirmed:
            self.check_budget(cohort, prompt_ref, model, labels, mode, batch, **overrides)
        commit = self.prompts.prompt_commit(prompt_ref)
        ps = self.prompts.unblinded_prompt_set(commit)  # runners are never blinded; the example record is shared
        labels = self._check_labels(labels)
        cid = self.study.cohort_id(cohort)
        cfg = model_config(settings)
        # the row, its lease and its audit event in one transaction: a run that cannot start leaves nothing,
        # and one that starts is ours from its first moment (see _execute: it never stays "running")
        lease = RunLease(self, 0, self.lease_ttl_s)
        with self.session(write=True) as s:
            q.put_version_examples(s, commit, ps.example_report_ids())  # so evaluating needs no Git
            run = q.add_run(
                s,
                cohort_id=cid,
                prompt_commit=commit,
                prompt_ref=prompt_ref or "HEAD",
                model=cfg.model,
                params_json=json.dumps(self._run_params(cfg, settings), sort_keys=True),
                mode=mode or ps.task.mode,
                labels_json=json.dumps(labels),
                sections=",".join(self.config.sections),
                endpoint=endpoint_label(settings),
                created_by=self.actor.user,
                lease_holder=lease.holder,
                lease_expires_at=q.db_epoch(s) + self.lease_ttl_s,
            )
            q.add_audit(
                s,
                self.actor.user,
                "start",
                "run",
                str(run.id),
                None,
                {"model": cfg.model, "endpoint": run.endpoint, "prompt": commit[:12], "cohort": cohort},
            )
            run_id = lease.run_id = q.stored_id(run)
        return self._execute(run_id, on_progress, cancel, lease=lease, started=True, batch=(batch, on_batch_status))

    def unchanged_run(
        self,
        cohort: str,
        prompt_ref: str | None = None,
        model: str | None = None,
        labels: list[str] | None = None,
        mode: str | None = None,
        **overrides,
    ) -> int | None:
        """The latest finished run without failures that a new run would repeat exactly (same prompt
        version, model and parameters, endpoint, cohort reports, labels, sections and mode), or None."""
        cid = self.study.cohort_id(cohort)
        with self.session() as s:
            ids = set(q.report_ids(s, cid))
            for run in self._same_runs(cohort, prompt_ref, model, labels, mode, overrides):
                if (run.status, run.failures) != ("finished", 0):
                    continue
                preds = q.predictions_frame(s, run.id)
                if set(preds["report_id"]) == ids and len(preds) == len(ids) * len(json.loads(run.labels_json)):
                    return run.id
        return None

    def interrupted_run(
        self,
        cohort: str,
        prompt_ref: str | None = None,
        model: str | None = None,
        labels: list[str] | None = None,
        mode: str | None = None,
        **overrides,
    ) -> int | None:
        """The latest interrupted run (Ctrl-C, SIGTERM) that a new run would repeat exactly, or None:
        resuming it finishes the same work without repeating its answered calls."""
        return next(
            (
                run.id
                for run in self._same_runs(cohort, prompt_ref, model, labels, mode, overrides)
                if run.status == INTERRUPTED
            ),
            None,
        )

    def _same_runs(self, cohort: str, prompt_ref, model, labels, mode, overrides: dict) -> list:
        """Runs on a cohort, newest first, with the prompt version, model, answer-changing parameters,
        labels, sections and mode a new run with these settings would have."""
        settings = self.labeller_settings(model, **overrides)
        commit = self.prompts.prompt_commit(prompt_ref)
        labels = self._check_labels(labels)
        cid = self.study.cohort_id(cohort)
        params = _answer_params(self._run_params(model_config(settings), settings))
        mode = mode or self.prompts.prompt_set(commit).task.mode
        out = []
        with self.session() as s:
            for row in q.list_runs(s, cid).itertuples(index=False):
                if row.prompt_commit != commit or row.mode != mode:
                    continue
                run = _stored_run(s, int(row.id))
                if (
                    _answer_params(json.loads(run.params_json)) == params
                    and sorted(json.loads(run.labels_json)) == sorted(labels)
                    and run.sections == ",".join(self.config.sections)
                ):
                    out.append(run)
        return out

    def run_results(self, cohort: str | None = None) -> pd.DataFrame:
        """Finished and incomplete runs newest first, each with `result`: finished (every pair answered),
        incomplete (some answers failed or are missing) or failed (no answer at all: 401s, parse errors,
        refusals), and `answered`, the (report, label) pairs with a value."""
        runs = self.runs(cohort)
        runs = runs[runs["status"].isin(["finished", "incomplete"])].reset_index(drop=True)
        with self.session() as s:
            tallies = [q.prediction_tally(s, int(run_id)) for run_id in runs["id"]]
        answered = [stored - failed for stored, failed in tallies]
        result = [
            "failed" if n == 0 else ("finished" if status == "finished" and failures == 0 else "incomplete")
            for n, status, failures in zip(answered, runs["status"], runs["failures"], strict=True)
        ]
        return runs.assign(answered=answered, result=result)

    def settle_abandoned_runs(self, cohort_id: int | None = None, run_id: int | None = None) -> list[int]:
        """Mark interrupted the runs left `running` by an executor that is gone (killed with SIGKILL, its machine
        lost): its lease was not renewed in time, or its process no longer exists on this machine. Their answers
        are kept and `workbench run --resume` finishes them. The ids marked."""
        with self.session() as s:
            now = q.db_epoch(s)  # the clock the leases were written by
            running = [r for r in q.running_runs(s, cohort_id) if run_id is None or r[0] == run_id]
        gone = [(rid, holder) for rid, holder, until in running if _executor_gone(holder, until, now)]
        marked = []
        for rid, holder in gone:
            with self.session(write=True) as s:
                if q.mark_run_abandoned(s, rid, holder, INTERRUPTED, q.now()):
                    marked.append(rid)
        return marked

    def interrupted_runs(self, cohort: str | None = None) -> pd.DataFrame:
        """Runs stopped by Ctrl-C or SIGTERM: not results (kept apart from history and metrics) until resumed."""
        runs = self.runs(cohort)
        return runs[runs["status"] == INTERRUPTED].reset_index(drop=True)

    def resume_run(
        self,
        run_id: int,
        on_progress=None,
        cancel=None,
        batch: bool = False,
        on_batch_status: Callable[[str], None] | None = None,
    ) -> RunSummary:
        """Finish a run that stopped (killed, cancelled, failures): finished calls are not repeated. A run with
        a pending batch job polls that job (no second upload), batch or not; batch: send the rest as a batch."""
        self.require("run")
        return self._execute(run_id, on_progress, cancel, batch=(batch, on_batch_status))

    def retry_failed(
        self,
        run_id: int,
        on_progress=None,
        cancel=None,
        batch: bool = False,
        on_batch_status: Callable[[str], None] | None = None,
    ) -> RunSummary:
        """Call again every (report, label) of a run whose answer failed (failures are never cached)."""
        return self.resume_run(run_id, on_progress, cancel, batch, on_batch_status)

    def pending_batch(self, run_id: int) -> dict | None:
        """The run's batch job still to poll or collect (workbench/labeller/batch.py), None when it has none."""
        with self.session() as s:
            return q.pending_batch_job(s, f"run:{run_id}")

    def batch_jobs(self, run_id: int) -> pd.DataFrame:
        """A run's batch jobs (id, files, status, requests), oldest first."""
        with self.session() as s:
            return q.batch_jobs(s, run_id)

    def _check_labels(self, labels: list[str] | None) -> list[str]:
        """Resolve label names to ids; only asked labels are labelled (derived ones follow)."""
        if not labels:
            return list(self.vocab.asked_ids)
        out = []
        for key in labels:
            label_id = self.study.label_id(key)
            if label_id not in self.vocab.asked_ids:
                raise StudyError(f"label {label_id!r} is derived from the others and is not asked")
            out.append(label_id)
        return out

    @staticmethod
    def check_model_name(settings: dict) -> None:
        """A model name litellm does not know is said so first (before any word about endpoints)."""
        try:
            check_model_name(settings.get("model", ""))
        except UnknownModel as exc:
            raise StudyError(str(exc)) from exc

    def check_endpoint(self, settings: dict) -> None:
        """Refuse to send report text to an endpoint the study does not allow."""
        if not is_offline(settings.get("model", "")):
            try:
                _resolved(settings)
            except EndpointError as exc:
                raise StudyError(f"report text will not be sent: {exc}") from exc
        if not endpoint_allowed(self.config.allowed_endpoints, settings):
            local = any(endpoints.is_local_host(endpoints.host_of(u)) for u in model_endpoints(settings))
            how = " A local endpoint is allowed by its address and port (127.0.0.1:8080), never every local port."
            raise StudyError(
                f"report text may not be sent to {endpoint_label(settings)}: it is not in this study's allowed endpoints "
                f"({', '.join(self.config.allowed_endpoints)}). An admin can allow it in Settings or with "
                "`workbench allow-endpoint URL`." + (how if local else "")
            )

    def routed(self, cfg):
        """cfg with the proxies it may go through: only those the study allows (any other is bypassed)."""
        allowed = self.config.allowed_endpoints
        return dataclasses.replace(cfg, proxies=endpoints.allowed_proxies(allowed, os.environ), allowed=tuple(allowed))

    @staticmethod
    def _run_params(cfg, settings: dict) -> dict:
        """What is recorded on the run: the answer-changing parameters plus concurrency/endpoints."""
        params = dict(cfg.params())
        params["resolved_endpoints"] = model_endpoints(settings)  # a resume must go to the same place
        keep = (
            "api_base",
            "api_key_env",
            "endpoints",
            "concurrency",
            "timeout_s",
            "max_retries",
            "backoff_base_s",
            "backoff_max_s",
            "workers",
            "max_reply_chars",
        )
        params.update({k: settings[k] for k in keep if settings.get(k) is not None})
        return params

    # ------------------------------------------------------------ execution

    def _execute(
        self,
        run_id: int,
        on_progress,
        cancel,
        lease: RunLease | None = None,
        started: bool = False,
        batch: tuple = (False, None),
    ) -> RunSummary:
        """Do every call a run still needs, as its one executor (see RunLease); started: a new run's row
        was created "running" with this lease held; batch: (send as a batch job, its status callback)."""
        with self.session() as s:
            if q.get_run(s, run_id) is None:
                raise StudyError(f"no run {run_id}")
        lease = lease or RunLease(self, run_id, self.lease_ttl_s)
        stop = threading.Event()
        state = {"running": started}
        try:
            lease.take()  # inside: a store that fails here is reported like one failing later in the run
            lease.keep(stop, cancel)
            with fewer_collections():  # tens of thousands of short-lived rows and replies: see workbench.runtime
                return self._execute_leased(run_id, on_progress, cancel, stop, lease, state, batch)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM turned into one by the command line: resumable
            if lease.lost:  # another executor has the run: its status is theirs to set
                raise
            with self.session() as s:
                stored, failures = q.prediction_tally(s, run_id)  # the failures so far are the run's too
                q.update_run(s, run_id, status=INTERRUPTED, finished_at=q.now(), failures=failures)
                run = _stored_run(s, run_id)
                total = len(q.report_ids(s, run.cohort_id)) * len(json.loads(run.labels_json))
            raise RunInterrupted(run_id, stored, total, failures) from None
        except BaseException as exc:
            marked = False
            if state["running"] and not lease.lost:  # never leave a run "running" that nobody executes
                with contextlib.suppress(*db.storage_errors()):  # the store may be what failed
                    with self.session(write=True) as s:
                        q.update_run(s, run_id, status="incomplete", finished_at=q.now())
                    marked = True
            if isinstance(exc, db.storage_errors()):
                raise RunStorageFault(run_id, exc, marked, self._stored_answers(run_id)) from exc
            raise
        finally:
            with contextlib.suppress(*db.storage_errors()):  # a lease not released expires on its own
                lease.release()

    def _stored_answers(self, run_id: int) -> int | None:
        """How many answers of a run are stored, None when the store cannot say (it is what failed)."""
        try:
            with self.session() as s:
                return q.prediction_tally(s, run_id)[0]
        except db.storage_errors():
            return None

    def _execute_leased(self, run_id: int, on_progress, cancel, stop, lease, state, batch=(False, None)) -> RunSummary:
        """The body of _execute, holding the run's lease."""
        started = time.monotonic()
        with self.session() as s:
            run = _stored_run(s, run_id)
            params = json.loads(run.params_json)
            labels = json.loads(run.labels_json)
        settings = self.settings_from_params(params)
        self.check_endpoint(settings)
        recorded = params.get("resolved_endpoints")
        if recorded is not None and recorded != model_endpoints(settings):
            raise StudyError(
                f"run {run_id} sent report text to {', '.join(recorded) or 'this machine'}; it would now go to "
                f"{endpoint_label(settings)} (the environment changed): restore it, or start a new run"
            )
        with self.session() as s:  # a resume goes where the run's earlier calls went (a moved name is refused)
            cfg = dataclasses.replace(self.routed(model_config(settings)), earlier_peers=tuple(q.run_peers(s, run_id)))
        engine = self._batch_engine(run_id, cfg, *batch)
        with self.session(write=True) as s:  # read, then write: it takes the write lock first (waits, bounded)
            reports = q.reports_frame(s, cohort_id=run.cohort_id)
            done = q.done_prediction_keys(s, run_id)
            q.update_run(s, run_id, status="running", finished_at=None)
        state["running"] = True
        ps = self.prompts.prompt_set(run.prompt_commit)
        sections = run.sections.split(",")
        requests = self.build_requests(ps, reports, labels, run.mode, sections, cfg, done)
        summary = RunSummary(run_id, calls_total=len(requests), already_done=len(done))
        with self.session(write=True) as s:
            q.update_run(s, run_id, calls_total=run.calls_total or (len(requests) + len(done)))
        halt = AnyEvent(stop, cancel)  # the caller's cancel is seen at once, not at the lease's next beat
        writer = RunWriter()  # the database stores one batch while the next is parsed or labelled
        written = False
        try:
            self._label(run_id, cfg, requests, summary, on_progress, stop, halt, writer, engine)
            written = True
        finally:
            writer.close(raise_error=written)  # every write done (or its error raised) before the run is counted
        if lease.lost:  # another executor took the run over (our lease had expired): it sets the status
            summary.status = "stopped: another executor took the run over"
            summary.seconds = time.monotonic() - started
            return summary
        return self._finish(run_id, labels, len(reports), summary, started, halt)

    def _batch_engine(self, run_id: int, cfg, asked: bool, on_status):
        """The batch engine when asked for or when the run has a pending batch job (checked before any upload), else None."""
        if not asked and self.pending_batch(run_id) is None:
            return None

        batch.check_batchable(cfg)
        return batch.BatchEngine(StudyBatchJournal(self), run_id=run_id, on_status=on_status)

    def _label(
        self,
        run_id: int,
        cfg,
        requests: list,
        summary: RunSummary,
        on_progress,
        stop: threading.Event,
        halt,
        writer: RunWriter,
        engine=None,
    ) -> None:
        """Label through the one path: cached answers and offline ones stored by the writer, paid ones as they return."""

        def store_reused(answers: list) -> None:
            rows = prediction_rows(answers)
            writer.submit(lambda: self._store_reused(run_id, rows, len(answers)))

        def started(counts) -> None:
            summary.calls_reused = counts.reused
            summary.notes = counts.notes  # the same list: notes added while calls run show up too

        streak = {"kind": None, "n": 0, "ok": False}

        def on_answer(answer) -> None:
            summary.calls_made += 1
            peer = answer.res.peer if answer.res is not None else None
            if peer:
                summary.peers[peer] = summary.peers.get(peer, 0) + 1
            failed = answer.failure()
            if failed is not None:
                summary.failure_kinds[failed[0]] = summary.failure_kinds.get(failed[0], 0) + 1
                summary.failure_examples.setdefault(failed[0], labelling.example(failed[1]))
            self._watch_unusable(streak, answer.res, summary, stop)

        labelling.label_calls(
            requests,
            cfg,
            self.cached_replies,
            lambda answers: self._store_answers(run_id, cfg, answers),
            store_reused=store_reused,
            defer=writer.submit,
            on_answer=on_answer,
            on_progress=on_progress,
            cancel=halt,
            on_start=started,
            engine=engine,
        )

    def cached_replies(self, keys: list[str]) -> dict[str, str]:
        """Call key -> cached reply text, for the keys that have one."""
        with self.session() as s:
            return {k: c.response for k, c in q.cached_calls(s, keys).items()}

    def _store_reused(self, run_id: int, rows: list[dict], n_calls: int) -> None:
        """One transaction: predictions of answers from the cache, and their count."""
        with self.session(write=True) as s:
            q.upsert_predictions(s, run_id, rows)
            q.upsert_prediction_attributes(s, run_id, attribute_rows(rows))
            q.add_run_counts(s, run_id, calls_reused=n_calls)

    def _store_answers(self, run_id: int, cfg, answered: list) -> None:
        """One transaction: predictions of new answers, the replies worth caching, calls, tokens and cost."""
        rows = prediction_rows(answered)
        results = [a.res for a in answered]
        with self.session(write=True) as s:
            q.upsert_predictions(s, run_id, rows)
            q.upsert_prediction_attributes(s, run_id, attribute_rows(rows))
            q.put_cached_calls(s, cache_entries(cfg, answered))
            if not is_offline(cfg.model):  # the rule engine's latency and tokens say nothing about a model
                q.put_call_facts(s, labelling.call_facts(run_id, answered))
                q.put_call_replies(s, labelling.failed_replies(answered))
            q.add_run_counts(
                s,
                run_id,
                calls_made=len(answered),
                prompt_tokens=sum(res.prompt_tokens or 0 for res in results),
                completion_tokens=sum(res.completion_tokens or 0 for res in results),
            )
            if any(res.cost is not None for res in results):
                cost = sum(res.cost for res in results if res.cost is not None)
                q.update_run(s, run_id, cost=(_stored_run(s, run_id).cost or 0.0) + cost)

    early_stop_after = 5  # identical endpoint failures in a row, with no success, that stop a run

    def _watch_unusable(self, streak: dict, res, summary: RunSummary, stop: threading.Event) -> None:
        """Stop a run whose endpoint is plainly unusable (refused, 401/403, 404) instead of trying every call, and
        one whose server stopped answering after it had answered (killed, crashed: nothing listens any more)."""
        if res.error is None:
            streak["ok"], streak["gone"] = True, 0
            return
        if streak["ok"] and res.error_kind == "connection":
            self._watch_gone(streak, res, summary, stop)
            return
        if streak["ok"] or res.error_kind not in UNUSABLE:
            streak.update(kind=None, n=0)
            return
        streak["n"] = streak["n"] + 1 if res.error_kind == streak["kind"] else 1
        streak["kind"] = res.error_kind
        if streak["n"] >= self.early_stop_after and not stop.is_set():
            summary.stopped_reason = (
                f"stopped early: {streak['n']} calls in a row failed the same way ({res.error_kind}) and none succeeded, "
                f"so the endpoint looks unusable; the remaining calls were not made. Fix the cause, then "
                f"`workbench run --resume {summary.run_id}`"
            )
            stop.set()

    def _watch_gone(self, streak: dict, res, summary: RunSummary, stop: threading.Event) -> None:
        """Count connection failures in a row after answered calls; at early_stop_after, stop: the server is gone."""
        streak["gone"] = streak.get("gone", 0) + 1
        if streak["gone"] >= self.early_stop_after and not stop.is_set():
            summary.stopped_reason = (
                f"stopped: the server stopped answering ({streak['gone']} calls in a row could not connect after "
                f"earlier calls were answered: {res.error}); the remaining calls were not made. Start the server "
                f"again, then `workbench run --resume {summary.run_id}`"
            )
            stop.set()

    def _finish(
        self, run_id: int, labels: list[str], n_reports: int, summary: RunSummary, started: float, cancel
    ) -> RunSummary:
        """Recount failures from the stored predictions and set the run's status."""
        with self.session(write=True) as s:
            stored, failures = q.prediction_tally(s, run_id)
            complete = stored == n_reports * len(labels)
            cancelled = cancel is not None and cancel.is_set() and not complete and not summary.stopped_reason
            status = "cancelled" if cancelled else ("finished" if complete else "incomplete")
            q.update_run(s, run_id, failures=failures, status=status, finished_at=q.now())
        summary.failures = failures
        summary.status = status
        summary.seconds = time.monotonic() - started
        return summary

    @staticmethod
    def settings_from_params(params: dict) -> dict:
        """Rebuild labeller settings from what a run recorded."""
        settings = {k: v for k, v in params.items() if k in MODEL_FIELDS}
        return settings

    def build_requests(
        self, ps, reports: pd.DataFrame, labels: list[str], mode: str, sections: list[str], cfg, done: set
    ) -> list:
        """Every call the run still needs for these reports (see labelling.build_requests)."""
        items = (
            (row.report_id, compose_text(row.findings, row.impression, row.text, sections))
            for row in reports.itertuples(index=False)
        )
        return labelling.build_requests(ps, items, labels, mode, self.vocab.names(), labelling.call_params(cfg), done)

    # ------------------------------------------------------------ reading runs

    def prediction_attributes(self, run_id: int, label: str | None = None) -> pd.DataFrame:
        """A run's attribute values (report_id, label, attribute, value, status, detail), blinded like predictions."""
        self.run_info(run_id)
        with self.session() as s:
            frame = q.prediction_attributes_frame(s, run_id, label)
        return self.study.blind_rows(frame)

    def runs(self, cohort: str | None = None) -> pd.DataFrame:
        """Runs newest first (a run whose executor is gone shows as interrupted, see settle_abandoned_runs)."""
        cid = self.study.cohort_id(cohort) if cohort else None
        self.settle_abandoned_runs(cid)
        with self.session() as s:
            return q.list_runs(s, cid)

    __call__ = runs  # wb.runs() is the run table, as it was before the service took the name

    @memo.per_request
    def run_info(self, run_id: int) -> Run:
        """One run row."""
        with self.session() as s:
            return _stored_run(s, run_id)

    @memo.per_request
    def predictions(self, run_id: int) -> pd.DataFrame:
        """A run's predictions (long); a reader sees those of reports they have finished reading."""
        run = self.run_info(run_id)
        with self.session() as s:
            return self.study.blind_rows(memo.run_predictions(self.engine, s, run))

    @memo.per_request
    def prediction_matrix(self, run_id: int) -> pd.DataFrame:
        """Reports x labels predicted values (NaN = failure or not labelled), derived labels filled."""
        run = self.run_info(run_id)
        with self.session() as s:
            ids = q.report_ids(s, run.cohort_id)
            preds = memo.run_predictions(self.engine, s, run)
        wide = preds.pivot(index="report_id", columns="label", values="value") if not preds.empty else pd.DataFrame()
        scope = self.study.blind_scope()  # a reader: only the reports they have finished reading
        ids = ids if scope is None else [i for i in ids if i in scope]
        wide = wide.reindex(index=ids, columns=self.vocab.asked_ids).astype(float)
        return derive_frame(self.vocab, wide)[self.vocab.ids]

    def estimate_run(
        self,
        cohort: str,
        prompt_ref: str | None = None,
        model: str | None = None,
        labels: list[str] | None = None,
        mode: str | None = None,
        batch: bool = False,
        **overrides,
    ) -> labelling.Estimate:
        """What start_run with these arguments would cost (calls after the cache, tokens, cost, time); no model call.
        batch: as a provider batch job (its price where litellm lists one)."""
        from workbench.services.runs import is_local_model

        settings = self.labeller_settings(model, **overrides)
        self.check_model_name(settings)
        self.check_endpoint(settings)
        ps = self.prompts.prompt_set(self.prompts.prompt_commit(prompt_ref))
        labels = self._check_labels(labels)
        cfg = labelling.model_config(settings)
        if batch:
            from workbench.labeller import batch as batch_mod

            batch_mod.check_batchable(cfg)  # the offline labeller, a pool: refused as the run would be
        with self.session() as s:
            reports = q.reports_frame(s, cohort_id=self.study.cohort_id(cohort))
        requests = self.build_requests(
            ps, reports, labels, mode or ps.task.mode, list(self.config.sections), cfg, set()
        )
        with self.session() as s:
            cached = set(q.cached_calls(s, [r.key for r in requests]))
            history = [] if is_offline(cfg.model) else q.model_call_history(s, cfg.model, settings=_speed(cfg))
        if not is_offline(cfg.model) and not batch:
            with contextlib.suppress(EndpointError):  # no endpoint to ask: the run itself says so
                cfg, _chosen = fitted_to_server(cfg)  # the concurrency the run will use on a one-slot server
        return labelling.estimate_calls(
            requests,
            cfg,
            cached,
            price=settings.get("price"),
            local=is_local_model(settings),
            history=history,
            batch=batch,
        )

    def check_budget(
        self, cohort: str, prompt_ref=None, model=None, labels=None, mode=None, batch: bool = False, **overrides
    ) -> None:
        """Raise NeedsConfirmation when the run may cost more than labeller.confirm_above (estimated, no call)."""
        settings = self.labeller_settings(model, **overrides)
        limit = settings.get("confirm_above")
        if limit is None or is_offline(settings.get("model", "")):
            return
        est = self.estimate_run(cohort, prompt_ref, model, labels, mode, batch, **overrides)
        if est.over(limit):
            cost = "an unknown cost" if est.cost is None else f"about ${est.cost:,.4f}"
            raise NeedsConfirmation(
                f"this run may cost {cost} for {est.to_make:,} calls, above labeller.confirm_above (${float(limit):,.2f})",
                "see `workbench run --estimate`, then confirm (answer yes, or pass --yes)",
            )

    # ------------------------------------------------------------ a run in its own process

    def start_run_detached(self, cohort: str, on_progress=None, cancel=None, **run_kwargs):
        """start_run in its own process (services/background.py): the app stays responsive."""
        self.require("run")
        from workbench.services.background import start_run_in_process  # it imports this module

        return start_run_in_process(
            self.root, self.actor, on_progress=on_progress, cancel=cancel, cohort=cohort, **run_kwargs
        )


def _stored_run(s, run_id: int) -> Run:
    """One run row read in an open session; UnknownName (with the newest ids) when there is no such run."""
    run = q.get_run(s, run_id)
    if run is None:
        from workbench.core.names import unknown_message
        from workbench.study import UnknownName

        ids = [str(i) for i in sorted(q.list_runs(s)["id"].tolist())]
        raise UnknownName(unknown_message("run", run_id, ids[-12:], "list them with `workbench history --cohort NAME`"))
    return run
