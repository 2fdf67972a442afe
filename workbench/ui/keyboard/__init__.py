"""Custom components v2 of the reading room: keyboard forms that cannot lose input, and the session cookie.

A Streamlit button per key loses keys pressed 20-60 ms apart (clicks that arrive during a rerun
replace one another), so the Annotate, Disagreements and Adjudicate forms are one component each
(form.js): the browser applies every key at once and holds the keys pressed after Enter until the
server has stored the reading and opened the next item. The server side is here: a trigger is
applied at most once (by its sequence number) and answered with that number, so a resend is
harmless and the browser knows what was stored; the press is also claimed in the study database (presses),
so a resend that reaches another session or server process is answered with the first answer, not applied
again. Inline HTML/CSS/JS, no iframe, nothing fetched.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from workbench.errors import WorkbenchError
from workbench.ui import state

HERE = Path(__file__).resolve().parent
Handler = Callable[[dict], "str | None"]  # a payload -> None when stored, else the message to show
PENDING_S = 60.0  # a press claimed this long ago and still unanswered was interrupted (its server went away)
INTERRUPTED = (
    "Not sure this was saved: the server was interrupted while it applied your Enter. Check what is on screen and "
    "press Enter again."
)


class Presses(Protocol):
    """Where presses are claimed once for every server process (the study database: ReadingService)."""

    def claim_press(self, page: str, form: str, seq: int): ...

    def finish_press(self, page: str, form: str, seq: int, error: str | None) -> None: ...


@functools.cache
def _form_component():
    """The registered keyboard form (registered once per process)."""
    return st.components.v2.component(
        "workbench_keyboard_form",
        css=(HERE / "form.css").read_text(encoding="utf-8"),
        js=(HERE / "form.js").read_text(encoding="utf-8"),
    )


@functools.cache
def _cookie_component():
    """The registered cookie setter (no markup: it only writes document.cookie)."""
    return st.components.v2.component("workbench_session_cookie", js=(HERE / "cookie.js").read_text(encoding="utf-8"))


def session_cookie(data: dict, on_stored: Callable[[], None] | None = None) -> None:
    """Set or clear the session cookie in the browser (data from workbench.ui.cookies start/end); drawn each
    run, each data acts once in the page. Served by serve.py, on_stored runs when the server has answered the
    sign-in's code (the component's "stored" trigger: {code, ok, status})."""
    key = f"wb.cookie.{data['name']}"
    if on_stored is None:
        _cookie_component()(key=key, data=data)
    else:
        _cookie_component()(key=key, data=data, on_stored_change=on_stored)


@functools.cache
def _tab_user_component():
    """The registered tab memory (no markup: it compares this tab's user with the one it had before)."""
    return st.components.v2.component("workbench_tab_user", js=(HERE / "tabuser.js").read_text(encoding="utf-8"))


def tab_user(study: str, user: str, resumed: bool, on_changed: Callable[[dict], None]) -> None:
    """Tell the tab who it is signed in as; on_changed({from, to}) runs when a resumed session is another user's
    than the one this tab had before (a reload after someone else signed in in this browser)."""
    key = f"wb.tab.user.{study}"

    def changed() -> None:
        """The component's "changed" trigger."""
        on_changed((st.session_state.get(key) or {}).get("changed") or {})

    _tab_user_component()(
        key=key, data={"study": study, "user": user, "resumed": bool(resumed)}, on_changed_change=changed
    )


def cookie_answer(name: str) -> dict:
    """The server's answer to the sign-in's code, as the cookie component reported it ({} before it has)."""
    return (st.session_state.get(f"wb.cookie.{name}") or {}).get("stored") or {}


def form(
    key: str,
    data: dict,
    on_action: Handler,
    on_draft: Callable[[dict], None] | None = None,
    presses: Presses | None = None,
) -> None:
    """Mount a keyboard form: on_action runs once per Enter/arrow trigger, on_draft on each debounced draft.
    presses (the study) records each press applied, so that a resend reaching another session or server
    process is answered, not applied again.

    data: item {id, heading, caption, text | html}, groups [{id, title, kind multi|one, options
    [{id, label, key, hint}]}], values {group id: list | id}, text {id, label, placeholder} or None,
    require [{ids, message}], nav {prev, next, skip} or None, save_label, help, context (echoed back).
    """
    replayed = st.session_state.pop(state.kbd_inbox(key), None)
    if replayed:  # AppTest cannot run the browser half: events queued there take the same path, then redraw
        for kind, payload in replayed:
            if kind == "action":
                _apply_action(key, payload, on_action, presses)
            else:
                _apply_draft(key, payload, on_draft)
        st.rerun()
    ack = ANSWERS.get(_ident(key, None))
    _form_component()(
        key=key,
        data={**data, "acked": ack["seq"], "error": ack.get("error")},
        default={"draft": None},
        on_action_change=functools.partial(_on_action, key, on_action, presses),
        on_draft_change=functools.partial(_on_draft, key, on_draft),
        width="stretch",
    )


def _on_action(key: str, handler: Handler, presses: Presses | None) -> None:
    """Component callback: the trigger of this rerun."""
    _apply_action(key, (st.session_state.get(key) or {}).get("action"), handler, presses)


def _on_draft(key: str, handler) -> None:
    """Component callback: the draft state changed."""
    _apply_draft(key, (st.session_state.get(key) or {}).get("draft"), handler)


class _Answers:
    """The triggers applied, per browser page and form: {seq, error} (process-wide, bounded).

    Kept outside session state and guarded by a lock: under load Streamlit may start a new script
    thread (or a new session, after a reconnect) while the old one still runs a callback, and the
    browser resends an unanswered trigger; without this the same Enter was applied twice."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.answers: dict = {}
        self.locks: dict = {}
        self.lock = threading.Lock()

    def lock_for(self, ident: tuple) -> threading.Lock:
        """The lock that serialises one page's form."""
        with self.lock:
            return self.locks.setdefault(ident, threading.Lock())

    def get(self, ident: tuple) -> dict:
        """The last answer for one page's form."""
        with self.lock:
            return self.answers.get(ident, {"seq": 0, "error": None})

    def put(self, ident: tuple, answer: dict) -> None:
        """Record an answer (the oldest pages are forgotten first)."""
        with self.lock:
            self.answers.pop(ident, None)
            self.answers[ident] = answer
            while len(self.answers) > self.size:
                old = next(iter(self.answers))
                self.answers.pop(old)
                self.locks.pop(old, None)


ANSWERS = _Answers()


def _ident(key: str, page) -> tuple:
    """A form on one browser page (the page's random id, sent with every event)."""
    if not page:  # until the page's first event names it (and in AppTest, which sends none): this session's own id
        page = st.session_state.setdefault(state.KBD_PAGE, "session-" + secrets.token_hex(8))
    return (str(page), key)


def _apply_action(key: str, payload, handler: Handler, presses: Presses | None = None) -> None:
    """Apply a trigger once: a sequence number at or below the last answered one is a resend (in this process), and
    a press already claimed in the study (by another session or server process) is answered with its answer."""
    if not isinstance(payload, dict) or not isinstance(payload.get("seq"), int):
        return
    if payload.get("page"):
        st.session_state[state.KBD_PAGE] = str(payload["page"])
    ident = _ident(key, payload.get("page"))
    with ANSWERS.lock_for(ident):
        last = ANSWERS.get(ident)
        if payload["seq"] <= last["seq"]:
            return
        content = (payload.get("kind"), payload.get("item"), payload.get("values"))
        if content[0] == "save" and last.get("saved") == content:
            # the same content saved again on the same item under another sequence number: stored once, answered
            # again (a guard kept from before the cause, a replayed interrupted trigger, was found: see below)
            ANSWERS.put(ident, {**last, "seq": payload["seq"]})
            return
        try:
            claim = presses.claim_press(ident[0], key, payload["seq"]) if presses is not None else None
        except WorkbenchError as exc:  # e.g. the account was disabled meanwhile: nothing is applied
            ANSWERS.put(ident, {**last, "seq": payload["seq"], "error": f"Not saved: {exc}"})
            return
        if claim is not None and claim.state != "new":
            _answer_again(ident, last, payload["seq"], claim)
            return
        # Taken before it is applied: Streamlit checks for a newer rerun request at every session-state access, even
        # inside this callback, and raises there; the next run then replays the interrupted run's trigger. A handler
        # interrupted after its store (a note, then state.bump) was applied again by that replay: one Enter stored
        # the note twice, 1.3 s apart, under load. Now the replay finds the press taken and is not applied.
        ANSWERS.put(ident, {"seq": payload["seq"], "error": None, "saved": last.get("saved")})
        error: str | None = None  # also when Streamlit interrupts the handler: it ran up to one of its yield points
        try:
            with _uninterrupted():
                error = handler(payload)
        except WorkbenchError as exc:  # a refusal the reader can act on; anything else is a bug Streamlit shows
            error = f"Not saved: {exc}"
        except Exception:
            error = "Not saved: an error on the server (shown on the page)."
            raise
        finally:  # whatever happened: a resend or a replay of this press is answered with this, never applied again
            saved = content if content[0] == "save" and error is None else last.get("saved")
            ANSWERS.put(ident, {"seq": payload["seq"], "error": error, "saved": saved})
            if presses is not None:
                with contextlib.suppress(WorkbenchError):  # this process keeps the answer all the same
                    presses.finish_press(ident[0], key, payload["seq"], error)


@contextlib.contextmanager
def _uninterrupted():
    """Run a press's handler to its end: Streamlit checks for a newer rerun request at every session-state access
    (even inside a callback) and raises there, which could stop a handler between its store and the rest of its
    work (the next item, the answer) or before its store. The newer rerun is taken at the run's next yield point,
    once the press is applied. Without Streamlit's script context (or if its internals change), nothing is held:
    the press is still taken before it is applied, so it is never applied twice."""
    ctx = get_script_run_ctx(suppress_warning=True)
    safe = getattr(ctx, "session_state", None)
    check = getattr(safe, "_yield_callback", None)
    if check is None:
        yield
        return
    object.__setattr__(safe, "_yield_callback", _no_yield)
    try:
        yield
    finally:
        object.__setattr__(safe, "_yield_callback", check)


def _no_yield() -> None:
    """A session-state access that does not stop the handler for a newer rerun."""


def _answer_again(ident: tuple, last: dict, seq: int, claim) -> None:
    """Answer a press claimed before (by another session or server process) without applying it again."""
    if claim.state == "pending" and claim.seconds_ago < PENDING_S:
        return  # being applied elsewhere right now: no answer yet; the page resends and finds it
    ANSWERS.put(ident, {**last, "seq": seq, "error": INTERRUPTED if claim.state == "pending" else claim.error})


def _apply_draft(key: str, draft, handler) -> None:
    """Hand a draft to the page (the browser sends the whole draft each time: the newest wins)."""
    if isinstance(draft, dict) and draft.get("page"):
        st.session_state[state.KBD_PAGE] = str(draft["page"])
    if handler is not None and isinstance(draft, dict) and isinstance(draft.get("values"), dict):
        handler(draft)


def replay(at, key: str, *events: tuple[str, dict]) -> None:
    """Queue browser events for the next AppTest run: ("action", payload) or ("draft", draft)."""
    at.session_state[state.kbd_inbox(key)] = list(events)
