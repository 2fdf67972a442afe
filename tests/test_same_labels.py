"""Every before/after figure averages both sides over the same labels, and names them (issue 30, item 3).

Under a policy that leaves an undefined label out of a macro mean (exclude, undefined), a label with no positive
on either side in one figure used to stay in the other: optimise printed validation 0.774 -> 0.858 while over the
same labels the gain was a fraction of that (hernia, one false positive before and none after, dropped out of
the later mean). These tests build that case in small frames.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.core import metrics
from workbench.services.evaluation import paired_macro
from workbench.services.optimising import _macro_by_part, _same_labels

IDS = [f"r{i}" for i in range(8)]
PARTS = {r: "tuning" if i < 4 else "validation" for i, r in enumerate(IDS)}


def frames():
    """Reference and predictions before/after: effusion half right before, all right after; hernia has no positive
    in the reference and one false positive before (F1 0, defined), none after (undefined)."""
    truth = pd.DataFrame({"effusion": [1, 0, 1, 0, 1, 0, 1, 0], "hernia": [0] * 8}, index=IDS)
    before = pd.DataFrame({"effusion": [1, 0, 0, 0, 1, 0, 0, 0], "hernia": [1, 0, 0, 0, 1, 0, 0, 0]}, index=IDS)
    after = pd.DataFrame({"effusion": [1, 0, 1, 0, 1, 0, 1, 0], "hernia": [0] * 8}, index=IDS)
    return truth, before, after


def test_paired_figures_leave_a_label_undefined_on_one_side_out_of_both():
    a = pd.Series({"effusion": 0.5, "hernia": 0.0})
    b = pd.Series({"effusion": 1.0, "hernia": np.nan})
    fa, fb = metrics.paired_macro_figures(a, a.isna(), b, b.isna(), "exclude")
    assert (fa.value, fb.value) == (0.5, 1.0) and fa.averaged == fb.averaged == ("effusion",)
    assert "left out (no positive on either side here or in a figure compared): hernia" in fb.describe()
    unpaired = metrics.macro_figure(a, a.isna(), "exclude")
    assert unpaired.value == 0.25  # what the before side used to average: hernia's 0 in, then out after
    za, zb = metrics.paired_macro_figures(a, a.isna(), b, b.isna(), "zero")
    assert (za.value, zb.value) == (0.25, 0.5)  # counted as 0 on the undefined side: every label on both


def test_optimise_figures_before_and_after_average_the_same_labels():
    truth, before, after = frames()
    same = _same_labels(truth, [before, after], PARTS, "exclude")
    assert same == {"hernia"}
    start = _macro_by_part(truth, before, PARTS, "exclude", n_resamples=20, left_out=same)
    end = _macro_by_part(truth, after, PARTS, "exclude", n_resamples=20, left_out=same)
    for part in ("tuning", "validation"):
        assert start[part]["labels"] == end[part]["labels"] and "hernia" in start[part]["labels"]
        assert (start[part]["macro_f1"], end[part]["macro_f1"]) == pytest.approx((2 / 3, 1.0))
    alone = _macro_by_part(truth, before, PARTS, "exclude", n_resamples=20)
    assert alone["validation"]["macro_f1"] == pytest.approx(1 / 3)  # before this change: hernia's 0 averaged in


def test_compare_averages_both_runs_over_the_same_labels():
    truth, before, after = frames()
    table = metrics.compare_labels(truth, before, after, zero_division="exclude")
    a, b = paired_macro(table, "exclude")
    assert a.averaged == b.averaged == ("effusion",) and b.left_out == ("hernia",)
    assert (a.value, b.value) == pytest.approx((2 / 3, 1.0))


def test_split_history_says_which_rows_each_mean_over_line_belongs_to():
    from workbench.cli import macro_lines_by_row

    same = "mean over 13 of 14 labels; left out (...): hernia (zero_division: exclude)"
    frame = pd.DataFrame({"run": [1, 2], "tuning_macro_labels": [same, same], "validation_macro_labels": [same, same]})
    assert macro_lines_by_row(frame) == {same: "every row, both parts"}
    other = "mean over 14 labels (zero_division: exclude)"
    frame.loc[1, "validation_macro_labels"] = other
    assert macro_lines_by_row(frame) == {
        same: "run 1 tuning, run 1 validation, run 2 tuning",
        other: "run 2 validation",
    }
