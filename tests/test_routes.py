"""Report text reaches only the address it was checked for, whatever route a connection takes (issue 20, item 1).

The guard test of test_governance.py, extended to the routes that redirect a connection below the
URL: every proxy variable httpx and aiohttp read (upper and lower case, ALL_PROXY, a NO_PROXY that
does not cover the host) and a host name that resolves to another address. The forbidden host is
a raw TCP listener on 127.0.0.2 that counts every connection and byte. Real litellm, real HTTP,
real SQLite.

The name that resolves elsewhere uses the system resolver itself, not a mock: a second process
runs in a private mount namespace (`unshare -rm`) whose /etc/hosts maps localhost to 127.0.0.2,
so glibc answers 127.0.0.2 for the name the study allows as "this machine". Where unshare is not
permitted that test is skipped (the pure rule is also tested in tests/core/test_endpoints.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import DATA, ROOT
from fake_llm_server import running_server
from test_governance import PROVIDER_VARS, Listener

from workbench.cli import main

REPORTS = DATA / "reports_small.csv"
PROXY_CASES = [  # (variable(s) set, the api_base scheme they would carry)
    ({"HTTP_PROXY": "{proxy}"}, "http"),
    ({"http_proxy": "{proxy}"}, "http"),
    ({"ALL_PROXY": "{proxy}"}, "http"),
    ({"all_proxy": "{proxy}"}, "http"),
    ({"HTTP_PROXY": "{proxy}", "NO_PROXY": "localhost,example.org,10.0.0.0/8"}, "http"),  # a NO_PROXY gap
    ({"HTTPS_PROXY": "{proxy}"}, "https"),
    ({"https_proxy": "{proxy}", "no_proxy": "::1"}, "https"),
]
ALL_PROXY_VARS = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "AIOHTTP_TRUST_ENV",
)


@pytest.fixture
def forbidden():
    listener = Listener("127.0.0.2")
    yield listener
    listener.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in (*PROVIDER_VARS, *ALL_PROXY_VARS):
        monkeypatch.delenv(var, raising=False)


def fresh_clients() -> None:
    """Forget litellm's cached HTTP clients: each case builds its client (and proxy mounts) under its own variables."""
    from workbench.labeller import llm

    llm._litellm().in_memory_llm_clients_cache.flush_cache()


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_no_proxy_variable_carries_report_text_to_a_host_nobody_allowed(small_study, forbidden, monkeypatch):
    """`workbench run` with each proxy variable set to the forbidden listener: the calls bypass it (the
    run goes to the checked server, which answers), and the listener receives 0 bytes."""
    wb = small_study
    labels = iter(wb.vocab.asked_ids)
    with running_server() as server:
        wb.allow_endpoint(f"https://127.0.0.1:{server.port}")  # its port by https too (a handshake that fails)
        for variables, scheme in PROXY_CASES:
            label = next(labels)
            with monkeypatch.context() as env:
                for name, value in variables.items():
                    env.setenv(name, value.format(proxy=forbidden.url))
                fresh_clients()
                api_base = server.url if scheme == "http" else server.url.replace("http://", "https://")
                before = server.count
                result = cli(
                    "run",
                    "--cohort",
                    "dev",
                    "--labels",
                    label,
                    "--model",
                    "openai/fake",
                    "--api-base",
                    api_base,
                    "--study",
                    str(wb.root),
                )
                if scheme == "http":  # direct to the checked server: every call answered
                    assert result.exit_code == 0, (variables, result.output)
                    assert server.count - before == 8, variables
                else:  # https to a plain-HTTP server fails its handshake, but never through the proxy
                    assert result.exit_code == 3 and "stopped early" in result.output, (variables, result.output)
            assert (forbidden.connections, forbidden.bytes) == (0, 0), variables


def test_a_proxy_inside_the_transport_is_refused_at_connect_and_the_run_stops_early(
    small_study, forbidden, monkeypatch
):
    """aiohttp told to read the proxy variables itself (AIOHTTP_TRUST_ENV) connects to the proxy below httpx:
    the socket check refuses that connect, nothing is sent, and the run stops after a few refusals,
    says why and exits non-zero; no run stays `running` and nothing is scored."""
    wb = small_study
    with running_server() as server:
        monkeypatch.setenv("AIOHTTP_TRUST_ENV", "true")
        monkeypatch.setenv("HTTP_PROXY", forbidden.url)
        fresh_clients()
        result = cli(
            "run",
            "--cohort",
            "dev",
            "--labels",
            "edema",
            "--model",
            "openai/fake",
            "--api-base",
            server.url,
            "--concurrency",
            "1",
            "--study",
            str(wb.root),
        )
        assert server.count == 0
    assert result.exit_code == 3, result.output
    assert "stopped early: 5 calls in a row failed the same way (refused)" in result.output
    assert f"a connection to 127.0.0.2:{forbidden.port} is not to an address of the checked endpoint" in result.output
    run = wb.runs("dev").iloc[0]
    assert run["status"] == "incomplete"
    assert (forbidden.connections, forbidden.bytes) == (0, 0)


def test_score_outside_a_study_bypasses_a_proxy_nobody_allowed(small_study, forbidden, monkeypatch, tmp_path):
    """`workbench score` (no study: the command's --allow-endpoint) with HTTP_PROXY and all_proxy set."""
    wb = small_study
    wb.start_run("dev")  # the offline labeller: a bundle to score with, no server needed
    bundle = wb.freeze("v1").json
    with running_server() as server:
        monkeypatch.setenv("HTTP_PROXY", forbidden.url)
        monkeypatch.setenv("all_proxy", forbidden.url)
        fresh_clients()
        result = cli(
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
            server.url,
            "--allow-endpoint",
            server.origin,
            "--out",
            str(tmp_path / "out"),
        )
        assert result.exit_code == 0, result.output
        assert f"report text went to {server.url}" in result.output and server.count > 0
    assert (forbidden.connections, forbidden.bytes) == (0, 0)


# ---------------------------------------------------------------- a name that resolves to another address


def _unshare_works() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(
    not _unshare_works(), reason="needs `unshare -rm` (a private mount namespace) for a private /etc/hosts"
)
def test_a_name_that_resolves_elsewhere_is_refused_at_connect(small_study, tmp_path):
    """localhost (allowed as this machine) resolves to 127.0.0.2 in the second process: `workbench run` and
    `workbench score` there connect nowhere but the checked addresses, stop early and exit non-zero."""
    wb = small_study
    wb.start_run("dev")
    bundle = wb.freeze("v1").json
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.2 localhost\n")
    listener = Listener("127.0.0.2")
    try:
        base = f"http://localhost:{listener.port}/v1"
        wb.allow_endpoint(f"localhost:{listener.port}")  # the admin allowed this machine's port, as localhost
        script = tmp_path / "attack.sh"
        script.write_text(
            'mount --bind "$1" /etc/hosts || exit 90\n'
            "getent hosts localhost | grep -q 127.0.0.2 || exit 91\n"
            f"{sys.executable} -m workbench.cli run --cohort dev --labels edema --model openai/fake --api-base {base} "
            f'--concurrency 1 --study {wb.root}; echo "run-exit=$?"\n'
            f"{sys.executable} -m workbench.cli score --bundle {bundle} --reference {REPORTS} --generated g={REPORTS} "
            f'--model openai/fake --api-base {base} --allow-endpoint http://localhost:{listener.port} --resamples 10; echo "score-exit=$?"\n'
        )
        env = {k: v for k, v in os.environ.items() if k not in (*PROVIDER_VARS, *ALL_PROXY_VARS)}
        env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
        done = subprocess.run(
            ["unshare", "-rm", "sh", str(script), str(hosts)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            cwd=ROOT,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, out
        assert "run-exit=3" in out and "score-exit=2" in out, out
        assert f"a connection to 127.0.0.2:{listener.port} is not to an address of the checked endpoint" in out, out
        assert "stopped early" in out
    finally:
        listener.close()
    assert (listener.connections, listener.bytes) == (0, 0)
    assert wb.runs("dev").iloc[0]["status"] == "incomplete"  # stopped, not left running, not finished
