"""Failure modes a server meets: a read-only or full database (one clear line, never report text),
and SIGTERM to `workbench app` / `workbench demo` (the Streamlit server stops with its command).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import event, text

from workbench.cli import main
from workbench.store import db

SECRET = "SECRET-PATIENT-TEXT left effusion"


@pytest.fixture
def reports_file(tmp_path) -> Path:
    path = tmp_path / "more.csv"
    path.write_text(f"id,findings,impression\nx1,{SECRET},none\nx2,{SECRET} again,none\n", encoding="utf-8")
    return path


def test_read_only_database_gives_one_line_without_report_text(small_study, reports_file):
    keep = small_study.engine.connect()  # a WAL database opened read-only needs its -shm file: keep one reader open
    keep.execute(text("SELECT 1"))
    env = dict(
        os.environ, WORKBENCH_DATABASE_URL=f"sqlite:///file:{small_study.root / 'workbench.db'}?mode=ro&uri=true"
    )
    env.pop("WORKBENCH_USER", None)
    try:
        cmds = [
            ["import", "reports", str(reports_file), "--cohort", "dev"],
            ["note", "s1", "edema", "--category", "other", "--significance", "unsure", "--text", SECRET],
            ["adjudicate", "s1", "edema", "1", "--reason", SECRET],
        ]
        for args in cmds:
            result = subprocess.run(
                [sys.executable, "-m", "workbench.cli", *args, "--study", str(small_study.root)],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert result.returncode == 1, result.stderr
            assert (
                result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and "read-only" in result.stderr
            )
            assert "SECRET" not in result.stdout + result.stderr and "Traceback" not in result.stderr
            assert "INSERT" not in result.stderr and "[parameters" not in result.stderr
    finally:
        keep.close()
    with small_study.session() as s:  # nothing was half-written
        assert s.execute(text("SELECT COUNT(*) FROM report WHERE id IN ('x1', 'x2')")).scalar() == 0
    assert small_study.notes().empty


def test_full_disk_gives_one_line_without_report_text(small_study, reports_file, monkeypatch):
    """SQLite's max_page_count makes the real 'database or disk is full' error (SQLITE_FULL)."""
    real = db.make_engine

    def capped(url):
        engine = real(url)

        @event.listens_for(engine, "connect")
        def cap(dbapi_conn, _record):
            pages = dbapi_conn.execute("PRAGMA page_count").fetchone()[0]
            dbapi_conn.execute(f"PRAGMA max_page_count = {pages}")

        return engine

    monkeypatch.setattr(db, "make_engine", capped)
    big = reports_file.parent / "big.csv"
    rows = "".join(f"y{i},{SECRET} {'x' * 2000},none\n" for i in range(200))
    big.write_text("id,findings,impression\n" + rows, encoding="utf-8")
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    result = CliRunner().invoke(
        main, ["import", "reports", str(big), "--cohort", "dev", "--study", str(small_study.root)]
    )
    assert result.exit_code == 1
    assert result.output.startswith("error: the disk is full") and result.output.count("\n") == 1
    assert "SECRET" not in result.output


def test_database_errors_never_carry_sql_parameters(small_study):
    """Even where an error is logged or shown raw (the app), SQLAlchemy hides the parameters."""
    from sqlalchemy.exc import IntegrityError

    with pytest.raises(IntegrityError) as info, small_study.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO cohort (id, name, language, created_at) VALUES (:i, :n, 'en', 'x')"),
            {"i": 1, "n": SECRET},
        )
    assert SECRET not in str(info.value) and "hidden due to hide_parameters" in str(info.value)


# ---------------------------------------------------------------- SIGTERM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.parametrize("command", ["app", "demo"])
def test_sigterm_stops_the_streamlit_server(small_study, tmp_path, command):
    port = free_port()
    args = ["app", "--study", str(small_study.root)] if command == "app" else ["demo", "--path", str(tmp_path / "demo")]
    env = dict(os.environ, LITELLM_OFFLINE_MODE="true")
    env.pop("WORKBENCH_USER", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", *args, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, 240, "the app to serve")
        assert proc.poll() is None, "the command ended before serving"
        proc.send_signal(signal.SIGTERM)  # what systemd and container runtimes send
        proc.wait(timeout=60)
        wait_for(lambda: not listening(port), 30, "the port to be released")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # only the group this test started, if anything is left


def test_a_read_only_database_still_answers_reads(small_study):
    """Reading an archived (read-only) study works, even when its settings changed since the last write."""
    path = small_study.root / "workbench.yaml"
    path.write_text(path.read_text().replace("dev_cohort: dev", "dev_cohort: dev2"))
    keep = small_study.engine.connect()
    keep.execute(text("SELECT 1"))
    env = dict(
        os.environ, WORKBENCH_DATABASE_URL=f"sqlite:///file:{small_study.root / 'workbench.db'}?mode=ro&uri=true"
    )
    env.pop("WORKBENCH_USER", None)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "workbench.cli", "reference", "--study", str(small_study.root)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        keep.close()
    assert result.returncode == 0, result.stderr
    assert "pleural_effusion" in result.stdout


def test_a_file_system_error_names_the_path_in_one_line(small_study, tmp_path, monkeypatch):
    """A bundle folder that cannot be written (here: a file where the folder should be)."""
    small_study.start_run("dev")
    (small_study.root / "bundles").write_text("not a folder")
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    result = CliRunner().invoke(main, ["freeze", "--name", "v1", "--study", str(small_study.root)])
    assert result.exit_code == 1 and result.output.startswith("error: ") and result.output.count("\n") == 1
    assert "bundles" in result.output and "Traceback" not in result.output
    (small_study.root / "bundles").unlink()  # the failed freeze left no tag behind: the name is still free
    again = CliRunner().invoke(main, ["freeze", "--name", "v1", "--study", str(small_study.root)])
    assert again.exit_code == 0 and (small_study.root / "bundles" / "v1.json").exists(), again.output
