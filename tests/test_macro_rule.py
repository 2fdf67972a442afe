"""One macro rule: the study's zero_division policy decides every macro figure in every view, and each
view says which labels it averages (issue 21, item 2).

The small cohort (8 reports, ranscore-21) has many labels with no positive in the reference and none
predicted: under `zero` they count 0, under `exclude` they are left out. Every view is computed for
the same two runs and must give the same figure.
"""

from __future__ import annotations

import math

import pytest

from workbench.core import metrics
from workbench.study import save_config


@pytest.fixture(params=["zero", "exclude"])
def two_runs(request, small_study):
    """Two runs of the offline labeller on the split small cohort (the second with a revised prompt: pneumonia, a false finding in
    the first run, has no positive on either side in the second, like Hernia on OpenI)."""
    wb = small_study
    wb.config.zero_division = request.param
    save_config(wb.root, wb.config)
    wb.split_cohort("dev", validation=0.3, seed=0)
    first = wb.start_run("dev").run_id
    wb.set_prompt_field("pneumonia", "hedged", "negative")  # s3 "cannot exclude pneumonia" no longer counts
    wb.save_labels(["pneumonia"], "pneumonia: hedged wording does not count")
    second = wb.start_run("dev").run_id
    return wb, first, second, request.param


def close(a, b):
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, abs_tol=1e-12))


def test_every_view_gives_the_same_macro_figure(two_runs):
    wb, first, second, policy = two_runs
    # whole cohort: metrics, history, compare, bundle figures
    whole = {run: wb.evaluate_run(run, n_resamples=0).averages["macro_f1"] for run in (first, second)}
    history = wb.iteration_history("dev").set_index("run")["macro_f1"].to_dict()
    cmp = wb.compare_runs(first, second)
    assert close(history[first], whole[first]) and close(history[second], whole[second])
    assert close(cmp.macro_f1_a, whole[first]) and close(cmp.macro_f1_b, whole[second])
    assert cmp.macro_b.policy == policy
    # by part: split-metrics, split-history, split-compare, optimise's report
    parts = {run: wb.evaluate_parts(run, n_resamples=0) for run in (first, second)}
    by_part = wb.history_by_part("dev").set_index("run")
    split_cmp = wb.compare_by_part(first, second)
    report = wb.optimise(["cardiomegaly"], rounds=1, run_id=first, proposer="offline", save_drafts=False)
    tables = {(run, part): parts[run][part].table for run in (first, second) for part in ("tuning", "validation")}
    every = metrics.undefined_labels(tables.values(), policy)  # split-history: one label set for all rows and parts
    for part in ("tuning", "validation"):
        ta, tb = tables[first, part], tables[second, part]
        # two runs side by side average the same labels (issue 30): under exclude, a label undefined in one of
        # them is left out of both; under zero nothing is left out and each is the run's own figure
        pa, pb = metrics.paired_macro_figures(ta["f1"], ta["f1_undefined"], tb["f1"], tb["f1_undefined"], policy)
        assert close(split_cmp[part].macro_f1_a, pa.value) and close(split_cmp[part].macro_f1_b, pb.value)
        for run, t in ((first, ta), (second, tb)):
            row = metrics.macro_figure(t["f1"], t["f1_undefined"] | t.index.isin(list(every)), policy)
            assert close(by_part.loc[run, f"{part}_macro_f1"], row.value)
        assert report.start[part]["labels"] == report.end[part]["labels"]
        if policy == "zero":
            a, b = parts[first][part].macro_f1, parts[second][part].macro_f1
            assert close(pa.value, a) and close(pb.value, b) and close(report.start[part]["macro_f1"], a)
    # the policy changes the figure where a label has no positive on either side
    table = wb.evaluate_run(first, n_resamples=0).table
    assert table["f1_undefined"].any()
    other = "exclude" if policy == "zero" else "zero"
    assert not close(wb.evaluate_run(first, n_resamples=0, zero_division=other).averages["macro_f1"], whole[first])


def test_each_view_says_which_labels_it_averages(two_runs):
    wb, first, second, policy = two_runs
    ev = wb.evaluate_run(first, n_resamples=0)
    undefined = list(ev.table.index[ev.table["f1_undefined"]])
    text = ev.macro.describe()
    assert f"zero_division: {policy}" in text and undefined[0] in text
    if policy == "exclude":
        assert f"mean over {len(ev.table) - len(undefined)} of {len(ev.table)} labels" in text
    else:
        assert f"mean over {len(ev.table)} labels" in text and "count as 0" in text
    assert wb.compare_runs(first, second).macro_b.describe().startswith("mean over")
    assert wb.compare_by_part(first, second)["validation"].macro_labels.startswith("mean over")
    assert wb.evaluate_parts(first, n_resamples=0)["tuning"].macro_labels.startswith("mean over")


def test_macro_figure_fills_or_leaves_out_by_policy():
    import pandas as pd

    values = pd.Series({"a": 0.5, "b": float("nan"), "c": 1.0})
    undefined = pd.Series({"a": False, "b": True, "c": False})
    assert metrics.macro_figure(values, undefined, "zero").value == pytest.approx(0.5)
    assert metrics.macro_figure(values, undefined, "one").value == pytest.approx(2.5 / 3)
    fig = metrics.macro_figure(values, undefined, "exclude")
    assert fig.value == pytest.approx(0.75) and fig.left_out == ("b",) and fig.averaged == ("a", "c")
    assert (
        fig.describe() == "mean over 2 of 3 labels; left out (no positive on either side): b (zero_division: exclude)"
    )
    # values computed under another policy are refilled: the policy asked for decides
    assert metrics.macro_figure(values.fillna(0.0), undefined, "exclude").value == pytest.approx(0.75)
