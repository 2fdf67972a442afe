"""Adjudicate page: a reason that names the other value is questioned before it is saved (issue 32, item 14)."""

from __future__ import annotations

from test_app_pages import form_data, open_page, press, study, workbench  # noqa: F401

from workbench.ui import state


def test_absent_reason_with_value_1_is_questioned_then_saved_on_a_second_enter(study):  # noqa: F811
    wb = workbench(study)
    at = open_page(study, "adjudicate")
    report_id, label = at.session_state[state.ADJ_ITEM]
    press(at, state.ADJ_FORM, value="1", reason="Hedged wording: absent per study policy")
    error = form_data(at, state.ADJ_FORM)["error"]
    assert "'absent' but the value is 1" in error and "Enter again" in error
    assert wb.adjudication_history(report_id, label).empty, "not saved on the question"
    assert at.session_state[state.ADJ_ITEM] == (report_id, label), "the item stays open"
    press(at, state.ADJ_FORM, value="1", reason="Hedged wording: absent per study policy")
    assert wb.adjudication_history(report_id, label)["value"].tolist() == [1]


def test_a_changed_decision_after_the_question_is_questioned_again(study):  # noqa: F811
    wb = workbench(study)
    at = open_page(study, "adjudicate")
    report_id, label = at.session_state[state.ADJ_ITEM]
    press(at, state.ADJ_FORM, value="1", reason="Hedged wording: absent per study policy")
    press(at, state.ADJ_FORM, value="0", reason="Hedged wording: present per study policy")
    assert "'present' but the value is 0" in form_data(at, state.ADJ_FORM)["error"]
    assert wb.adjudication_history(report_id, label).empty
