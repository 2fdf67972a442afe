"""The noise floor in the app (issue 25, item 4's last part): the Compare view, the split comparison on
the Optimise page and the suggestion panel show the same `noise` lines as the CLI's compare,
split-compare and suggest, flag a verdict noise alone could produce, and say when it was not measured."""

from __future__ import annotations

from conftest import store_noise
from test_app_pages import all_text, assert_clean, button, open_page, study, workbench  # noqa: F401

from workbench.ui import state

NOT_MEASURED = "noise: not measured (`workbench noise"


def _runs(wb) -> tuple[int, int]:
    """The demo's older and newer run."""
    ids = wb.runs("dev")["id"].tolist()
    return int(ids[1]), int(ids[0])


def test_compare_view_says_noise_is_not_measured(study):  # noqa: F811
    at = open_page(study, "runs", {state.RUNS_TAB: "Compare two runs"})
    older, newer = _runs(workbench(study))
    assert f"{NOT_MEASURED} {newer}`" in all_text(at)


def test_compare_view_flags_a_verdict_noise_could_produce(study):  # noqa: F811
    wb = workbench(study)
    older, newer = _runs(wb)
    store_noise(wb, newer, differ_every=2)  # a noise rate of one half: every change is within noise
    at = open_page(study, "runs", {state.RUNS_TAB: "Compare two runs"})
    assert_clean(at)
    cmp = wb.compare_runs(older, newer)
    expected = wb.comparison_noise(older, newer, cmp.table)
    assert expected and all("noise alone would explain" in line for line in expected)
    warnings = [w.value for w in at.warning]
    assert all(line in warnings for line in expected)  # the same lines as `workbench compare`, each flagged
    assert all("noise alone could produce this verdict" in w for w in warnings if w.startswith("noise,"))
    assert NOT_MEASURED not in all_text(at)


def test_split_comparison_and_suggestion_show_the_noise_line(study):  # noqa: F811
    wb = workbench(study)
    wb.split_cohort("dev", 0.3, 0)
    older, newer = _runs(wb)
    at = open_page(
        study,
        "optimise",
        {state.widget_key("optimise-tab"): "Tuning and validation", state.OPT_RUN: newer, state.OPT_COMPARE: older},
    )
    assert all_text(at).count(NOT_MEASURED) == 1  # once, not once per part
    queue = wb.disagreements(newer)
    label = next(  # a label whose suggestion changes validation answers (the line counts those changes)
        lab
        for lab in queue["label"].value_counts().index
        if (part := ((wb.suggest(lab, newer).evaluation or {}).get("parts") or {}).get("validation"))
        and int(part["fixed"]) + int(part["broken"])
    )
    at = open_page(study, "prompts", {state.PROMPT_LABEL: label})
    button(at, "Suggest a revision").click().run()
    assert_clean(at)
    result = at.session_state[state.SUGGESTION]
    assert f"{NOT_MEASURED} {result.run}`" in all_text(at)
    store_noise(wb, int(result.run), differ_every=2)
    assert wb.suggestion_noise_lines(result) == [wb.suggestion_noise(result)] != [""]
