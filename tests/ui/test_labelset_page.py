"""The Label set page through AppTest (mine, review with the vote buttons, blinding, settle, adopt) and its chart."""

from __future__ import annotations

from test_app_pages import assert_clean, button, open_page, study, workbench  # noqa: F401

from workbench.ui import charts, state


def test_mine_review_and_adopt_from_the_page(study):  # noqa: F811
    at = open_page(study, "labelset")
    assert at.title[0].value == "Label set"
    button(at, "Mine offline").click().run()
    assert_clean(at)
    wb = workbench(study)
    name = wb.labelsets()[0]
    rows = wb.labelset_candidates(name)
    assert rows and any(m.label == "Candidates" and m.value == str(len(rows)) for m in at.metric)
    assert any("hidden until you vote" in c.value for c in at.caption)
    at = open_page(study, "labelset", {state.LABELSET: name})
    button(at, "Approve").click().run()
    assert_clean(at)
    assert wb.candidate_votes(name, rows[0]["key"]) == {"local": ("approve", "")}
    assert any("votes: local: approve" in c.value for c in at.caption)  # shown once you have voted
    button(at, "Next").click().run()
    button(at, "Reject").click().run()
    assert_clean(at)
    assert wb.candidate_votes(name, rows[1]["key"]) == {"local": ("reject", "")}
    next(t for t in at.text_input if t.label.startswith("Reviewers")).set_value("local")  # the operator alone
    button(at, "Set rule").click().run()
    assert_clean(at)
    assert wb.review_rule(name).reviewers == ("local",)
    for c in wb.labelset_candidates(name)[2:]:
        wb.vote_candidate(name, c["key"], "approve")
    at = open_page(study, "labelset", {state.LABELSET: name})
    button(at, "Adopt as the study's vocabulary").click().run()
    assert_clean(at)
    assert workbench(study).vocab.id.startswith("labelset-")


def test_prevalence_chart_marks_coverage_and_the_long_tail():
    rows = [
        {"name": "effusion", "affirmed_reports": 9, "affirmed_mentions": 10, "overlaps": ["pleural_effusion"]},
        {"name": "granuloma", "affirmed_reports": 5, "affirmed_mentions": 6, "overlaps": []},
        {"name": "scar", "affirmed_reports": 3, "affirmed_mentions": 4, "overlaps": []},
    ]
    fig = charts.labelset_prevalence(rows, top=2)
    bars = {t.name: list(t.x) for t in fig.data if t.type == "bar"}
    assert bars == {"covered by the vocabulary": ["effusion"], "not covered": ["granuloma"]}
    line = next(t for t in fig.data if t.type == "scatter")
    assert [round(v, 2) for v in line.y] == [0.5, 0.8]  # 10 of 20 affirmed mentions, then 16 of 20
