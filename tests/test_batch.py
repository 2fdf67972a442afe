"""Batch jobs (issue 25, item 5): `workbench run --batch` and `score --batch` through the provider's
batch API (litellm's create_file, create_batch, retrieve_batch, file_content) over real HTTP to the
fake OpenAI-compatible server's /v1/files and /v1/batches. No mocks: real SQLite, real Git, real
litellm, real child processes for the restart.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from conftest import copy_study
from fake_llm_server import last_user_text, running_server
from test_runs import Oracle, expected_values, remote, values

from workbench.cli import main
from workbench.errors import UserError
from workbench.study import StudyError

LABELS = ["edema", "pleural_effusion"]
N_CALLS = 8 * len(LABELS)


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    """Poll the fake server's batches every 50 ms (30 s against a real provider)."""
    monkeypatch.setenv("WORKBENCH_BATCH_POLL_S", "0.05")


@pytest.fixture
def server(small_study):
    with running_server(answer_fn=Oracle(small_study.vocab.names()), batch_polls=2) as srv:
        yield srv


def test_batch_run_answers_as_a_normal_run_with_no_chat_call_and_fills_the_call_cache(
    small_study, server, study_templates, tmp_path
):
    normal_study = copy_study(study_templates["small"], tmp_path / "normal")
    normal = normal_study.start_run("dev", labels=LABELS, **remote(server))
    chat_calls = server.count
    assert chat_calls == N_CALLS and not server.batch_counts

    lines: list[str] = []
    summary = small_study.start_run("dev", labels=LABELS, batch=True, on_batch_status=lines.append, **remote(server))
    assert summary.status == "finished" and summary.calls_made == N_CALLS and summary.failures == 0
    assert server.count == chat_calls  # not one chat call: every answer came from the batch
    assert (server.batch_counts["upload"], server.batch_counts["create"]) == (1, 1)
    assert values(small_study, summary.run_id) == values(normal_study, normal.run_id) == expected_values(LABELS)
    assert lines[-1] == f"batch batch_fake_1: completed, {N_CALLS} of {N_CALLS} done, 0 failed"
    assert any(": in_progress" in line for line in lines)
    jobs = small_study.batch_jobs(summary.run_id)
    assert jobs[["batch_id", "status", "requests"]].values.tolist() == [["batch_fake_1", "collected", N_CALLS]]

    # the batch's answers are in the call cache: a normal run afterwards makes zero calls
    again = small_study.start_run("dev", labels=LABELS, **remote(server))
    assert (again.calls_made, again.calls_reused) == (0, N_CALLS)
    assert server.count == chat_calls and server.batch_counts["upload"] == 1


def test_batch_lines_that_fail_are_failures_of_their_kind_and_the_rest_is_stored(small_study, server):
    answer = server.answer_fn
    names = small_study.vocab.names()

    def choose(messages):  # the edema calls are refused by the server (HTTP 400 lines in the error file)
        return ("400", None) if f"Answer about {names['edema']} only." in last_user_text(messages) else ("ok", None)

    server.choose = choose
    summary = small_study.start_run("dev", labels=LABELS, batch=True, **remote(server))
    assert summary.status == "finished" and summary.failures == 8
    assert summary.failure_kinds == {"bad_request": 8}
    assert "HTTP 400 in batch batch_fake_1" in summary.failure_examples["bad_request"]
    got = values(small_study, summary.run_id)
    assert {k: v for k, v in got.items() if k[1] == "edema"} == {(f"s{i}", "edema"): None for i in range(1, 9)}
    assert {k: v for k, v in got.items() if k[1] != "edema"} == expected_values(["pleural_effusion"])
    assert answer.asked and server.count == 0
    # failures are never cached: a retry asks again (normally now) and completes the run
    server.choose = lambda messages: ("ok", None)
    retried = small_study.retry_failed(summary.run_id)
    assert retried.calls_made == 8 and retried.failures == 0 and server.count == 8


def test_a_failed_batch_ends_the_run_with_one_line_and_nothing_stored(small_study, server):
    server.batch_end = "failed"
    res = CliRunner().invoke(
        main,
        [
            "run",
            "--cohort",
            "dev",
            "--labels",
            ",".join(LABELS),
            "--model",
            "openai/fake",
            "--api-base",
            server.url,
            "--batch",
            "--study",
            str(small_study.root),
        ],
    )
    assert res.exit_code == 3, res.output
    errors = [line for line in res.output.splitlines() if "ended failed" in line]
    assert len(errors) == 1 and "batch batch_fake_1 ended failed" in errors[0], res.output
    run_id = int(small_study.runs()["id"].max())
    assert small_study.predictions(run_id).empty
    assert small_study.run_info(run_id).status == "incomplete"
    assert small_study.batch_jobs(run_id)["status"].tolist() == ["failed"]
    assert small_study.pending_batch(run_id) is None  # a resume sends a new batch, never polls the failed one
    with small_study.session() as s:
        assert s.connection().exec_driver_sql("SELECT count(*) FROM callcache").scalar() == 0


def _child(*args: str, **env: str) -> subprocess.Popen:
    """`workbench ARGS` in its own process (polling fast), with env added to this one's."""
    full = dict(os.environ, LITELLM_OFFLINE_MODE="true", PYTHONUNBUFFERED="1", WORKBENCH_BATCH_POLL_S="0.05", **env)
    full.pop("WORKBENCH_USER", None)
    full.pop("WORKBENCH_ROLE", None)
    return subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill_mid_batch_then_resume(wb, server, model_args: list[str], **env: str) -> tuple[int, str, str]:
    """A `run --batch` child killed while it polls, then `run --resume` after the provider finished the batch
    meanwhile: (run id, batch id, the resume's output); asserts what holds for every provider."""
    server.batch_polls = 10**9  # the batch stays in progress until the test lets it finish
    first = _child(
        "run", "--cohort", "dev", "--labels", ",".join(LABELS), *model_args, "--batch", "--study", str(wb.root), **env
    )
    deadline = time.monotonic() + 180  # the child imports litellm (5-20 s on a busy machine)
    found = None
    while found is None and first.poll() is None and time.monotonic() < deadline:
        found = _recorded_batch(wb.root / "workbench.db")
        time.sleep(0.05)
    assert found is not None, first.communicate()[0]
    while server.batch_counts["retrieve"] < 2 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # it is polling
    first.send_signal(signal.SIGKILL)
    first.communicate()
    run_id, batch_id = found
    assert wb.predictions(run_id).empty

    server.batch_polls = 0  # the provider finishes the batch while nobody polls it
    second = _child("run", "--resume", str(run_id), "--study", str(wb.root), **env)  # a plain resume finds the job
    out = second.communicate(timeout=300)[0]
    assert second.returncode == 0, out
    assert f"batch {batch_id}: completed" in out
    assert (server.batch_counts["upload"], server.batch_counts["create"]) == (1, 1)  # no second upload
    assert server.count == 0
    assert values(wb, run_id) == expected_values(LABELS)
    return run_id, batch_id, out


def _recorded_batch(db: Path) -> tuple[int, str] | None:
    """(run id, batch id) of a batch job as another process sees the database now, None before there is one."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        row = con.execute("SELECT run_id, batch_id FROM batchjob ORDER BY id DESC LIMIT 1").fetchone()
        return (int(row[0]), row[1]) if row else None
    except sqlite3.OperationalError:  # a writer holds a lock for a moment
        return None
    finally:
        con.close()


def test_a_run_killed_mid_batch_resumes_the_same_batch_without_uploading_again(small_study, server):
    run_id, _, _ = kill_mid_batch_then_resume(small_study, server, ["--model", "openai/fake", "--api-base", server.url])
    assert small_study.run_info(run_id).status == "finished"


def test_a_disallowed_endpoint_gets_no_request_at_all(small_study, server):
    allowed = list(small_study.config.allowed_endpoints)
    small_study.config.allowed_endpoints = ["workbench/rules"]
    with pytest.raises(StudyError, match="may not be sent to"):
        small_study.start_run("dev", labels=LABELS, batch=True, **remote(server))
    assert server.requests == 0 and not server.batch_counts
    assert small_study.runs().empty

    # allowed, the batch is sent; stopped while it runs, then the endpoint is withdrawn: the resume polls nothing
    small_study.config.allowed_endpoints = allowed
    server.batch_polls = 10**9
    stop = threading.Event()
    summary = small_study.start_run(
        "dev", labels=LABELS, batch=True, cancel=stop, on_batch_status=lambda line: stop.set(), **remote(server)
    )
    assert summary.status == "cancelled" and server.batch_counts["upload"] == 1
    assert small_study.pending_batch(summary.run_id)["batch_id"] == "batch_fake_1"
    seen = server.requests
    small_study.config.allowed_endpoints = ["workbench/rules"]
    with pytest.raises(StudyError, match="may not be sent to"):
        small_study.resume_run(summary.run_id)
    assert server.requests == seen
    small_study.config.allowed_endpoints = allowed
    server.batch_polls = 0
    done = small_study.resume_run(summary.run_id)
    assert done.status == "finished" and server.batch_counts["upload"] == 1 and server.count == 0


def test_the_offline_labeller_refuses_batch_with_a_clear_message(small_study):
    with pytest.raises(UserError, match="offline labeller.*run without --batch"):
        small_study.start_run("dev", labels=LABELS, batch=True)
    assert small_study.runs().empty
    res = CliRunner().invoke(main, ["run", "--cohort", "dev", "--batch", "--study", str(small_study.root)])
    assert res.exit_code == 2 and "run without --batch" in res.output


def estimate_line(study, model: str, api_base: str, *extra: str) -> str:
    """The cost line of `workbench run --estimate` for one label (no call is made)."""
    res = CliRunner().invoke(
        main,
        [
            "run",
            "--cohort",
            "dev",
            "--labels",
            "edema",
            "--model",
            model,
            "--api-base",
            api_base,
            "--estimate",
            *extra,
            "--study",
            str(study.root),
        ],
    )
    assert res.exit_code == 0, res.output
    return next(line for line in res.output.splitlines() if line.startswith("cost:"))


def assert_batch_costs_half(study, model: str, api_base: str) -> None:
    """The estimate with --batch names litellm's batch price, half the normal one."""
    normal, batch = estimate_line(study, model, api_base), estimate_line(study, model, api_base, "--batch")
    assert "(litellm's batch price map)" in batch and "(litellm's price map)" in normal
    dollars = [float(line.split("$")[1].split()[0]) for line in (normal, batch)]
    assert dollars[1] == pytest.approx(dollars[0] / 2, rel=0.01)


def test_estimate_batch_uses_the_batch_price_or_says_it_assumes_the_normal_one(small_study, server):
    assert_batch_costs_half(small_study, "openai/gpt-4o-mini", server.url)  # gpt-4o-mini's batch price is half
    assert "lists no batch price for openai/gpt-4: assumed the normal price" in estimate_line(
        small_study, "openai/gpt-4", server.url, "--batch"
    )
    # no chat call and no batch request (the estimate without --batch asks a local server what it serves: GETs only)
    assert server.count == 0 and not server.batch_counts


def test_score_batch_gives_the_scores_of_a_normal_score(small_study, server, tmp_path, monkeypatch):
    monkeypatch.delenv("WORKBENCH_STUDY", raising=False)
    score_batch_equals_a_normal_score(small_study, server, tmp_path, "openai/fake", server.url)


def score_batch_equals_a_normal_score(small_study, server, tmp_path, model: str, api_base: str) -> None:
    """`score --batch` prints the scores a normal score prints, with no chat call, in two batches (reference,
    generated)."""
    small_study.start_run("dev")
    bundle = small_study.freeze("starter", frozen_at="2026-03-01T12:00:00+00:00").json
    ref = pd.DataFrame(
        {
            "id": ["g1", "g2", "g3"],
            "text": ["Small left pleural effusion.", "Mild pulmonary edema.", "No acute disease."],
        }
    )
    gen = ref.assign(text=["No effusion.", "Mild pulmonary edema.", "Small right pleural effusion."])
    ref.to_csv(tmp_path / "ref.csv", index=False)
    gen.to_csv(tmp_path / "gen.csv", index=False)
    server.answer_fn = None  # the server's keyword labeller: 1 when "effusion" is in the report

    def score(*extra: str) -> list[str]:
        res = CliRunner().invoke(
            main,
            [
                "score",
                "--bundle",
                str(bundle),
                "--reference",
                str(tmp_path / "ref.csv"),
                "--generated",
                f"G={tmp_path / 'gen.csv'}",
                "--model",
                model,
                "--api-base",
                api_base,
                "--allow-endpoint",
                api_base,
                "--resamples",
                "20",
                *extra,
            ],
        )
        assert res.exit_code == 0, res.output
        return [line for line in res.output.splitlines() if "Ran Score" in line or line.startswith("==")]

    normal = score()
    chat_calls = server.count
    assert chat_calls > 0
    assert score("--batch") == normal
    assert server.count == chat_calls  # no chat call: reference and generated texts went as two batches
    assert (server.batch_counts["upload"], server.batch_counts["create"]) == (2, 2)


# ---------------------------------------------------------------- issue 30 item 4: batch runs that finish


def test_reports_that_share_a_text_are_all_filled_from_one_batch_line(small_study, server, tmp_path):
    wb = small_study
    twin = pd.read_csv(Path(__file__).parent / "data" / "reports_small.csv").head(1).assign(id="s1-copy")
    twin.to_csv(tmp_path / "twin.csv", index=False)
    wb.import_reports(tmp_path / "twin.csv", "dev")
    summary = wb.start_run("dev", labels=LABELS, batch=True, **remote(server))
    assert summary.status == "finished" and summary.failures == 0  # not "incomplete" until a second --resume
    sent = server.batches["batch_fake_1"]["lines"]
    assert len(sent) == N_CALLS  # one line per distinct call: the copy's text is the same call
    got = values(wb, summary.run_id)
    assert len(got) == N_CALLS + len(LABELS)
    assert all(got[("s1-copy", lab)] == got[("s1", lab)] is not None for lab in LABELS)


def test_a_poll_that_times_out_is_polled_again_and_the_run_finishes(small_study, server):
    server.hang_s, server.batch_poll_hangs, server.batch_hang_from = 20.0, 2, 2
    lines: list[str] = []
    summary = small_study.start_run(
        "dev", labels=LABELS, batch=True, on_batch_status=lines.append, **remote(server, timeout_s=1)
    )
    assert summary.status == "finished" and summary.failures == 0, lines
    assert server.batch_counts["hung"] == 2
    assert sum("poll 1 failed; polling again" in line for line in lines) == 1, lines
    assert values(small_study, summary.run_id) == expected_values(LABELS)


def test_polls_that_fail_until_the_window_ends_stop_with_the_command_that_resumes(small_study, server):
    server.batch_polls, server.batch_expires_s = 10**9, 3.0  # in progress, and its window ends 3 s after creation
    server.hang_s, server.batch_poll_hangs, server.batch_hang_from = 20.0, 10**9, 2  # every poll after the first hangs
    study = ["--study", str(small_study.root)]
    args = ["--labels", ",".join(LABELS), "--model", "openai/fake", "--api-base", server.url, "--batch"]
    settings = small_study.root / "workbench.yaml"
    config = yaml.safe_load(settings.read_text(encoding="utf-8"))
    config.setdefault("labeller", {})["timeout_s"] = 1  # a poll gives up after 1 s
    settings.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    res = CliRunner().invoke(main, ["run", "--cohort", "dev", *args, *study])
    assert res.exit_code == 3, res.output
    run_id = int(small_study.runs()["id"].max())
    assert f"resume with `workbench run --resume {run_id}` (it polls batch batch_fake_1" in res.output, res.output
    assert small_study.pending_batch(run_id) is not None  # the job is kept: the resume polls it, uploads nothing
    metrics = CliRunner().invoke(main, ["metrics", str(run_id), *study])
    assert f"`workbench run --resume {run_id}`" in metrics.output and "--retry-failed" not in metrics.output


def test_a_failed_batch_says_the_command_that_sends_the_rest_again(small_study, server):
    server.batch_end = "failed"
    with pytest.raises(Exception, match=r"resume with `workbench run --resume \d+ --batch`") as caught:
        small_study.start_run("dev", labels=LABELS, batch=True, **remote(server))
    run_id = int(small_study.runs()["id"].max())
    assert f"--resume {run_id} --batch" in str(caught.value)
