"""Saving a prompt keeps the file's comments, order and layout (issue 30 item 10): real Git, real study.

The starter files carry a comment and indent their lists; a save used to dump the whole file afresh, so
`git diff` showed unchanged items as removed and added. Each way a version is made is tried here.
"""

from __future__ import annotations

import dataclasses
import difflib

import git
from click.testing import CliRunner

from workbench.cli import main


def committed_change(wb, label: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines of the label's file in the latest commit, as `git diff HEAD~1 HEAD` shows them."""
    repo = git.Repo(wb.root / "prompts")
    try:
        before = repo.git.show(f"HEAD~1:{label}.yaml")
        after = repo.git.show(f"HEAD:{label}.yaml")
    finally:
        repo.close()
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    return (
        [d[1:] for d in diff if d.startswith("-") and not d.startswith("---")],
        [d[1:] for d in diff if d.startswith("+") and not d.startswith("+++")],
    )


def test_a_saved_draft_changes_only_its_lines_and_keeps_the_starter_comment(small_study):
    wb = small_study
    wb.set_prompt_field("pneumonia", "hedged", "negative")
    wb.set_prompt_field("pneumonia", "look_for", add=("airspace disease",))
    wb.commit_drafts(["pneumonia"], "hedging is negative for pneumonia")
    assert committed_change(wb, "pneumonia") == (["hedged: positive"], ["  - airspace disease", "hedged: negative"])
    text = (wb.root / "prompts" / "pneumonia.yaml").read_text(encoding="utf-8")
    assert text.startswith("# Starter prompt (iteration 1)") and "notes: >-\n" in text


def test_the_app_s_save_changes_only_its_lines(small_study):
    wb = small_study
    lp = wb.label_prompt("pleural_effusion")
    wb.save_prompts([dataclasses.replace(lp, definition="Fluid in the pleural space.")], "define", wb.prompt_commit())
    removed, added = committed_change(wb, "pleural_effusion")
    assert (
        len(removed) == 1
        and removed[0].startswith("definition:")
        and added == ["definition: Fluid in the pleural space."]
    )


def test_a_set_on_an_edited_file_keeps_the_user_s_comments(small_study):
    wb = small_study
    path = wb.root / "prompts" / "edema.yaml"
    path.write_text(path.read_text(encoding="utf-8") + "# keep: agreed with Dr A on 3 March\n", encoding="utf-8")
    wb.set_prompt_field("edema", "hedged", "negative")
    assert path.read_text(encoding="utf-8").endswith("# keep: agreed with Dr A on 3 March\n")
    assert "hedged: negative" in path.read_text(encoding="utf-8")


def test_prompts_diff_against_a_draft_shows_only_what_the_draft_changes(small_study):
    wb = small_study
    wb.set_prompt_field("pneumonia", "hedged", "negative")
    result = CliRunner().invoke(main, ["prompts", "diff", "pneumonia", "HEAD", "draft", "--study", str(wb.root)])
    assert result.exit_code == 0, result.output
    changed = [
        line
        for line in result.output.splitlines()
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    assert changed == ["-hedged: positive", "+hedged: negative"]
