"""The Runs page shows a run with failures as a warning with its causes, never as a success (issue 13, item 1)."""

from __future__ import annotations

import socket

from test_app_pages import all_text, assert_clean, button, open_page, study, wait_for_job, workbench  # noqa: F401


def test_a_run_against_a_closed_port_is_a_warning_with_its_cause(study):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()  # nothing listens there now
    wb = workbench(study)
    wb.allow_endpoint(url.removesuffix("/v1"))  # the admin named this port (a server that is not running)
    wb.config.labeller = {"model": "openai/fake", "api_base": url, "max_retries": 0, "concurrency": 2}
    wb.save_config()
    at = open_page(study, "runs")
    at.multiselect[0].select("atelectasis").select("edema")
    button(at, "Start run").click().run()
    assert_clean(at)
    wait_for_job(at, "run")
    text = all_text(at)
    assert not at.success, [s.value for s in at.success]
    assert any("incomplete" in w.value for w in at.warning), text
    assert "stopped early: 5 calls in a row failed the same way (connection)" in text
    assert f"cannot connect to {url}" in text
    assert wb.runs().iloc[0]["status"] == "incomplete"
