"""Reading room services on SQLite and PostgreSQL: reader drafts, work lists with an overlap target,
the pace, the disagreement queue's order and the adjudication order."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.services import Actor, PermissionDenied
from workbench.study import StudyError


def _reports(wb, tmp_path, n: int = 12) -> list[str]:
    ids = [f"r{i:02d}" for i in range(n)]
    pd.DataFrame({"id": ids, "findings": ["Small left pleural effusion."] * n, "impression": [""] * n}).to_csv(
        tmp_path / "r.csv", index=False
    )
    wb.import_reports(tmp_path / "r.csv", "dev")
    return ids


def test_draft_is_kept_replaced_and_dropped_on_save(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path)
    assert wb.reading_draft("dr-a", ids[0]) is None
    wb.save_reading_draft("dr-a", ids[0], {"edema": 1})
    wb.save_reading_draft("dr-a", ids[0], {"edema": 1, "fracture": 1})  # the second write replaces the first
    assert wb.reading_draft("dr-a", ids[0]) == {"edema": 1, "fracture": 1}
    assert wb.reading_draft_ids("dr-a") == [ids[0]]
    work = wb.work_list("dr-a", "dev")
    assert dict(zip(work["report_id"], work["state"], strict=False))[ids[0]] == "draft"
    assert wb.my_readings("dr-a", ids[0]).empty, "a draft is not a reading"
    changed = wb.submit_reading("dr-a", ids[0], {"edema": 1, "fracture": 1})
    assert changed.added == len(wb.vocab.asked_ids)
    mine = wb.my_readings("dr-a", ids[0]).set_index("label")["value"]
    assert mine["edema"] == 1 and mine["fracture"] == 1 and mine.sum() == 2, "unticked labels are saved as 0"
    assert wb.reading_draft("dr-a", ids[0]) is None
    assert wb.work_list("dr-a", "dev").set_index("report_id").loc[ids[0], "state"] == "completed"


def test_draft_refuses_bad_input_and_other_readers(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path, 2)
    with pytest.raises(StudyError, match="unknown or derived"):
        wb.save_reading_draft("dr-a", ids[0], {"no_finding": 1})
    with pytest.raises(StudyError, match="0 or 1"):
        wb.save_reading_draft("dr-a", ids[0], {"edema": 2})
    with pytest.raises(StudyError, match="no report"):
        wb.save_reading_draft("dr-a", "missing", {"edema": 1})
    reader = wb.as_actor(Actor("dr-a", "reader"))
    reader.save_reading_draft("dr-a", ids[0], {"edema": 1})
    with pytest.raises(PermissionDenied):
        reader.save_reading_draft("dr-b", ids[0], {"edema": 1})
    with pytest.raises(PermissionDenied):
        reader.reading_draft("dr-b", ids[0])
    with pytest.raises(PermissionDenied):
        wb.as_actor(Actor("pe", "prompt_engineer")).save_reading_draft("pe", ids[0], {"edema": 1})


def test_work_lists_reach_the_overlap_and_stay_balanced(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path, 12)
    result = wb.assign_work("dev", ["dr-a", "dr-b", "dr-c", "dr-d"], 3)
    assert result.added == 36
    status = wb.work_list_status("dev").set_index("reader")
    assert status["assigned"].tolist() == [9, 9, 9, 9] and (status["overlap"] == 3).all()
    lists = {r: wb.work_list(r, "dev")["report_id"].tolist() for r in status.index}
    per_report = pd.Series([rid for lst in lists.values() for rid in lst]).value_counts()
    assert (per_report == 3).all() and set(per_report.index) == set(ids)
    assert lists["dr-a"] == sorted(lists["dr-a"]), "a stable order: the cohort's"
    assert wb.assign_work("dev", ["dr-a", "dr-b", "dr-c", "dr-d"], 3).added == 0, "idempotent"
    assert wb.assign_work("dev", ["dr-a", "dr-b", "dr-c", "dr-d"], 4).added == 12, "raising the overlap fills in"
    with pytest.raises(StudyError, match="between 1 and 2"):
        wb.assign_work("dev", ["dr-a", "dr-b"], 3)
    with pytest.raises(PermissionDenied):
        wb.as_actor(Actor("dr-a", "reader")).assign_work("dev", ["dr-a"], 1)
    assert wb.audit_log(entity="work_list")["entity_key"].tolist() == ["dev"] * 3


def test_without_work_lists_every_report_is_on_the_list(any_study, tmp_path):
    wb = any_study
    ids = _reports(wb, tmp_path, 5)
    assert wb.work_list("anyone", "dev")["report_id"].tolist() == ids
    assert wb.work_list_status("dev").empty


def test_pace_leaves_breaks_out():
    from workbench.services.reading import reading_pace

    stamps = [
        "2026-01-01T10:00:00+00:00",
        "2026-01-01T10:00:30+00:00",
        "2026-01-01T10:01:30+00:00",
        "2026-01-01T13:00:00+00:00",
        "2026-01-01T13:00:40+00:00",
    ]
    pace = reading_pace(stamps, remaining=10)
    assert pace["seconds_per_report"] == 40.0 and pace["based_on"] == 3  # the 3-hour break is not reading time
    assert pace["left_seconds"] == 400.0 and pace["reports_per_hour"] == 90.0
    assert reading_pace([], 5)["seconds_per_report"] is None


def test_queue_order_broken_first_and_adjudication_flagged_first(small_study):
    wb = small_study
    first = wb.start_run("dev").run_id
    lp = wb.label_prompt("pleural_effusion")
    wb.save_prompts(
        [lp.__class__(**{**lp.__dict__, "look_for": (), "definition": "Never present."})],
        "break it",
        wb.prompt_commit(),
    )
    second = wb.start_run("dev").run_id
    assert wb.previous_run(second) == first and wb.previous_run(first) is None
    queue, order = wb.disagreement_queue(second, order="broken")
    assert "broken" in order and queue["broken_by_last_change"].any()
    flags = queue["broken_by_last_change"].to_numpy()
    assert not (flags[1:] & ~flags[:-1]).any(), "broken cases first"
    plain, order_text = wb.disagreement_queue(second)
    assert "highest error rate" in order_text and set(map(tuple, plain[["report_id", "label"]].values)) == set(
        map(tuple, queue[["report_id", "label"]].values)
    )
    with pytest.raises(StudyError, match="order must be"):
        wb.disagreement_queue(second, order="random")
    worklist = wb.adjudication_worklist("dev")
    rank = worklist["why"].map(lambda w: 0 if w.startswith("flagged") else 1 if w == "tie" else 2).to_numpy()
    assert (rank[:-1] <= rank[1:]).all()


def test_label_phrases_include_look_for_and_the_main_word(small_study):
    phrases = small_study.label_phrases("pleural_effusion")
    assert phrases[0] == "Pleural Effusion" and "Effusion" in phrases
    assert set(small_study.label_prompt("pleural_effusion").look_for) <= set(phrases)
