"""The browser session's cookie under `auth: local`: HttpOnly, set by the server, never readable by the page.

A script run that signs a user in cannot answer an HTTP request, so it leaves the session token here
under a one-time code that lives two minutes; a small component in the page posts the code to
`_wb/session` and the server's answer (workbench/ui/serve.py) sets the cookie: HttpOnly, SameSite=Strict,
Secure on https. Sign-out posts to `_wb/session/end`, whose answer clears it. Served without serve.py
(a bare `streamlit run workbench/ui/app.py`), the component sets an ordinary cookie itself.
"""

from __future__ import annotations

import re
import secrets
import threading
import time

ENDPOINT = "_wb/session"
NAME = re.compile(r"^wb_session_[0-9a-f]{12}$")
CODE_SECONDS = 120
HEADER = "x-workbench"  # a header no other site's form or link can send (a request with it needs CORS)

SERVED = {"on": False}  # set when workbench/ui/serve.py serves the app (its middleware answers ENDPOINT)
_codes: dict[str, tuple[str, str, int, float]] = {}
_lock = threading.Lock()


def start(name: str, token: str, max_age_s: int, base: str = "/") -> dict:
    """The cookie component's data that gives the browser this session (a code to redeem, or the token itself)."""
    if not SERVED["on"]:
        return {
            "name": name,
            "action": "start",
            "value": token,
            "maxAge": int(max_age_s),
            "nonce": secrets.token_hex(8),
        }
    code = secrets.token_urlsafe(32)
    now = time.monotonic()
    with _lock:
        for old in [c for c, entry in _codes.items() if entry[3] < now]:  # unredeemed codes of pages closed early
            del _codes[old]
        _codes[code] = (name, token, int(max_age_s), now + CODE_SECONDS)
    return {"name": name, "action": "start", "code": code, "endpoint": base.rstrip("/") + "/" + ENDPOINT}


def end(name: str, base: str = "/") -> dict:
    """The cookie component's data that takes the session cookie back (after sign-out, or a dead cookie)."""
    data = {"name": name, "action": "end", "nonce": secrets.token_hex(8)}
    return {**data, "endpoint": base.rstrip("/") + "/" + ENDPOINT} if SERVED["on"] else data


def redeem(code: str) -> tuple[str, str, int] | None:
    """(cookie name, token, max age) for a code, once; None for an unknown or expired code."""
    with _lock:
        entry = _codes.pop(code, None)
    if entry is None or entry[3] < time.monotonic():
        return None
    return entry[0], entry[1], entry[2]


def header(name: str, token: str, max_age_s: int, path: str, secure: bool) -> str:
    """A Set-Cookie value (max_age 0 and an empty token clear it)."""
    return f"{name}={token}; Path={path}; Max-Age={int(max_age_s)}; HttpOnly; SameSite=Strict" + (
        "; Secure" if secure else ""
    )
