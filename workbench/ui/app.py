"""The Streamlit app: navigation only. Pages live in app_pages/ as thin render(wb) functions.

The study comes from $WORKBENCH_STUDY (`workbench app` / `workbench demo` set it). The Workbench
(with its database engine) is the only cached resource; the signed-in actor lives in session
state and each rerun acts through a cheap per-actor view of the shared Workbench.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

from workbench import runtime  # noqa: E402

runtime.single_threaded_blas()  # takes effect if numpy is not loaded yet; `workbench app` sets it for the server

import streamlit as st  # noqa: E402

from workbench.ui import components, cookies, keyboard, state  # noqa: E402
from workbench.ui.app_pages import (  # noqa: E402
    adjudicate,
    annotate,
    audit,
    disagreements,
    freeze_score,
    home,
    labelset,
    optimise,
    prompts,
    runs,
    settings,
)

# url path, title, icon, module, the permission a role needs to see the page. Icons are Streamlit's own
# Material symbols (its bundled font: an emoji renders as an empty box on a workstation without an
# emoji font). The browser tab's icon is an inline SVG (a data: URL): a ":material/...:" favicon is
# fetched from an outside font server, and an emoji one is an emoji.
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><rect width="24" height="24" rx="5" fill="#31333f"/>'
    '<path d="M12 4v16M11 8C9 8 7 8.5 6 10M13 8c2 0 4 .5 5 2M11 12c-2 0-4 .5-5 2M13 12c2 0 4 .5 5 2M11 16c-2 0-3.5'
    ' .5-4.5 1.5M13 16c2 0 3.5.5 4.5 1.5" stroke="#fff" stroke-width="1.6" fill="none" stroke-linecap="round"/></svg>'
)
PAGES = (
    ("home", "Home", ":material/home:", home, "read"),
    ("labelset", "Label set", ":material/checklist:", labelset, "annotate"),
    ("annotate", "Annotate", ":material/edit_note:", annotate, "annotate"),
    ("adjudicate", "Adjudicate", ":material/gavel:", adjudicate, "adjudicate"),
    ("disagreements", "Disagreements", ":material/compare_arrows:", disagreements, "note"),
    ("prompts", "Prompts", ":material/description:", prompts, "see_unblinded"),
    ("runs", "Runs", ":material/play_arrow:", runs, "see_unblinded"),
    ("optimise", "Optimise", ":material/target:", optimise, "see_unblinded"),
    ("freeze", "Freeze and score", ":material/inventory_2:", freeze_score, "see_unblinded"),
    ("settings", "Settings", ":material/settings:", settings, "settings"),
    ("audit", "Audit", ":material/history:", audit, "adjudicate"),
)


@st.cache_resource(max_entries=8, show_spinner="Opening the study ...")
def open_study(path: str):
    """The study's Workbench (engine and all), shared by every session."""

    wb = state.workbench_class()(Path(path))
    wb.migrate()
    return state.attach_revision(wb)


def _sign_in(base):
    """The acting user: the local admin (auth none), or whoever signed in; None while signing in."""
    from workbench.services import Actor, PermissionDenied
    from workbench.study import load_config

    mode = load_config(base.root).auth  # fresh: Settings may have changed it since the study was opened
    if mode == "none":
        return Actor("local", "admin")
    if state.actor() is None and mode == "local":
        _resume(base)
    if state.actor() is not None:
        try:  # the role and the browser session are re-read on every request: a sign-out elsewhere acts at once
            return base.as_actor(state.actor()).current_actor()
        except PermissionDenied as exc:
            _forget()
            st.error(str(exc))
    st.title("Sign in")
    if problem := st.session_state.pop(state.SIGNIN_PROBLEM, None):
        st.error(problem)
    if st.session_state.pop(state.CLEAR_COOKIE, False):
        keyboard.session_cookie(cookies.end(_cookie_name(base), _base_url()))
    if mode == "oidc":
        if not getattr(st.user, "is_logged_in", False):
            st.button("Sign in with your organisation", on_click=st.login, type="primary")
            return None
        try:
            actor = base.actor_for(str(st.user.get("email") or st.user.get("sub")))
        except PermissionDenied as exc:
            st.error(components.md(str(exc)))
            st.button("Sign out", on_click=st.logout)
            return None
        state.set_actor(actor)
        return actor
    with st.form("signin"):
        user = st.text_input("User", key=state.SIGNIN_USER)
        password = st.text_input("Password", type="password", key=state.SIGNIN_PASSWORD)
        submitted = st.form_submit_button("Sign in", type="primary")
    if submitted:
        try:
            actor = base.authenticate(user, password, _address())
        except PermissionDenied as exc:
            st.error(components.md(str(exc) or "Wrong user or password."))
            return None
        from workbench.services.team import WEB_SESSION_HOURS, token_digest

        token = base.as_actor(actor).start_web_session(address=_address())
        state.set_actor(dataclasses.replace(actor, session=token_digest(token)))
        st.session_state[state.RESUMED] = False
        st.session_state[state.SESSION_TOKEN] = token
        given = cookies.start(_cookie_name(base), token, int(WEB_SESSION_HOURS * 3600), _base_url())
        st.session_state[state.SESSION_COOKIE] = given
        if given.get("code"):  # served by serve.py: the app opens once the browser holds the cookie
            st.session_state[state.COOKIE_PENDING] = given["code"]
        st.rerun()
    return None


def _cookie_arrived(base) -> bool:
    """Whether the browser holds the session cookie of this tab's sign-in; until then the page says so and waits.

    The cookie comes from a request the page makes after the sign-in's run (cookies.py): an app opened before
    its answer would lose the session on an early reload, so the first page waits for the answer instead."""
    code = st.session_state.get(state.COOKIE_PENDING)
    if not code:
        return True
    name = _cookie_name(base)
    answer = keyboard.cookie_answer(name)
    if answer.get("code") == code:
        st.session_state.pop(state.COOKIE_PENDING, None)
        st.session_state.pop(state.SESSION_COOKIE, None)  # the code is spent: nothing more to give the browser
        if answer.get("ok"):
            return True
        _sign_out(base)  # a browser without the cookie would lose this session at the next reload
        st.session_state[state.SIGNIN_PROBLEM] = (
            f"The browser did not keep the session (the server answered {answer.get('status') or 'nothing'}); "
            "sign in again. Cookies must be allowed for this address."
        )
        st.rerun()
    st.title("Signing in")
    st.caption("Handing this browser its session ...")
    # the trigger alone reruns this page; its answer is read above (keyboard.cookie_answer)
    keyboard.session_cookie(st.session_state[state.SESSION_COOKIE], on_stored=lambda: None)
    return False


def _address() -> str:
    """The browser's address for the audit of a sign-in or sign-out ("browser" when Streamlit does not know it)."""
    try:
        ip, headers = st.context.ip_address, st.context.headers
    except Exception:  # no browser context (AppTest, bare mode)
        return "browser"
    if ip:
        return str(ip)
    # Streamlit gives no address for a loopback connection (127.0.0.1, ::1): the browser is on this machine
    return "loopback (this machine)" if isinstance(headers, Mapping) and headers.get("host") else "browser"


def _base_url() -> str:
    """The server's base URL path ("/" unless served under a prefix): where the session cookie's endpoint is."""
    return "/" + (st.get_option("server.baseUrlPath") or "").strip("/")


def _cookie_name(base) -> str:
    """The session cookie's name: one per study (cookies are shared by every port of a host)."""

    return "wb_session_" + hashlib.sha256(str(base.root).encode("utf-8")).hexdigest()[:12]


def _resume(base) -> None:
    """After a reload (a new Streamlit session), sign in again from the browser-session cookie if it is valid."""
    from workbench.services import PermissionDenied

    try:
        token = st.context.cookies.get(_cookie_name(base))
    except Exception:  # no browser context (AppTest, bare mode)
        token = None
    if not isinstance(token, str) or not token:  # AppTest's context hands out a stand-in object
        return
    try:
        actor = base.resume_web_session(token)
        state.set_actor(actor)
        st.session_state[state.RESUMED] = True
        st.session_state[state.SESSION_TOKEN] = token
        ended = st.session_state.pop(state.ENDED_USER, None)
        if ended and ended != actor.user:  # the browser's cookie is now another user's: never switch silently
            state.flash(
                f"This tab was signed in as {ended}; that session ended, and this browser is now signed in as "
                f"{actor.user} (the last sign-in in this browser). Sign out if this is not you.",
                "warning",
            )
    except PermissionDenied:
        st.session_state[state.CLEAR_COOKIE] = True  # ended, expired or revoked: the browser forgets it


def _forget() -> None:
    """This tab's session ended elsewhere (a sign-out in another tab, a revoked session): forget its user here
    without touching the browser's cookie, which may already be another user's."""
    actor = state.actor()
    st.session_state[state.ENDED_USER] = actor.user if actor else None
    st.session_state.pop(state.SESSION_TOKEN, None)
    st.session_state.pop(state.SESSION_COOKIE, None)
    state.set_actor(None)


def _sign_out(base) -> None:
    """End the browser session (its token stops working) and forget the actor."""
    token = st.session_state.pop(state.SESSION_TOKEN, None)
    st.session_state.pop(state.SESSION_COOKIE, None)
    if token:
        base.end_web_session(token, _address())
    st.session_state[state.CLEAR_COOKIE] = True
    state.set_actor(None)


def _tab_changed(change: dict) -> None:
    """This tab was another user's before its reload: the browser's cookie is now someone else's; say so."""
    if change.get("from") and change.get("to"):
        state.flash(
            f"This tab was signed in as {change['from']}; after the reload it is signed in as {change['to']}, "
            "the last sign-in in this browser. Sign out if this is not you.",
            "warning",
        )


def _sidebar(wb) -> None:
    """Who is acting, which model labels, and a way to pick up changes made outside the app."""
    st.caption(f"Study **{components.md(wb.config.name)}** · vocabulary {components.md(wb.vocab.name)}")
    st.caption(f"Acting as **{components.md(wb.actor.user)}** ({wb.actor.role})")
    if st.session_state.get(state.SESSION_COOKIE):  # after a sign-in (a resumed session already has its cookie)
        keyboard.session_cookie(st.session_state[state.SESSION_COOKIE])
    if wb.config.auth == "local":
        keyboard.tab_user(_cookie_name(wb), wb.actor.user, st.session_state.get(state.RESUMED, False), _tab_changed)
    if wb.config.auth != "none" and st.button("Sign out", key=state.widget_key("signout")):
        _sign_out(wb)
        if wb.config.auth == "oidc":
            st.logout()
        st.rerun()
    components.model_notice(wb)
    if st.button(
        "Reload data", key=state.widget_key("reload"), help="Pick up changes made outside this app (CLI, other servers)"
    ):
        state.bump(wb)


def _requested_page() -> str | None:
    """The page named in the browser's URL path, if any."""

    try:
        path = urlparse(st.context.url or "").path.strip("/").rsplit("/", 1)[-1]
    except Exception:  # no browser context (AppTest, bare mode)
        return None
    return path if path in {p[0] for p in PAGES} else None


def _first_page(role: str, allowed: list) -> str:
    """The page a role lands on: Annotate for a reader (reading is all a reader does), else the first (Home)."""
    urls = [p[0] for p in allowed]
    return "annotate" if role == "reader" and "annotate" in urls else urls[0]


def _open_the_link(pages: list, nav) -> None:
    """Right after a sign-in, open the page and item of the link the browser came with (its path and query),
    at its own address: the default page would show it at "/", and a reload of "/" is not the link."""
    wanted = st.session_state.pop(state.START_PAGE, None)
    query = st.session_state.pop(state.START_QUERY, None) or {}
    page = next((p for p in pages if p.url_path == wanted), None)
    if page is None:  # no link, or a link to a page this role does not see
        return
    if nav.url_path == page.url_path and st.query_params.to_dict() == query:  # already there
        return
    st.switch_page(page, query_params=query)


def _land_on_start(pages: list, nav, start: str, user: str) -> None:
    """A session that opens at the root goes to its role's start page once per signed-in user (a reader reads:
    Annotate), at that page's own address; a link to a page, or a later click on Home, is left where it is."""
    if st.session_state.get(state.LANDED) == user:
        return
    st.session_state[state.LANDED] = user
    page = next((p for p in pages if p.url_path == start), None)
    if page is None or page is pages[0] or nav.url_path != pages[0].url_path or _requested_page() is not None:
        return
    st.switch_page(page, query_params=st.query_params.to_dict())


def _runner(module, wb):
    """A page callable bound to this rerun's Workbench."""

    def run() -> None:
        components.flashes()
        module.render(wb)

    run.__name__ = f"page_{module.__name__.rsplit('.', 1)[-1]}"
    return run


def main(study: str | None = None, start: str | None = None) -> None:
    """Build the navigation for the signed-in role and run the chosen page."""
    from workbench.services import PERMISSIONS
    from workbench.study import StudyError, load_config, resolve_study_path

    st.set_page_config(page_title="Workbench", page_icon=FAVICON, layout="wide")
    try:
        base = open_study(str(resolve_study_path(study or os.environ.get("WORKBENCH_STUDY"))))
    except StudyError as exc:
        st.error(components.md(f"Cannot open the study: {exc}"))
        st.stop()
    components.exposure_notices(base)
    if state.actor() is None and load_config(base.root).auth == "local":
        _resume(base)  # a reload with a valid session cookie: the URL's own page opens (not made the default page)
    if state.actor() is None and base.config.auth != "none":  # a deep link (/annotate, /disagreements?...)
        st.session_state.setdefault(state.START_PAGE, _requested_page())  # survives the sign-in form
        st.session_state.setdefault(state.START_QUERY, st.query_params.to_dict())
    actor = _sign_in(base)
    if actor is None or not _cookie_arrived(base):
        st.stop()
    wb = state.request_scoped(state.attach_revision(base.as_actor(actor), base.ui_revision))
    allowed = [p for p in PAGES if actor.role in PERMISSIONS[p[4]]]
    start = start if start in {p[0] for p in allowed} else _first_page(actor.role, allowed)
    # the first page is the root ("/"): Streamlit serves its default page there only, so a role's start page made
    # the default (Annotate for a reader) would have no address of its own and a link to it would be "not found"
    pages = [
        st.Page(_runner(module, wb), title=title, icon=icon, url_path=url, default=(url == allowed[0][0]))
        for url, title, icon, module, _ in allowed
    ]
    nav = st.navigation(pages)
    _open_the_link(pages, nav)
    _land_on_start(pages, nav, start, actor.user)
    with st.sidebar:
        _sidebar(wb)
    nav.run()


if __name__ == "__main__":
    main()
