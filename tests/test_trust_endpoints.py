"""Issue 34 items 2 and 11: a local endpoint is allowed by its address and port, never every local port (a
forwarder such as cntlm on 127.0.0.1 passed run bodies to its upstream); each call records the address it
connected to, and a name that moves to another address within a run is refused there unless an admin allowed it.

Real HTTP to the fake server, a raw TCP listener standing in for a local forwarder, and a resolver override in
this process (socket.getaddrinfo for one test name) for a name re-pointed mid-run."""

from __future__ import annotations

import contextlib
import errno
import socket

import pytest
from click.testing import CliRunner
from fake_llm_server import running_server
from test_governance import Listener

from workbench.cli import main
from workbench.labeller import endpoints
from workbench.study import StudyError, load_config


@pytest.fixture
def forwarder():
    """A raw listener on a loopback port nobody named (a local forwarder such as cntlm): counts what reaches it."""
    fwd = Listener(host="127.0.0.1")
    yield fwd
    fwd.close()


def test_a_new_study_allows_the_offline_labeller_only(study):
    assert study.config.allowed_endpoints == ["workbench/rules"]
    assert load_config(study.root).allowed_endpoints == ["workbench/rules"]


def test_the_offline_labeller_needs_no_endpoint(small_study):
    assert small_study.start_run("dev").status == "finished"


@pytest.mark.parametrize(
    "entries",
    [
        ["workbench/rules"],  # a new study
        ["workbench/rules", "http://127.0.0.1", "http://localhost", "https://127.0.0.1", "https://localhost"],  # old
    ],
    ids=["new-default", "old-portless-entries"],
)
def test_a_forwarder_on_an_unnamed_local_port_gets_not_one_connection(small_study, forwarder, entries):
    small_study.config.allowed_endpoints[:] = entries
    for api_base in (forwarder.url, forwarder.url.replace("127.0.0.1", "localhost")):
        with pytest.raises(StudyError, match="never every local port") as refused:
            small_study.start_run("dev", labels=["edema"], model="openai/fake", api_base=api_base, max_retries=0)
        assert f"may not be sent to {api_base}" in str(refused.value)
    assert (forwarder.connections, forwarder.bytes) == (0, 0)


def test_the_cli_refuses_the_forwarder_and_names_how_to_allow_a_local_server(small_study, forwarder):
    args = ["run", "--cohort", "dev", "--labels", "edema", "--model", "openai/fake", "--api-base", forwarder.url]
    result = CliRunner().invoke(main, [*args, "--study", str(small_study.root)])
    assert result.exit_code != 0 and f"may not be sent to {forwarder.url}" in result.output, result.output
    assert "127.0.0.1:8080" in result.output  # the form an admin allows a local server with
    assert (forwarder.connections, forwarder.bytes) == (0, 0)


def test_an_admin_allows_a_local_server_by_address_and_port(small_study):
    with running_server(allowed=False) as server:  # a server no admin named yet
        run = dict(labels=["edema"], model="openai/fake", api_base=server.url, max_retries=0, timeout_s=20)
        with pytest.raises(StudyError, match="not in this study's allowed endpoints"):
            small_study.start_run("dev", **run)
        assert server.requests == 0
        result = CliRunner().invoke(
            main, ["allow-endpoint", f"127.0.0.1:{server.port}", "--study", str(small_study.root)]
        )
        assert result.exit_code == 0, result.output
        assert f"http://127.0.0.1:{server.port}" in load_config(small_study.root).allowed_endpoints
        small_study.config.allowed_endpoints[:] = load_config(small_study.root).allowed_endpoints
        assert small_study.start_run("dev", **run).status == "finished" and server.count > 0


@pytest.mark.parametrize(
    "entry", ["http://127.0.0.1", "https://localhost", "http://[::1]/v1", "127.0.0.1", "http://0.0.0.0"]
)
def test_allowing_a_local_endpoint_without_its_port_is_refused(small_study, entry):
    with pytest.raises(StudyError, match="names no port|is not an endpoint"):
        small_study.allow_endpoint(entry)
    assert small_study.config.allowed_endpoints == load_config(small_study.root).allowed_endpoints


def test_a_portless_local_entry_is_the_schemes_own_port_and_a_remote_one_every_port():
    assert endpoints.url_allowed("http://127.0.0.1", "http://127.0.0.1/v1")
    assert endpoints.url_allowed("http://127.0.0.1", "http://127.0.0.1:80/v1")
    assert not endpoints.url_allowed("http://127.0.0.1", "http://127.0.0.1:3128/v1")
    assert not endpoints.url_allowed("http://localhost", "http://localhost:8080")
    assert not endpoints.url_allowed("https://localhost", "https://localhost:8443")
    assert not endpoints.url_allowed("http://127.0.0.2", "http://127.0.0.2:8080")
    assert not endpoints.url_allowed("http://0.0.0.0", "http://0.0.0.0:3128")
    assert endpoints.url_allowed("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1")
    assert not endpoints.url_allowed("http://127.0.0.1:8080", "http://127.0.0.1:8081/v1")
    assert endpoints.url_allowed("https://api.example.com", "https://api.example.com:8443/v1")  # a remote name
    assert endpoints.allowed_entry("127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert endpoints.allowed_entry("[::1]:8080") == "http://[::1]:8080"
    assert endpoints.allowed_entry("https://api.openai.com/v1") == "https://api.openai.com/v1"


def test_each_call_records_the_address_it_connected_to(small_study):
    with running_server() as server:
        summary = small_study.start_run(
            "dev", labels=["edema", "fracture"], model="openai/fake", api_base=server.url, max_retries=0, timeout_s=20
        )
        peer = f"127.0.0.1:{server.port}"
    assert summary.status == "finished" and summary.peers == {peer: summary.calls_made}
    assert f"connected to {peer}" in summary.message()
    facts = small_study.call_facts(summary.run_id)
    assert len(facts) == summary.calls_made and set(facts["peer"]) == {peer}
    shown = CliRunner().invoke(
        main, ["calls", str(summary.run_id), "--format", "csv", "--study", str(small_study.root)]
    )
    assert shown.exit_code == 0 and shown.output.count(peer) == summary.calls_made, shown.output


# ---------------------------------------------------------------- a name re-pointed within a run (item 11)

NAME = "model.workbench-test"  # resolved only by the override below


class Resolver:
    """socket.getaddrinfo for NAME answers `address` (changed by the test mid-run); other names as usual."""

    def __init__(self, monkeypatch, address: str) -> None:
        self.address = address
        real = socket.getaddrinfo

        def getaddrinfo(host, port, *args, **kwargs):
            if isinstance(host, bytes):
                host = host.decode()
            if host == NAME:
                return real(self.address, port, *args, **kwargs)
            return real(host, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(params=["aiohttp", "httpx"])
def resolving_anew(request, monkeypatch):
    """Each connection resolves the name again, on litellm's aiohttp transport (its DNS cache, 300 s by default,
    set to 0 s: what a run longer than that sees) and on httpx's own (no cache)."""
    import litellm
    from litellm.llms.custom_httpx import http_handler

    monkeypatch.setattr(http_handler, "AIOHTTP_TTL_DNS_CACHE", 0)
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", request.param == "httpx")
    return request.param


@pytest.fixture
def two_servers(resolving_anew):
    """A server on 127.0.0.1 and one on 127.0.0.2 at the same port; each call opens its own connection.
    The port the first was given may be held on 127.0.0.2 (a listener on every address, another test's
    server): then both start again on another port."""
    for _ in range(20):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(running_server(keep_alive=False))
            try:
                second = stack.enter_context(
                    running_server(host="127.0.0.2", port=first.port, keep_alive=False, allowed=False)
                )
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                continue
            yield first, second
            return
    raise AssertionError("no port was free on both 127.0.0.1 and 127.0.0.2 in 20 tries")


def moving_run(wb, first, resolver, after: int):
    """A one-call-at-a-time run to NAME that re-points NAME to 127.0.0.2 after `after` answers."""

    def answer_then_move(messages):
        if first.count >= after:
            resolver.address = "127.0.0.2"
        return '{"value": 0, "evidence": ""}'

    first.answer_fn = answer_then_move
    url = f"http://{NAME}:{first.port}/v1"
    return wb.start_run(
        "dev", labels=["edema", "fracture"], model="openai/fake", api_base=url, concurrency=1, max_retries=0
    )


def test_a_name_re_pointed_mid_run_is_refused_there_naming_both_addresses(small_study, two_servers, monkeypatch):
    first, second = two_servers
    small_study.allow_endpoint(f"http://{NAME}:{first.port}")
    resolver = Resolver(monkeypatch, "127.0.0.1")
    summary = moving_run(small_study, first, resolver, after=3)
    assert second.requests == 0  # not one request reached the address the name moved to
    assert first.count == 3 and summary.failures == summary.calls_made - 3
    assert summary.failure_kinds == {"refused": summary.calls_made - 3}
    example = summary.failure_examples["refused"]
    assert f"now resolves to 127.0.0.2:{first.port}" in example and f"was at 127.0.0.1:{first.port}" in example
    facts = small_study.call_facts(summary.run_id)
    assert set(facts["peer"].dropna()) == {f"127.0.0.1:{first.port}"}


def test_a_change_of_address_the_admin_allowed_goes_through_and_is_recorded(small_study, two_servers, monkeypatch):
    first, second = two_servers
    second.answer_fn = lambda messages: '{"value": 0, "evidence": ""}'
    small_study.allow_endpoint(f"http://{NAME}:{first.port}")
    small_study.allow_endpoint(f"127.0.0.2:{first.port}")  # the admin allows the address it moves to
    resolver = Resolver(monkeypatch, "127.0.0.1")
    summary = moving_run(small_study, first, resolver, after=3)
    assert summary.status == "finished" and summary.failures == 0 and second.count == summary.calls_made - 3
    assert summary.peers == {f"127.0.0.1:{first.port}": 3, f"127.0.0.2:{first.port}": summary.calls_made - 3}
    peers = small_study.call_facts(summary.run_id)["peer"].value_counts().to_dict()
    assert peers == summary.peers


def test_a_resume_after_the_name_moved_is_refused_at_the_new_address(small_study, two_servers, monkeypatch):
    import threading

    first, second = two_servers
    second.answer_fn = lambda messages: '{"value": 0, "evidence": ""}'
    small_study.allow_endpoint(f"http://{NAME}:{first.port}")
    resolver = Resolver(monkeypatch, "127.0.0.1")
    cancel = threading.Event()

    def answer_then_stop(messages):
        if first.count >= 3:
            cancel.set()  # the run is stopped (Ctrl-C) after three answers
        return '{"value": 0, "evidence": ""}'

    first.answer_fn = answer_then_stop
    url = f"http://{NAME}:{first.port}/v1"
    run = dict(labels=["edema", "fracture"], model="openai/fake", api_base=url, concurrency=1, max_retries=0)
    stopped = small_study.start_run("dev", cancel=cancel, **run)
    assert stopped.status == "cancelled" and small_study.call_facts(stopped.run_id)["peer"].nunique() == 1
    resolver.address = "127.0.0.2"  # the name moves between the run's two executions
    resumed = small_study.resume_run(stopped.run_id)
    assert second.requests == 0 and set(resumed.failure_kinds) == {"refused"}
    assert f"was at 127.0.0.1:{first.port}" in resumed.failure_examples["refused"]
    small_study.allow_endpoint(f"127.0.0.2:{first.port}")  # the admin allows where it went
    finished = small_study.retry_failed(stopped.run_id)
    assert finished.failures == 0 and second.count > 0
    assert set(small_study.call_facts(stopped.run_id)["peer"]) == {f"127.0.0.1:{first.port}", f"127.0.0.2:{first.port}"}
