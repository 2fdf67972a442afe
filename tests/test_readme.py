"""The README and the tutorial cannot drift: every `workbench ...` command in their bash blocks runs against a
fresh demo study (the README alone; the tutorial, then the optimisation page, on another), and the figures they
quote are the demo's. docs/cli.md, the generated reference, is checked in tests/test_docs.py."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Pages whose ```bash blocks run in order on one fresh demo study each.
WALKS = {"readme": [README], "tutorial": [ROOT / "docs" / "tutorial.md", ROOT / "docs" / "optimisation.md"]}

# Commands the test does not run, each with the reason; everything else in a ```bash block must
# run and exit 0. An entry that no longer appears in the README fails the test too.
SKIPPED = {
    "workbench import openi reports.csv labels14.csv --cohort openi --study studies/openi": "needs the OpenI download (reports.csv, labels14.csv), which is not shipped",
    "workbench cohort-role held-out test": "needs a held-out cohort of the reader's own (the demo has one cohort)",
    "workbench test-look cxr-v1 --cohort held-out": "needs that held-out test cohort",
}
# What the README says a command shows on the demo data (checked on its output).
CLAIMS = {
    "workbench compare 2 3": r"support_devices\s+\S+\s+\S+\s+0\s+8\s",  # 8 fixed, 0 broken
    "workbench history --cohort dev": r"0\.780\s+\S+\s*\n.*0\.810",
}
# Shipped folders the README's commands name, linked into the temporary working folder.
SHIPPED = ("tests", "annotations")


def bash_commands(text: str) -> list[str]:
    """Every line of the README's ```bash blocks, continuation lines joined, comments dropped."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            tokens = shlex.split(line, comments=True)
            if tokens:
                lines.append(" ".join(shlex.quote(t) for t in tokens))
    return lines


def _walk_commands(pages) -> list[str]:
    """The bash lines of the pages, in order."""
    return [line for page in pages for line in bash_commands(page.read_text(encoding="utf-8"))]


def test_the_pages_keep_their_worked_examples():
    every = [c for pages in WALKS.values() for c in _walk_commands(pages) if c.startswith("workbench ")]
    assert len(every) > 40, "the README and the tutorial lost their worked examples"
    for stale in set(SKIPPED) - set(every):
        pytest.fail(f"SKIPPED names a command no longer in the pages: {stale!r}")
    assert set(CLAIMS) <= set(every)
    assert len([c for c in _walk_commands(WALKS["readme"]) if c.startswith("workbench ")]) >= 10


@pytest.mark.parametrize("walk", sorted(WALKS))
def test_every_command_of_the_pages_runs_on_a_fresh_demo_study(walk, tmp_path, monkeypatch):
    commands = _walk_commands(WALKS[walk])
    workbench = [c for c in commands if c.startswith("workbench ")]
    for name in SHIPPED:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_STUDY", raising=False)
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    ran = []
    for line in commands:
        tokens = shlex.split(line)
        if tokens[0] == "export":
            name, value = tokens[1].split("=", 1)
            monkeypatch.setenv(name, value)
            continue
        if tokens[0] != "workbench" or line in SKIPPED:
            continue
        args = tokens[1:]
        if args[:1] == ["demo"]:  # the fresh demo study goes into this temporary folder, not the project's sessions/
            args += ["--path", str(tmp_path / "sessions" / "demo")]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, f"command failed: {line}\n{result.output}"
        if line in CLAIMS and line not in ran:
            assert re.search(CLAIMS[line], result.output), f"{line}: the claim does not hold:\n{result.output}"
        if line == "workbench run --cohort dev" and "run 3 " in result.output:
            assert "180 made" in result.output, result.output  # only the support_devices calls
        ran.append(line)
    assert len(ran) == len([c for c in workbench if c not in SKIPPED])
    # the worked example's claims hold on the demo data
    assert (tmp_path / "sessions" / "demo" / "bundles" / "cxr-v1.json").exists()
    if walk == "readme":
        assert (tmp_path / "scores" / "summary.csv").exists()


def test_worked_example_figures_match_the_demo(demo_template, tmp_path):
    """The numbers the README quotes for the demo study are the demo's (`workbench demo` builds it the same way)."""
    shutil.copytree(demo_template, tmp_path / "demo")
    history = CliRunner().invoke(
        main, ["history", "--cohort", "dev", "--format", "csv", "--study", str(tmp_path / "demo")]
    )
    f1 = [round(float(line.split(",")[6]), 3) for line in history.output.splitlines()[1:]]
    for page in (README, ROOT / "docs" / "tutorial.md"):
        assert f"macro F1 {f1[0]:.3f} -> {f1[1]:.3f}" in page.read_text(encoding="utf-8"), page.name
    text = README.read_text(encoding="utf-8")
    assert os.path.exists(ROOT / "docs" / "app-disagreements.png") and "docs/app-disagreements.png" in text
