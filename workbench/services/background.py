"""Runs started from the app execute in their own process.

A run on a thread of the Streamlit server shares that process's interpreter lock with every page
of every user: the interface stalls and the run goes at a fraction of its bench speed. Here the run
goes to a child process (`python -m workbench.services.background`: its own interpreter, the same
services and the same database; the run lease keeps it the only executor). The request goes in as
one JSON line on stdin; progress, the result or the error come back as JSON lines on stdout; a
"cancel" line on stdin stops the run after the calls in flight. A plain subprocess, not
multiprocessing: spawn would re-run the parent's __main__, which in Streamlit is the page script.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import queue as queue_module
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from workbench.labeller.labelling import Progress
from workbench.services.runs import RunSummary
from workbench.study import StudyError

MARK = "WBRUN "  # protocol lines start with this; anything else a library prints is ignored
POLL_S = 0.2


def start_run_in_process(
    root: Path, actor, on_progress: Callable | None = None, cancel: threading.Event | None = None, **run_kwargs
):
    """Workbench(root, actor).start_run(**run_kwargs) in a child process; returns its RunSummary.

    on_progress receives Progress objects as the child reports them; setting cancel stops the child
    after the calls in flight. The child's error is raised here as a StudyError.
    """
    request = {"root": str(root), "actor": dataclasses.asdict(actor), "run": run_kwargs}
    child = subprocess.Popen(
        [sys.executable, "-m", "workbench.services.background"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None  # both are pipes (PIPE above)
    lines: queue_module.Queue[str] = queue_module.Queue()
    reader = threading.Thread(target=_pump, args=(stdout, lines), daemon=True)
    reader.start()
    stdin.write(json.dumps(request) + "\n")
    stdin.flush()
    cancelled = False
    try:
        while True:
            if cancel is not None and cancel.is_set() and not cancelled:
                cancelled = True
                stdin.write("cancel\n")
                stdin.flush()
            try:
                line = lines.get(timeout=POLL_S)
            except queue_module.Empty:
                if child.poll() is not None and lines.empty():
                    reader.join(timeout=5)
                    if lines.empty():
                        raise StudyError(
                            f"the run's process ended without a result (exit code {child.returncode})"
                        ) from None
                continue
            if not line.startswith(MARK):
                continue
            message = json.loads(line[len(MARK) :])
            if "progress" in message:
                if on_progress is not None:
                    on_progress(Progress(**message["progress"]))
            elif "done" in message:
                return RunSummary(**message["done"])
            else:
                raise StudyError(message.get("error") or "the run failed")
    finally:
        with contextlib.suppress(OSError):
            stdin.close()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


def _pump(stream: IO[str], lines: queue_module.Queue[str]) -> None:
    """Move the child's output lines onto the queue the caller polls (a thread: reading blocks)."""
    for line in stream:
        lines.put(line)


def _emit(message: dict) -> None:
    """One protocol line on stdout."""
    sys.stdout.write(MARK + json.dumps(message, default=str) + "\n")
    sys.stdout.flush()


def main() -> None:
    """The child: read the request, run, report; a 'cancel' line on stdin cancels."""
    try:
        request = json.loads(sys.stdin.readline())
        from workbench.services import Actor, Workbench

        cancel = threading.Event()

        def watch_stdin() -> None:
            for line in sys.stdin:
                if line.strip() == "cancel":
                    cancel.set()
            cancel.set()  # the parent went away: stop too

        threading.Thread(target=watch_stdin, daemon=True).start()
        wb = Workbench(Path(request["root"]), actor=Actor(**request["actor"]))
        summary = wb.start_run(
            on_progress=lambda p: _emit({"progress": dataclasses.asdict(p)}), cancel=cancel, **request["run"]
        )
        _emit({"done": dataclasses.asdict(summary)})
    except BaseException as exc:  # shown on the page like an in-process run's error
        _emit({"error": str(exc) or type(exc).__name__})


if __name__ == "__main__":
    main()
