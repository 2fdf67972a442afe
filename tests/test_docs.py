"""The documentation as shipped: a README a newcomer reads in two minutes, a CLI reference that names every
command and option (generated from Click), and a site that builds without a broken link."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import click

from workbench.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    """docs/gen_cli.py, imported from where it lies."""
    spec = importlib.util.spec_from_file_location("gen_cli", ROOT / "docs" / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leaves(group=main, prefix=()):
    for name, cmd in sorted(group.commands.items()):
        if cmd.hidden:  # an old name kept working (issue 30 item 12): documented under its new name
            continue
        if isinstance(cmd, click.Group):
            yield from _leaves(cmd, prefix + (name,))
        else:
            yield prefix + (name,), cmd


def test_the_cli_reference_is_what_the_commands_say():
    shipped = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert shipped == _generator().render(), "docs/cli.md is stale: run python docs/gen_cli.py"


def test_the_cli_reference_names_every_command_and_option():
    text = _generator().render()
    for path, cmd in _leaves():
        section = text.split(f"### `workbench {' '.join(path)}`\n", 1)
        assert len(section) == 2, f"workbench {' '.join(path)} is missing from the reference"
        body = section[1].split("\n### ", 1)[0]
        for param in cmd.params:
            if isinstance(param, click.Option) and param.name not in ("study", "help") and not param.hidden:
                assert f"`{param.opts[0]}`" in body, f"{param.opts[0]} of workbench {' '.join(path)} is missing"


def test_the_readme_is_short_and_links_only_to_pages_that_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for target in re.findall(r"\]\(((?:docs/)?[\w./-]+\.(?:md|png))(?:#[\w-]+)?\)", text):
        assert (ROOT / target).exists(), target
    assert "pip install -e '.[test]' && pytest -n auto --dist loadfile" in text  # the test command CI runs
    assert "pip install -e '.[test]' && pytest -n auto --dist loadfile" in (ROOT / ".ci" / "run").read_text()


def test_the_guide_builds_as_a_site_without_a_broken_link(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "cli" / "index.html").exists()
