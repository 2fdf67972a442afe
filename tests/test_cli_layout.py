"""`workbench --help` lists the commands by workflow, with consistent names; old names still work,
unlisted (issue 30 item 12)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from workbench.cli import SECTIONS, main

WORKFLOW = [
    "Study and data",
    "Reading",
    "Runs and evaluation",
    "Prompts and optimisation",
    "Freezing and scoring",
    "Teams and admin",
]
OLD_NAMES = {("note",): "error-note", ("notes",): "error-notes", ("test-looks",): "test-look-history"}


def help_sections() -> dict[str, list[str]]:
    """Section title -> command names, as `workbench --help` prints them."""
    text = CliRunner().invoke(main, ["--help"], env={"COLUMNS": "120"}).output
    sections, current = {}, None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][\w ]+:", line):
            current = line[:-1]
            sections[current] = []
        elif current and re.match(r"  \S", line):
            sections[current].append(line.split()[0])
    sections.pop("Options", None)
    return sections


def test_help_groups_every_command_by_workflow_in_order():
    sections = help_sections()
    assert list(sections) == WORKFLOW  # no "Other": every command has its place
    listed = [name for names in sections.values() for name in names]
    visible = sorted(n for n, c in main.commands.items() if not c.hidden)
    assert sorted(listed) == visible and len(listed) == len(set(listed))
    assert sections["Runs and evaluation"][:3] == ["run", "metrics", "compare"]
    assert {"split-metrics", "split-compare", "split-history"} <= set(sections["Runs and evaluation"])


def test_names_are_consistent_and_the_old_ones_still_work_unlisted(small_study):
    listed = [name for names in help_sections().values() for name in names]
    for (old,), new in OLD_NAMES.items():
        assert old not in listed and new in listed
        assert main.commands[old].callback is main.commands[new].callback
    readings = main.commands["readings"]
    assert (
        readings.commands["notes"].hidden
        and readings.commands["notes"].callback is readings.commands["comments"].callback
    )
    assert "notes" not in CliRunner().invoke(main, ["readings", "--help"]).output.split("Commands:")[1]
    study = ["--study", str(small_study.root)]
    for argv in (["notes"], ["error-notes"]):
        result = CliRunner().invoke(main, [*argv, *study])
        assert result.exit_code == 0 and "no error notes yet" in result.output, result.output
    for argv in (["readings", "notes"], ["readings", "comments"]):
        result = CliRunner().invoke(main, [*argv, "--format", "csv", *study])
        assert result.exit_code == 0, result.output


def test_sections_name_only_commands_that_exist():
    assert {n for names in SECTIONS.values() for n in names} <= set(main.commands)
