"""Terminal output: value formatting, the report text marks, progress that suits a terminal or a log."""

from __future__ import annotations

import io
import math
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.terminal import DASH, WIDTH, Progress, _plain_table, _rich_table, emphasise, format_value, render_table


@pytest.mark.parametrize(
    "value,kind,text",
    [
        (np.nan, "rate", DASH),
        (None, "text", DASH),
        (0.123456, "rate", "0.123"),
        (1.0, "rate", "1.000"),
        (3.0, "int", "3"),
        (0.0004, "p", "< 0.001"),
        (0.0, "p", "< 0.001"),
        (0.25, "p", "0.250"),
        (90.0, "minutes", "1.5 min"),
        (True, "bool", "yes"),
        ("2026-11-30T19:50:46.002503+00:00", "text", "2026-11-30 19:50"),
    ],
)
def test_values_are_formatted_for_people(value, kind, text):
    assert format_value(value, kind) == text


def test_tables_fit_and_explain_undefined_values_once():
    frame = pd.DataFrame(
        {
            "label": ["pulmonary_vascular_abnormal", "edema"],
            "f1": [np.nan, 0.5],
            "reference": [1.0, 0.0],
            "note": ["a long explanation " * 8, ""],
            "empty": ["", ""],
        }
    )
    out = render_table(frame, undefined={"f1": "no positives on either side"})
    assert max(len(line) for line in out.splitlines()) <= 100
    assert out.count("no positives on either side") == 1 and "empty" not in out
    assert "pulmonary_vascular_abnormal" in out and " 1 " in out + " " and "0.500" in out
    assert "empty" in render_table(frame, wide=True)


CELL = st.text(alphabet=st.sampled_from(list("abcXYZ019 .,*_-[]%") + [DASH, "’"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 7).flatmap(
        lambda n: st.tuples(
            st.lists(CELL, min_size=n, max_size=n),
            st.lists(st.lists(CELL, min_size=n, max_size=n), max_size=6),
            st.lists(st.booleans(), min_size=n, max_size=n),
        )
    ),
    st.booleans(),
)
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
    text, found, matches = emphasise(
        "ETT in place. Lungs settled. Possibly early consolidation.",
        "possibly early consolidation",
        ["ETT", "consolidation"],
    )
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


# ---------------------------------------------------------------- issue 21 item 1: tables never cut a number

NUMBER = re.compile(r"^[-+]?\d[\d,]*(\.\d+)?$")
NAME = st.text(alphabet=st.sampled_from(list("abcdefgh_")), min_size=1, max_size=12).map(lambda s: s.strip("_") or "x")
WORDS = st.lists(
    st.text(alphabet=st.sampled_from(list("abcdefghijklmnop")), min_size=1, max_size=15), min_size=1, max_size=6
)


@st.composite
def random_tables(draw):
    """A frame with rate, count and text columns (text without digits, so every number comes from a number)."""
    n_rows = draw(st.integers(1, 6))
    names = draw(st.lists(NAME, min_size=1, max_size=14, unique=True))
    names = [f"{n}{draw(st.sampled_from(['', '', '_lo', '_hi']))}" for n in names]
    names = list(dict.fromkeys(names))
    data = {}
    for name in names:
        kind = draw(st.sampled_from(["rate", "count", "identifier", "prose"]))
        if kind == "rate":
            values = draw(
                st.lists(
                    st.one_of(st.floats(-1, 1, allow_nan=False), st.just(math.nan)), min_size=n_rows, max_size=n_rows
                )
            )
            data[name] = pd.Series(values + [0.5], dtype=float)[:n_rows]
        elif kind == "count":
            data[name] = pd.Series(
                draw(st.lists(st.integers(-(10**6), 10**7), min_size=n_rows, max_size=n_rows)), dtype="int64"
            )
        elif kind == "identifier":
            data[name] = draw(st.lists(NAME.map(lambda s: s * 3), min_size=n_rows, max_size=n_rows))
        else:
            data[name] = [" ".join(w) for w in draw(st.lists(WORDS, min_size=n_rows, max_size=n_rows))]
    return pd.DataFrame(data)


def _expected_numbers(frame: pd.DataFrame, csv_text: str) -> dict[str, list[str]]:
    """Per numeric column, each value of the CSV (full precision) rounded as a person reads it."""
    import csv as csv_module

    from workbench.terminal import _column_kind

    records = list(csv_module.DictReader(io.StringIO(csv_text)))
    out = {}
    for col in frame.columns:
        kind = _column_kind(col, frame[col])
        if kind in ("rate", "int"):
            cells = [r[col] for r in records if r[col] != ""]
            out[col] = [f"{float(c):.3f}" if kind == "rate" else str(int(float(c))) for c in cells]
    return out


@settings(max_examples=150, deadline=None)
@given(random_tables(), st.integers(60, 200))
def test_every_number_of_the_csv_is_in_the_table_rounded_or_its_column_is_named_hidden(frame, width):
    from collections import Counter

    from workbench.core.export import to_csv

    out = render_table(frame, width=width)
    lines = out.splitlines()
    first_note = next((i for i, line in enumerate(lines) if line.startswith(("hidden:", DASH + " in "))), len(lines))
    table, notes = "\n".join(lines[:first_note]), " ".join(lines[first_note:])
    hidden_note = notes[notes.index("hidden:") :] if "hidden:" in notes else ""
    hidden = set(hidden_note.removeprefix("hidden:").split(";")[0].replace(",", " ").split())
    assert max(len(line) for line in out.splitlines()) <= width, out
    expected = _expected_numbers(frame, to_csv(frame))
    shown_numbers = Counter(t for t in table.split() if NUMBER.match(t))
    wanted = Counter(v for col, values in expected.items() if col not in hidden for v in values)
    assert shown_numbers == wanted, out
    rule = next((i for i, line in enumerate(lines) if line.lstrip().startswith("─")), first_note)
    header = " ".join(lines[:rule]).split()  # the heading lines only: a cell may hold a word equal to a column name
    for col in frame.columns:  # a column is shown under its whole name, or named as hidden
        assert (col in hidden) != (col in header), (col, out)


@pytest.mark.parametrize(
    "frame,width,shown,cut",
    [
        # agreement on OpenI: n = 3080 beside a long note
        (
            pd.DataFrame(
                {
                    "reader": ["openi-mesh"],
                    "label": ["enlarged_cardiomediastinum"],
                    "n": [3080],
                    "accuracy": [0.9871],
                    "accuracy_lo": [0.9823],
                    "accuracy_hi": [0.9901],
                    "kappa": [0.61],
                    "note": ["kappa undefined: every reading of the label has the same value " * 2],
                }
            ),
            100,
            ["3080"],
            ["308"],
        ),
        # split-metrics: the gap -0.257
        (
            pd.DataFrame(
                {
                    "label": ["pulmonary_vascular_abnormal"],
                    "tuning_support": [180],
                    "tuning_f1": [0.61],
                    "tuning_f1_lo": [0.5],
                    "tuning_f1_hi": [0.7],
                    "validation_support": [80],
                    "validation_f1": [0.867],
                    "validation_f1_lo": [0.7],
                    "validation_f1_hi": [0.95],
                    "gap": [-0.257],
                }
            ),
            100,
            ["-0.257"],
            ["-"],
        ),
        # score's per-label table: F1 0.667 (rounded, not cut) and whole headings
        (
            pd.DataFrame(
                {
                    "label": ["enlarged_cardiomediastinum"],
                    "support": [3],
                    "tp": [1],
                    "fp": [0],
                    "fn": [1],
                    "precision": [1.0],
                    "recall": [0.5],
                    "f1": [2 / 3],
                    "failed_generated": [0],
                    "failed_reference": [0],
                }
            ),
            100,
            ["0.667", "tp", "fp", "fn"],
            ["0.66"],
        ),
    ],
)
def test_the_reported_cuts_are_gone(frame, width, shown, cut):
    out = render_table(frame, width=width, title="a title" if "tp" in frame.columns else None)
    tokens = out.split()
    assert all(t in tokens for t in shown), out
    assert not any(t in tokens for t in cut), out
    assert max(len(line) for line in out.splitlines()) <= width


def test_audit_keeps_its_id_actor_and_action_and_elides_long_keys():
    frame = pd.DataFrame(
        {
            "id": [1203, 1202],
            "at": ["2026-11-30T19:50:46+00:00"] * 2,
            "actor": ["local", "dr-reader-07"],
            "action": ["import", "adjudicate"],
            "entity": ["readings", "adjudication"],
            "entity_key": ["/very/long/path/to/the/openi/readings/file/" * 3, "CXR1234/pleural_effusion"],
        }
    )
    out = render_table(frame, width=100)
    assert out.splitlines()[0].split() == ["id", "at", "actor", "action", "entity", "entity_key"], out
    assert "1203" in out.split() and "dr-reader-07" in out and "adjudicate" in out and "…" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_the_terminal_width_is_used(monkeypatch):
    frame = pd.DataFrame({f"column_{i}": [0.5 + i / 1000] for i in range(14)})
    monkeypatch.setenv("COLUMNS", "160")
    wide = render_table(frame)
    monkeypatch.setenv("COLUMNS", "100")
    narrow = render_table(frame)
    assert 100 < max(len(line) for line in wide.splitlines()) <= 160 and "hidden:" in narrow
    assert len(narrow.splitlines()[0].split()) < len(wide.splitlines()[0].split())
