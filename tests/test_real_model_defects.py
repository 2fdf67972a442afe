"""Defects a real local model met (issue 33), each on the fake server on 127.0.0.1 or the real study code:
noise that was never measured, strict JSON from `case`, a server that dies mid-run, hints that fit the
failure, one call per distinct report text, the calls table's time unit, an interrupted run's failures."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import subprocess
import sys

import fake_llm_server
import pytest
from click.testing import CliRunner
from fake_llm_server import running_server

from workbench.cli import main
from workbench.labeller import labelling
from workbench.labeller.llm import CallResult, ModelConfig, describe

KEYWORDS = {"pleural_effusion": ["effusion"], "pneumothorax": ["pneumothorax"]}


@pytest.fixture(scope="module", autouse=True)
def litellm_imported():
    """litellm's first import takes 5 s or more on a busy machine: keep it off every test's clock."""
    import litellm  # noqa: F401


def remote(srv, **extra) -> dict:
    """start_run keyword arguments for the fake server (quick failures, few retries)."""
    return {"model": "openai/fake", "api_base": srv.url, "max_retries": 1, "timeout_s": 20, **extra}


def cli(wb, *args: str, ok=(0,)) -> str:
    result = CliRunner().invoke(main, [*args, "--study", str(wb.root)])
    assert result.exit_code in ok, (args, result.output, result.exception)
    return result.output


def test_noise_whose_every_repeat_failed_says_not_measured(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        run = wb.start_run("dev", labels=list(KEYWORDS), **remote(srv))
        offline = wb.start_run("dev", labels=list(KEYWORDS))
        srv.behaviour = "400"  # every repeat fails (not retried)
        result = wb.measure_noise(run.run_id, sample=10, repeats=1)
    lines = "\n".join(result.lines())
    assert "0.000 [0.000, 0.000]" not in lines  # before: a failed measurement read as a perfectly steady model
    assert "all: noise not measured - all 10 repeat(s) failed" in lines
    assert all(math.isnan(x) for x in result.overall())
    compared = cli(wb, "compare", str(offline.run_id), str(run.run_id))
    assert "noise: not measured" in compared and "at noise rate 0.000" not in compared


def test_case_json_is_strict_json_when_a_call_failed(small_study):
    from fake_llm_server import keyword_answer

    wb = small_study

    def pneumothorax_rambles(messages) -> str:  # one label's reply has no answer: its value is missing (NaN)
        text = messages[-1]["content"].lower()
        return (
            "Pneumothorax is air in the pleural space."
            if "pneumothorax" in text
            else keyword_answer(messages, KEYWORDS)
        )

    with running_server(answer_fn=pneumothorax_rambles) as srv:
        run = wb.start_run("dev", labels=list(KEYWORDS), **remote(srv))
    assert run.failures
    report = wb.predictions(run.run_id)["report_id"].iloc[0]
    out = cli(wb, "case", report, "--format", "json")
    assert "NaN" not in out  # before: the failed answer's value was written as NaN, which strict parsers refuse
    parsed = json.loads(out, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
    statuses = {c["label"]: (c["value"], c["status"]) for c in parsed["columns"]}
    assert statuses["pneumothorax"] == (None, "prose")


def test_a_connection_error_to_an_http_server_names_no_ssl_detail():
    cfg = ModelConfig(model="openai/smollm2", api_base="http://127.0.0.1:9/v1")
    exc = ConnectionError(
        "Cannot connect to host 127.0.0.1:9 ssl:<ssl.SSLContext object at 0x7f> [Connect call failed ('127.0.0.1', 9)]"
    )
    message = describe("connection", exc, 5, cfg)
    assert "SSLContext" not in message and "ssl:" not in message
    assert "127.0.0.1:9" in message and "is the server running" in message


def _result(text: str, finish: str, tokens: int) -> CallResult:
    return CallResult("k", text, None, None, completion_tokens=tokens, finish_reason=finish)


def test_a_looping_reply_is_its_own_kind_with_a_hint_that_does_not_say_raise_max_tokens():
    req = type("Req", (), {"meta": {"labels": ["cardiomegaly"], "mode": "per_label", "report": "Normal heart."}})()
    loop = '{"value": 0, "evidence": "' + "The heart is normal. " * 20
    cut = '{"value": 0, "evidence": "Heart size is normal; the mediastinal contours are unremarkable and there is'
    looped = labelling.decide(req, loop, _result(loop, "length", 128))["cardiomegaly"]
    truncated = labelling.decide(req, cut, _result(cut, "length", 30))["cardiomegaly"]
    assert (looped.status, truncated.status) == ("looping", "truncated")
    assert "more tokens will not help" in labelling.HINTS["looping"]
    assert "raise labeller.max_tokens" in labelling.HINTS["truncated"]
    assert "concurrency 1" in labelling.HINTS["timeout"] and "--resume {run}" in labelling.HINTS["timeout"]


def test_a_prose_reply_is_its_own_kind():
    req = type("Req", (), {"meta": {"labels": ["cardiomegaly"], "mode": "per_label", "report": "Normal heart."}})()
    prose = "Cardiomegaly is an enlargement of the heart. It can be caused by many conditions."
    decision = labelling.decide(req, prose, _result(prose, "stop", 20))["cardiomegaly"]
    assert decision.status == "prose" and decision.value is None
    broken = '{"value": , "evidence": "see report",,'
    assert labelling.decide(req, broken, _result(broken, "stop", 20))["cardiomegaly"].status == "parse_error"


def test_a_server_killed_mid_run_stops_the_run_and_says_how_to_resume(small_study):
    wb = small_study
    server = subprocess.Popen(
        # each answer slower than the engine's progress interval (0.2 s), so progress is reported after each one
        [sys.executable, str(pathlib.Path(__file__).parent / "fake_llm_server.py"), "--keyword", "effusion"]
        + ["--latency", "0.3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = server.stdout.readline().strip()
        fake_llm_server.serving(
            url.removesuffix("/v1")
        )  # the tests' own server, in a child process: allowed by its port

        def kill_after_three(progress) -> None:
            if progress.made >= 3 and server.poll() is None:
                server.kill()  # as kill -9 would: nothing answers on the port any more
                server.wait()

        summary = wb.start_run(
            "dev",
            labels=list(KEYWORDS),
            on_progress=kill_after_three,
            model="openai/fake",
            api_base=url,
            max_retries=1,
            concurrency=1,
            backoff_base_s=0.01,
            backoff_max_s=0.05,
        )
    finally:
        server.kill()
        server.wait()
        fake_llm_server.stopped(url.removesuffix("/v1"))
    # before: every remaining call was tried and failed, and the run ended "finished"
    assert summary.status == "incomplete", summary.message()
    assert "the server stopped answering" in summary.stopped_reason
    assert f"`workbench run --resume {summary.run_id}`" in summary.stopped_reason
    assert "SSLContext" not in summary.stopped_reason
    assert summary.calls_made <= 3 + 5 + 1  # 3 answered, 5 that could not connect (of 16): the rest not tried


def test_an_interrupted_run_is_recorded_with_its_failures(small_study):
    from workbench.services.runs import RunInterrupted

    wb = small_study

    def interrupt_after_two(progress) -> None:
        if progress.made >= 2:
            raise KeyboardInterrupt

    with running_server(keywords=KEYWORDS, behaviour="400") as srv, pytest.raises(RunInterrupted) as stopped:
        wb.start_run("dev", labels=list(KEYWORDS), on_progress=interrupt_after_two, **remote(srv, concurrency=1))
    run = wb.run_info(stopped.value.run_id)
    assert run.status == "interrupted" and run.failures >= 2  # before: 0 failures recorded
    assert "failed" in str(stopped.value) and "--resume" in str(stopped.value)


def test_reports_with_the_same_text_are_asked_once_in_a_run(study, tmp_path):
    wb = study
    reports = tmp_path / "reports.csv"
    text = "Small left pleural effusion. No pneumothorax."
    reports.write_text(f'id,findings,impression\nr1,"{text}",\nr2,"{text}",\nr3,"Clear lungs. No effusion.",\n')
    wb.import_reports(reports, "dev", "en")
    with running_server(keywords=KEYWORDS) as srv:
        summary = wb.start_run("dev", labels=["pleural_effusion"], **remote(srv))
        calls = srv.count
    assert calls == 2  # before: 3, the duplicated text asked twice
    assert summary.calls_made == 2 and summary.calls_reused == 1 and summary.failures == 0
    preds = wb.predictions(summary.run_id).set_index("report_id")["value"]
    assert preds.to_dict() == {"r1": 1, "r2": 1, "r3": 0}


def test_the_calls_table_shows_latencies_in_seconds_as_its_header_says():
    import pandas as pd

    from workbench.terminal import render_table

    table = render_table(pd.DataFrame({"latency_s": [2.5, 161.7], "median_latency_s": [3.0, 3.0]}), wide=True)
    assert "2.5 s" in table and "161.7 s" in table and "3.0 s" in table
    assert "min" not in table  # before: "0.0 min" and "2.7 min" under latency_s


def test_evidence_not_in_the_report_is_counted_per_label_in_metrics_and_calls(small_study):
    wb = small_study
    made_up = json.dumps({"value": 1, "evidence": "<short summary of the report that supports a 1>"})
    with running_server(reply=made_up, behaviour="reply") as srv:
        run = wb.start_run("dev", labels=["pleural_effusion"], **remote(srv))
    assert run.failures == 0
    out = cli(wb, "metrics", str(run.run_id))
    assert "evidence not in the report" in " ".join(out.split()) and "pleural_effusion 8 of 8" in " ".join(out.split())
    data = json.loads(cli(wb, "metrics", str(run.run_id), "--format", "json"))
    assert data["evidence"] == [{"label": "pleural_effusion", "evidence_quoted": 8, "evidence_not_in_report": 8}]
    per_label = json.loads(cli(wb, "calls", str(run.run_id), "--per-label", "--format", "json"))
    assert (per_label[0]["evidence_quoted"], per_label[0]["evidence_not_in_report"]) == (8, 8)


def test_the_estimate_uses_only_calls_made_with_the_same_settings(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS, latency=0.3) as slow, running_server(keywords=KEYWORDS) as fast:
        wb.start_run("dev", labels=["pleural_effusion"], **remote(slow, max_tokens=256))
        other = wb.estimate_run("dev", labels=["pneumothorax"], **remote(fast, max_tokens=64))
        # before: the slow server's calls at another max_tokens set the figure ("median latency 0.3 s of 8 calls")
        assert "no history for this model with these settings" in other.how["time"], other.how
        wb.start_run("dev", labels=["pleural_effusion"], **remote(fast, max_tokens=64))
        same = wb.estimate_run("dev", labels=["pneumothorax"], **remote(fast, max_tokens=64))
    assert "of 8 recorded calls" in same.how["time"] and same.seconds < 8 * 0.3


def test_the_estimate_counts_a_one_slot_server_one_call_at_a_time(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS, owned_by="me") as srv:
        estimate = wb.estimate_run("dev", labels=["pleural_effusion"], **remote(srv, concurrency=8))
    assert estimate.concurrency == 1  # before: "at concurrency 8" on a server that answers one call at a time


def test_a_model_with_no_history_gets_no_time_figure_before_its_first_calls(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS, latency=0.1) as srv:  # 8 calls: progress is reported every 0.2 s
        first = wb.estimate_run("dev", labels=["pleural_effusion"], **remote(srv, concurrency=1))
        lines = "\n".join(first.lines())
        # before: "about 8 s at concurrency 8 (assumed 1 s per call ...)": a guess 50-400 times off on a CPU server
        assert first.seconds is None and "assumed" not in first.how["time"]
        assert (
            "wall time: no history for this model with these settings" in lines
            and "about" not in lines.split("wall time")[1]
        )
        seen = []
        snapshot = lambda p: seen.append(dataclasses.replace(p))  # noqa: E731 (the run updates one Progress in place)
        wb.start_run("dev", labels=["pleural_effusion"], on_progress=snapshot, **remote(srv, concurrency=1))
        after = wb.estimate_run("dev", labels=["pneumothorax"], **remote(srv, concurrency=1))
    assert seen[0].made == 0 and seen[0].remaining_s is None and seen[0].left() == ""  # nothing measured yet
    measured = [p for p in seen if 0 < p.made < p.total]
    assert measured and all(p.remaining_s is not None and p.remaining_s > 0 for p in measured)
    assert measured[0].left().startswith("about ") and measured[0].left().endswith(" s left")
    assert seen[-1].done == seen[-1].total and seen[-1].left() == ""
    assert after.seconds is not None and "median latency" in after.how["time"]  # the first run's calls, measured


def test_the_cli_progress_line_says_the_time_left_measured_on_the_calls_so_far():
    import io

    from workbench.labeller.labelling import Progress
    from workbench.terminal import Progress as Line

    out = io.StringIO()
    line = Line(out, is_terminal=False, step=0.25)
    line(Progress(done=0, total=8, made=0, reused=0, failures=0))
    line(Progress(done=2, total=8, made=2, reused=0, failures=0, remaining_s=150.0))
    line(Progress(done=8, total=8, made=8, reused=0, failures=0, remaining_s=0.0))
    assert out.getvalue().splitlines() == [
        "2/8 calls (25%): made 2, reused 0, failures 0, about 2 min left",
        "8/8 calls (100%): made 8, reused 0, failures 0",
    ]
