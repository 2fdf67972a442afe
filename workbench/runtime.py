"""How the workbench tunes its own process: the garbage collector during runs, BLAS threads, and the one
way a heavy import is deferred (`lazy_module`).

Fewer cyclic garbage collections while a run's many short-lived objects come and go. CPython
starts a young-generation collection every 700 net container allocations, and each one walks
every object allocated since; a litellm call allocates thousands (its logging object, the
pydantic response, cost records), and a labelled report hundreds. During a run that is hundreds
of collections per second that find next to nothing: raising the first threshold for the run's
duration cut the client's CPU per call by about a tenth (bench/bench_throughput.py). Reference
counting still frees almost everything at once; only cycles wait a little longer. The previous
thresholds come back when the last run in the process ends.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib.util
import os
import sys
import threading
import types

RUN_THRESHOLDS = (50_000, 20, 10)  # young generation every 50,000 allocations; older ones as CPython's ratio

_LOCK = threading.Lock()
_DEPTH = 0  # runs in progress in this process (the app may execute more than one at a time)
_SAVED: tuple[int, ...] | None = None
_EXIT_FROZEN = False  # short_lived registered its exit hook (once per process)


@contextlib.contextmanager
def fewer_collections():
    """Raise the collector's thresholds until the last overlapping caller leaves (then restore them)."""
    global _DEPTH, _SAVED
    with _LOCK:
        if _DEPTH == 0:
            _SAVED = gc.get_threshold()
            _raise_thresholds()
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and _SAVED is not None:
                gc.set_threshold(*_SAVED)


def single_threaded_blas() -> None:
    """One OpenBLAS thread unless the user chose otherwise (call before numpy is imported).

    The workbench's arrays are small (thousands of reports x 21 labels): OpenBLAS's extra threads
    never pay off, but after a BLAS call they spin for a while, and on `workbench metrics` that was
    0.25 s of CPU (1.20 -> 0.95 s) taken from whatever else the machine runs."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def short_lived() -> None:
    """For a one-command process (the CLI): young-generation collections as during a run, for its whole life,
    and no collector at the interpreter's exit.

    Python's shutdown runs the cyclic collector over every object still alive: after a command that
    imported pandas, SQLAlchemy and the 40 table classes that was about 0.25 s of CPU (a quarter of
    `workbench metrics`) spent tidying memory the OS takes back anyway. Frozen objects are skipped by
    the collector; every atexit handler and thread join still runs (handlers registered later run before it).
    """
    global _EXIT_FROZEN
    _raise_thresholds()
    if not _EXIT_FROZEN:
        _EXIT_FROZEN = True
        atexit.register(gc.freeze)


def _raise_thresholds() -> None:
    """RUN_THRESHOLDS, unless collection is off (0) or already set to run less often: not ours to change."""
    if 0 < gc.get_threshold()[0] < RUN_THRESHOLDS[0]:
        gc.set_threshold(*RUN_THRESHOLDS)


class AnyEvent:
    """Set as soon as any of its events is set (what the engines ask through is_set())."""

    def __init__(self, *events: threading.Event | None) -> None:
        self._events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        """True when any event is set."""
        return any(e.is_set() for e in self._events)


def lazy_module(name: str) -> types.ModuleType:
    """`name` as a module that imports itself on first attribute use (stdlib LazyLoader).

    The one documented way the workbench defers a heavy import at a boundary (pandas in the CLI, so
    `workbench --help` starts without it); litellm and scipy stay behind the functions that call them.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
