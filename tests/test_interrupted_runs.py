"""Ctrl-C and SIGTERM during `workbench run` mark the run interrupted and say how to resume it (issue 21,
item 6): real child processes against the slow fake OpenAI-compatible server, sent SIGINT or SIGTERM once
some answers are stored. An interrupted run is kept apart from the results (history, metrics), a plain
`run` of the same settings refuses to start a second one when nobody can be asked, and --resume finishes it.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from conftest import ROOT
from fake_llm_server import running_server
from test_resume_kill import N_CALLS, answer, child_env, cli, stored, wait_for_answers


def interrupt_after_some_answers(
    wb, server, signum, concurrency: int = 2, answers: int = 10
) -> tuple[subprocess.CompletedProcess, int]:
    """Start a run in a child, send it signum once some answers are stored; its output and the run id."""
    db = wb.root / "workbench.db"
    child = subprocess.Popen(
        cli(
            "run",
            "--cohort",
            "dev",
            "--study",
            str(wb.root),
            "--model",
            "openai/fake",
            "--api-base",
            server.url,
            "--concurrency",
            str(concurrency),
        ),
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        run_id, done = wait_for_answers(child, db, answers)
        assert child.poll() is None and done >= answers, "the run ended, or stored nothing, before it could be stopped"
        os.kill(child.pid, signum)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err), run_id


def test_ctrl_c_marks_the_run_interrupted_says_how_to_resume_and_it_is_no_result(small_study):
    wb = small_study
    with running_server(answer_fn=answer, latency=0.2) as server:
        result, run_id = interrupt_after_some_answers(wb, server, signal.SIGINT)
        assert result.returncode == 130, (result.stdout, result.stderr)
        assert f"resume with `workbench run --resume {run_id}`" in result.stderr
        assert "Aborted!" not in result.stderr and "Traceback" not in result.stderr
        assert "Warning" not in result.stderr and "never awaited" not in result.stderr, result.stderr  # issue 30 item 9
        assert wb.run_info(run_id).status == "interrupted"
        server.settle()

        env = dict(child_env())
        history = subprocess.run(
            cli("history", "--cohort", "dev", "--study", str(wb.root)),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert history.returncode == 0 and "interrupted runs (not results" in history.stdout
        assert f"run {run_id} (prompt" in history.stdout and "no finished run" in history.stdout
        metrics = subprocess.run(
            cli("metrics", str(run_id), "--study", str(wb.root)),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert metrics.returncode == 2 and f"workbench run --resume {run_id}" in metrics.stderr

        # a plain run of the same settings, with nobody to ask: refused, naming the run and --new
        again = subprocess.run(
            cli(
                "run",
                "--cohort",
                "dev",
                "--study",
                str(wb.root),
                "--model",
                "openai/fake",
                "--api-base",
                server.url,
                "--concurrency",
                "2",
            ),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )
        assert again.returncode == 2, again.stderr
        assert f"run {run_id} of this prompt version" in again.stderr and "--new" in again.stderr
        assert stored(wb.root / "workbench.db")[0] == run_id  # no second run was started

        server.latency = 0.0
        resumed = subprocess.run(
            cli("run", "--resume", str(run_id), "--study", str(wb.root)),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert resumed.returncode == 0, resumed.stderr
    run = wb.run_info(run_id)
    assert run.status == "finished" and len(wb.predictions(run_id)) == N_CALLS
    assert list(wb.iteration_history("dev")["run"]) == [run_id] and wb.interrupted_runs("dev").empty


def test_sigterm_interrupts_too_and_new_starts_a_fresh_run_beside_it(small_study):
    wb = small_study
    with running_server(answer_fn=answer, latency=0.2) as server:
        result, run_id = interrupt_after_some_answers(wb, server, signal.SIGTERM)
        assert result.returncode == 143, (result.stdout, result.stderr)
        assert f"resume with `workbench run --resume {run_id}`" in result.stderr
        assert "Warning" not in result.stderr and "never awaited" not in result.stderr, result.stderr  # issue 30 item 9
        server.settle()
        server.latency = 0.0
        fresh = subprocess.run(
            cli(
                "run",
                "--cohort",
                "dev",
                "--study",
                str(wb.root),
                "--model",
                "openai/fake",
                "--api-base",
                server.url,
                "--new",
            ),
            cwd=ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert fresh.returncode == 0, fresh.stderr
    assert wb.run_info(run_id).status == "interrupted"
    assert wb.run_info(run_id + 1).status == "finished"
    assert list(wb.interrupted_runs("dev")["id"]) == [run_id]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_with_many_calls_in_flight_prints_no_coroutine_warning(small_study, signum):
    """Issue 30 item 9: 8 calls in flight on a fast server, stopped mid-call: litellm's half-made
    calls (built in a thread, awaited after) are closed, not left to print 'was never awaited'."""
    with running_server(answer_fn=answer, latency=0.0) as server:
        result, run_id = interrupt_after_some_answers(small_study, server, signum, concurrency=8, answers=3)
    assert result.returncode == (130 if signum == signal.SIGINT else 143), result.stderr
    assert "never awaited" not in result.stderr and "Warning" not in result.stderr, result.stderr
    assert f"resume with `workbench run --resume {run_id}`" in result.stderr
