"""The server of the app: Streamlit's own ASGI app (st.App) on ui/app.py, plus one middleware.

`streamlit run workbench/ui/serve.py` finds `app` and serves it (as `workbench app` does). The
middleware does two things Streamlit alone cannot:

- it answers a page's own URL (a reload, a bookmark, a shared link: /annotate?report=...) with
  Streamlit's index.html that names the server's base URL. Without it Streamlit's frontend guessed
  the server at the page's path first, and a deep link always cost two 404s and two console errors
  (/annotate/_stcore/health and /annotate/_stcore/host-config) before it connected;
- it sets and clears the browser session's cookie as an HttpOnly header (workbench/ui/cookies.py):
  a script run cannot answer an HTTP request, so without a server of our own the cookie had to be
  set by a script in the page, which any script in the page could then read;
- it accepts the page's WebSocket (/_stcore/stream) and every state-changing request (POST, PUT,
  PATCH, DELETE) only from the app's own origin (scheme, host and port) or an origin an admin listed
  (`workbench app --allow-origin URL`, Streamlit's server.corsAllowedOrigins). Streamlit alone
  accepts a WebSocket from any port of localhost or of the machine's addresses, and the session
  cookie (SameSite=Strict) is sent with it, because every port of one host is the same *site*: a page
  on http://127.0.0.1:9999 could read a signed-in reader's reports and save readings in their name.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from workbench.ui import cookies

APP = Path(__file__).resolve().with_name("app.py")


@functools.cache
def page_paths() -> frozenset[str]:
    """The URL paths of the app's pages (from ui/app.py's PAGES, without importing the app)."""
    import ast

    tree = ast.parse(APP.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PAGES" for t in node.targets):
            return frozenset(str(row.elts[0].value) for row in node.value.elts)
    raise RuntimeError("ui/app.py has no PAGES")


@functools.cache
def page_html(base: str) -> bytes:
    """Streamlit's index.html with the server's base URL set before its script runs."""
    index = (Path(st.__file__).resolve().parent / "static" / "index.html").read_text(encoding="utf-8")
    # window.__streamlit.BACKEND_BASE_URL: where the frontend looks for the server (else it tries the page's path)
    script = (
        "<script>window.__streamlit = Object.assign(window.__streamlit || {}, "
        f"{{BACKEND_BASE_URL: window.location.origin + {json.dumps(base)}}});</script>"
    )
    marker = "<script"
    at = index.index(marker)
    return (index[:at] + script + "\n    " + index[at:]).encode("utf-8")


STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def own_origin(scope) -> str | None:
    """The origin the browser gives the app's own pages: scheme and the Host header the request came to."""
    host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1").strip().lower()
    if not host:
        return None
    secure = scope.get("scheme") in ("https", "wss")
    default = ":443" if secure else ":80"
    return ("https://" if secure else "http://") + (host[: -len(default)] if host.endswith(default) else host)


def origin_allowed(origin: str | None, own: str | None, listed) -> bool:
    """Whether a request's Origin header is the app's own origin or one an admin listed (a browser always sends one)."""
    if not origin or origin == "null":
        return False
    origin = origin.strip().rstrip("/").lower()
    return origin == own or origin in {str(o).strip().rstrip("/").lower() for o in listed or ()}


def listed_origins() -> list:
    """The origins an admin listed for a proxy (`workbench app --allow-origin`, server.corsAllowedOrigins)."""
    from streamlit import config

    return list(config.get_option("server.corsAllowedOrigins") or [])


class Workbench:
    """ASGI middleware: deep links and the session cookie (see the module); everything else goes to Streamlit."""

    def __init__(self, app) -> None:
        self.app = app
        cookies.SERVED["on"] = True  # the app's sign-in hands the cookie to this server from now on

    async def __call__(self, scope, receive, send) -> None:
        if self._foreign(scope):
            await self._refuse(scope, receive, send)
            return
        if scope["type"] == "http":
            from streamlit import config

            base = "/" + (config.get_option("server.baseUrlPath") or "").strip("/")
            path = scope.get("path", "")
            rest = path[len(base.rstrip("/")) :] if path.startswith(base) else ""
            if scope["method"] in ("GET", "HEAD") and rest.startswith("/") and rest[1:] in page_paths():
                # exactly /<page>: /<page>/ is redirected by Streamlit
                await self._page(scope, receive, send, base)
                return
            if scope["method"] == "POST" and rest in ("/" + cookies.ENDPOINT, "/" + cookies.ENDPOINT + "/end"):
                await self._cookie(scope, receive, send, base, rest.endswith("/end"))
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _foreign(scope) -> bool:
        """A WebSocket or a state-changing request sent by a page of another origin (or with no Origin at all
        for a WebSocket: every browser sends one, so only a non-browser client omits it, and it needs none)."""
        if scope["type"] == "websocket":
            origin = dict(scope.get("headers") or []).get(b"origin")
        elif scope["type"] == "http" and scope.get("method") in STATE_CHANGING:
            origin = dict(scope.get("headers") or []).get(b"origin")
            if origin is None:  # not sent by a browser page (a browser sends Origin with every POST/PUT/DELETE)
                return False
        else:
            return False
        text = origin.decode("latin-1") if origin is not None else None
        return not origin_allowed(text, own_origin(scope), listed_origins())

    @staticmethod
    async def _refuse(scope, receive, send) -> None:
        """403 for a request, a closed handshake (the browser sees a failed connection) for a WebSocket."""
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        from starlette.responses import PlainTextResponse

        await PlainTextResponse("This request came from a page of another origin.", status_code=403)(
            scope, receive, send
        )

    async def _page(self, scope, receive, send, base: str) -> None:
        """Streamlit's page with the base URL named."""
        from starlette.responses import Response

        body = page_html(base.rstrip("/") + "/")
        await Response(
            body if scope["method"] == "GET" else b"", media_type="text/html", headers={"Cache-Control": "no-cache"}
        )(scope, receive, send)

    async def _cookie(self, scope, receive, send, base: str, ending: bool) -> None:
        """Redeem a sign-in's one-time code as the HttpOnly session cookie, or clear the cookie (sign-out)."""
        from starlette.requests import Request
        from starlette.responses import Response

        request = Request(scope, receive)
        if request.headers.get(cookies.HEADER) != "session":  # only the app's own page sends it (CORS)
            await Response(status_code=403)(scope, receive, send)
            return
        body = (await request.body())[:512].decode("utf-8", "replace").strip()
        secure = scope.get("scheme") == "https" or request.headers.get("x-forwarded-proto") == "https"
        path = base.rstrip("/") + "/"
        if ending:
            if not cookies.NAME.match(body):
                await Response(status_code=400)(scope, receive, send)
                return
            header = cookies.header(body, "", 0, path, secure)
        else:
            found = cookies.redeem(body)
            if found is None:
                await Response(status_code=403)(scope, receive, send)
                return
            header = cookies.header(*found, path, secure)
        await Response(status_code=204, headers={"Set-Cookie": header, "Cache-Control": "no-store"})(
            scope, receive, send
        )


app = st.App(str(APP), middleware=[Middleware(Workbench)])
