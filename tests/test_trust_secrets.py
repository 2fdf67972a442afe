"""Secrets and leftovers (issue 34, item 15): no database password in workbench.yaml in clear, no scoring
upload left in the temp folder, a stale Git lock from a killed freeze recovered, bundles' report text said.

Real SQLite, real Git, the real CLI through Click's runner.
"""

from __future__ import annotations

import os
import time

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import WorkbenchError
from workbench.services import init_study
from workbench.store import prompt_repo

SECRET = "s3cret-pw"
PG_WITH_PASSWORD = f"postgresql+psycopg://ana:{SECRET}@127.0.0.1:1/study"


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_init_refuses_a_database_password_in_the_url_and_writes_nothing(tmp_path):
    study = tmp_path / "s"
    result = cli("init", str(study), "--db", PG_WITH_PASSWORD)
    assert result.exit_code != 0
    assert "PGPASSWORD" in result.output and "workbench.yaml" in result.output
    assert SECRET not in result.output
    assert not (study / "workbench.yaml").exists()


def test_migrate_db_refuses_a_password_in_the_target_url_and_keeps_the_config(tmp_path):
    study = tmp_path / "s"
    init_study(study)
    before = (study / "workbench.yaml").read_text(encoding="utf-8")
    result = cli("migrate-db", "--to", PG_WITH_PASSWORD, "--study", str(study))
    assert result.exit_code != 0
    assert "PGPASSWORD" in result.output and ".pgpass" in result.output
    assert (study / "workbench.yaml").read_text(encoding="utf-8") == before
    assert SECRET not in before


def _age(path, seconds: float) -> None:
    """Make a file look `seconds` old (a lock left by a write killed that long ago)."""
    when = time.time() - seconds
    os.utime(path, (when, when))


def test_freeze_removes_a_stale_config_lock_left_by_a_killed_freeze_and_says_so(small_study):
    small_study.start_run("dev")
    lock = small_study.paths.prompts / ".git" / "config.lock"
    lock.write_text("[user]\n\tname = half-writ", encoding="utf-8")  # what a SIGKILL inside Git's config write leaves
    _age(lock, 3600)
    info = small_study.freeze("v1")
    assert info.json.exists() and not lock.exists()
    assert any("config.lock" in note and "stale" in note for note in info.notes)
    assert small_study.freeze("v2").json.exists()  # and the next freeze works too


def test_freeze_leaves_a_fresh_git_lock_alone(small_study):
    small_study.start_run("dev")
    lock = small_study.paths.prompts / ".git" / "config.lock"
    lock.write_text("", encoding="utf-8")  # as if `git config` were writing right now (by hand, outside the workbench)
    with pytest.raises(WorkbenchError, match="freeze of .v1. failed.*config.lock"):
        small_study.freeze("v1")
    assert lock.exists()
    assert "v1" not in prompt_repo.tags(small_study.paths.prompts)


def test_freeze_says_the_bundle_carries_few_shot_report_text(small_study):
    small_study.start_run("dev")
    examples = sum(len(lp.examples) for lp in small_study.prompts.unblinded_prompt_set().labels.values())
    assert examples > 0  # the fixture's prompts have few-shot examples
    info = small_study.freeze("v1")
    said = " ".join(info.notes)
    assert f"{examples} few-shot example" in said and "endpoint" in said
