"""The Optimise page and the "Suggest a revision" panel through AppTest, on a copy of the demo study."""

from __future__ import annotations

from test_app_pages import assert_clean, button, open_page, study, workbench  # noqa: F401

from workbench.ui import charts, state


def test_split_from_the_page_then_parts_side_by_side(study):  # noqa: F811
    at = open_page(study, "optimise")
    assert at.title[0].value == "Optimise" and at.caption
    button(at, "Split into tuning and validation").click().run()
    assert_clean(at)
    parts = workbench(study).split_parts("dev")
    assert parts and set(parts.values()) == {"tuning", "validation"}
    at = open_page(study, "optimise", {state.widget_key("optimise-tab"): "Tuning and validation"})
    assert any("validation macro F1" in m.label for m in at.metric)


def test_suggest_on_prompts_page_then_accept_into_the_draft(study):  # noqa: F811
    wb = workbench(study)
    wb.split_cohort("dev", 0.3, 0)
    queue = wb.disagreements(int(wb.runs("dev").iloc[0]["id"]))
    label = queue["label"].value_counts().index[0]
    at = open_page(study, "prompts", {state.PROMPT_LABEL: label})
    button(at, "Suggest a revision").click().run()
    assert_clean(at)
    result = at.session_state[state.SUGGESTION]
    assert result.label == label and result.proposal
    assert result.status == "ok" and result.offered, result  # the demo's first run has fixable errors
    assert any("F1 before" in d.value.columns for d in at.dataframe)
    button(at, "Accept as my draft").click().run()
    assert_clean(at)
    assert workbench(study).draft(label)[2]
    assert workbench(study).proposal(result.proposal).status == "accepted"
    # the draft evaluated on both parts beside the committed version (DraftsEvaluation read by attribute)
    button(at, "Evaluate my drafts on tuning and validation").click().run()
    assert_clean(at)
    assert any("F1 with the draft" in d.value.columns for d in at.dataframe)
    assert any("nothing is committed" in c.value and "validation: macro F1" in c.value for c in at.caption)


def test_suggest_before_a_split_offers_the_button_that_splits_not_a_cli_command(study):  # noqa: F811
    wb = workbench(study)
    run_id = int(wb.runs("dev").iloc[0]["id"])
    label = wb.disagreements(run_id)["label"].iloc[0]
    at = open_page(study, "disagreements", {state.RUN: run_id, state.DIS_LABEL: label})
    shown = [e.value for kind in ("info", "error", "warning", "markdown", "caption") for e in getattr(at, kind)]
    assert not [t for t in shown if "workbench split" in t], "no CLI command on the page"
    assert not [b for b in at.button if b.label == "Suggest a revision"], "nothing to suggest against yet"
    assert any("not split yet" in i.value for i in at.info)
    button(at, "Split dev into tuning and validation").click().run()
    assert_clean(at)
    assert set(workbench(study).split_parts("dev").values()) == {"tuning", "validation"}
    assert [b for b in at.button if b.label == "Suggest a revision"], "split: Suggest is offered"


def test_suggest_on_prompts_page_before_a_split_splits_the_development_cohort(study):  # noqa: F811
    label = workbench(study).vocab.asked_ids[0]
    at = open_page(study, "prompts", {state.PROMPT_LABEL: label})
    button(at, "Split dev into tuning and validation").click().run()
    assert_clean(at)
    assert workbench(study).split_parts("dev")


def test_parts_history_chart_has_both_parts_and_the_gap():
    import pandas as pd

    history = pd.DataFrame(
        {
            "run": [1, 2],
            "version": [1, 2],
            "prompt": ["a", "b"],
            "tuning_macro_f1": [0.7, 0.8],
            "validation_macro_f1": [0.65, 0.7],
            "gap": [0.05, 0.1],
        }
    )
    fig = charts.parts_history_chart(history)
    assert [t.name for t in fig.data] == ["tuning", "validation", "gap (tuning - validation)"]
    assert list(fig.data[2].y) == [0.05, 0.1]


def test_optimise_page_on_an_empty_study(tmp_path):
    from test_app_pages import open_page as open_

    from workbench.services import init_study

    root = tmp_path / "empty"
    init_study(root, vocab="ranscore-21").engine.dispose()
    for tab in ("Split", "Tuning and validation", "Optimise", "Reports", "Test cohorts"):
        at = open_(root, "optimise", {state.widget_key("optimise-tab"): tab})
        assert at.title[0].value == "Optimise"


def test_two_runs_compared_on_both_parts(study):  # noqa: F811
    wb = workbench(study)
    wb.split_cohort("dev", 0.3, 0)
    runs = wb.runs("dev")
    newest, older = int(runs.iloc[0]["id"]), int(runs.iloc[1]["id"])
    at = open_page(
        study,
        "optimise",
        {state.widget_key("optimise-tab"): "Tuning and validation", state.OPT_RUN: newest, state.OPT_COMPARE: older},
    )
    frames = [d.value for d in at.dataframe if "validation verdict" in d.value.columns]
    assert frames and {"tuning F1 change", "validation McNemar p", "validation broken"} <= set(frames[0].columns)
    assert any("validation: macro F1" in c.value and f"before = run #{older}" in c.value for c in at.caption)


def test_optimise_tables_show_label_names_and_readable_headers(study):  # noqa: F811
    """No raw label id ('enlarged_cardiomediastinum') or column name ('tuning f1_lo') in the Optimise tables."""
    wb = workbench(study)
    wb.split_cohort("dev", 0.3, 0)
    runs = wb.runs("dev")
    newest, older = int(runs.iloc[0]["id"]), int(runs.iloc[1]["id"])
    names = wb.vocab.names()
    assert names["enlarged_cardiomediastinum"] != "enlarged_cardiomediastinum"  # the check below can fail
    tabs = [
        ("Split", {}),
        ("Tuning and validation", {state.OPT_RUN: newest, state.OPT_COMPARE: older}),
    ]
    tables = []
    for tab, extra in tabs:
        at = open_page(study, "optimise", {state.widget_key("optimise-tab"): tab, **extra})
        tables += [d.value for d in at.dataframe]
    assert len(tables) == 4  # split summary; parts; history by part; comparison
    for frame in tables:
        headers = [str(c) for c in frame.columns]
        assert not [h for h in headers if "_" in h or h.endswith((" f1", " b", " c"))], headers
        shown = set(map(str, frame.index)) | set(map(str, frame.get("label", [])))
        raw_ids = {lab for lab in wb.vocab.asked_ids if names.get(lab, lab) != lab}  # "emphysema" is its own name
        assert not shown & raw_ids, shown & raw_ids
    parts = next(f for f in tables if "tuning F1 95% low" in f.columns)
    assert names["enlarged_cardiomediastinum"] in parts.index


def test_role_then_counted_look_from_the_page(study, tmp_path):  # noqa: F811

    wb = workbench(study)
    held = tmp_path / "held.csv"
    held.write_text("id,findings,impression\nh1,Heart is enlarged.,Cardiomegaly.\nh2,Lungs are clear.,Normal.\n")
    wb.import_reports(held, "held")
    at = open_page(study, "optimise", {state.COHORT: "held"})
    at.selectbox[-1].set_value("test")
    button(at, "Set role").click().run()
    assert_clean(at)
    assert workbench(study).cohort_role("held") == "test"
    workbench(study).freeze("v-look", workbench(study).runs("dev").iloc[0]["prompt_commit"])
    at = open_page(study, "optimise", {state.widget_key("optimise-tab"): "Test cohorts"})
    button(at, "Measure (counted look)").click().run()
    assert_clean(at)
    assert any("test looked at 1 time" in s.value for s in at.success)
    assert workbench(study).test_looks()["bundle"].tolist() == ["v-look"]


def test_suggestion_panel_shows_validation_cases_by_id_never_by_text(study):  # noqa: F811
    """Validation report text on screen invites tuning to validation: the panel shows those cases as
    counts and ids, and no sentence found only in validation reports appears anywhere on the page."""
    import re

    from workbench.core.text import compose_text
    from workbench.store import queries as q

    wb = workbench(study)
    wb.split_cohort("dev", 0.3, 0)
    parts = wb.split_parts("dev")
    run_id = int(wb.runs("dev").iloc[0]["id"])
    label = wb.disagreements(run_id)["label"].value_counts().index[0]
    at = open_page(study, "prompts", {state.PROMPT_LABEL: label})
    button(at, "Suggest a revision").click().run()
    assert_clean(at)
    result = at.session_state[state.SUGGESTION]
    assert result.status == "ok", result
    with wb.session() as s:
        reports = q.reports_frame(s, ids=list(parts))
    texts = {part: [] for part in ("tuning", "validation")}
    for row in reports.itertuples(index=False):
        texts[parts[row.report_id]].append(
            compose_text(row.findings, row.impression, row.text, ["findings", "impression"])
        )
    tuning_text = "\n".join(texts["tuning"]).lower()  # a phrase mined from tuning may also be a validation sentence
    only_validation = {
        x.strip()
        for t in texts["validation"]
        for x in re.split(r"[.\n]", t)
        if len(x.strip()) > 15 and x.strip().lower() not in tuning_text
    }
    assert only_validation  # the check below can fail
    shown = [
        e.value
        for kind in ("markdown", "text", "code", "caption", "success", "error", "warning")
        for e in getattr(at, kind)
    ]
    frames = [d.value for d in at.dataframe]
    shown += [str(v) for f in frames for v in f.astype(str).to_numpy().ravel()]
    page = "\n".join(map(str, shown))
    assert not [x for x in only_validation if x in page]
    row = next(f for f in frames if "part" in f.columns).set_index("part").loc["validation"]
    for cell in ("fixed cases", "broken cases"):
        ids = [x.strip() for x in row[cell].split(",") if x.strip()]
        assert all(parts.get(i) == "validation" for i in ids)  # ids, each a validation report's


def test_optimise_from_the_page_then_its_report_on_the_reports_tab(study):  # noqa: F811
    """The background optimise says its report and drafts (an OptimiseReport read by attribute), and the Reports tab
    shows the stored report as `workbench optimise` prints it."""
    from test_app_pages import wait_for_job

    from workbench.services.optimising import report_markdown

    wb = workbench(study)
    wb.split_cohort("dev", 0.3, 0)
    at = open_page(study, "optimise", {state.widget_key("optimise-tab"): "Optimise"})
    at.multiselect[0].select("cardiomegaly")
    at.number_input[0].set_value(1)
    at.radio[0].set_value("offline")
    button(at, "Optimise").click().run()
    wait_for_job(at, "optimise")
    report = wb.optimisation_reports().iloc[0]["report"]
    assert report.labels == ["cardiomegaly"] and len(report.rounds) == 1
    done = f"Report #{report.id}: drafts left for {', '.join(report.drafts) or 'no label'}."
    assert any(s.value == done for s in at.success), [s.value for s in at.success]
    assert at.session_state[state.OPT_REPORT] == report.id
    at = open_page(study, "optimise", {state.widget_key("optimise-tab"): "Reports", state.OPT_REPORT: report.id})
    assert any(m.value == report_markdown(report) for m in at.markdown)
