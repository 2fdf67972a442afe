"""Report text goes only where allowed (issue 12, items 1-4): attacks tried on this machine.

A raw TCP listener on 127.0.0.2 (another loopback address) stands in for a forbidden host and
counts every connection and byte it receives. Every route that sends report text is pointed at
it: provider environment variables litellm reads, redirects from an allowed server, a Router
pool with one forbidden member, litellm's own global api_base, bundles scored outside a study,
robustness, resume and retry-failed. Real litellm, real HTTP, real SQLite; no mocks.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import DATA
from fake_llm_server import running_server, serving, stopped
from test_runs import N_REPORTS, Oracle

from workbench import scoring
from workbench.cli import main
from workbench.labeller.llm import CallRequest, ModelConfig, complete_all_sync, resolve_endpoints
from workbench.services.runs import endpoint_label, is_local_model
from workbench.shipped import shipped_dir
from workbench.study import StudyError

PROVIDER_VARS = (
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "OLLAMA_API_BASE",
    "ANTHROPIC_API_BASE",
    "ANTHROPIC_BASE_URL",
    "HOSTED_VLLM_API_BASE",
    "OPENAI_API_KEY",
)
PAIRS = shipped_dir("annotations") / "robustness" / "pairs.csv"
REPORTS = DATA / "reports_small.csv"


class Listener:
    """A raw TCP listener that accepts, counts connections and bytes, and closes."""

    def __init__(self, host: str = "127.0.0.2") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.host, self.port = self.sock.getsockname()
        self.connections = 0
        self.bytes = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        conn.settimeout(2)
        try:
            while chunk := conn.recv(65536):
                with self.lock:
                    self.bytes += len(chunk)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


class Redirector:
    """An HTTP server on 127.0.0.1 (allowed: its address and port, see fake_llm_server.serving) that answers
    every POST with a redirect elsewhere."""

    def __init__(self, target: str, status: int = 307) -> None:
        outer = self
        self.count = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.count += 1
                self.send_response(status)
                self.send_header("Location", target + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        serving(self.origin)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        stopped(self.origin)
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def forbidden():
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in PROVIDER_VARS:
        monkeypatch.delenv(var, raising=False)


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def local_bundle(small_study):
    """small_study frozen from a full run against a local OpenAI-compatible server (kept running)."""
    with running_server() as server:
        server.answer_fn = Oracle(small_study.vocab.names())
        small_study.start_run("dev", model="openai/fake", api_base=server.url, max_retries=0, timeout_s=20)
        info = small_study.freeze("local-v1")
        yield small_study, server, info.json


# ---------------------------------------------------------------- item 4: the one guard test


def test_no_route_sends_a_byte_to_a_forbidden_address(local_bundle, forbidden, monkeypatch, tmp_path):
    """Every route at once: each attempt is refused with a message naming where text would have gone."""
    import litellm

    wb, server, bundle = local_bundle
    study = ["--study", str(wb.root)]
    refused = []

    def expect_refusal(result, *patterns):
        assert result.exit_code != 0, result.output
        for pattern in patterns:
            assert re.search(pattern, result.output), (pattern, result.output)
        refused.append(result.output)

    # 1. provider environment variables litellm reads (the study allows only this machine's 127.0.0.1)
    for model, var in [
        ("ollama/llama3", "OLLAMA_API_BASE"),
        ("ollama_chat/llama3", "OLLAMA_API_BASE"),
        ("openai/gpt-4o-mini", "OPENAI_BASE_URL"),
        ("openai/gpt-4o-mini", "OPENAI_API_BASE"),
        ("anthropic/claude-3-5-haiku", "ANTHROPIC_BASE_URL"),
        ("hosted_vllm/qwen", "HOSTED_VLLM_API_BASE"),
    ]:
        with monkeypatch.context() as env:
            env.setenv(var, forbidden.url)
            env.setenv("OPENAI_API_KEY", "sk-secret-not-for-127.0.0.2")
            expect_refusal(
                cli("run", "--cohort", "dev", "--labels", "edema", "--model", model, *study),
                re.escape(f"may not be sent to {forbidden.url} (${var})"),
            )
    # ... also after an admin allowed the provider's real API
    wb.allow_endpoint("https://api.openai.com")
    for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE"):
        with monkeypatch.context() as env:
            env.setenv(var, forbidden.url + "/v1")
            expect_refusal(
                cli("run", "--cohort", "dev", "--labels", "edema", "--model", "openai/gpt-4o-mini", *study),
                re.escape(f"{forbidden.url}/v1 (${var})"),
            )

    # ... and a configured server wins over them, as litellm is told on every call
    with monkeypatch.context() as env:
        for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OLLAMA_API_BASE"):
            env.setenv(var, forbidden.url + "/v1")
        configured = wb.start_run("dev", labels=["edema"], model="openai/fake", api_base=server.url, max_retries=0)
        assert configured.failures == 0 and wb.run_info(configured.run_id).endpoint == server.url

    # 2. a Router pool with one forbidden member is refused as a whole
    with pytest.raises(StudyError, match=re.escape(forbidden.url)) as err:
        wb.start_run("dev", labels=["edema"], model="openai/fake", endpoints=[server.url, forbidden.url + "/v1"])
    refused.append(str(err.value))

    # 3. redirects from an allowed server (307 and 308; the OpenAI SDK and litellm's own HTTP handler)
    unasked = [label for label in wb.vocab.asked_ids if label != "edema"]
    for status in (307, 308):
        redirector = Redirector(forbidden.url, status)
        try:
            for model in ("openai/fake", "ollama_chat/fake"):
                summary = wb.start_run(
                    "dev", labels=["edema"], model=model, api_base=redirector.url, max_retries=2, timeout_s=20
                )
                assert summary.failure_kinds == {"redirect": N_REPORTS}, summary.failure_kinds
                detail = wb.predictions(summary.run_id)["detail"].iloc[0]
                assert f"HTTP {status} redirect to {forbidden.url} not followed" in detail, detail
                refused.append(detail)
            assert redirector.count == 2 * N_REPORTS  # each call once: a redirect is not retried either
            # a Router pool of two allowed servers, one of which redirects: the Router picks a member at
            # random, so labels not asked before (no cached answer) are run until a call went to the redirector
            for _ in range(4):
                pooled = wb.start_run(
                    "dev",
                    labels=[unasked.pop()],
                    model="openai/fake",
                    endpoints=[redirector.url, server.url],
                    max_retries=0,
                    timeout_s=20,
                )
                assert pooled.calls_reused == 0 and set(pooled.failure_kinds) <= {"redirect"}, pooled
                if redirector.count > 2 * N_REPORTS:
                    break
            assert redirector.count > 2 * N_REPORTS
            refused.append(f"pool: {redirector.count - 2 * N_REPORTS} redirect(s) from a pool member not followed")
        finally:
            redirector.close()

    # 4. litellm's own global api_base (ollama prefers it to the api_base passed with the call)
    monkeypatch.setattr(litellm, "api_base", forbidden.url)
    results = []
    complete_all_sync(
        [CallRequest("k", [{"role": "user", "content": "Report: secret text"}])],
        ModelConfig("ollama_chat/fake", api_base=server.url, max_retries=2, timeout_s=10),
        lambda _req, res: results.append(res),
    )
    assert results[0].error_kind == "refused" and "refused by the workbench" in results[0].error
    refused.append(results[0].error)
    monkeypatch.setattr(litellm, "api_base", None)

    # 5. resume and retry-failed after the environment changed under a recorded run
    wb.allow_endpoint("localhost:11434")  # Ollama's default port, named by the admin (nothing listens there)
    offline_server_run = wb.start_run("dev", labels=["edema"], model="ollama_chat/llama3", max_retries=0, timeout_s=5)
    assert wb.run_info(offline_server_run.run_id).endpoint == "http://localhost:11434 (provider default)"
    wb.allow_endpoint(forbidden.url)  # even an allowed address is refused when it is not where the run went
    with monkeypatch.context() as env:
        env.setenv("OLLAMA_API_BASE", forbidden.url)
        for flag in ("--resume", "--retry-failed"):
            expect_refusal(
                cli("run", flag, str(offline_server_run.run_id), *study),
                re.escape(f"it would now go to {forbidden.url} ($OLLAMA_API_BASE)"),
            )
    wb.disallow_endpoint(forbidden.url)

    # 6. bundles scored outside a study, and robustness: only the bundle's own local endpoint
    with monkeypatch.context() as env:
        env.setenv("OPENAI_API_KEY", "sk-secret")
        env.setenv("OPENAI_BASE_URL", forbidden.url + "/v1")
        score_args = ["score", "--bundle", str(bundle), "--reference", str(REPORTS), "--generated", f"g={REPORTS}"]
        expect_refusal(
            cli(*score_args, "--model", "openai/gpt-4o-mini"),
            re.escape(f"may not be sent to {forbidden.url}/v1 ($OPENAI_BASE_URL)"),
            "--allow-endpoint",
        )
        expect_refusal(
            cli(*score_args, "--model", "openai/fake", "--api-base", forbidden.url + "/v1"),
            re.escape(f"may not be sent to {forbidden.url}/v1"),
        )
        with pytest.raises(scoring.EndpointNotAllowed, match=re.escape(forbidden.url)) as err:
            scoring.score(bundle, REPORTS, {"g": REPORTS}, model="ollama/llama3", api_base=forbidden.url)
        refused.append(str(err.value))
        expect_refusal(
            cli("robustness", "--bundle", str(bundle), "--pairs", str(PAIRS), "--model", "openai/gpt-4o-mini"),
            re.escape(f"{forbidden.url}/v1 ($OPENAI_BASE_URL)"),
        )
        with pytest.raises(scoring.EndpointNotAllowed, match=re.escape(forbidden.url)) as err:
            scoring.robustness(bundle, PAIRS, model="openai/fake", api_base=forbidden.url)
        refused.append(str(err.value))
        # a study's list applies with --study (and in the app); the forbidden address is not on it
        expect_refusal(cli(*score_args, "--model", "openai/gpt-4o-mini", *study), "may not be sent to")
        with pytest.raises(scoring.EndpointNotAllowed, match=re.escape(forbidden.url)) as err:
            wb.score_generated(bundle, REPORTS, {"g": REPORTS}, model="openai/gpt-4o-mini")
        refused.append(str(err.value))
        with pytest.raises(scoring.EndpointNotAllowed, match=re.escape(forbidden.url)) as err:
            wb.robustness(bundle, PAIRS, model="openai/gpt-4o-mini")
        refused.append(str(err.value))

    # 7. suggestions from the model proposer (the tuning part's failing cases and notes go in its one call)
    wb.split_cohort("dev", validation=0.3, seed=0)
    first_run = int(wb.runs("dev")["id"].min())
    with monkeypatch.context() as env:
        env.setenv("OPENAI_API_KEY", "sk-secret")
        env.setenv("OPENAI_BASE_URL", forbidden.url + "/v1")
        expect_refusal(
            cli(
                "suggest",
                "edema",
                "--run",
                str(first_run),
                "--proposer",
                "llm",
                "--model",
                "openai/gpt-4o-mini",
                *study,
            ),
            re.escape(f"may not be sent to {forbidden.url}/v1 ($OPENAI_BASE_URL)"),
        )
    with pytest.raises(StudyError, match=re.escape(forbidden.url)) as err:
        wb.suggest("edema", run_id=first_run, proposer="llm", model="openai/fake", api_base=forbidden.url + "/v1")
    refused.append(str(err.value))

    assert (forbidden.connections, forbidden.bytes) == (0, 0)
    assert len(refused) == 28 and all(refused)  # the attempts counted in the README's Security paragraph


# ---------------------------------------------------------------- item 1: the endpoint checked is the one used


def test_provider_env_var_is_what_is_shown_recorded_and_used(small_study, monkeypatch):
    wb = small_study
    with running_server() as server:
        server.answer_fn = Oracle(wb.vocab.names())
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        settings = {"model": "openai/fake"}
        assert endpoint_label(settings) == f"{server.url} ($OPENAI_BASE_URL)"
        assert is_local_model(settings)  # the app says "this machine" only because it really is
        summary = wb.start_run("dev", labels=["edema"], model="openai/fake", max_retries=0)
        assert summary.failures == 0 and server.count == N_REPORTS
        assert wb.run_info(summary.run_id).endpoint == f"{server.url} ($OPENAI_BASE_URL)"
        assert {h.get("authorization") for h in server.headers} == {"Bearer sk-from-env"}
    monkeypatch.setenv("OLLAMA_API_BASE", "http://10.1.2.3:11434")
    assert not is_local_model({"model": "ollama/llama3"})
    assert endpoint_label({"model": "ollama/llama3"}) == "http://10.1.2.3:11434 ($OLLAMA_API_BASE)"


def test_a_configured_server_never_gets_the_providers_key(small_study, monkeypatch):
    with running_server() as server:
        server.answer_fn = Oracle(small_study.vocab.names())
        monkeypatch.setenv("OPENAI_API_KEY", "sk-real-provider-key")
        small_study.start_run("dev", labels=["edema"], model="openai/fake", api_base=server.url, max_retries=0)
        assert "Bearer sk-real-provider-key" not in {h.get("authorization") for h in server.headers}


def test_unknown_provider_needs_an_explicit_api_base():
    with pytest.raises(ValueError, match="cannot tell where litellm would send 'bedrock/x'"):
        resolve_endpoints("bedrock/x")
    with pytest.raises(ValueError, match="has no default endpoint"):
        resolve_endpoints("hosted_vllm/x", env={})
    assert resolve_endpoints("bedrock/x", api_base="http://127.0.0.1:1/v1")[0].url == "http://127.0.0.1:1/v1"


# ---------------------------------------------------------------- item 2: scoring outside a study


def test_bundle_records_its_endpoint_and_scoring_goes_there_and_says_so(local_bundle, tmp_path):
    wb, server, bundle = local_bundle
    content = json.loads(bundle.read_text())["bundle"]
    assert content["endpoint"]["resolved"] == [server.url] and content["endpoint"]["api_base"] == server.url
    before = server.count
    result = cli(
        "score",
        "--bundle",
        str(bundle),
        "--reference",
        str(REPORTS),
        "--generated",
        f"g={REPORTS}",
        "--resamples",
        "50",
        "--out",
        str(tmp_path / "out"),
    )
    assert result.exit_code == 0, result.output
    assert f"report text went to {server.url}" in result.output
    assert server.count > before
    assert json.loads((tmp_path / "out" / "results.json").read_text())["endpoint"] == server.url
    server.answer_fn = None  # the pairs are not study reports: the server's keyword answer
    robust = cli("robustness", "--bundle", str(bundle), "--pairs", str(PAIRS))
    assert robust.exit_code == 0 and f"report text went to {server.url}" in robust.output


def test_allow_endpoint_flag_allows_another_server_for_one_command(local_bundle):
    wb, _server, bundle = local_bundle
    with running_server() as other:
        other.answer_fn = Oracle(wb.vocab.names())
        args = [
            "score",
            "--bundle",
            str(bundle),
            "--reference",
            str(REPORTS),
            "--generated",
            f"g={REPORTS}",
            "--resamples",
            "20",
            "--model",
            "openai/fake",
            "--api-base",
            other.url,
        ]
        refused = cli(*args)
        assert refused.exit_code == 2 and f"may not be sent to {other.url}" in refused.output and other.count == 0
        allowed = cli(*args, "--allow-endpoint", other.url)
        assert allowed.exit_code == 0, allowed.output
        assert f"report text went to {other.url}" in allowed.output and other.count > 0
        via_api = scoring.score(
            bundle,
            REPORTS,
            {"g": REPORTS},
            model="openai/fake",
            api_base=other.url,
            allow_endpoints=[other.url],
            n_resamples=20,
        )
        assert via_api.endpoint == other.url


def test_a_remote_bundle_is_not_scored_without_being_allowed(local_bundle, monkeypatch):
    _wb, _server, bundle = local_bundle
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    with pytest.raises(scoring.EndpointNotAllowed, match=re.escape("https://api.openai.com/v1 (provider default)")):
        scoring.score(bundle, REPORTS, {"g": REPORTS}, model="openai/gpt-4o-mini")
    frame = pd.read_csv(PAIRS)
    with pytest.raises(scoring.EndpointNotAllowed, match="allow_endpoints"):
        scoring.robustness(bundle, frame, model="openai/gpt-4o-mini")


# ---------------------------------------------------------------- the guard on both HTTP paths of openai/ models


@pytest.mark.parametrize("own_handler", ["true", "false"])
def test_the_guard_covers_litellms_own_http_handler_and_the_openai_sdk(own_handler, forbidden, monkeypatch):
    """openai/ models go through litellm's own HTTP handler by default (less client CPU) or, with
    EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER=false, the OpenAI SDK: the httpx guard sees both, so a
    request to another address is refused unsent and a redirect is not followed."""
    import asyncio

    from workbench.labeller import llm

    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", own_handler)  # litellm reads it at every call
    litellm = llm._litellm()
    with running_server() as server:
        cfg = ModelConfig("openai/fake", api_base=server.url, max_retries=0, timeout_s=10)
        message = [{"role": "user", "content": "Report: secret text"}]

        async def stray_call():  # a call made while the engine's pin is active, to somewhere else
            token = llm.pin_endpoints(cfg)
            try:
                await litellm.acompletion(
                    model="openai/fake",
                    messages=message,
                    api_base=forbidden.url + "/v1",
                    api_key="sk-x",
                    num_retries=0,
                    max_retries=0,
                    timeout=10,
                )
            finally:
                llm._PINNED.reset(token)

        with pytest.raises(Exception) as err:
            asyncio.run(stray_call())
        assert llm.classify(err.value) == "refused"
        handler_frames = [
            frame
            for link in llm._chain(err.value)
            for frame in traceback.extract_tb(link.__traceback__)
            if "llm_http_handler" in frame.filename
        ]
        assert bool(handler_frames) is (own_handler == "true")  # the path this case is about was the one taken
        results = []
        complete_all_sync([CallRequest("k", message)], cfg, lambda _req, res: results.append(res))
        assert results[0].error is None and server.count == 1  # the pinned server itself is reached
    redirector = Redirector(forbidden.url, 307)
    try:
        results = []
        complete_all_sync(
            [CallRequest("k", message)],
            ModelConfig("openai/fake", api_base=redirector.url, max_retries=2, timeout_s=10),
            lambda _req, res: results.append(res),
        )
        assert results[0].error_kind == "redirect" and redirector.count == 1
    finally:
        redirector.close()
    assert (forbidden.connections, forbidden.bytes) == (0, 0)
