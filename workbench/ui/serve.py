"""The server of the app: Streamlit's own ASGI app (st.App) on ui/app.py, plus one middleware.

`streamlit run workbench/ui/serve.py` finds `app` and serves it (as `workbench app` does). The
middleware does two things Streamlit alone cannot:

- it answers a page's own URL (a reload, a bookmark, a shared link: /annotate?report=...) with
  Streamlit's index.html that names the server's base URL. Without it Streamlit's frontend guessed
  the server at the page's path first, and a deep link always cost two 404s and two console errors
  (/annotate/_stcore/health and /annotate/_stcore/host-config) before it connected;
- it sets and clears the browser session's cookie as an HttpOnly header (workbench/ui/cookies.py):
  a script run cannot answer an HTTP request, so without a server of our own the cookie had to be
  set by a script in the page, which any script in the page could then read.
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


class Workbench:
    """ASGI middleware: deep links and the session cookie (see the module); everything else goes to Streamlit."""

    def __init__(self, app) -> None:
        self.app = app
        cookies.SERVED["on"] = True  # the app's sign-in hands the cookie to this server from now on

    async def __call__(self, scope, receive, send) -> None:
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
