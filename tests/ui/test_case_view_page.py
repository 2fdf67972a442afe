"""The engineer's view of a case in the app (issue 22 item 6): the Runs page's search opens a case with every
run side by side and each call's request and reply; the Disagreements case shows the same, never to a reader."""

from __future__ import annotations

from test_app_pages import all_text, assert_clean, open_page, study, workbench  # noqa: F401  (fixture)

from workbench.ui import state

MATRIX = "Every run of this report, side by side (each call's request and reply)"


def test_runs_search_opens_a_case_with_every_run_side_by_side(study):
    wb = workbench(study)
    runs = sorted(wb.runs()["id"].tolist())
    assert len(runs) >= 2
    at = open_page(study, "runs", {state.RUNS_TAB: "Metrics of a run", state.RUN: runs[-1]})
    at.text_input(key=state.SEARCH).input("EFFUSION").run()
    assert_clean(at)
    found = wb.search_run(runs[-1], "effusion").cases
    assert len(found) > 0 and f"{len(found)} match(es) in run {runs[-1]}" in all_text(at)
    first = (found["report_id"].iloc[0], found["label"].iloc[0])
    assert at.session_state[state.SEARCH_CASE] == first
    matrix = wb.case_matrix(*first)
    shown = [d.value for d in at.dataframe if any(str(c).startswith("run ") for c in d.value.columns)]
    assert shown and list(shown[0].columns) == [c.heading for c in matrix.columns]
    assert list(shown[0].index) == [
        "answer",
        "evidence",
        "status",
        "latency_s",
        "tokens",
        "cost",
        "finish_reason",
        "reported_model",
    ]
    text = all_text(at)
    assert "Messages sent" in text and "Raw reply" in text
    assert matrix.columns[-1].call.reply in [c.value for c in at.code], "the raw reply of the newest run's call"
    at.checkbox(key=state.SEARCH_REGEX).check().run()
    at.text_input(key=state.SEARCH).input("(").run()
    assert "not a valid regular expression" in all_text(at), "a bad pattern is a message on the page, not a crash"


def test_disagreements_case_shows_every_run_but_not_to_a_reader(study):
    wb = workbench(study)
    at = open_page(study, "disagreements")
    assert MATRIX in [e.label for e in at.expander]
    pick = at.session_state[state.DIS_PICK]
    headings = [c.heading for c in wb.case_matrix(*pick).columns]
    assert any(list(d.value.columns) == headings for d in at.dataframe)
    assert "Messages sent" in all_text(at)
    from workbench.services import Actor

    reader = next(r for r in wb.readers() if wb.study._completed_reports(r))  # has finished reports: sees their cases
    path = study / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    blinded = open_page(study, "disagreements", {state.ACTOR: Actor(reader, "reader")})
    assert blinded.session_state[state.DIS_PICK][0] in wb.study._completed_reports(reader), "a case of theirs is open"
    assert MATRIX not in [e.label for e in blinded.expander]
