"""Adjudicate's attribute ties: listed with the readers' values and counts, settled with a picker, audited."""

from __future__ import annotations

import shutil

from test_app_pages import assert_clean, open_page

from workbench.ui import state

TIE = "demo-012|pleural_effusion|side"  # six readers ticked the effusion: the presence reference is 1


def test_an_attribute_tie_is_listed_and_settled_on_the_adjudicate_page(demo_template, tmp_path):
    from workbench.services import Workbench

    study = tmp_path / "study"
    shutil.copytree(demo_template, study)
    wb = Workbench(study)
    wb.record_reading_attributes("reader-a", "demo-012", "pleural_effusion", {"side": "left"})
    wb.record_reading_attributes("reader-b", "demo-012", "pleural_effusion", {"side": "right"})
    home = open_page(study, "home")
    assert [m.value for m in home.metric if m.label == "Attribute ties waiting"] == ["1"]
    at = open_page(study, "adjudicate")
    assert at.session_state[state.ADJ_ITEM], "the presence queue is still there"
    assert at.session_state[state.ADJ_ATTR_TIE] == TIE
    shown = at.dataframe[-1].value
    assert shown[["report_id", "attribute", "votes"]].values.tolist() == [["demo-012", "side", "left 1, right 1"]]
    picker = at.radio(key=state.widget_key("adj-attr-value", TIE))
    assert picker.options == ["left (tied)", "right (tied)", "bilateral"]
    [save] = [b for b in at.button if b.label == "Save attribute"]
    save.click().run()
    assert_clean(at)
    assert any("choose the value" in w.value for w in at.warning), "no value: nothing saved"
    assert wb.audit_log(entity="reading attribute").empty
    at.radio(key=state.widget_key("adj-attr-value", TIE)).set_value("left")
    at.text_input(key=state.widget_key("adj-attr-reason", TIE)).input("the impression says left")
    [b for b in at.button if b.label == "Save attribute"][0].click().run()
    assert_clean(at)
    ref = wb.reference_attributes("dev").set_index(["report_id", "label", "attribute"])
    assert ref.loc[("demo-012", "pleural_effusion", "side"), "reference"] == "left"
    event = wb.audit_log(entity="reading attribute").iloc[0]
    assert event["action"] == "adjudicate" and "the impression says left" in str(event["new"])
    assert wb.attribute_ties("dev").empty
    assert any("No attribute tie waits" in c.value for c in at.caption)
