"""A run whose executor died (issue 34, item 14): a SIGKILLed `workbench run` leaves its row `running` with a
lease nobody renews. metrics, history and the run table show it as interrupted, with its answers kept and
the command that resumes it. Real SQLite and the real CLI; the killed executor is a real process.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.store import queries as q


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def left_running(wb, run_id: int, holder: str, expires_at: float) -> None:
    """The row as a SIGKILL leaves it: still `running`, no finish time, the dead executor's lease."""
    with wb.session(write=True) as s:
        q.update_run(s, run_id, status="running", finished_at=None, lease_holder=holder, lease_expires_at=expires_at)


def dead_pid() -> int:
    """The id of a process of this machine that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_metrics_of_a_run_whose_lease_expired_says_it_was_left_running_and_how_to_resume(small_study):
    run_id = small_study.start_run("dev").run_id
    left_running(small_study, run_id, "another-host:4242:abc", time.time() - 3600)
    result = cli("metrics", str(run_id), "--study", str(small_study.root))
    assert result.exit_code != 0
    assert "left `running` by a process that is gone" in result.output
    assert f"workbench run --resume {run_id}" in result.output
    assert small_study.run_info(run_id).status == "interrupted"
    assert small_study.resume_run(run_id).run_id == run_id
    assert small_study.run_info(run_id).status == "finished"


def test_history_and_the_run_table_show_a_run_whose_process_is_gone_as_interrupted(small_study):
    import socket

    run_id = small_study.start_run("dev").run_id
    # the lease is still live for an hour, but its holder's process on this machine has ended
    left_running(small_study, run_id, f"{socket.gethostname()}:{dead_pid()}:abc", time.time() + 3600)
    result = cli("history", "--cohort", "dev", "--study", str(small_study.root))
    assert result.exit_code == 0, result.output
    assert "interrupted runs" in result.output and f"workbench run --resume {run_id}" in result.output
    assert small_study.runs().set_index("id").loc[run_id, "status"] == "interrupted"


def test_a_run_with_a_live_executor_is_left_running(small_study):
    import os
    import socket

    run_id = small_study.start_run("dev").run_id
    left_running(small_study, run_id, f"{socket.gethostname()}:{os.getppid()}:abc", time.time() + 3600)
    assert small_study.runs().set_index("id").loc[run_id, "status"] == "running"


@pytest.mark.parametrize("room", [40_000, 80_000])  # the disk fills at the run's lease, or at its answers
def test_a_full_disk_during_a_run_says_the_run_is_kept_and_how_to_resume(small_study, tmp_path, room):
    import resource
    import signal

    def full_disk():  # every file may grow to `room` bytes: the run's row fits, its lease or answers do not
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))

    small_study.engine.dispose()
    args = [sys.executable, "-m", "workbench.cli", "run", "--cohort", "dev", "--study", str(small_study.root)]
    done = subprocess.run(args, capture_output=True, text=True, preexec_fn=full_disk, timeout=600, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    runs = small_study.runs()
    assert len(runs) == 1 and runs.loc[0, "status"] != "running"
    run_id = int(runs.loc[0, "id"])
    assert "nothing was saved" not in done.stderr
    assert "the run is kept" in done.stderr and f"workbench run --resume {run_id}" in done.stderr
    assert small_study.resume_run(run_id).run_id == run_id  # the disk has room again
    assert small_study.run_info(run_id).status == "finished"


def test_audit_events_keep_the_order_they_were_written_in_when_the_clock_goes_back(small_study, monkeypatch):
    # issue 34 item 12: the audit's order is its sequence (the row id), not the writer's clock
    stamps = iter(["2026-12-05T10:00:00.000000+00:00", "2026-12-05T09:00:00.000000+00:00"])  # NTP stepped back
    monkeypatch.setattr(q, "now", lambda: next(stamps))
    for key in ("first", "second"):
        with small_study.session(write=True) as s:
            q.add_audit(s, "ana", "note", "clock", key)
    monkeypatch.undo()
    with small_study.session() as s:
        events = q.list_audit(s, entity="clock")
        assert list(events["entity_key"]) == ["second", "first"]  # newest first, by sequence
        assert q.verify_audit(s).ok
