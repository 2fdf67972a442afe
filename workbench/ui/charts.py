"""Plotly figure builders: pure functions from service tables to figures.

Kept apart from the pages so they can be tested directly (Streamlit's AppTest cannot see plotly
charts) and reused by notebooks. No streamlit import here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

METRIC_NAMES = {
    "accuracy": "Accuracy",
    "f1": "F1",
    "precision": "Precision",
    "recall": "Recall",
    "specificity": "Specificity",
    "macro_accuracy": "Macro accuracy",
    "macro_f1": "Macro F1",
    "micro_f1": "Micro F1",
}
# Okabe-Ito: distinguishable with the common colour-vision deficiencies (never red against green)
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
    "grey": "#999999",
}
COLOURS = {
    "a": OKABE_ITO["grey"],
    "b": OKABE_ITO["blue"],
    "tp": OKABE_ITO["bluish_green"],
    "fp": OKABE_ITO["vermillion"],
    "fn": OKABE_ITO["orange"],
    "tn": "#DDDDDD",
}
VERDICT_COLOURS = {"better": OKABE_ITO["blue"], "worse": OKABE_ITO["vermillion"], "other": OKABE_ITO["grey"]}
LINE_COLOURS = [OKABE_ITO[c] for c in ("blue", "orange", "bluish_green", "reddish_purple", "sky_blue", "vermillion")]


def _names(labels, names: dict | None) -> list[str]:
    """Display names for label ids (ids when no name is known)."""
    names = names or {}
    return [names.get(lab, lab) for lab in labels]


def forest_plot(
    table: pd.DataFrame, metric: str = "f1", names: dict | None = None, title: str | None = None
) -> go.Figure:
    """Per-label estimate with its interval (when the table has METRIC_lo/METRIC_hi), sorted by value.

    table: indexed by label (Evaluation.table). Undefined values (NaN) are left out and listed
    in the title so a missing point is never mistaken for a zero.
    """
    frame = table[[c for c in table.columns if c in (metric, f"{metric}_lo", f"{metric}_hi", "n", "support")]].copy()
    undefined = [lab for lab in frame.index if pd.isna(frame.loc[lab, metric])]
    frame = frame.drop(index=undefined).sort_values(metric)
    x = frame[metric].to_numpy(dtype=float)
    error = None
    if f"{metric}_lo" in frame and f"{metric}_hi" in frame:
        error = dict(
            type="data",
            symmetric=False,
            array=frame[f"{metric}_hi"].to_numpy(dtype=float) - x,
            arrayminus=x - frame[f"{metric}_lo"].to_numpy(dtype=float),
            thickness=1.5,
            width=4,
        )
    custom = np.column_stack(
        [
            frame.get("n", pd.Series(np.nan, index=frame.index)).to_numpy(),
            frame.get("support", pd.Series(np.nan, index=frame.index)).to_numpy(),
        ]
    )
    fig = go.Figure(
        go.Scatter(
            x=x,
            y=_names(frame.index, names),
            mode="markers",
            name=METRIC_NAMES.get(metric, metric),
            error_x=error,
            marker=dict(size=9, color=COLOURS["b"]),
            customdata=custom,
            hovertemplate="%{y}: %{x:.3f}<br>n=%{customdata[0]}, support=%{customdata[1]}<extra></extra>",
        )
    )
    if len(x):
        fig.add_vline(
            x=float(np.mean(x)),
            line_dash="dash",
            line_color="grey",
            annotation_text=f"macro {np.mean(x):.3f}",
            annotation_position="top",
        )
    heading = title or f"{METRIC_NAMES.get(metric, metric)} per label" + (" with 95% intervals" if error else "")
    if undefined:
        heading += f" (undefined, not shown: {', '.join(_names(undefined, names))})"
    low = frame[f"{metric}_lo"].min() if error else (x.min() if len(x) else 0.0)
    left = max(0.0, np.floor((float(low) - 0.02) * 20) / 20) if len(x) else 0.0  # zoom in, on a 0.05 grid
    fig.update_layout(
        title=heading,
        xaxis=dict(title=METRIC_NAMES.get(metric, metric), range=[left, 1.01]),
        height=max(300, 24 * len(frame) + 120),
        margin=dict(l=10, r=10, t=50, b=40),
        showlegend=False,
    )
    return fig


def history_chart(
    history: pd.DataFrame, metrics: tuple[str, ...] = ("macro_f1", "macro_accuracy"), title: str = "Iteration history"
) -> go.Figure:
    """One line per metric across runs in prompt-version order (iteration_history's frame)."""
    fig = go.Figure()
    if history is None or history.empty:
        fig.update_layout(title=f"{title}: no finished run yet", height=300)
        return fig
    x = [f"v{v} {p} (run {r})" for v, p, r in zip(history["version"], history["prompt"], history["run"], strict=False)]
    for metric in metrics:
        if metric in history:
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=history[metric].to_numpy(dtype=float),
                    mode="lines+markers",
                    name=METRIC_NAMES.get(metric, metric.replace(":", " ")),
                    line=dict(color=LINE_COLOURS[len(fig.data) % len(LINE_COLOURS)]),
                )
            )
    values = history[[m for m in metrics if m in history]].to_numpy(dtype=float)
    low = np.nanmin(values) if np.isfinite(values).any() else 0.0
    bottom = max(0.0, np.floor((low - 0.05) * 20) / 20)  # zoomed so a real change is visible; the axis says where
    fig.update_layout(
        title=title,
        yaxis=dict(title="value", range=[bottom, 1.01]),
        xaxis=dict(title="prompt version"),
        height=340,
        margin=dict(l=10, r=10, t=50, b=40),
        legend=dict(orientation="h"),
    )
    return fig


def confusion_bars(table: pd.DataFrame, names: dict | None = None, include_tn: bool = False) -> go.Figure:
    """Stacked bars per label: true positives, false positives (invented), false negatives (missed)."""
    parts = [("tp", "true positive"), ("fp", "false positive"), ("fn", "false negative")]
    if include_tn:
        parts.append(("tn", "true negative"))
    labels = _names(table.index, names)
    fig = go.Figure(
        [
            go.Bar(y=labels, x=table[col].to_numpy(dtype=float), name=name, orientation="h", marker_color=COLOURS[col])
            for col, name in parts
        ]
    )
    fig.update_layout(
        barmode="stack",
        title="Confusion counts per label",
        xaxis=dict(title="items"),
        height=max(300, 24 * len(table) + 120),
        margin=dict(l=10, r=10, t=50, b=40),
        legend=dict(orientation="h"),
        yaxis=dict(autorange="reversed"),
    )
    return fig


def score_chart(summary: pd.DataFrame) -> go.Figure:
    """Ran Score per generator with its bootstrap interval (ScoreResult.summary())."""
    x = summary["ran_score"].to_numpy(dtype=float)
    fig = go.Figure(
        go.Bar(
            x=summary["generator"],
            y=x,
            name="Ran Score",
            error_y=dict(
                type="data",
                symmetric=False,
                array=summary["ran_score_hi"].to_numpy(dtype=float) - x,
                arrayminus=x - summary["ran_score_lo"].to_numpy(dtype=float),
            ),
        )
    )
    fig.update_layout(title="Ran Score (macro F1) with 95% bootstrap interval", yaxis=dict(range=[0, 1.02]), height=340)
    return fig


def parts_history_chart(history: pd.DataFrame) -> go.Figure:
    """Macro F1 on tuning and on validation per prompt version, with the gap (the overfitting signal)."""
    fig = go.Figure()
    x = [f"v{v} (run {r})" for v, r in zip(history["version"], history["run"], strict=False)] if len(history) else []
    for col, name, colour in (
        ("tuning_macro_f1", "tuning", COLOURS["a"]),
        ("validation_macro_f1", "validation", COLOURS["b"]),
    ):
        fig.add_trace(
            go.Scatter(
                x=x, y=history[col] if len(history) else [], mode="lines+markers", name=name, line={"color": colour}
            )
        )
    fig.add_trace(
        go.Bar(
            x=x,
            y=history["gap"] if len(history) else [],
            name="gap (tuning - validation)",
            marker_color=COLOURS["fn"],
            opacity=0.5,
            yaxis="y2",
        )
    )
    fig.update_layout(
        title="Macro F1 on tuning and validation",
        yaxis={"title": "Macro F1"},
        yaxis2={"title": "gap", "overlaying": "y", "side": "right"},
        legend={"orientation": "h"},
    )
    return fig


def delta_chart(table: pd.DataFrame, names: dict | None = None, metric: str = "f1") -> go.Figure:
    """Each label's change (B - A) with its paired 95% interval around a line at 0 (compare_view's table),
    coloured by verdict: better, worse, or not significant."""
    delta = table[f"delta_{metric}"].to_numpy(dtype=float)
    lo_col, hi_col = f"delta_{metric}_lo", f"delta_{metric}_hi"
    error = None
    if lo_col in table and hi_col in table:
        error = dict(
            type="data",
            symmetric=False,
            array=table[hi_col].to_numpy(dtype=float) - delta,
            arrayminus=delta - table[lo_col].to_numpy(dtype=float),
            thickness=1.5,
            width=4,
        )
    verdict = table["verdict"].astype(str).to_numpy()
    colours = [VERDICT_COLOURS.get(v, VERDICT_COLOURS["other"]) for v in verdict]
    labels = _names(table.index, names)
    fig = go.Figure(
        go.Scatter(
            x=delta,
            y=labels,
            mode="markers",
            error_x=error,
            marker=dict(
                size=10,
                color=colours,
                symbol=[
                    "triangle-right" if v == "better" else "triangle-left" if v == "worse" else "circle"
                    for v in verdict
                ],
            ),
            customdata=verdict,
            hovertemplate="%{y}: %{x:+.3f} (%{customdata})<extra></extra>",
            name="change",
        )
    )
    fig.add_vline(x=0, line_color="#000000", line_width=1)
    span = (
        np.nanmax(
            np.abs(
                np.concatenate([delta, table[lo_col].to_numpy(dtype=float), table[hi_col].to_numpy(dtype=float)])
                if error
                else delta
            )
        )
        if len(delta) and np.isfinite(delta).any()
        else 0.1
    )
    span = max(0.05, float(np.ceil(span * 20) / 20))
    fig.update_layout(
        title=f"Change in {METRIC_NAMES.get(metric, metric)} (after - before) with 95% paired bootstrap interval",
        xaxis=dict(
            title=f"change in {METRIC_NAMES.get(metric, metric)}",
            range=[-span, span],
            zeroline=False,
            tickformat="+.2f",
        ),
        height=max(300, 24 * len(table) + 120),
        margin=dict(l=10, r=10, t=50, b=40),
        showlegend=False,
        yaxis=dict(autorange="reversed"),
    )
    return fig


def labelset_prevalence(candidates: list[dict], top: int = 40) -> go.Figure:
    """Affirmed reports per candidate (the top ones), coloured by whether a vocabulary label covers it, with the
    share of affirmed mentions the first k candidates cover as a line (the long tail)."""
    shown = candidates[:top]
    total = sum(c["affirmed_mentions"] for c in candidates) or 1
    running = np.cumsum([c["affirmed_mentions"] for c in shown]) / total
    covered = [bool(c.get("overlaps")) for c in shown]
    fig = go.Figure()
    for flag, name, colour in ((True, "covered by the vocabulary", "blue"), (False, "not covered", "orange")):
        idx = [i for i, f in enumerate(covered) if f == flag]
        fig.add_bar(
            x=[shown[i]["name"] for i in idx],
            y=[shown[i]["affirmed_reports"] for i in idx],
            name=name,
            marker_color=OKABE_ITO[colour],
        )
    fig.add_scatter(
        x=[c["name"] for c in shown],
        y=running,
        yaxis="y2",
        mode="lines+markers",
        name="share of affirmed mentions covered",
        line_color=OKABE_ITO["black"],
    )
    fig.update_layout(
        xaxis={"categoryorder": "array", "categoryarray": [c["name"] for c in shown], "tickangle": -45},
        yaxis={"title": "reports with an affirmed mention"},
        yaxis2={"title": "covered share", "overlaying": "y", "side": "right", "range": [0, 1], "tickformat": ".0%"},
        legend={"orientation": "h", "y": 1.12},
        margin={"t": 40, "b": 120},
        height=420,
    )
    return fig
