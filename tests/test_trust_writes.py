"""Issue 34: a write that fails half way (a full disk) leaves nothing half-written, and says what was kept.

A full disk is made real for one child process with RLIMIT_FSIZE: a write past the limit fails with EFBIG
exactly where ENOSPC would, with no mock in the process."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

from conftest import DATA

REPORTS = DATA / "reports_small.csv"


def run_limited(args: list[str], max_file_bytes: int | None, cwd: Path) -> subprocess.CompletedProcess:
    """`workbench ARGS` in a child whose every file may grow to max_file_bytes (None: no limit)."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        if max_file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=600,
    )


# ---------------------------------------------------------------------------------------------
# item 7: score --out writes every output to a temporary file and renames them only when all are complete


def test_score_out_on_a_full_disk_leaves_no_empty_or_cut_file(small_study, tmp_path):
    small_study.start_run("dev")
    bundle = small_study.freeze("v1")["json"]
    args = ["score", "--bundle", str(bundle), "--reference", str(REPORTS), "--generated", f"g={REPORTS}"]
    args += ["--resamples", "20"]
    whole = run_limited([*args, "--out", str(tmp_path / "whole")], None, tmp_path)
    assert whole.returncode == 0, whole.stderr
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "whole").iterdir()}
    limit = sizes["summary.csv"] + 1  # the summary fits, results.json (larger) is cut by the "full disk"
    assert sizes["results.json"] > limit, sizes

    full = run_limited([*args, "--out", str(tmp_path / "new")], limit, tmp_path)
    assert full.returncode != 0, full.stdout + full.stderr
    assert "nothing was saved" in full.stderr, full.stderr
    assert not (tmp_path / "new").exists()

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "summary.csv").write_text("earlier,complete\n1,2\n")
    again = run_limited([*args, "--out", str(kept)], limit, tmp_path)
    assert again.returncode != 0, again.stdout + again.stderr
    assert sorted(p.name for p in kept.iterdir()) == ["summary.csv"]  # no .partial file left behind
    assert (kept / "summary.csv").read_text() == "earlier,complete\n1,2\n"
