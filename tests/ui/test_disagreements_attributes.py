"""Disagreements: an attribute case says which attributes differ, is one case however many differ, and
its note form starts on the attribute's own error category."""

from __future__ import annotations

import shutil

from test_app_pages import all_text, form_data, open_page, press

from workbench.ui import state


def test_an_attribute_case_shows_what_differs_and_offers_its_category(demo_template, tmp_path):
    from workbench.services import Workbench

    study = tmp_path / "study"
    shutil.copytree(demo_template, study)
    wb = Workbench(study)
    run_id = int(wb.runs()["id"].max())
    # demo-012: "Left CP angle blunting, consistent with a small effusion" (labeller: left, mild); four of
    # the six readers who ticked it read a moderate right effusion
    for reader in ("reader-a", "reader-b", "reader-c", "reader-d"):
        wb.record_reading_attributes(reader, "demo-012", "pleural_effusion", {"side": "right", "severity": "moderate"})
    queue = wb.disagreements(run_id, kind="attribute")
    assert queue[["report_id", "label"]].values.tolist() == [["demo-012", "pleural_effusion"]]
    at = open_page(study, "disagreements", {state.DIS_KIND: "attribute"})
    assert at.session_state[state.DIS_PICK] == ("demo-012", "pleural_effusion")
    said = all_text(at)
    assert "Attributes differ" in said and "side: labeller left, reference right" in said
    assert "severity: labeller mild, reference moderate" in said
    data = form_data(at, state.DIS_FORM)
    assert data["values"]["category"] == "laterality/location", "the attribute's own category, changeable"
    press(at, state.DIS_FORM, significance="changes management", text="the impression says right")
    notes = wb.notes("pleural_effusion", "demo-012")
    assert notes[["category", "significance"]].values.tolist() == [["laterality/location", "changes management"]]
