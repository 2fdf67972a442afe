"""Runs that fail look like failures (issue 13, items 1-2): exit codes, causes, early stop, unknown
models, and no duplicate run when nothing changed. Real CLI, real litellm, real HTTP; no mocks.
"""

from __future__ import annotations

import re
import socket

import pytest
from click.testing import CliRunner
from fake_llm_server import MALFORMED_REPLY, REFUSAL_REPLY, running_server
from test_runs import N_REPORTS, Oracle, edit_effusion

from workbench.cli import EXIT_INCOMPLETE, main

ALL_CALLS = 20 * N_REPORTS


def run_cli(wb, *args: str):
    return CliRunner().invoke(main, ["run", *args, "--study", str(wb.root)])


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now: connections are refused
    return port


def test_closed_port_stops_early_and_exits_nonzero_with_the_cause(small_study):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    small_study.allow_endpoint(url.removesuffix("/v1"))  # the admin named this port (a server that is not running)
    result = run_cli(small_study, "--cohort", "dev", "--model", "openai/fake", "--api-base", url)
    assert result.exit_code == EXIT_INCOMPLETE == 3, result.output
    assert "stopped early: 5 calls in a row failed the same way (connection) and none succeeded" in result.output
    assert re.search(rf"connection: \d+ call\(s\), e\.g\. cannot connect to {re.escape(url)}", result.output)
    run_id = int(re.search(r"run (\d+) incomplete", result.output).group(1))
    run = small_study.run_info(run_id)
    assert run.status == "incomplete" and run.calls_made < ALL_CALLS / 4  # not every call was tried
    assert f"`workbench run --resume {run_id}`" in result.output
    metrics = CliRunner().invoke(main, ["metrics", str(run_id), "--study", str(small_study.root)])
    assert metrics.exit_code == 0 and "nan" not in metrics.output  # an all-failed run has no silent or NaN F1
    assert "macro F1 undefined" in metrics.output and f"--retry-failed {run_id}" in metrics.output


@pytest.mark.parametrize(
    "behaviour,kind,example",
    [
        ("404", "not_found", "HTTP 404 not found at"),
        ("401", "auth", "HTTP 401 authentication failed"),
    ],
)
def test_model_not_found_and_bad_key_stop_early(small_study, behaviour, kind, example):
    with running_server(behaviour=behaviour) as server:
        result = run_cli(small_study, "--cohort", "dev", "--model", "openai/fake", "--api-base", server.url)
        requests = server.count
    assert result.exit_code == 3, result.output
    assert f"failed the same way ({kind})" in result.output
    assert re.search(rf"{kind}: \d+ call\(s\), e\.g\. {example}", result.output)
    assert requests < ALL_CALLS / 4


def test_partial_failures_exit_3_and_list_each_cause_once_without_the_reply_text(small_study):
    wb = small_study
    with running_server() as server:
        server.answer_fn = Oracle(
            wb.vocab.names(), overrides={("s1", "edema"): MALFORMED_REPLY, ("s2", "edema"): REFUSAL_REPLY}
        )
        result = run_cli(
            wb, "--cohort", "dev", "--labels", "edema,fracture", "--model", "openai/fake", "--api-base", server.url
        )
    assert result.exit_code == 3, result.output
    assert "failures by cause" in result.output
    assert (
        "parse_error: 1 call(s), e.g. " in result.output and "refusal: 1 call(s), e.g. model refused" in result.output
    )
    assert (
        "interpreting medical reports" not in result.output
    )  # the model's reply (it may quote a report) is not printed
    assert "stopped early" not in result.output  # other calls succeeded: the endpoint works


def test_unknown_model_is_named_before_any_word_about_endpoints(small_study):
    result = run_cli(small_study, "--cohort", "dev", "--model", "no-such-model-xyz")
    assert result.exit_code == 2
    assert "model 'no-such-model-xyz' is unknown to litellm" in result.output
    assert "openai/no-such-model-xyz with --api-base URL" in result.output
    assert "endpoint" not in result.output.split("providers:")[0].lower()
    prefixed = run_cli(small_study, "--cohort", "dev", "--model", "nosuchprovider/x")
    assert prefixed.exit_code == 2 and "litellm has no provider 'nosuchprovider'" in prefixed.output
    assert small_study.runs().empty
    bundle_score = CliRunner().invoke(
        main,
        [
            "score",
            "--bundle",
            str(_rules_bundle(small_study)),
            "--reference",
            str(small_study.root / "r.csv"),
            "--generated",
            f"g={small_study.root / 'r.csv'}",
            "--model",
            "no-such-model-xyz",
        ],
    )
    assert bundle_score.exit_code == 2 and "model 'no-such-model-xyz' is unknown to litellm" in bundle_score.output


def _rules_bundle(wb):
    wb.start_run("dev")
    (wb.root / "r.csv").write_text("id,findings,impression\nr1,No effusion.,Normal.\n", encoding="utf-8")
    return wb.freeze("rules-v1").json


def test_rerunning_with_nothing_changed_points_to_the_earlier_run(small_study):
    wb = small_study
    first = run_cli(wb, "--cohort", "dev", "--labels", "edema")
    assert first.exit_code == 0, first.output
    again = run_cli(wb, "--cohort", "dev", "--labels", "edema", "--concurrency", "2")  # speed is not a change
    assert again.exit_code == 0
    assert "nothing changed since run 1" in again.output and "workbench metrics 1" in again.output
    assert len(wb.runs()) == 1
    forced = run_cli(wb, "--cohort", "dev", "--labels", "edema", "--new")
    assert forced.exit_code == 0 and "run 2 finished" in forced.output
    other_labels = run_cli(wb, "--cohort", "dev", "--labels", "edema,fracture")
    assert "run 3 finished" in other_labels.output
    edit_effusion(wb)
    edited = run_cli(wb, "--cohort", "dev", "--labels", "edema")
    assert "run 4 finished" in edited.output  # a new prompt version is a change
    wb.import_reports(_one_more_report(wb), "dev")
    grown = run_cli(wb, "--cohort", "dev", "--labels", "edema")
    assert "run 5 finished" in grown.output  # so is a report added to the cohort


def _one_more_report(wb):
    path = wb.root / "extra.csv"
    path.write_text("id,findings,impression\ns9,Mild pulmonary edema.,Edema.\n", encoding="utf-8")
    return path
