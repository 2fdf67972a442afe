"""Secrets and leftovers (issue 34, item 15): no database password in workbench.yaml in clear, no scoring
upload left in the temp folder, a stale Git lock from a killed freeze recovered, bundles' report text said.

Real SQLite, real Git, the real CLI through Click's runner.
"""

from __future__ import annotations

from click.testing import CliRunner

from workbench.cli import main
from workbench.services import init_study

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
