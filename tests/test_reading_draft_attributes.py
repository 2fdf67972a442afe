"""A reader's draft keeps the attribute values of its ticked findings (issue 32's reading room): moving to another
report and back shows them again, as it shows the ticks and the comment (SQLite and PostgreSQL)."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.study import StudyError

EFFUSION = "pleural_effusion"


def _report(wb, tmp_path) -> str:
    pd.DataFrame({"id": ["r1"], "findings": ["Small right pleural effusion."], "impression": [""]}).to_csv(
        tmp_path / "r.csv", index=False
    )
    wb.import_reports(tmp_path / "r.csv", "dev")
    return "r1"


def test_a_draft_keeps_the_attributes_of_its_ticked_findings(any_study, tmp_path):
    wb = any_study
    rid = _report(wb, tmp_path)
    assert dict(wb.vocab.attribute_spec(EFFUSION))["side"], "the vocabulary gives pleural effusion a side"
    wb.save_reading_draft(
        "dr-a", rid, {EFFUSION: 1, "edema": 0}, "", False, attributes={EFFUSION: {"side": "Right", "severity": None}}
    )
    assert wb.reading_draft_attributes("dr-a", rid) == {EFFUSION: {"side": "right"}}
    assert wb.reading_draft("dr-a", rid) == {EFFUSION: 1, "edema": 0}, "the ticks alone, without note or attributes"
    assert wb.my_reading_list("dr-a", "dev")["ticked"].tolist() == ["Pleural Effusion"]
    # a later draft without the picker (attributes off) keeps none; one that unticks the finding cannot keep them
    wb.save_reading_draft("dr-a", rid, {EFFUSION: 1})
    assert wb.reading_draft_attributes("dr-a", rid) is None
    assert wb.reading_draft("dr-a", rid) == {EFFUSION: 1}


def test_a_bad_attribute_in_a_draft_is_refused_and_the_draft_before_stays(any_study, tmp_path):
    wb = any_study
    rid = _report(wb, tmp_path)
    wb.save_reading_draft("dr-a", rid, {EFFUSION: 1}, attributes={EFFUSION: {"side": "left"}})
    with pytest.raises(StudyError, match="unknown value 'up'"):
        wb.save_reading_draft("dr-a", rid, {EFFUSION: 1}, attributes={EFFUSION: {"side": "up"}})
    with pytest.raises(StudyError, match="has no attribute 'colour'"):
        wb.save_reading_draft("dr-a", rid, {EFFUSION: 1}, attributes={EFFUSION: {"colour": "red"}})
    with pytest.raises(StudyError, match="does not tick it"):
        wb.save_reading_draft("dr-a", rid, {EFFUSION: 0}, attributes={EFFUSION: {"side": "right"}})
    assert wb.reading_draft_attributes("dr-a", rid) == {EFFUSION: {"side": "left"}}
    assert wb.reading_draft("dr-a", rid) == {EFFUSION: 1}


def test_saving_the_reading_ends_the_draft_and_its_attributes(any_study, tmp_path):
    wb = any_study
    rid = _report(wb, tmp_path)
    wb.save_reading_draft("dr-a", rid, {EFFUSION: 1}, attributes={EFFUSION: {"side": "right"}})
    wb.submit_reading("dr-a", rid, {EFFUSION: 1})
    wb.record_reading_attributes("dr-a", rid, EFFUSION, {"side": "right"})
    assert wb.reading_draft_attributes("dr-a", rid) is None and wb.reading_draft("dr-a", rid) is None
    assert wb.reader_attributes("dr-a", rid) == {EFFUSION: {"side": "right"}}
