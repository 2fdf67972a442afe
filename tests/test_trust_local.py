"""What a second user or process on the same machine can cause (issue 20, items 3, 8, 10 and 12).

Two `workbench run` at once on one SQLite study (real second processes), the app served to the
network without sign-in, study files other users can read, and user text shown as text in the
app. Real SQLite, real processes, Streamlit's AppTest for the pages.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT

from workbench.cli import main
from workbench.services import init_study

NO_AUTH_ON_NETWORK = "WORKBENCH_NO_AUTH_ON_NETWORK"  # what `workbench app --no-auth-on-network` tells the server


def cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def workbench_process(*args: str, env: dict | None = None) -> subprocess.Popen:
    """`workbench ARGS` as a real second process (this worktree's code first on the path)."""
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = f"{ROOT}{os.pathsep}{full.get('PYTHONPATH', '')}"
    return subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
        cwd=ROOT,
    )


def run_rows(db) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, status FROM run ORDER BY id").fetchall()


# ---------------------------------------------------------------- item 3: two runs at once on SQLite


def test_two_runs_at_once_on_sqlite_both_finish_and_none_stays_running(small_study):
    """Two real processes start a run on the same study at the same moment: each waits for the other's
    writes (never a false "nothing was saved"), both finish, and no run row is left `running`."""
    before = run_rows(small_study.root / "workbench.db")
    args = ("run", "--cohort", "dev", "--model", "workbench/rules", "--new", "--study", str(small_study.root))
    procs = [workbench_process(*args), workbench_process(*args)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    after = run_rows(small_study.root / "workbench.db")
    assert len(after) == len(before) + 2 and {status for _, status in after} == {"finished"}, after


def test_a_run_that_cannot_get_the_database_says_it_waits_fails_after_the_bound_and_leaves_nothing(small_study):
    """Another process holds SQLite's write lock: `workbench run` says it is waiting, gives up after the
    bound ($WORKBENCH_DB_WAIT_S) with a clear line, exits non-zero, and no run row is left behind."""
    db = small_study.root / "workbench.db"
    before = run_rows(db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the other process: it writes, and keeps the lock
    try:
        proc = workbench_process(
            "run",
            "--cohort",
            "dev",
            "--model",
            "workbench/rules",
            "--new",
            "--study",
            str(small_study.root),
            env={"WORKBENCH_DB_WAIT_S": "3"},
        )
        out, err = proc.communicate(timeout=600)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode not in (0, None), (out, err)
    assert "waiting for the database: another process is writing to it (giving up after 3 s)" in err, err
    assert "the database stayed busy for 3 s" in err, err
    assert run_rows(db) == before  # nothing half-made: no run row, let alone one stuck `running`


def test_a_run_whose_database_write_fails_midway_is_never_left_running(small_study, monkeypatch):
    """A run that starts and then stops on an error is marked incomplete, not left `running`."""
    from workbench.store import queries as q

    def broken(*_args, **_kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(q, "done_prediction_keys", broken)  # fails after the run row was created
    with pytest.raises(sqlite3.OperationalError):
        small_study.start_run("dev", model="workbench/rules")
    assert run_rows(small_study.root / "workbench.db")[-1][1] == "incomplete"


# ---------------------------------------------------------------- item 8: the app on the network without sign-in


def test_app_on_the_network_without_auth_is_refused_unless_asked(small_study, monkeypatch):
    def no_server(*_args):
        raise AssertionError("a server was started")  # `workbench app` becomes the server (execve): never in a test

    monkeypatch.setattr(os, "execve", no_server)
    refused = cli("app", "--address", "0.0.0.0", "--study", str(small_study.root))
    assert refused.exit_code == 2, refused.output
    assert "refusing to serve on 0.0.0.0 with auth: none" in refused.output and "--no-auth-on-network" in refused.output
    demo = cli("demo", "--path", str(small_study.root.parent / "demo"), "--address", "192.0.2.2")
    assert demo.exit_code == 2 and "refusing to serve on 192.0.2.2" in demo.output
    assert not (small_study.root.parent / "demo").exists()  # refused before anything was created
    # asked for: the server is told, so every page says so; loopback needs nothing
    from workbench.cli import app_environment

    env = app_environment(small_study.root, "0.0.0.0", open_network=True)
    assert env[NO_AUTH_ON_NETWORK] == "0.0.0.0"
    assert NO_AUTH_ON_NETWORK not in app_environment(small_study.root, "127.0.0.1")


def app_test(root):
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(str(ROOT / "workbench" / "ui" / "app.py"), default_timeout=120)


def test_the_app_says_when_it_is_served_without_sign_in_and_when_its_files_are_open(small_study, monkeypatch):
    """Items 8 and 10 in the app: a banner on every page, and the permission warning (nothing changed)."""
    small_study.root.chmod(0o755)
    monkeypatch.setenv("WORKBENCH_STUDY", str(small_study.root))
    monkeypatch.setenv(NO_AUTH_ON_NETWORK, "0.0.0.0")
    at = app_test(small_study.root).run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "Served on the network \\(0\\.0\\.0\\.0\\) without sign\\-in" in errors, errors
    warnings = " ".join(w.value for w in at.warning)
    assert "can be read by other users of this machine \\(mode 0755" in warnings, warnings
    assert stat.S_IMODE(small_study.root.stat().st_mode) == 0o755  # said, never changed silently


# ---------------------------------------------------------------- item 10: private files


def test_a_new_study_is_private_to_its_owner_and_an_open_one_is_said(tmp_path):
    old = os.umask(0o022)  # the usual umask: without the fix, 0755 and 0644
    try:
        wb = init_study(tmp_path / "s", vocab="chestxray14")
    finally:
        os.umask(old)
    assert stat.S_IMODE(wb.root.stat().st_mode) == 0o700
    assert stat.S_IMODE((wb.root / "workbench.db").stat().st_mode) == 0o600
    assert wb.permission_warnings() == []
    (wb.root / "workbench.db").chmod(0o644)
    wb.root.chmod(0o755)
    result = cli("prompts", "status", "--study", str(wb.root))
    assert result.exit_code == 0, result.output
    assert f"warning: the study folder {wb.root} can be read by other users of this machine (mode 0755" in result.output
    assert f"warning: the database {wb.root / 'workbench.db'} can be read" in result.output
    assert "chmod 700" in result.output and "chmod 600" in result.output
    assert stat.S_IMODE(wb.root.stat().st_mode) == 0o755  # nothing changed behind the user's back


# ---------------------------------------------------------------- item 12: user text is text


def test_commit_messages_and_notes_are_shown_as_text_not_markdown(small_study, monkeypatch):
    """A bare URL or Markdown in a commit message is not turned into a link on Home: it is plain text."""
    from workbench.store import prompt_repo

    message = "see http://evil.example/x and [click](http://evil.example) **now**"
    files = {p.name: p.read_text() for p in small_study.paths.prompts.glob("*.yaml")}
    name = sorted(files)[0]
    files[name] = files[name] + "\n# touched\n"
    prompt_repo.commit_files(small_study.paths.prompts, files, message, small_study.actor.identity(), base=None)
    monkeypatch.setenv("WORKBENCH_STUDY", str(small_study.root))
    at = app_test(small_study.root).run()
    assert not at.exception
    assert message in [t.value for t in at.text]  # shown as typed, in a text element
    markdown = [m.value for m in (*at.markdown, *at.caption)]
    assert not any("evil" in m for m in markdown), markdown
