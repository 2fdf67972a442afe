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
    bundle = small_study.freeze("v1").json
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


# ---------------------------------------------------------------------------------------------
# item 6: a prompt version and its audit event are kept together; verify catches a commit without its event


def refuse_prompt_saves_in_the_database(wb) -> None:
    """The database itself refuses the save event, as a full disk does (a trigger: no mock in the process)."""
    from sqlalchemy import text

    with wb.engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TRIGGER full_disk BEFORE INSERT ON auditevent WHEN NEW.entity = 'prompt' "
                "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
            )
        )


def edited(wb, label: str = "pneumonia"):
    import dataclasses

    lp = wb.label_prompt(label)
    return dataclasses.replace(lp, definition=lp.definition + " Edited.")


def head(wb) -> str:
    import git

    repo = git.Repo(wb.paths.prompts)
    try:
        return repo.head.commit.hexsha
    finally:
        repo.close()


def test_a_save_whose_audit_event_fails_leaves_no_commit(small_study):
    import pytest
    from sqlalchemy.exc import SQLAlchemyError

    wb = small_study
    seed = head(wb)
    refuse_prompt_saves_in_the_database(wb)
    with pytest.raises(SQLAlchemyError, match="database or disk is full"):
        wb.save_prompts([edited(wb)], "v2", seed)
    assert head(wb) == seed  # the commit was taken back: "nothing was saved" is true
    assert wb.verify_audit().ok
    assert "Edited." in (wb.paths.prompts / "pneumonia.yaml").read_text()  # the edit waits in the folder


def test_the_cli_says_nothing_was_saved_only_when_nothing_was(small_study):
    from click.testing import CliRunner

    from workbench.cli import main

    wb = small_study
    seed = head(wb)
    refuse_prompt_saves_in_the_database(wb)
    path = wb.paths.prompts / "pneumonia.yaml"
    path.write_text(path.read_text().replace("definition: ", "definition: Edited by hand. ", 1))
    result = CliRunner().invoke(main, ["prompts", "save", "pneumonia", "-m", "v2", "--study", str(wb.root)])
    assert result.exit_code != 0 and "nothing was saved" in result.output, result.output
    assert head(wb) == seed


def test_verify_catches_a_version_without_its_audit_event(small_study):
    import git
    from click.testing import CliRunner

    from workbench.cli import main

    wb = small_study
    seed = head(wb)
    v2 = wb.save_prompts([edited(wb)], "v2", seed)
    assert wb.verify_audit().ok
    path = wb.paths.prompts / "pleural_effusion.yaml"
    path.write_text(path.read_text() + "\n")
    repo = git.Repo(wb.paths.prompts)
    try:
        repo.index.add(["pleural_effusion.yaml"])
        lost = repo.index.commit("a version whose event was lost").hexsha
    finally:
        repo.close()
    result = wb.verify_audit()
    assert not result.ok and result.reason.startswith(f"prompt version {lost[:8]} ('a version whose event")
    assert v2[:8] not in result.reason
    cli = CliRunner().invoke(main, ["audit", "--verify", "--study", str(wb.root)])
    assert cli.exit_code == 1 and f"prompt version {lost[:8]}" in cli.output
