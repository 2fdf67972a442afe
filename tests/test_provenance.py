"""One commit path for a prompt version: whichever way a draft is saved, an accepted proposal is named in the
commit with its notes and is marked saved (the CLI's `prompts save` used to skip this)."""

from __future__ import annotations

import re
import shutil

import git
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.services import Actor, Workbench


@pytest.fixture
def demo(demo_template, tmp_path, monkeypatch):
    shutil.copytree(demo_template, tmp_path / "demo")
    monkeypatch.setenv("WORKBENCH_STUDY", str(tmp_path / "demo"))
    return tmp_path / "demo"


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _accepted_proposal(demo) -> int:
    _cli("split", "dev")
    offered = _cli("suggest", "support_devices", "--run", "2", "--proposer", "offline")
    proposal = int(re.search(r"proposal #(\d+) for support_devices", offered).group(1))
    assert "the message will name the notes it came from" in _cli("accept", str(proposal))  # the promise tested here
    return proposal


def _last_message(demo) -> str:
    with git.Repo(demo / "prompts") as repo:
        return repo.head.commit.message


def test_prompts_save_names_the_accepted_proposal_and_marks_it_saved(demo):
    proposal = _accepted_proposal(demo)
    _cli("prompts", "save", "support_devices", "-m", "devices: the proposer's look-for phrases")
    message = _last_message(demo)
    assert message.startswith("devices: the proposer's look-for phrases")
    assert f"support_devices: proposal #{proposal} by the offline proposer" in message
    wb = Workbench(demo, actor=Actor())
    row = wb.proposals().set_index("id").loc[proposal]
    assert row["status"] == "saved" and row["commit"] == wb.prompt_commit()


def test_a_revert_after_accepting_does_not_claim_the_proposal(demo):
    proposal = _accepted_proposal(demo)
    _cli("prompts", "revert", "support_devices", "HEAD~1", "--message", "back to the starter wording")
    assert "proposal #" not in _last_message(demo)
    wb = Workbench(demo, actor=Actor())
    assert wb.proposals().set_index("id").loc[proposal, "status"] != "saved"
