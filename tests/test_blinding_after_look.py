"""Issue 32, item 5: a reading stays independent once its reader has seen the reference, the labeller's answer
or other readers' votes for that report (Disagreements). A change after that look is refused (not kept as a
revision): the reference is made of independent readings, and a second, informed reading of the same report by
the same reader would either replace the independent one or count the reader twice."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.errors import UserError
from workbench.services import Actor


def _reports(wb, tmp_path) -> list[str]:
    ids = ["r00", "r01"]
    pd.DataFrame({"id": ids, "findings": ["Small left effusion.", "Normal chest."], "impression": ["", ""]}).to_csv(
        tmp_path / "r.csv", index=False
    )
    wb.import_reports(tmp_path / "r.csv", "dev")
    return ids


def _values(wb, reader, report_id) -> dict:
    return wb.my_readings(reader, report_id).set_index("label")["value"].astype(int).to_dict()


def test_a_reading_changed_after_a_look_at_the_reference_is_refused_and_the_look_is_audited(any_study, tmp_path):
    ids = _reports(any_study, tmp_path)
    reader = any_study.as_actor(Actor("dr-a", "reader"))
    reader.submit_reading("dr-a", ids[0], {"edema": 0})
    reader.submit_reading("dr-a", ids[1], {"edema": 0})
    reader.reading.record_look(ids[0])  # Disagreements showed the reference and the votes of r00
    reader.reading.record_look(ids[0])  # again: one event
    with pytest.raises(UserError, match="stays as saved: you have seen its reference"):
        reader.submit_reading("dr-a", ids[0], {"edema": 1})
    assert _values(reader, "dr-a", ids[0])["edema"] == 0, "the independent reading is kept"
    reader.submit_reading("dr-a", ids[0], {"edema": 0}, comment="saw it later")  # same values: a note is fine
    reader.submit_reading("dr-a", ids[1], {"edema": 1})  # a report not looked at changes as before
    assert _values(reader, "dr-a", ids[1])["edema"] == 1
    looks = any_study.audit_log(entity="report_look")
    assert looks["entity_key"].tolist() == [f"{ids[0]}/dr-a"] and looks["action"].tolist() == ["look"]
