"""A reference change is visible (issue 21, item 9): after an adjudication, history and compare say that
the reference changed since a run was scored, with how many adjudications, and which figures moved."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from workbench.cli import main


@pytest.fixture
def demo(demo_template, tmp_path):
    shutil.copytree(demo_template, tmp_path / "demo")
    return tmp_path / "demo"


def run_cli(root, *args):
    result = CliRunner().invoke(main, [*args, "--study", str(root)])
    assert result.exit_code == 0, result.output
    return result.output


def test_history_and_compare_say_the_reference_changed_and_what_moved(demo):
    before = run_cli(demo, "history", "--cohort", "dev")
    assert "reference changed" not in before and "0.780" in before and "0.810" in before
    run_cli(demo, "compare", "1", "2")
    # the README's adjudication: the chest tube was removed, so no device on this film
    run_cli(demo, "adjudicate", "demo-141", "support_devices", "0", "--reason", "no device on this film")
    after = " ".join(run_cli(demo, "history", "--cohort", "dev").split())
    assert "the reference changed since run 1 was scored (1 adjudication): figures moved:" in after
    assert "run 1 macro F1 0.780 ->" in after and "support_devices" in after and "run 2 macro F1 0.810 ->" in after
    compared = " ".join(run_cli(demo, "compare", "1", "2").split())
    assert "the reference changed since run 1 was scored (1 adjudication)" in compared


def test_no_word_when_nothing_changed(demo):
    run_cli(demo, "history", "--cohort", "dev")
    assert "reference changed" not in run_cli(demo, "history", "--cohort", "dev")
