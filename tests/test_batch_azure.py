"""Azure OpenAI batch jobs (issue 25, item 5: "providers' batch APIs (OpenAI, Azure ...)"): `--batch` with
an azure/DEPLOYMENT model through litellm's custom_llm_provider "azure" (create_file, create_batch,
retrieve_batch, file_content), over real HTTP to the fake server's Azure surface (/openai/files,
/openai/batches, ?api-version=..., the api-key header). No mocks: real SQLite, real Git, real litellm,
real child processes for the restart, a raw TCP listener that counts every connection for the guard.
"""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner
from conftest import copy_study
from fake_llm_server import running_server
from test_batch import (
    LABELS,
    N_CALLS,
    assert_batch_costs_half,
    kill_mid_batch_then_resume,
    score_batch_equals_a_normal_score,
)
from test_governance import Listener
from test_runs import Oracle, expected_values, values

from workbench.cli import main
from workbench.errors import UserError
from workbench.study import StudyError

AZURE_VARS = (
    "AZURE_API_BASE",
    "AZURE_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "AZURE_API_VERSION",
    "AZURE_AD_TOKEN",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_USERNAME",
    "AZURE_PASSWORD",
)
DEPLOYMENT = "wb-batch"  # the Azure deployment: azure/wb-batch
MODEL = f"azure/{DEPLOYMENT}"


@pytest.fixture(autouse=True)
def azure_env(monkeypatch):
    """Poll every 50 ms; no Azure variable from the machine running the tests."""
    monkeypatch.setenv("WORKBENCH_BATCH_POLL_S", "0.05")
    for name in AZURE_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server(small_study):
    with running_server(answer_fn=Oracle(small_study.vocab.names()), batch_polls=2) as srv:
        yield srv


def azure(srv, **extra) -> dict:
    """start_run keyword arguments for an Azure deployment on the fake server (its resource endpoint)."""
    return {"model": MODEL, "api_base": srv.azure_url, "max_retries": 1, "timeout_s": 20, **extra}


def batch_requests(srv) -> list[tuple[str, str]]:
    """(method, path) of the files and batches requests the server received, in order."""
    return [(e["method"], e["path"]) for e in srv.surface_log if "/deployments/" not in e["path"]]


def uploaded_lines(srv) -> list[dict]:
    """The JSONL lines of the first file uploaded to the server."""
    return [json.loads(x) for x in srv.files["file-fake-1"]["data"].decode().splitlines() if x.strip()]


def test_azure_batch_run_answers_as_a_normal_azure_run_on_azures_paths(
    small_study, server, study_templates, tmp_path, monkeypatch
):
    from workbench.labeller import llm

    normal_study = copy_study(study_templates["small"], tmp_path / "normal")
    normal = normal_study.start_run("dev", labels=LABELS, **azure(server))
    assert normal.failures == 0 and server.count == N_CALLS and not server.batch_counts
    chat_paths = {e["path"] for e in server.surface_log}
    assert chat_paths == {f"/openai/deployments/{DEPLOYMENT}/chat/completions"}  # a normal call takes Azure's path
    server.surface_log.clear()

    monkeypatch.setenv("AZURE_API_KEY", "azure-key-for-the-resource-in-the-environment")  # not for a configured one
    lines: list[str] = []
    summary = small_study.start_run("dev", labels=LABELS, batch=True, on_batch_status=lines.append, **azure(server))
    assert summary.status == "finished" and summary.calls_made == N_CALLS and summary.failures == 0
    assert server.count == N_CALLS  # not one chat call: every answer came from the batch
    assert values(small_study, summary.run_id) == values(normal_study, normal.run_id) == expected_values(LABELS)
    assert lines[-1] == f"batch batch_fake_1: completed, {N_CALLS} of {N_CALLS} done, 0 failed"
    # Azure's paths, each with litellm's api-version (no $AZURE_API_VERSION) and the api-key header
    assert batch_requests(server) == [
        ("POST", "/openai/files"),
        ("POST", "/openai/batches"),
        ("GET", "/openai/batches/batch_fake_1"),
        ("GET", "/openai/batches/batch_fake_1"),
        ("GET", "/openai/batches/batch_fake_1"),
        ("GET", "/openai/files/file-fake-2/content"),
    ]
    assert {e["api_version"] for e in server.surface_log} == {llm._litellm().AZURE_DEFAULT_API_VERSION}
    assert {(e["api_key"], e["authorization"]) for e in server.surface_log} == {(llm.DUMMY_API_KEY, None)}
    # a line names the deployment and Azure's chat path; the batch's endpoint is that path
    sent = uploaded_lines(server)
    assert len(sent) == N_CALLS and {(x["method"], x["url"], x["body"]["model"]) for x in sent} == {
        ("POST", "/chat/completions", DEPLOYMENT)
    }
    assert server.batches["batch_fake_1"]["object"]["endpoint"] == "/chat/completions"
    jobs = small_study.batch_jobs(summary.run_id)
    assert jobs[["batch_id", "status", "requests"]].values.tolist() == [["batch_fake_1", "collected", N_CALLS]]

    # the batch's answers are in the call cache: a normal run afterwards makes zero calls
    again = small_study.start_run("dev", labels=LABELS, **azure(server))
    assert (again.calls_made, again.calls_reused) == (0, N_CALLS)


def test_azure_v1_api_version_takes_the_openai_v1_paths(small_study, server, monkeypatch):
    monkeypatch.setenv("AZURE_API_VERSION", "v1")  # Azure's v1 API: litellm uses /openai/v1/ without api-version
    monkeypatch.setenv("TEAM_AZURE_KEY", "azure-key-named-by-api-key-env")
    summary = small_study.start_run("dev", labels=LABELS, batch=True, **azure(server, api_key_env="TEAM_AZURE_KEY"))
    assert summary.status == "finished" and summary.failures == 0 and server.count == 0
    assert values(small_study, summary.run_id) == expected_values(LABELS)
    assert batch_requests(server)[:2] == [("POST", "/openai/v1/files"), ("POST", "/openai/v1/batches")]
    assert batch_requests(server)[-1] == ("GET", "/openai/v1/files/file-fake-2/content")
    # the v1 API is OpenAI's client on Azure's paths: the key named by api_key_env as a bearer token
    assert {(e["api_key"], e["authorization"]) for e in server.surface_log} == {
        (None, "Bearer azure-key-named-by-api-key-env")
    }


def test_a_failed_azure_batch_ends_the_run_with_one_line_and_nothing_stored(small_study, server):
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
            MODEL,
            "--api-base",
            server.azure_url,
            "--batch",
            "--study",
            str(small_study.root),
        ],
    )
    assert res.exit_code == 3, res.output
    errors = [line for line in res.output.splitlines() if "ended failed" in line]
    assert len(errors) == 1, res.output
    assert "batch batch_fake_1 ended failed (the fake server's batch failed)" in errors[0], res.output
    run_id = int(small_study.runs()["id"].max())
    assert small_study.predictions(run_id).empty
    assert small_study.run_info(run_id).status == "incomplete"
    assert small_study.batch_jobs(run_id)["status"].tolist() == ["failed"]
    assert small_study.pending_batch(run_id) is None  # a resume sends a new batch, never polls the failed one
    assert server.count == 0 and ("GET", "/openai/batches/batch_fake_1") in batch_requests(server)
    with small_study.session() as s:
        assert s.connection().exec_driver_sql("SELECT count(*) FROM callcache").scalar() == 0


def test_an_azure_run_killed_mid_batch_resumes_the_same_batch_without_uploading_again(small_study, server):
    # the resource and key as a team sets them: $AZURE_API_BASE and $AZURE_API_KEY (and an api version)
    env = {"AZURE_API_BASE": server.azure_url, "AZURE_API_KEY": "azure-key-from-env", "AZURE_API_VERSION": "2024-10-21"}
    run_id, _, _ = kill_mid_batch_then_resume(small_study, server, ["--model", MODEL], **env)
    assert small_study.run_info(run_id).endpoint == f"{server.azure_url} ($AZURE_API_BASE)"
    assert small_study.run_info(run_id).status == "finished"
    # both processes spoke Azure with the environment's version and key
    assert {(e["api_version"], e["api_key"]) for e in server.surface_log} == {("2024-10-21", "azure-key-from-env")}
    assert batch_requests(server)[-1] == ("GET", "/openai/files/file-fake-2/content")


def test_an_azure_endpoint_nobody_allowed_gets_not_one_connection(small_study, server, monkeypatch):
    wb = small_study
    forbidden = Listener()  # 127.0.0.2: not this study's allowed endpoints (only this machine's 127.0.0.1)
    try:
        # the resource named in the settings, and named only by $AZURE_API_BASE (with its key there too)
        with pytest.raises(StudyError, match=f"may not be sent to {forbidden.url}: it is not in"):
            wb.start_run("dev", labels=LABELS, batch=True, **azure(server, api_base=forbidden.url))
        monkeypatch.setenv("AZURE_API_BASE", forbidden.url)
        monkeypatch.setenv("AZURE_API_KEY", "azure-key-not-for-127.0.0.2")
        with pytest.raises(StudyError, match=f"may not be sent to {forbidden.url} \\(\\$AZURE_API_BASE\\)"):
            wb.start_run("dev", labels=LABELS, batch=True, model=MODEL)
        res = CliRunner().invoke(
            main, ["run", "--cohort", "dev", "--labels", "edema", "--model", MODEL, "--batch", "--study", str(wb.root)]
        )
        assert res.exit_code == 2 and f"may not be sent to {forbidden.url} ($AZURE_API_BASE)" in res.output, res.output
        assert wb.runs().empty

        # allowed ($AZURE_API_BASE is the fake server), the batch is sent; stopped while it runs, then the
        # variable names the forbidden resource: the resume polls nothing, anywhere
        monkeypatch.setenv("AZURE_API_BASE", server.azure_url)
        server.batch_polls = 10**9
        stop = threading.Event()
        summary = wb.start_run(
            "dev", labels=LABELS, batch=True, model=MODEL, cancel=stop, on_batch_status=lambda line: stop.set()
        )
        assert summary.status == "cancelled" and server.batch_counts["upload"] == 1
        assert {e["api_key"] for e in server.surface_log} == {"azure-key-not-for-127.0.0.2"}
        seen = server.requests
        monkeypatch.setenv("AZURE_API_BASE", forbidden.url)
        with pytest.raises(StudyError, match=f"may not be sent to {forbidden.url} \\(\\$AZURE_API_BASE\\)"):
            wb.resume_run(summary.run_id)
        wb.allow_endpoint(forbidden.url)  # even allowed, it is not where the run's batch went
        with pytest.raises(StudyError, match=f"it would now go to {forbidden.url} \\(\\$AZURE_API_BASE\\)"):
            wb.resume_run(summary.run_id)
        wb.disallow_endpoint(forbidden.url)
        assert server.requests == seen
        assert (forbidden.connections, forbidden.bytes) == (0, 0)  # not a connection, not a byte

        monkeypatch.setenv("AZURE_API_BASE", server.azure_url)
        server.batch_polls = 0
        done = wb.resume_run(summary.run_id)
        assert done.status == "finished" and server.batch_counts["upload"] == 1 and server.count == 0
    finally:
        forbidden.close()


def test_providers_without_a_batch_surface_are_still_refused(small_study):
    small_study.allow_endpoint("127.0.0.1:9")  # allowed: the refusal is the batch surface's, not the endpoint's
    with pytest.raises(UserError, match="Azure OpenAI's \\(azure/DEPLOYMENT\\).*'anthropic': run without --batch"):
        small_study.start_run(
            "dev",
            labels=LABELS,
            batch=True,
            model="anthropic/claude-3-5-haiku-20241022",
            api_base="http://127.0.0.1:9/v1",
        )
    assert small_study.runs().empty


def test_estimate_of_an_azure_batch_uses_litellms_azure_batch_price(small_study, server):
    assert_batch_costs_half(
        small_study, "azure/gpt-4o-mini", server.azure_url
    )  # azure/gpt-4o-mini's batch price is half
    # no chat call and no batch request (the estimate without --batch asks a local server what it serves: GETs only)
    assert server.count == 0 and not server.batch_counts


def test_score_batch_with_an_azure_deployment_gives_the_scores_of_a_normal_score(
    small_study, server, tmp_path, monkeypatch
):
    monkeypatch.delenv("WORKBENCH_STUDY", raising=False)
    score_batch_equals_a_normal_score(small_study, server, tmp_path, MODEL, server.azure_url)
    assert batch_requests(server).count(("POST", "/openai/batches")) == 2  # Azure's path, once per batch
