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
    assert named < streamlit and "window.location.origin" in html and "http" not in html[named - 200:named + 200]


def test_workbench_app_serves_the_asgi_app():
    from workbench.cli import app_command

    cmd = app_command(8501)
    assert cmd[cmd.index("run") + 1].endswith("workbench/ui/serve.py")
