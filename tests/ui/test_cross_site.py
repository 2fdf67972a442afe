"""Another site's page cannot act as the signed-in reader (issue 32, item 1: cross-site WebSocket hijacking).

Every port of one host is the same *site*, so the reader's SameSite=Strict session cookie goes with a
WebSocket opened by a page on http://127.0.0.1:<other port>. The attacker here is a second HTTP server on
loopback serving a page that opens the app's /_stcore/stream, asks for a script run (a real BackMsg, as
Streamlit's own frontend sends it) and posts to the app. The same script run from the app's own page
connects and is answered: the check tells the two apart, it does not just break the WebSocket.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading

import pytest
from test_browser import CHROMIUM, TIMEOUT_MS, _free_port, browser, serve, sign_in  # noqa: F401
from test_reading_keyboard import BOSS, READER, burst_study  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

# Opens the app's WebSocket, asks for a script run of Home, and collects everything the app answers.
PROBE = """async ([app, rerun]) => {
  const seen = {opened: false, bytes: 0, text: '', closed: null, post: null};
  const bytes = Uint8Array.from(atob(rerun), c => c.charCodeAt(0));
  try {
    const answer = await fetch(app + '/_wb/session/end', {method: 'POST', body: 'x', mode: 'no-cors', credentials: 'include'});
    seen.post = answer.type === 'opaque' ? 'sent' : answer.status;
  } catch (e) { seen.post = 'failed'; }
  await new Promise(done => {
    const ws = new WebSocket(app.replace('http', 'ws') + '/_stcore/stream', ['streamlit']);
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => { seen.opened = true; ws.send(bytes); };
    ws.onmessage = (m) => {
      seen.bytes += m.data.byteLength;
      seen.text += new TextDecoder('utf-8', {fatal: false}).decode(m.data);
      if (seen.text.includes('Acting as')) { ws.close(); }
    };
    ws.onclose = (e) => { seen.closed = e.code; done(); };
    ws.onerror = () => {};
    setTimeout(() => { try { ws.close(); } catch (e) {} done(); }, 60000);
  });
  return seen;
}"""


def rerun_message() -> str:
    """A BackMsg asking for a script run of the app's first page, base64 (what Streamlit's frontend sends)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    msg = BackMsg()
    msg.rerun_script.query_string = ""
    msg.rerun_script.page_name = ""
    return base64.b64encode(msg.SerializeToString()).decode("ascii")


@pytest.fixture(scope="module")
def app_server(burst_study):
    yield from serve(burst_study)


@pytest.fixture
def attacker():
    """An HTTP server on another loopback port: every path answers an empty page (the probe runs in it)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = b"<!doctype html><title>elsewhere</title><p>another site</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", _free_port()), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def signed_in_cookie(context) -> None:
    """Wait until the browser holds the session cookie (the attacker needs it to be sent)."""
    page = context.pages[0]
    for _ in range(600):
        if any(c["name"].startswith("wb_session_") for c in context.cookies()):
            return
        page.wait_for_timeout(200)
    raise AssertionError("the session cookie never arrived")


def test_a_page_of_another_port_cannot_use_the_readers_session(browser, app_server, attacker):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    sign_in(pg, app_server, *READER)
    signed_in_cookie(context)

    evil = context.new_page()
    evil.set_default_timeout(TIMEOUT_MS)
    evil.goto(attacker)
    seen = evil.evaluate(PROBE, [app_server, rerun_message()])
    assert not seen["opened"] and seen["bytes"] == 0, f"another site's page talked to the app: {json.dumps(seen)[:300]}"
    assert "burst" not in seen["text"]

    own = pg.evaluate(PROBE, [app_server, rerun_message()])
    assert own["opened"] and "Acting as" in own["text"] and "dr\\-burst" in own["text"], (
        "the app's own page is answered (the probe can see a hijack)"
    )
    pg.reload()
    pg.get_by_text(f"Acting as {READER[0]}").wait_for()  # the other site's POST did not end the session
    context.close()


def test_the_middleware_refuses_foreign_origins_and_admits_listed_ones(monkeypatch):
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from workbench.ui import cookies, serve

    async def streamlit(scope, receive, send):
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": "hello"})
            await send({"type": "websocket.close", "code": 1000})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    monkeypatch.setitem(cookies.SERVED, "on", False)
    listed = []
    monkeypatch.setattr(serve, "listed_origins", lambda: listed)
    client = TestClient(serve.Workbench(streamlit))  # the app at http://testserver
    own, other = {"Origin": "http://testserver"}, {"Origin": "http://testserver:9999"}
    with client.websocket_connect("/_stcore/stream", headers=own) as ws:
        assert ws.receive_text() == "hello"
    for headers in (other, {"Origin": "null"}, {}, {"Origin": "https://testserver"}):
        with pytest.raises(WebSocketDisconnect), client.websocket_connect("/_stcore/stream", headers=headers):
            pass
    assert client.post("/_stcore/upload_file/x", headers=other).status_code == 403
    assert client.put("/_stcore/upload_file/x", headers=other).status_code == 403
    assert client.delete("/_stcore/upload_file/x", headers=other).status_code == 403
    assert client.post("/_stcore/upload_file/x", headers=own).status_code == 200
    assert client.get("/", headers=other).status_code == 200, "reading a page is not a change"
    listed.append("https://reading.example.org")
    proxied = {"Origin": "https://reading.example.org"}
    assert client.post("/_stcore/upload_file/x", headers=proxied).status_code == 200
    with client.websocket_connect("/_stcore/stream", headers=proxied) as ws:
        assert ws.receive_text() == "hello"


def test_workbench_app_checks_the_origins_an_admin_lists():
    import click

    from workbench.cli import checked_origin

    assert checked_origin("https://Reading.Example.org/") == "https://reading.example.org"
    assert checked_origin("http://10.0.0.5:8501") == "http://10.0.0.5:8501"
    for bad in ("reading.example.org", "https://reading.example.org/app", "ftp://x", "https://u:p@x"):
        with pytest.raises(click.BadParameter, match="origin|more than"):
            checked_origin(bad)
