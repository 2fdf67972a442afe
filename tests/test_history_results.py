"""`history` lists results only (issue 30 item 8): a run with no answers (401s) or some failed answers is
marked as such and left out of the trend unless asked for. Real CLI, real litellm, real HTTP to the fake server.
"""

from __future__ import annotations

import csv
import io

import pytest
from click.testing import CliRunner
from fake_llm_server import MALFORMED_REPLY, running_server
from test_runs import Oracle

from workbench.cli import main


def cli(wb, *args: str):
    return CliRunner().invoke(main, [*args, "--study", str(wb.root)], env={"COLUMNS": "200"})


@pytest.fixture
def three_runs(small_study):
    """Run ids (finished, failed: every call a 401, incomplete: one reply unreadable) on the small cohort."""
    wb = small_study
    finished = wb.start_run("dev").run_id  # the offline labeller: every pair answered
    with running_server(behaviour="401") as server:
        bad_key = cli(
            wb, "run", "--cohort", "dev", "--labels", "edema", "--model", "openai/fake", "--api-base", server.url
        )
    assert bad_key.exit_code == 3, bad_key.output
    with running_server() as server:
        server.answer_fn = Oracle(wb.vocab.names(), overrides={("s1", "fracture"): MALFORMED_REPLY})
        partly = cli(
            wb, "run", "--cohort", "dev", "--labels", "fracture", "--model", "openai/fake", "--api-base", server.url
        )
    assert partly.exit_code == 3, partly.output
    failed, incomplete = sorted(int(i) for i in wb.runs("dev")["id"] if int(i) != finished)
    return wb, finished, failed, incomplete


def test_runs_without_answers_are_no_result_and_say_how_to_retry(three_runs):
    wb, finished, failed, incomplete = three_runs
    out = cli(wb, "history", "--cohort", "dev")
    assert out.exit_code == 0, out.output
    table = out.output.split("runs with failed or missing answers")[0]
    rows = [line.split()[0] for line in table.splitlines() if line.split() and line.split()[0].isdigit()]
    assert rows == [str(finished)]
    assert f"run {failed} (prompt" in out.output and "failed, no answer at all" in out.output
    assert f"run {incomplete} (prompt" in out.output and "incomplete, 7 answer(s), 1 failed" in out.output
    assert f"`workbench run --retry-failed {failed}`" in out.output
    assert "no positive on either side: edema" not in out.output  # the footer speaks of the rows shown only
    assert list(wb.iteration_history("dev")["run"]) == [finished]  # the app's trend too


def test_all_lists_them_marked_and_csv_carries_the_result(three_runs):
    wb, finished, failed, incomplete = three_runs
    rows = list(csv.DictReader(io.StringIO(cli(wb, "history", "--cohort", "dev", "--all", "--format", "csv").output)))
    assert {int(r["run"]): r["result"] for r in rows} == {
        finished: "finished",
        failed: "failed",
        incomplete: "incomplete",
    }
    plain = list(csv.DictReader(io.StringIO(cli(wb, "history", "--cohort", "dev", "--format", "csv").output)))
    assert [int(r["run"]) for r in plain] == [finished]
    table = cli(wb, "history", "--cohort", "dev", "--all").output
    assert "result" in table and "failed" in table and "runs with failed or missing answers" not in table
