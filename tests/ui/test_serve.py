"""workbench/ui/serve.py: the app's server answers a page's own URL with Streamlit's page naming the server's
base URL (the browser test test_reload_keeps_the_user_signed_in_and_on_the_same_item sees no 404 on a reload)."""

from __future__ import annotations


def test_the_server_knows_every_page_of_the_app():
    from workbench.ui import app, serve

    assert serve.page_paths() == {row[0] for row in app.PAGES}


def test_the_page_names_the_base_url_before_streamlit_starts():
    from workbench.ui import serve

    html = serve.page_html("/").decode("utf-8")
    named, streamlit = html.index("BACKEND_BASE_URL"), html.index('<script type="module"')
    assert named < streamlit and "window.location.origin" in html and "http" not in html[named - 200 : named + 200]


def test_workbench_app_serves_the_asgi_app():
    from workbench.cli import app_command

    cmd = app_command(8501)
    assert cmd[cmd.index("run") + 1].endswith("workbench/ui/serve.py")


def test_a_sign_in_code_is_redeemed_once_and_expires(monkeypatch):
    from workbench.ui import cookies

    monkeypatch.setitem(cookies.SERVED, "on", True)
    data = cookies.start("wb_session_0123456789ab", "wbs_token", 3600)
    assert "value" not in data and data["endpoint"] == "/_wb/session", "the token never reaches the page"
    assert cookies.redeem(data["code"]) == ("wb_session_0123456789ab", "wbs_token", 3600)
    assert cookies.redeem(data["code"]) is None
    late = cookies.start("wb_session_0123456789ab", "wbs_token", 3600)["code"]
    name, token, age, _ = cookies._codes[late]
    cookies._codes[late] = (name, token, age, 0.0)  # its two minutes are over
    assert cookies.redeem(late) is None


def test_without_the_server_the_component_sets_the_cookie_itself(monkeypatch):
    from workbench.ui import cookies

    monkeypatch.setitem(cookies.SERVED, "on", False)
    data = cookies.start("wb_session_0123456789ab", "wbs_token", 3600)
    assert data["value"] == "wbs_token" and "endpoint" not in data


def test_the_cookie_endpoint_sets_an_http_only_cookie_and_refuses_other_requests(monkeypatch):
    from starlette.testclient import TestClient

    from workbench.ui import cookies, serve

    def streamlit(scope, receive, send):  # never reached by the cookie endpoint's requests
        raise AssertionError(scope["path"])

    monkeypatch.setitem(cookies.SERVED, "on", False)  # put back after the test (the middleware turns it on)
    client = TestClient(serve.Workbench(streamlit))
    code = cookies.start("wb_session_0123456789ab", "wbs_token", 3600)["code"]
    assert client.post("/_wb/session", content=code).status_code == 403, "without the page's header"
    answer = client.post("/_wb/session", content=code, headers={"X-Workbench": "session"})
    assert answer.status_code == 204
    assert (
        answer.headers["set-cookie"]
        == "wb_session_0123456789ab=wbs_token; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict"
    )
    assert client.post("/_wb/session", content=code, headers={"X-Workbench": "session"}).status_code == 403, "used once"
    ended = client.post("/_wb/session/end", content="wb_session_0123456789ab", headers={"X-Workbench": "session"})
    assert ended.status_code == 204 and "Max-Age=0; HttpOnly" in ended.headers["set-cookie"]
    assert client.post("/_wb/session/end", content="other; x=1", headers={"X-Workbench": "session"}).status_code == 400
