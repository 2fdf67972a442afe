"""A run killed with SIGKILL resumes without repeating finished calls (real processes, real HTTP).

The labeller runs in a child process (`python -m workbench.cli run ...`) against the fake
OpenAI-compatible server in this process, answering slowly; once some predictions are in the
SQLite database the child is killed with SIGKILL (no cleanup, no atexit), and a second child
runs `workbench run --resume RUN`. The server counts every request of both processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT
from fake_llm_server import last_user_text, running_server

CONCURRENCY = 2
N_CALLS = 8 * 20  # 8 reports x 20 asked labels (No Finding is derived)


def answer(messages: list[dict]) -> str:
    """1 when the label's last word appears in the report (between the template's triple quotes)."""
    text = last_user_text(messages)
    report = text.split('"""')[-2].lower()
    name = re.search(r"Answer about (.+?) only\.", text).group(1)
    return json.dumps({"value": int(name.split()[-1].lower() in report), "evidence": ""})


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "workbench.cli", *args]


def child_env() -> dict:
    env = dict(os.environ, LITELLM_OFFLINE_MODE="true", PYTHONUNBUFFERED="1")
    env.pop("WORKBENCH_USER", None)
    env.pop("WORKBENCH_ROLE", None)
    return env


def stored(db: Path) -> tuple[int | None, int]:
    """(run id, predictions with a value) as another process sees the database right now."""
    if not db.exists():
        return None, 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        row = con.execute("SELECT max(id) FROM run").fetchone()
        run_id = row[0] if row else None
        if run_id is None:
            return None, 0
        n = con.execute("SELECT count(*) FROM prediction WHERE run_id = ? AND value IS NOT NULL", (run_id,)).fetchone()[
            0
        ]
        return run_id, n
    except sqlite3.OperationalError:  # schema not created yet, or a writer holds a lock for a moment
        return None, 0
    finally:
        con.close()


def wait_for_answers(child: subprocess.Popen, db: Path, n: int) -> tuple[int | None, int]:
    """Wait until a child run has stored n answers (or ended, or 180 s passed); (run id, answers stored)."""
    deadline = time.monotonic() + 180  # the child imports litellm (5-20 s on a busy machine)
    run_id, done = None, 0
    while time.monotonic() < deadline and done < n and child.poll() is None:
        time.sleep(0.05)
        run_id, done = stored(db)
    return run_id, done


def test_sigkill_then_resume_repeats_no_finished_call(small_study):
    wb = small_study
    db = wb.root / "workbench.db"
    with running_server(answer_fn=answer, latency=0.2) as server:
        first = subprocess.Popen(
            cli(
                "run",
                "--cohort",
                "dev",
                "--study",
                str(wb.root),
                "--model",
                "openai/fake",
                "--api-base",
                server.url,
                "--concurrency",
                str(CONCURRENCY),
            ),
            cwd=ROOT,
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            run_id, done = wait_for_answers(first, db, 10)
            assert first.poll() is None, f"the run ended before it could be killed: {first.communicate()}"
            assert done >= 10, "no predictions were stored in time"
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        finally:
            if first.poll() is None:
                os.kill(first.pid, signal.SIGKILL)
                first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL
        server.settle()  # the server finishes the requests that were in flight at the kill
        before_resume = server.count
        run_id, done_at_kill = stored(db)
        assert 10 <= done_at_kill < N_CALLS
        assert wb.run_info(run_id).status == "running"  # nobody got to write "finished"

        server.latency = 0.0
        second = subprocess.run(
            cli("run", "--resume", str(run_id), "--study", str(wb.root)),
            cwd=ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert second.returncode == 0, second.stderr
        made = N_CALLS - done_at_kill
        assert (
            f"run {run_id} finished: {made} calls needed, {made} made, 0 answers reused from the cache, "
            f"{done_at_kill} already done, 0 failures"
        ) in second.stdout
        total_requests = server.count

    run = wb.run_info(run_id)
    assert run.status == "finished" and run.failures == 0
    preds = wb.predictions(run_id)
    assert len(preds) == N_CALLS and preds["value"].notna().all()
    assert set(zip(preds["report_id"], preds["label"], strict=False)) == {
        (f"s{i}", lab) for i in range(1, 9) for lab in wb.vocab.asked_ids
    }
    # The resume made exactly the calls that had no stored answer.
    assert total_requests - before_resume == made
    # Over both processes the server saw every call once, plus the calls that were in flight at
    # the kill: their answers had not been stored (the prediction and the cache entry are written
    # in one transaction when the answer arrives), so the resume legitimately asks them again.
    # The engine never has more than `concurrency` calls in flight, so at most that many repeat;
    # a finished (stored) call is never repeated.
    repeats = total_requests - N_CALLS
    assert 0 <= repeats <= CONCURRENCY, f"{repeats} calls were repeated"
    # The answers are the server's: the reports that say "effusion" and "pneumothorax".
    got = preds.set_index(["report_id", "label"])["value"]
    assert (
        got[("s2", "pleural_effusion")] == 1 and got[("s7", "pneumothorax")] == 1 and got[("s4", "pneumothorax")] == 0
    )
