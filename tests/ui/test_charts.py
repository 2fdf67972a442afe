"""The plotly figure builders (AppTest cannot see plotly charts, so they are tested directly)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from workbench.ui import charts


@pytest.fixture
def table() -> pd.DataFrame:
    """A small Evaluation.table-like frame: three labels, one with an undefined F1."""
    return pd.DataFrame(
        {
            "n": [100, 100, 100],
            "support": [10, 30, 0],
            "tp": [8, 20, 0],
            "fp": [2, 5, 0],
            "fn": [2, 10, 0],
            "tn": [88, 65, 100],
            "accuracy": [0.96, 0.85, 1.0],
            "accuracy_lo": [0.90, 0.77, 0.96],
            "accuracy_hi": [0.98, 0.91, 1.0],
            "f1": [0.8, 0.727, np.nan],
        },
        index=pd.Index(["edema", "atelectasis", "fracture"], name="label"),
    )


def test_forest_plot_accuracy_with_intervals(table):
    fig = charts.forest_plot(table, "accuracy", {"edema": "Edema"})
    assert isinstance(fig, go.Figure)
    (trace,) = fig.data
    assert list(trace.y) == ["atelectasis", "Edema", "fracture"]  # sorted by value, names applied
    assert list(trace.x) == pytest.approx([0.85, 0.96, 1.0])
    assert list(trace.error_x.array) == pytest.approx([0.06, 0.02, 0.0])
    assert list(trace.error_x.arrayminus) == pytest.approx([0.08, 0.06, 0.04])
    assert fig.layout.shapes[0].x0 == pytest.approx(np.mean([0.85, 0.96, 1.0]))  # the macro line
    assert "95% intervals" in fig.layout.title.text


def test_forest_plot_f1_leaves_undefined_out_and_says_so(table):
    fig = charts.forest_plot(table, "f1")
    (trace,) = fig.data
    assert list(trace.y) == ["atelectasis", "edema"]
    assert trace.error_x.array is None  # no interval columns for F1: no invented bars
    assert "undefined, not shown: fracture" in fig.layout.title.text


def test_history_chart_lines_per_metric():
    history = pd.DataFrame(
        {
            "run": [1, 2],
            "version": [1, 2],
            "prompt": ["aaaa1111", "bbbb2222"],
            "macro_accuracy": [0.9, 0.95],
            "macro_f1": [0.75, 0.9],
        }
    )
    fig = charts.history_chart(history)
    assert [t.name for t in fig.data] == ["Macro F1", "Macro accuracy"], "F1 leads"
    assert list(fig.data[0].y) == [0.75, 0.9]
    assert list(fig.data[0].x) == ["v1 aaaa1111 (run 1)", "v2 bbbb2222 (run 2)"]


def test_history_chart_empty():
    fig = charts.history_chart(pd.DataFrame())
    assert len(fig.data) == 0 and "no finished run" in fig.layout.title.text


def test_confusion_bars(table):
    fig = charts.confusion_bars(table)
    assert [t.name for t in fig.data] == ["true positive", "false positive", "false negative"]
    assert list(fig.data[1].x) == [2, 5, 0] and fig.layout.barmode == "stack"
    assert len(charts.confusion_bars(table, include_tn=True).data) == 4


def test_score_chart_interval():
    summary = pd.DataFrame(
        {"generator": ["a", "b"], "ran_score": [0.6, 0.7], "ran_score_lo": [0.5, 0.65], "ran_score_hi": [0.7, 0.8]}
    )
    (bar,) = charts.score_chart(summary).data
    assert list(bar.y) == [0.6, 0.7]
    assert list(bar.error_y.array) == pytest.approx([0.1, 0.1]) and list(bar.error_y.arrayminus) == pytest.approx(
        [0.1, 0.05]
    )


def test_delta_chart_centres_on_zero_with_intervals_and_verdict_colours():
    table = pd.DataFrame(
        {
            "delta_f1": [0.2, -0.05, 0.0],
            "delta_f1_lo": [0.1, -0.12, -0.02],
            "delta_f1_hi": [0.3, 0.01, 0.02],
            "verdict": ["better", "no significant change", "no change"],
        },
        index=pd.Index(["edema", "fracture", "mass"], name="label"),
    )
    fig = charts.delta_chart(table, {"edema": "Edema"})
    (trace,) = fig.data
    assert list(trace.y) == ["Edema", "fracture", "mass"]
    assert list(trace.error_x.array) == pytest.approx([0.1, 0.06, 0.02])
    assert list(trace.error_x.arrayminus) == pytest.approx([0.1, 0.07, 0.02])
    low, high = fig.layout.xaxis.range
    assert low == -high and high >= 0.3, "symmetric around 0, wide enough for every interval"
    assert trace.marker.color[0] == charts.VERDICT_COLOURS["better"] != trace.marker.color[1]
    assert any(shape.x0 == 0 == shape.x1 for shape in fig.layout.shapes)


def test_palette_is_okabe_ito():
    assert set(charts.COLOURS.values()) - {"#DDDDDD"} <= set(charts.OKABE_ITO.values())
    assert set(charts.VERDICT_COLOURS.values()) <= set(charts.OKABE_ITO.values())
