"""Session state of the app: every key is named here, plus the helpers that read and write it.

Also the two things shared by every session on one study: the revision counter that every write
increments (cached reads are keyed by it, so a write invalidates them everywhere) and the
background jobs that keep long runs off the script thread (the page stays usable while a run
goes on).
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from workbench.services import Workbench
from workbench.services.memo import RequestMemo

# ---------------------------------------------------------------- keys (the only place they are named)

ACTOR = "wb.actor"  # the signed-in Actor (never the Workbench)
START_PAGE = "wb.start_page"  # the page the browser asked for before signing in
START_QUERY = "wb.start_query"  # its query (the item of a /disagreements?... link), restored after the sign-in
LANDED = "wb.landed"  # the user this session opened the start page for (a later click on Home stays there)
FLASH = "wb.flash"  # messages to show once after a rerun
JOBS = "wb.jobs"  # name -> Job of this session
COHORT = "wb.cohort"  # cohort chosen on Home / Annotate / Adjudicate
READER = "wb.reader"  # reader name in local mode
NEW_READER = "wb.new_reader"
ANN_REPORT = "wb.annotate.report"
ANN_HELD = "wb.annotate.held"  # (reader, cohort, report) last claimed by opening it (adaptive reading)
ADJ_ITEM = "wb.adjudicate.item"
ADJ_POS = "wb.adjudicate.pos"  # its place in the queue (kept when the item leaves it)
ADJ_CLICKED = "wb.adjudicate.clicked"  # row clicks handled
RUN = "wb.run"  # run shown on Runs and Disagreements
RUN_A, RUN_B = "wb.run_a", "wb.run_b"  # the two runs of a comparison
RUNS_TAB, PROMPTS_TAB = "wb.runs.tab", "wb.prompts.tab"  # lazy tabs: only the open one is computed
CI = "wb.ci"
FOREST_METRIC = "wb.forest_metric"
CASE = "wb.case"  # a services.results.CaseRef opened on Disagreements
SEARCH, SEARCH_IN, SEARCH_REGEX = "wb.search", "wb.search.in", "wb.search.regex"  # the Runs page's search of a run
SEARCH_CASE = "wb.search.case"  # (report_id, label) opened from the search results
DIS_LABEL, DIS_KIND, DIS_CATEGORY = "wb.dis.label", "wb.dis.kind", "wb.dis.category"
DIS_PICK = "wb.dis.pick"  # (report_id, label) of the open case
DIS_POS = "wb.dis.pos"  # its place in the filtered queue (kept when the case leaves the queue)
DIS_ORDER = "wb.dis.order"  # queue order: errors | broken
DIS_NOTE = "wb.dis.note"  # the quick note being composed: item, category, significance, wrong
DIS_COMPARE = "wb.dis.compare"  # (run_a, run_b) when the case was opened from Compare
DIS_KEPT = "wb.dis.kept"  # filters -> the queue order first shown (kept while noting and flagging)
DIS_CLICKED = "wb.dis.clicked"  # row clicks handled (keys the queue table so a click is consumed once)
ANN_CLICKED = "wb.annotate.clicked"
PROMPT_LABEL = "wb.prompt.label"
COMMIT_MESSAGE = "wb.prompt.message"
REVERT_TO = "wb.prompt.revert_to"
SCORE_RESULT = "wb.score.result"
ROBUST_RESULT = "wb.robust.result"
FROZEN = "wb.freeze.last"
AUDIT_ENTITY, AUDIT_KEY = "wb.audit.entity", "wb.audit.key"
SIGNIN_USER, SIGNIN_PASSWORD = "wb.signin.user", "wb.signin.password"
SUGGESTION = "wb.suggestion"  # the last "Suggest a revision" result of this session
OPT_RUN, OPT_REPORT, OPT_COMPARE = "wb.optimise.run", "wb.optimise.report", "wb.optimise.compare"
ENDED_USER = "wb.session.ended"  # the user whose session ended in this tab (a new user is then said, not silent)
SESSION_TOKEN = "wb.session.token"  # the browser session's token (auth: local), also in its cookie (HttpOnly)
CLEAR_COOKIE = "wb.session.clear"  # the next sign-in form also clears a dead session cookie
SESSION_COOKIE = "wb.session.cookie"  # what gives the browser its cookie after a sign-in (workbench/ui/cookies.py)
SIGNIN_PROBLEM = "wb.session.problem"  # why the last sign-in did not hold (shown on the next sign-in form)
RESUMED = "wb.session.resumed"  # this tab's user came from the browser's cookie (a reload), not a sign-in here
COOKIE_PENDING = "wb.session.pending"  # the sign-in's one-time code until the browser holds its cookie (serve.py)
URL_SEEDED = "wb.url.seeded"  # pages whose state this session took from the URL (once each)
KBD_PAGE = "wb.kbd.page"  # the browser page's random id (keyboard forms answer triggers per page)
ADJ_DRAFT = "wb.adjudicate.draft"  # item -> the decision being composed (kept across reruns)
ADJ_QUESTIONED = "wb.adjudicate.questioned"  # (item, value, reason) refused once: its reason names the other value
ADJ_ATTR_TIE = "wb.adjudicate.attribute_tie"  # the open attribute tie: "report|label|attribute"
LABELSET = "wb.labelset"  # the label set open on the Label set page
LABELSET_POS = "wb.labelset.pos"  # the candidate under review there
ANN_FORM, DIS_FORM, ADJ_FORM = "wb.kbd.annotate", "wb.kbd.disagreements", "wb.kbd.adjudicate"  # component keys


def kbd_inbox(form_key: str) -> str:
    """Where an AppTest queues the events a keyboard form's browser half would send."""
    return f"wb.kbd.inbox.{form_key}"


def widget_key(*parts: Any) -> str:
    """A key for a widget whose identity depends on data (e.g. one checkbox per report and label)."""
    return "wb.w." + ".".join(str(p) for p in parts)


# ---------------------------------------------------------------- the Workbench class the app uses


def workbench_class():
    """The Workbench class the app opens studies with."""
    return Workbench


# ---------------------------------------------------------------- revision (shared per study)


class Revision:
    """Counters shared by every session on one study: each write increments `value`; writes that
    change more than error notes also increment `data` (reads that ignore notes are keyed by it,
    so triaging a disagreement does not recompute the reference and the queue behind it)."""

    def __init__(self) -> None:
        self.value = 0
        self.data = 0
        self._lock = threading.Lock()

    def bump(self, notes_only: bool = False) -> int:
        """Increment and return the new value."""
        with self._lock:
            self.value += 1
            if not notes_only:
                self.data += 1
            return self.value


def attach_revision(wb, holder: Revision | None = None):
    """Give a Workbench (and the per-actor copies made from it) one shared revision holder."""
    wb.ui_revision = holder or getattr(wb, "ui_revision", None) or Revision()
    return wb


def request_scoped(wb):
    """Give this rerun's Workbench view a fresh request memo (services/memo.py per_request)."""
    wb.ctx.request_memo = RequestMemo()
    return wb


def bump(wb, notes_only: bool = False) -> None:
    """Invalidate cached reads of this study (call after each write; notes_only after a plain error note)."""
    wb.ui_revision.bump(notes_only)


@st.cache_data(max_entries=128, ttl=3600, show_spinner=False)
def _cached_call(study: str, user: str, role: str, rev, method: str, args: tuple, kwargs: tuple, _method=None):
    return _method(*args, **dict(kwargs))


def _key_parts(method) -> tuple[str, str, str, str]:
    """Study, user, role and the method's name: with the revision, what a cached read is keyed by."""
    ctx = method.__self__.ctx
    return str(ctx.root), ctx.actor.user, ctx.actor.role, method.__qualname__


def read(method, *args, **kwargs):
    """Call a read-only service method (a bound method, e.g. wb.runs.run_info) through the bounded
    cache keyed by study, actor, method and the study's revision."""
    study, user, role, name = _key_parts(method)
    return _cached_call(
        study,
        user,
        role,
        method.__self__.ctx.ui_revision.value,
        name,
        args,
        tuple(sorted(kwargs.items())),
        _method=method,
    )


def read_stable(method, *args, **kwargs):
    """As read(), for reads whose result does not depend on error notes (kept across note saves)."""
    study, user, role, name = _key_parts(method)
    return _cached_call(
        study,
        user,
        role,
        f"data-{method.__self__.ctx.ui_revision.data}",
        name,
        args,
        tuple(sorted(kwargs.items())),
        _method=method,
    )


# ---------------------------------------------------------------- flash messages


def flash(message: str, kind: str = "success") -> None:
    """Queue a message to show after the next rerun (kind: success, info, warning, error, toast)."""
    st.session_state.setdefault(FLASH, []).append((kind, message))


def pop_flashes() -> list[tuple[str, str]]:
    """Messages queued by the previous run, once."""
    return st.session_state.pop(FLASH, [])


# ---------------------------------------------------------------- actor


def actor():
    """The signed-in actor of this session, or None."""
    return st.session_state.get(ACTOR)


def set_actor(value) -> None:
    """Sign in (or out with None)."""
    if value is None:
        st.session_state.pop(ACTOR, None)
    else:
        st.session_state[ACTOR] = value


# ---------------------------------------------------------------- state in the URL


def seed_from_url(page: str, params: dict) -> None:
    """On a session's first visit of a page (a reload, a bookmark, a shared link), take its state from the
    URL: params maps a query parameter to (state key, parse); a value parse refuses is ignored."""
    seen = st.session_state.setdefault(URL_SEEDED, set())
    if page in seen:
        return  # afterwards the page writes the URL from its state, never the other way round
    seen.add(page)
    for name, (key, parse) in params.items():
        raw = st.query_params.get(name)
        if raw is None:
            continue
        with contextlib.suppress(TypeError, ValueError, LookupError):  # a stale or hand-edited link: ignored
            st.session_state[key] = parse(raw)


def to_url(**params) -> None:
    """Show the page's state in the URL (None leaves a parameter out): a bookmark or a reload returns to it."""
    wanted = {k: str(v) for k, v in params.items() if v is not None}
    if dict(st.query_params) != wanted:
        st.query_params.from_dict(wanted)


def pair(text: str, sep: str = "|") -> tuple[str, str]:
    """'a|b' as ('a', 'b') (a case or item in the URL: report id, then label)."""
    first, found, second = str(text).partition(sep)
    if not (found and first and second):
        raise ValueError(f"expected two parts separated by {sep!r}: {text!r}")
    return first, second


# ---------------------------------------------------------------- background jobs


@dataclass
class Job:
    """A long operation on a worker thread; the page polls it."""

    name: str
    label: str
    progress: Any = None
    result: Any = None
    error: BaseException | None = None
    detail: str = ""
    done: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)
    seen: bool = False
    handled: bool = False  # the page has acted on the result once (e.g. selected the new run)
    thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True until the work has finished (with a result or an error)."""
        return not self.done.is_set()


def start_job(name: str, label: str, work: Callable[[Job], Any], on_done: Callable[[], None] | None = None) -> Job:
    """Run work(job) on a daemon thread; work reports progress by setting job.progress."""
    job = Job(name, label)

    def target() -> None:
        try:
            job.result = work(job)
        except BaseException as exc:  # shown on the page, not lost in a log
            job.error = exc
            job.detail = traceback.format_exc()
        finally:
            if on_done:
                on_done()
            job.done.set()

    job.thread = threading.Thread(target=target, name=f"workbench-{name}", daemon=True)
    st.session_state.setdefault(JOBS, {})[name] = job
    job.thread.start()
    return job


def job(name: str) -> Job | None:
    """This session's job of that name (running or finished), or None."""
    return st.session_state.get(JOBS, {}).get(name)


def clear_job(name: str) -> None:
    """Forget a finished job."""
    st.session_state.get(JOBS, {}).pop(name, None)


# ---------------------------------------------------------------- navigation


def switch_to(url_path: str, values: dict | None = None) -> None:
    """Set state keys, then open another page of the app (pages are registered by url_path)."""
    for key, value in (values or {}).items():
        st.session_state[key] = value
    st.switch_page(st.Page(_noop, title=url_path, url_path=url_path))


def _noop() -> None:
    """Placeholder callable: a page is identified by its url_path."""
