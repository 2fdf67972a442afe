"""Trust, second round (issue 20): what a full disk, a kill, a symlink, a control character, a huge
vocabulary, a partial run, an old token or a spoofed id could do to a study, each refused or undone.

Real SQLite, real Git, real files (a real small tmpfs for the full disk when this process may mount
one); faults are injected by replacing one step of freeze with a function that raises.
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from workbench.cli import main
from workbench.core.vocab import VocabularyError, parse_vocabulary

MAX_LABELS = 1000  # the stated limit (workbench.core.vocab.MAX_LABELS)


def cli(args, env=None, input=None):
    """Run the CLI with a clean identity environment."""
    base = {"WORKBENCH_USER": None, "WORKBENCH_TOKEN": None}
    return CliRunner().invoke(main, args, env={**base, **(env or {})}, input=input)


def vocabulary(n: int) -> dict:
    """A vocabulary of n distinct labels as parsed YAML."""
    return {"id": "big", "name": "Big", "labels": [
        {"id": f"l{i}", "name": f"Label {i}", "category": "finding", "definition": "a finding"} for i in range(n)]}


# ---------------------------------------------------------------- item 6: vocabulary size and parse time


def test_a_vocabulary_over_the_limit_is_refused_before_its_labels_are_parsed():
    with pytest.raises(VocabularyError, match=rf"{MAX_LABELS + 1:,} labels; a vocabulary holds at most {MAX_LABELS:,}"):
        parse_vocabulary(vocabulary(MAX_LABELS + 1), "big.yaml")
    assert len(parse_vocabulary(vocabulary(MAX_LABELS), "big.yaml").ids) == MAX_LABELS


def test_init_with_100000_labels_is_refused_at_once(tmp_path):
    path = tmp_path / "big.yaml"
    items = "".join(f"  - id: l{i}\n    name: Label {i}\n    category: finding\n    definition: a finding\n" for i in range(100_000))
    path.write_text(f"id: big\nname: Big\nlabels:\n{items}", encoding="utf-8")
    result = cli(["init", str(tmp_path / "study"), "--vocab", str(path)])
    assert result.exit_code == 2, result.output
    assert "more than 1,000 labels; a vocabulary holds at most 1,000" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "study" / "workbench.db").exists()


def test_a_duplicate_id_among_many_labels_is_still_named():
    data = vocabulary(MAX_LABELS)
    data["labels"][-1]["id"] = "l7"
    with pytest.raises(VocabularyError, match="label id 'l7' is used more than once"):
        parse_vocabulary(data, "big.yaml")
