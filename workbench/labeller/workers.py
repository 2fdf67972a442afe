"""Label with several worker processes when one Python process cannot keep up with the model.

litellm costs a few milliseconds of client CPU per call, so against a fast server (a vLLM pool,
100 ms per call, 32 in flight) one process saturates a core long before the server does. Here K
workers (K - 1 spawned processes, spawn, not fork: litellm's clients and threads do not survive a
fork; and a thread of the calling process, which labels at once while the others spend seconds
importing litellm) each run their own event loop with a share of the concurrency, take small
chunks of calls from one queue as they free up, and send every CallResult back through a second
queue to the calling thread, which stays the only writer (it calls on_result, exactly as
llm.complete_all does). litellm stays the only model layer: the workers call workbench.labeller.llm.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import queue as queue_module
import sys
import threading
import time
import types
from collections.abc import Callable

from workbench.labeller import llm

CHUNK = 16  # calls handed to a worker at a time: small, so no worker sits on a long tail
MIN_CALLS_PER_WORKER = 200  # below this, starting processes (and litellm in each) costs more than it saves


def worker_count(cfg: llm.ModelConfig, n_calls: int) -> int:
    """How many processes to use for n_calls: cfg.workers, fewer when there is too little work."""
    wanted = max(1, int(getattr(cfg, "workers", 1) or 1))
    return max(1, min(wanted, n_calls // MIN_CALLS_PER_WORKER, cfg.concurrency))


@contextlib.contextmanager
def _plain_main():
    """Start children from a bare __main__: spawn re-runs the host's main script in each child, and in
    the app that is a Streamlit page (it would run again, with its side effects, in every worker)."""
    host = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if host is not None:
            sys.modules["__main__"] = host


def complete_all_workers(
    requests: list[llm.CallRequest],
    cfg: llm.ModelConfig,
    on_result: Callable[[llm.CallRequest, llm.CallResult], None],
    cancel: threading.Event | None = None,
) -> None:
    """llm.complete_all_sync over worker_count(cfg) processes; on_result runs in this thread."""
    workers = worker_count(cfg, len(requests))
    if workers <= 1:
        llm.complete_all_sync(requests, cfg, on_result, cancel)
        return
    ctx = multiprocessing.get_context("spawn")
    tasks, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    share = dataclasses.replace(cfg, concurrency=max(1, cfg.concurrency // workers), workers=1)
    by_key = {}
    for start in range(0, len(requests), CHUNK):
        chunk = requests[start : start + CHUNK]
        by_key.update({r.key: r for r in chunk})
        tasks.put([(r.key, r.messages, r.response_format) for r in chunk])
    for _ in range(workers):
        tasks.put(None)  # one end marker per worker
    # this process is one of the K: it labels from the same queue at once, while each spawned process
    # spends seconds importing litellm before its first call, then shares the calls with them
    procs = [
        ctx.Process(
            target=_worker_main, args=(share, tasks, results, stop), daemon=True, name=f"workbench-labeller-{i}"
        )
        for i in range(1, workers)
    ]
    with _plain_main():
        for proc in procs:
            proc.start()
    procs.append(
        threading.Thread(
            target=_worker_main, args=(share, tasks, results, stop), daemon=True, name="workbench-labeller-0"
        )
    )
    procs[-1].start()
    try:
        _collect(by_key, procs, results, on_result, cancel, stop)
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive() and hasattr(proc, "kill"):  # a process; this process's own thread ends with it
                proc.kill()
        for q in (tasks, results):  # chunks nobody took (a cancel) must not keep this process from exiting
            q.cancel_join_thread()
            q.close()


def _collect(by_key: dict, procs: list, results, on_result, cancel, stop) -> None:
    """Hand each result to on_result until every call is answered or every worker has ended."""
    pending = dict(by_key)
    while pending:
        if cancel is not None and cancel.is_set():
            stop.set()  # workers start nothing new; what is in flight still comes back
        try:
            item = results.get(timeout=0.2)
        except queue_module.Empty:
            if not any(p.is_alive() for p in procs):
                _drain(results, pending, on_result)
                break
            continue
        if isinstance(item, str):  # a worker crashed: its calls must not be silently lost
            raise RuntimeError(f"labeller worker failed: {item}")
        req = pending.pop(item.key, None)
        if req is not None:
            on_result(req, item)
    if pending and not (cancel is not None and cancel.is_set()):
        codes = ", ".join(str(getattr(p, "exitcode", "thread")) for p in procs)
        raise RuntimeError(f"labeller workers ended with {len(pending)} calls unanswered (exit codes {codes})")


def _drain(results, pending: dict, on_result) -> None:
    """Results still queued after the workers ended."""
    while True:
        try:
            item = results.get(timeout=0.2)
        except queue_module.Empty:
            return
        if not isinstance(item, str) and item.key in pending:
            on_result(pending.pop(item.key), item)


def _worker_main(cfg, tasks, results, stop) -> None:
    """One worker (a spawned process, or a thread of the calling one): its own event loop, cfg.concurrency calls in flight."""
    try:
        asyncio.run(_serve(cfg, tasks, results, stop))
    except BaseException as exc:  # reported to the parent, which raises it there
        results.put(f"{type(exc).__name__}: {exc}")


async def _serve(cfg, tasks, results, stop) -> None:
    """Pull chunks as capacity frees up; answer each call with llm's own retry and backoff."""
    llm.pin_endpoints(cfg)  # before any task exists: the tasks copy this context, so every request is checked
    call = llm.make_caller(cfg)
    loop = asyncio.get_running_loop()
    local: asyncio.Queue = asyncio.Queue(maxsize=2 * CHUNK)
    cancel = _StopFlag(stop)

    async def feed() -> None:
        while True:
            chunk = await loop.run_in_executor(None, tasks.get)
            if chunk is None or stop.is_set():
                break
            for key, messages, response_format in chunk:
                await local.put(llm.CallRequest(key, messages, response_format=response_format))
        for _ in range(cfg.concurrency):
            await local.put(None)

    async def consume() -> None:
        while (req := await local.get()) is not None:
            if stop.is_set():
                continue
            results.put(await llm.run_one(call, req, cfg, cancel))

    await asyncio.gather(feed(), *(consume() for _ in range(cfg.concurrency)))


class _StopFlag:
    """The parent's multiprocessing Event seen through threading.Event's is_set()."""

    def __init__(self, event) -> None:
        self._event = event
        self._checked, self._value = 0.0, False

    def is_set(self) -> bool:
        """True once the parent asked the workers to stop (checked at most 10 times a second)."""
        now = time.monotonic()
        if not self._value and now - self._checked > 0.1:
            self._checked, self._value = now, self._event.is_set()
        return self._value
