"""Terminal output: value formatting, the report text marks, progress that suits a terminal or a log."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.terminal import DASH, WIDTH, Progress, _plain_table, _rich_table, emphasise, format_value, render_table


@pytest.mark.parametrize("value,kind,text", [
    (np.nan, "rate", DASH), (None, "text", DASH), (0.123456, "rate", "0.123"), (1.0, "rate", "1.000"),
    (3.0, "int", "3"), (0.0004, "p", "<0.001"), (0.25, "p", "0.250"), (90.0, "minutes", "1.5 min"),
    (True, "bool", "yes"), ("2026-11-30T19:50:46.002503+00:00", "text", "2026-11-30 19:50"),
])
def test_values_are_formatted_for_people(value, kind, text):
    assert format_value(value, kind) == text


def test_tables_fit_and_explain_undefined_values_once():
    frame = pd.DataFrame({"label": ["pulmonary_vascular_abnormal", "edema"], "f1": [np.nan, 0.5], "reference": [1.0, 0.0],
                          "note": ["a long explanation " * 8, ""], "empty": ["", ""]})
    out = render_table(frame, undefined={"f1": "no positives on either side"})
    assert max(len(line) for line in out.splitlines()) <= 100
    assert out.count("no positives on either side") == 1 and "empty" not in out
    assert "pulmonary_vascular_abnormal" in out and " 1 " in out + " " and "0.500" in out
    assert "empty" in render_table(frame, wide=True)


CELL = st.text(alphabet=st.sampled_from(list("abcXYZ019 .,*_-[]%") + [DASH, "’"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 7).flatmap(lambda n: st.tuples(
    st.lists(CELL, min_size=n, max_size=n), st.lists(st.lists(CELL, min_size=n, max_size=n), max_size=6),
    st.lists(st.booleans(), min_size=n, max_size=n))), st.booleans())
def test_a_table_that_fits_is_drawn_exactly_as_rich_draws_it(table, wide):
    """The plain path (no rich import) must be indistinguishable from rich wherever it is taken."""
    header, rows, right = table
    plain = _plain_table(header, rows, right, None if wide else WIDTH)
    if plain is not None:
        assert plain == _rich_table(header, rows, ["text"] * len(header), right, wide, None)


def test_the_plain_path_is_taken_for_tables_that_fit_and_left_to_rich_otherwise():
    header, right = ["label", "f1"], [False, True]
    assert _plain_table(header, [["edema", "0.500"]], right, WIDTH) is not None
    assert _plain_table(header, [["x" * 120, "0.500"]], right, WIDTH) is None  # rich folds it to fit
    assert _plain_table(header, [["胸水", "0.500"]], right, WIDTH) is None  # two cells per character
    assert _plain_table(header, [["a\tb", "0.500"]], right, WIDTH) is None


def test_evidence_and_look_for_phrases_are_marked_on_word_boundaries():
    text, found, matches = emphasise("ETT in place. Lungs settled. Possibly early consolidation.",
                                     "possibly early consolidation", ["ETT", "consolidation"])
    assert text == "[ETT] in place. Lungs settled. >>Possibly early [consolidation]<<."
    assert (found, matches) == (1, 2)
    assert emphasise("No tube.", "tube seen", [])[1] == 0  # evidence not in the text: reported, not marked


def _event(done, total=100):
    return SimpleNamespace(done=done, total=total, made=done, reused=0, failures=0)


def test_progress_in_a_log_is_one_line_per_tenth():
    stream = io.StringIO()
    progress = Progress(stream, is_terminal=False)
    for done in range(101):
        progress(_event(done))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1].startswith("100/100 calls (100%)") and "\r" not in stream.getvalue()


def test_progress_on_a_terminal_is_a_bar_that_stops_at_the_end():
    stream = io.StringIO()
    progress = Progress(stream, is_terminal=True)
    for done in range(0, 101, 20):
        progress(_event(done))
    assert progress.bar is None and "100/100" in stream.getvalue()
