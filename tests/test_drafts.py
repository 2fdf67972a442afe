"""Drafts are first-class (issue 21, item 7): shown, diffed against a version, and evaluated through the call
cache on tuning and validation beside the committed version, before anything is committed."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.core import metrics


@pytest.fixture
def drafted(small_study):
    """The split small cohort labelled once, and a draft of pneumonia (hedged wording no longer counts)."""
    wb = small_study
    wb.split_cohort("dev", validation=0.3, seed=0)
    wb.run_id = wb.start_run("dev").run_id
    wb.set_prompt_field("pneumonia", "hedged", "negative")
    return wb


def cli(wb, *args):
    result = CliRunner().invoke(main, [*args, "--study", str(wb.root)])
    assert result.exit_code == 0, result.output
    return result.output


def test_show_and_diff_a_draft(drafted):
    assert "hedged: negative" in cli(drafted, "prompts", "show", "pneumonia", "--draft")
    assert "hedged: positive" in cli(drafted, "prompts", "show", "pneumonia")
    diff = cli(drafted, "prompts", "diff", "pneumonia", "HEAD", "draft")
    assert "-hedged: positive" in diff and "+hedged: negative" in diff and "pneumonia.yaml@draft" in diff
    result = CliRunner().invoke(main, ["prompts", "show", "edema", "--draft", "--study", str(drafted.root)])
    assert result.exit_code == 2 and "no draft of edema" in result.output


def test_evaluate_drafts_compares_with_the_committed_version_and_commits_nothing(drafted):
    head = drafted.prompt_commit()
    text = cli(drafted, "evaluate-drafts")
    assert f"drafts against run {drafted.run_id}" in text and "nothing is committed" in text
    assert "pneumonia:" in text and "tuning: F1" in text and "validation: F1" in text and "McNemar" in text
    assert "validation: macro F1" in text and "zero_division: exclude" in text
    assert drafted.prompt_commit() == head and list(drafted.drafts()["label"]) == ["pneumonia"]
    result = drafted.evaluate_drafts()
    assert result.calls["made"] == 0 and result.calls["reused"] > 0  # the first evaluation filled the cache
    parts = drafted.evaluate_parts(drafted.run_id, n_resamples=0)
    for part in ("tuning", "validation"):  # "before" is the committed version's figure over the labels "after" has
        before, after = result.before[part], result.after[part]
        assert before["labels"] == after["labels"]
        named = re.search(r"left out \([^)]*\): (.+?) \(zero_division", before["labels"])
        undefined = named.group(1).split(", ") if named else []
        table = parts[part].table
        expected = metrics.macro_figure(table["f1"], table["f1_undefined"] | table.index.isin(undefined), "exclude")
        assert before["macro_f1"] == pytest.approx(expected.value)
    pneumonia = result.labels[0]["parts"]
    assert sum(m["reports"] for m in pneumonia.values()) == 7  # every report but s3, whose readers tie on pneumonia


def test_evaluate_drafts_without_a_draft_says_what_to_do(small_study):
    small_study.split_cohort("dev", validation=0.3, seed=0)
    small_study.start_run("dev")
    result = CliRunner().invoke(main, ["evaluate-drafts", "--study", str(small_study.root)])
    assert result.exit_code == 2 and "no drafts to evaluate" in result.output
