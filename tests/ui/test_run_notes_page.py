"""The Runs page shows what a run chose on the way (issue 33): the `note:` lines the CLI prints after a run, e.g.
the concurrency fitted to a local server that answers one call at a time, from the same RunSummary."""

from __future__ import annotations

from fake_llm_server import running_server
from test_app_pages import all_text, assert_clean, button, open_page, study, wait_for_job, workbench  # noqa: F401


def test_a_run_on_a_one_call_server_shows_the_concurrency_it_chose(study):
    with running_server(keywords=("effusion",), owned_by="me") as srv:  # as llama-cpp-python's server describes itself
        wb = workbench(study)
        wb.config.labeller = {"model": "openai/fake", "api_base": srv.url, "max_retries": 0, "concurrency": 8}
        wb.save_config()
        at = open_page(study, "runs")
        at.multiselect[0].select("atelectasis")
        button(at, "Start run").click().run()
        assert_clean(at)
        wait_for_job(at, "run")
    text = all_text(at)
    assert at.success, text  # the run itself went well
    # before: the note was printed by `workbench run` only; the page said nothing of the concurrency it chose
    assert "Note: concurrency 1 instead of 8: the server answers 1 call(s) at once" in text
