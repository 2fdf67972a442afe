"""The keys of attribute values in the reading form: one scheme for a whole vocabulary."""

from __future__ import annotations

from workbench.core.attributes import attribute_keys
from workbench.core.vocab import STANDARD_ATTRIBUTES


def test_standard_attributes_get_side_letters_severity_ranks_and_change_letters():
    keys = attribute_keys(tuple(STANDARD_ATTRIBUTES.items()))
    assert keys == {
        ("side", "left"): "l",
        ("side", "right"): "r",
        ("side", "bilateral"): "b",
        ("severity", "mild"): "1",
        ("severity", "moderate"): "2",
        ("severity", "severe"): "3",
        ("change", "new"): "n",
        ("change", "worse"): "w",
        ("change", "better"): "e",  # b is bilateral's
        ("change", "unchanged"): "u",
        ("change", "resolved"): "s",  # r is right's, e is better's
    }


def test_keys_are_unique_and_a_value_without_a_free_letter_gets_none():
    keys = attribute_keys((("side", ("left", "right")), ("zone", ("lr", "upper")), ("grade", ("c",))))
    assert keys == {("side", "left"): "l", ("side", "right"): "r", ("zone", "upper"): "u"}
    assert len(set(keys.values())) == len(keys)
