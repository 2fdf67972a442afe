"""Refuse what is wrong, with the fix (issue 21, item 5): unknown labels, cohorts and runs name the closest
known one; notes only on a disagreement of the named run and never on a validation report; a run is not
compared with itself; suggest and optimise find the development cohort by its role, not by the name `dev`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import NotFound, UserError


@pytest.fixture
def labelled(small_study):
    """The small cohort labelled once by the offline labeller."""
    small_study.run_id = small_study.start_run("dev").run_id
    return small_study


def invoke(wb, *args):
    return CliRunner().invoke(main, [*args, "--study", str(wb.root)])


def test_a_mistyped_label_fails_with_the_closest_name(labelled):
    result = invoke(labelled, "disagreements", str(labelled.run_id), "--label", "support_device")
    assert result.exit_code == 2, result.output
    assert "unknown label 'support_device' (did you mean 'support_devices'?)" in result.output
    assert "0 disagreement" not in result.output
    for args in (
        ["metrics", "99"],
        ["run", "--cohort", "deev"],
        ["adjudicate", "s1", "edemaa", "1", "--reason", "x"],
        ["prompts", "show", "cardiomegali"],
        ["history", "--cohort", "deb"],
    ):
        result = invoke(labelled, *args)
        assert result.exit_code == 2 and result.output.startswith(("error: no ", "error: unknown ")), (
            args,
            result.output,
        )
    assert "did you mean 'dev'?" in invoke(labelled, "run", "--cohort", "deev").output
    assert "did you mean 'cardiomegaly'?" in invoke(labelled, "prompts", "show", "cardiomegali").output
    with pytest.raises(NotFound, match="did you mean 'pleural_effusion'"):
        labelled.notes(label="pleural_efusion")


def test_notes_only_on_a_disagreement_of_the_named_run(labelled):
    run = labelled.run_id
    queue = labelled.disagreements(run)
    wrong = queue.iloc[0]
    right = ("s1", "pneumothorax")  # s1: no finding, and the labeller says so
    assert right not in set(zip(queue["report_id"], queue["label"], strict=False))
    with pytest.raises(UserError, match=f"not a disagreement of run {run}"):
        labelled.add_note(*right, "other", "unsure", "looks fine", run_id=run)
    result = invoke(labelled, "note", *right, "--category", "other", "--significance", "unsure", "--run", str(run))
    assert result.exit_code == 2 and "not a disagreement" in result.output
    assert labelled.notes().empty  # nothing half-written
    labelled.add_note(wrong["report_id"], wrong["label"], "other", "unsure", "a real one", run_id=run)
    assert len(labelled.notes()) == 1


def test_no_note_on_a_validation_report(labelled):
    labelled.split_cohort("dev", validation=0.3, seed=0)
    parts = labelled.split_parts("dev")
    validation = next(r for r, p in parts.items() if p == "validation")
    with pytest.raises(Exception, match="validation or test set"):
        labelled.add_note(validation, "edema", "other", "unsure", "should be refused", reference_wrong=True)
    assert labelled.notes().empty


def test_compare_a_run_with_itself_is_refused(labelled):
    for command in ("compare", "split-compare"):
        result = invoke(labelled, command, str(labelled.run_id), str(labelled.run_id))
        assert result.exit_code == 2 and "compared with itself" in result.output, result.output


def test_suggest_without_run_finds_the_development_cohort_by_its_role(study, tmp_path):
    from conftest import DATA

    study.import_reports(DATA / "reports_small.csv", "openi")
    study.import_readings(DATA / "readings_small.csv")
    study.split_cohort("openi", validation=0.3, seed=0)
    run = study.start_run("openi").run_id
    assert study.development_cohort() == "openi"
    assert study.optimising._latest_dev_run_id() == run
    result = invoke(study, "suggest", "pleural_effusion", "--proposer", "offline")
    assert "no cohort 'dev'" not in result.output and result.exit_code == 0, result.output


def test_the_disagreement_check_of_a_note_reads_no_cohorts_readings_one_by_one(labelled):
    """Saving a note checks that its item is a disagreement of the run: that check read every reading of the
    cohort (the attribute reference, even in a study where no reader gave an attribute), 1.7 of the 2.2 CPU
    seconds of a note's save at 3,000 reports x 6 readers (bench/bench_reading.py)."""
    from sqlalchemy import event

    run = labelled.run_id
    assert labelled.vocab.attribute_specs(), "the vocabulary has attributes: the attribute check is reachable"
    wrong = labelled.disagreements(run).iloc[0]
    statements: list[str] = []

    def traced(dbapi_connection, record):  # the hot reads run on the DBAPI cursor: SQLite's own trace sees them
        dbapi_connection.set_trace_callback(lambda sql: statements.append(" ".join(sql.split())))

    labelled.engine.dispose()
    event.listen(labelled.engine, "connect", traced)
    try:
        labelled.add_note(wrong["report_id"], wrong["label"], "other", "unsure", "a real one", run_id=run)
    finally:
        event.remove(labelled.engine, "connect", traced)
        labelled.engine.dispose()
    assert any(s.startswith("INSERT INTO errornote") for s in statements), "the trace sees the statements"
    row_by_row = [
        s
        for s in statements
        if s.startswith("SELECT r.report_id, r.label, r.reader_id, r.value, r.version FROM reading r")
        and "WHERE p.cohort_id = " in s
    ]
    assert row_by_row == [], row_by_row
    assert len(labelled.notes()) == 1


def test_the_one_item_check_of_a_note_agrees_with_the_queue_on_every_item(labelled):
    """A note's check reads its own item only; on every asked (report, label) of the run it says what the queue says."""
    run = labelled.run_id
    queue = labelled.disagreements(run, with_attributes=False)
    listed = set(zip(queue["report_id"], queue["label"], strict=False))
    preds = labelled.runs.predictions(run)
    cells = list(zip(preds["report_id"], preds["label"], strict=False))
    assert listed and len(listed) < len(cells)
    said = {cell for cell in cells if labelled.triage._presence_disagreement(run, *cell)}
    assert said == listed
