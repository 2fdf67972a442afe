"""Every command has help text; the foundation commands work end to end on a temporary study."""

import click
import pytest
from click.testing import CliRunner
from conftest import DATA

from workbench.cli import main


def all_commands(group=main, prefix=()):
    """(path, command) for every command and subgroup."""
    for name, cmd in sorted(group.commands.items()):
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from all_commands(cmd, prefix + (name,))


@pytest.mark.parametrize("path,cmd", list(all_commands()), ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_every_command_has_help(path, cmd):
    assert cmd.help and len(cmd.help.strip()) > 10, f"{' '.join(path)} has no help text"
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0
    # init, demo, verify and robustness work on files, without a study
    if not isinstance(cmd, click.Group) and path[0] not in ("init", "demo", "verify", "robustness", "bundle"):
        assert "--study" in result.output, f"{' '.join(path)} lacks --study"


def test_init_import_reference_agreement(tmp_path, monkeypatch):
    runner = CliRunner()
    study = tmp_path / "s"
    result = runner.invoke(main, ["init", str(study), "--vocab", "ranscore-21"])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("WORKBENCH_STUDY", str(study))
    result = runner.invoke(main, ["import", "reports", str(DATA / "reports_small.csv"), "--cohort", "dev"])
    assert "added 8" in result.output
    result = runner.invoke(main, ["import", "readings", str(DATA / "readings_small.csv")])
    assert "added 960" in result.output
    result = runner.invoke(main, ["reference", "--format", "csv"])
    assert result.exit_code == 0
    lines = {line.split(",")[0]: line for line in result.output.splitlines()}
    assert lines["pneumonia"].split(",")[3] == "1"  # one item waiting
    result = runner.invoke(main, ["agreement"])
    assert result.exit_code == 0 and "fleiss" in result.output.lower()


def test_user_errors_are_one_line_not_a_traceback(tmp_path):
    result = CliRunner().invoke(main, ["reference", "--study", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a study" in result.output and "Traceback" not in result.output
