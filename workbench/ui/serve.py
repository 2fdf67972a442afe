"""The server of the app: Streamlit's own ASGI app (st.App) on ui/app.py, plus one middleware.

`streamlit run workbench/ui/serve.py` finds `app` and serves it (as `workbench app` does). The
middleware answers a page's own URL (a reload, a bookmark, a shared link: /annotate?report=...)
with Streamlit's index.html that names the server's base URL. Without it Streamlit's frontend
guessed the server at the page's path first, and a deep link always cost two 404s and two
console errors (/annotate/_stcore/health and /annotate/_stcore/host-config) before it connected.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

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
    script = ("<script>window.__streamlit = Object.assign(window.__streamlit || {}, "
              f"{{BACKEND_BASE_URL: window.location.origin + {json.dumps(base)}}});</script>")
    marker = "<script"
    at = index.index(marker)
    return (index[:at] + script + "\n    " + index[at:]).encode("utf-8")


class DeepLinks:
    """ASGI middleware: a GET of a page's own path gets index.html with the base URL named (see the module)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            from streamlit import config

            base = "/" + (config.get_option("server.baseUrlPath") or "").strip("/")
            path = scope.get("path", "")
            rest = path[len(base.rstrip("/")):] if path.startswith(base) else ""
            if rest.startswith("/") and rest[1:] in page_paths():  # exactly /<page>: /<page>/ is redirected by Streamlit
                from starlette.responses import Response

                body = page_html(base.rstrip("/") + "/")
                response = Response(body if scope["method"] == "GET" else b"", media_type="text/html",
                                    headers={"Cache-Control": "no-cache"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


app = st.App(str(APP), middleware=[Middleware(DeepLinks)])
