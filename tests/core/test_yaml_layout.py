"""Rewriting a prompt file keeps its comments, order and layout (issue 30 item 10): table-driven, pure."""

from __future__ import annotations

import pytest
import yaml

from workbench.core.yaml_layout import dump, rewrite

STARTER = """\
# Starter prompt (iteration 1): deliberately plain. Improve it from the disagreements.
label: pneumonia
task: Does this chest X-ray report describe pneumonia?
look_for:
  - pneumonia  # the word itself
  - infectious process
do_not_label_when: []
hedged: positive
temporal:
  resolved: negative
  prior: negative
examples:
  - text: Cannot exclude pneumonia.
    value: 1
    why: Hedged wording counts as positive.
notes: >-
  Starter policy: hedged wording counts as positive for pneumonia but negative for
  consolidation.
"""

PYYAML_LAYOUT = """\
label: effusion
look_for:
- effusion
- fluid
temporal:
  resolved: negative
examples: []
"""


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(lines only in before, lines only in after), in order."""
    import difflib

    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    removed = [d[1:] for d in diff if d.startswith("-") and not d.startswith("---")]
    added = [d[1:] for d in diff if d.startswith("+") and not d.startswith("+++")]
    return removed, added


def edited(text: str, change) -> dict:
    data = yaml.safe_load(text)
    change(data)
    return data


CASES = [
    ("a scalar", STARTER, lambda d: d.update(hedged="negative"), ["hedged: positive"], ["hedged: negative"]),
    (
        "a list item added in the middle",
        STARTER,
        lambda d: d["look_for"].insert(1, "consolidation with fever"),
        [],
        ["  - consolidation with fever"],
    ),
    (
        "a list item removed",
        STARTER,
        lambda d: d["look_for"].remove("infectious process"),
        ["  - infectious process"],
        [],
    ),
    (
        "an empty list gains an item",
        STARTER,
        lambda d: d.update(do_not_label_when=["only 'pneumonia' in the history"]),
        ["do_not_label_when: []"],
        ["do_not_label_when:", "  - only 'pneumonia' in the history"],
    ),
    (
        "a nested value",
        STARTER,
        lambda d: d["temporal"].update(prior="positive"),
        ["  prior: negative"],
        ["  prior: positive"],
    ),
    (
        "an example's field",
        STARTER,
        lambda d: d["examples"][0].update(value=0),
        ["    value: 1"],
        ["    value: 0"],
    ),
    (
        "a list in the workbench's older layout",
        PYYAML_LAYOUT,
        lambda d: d["look_for"].append("pleural fluid"),
        [],
        ["- pleural fluid"],
    ),
]


@pytest.mark.parametrize(("before", "change", "removed", "added"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_only_what_changed_is_rewritten(before, change, removed, added):
    data = edited(before, change)
    after = rewrite(before, data)
    assert yaml.safe_load(after) == data
    assert changed_lines(before, after) == (removed, added)


def test_comments_and_folded_notes_survive_an_edit():
    after = rewrite(STARTER, edited(STARTER, lambda d: d.update(hedged="negative")))
    assert after.startswith("# Starter prompt (iteration 1)")
    assert "  - pneumonia  # the word itself\n" in after and "notes: >-\n" in after


def test_a_key_added_goes_where_the_data_puts_it_and_a_removed_key_goes():
    data = edited(STARTER, lambda d: d.pop("notes"))
    data = {**{k: data[k] for k in ("label", "task")}, "definition": "Infection of the lung.", **data}
    after = rewrite(STARTER, data)
    assert list(yaml.safe_load(after)) == list(data)
    assert changed_lines(STARTER, after)[1] == ["definition: Infection of the lung."]
    assert "notes" not in after


def test_a_new_file_uses_the_starter_layout():
    text = dump({"label": "x", "look_for": ["a", "b"], "temporal": {"prior": "negative"}})
    assert text == "label: x\nlook_for:\n  - a\n  - b\ntemporal:\n  prior: negative\n"
