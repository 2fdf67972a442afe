"""Process-wide memos of the reads that cost most at study scale, each keyed by exactly what changes it.

The app's page cache is keyed by a revision that every write bumps, so the first page opened after
a saved reading used to aggregate all 378,000 readings and load every run's predictions again.
These memos survive that bump: metrics are kept by the content of the reference and predictions
they were computed from (a saved reading rarely changes a reference value); a finished run's predictions never change (a resumed run is
'running' again, without a finish time), and the readings' aggregates are refreshed for the
reports whose readings changed since the last look (found through ix_reading_updated_at), then
checked against the table's count and recomputed whole when it does not add up. The workbench
stamps every change and deletes a reading only when a reader undoes its first save (the count
check then recomputes); a reading changed in the database by hand
without a new updated_at is not seen until the process restarts.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Concatenate, ParamSpec, TypeVar

import pandas as pd

from workbench.store import queries as q

# A reading stamped up to this long before the last look but committed after it is still picked up.
LATE_COMMIT_S = 120
# More changed reports than this since the last look: aggregate everything again (one query is cheaper).
MAX_DELTA_REPORTS = 2000


class Memo:
    """A small bounded map shared by every thread of the process (least recently used goes first)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        """The value, or None."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key, value) -> None:
        """Keep a value (dropping the least recently used beyond the size)."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._items.clear()


RUN_PREDICTIONS = Memo(8)  # about 11 MB each for 3,000 reports x 21 labels
READING_AGGREGATES = Memo(16)
EVALUATIONS = Memo(
    64
)  # metrics of (reference, predictions) by content: most saved readings leave the values as they were


def frame_digest(*frames: pd.DataFrame) -> str:
    """sha256 over frames' column names, index and values: equal content, equal digest."""
    digest = hashlib.sha256()
    for frame in frames:
        digest.update("\x1f".join(map(str, frame.columns)).encode() + b"\x1e")
        digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    return digest.hexdigest()


def database_key(engine) -> str:
    """Which database (a memo entry never crosses studies)."""
    return engine.url.render_as_string(hide_password=True)


def run_predictions(engine, session, run) -> pd.DataFrame:
    """A run's predictions frame; a finished run's from the memo (a copy: callers may change it)."""
    if run.finished_at is None or run.status == "running":
        return q.predictions_frame(session, run.id)
    key = (database_key(engine), run.id, run.started_at, run.status, run.finished_at)
    frame = RUN_PREDICTIONS.get(key)
    if frame is None:
        frame = q.predictions_frame(session, run.id)
        RUN_PREDICTIONS.put(key, frame)
    return frame.copy()


def _earlier(stamp: str) -> str | None:
    """The ISO stamp LATE_COMMIT_S earlier, in the format readings are stamped with (None if unreadable)."""
    try:
        return (datetime.fromisoformat(stamp) - timedelta(seconds=LATE_COMMIT_S)).isoformat(timespec="microseconds")
    except (TypeError, ValueError):
        return None


def reading_aggregate(engine, session, name: str, whole: Callable, some: Callable, count_column: str) -> pd.DataFrame:
    """An aggregate of all readings by report (whole(session) or some(session, report_ids)), kept up to date.

    Its `count_column` must sum to the number of readings: that is the check that nothing was missed.
    """
    key = (database_key(engine), name)
    mark = q.reading_watermark(session)
    entry = READING_AGGREGATES.get(key)
    if entry is not None and entry[0] == mark:
        return entry[1]
    frame = None
    since = _earlier(entry[0][1]) if entry is not None and entry[0][1] is not None else None
    if since is not None and mark[1] is not None and mark[1] >= entry[0][1]:
        changed = q.reports_read_since(session, since)
        if len(changed) <= MAX_DELTA_REPORTS:
            old = entry[1]
            frame = pd.concat([old[~old["report_id"].isin(changed)], some(session, changed)], ignore_index=True)
            if int(frame[count_column].sum()) != q.count_readings(session):
                frame = None  # something changed without a newer stamp: count it all again
    if frame is None:
        frame = whole(session)
    READING_AGGREGATES.put(key, (mark, frame))
    return frame


def vote_counts(engine, session) -> pd.DataFrame:
    """q.vote_counts over every reading, refreshed for the reports that changed."""
    return reading_aggregate(engine, session, "vote_counts", q.vote_counts, q.vote_counts_of, "n_readers")


def reading_counts(engine, session) -> pd.DataFrame:
    """q.reading_counts over every reading, refreshed for the reports that changed."""
    return reading_aggregate(engine, session, "reading_counts", q.reading_counts, q.reading_counts_of, "labels")


# ---------------------------------------------------------------- the app's request memo
# Pure reads that the services call several times while building one answer (a page's first run
# on Home computed the reference 8 times at 3,000 reports). The app gives each script run's
# Workbench view a fresh request memo (ctx.request_memo, ui/state.py request_scoped); that view is
# discarded at the end of the run, so nothing can go stale. Without one (CLI, scripts, worker
# threads) the reads run every time.


class RequestMemo:
    """Answers of per_request reads within one app rerun."""

    def __init__(self) -> None:
        self.items: dict = {}
        self.lock = threading.RLock()  # a memoised read may call another one


P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def per_request(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Memoise a pure read for the current app rerun when its context has a request memo (DataFrames handed out as copies)."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        memo = self.ctx.request_memo
        if memo is None:
            return method(self, *args, **kwargs)
        try:
            key = (method.__qualname__, args, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:  # e.g. a DataFrame argument: not memoised
            return method(self, *args, **kwargs)
        with memo.lock:
            if key not in memo.items:
                memo.items[key] = method(self, *args, **kwargs)
            value = memo.items[key]
        return value.copy() if isinstance(value, pd.DataFrame) else value

    return call


PROMPT_SETS = Memo(64)  # a full commit's prompt set never changes
_SHA = re.compile(r"^[0-9a-f]{40}$")


def per_commit(method):
    """prompt_set(ref) memoised process-wide when the context has a request memo and ref is a full sha."""

    @functools.wraps(method)
    def call(self, ref_=None):
        if self.ctx.request_memo is None or not (isinstance(ref_, str) and _SHA.match(ref_)):
            return method(self, ref_)
        key = (str(self.ctx.root), ref_)
        value = PROMPT_SETS.get(key)
        if value is None:
            value = method(self, ref_)
            PROMPT_SETS.put(key, value)
        return value

    return call
