"""Issue 22, item 3: undo of the last save, a reader's own list of readings with search, and a per-report
comment and "unsure" mark stored with the reading (SQLite and PostgreSQL)."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import UserError, WorkbenchError
from workbench.services import Actor
from workbench.services.results import ReadingNote


def _reports(wb, tmp_path, n: int = 4) -> list[str]:
    ids = [f"r{i:02d}" for i in range(n)]
    texts = ["Small left pleural effusion.", "Cardiomegaly, no edema.", "Rib fracture on the right.", "Normal chest."]
    pd.DataFrame({"id": ids, "findings": texts[:n], "impression": [""] * n}).to_csv(tmp_path / "r.csv", index=False)
    wb.import_reports(tmp_path / "r.csv", "dev")
    return ids


def _values(wb, reader, report_id) -> dict:
    return wb.my_readings(reader, report_id).set_index("label")["value"].astype(int).to_dict()


def _audit(wb, key_part: str) -> list[str]:
    audit = wb.audit_log()
    return audit.loc[audit["entity_key"].str.contains(key_part, regex=False), "action"].tolist()


def test_undo_of_a_new_reading_removes_it_and_gives_back_the_draft(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path)
    wb.save_reading_draft("dr-a", ids[0], {"edema": 1})
    wb.submit_reading("dr-a", ids[0], {"edema": 1}, comment="left base hard to see", unsure=True)
    assert wb.reading_note("dr-a", ids[0]) == ReadingNote("left base hard to see", unsure=True)
    undone = wb.undo_last_save("dr-a")
    assert undone.report_id == ids[0] and undone.removed == len(wb.vocab.asked_ids)
    assert wb.my_readings("dr-a", ids[0]).empty, "the reading was new: no reading after the undo"
    assert wb.reading_draft("dr-a", ids[0]) == {"edema": 1}, "the draft it was saved from comes back"
    assert wb.reading_note("dr-a", ids[0]) is None
    assert wb.reading_draft_note("dr-a", ids[0]) == ReadingNote("left base hard to see", True), (
        "the comment and unsure mark come back with the ticks (issue 32, item 9)"
    )
    assert wb.my_reading_list("dr-a", "dev")["ticked"].tolist() == ["Edema"]
    assert wb.work_list("dr-a", "dev").set_index("report_id").loc[ids[0], "state"] == "draft"
    actions = _audit(wb, f"{ids[0]}/dr-a")
    assert "add" in actions and "undo" in actions, actions
    with pytest.raises(UserError, match="nothing to undo"):
        wb.undo_last_save("dr-a")


def test_a_first_save_undone_gives_back_its_ticks_comment_and_unsure_mark(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path)
    wb.submit_reading("dr-a", ids[2], {"fracture": 1}, comment="old rib fracture", unsure=True)
    wb.undo_last_save("dr-a")
    assert wb.reading_draft("dr-a", ids[2])["fracture"] == 1
    assert wb.reading_draft_note("dr-a", ids[2]) == ReadingNote("old rib fracture", True)
    wb.submit_reading("dr-a", ids[2], {"fracture": 1}, comment="old rib fracture", unsure=True)
    assert wb.reading_draft_note("dr-a", ids[2]) is None, "the draft went with the save"


def test_undo_of_a_change_brings_back_the_previous_values(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path)
    wb.submit_reading("dr-a", ids[1], {"cardiomegaly": 1})
    first = _values(wb, "dr-a", ids[1])
    versions = wb.my_readings("dr-a", ids[1]).set_index("label")["version"].astype(int).to_dict()
    wb.submit_reading("dr-a", ids[1], {"cardiomegaly": 1, "edema": 1}, expected_versions=versions, comment="edema?")
    assert _values(wb, "dr-a", ids[1])["edema"] == 1
    undone = wb.undo_last_save("dr-a")
    assert undone.restored == 1 and undone.removed == 0
    assert _values(wb, "dr-a", ids[1]) == first
    assert wb.reading_note("dr-a", ids[1]) is None
    assert wb.reading_draft("dr-a", ids[1]) is None
    assert _audit(wb, f"{ids[1]}/edema/dr-a") == ["change"]
    assert _audit(wb, f"{ids[1]}/dr-a").count("undo") == 2, "the undo of the values and of the comment"
    # the first save is the last one not undone: it can be undone in turn
    assert wb.undo_last_save("dr-a").removed == len(wb.vocab.asked_ids)
    assert wb.my_readings("dr-a", ids[1]).empty


def test_undo_refuses_when_the_reading_changed_since_and_writes_nothing(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path)
    wb.submit_reading("dr-a", ids[0], {"edema": 1})
    wb.submit_reading("dr-a", ids[0], {"edema": 1, "fracture": 1})  # saved again: the last save is this one
    wb.undo_last_save("dr-a")
    before = _values(wb, "dr-a", ids[0])
    # someone (another tab, a script) changes the reading behind the remaining save
    reader = wb.as_actor(Actor("dr-a", "reader"))
    reader.record_reading("dr-a", ids[0], {"pneumonia": 1})
    changed = _values(wb, "dr-a", ids[0])
    with pytest.raises(UserError, match=f"{ids[0]}.*changed since"):
        wb.undo_last_save("dr-a")
    assert _values(wb, "dr-a", ids[0]) == changed != before


def test_undo_is_only_for_ones_own_readings(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path)
    wb.as_actor(Actor("dr-b", "reader")).submit_reading("dr-b", ids[0], {"edema": 1})
    with pytest.raises(UserError, match="nothing to undo"):
        wb.as_actor(Actor("dr-a", "reader")).undo_last_save("dr-a")
    with pytest.raises(Exception, match="themself"):
        wb.as_actor(Actor("dr-a", "reader")).undo_last_save("dr-b")


def test_comment_and_unsure_are_kept_audited_and_cleared(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path)
    wb.submit_reading("dr-a", ids[2], {"fracture": 1}, comment="old or new fracture?", unsure=True)
    wb.submit_reading("dr-a", ids[3], {})
    assert wb.reading_note("dr-a", ids[3]) is None, "no comment and not unsure: nothing stored"
    notes = wb.reading_notes(cohort="dev")
    assert notes.set_index("report_id").loc[ids[2], ["reader", "comment", "unsure"]].tolist() == [
        "dr-a",
        "old or new fracture?",
        True,
    ]
    assert _audit(wb, f"{ids[2]}/dr-a").count("note") == 1
    versions = wb.my_readings("dr-a", ids[2]).set_index("label")["version"].astype(int).to_dict()
    wb.submit_reading("dr-a", ids[2], {"fracture": 1}, expected_versions=versions, comment="", unsure=False)
    assert wb.reading_note("dr-a", ids[2]) is None
    with pytest.raises(WorkbenchError, match="comment"):
        wb.submit_reading("dr-a", ids[3], {}, comment="x" * 5000)


def test_my_reading_list_searches_by_id_and_text_and_stays_blinded(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path)
    wb.submit_reading("dr-a", ids[0], {"pleural_effusion": 1}, comment="small", unsure=True)
    wb.save_reading_draft("dr-a", ids[1], {"cardiomegaly": 1})
    wb.submit_reading("dr-b", ids[2], {"fracture": 1})
    mine = wb.my_reading_list("dr-a", "dev")
    assert mine["report_id"].tolist() == [ids[0], ids[1]], "only my saved readings and drafts"
    row = mine.set_index("report_id").loc[ids[0]]
    assert row["state"] == "saved" and "Pleural" in row["ticked"] and row["unsure"] and row["comment"] == "small"
    assert mine.set_index("report_id").loc[ids[1], "state"] == "draft"
    assert wb.my_reading_list("dr-a", "dev", search="cardiomegaly")["report_id"].tolist() == [ids[1]]
    assert wb.my_reading_list("dr-a", "dev", search="R00")["report_id"].tolist() == [ids[0]]
    assert wb.my_reading_list("dr-a", "dev", search="fracture").empty, "dr-b's reading is not in dr-a's list"
    with pytest.raises(Exception, match="themself"):
        wb.as_actor(Actor("dr-a", "reader")).my_reading_list("dr-b", "dev")


def test_cli_undo_and_the_note_in_the_audit(small_study):
    wb = small_study
    report = wb.work_list("cli-reader", "dev")["report_id"].iloc[0]
    wb.submit_reading("cli-reader", report, {"edema": 1}, comment="faint", unsure=True)
    result = CliRunner().invoke(main, ["readings", "undo", "--reader", "cli-reader", "--study", str(wb.root)])
    assert result.exit_code == 0, result.output
    assert f"Undid the last save of {report} by cli-reader" in result.output
    again = CliRunner().invoke(main, ["readings", "undo", "--reader", "cli-reader", "--study", str(wb.root)])
    assert again.exit_code == 2 and "nothing to undo" in again.output
    audit = CliRunner().invoke(main, ["audit", "--entity", "reading_note", "--format", "csv", "--study", str(wb.root)])
    assert audit.exit_code == 0 and "faint" in audit.output


CONFIRM_CASES = [  # (ticked, seconds shown, min seconds, confirmed) -> asks first
    ((0, 1.0, 0, False), False),  # off (the default)
    ((0, 1.0, 5, False), True),  # nothing ticked, too soon
    ((0, 1.0, 5, True), False),  # Enter again confirms
    ((1, 1.0, 5, False), False),  # something ticked
    ((0, 5.0, 5, False), False),  # shown long enough
]


def test_empty_save_confirmation_rule_in_python_and_in_the_browser_code(tmp_path):
    import json
    import shutil
    import subprocess

    from workbench.core.reading import min_seconds_empty, needs_empty_confirmation

    assert [needs_empty_confirmation(*args) for args, _ in CONFIRM_CASES] == [want for _, want in CONFIRM_CASES]
    assert min_seconds_empty({}) == 0 and min_seconds_empty({"min_seconds_empty": 4}) == 4
    for bad in ({"min_seconds_empty": -1}, {"min_seconds_empty": "3"}, {"min_secs": 3}):
        with pytest.raises(ValueError):
            min_seconds_empty(bad)
    node = shutil.which("node")
    if node is None:
        pytest.skip("the browser half needs node")
    from workbench.ui import keyboard

    module = tmp_path / "form.mjs"
    shutil.copy(keyboard.HERE / "form.js", module)
    script = (
        f"import {{ needsEmptyConfirm }} from {json.dumps(str(module))};\n"
        f"console.log(JSON.stringify({json.dumps([a for a, _ in CONFIRM_CASES])}.map((a) => needsEmptyConfirm(...a))));"
    )
    out = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [want for _, want in CONFIRM_CASES]


def test_reading_setting_is_validated_in_workbench_yaml(small_study):
    from workbench.study import StudyError, load_config

    config = small_study.paths.config
    config.write_text(config.read_text() + "reading:\n  min_seconds_empty: 4\n")
    assert load_config(small_study.root).reading == {"min_seconds_empty": 4}
    config.write_text(config.read_text().replace("min_seconds_empty: 4", "min_seconds_empty: lots"))
    with pytest.raises(StudyError, match="reading: min_seconds_empty"):
        load_config(small_study.root)


GUARD_CASES = [  # (seconds from the report appearing to the save press, min_seconds_shown) -> ignored
    ((-0.15, 0.5), True),  # a second Enter pressed while the first was stored: before the report appeared
    ((0.1, 0.5), True),  # too soon to have read it
    ((0.5, 0.5), False),  # long enough
    ((3.0, 0.5), False),
    ((-0.15, 0), False),  # the guard is off
]


def test_save_guard_rule_in_python_and_in_the_browser_code(tmp_path):
    import json
    import shutil
    import subprocess

    from workbench.core.reading import MIN_SECONDS_SHOWN, min_seconds_shown, save_too_soon

    assert [save_too_soon(*args) for args, _ in GUARD_CASES] == [want for _, want in GUARD_CASES]
    assert min_seconds_shown({}) == MIN_SECONDS_SHOWN == 0.5 and min_seconds_shown({"min_seconds_shown": 0}) == 0
    for bad in ({"min_seconds_shown": -1}, {"min_seconds_shown": 11}, {"min_seconds_shown": True}):
        with pytest.raises(ValueError, match="min_seconds_shown"):
            min_seconds_shown(bad)
    node = shutil.which("node")
    if node is None:
        pytest.skip("the browser half needs node")
    from workbench.ui import keyboard

    module = tmp_path / "form.mjs"
    shutil.copy(keyboard.HERE / "form.js", module)
    script = (
        f"import {{ saveTooSoon }} from {json.dumps(str(module))};\n"
        f"console.log(JSON.stringify({json.dumps([a for a, _ in GUARD_CASES])}.map((a) => saveTooSoon(...a))));"
    )
    out = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [want for _, want in GUARD_CASES]


def test_the_save_guard_is_validated_in_workbench_yaml(small_study):
    from workbench.study import StudyError, load_config

    config = small_study.paths.config
    config.write_text(config.read_text() + "reading:\n  min_seconds_shown: 1.5\n")
    assert load_config(small_study.root).reading == {"min_seconds_shown": 1.5}
    config.write_text(config.read_text().replace("min_seconds_shown: 1.5", "min_seconds_shown: soon"))
    with pytest.raises(StudyError, match="reading: min_seconds_shown"):
        load_config(small_study.root)
