"""Studies, imports (all or nothing, idempotent), readings, reference, adjudication, agreement."""

from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import DATA, ROOT, require_datasets

from workbench.importers import ImportProblems
from workbench.services import Actor, ConflictError, PermissionDenied, Workbench, init_study
from workbench.shipped import shipped_dir
from workbench.store import prompt_repo
from workbench.store import queries as q
from workbench.store.tables import Reading, Report
from workbench.study import StudyError


def counts(wb):
    """Rows per table that an import could touch."""
    with wb.session() as s:
        return q.count_rows(s, Report), q.count_rows(s, Reading)


def test_init_creates_config_repo_and_database(study):
    cfg = yaml.safe_load((study.root / "workbench.yaml").read_text())
    assert cfg["reference"] == {"rule": "at_least", "k": 4, "n": 6}
    assert cfg["labeller"]["model"] == "workbench/rules"
    assert (study.root / "workbench.db").exists()
    history = prompt_repo.history(study.paths.prompts)
    assert len(history) == 1 and "pleural_effusion.yaml" in history[0].files
    assert len(study.prompt_set().labels) == 20
    # the study's prompt repo is its own repository, not the project's
    assert Path(prompt_repo.resolve(study.paths.prompts)) != ROOT
    with pytest.raises(StudyError, match="already a study"):
        init_study(study.root)


def test_opening_a_non_study_says_how_to_create_one(tmp_path):
    with pytest.raises(StudyError, match="workbench init"):
        Workbench(tmp_path)


def test_unknown_vocabulary_lists_the_shipped_ones(tmp_path):
    with pytest.raises(StudyError, match="ranscore-21"):
        init_study(tmp_path / "x", vocab="nope")


def test_own_vocabulary_file(tmp_path):
    vocab = yaml.safe_load((shipped_dir("vocab") / "chexpert-14.yaml").read_text())
    vocab["id"] = "my-vocab"
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(vocab))
    wb = init_study(tmp_path / "s", vocab=str(path), prompt_set="chexpert-14")
    assert wb.vocab.id == "my-vocab" and len(wb.vocab.asked_ids) == 13


def test_import_reports_is_idempotent_and_says_so(study):
    first = study.import_reports(DATA / "reports_small.csv", "dev")
    assert first.added == 8
    second = study.import_reports(DATA / "reports_small.csv", "dev")
    assert second.added == 0 and "nothing new" in second.message()
    assert counts(study)[0] == 8


def test_changed_report_text_is_refused_and_nothing_written(study, tmp_path):
    study.import_reports(DATA / "reports_small.csv", "dev")
    frame = pd.read_csv(DATA / "reports_small.csv", dtype=str)
    frame.loc[0, "findings"] = "Different text."
    frame.loc[len(frame)] = ["s99", "New report.", "Fine."]
    path = tmp_path / "changed.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ImportProblems, match="row 2.*different text"):
        study.import_reports(path, "dev")
    assert counts(study)[0] == 8  # s99 was not written either: one transaction


def test_import_readings_all_or_nothing(small_study, tmp_path):
    before = counts(small_study)
    bad = pd.DataFrame(
        {
            "report_id": ["s1", "s1", "nope"],
            "label": ["edema", "Edema", "edema"],
            "reader": ["reader-z", "reader-y", "reader-z"],
            "value": ["1", "0", "1"],
        }
    )
    path = tmp_path / "bad.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(ImportProblems) as err:
        small_study.import_readings(path)
    assert "nope" in str(err.value)
    assert counts(small_study) == before


def test_import_readings_twice_adds_nothing(small_study):
    again = small_study.import_readings(DATA / "readings_small.csv")
    assert again.added == 0 and again.unchanged == 960


def test_reimport_with_a_changed_value_is_refused(small_study, tmp_path):
    frame = pd.read_csv(DATA / "readings_small.csv", dtype=str)
    frame.loc[0, "value"] = "1" if frame.loc[0, "value"] == "0" else "0"
    path = tmp_path / "changed.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ImportProblems, match="already gave"):
        small_study.import_readings(path)


def test_reference_ties_go_to_adjudication(small_study):
    queue = small_study.adjudication_queue("dev")
    items = set(zip(queue["report_id"], queue["label"], strict=False))
    assert items == {("s3", "pneumonia"), ("s5", "enlarged_cardiomediastinum")}
    summary = small_study.reference_summary("dev")
    assert summary.loc["pneumonia", "waiting"] == 1
    assert summary.loc["cardiomegaly", "positive"] == 2


def test_adjudication_overrides_and_keeps_history(small_study):
    small_study.adjudicate("s3", "pneumonia", 1, "hedged wording counts for pneumonia")
    small_study.adjudicate("s3", "pneumonia", 0, "on review: consolidation only")
    table = small_study.reference("dev").set_index(["report_id", "label"])
    assert table.loc[("s3", "pneumonia"), "value"] == 0
    assert table.loc[("s3", "pneumonia"), "status"] == "adjudicated"
    assert len(small_study.adjudication_history("s3", "pneumonia")) == 2
    with pytest.raises(StudyError, match="reason"):
        small_study.adjudicate("s3", "pneumonia", 1, "  ")


def test_derived_no_finding_in_the_reference_matrix(small_study):
    small_study.adjudicate("s3", "pneumonia", 1, "x")
    small_study.adjudicate("s5", "enlarged_cardiomediastinum", 0, "x")
    m = small_study.reference_matrix("dev")
    assert m.loc["s1", "no_finding"] == 1
    assert m.loc["s4", "no_finding"] == 0  # a support device alone cancels No Finding in Ran Score
    assert m.loc["s2", "no_finding"] == 0


def test_record_reading_adds_changes_and_keeps_history(small_study):
    result = small_study.record_reading("reader-g", "s1", {"edema": 1, "atelectasis": 0})
    assert result.added == 2
    mine = small_study.my_readings("reader-g", "s1").set_index("label")
    result = small_study.record_reading("reader-g", "s1", {"edema": 0}, {"edema": int(mine.loc["edema", "version"])})
    assert result.changed == 1
    with small_study.session() as s:
        events = q.list_audit(s, entity="reading")
    assert any('"value": 1' in old for old in events["old"])


def test_record_reading_stale_version_is_a_conflict(small_study):
    small_study.record_reading("reader-g", "s1", {"edema": 1})
    small_study.record_reading("reader-g", "s1", {"edema": 0}, {"edema": 1})
    with pytest.raises(ConflictError, match="reload"):
        small_study.record_reading("reader-g", "s1", {"edema": 1}, {"edema": 1})


@pytest.mark.parametrize(
    "values,message", [({"no_finding": 1}, "derived"), ({"edemaa": 1}, "unknown"), ({"edema": 2}, "0 or 1")]
)
def test_record_reading_bad_input(small_study, values, message):
    with pytest.raises(StudyError, match=message):
        small_study.record_reading("reader-g", "s1", values)


def test_reader_role_cannot_adjudicate_or_write_for_others(small_study):
    reader = small_study.as_actor(Actor("reader-a", "reader"))
    with pytest.raises(PermissionDenied):
        reader.adjudicate("s3", "pneumonia", 1, "x")
    with pytest.raises(PermissionDenied):
        reader.record_reading("reader-b", "s1", {"edema": 1})


def test_agreement_tables(small_study):
    tables = small_study.agreement("dev")
    fleiss = tables.fleiss
    assert "pleural_effusion" in set(fleiss.get("label", fleiss.index))
    assert len(tables.pairwise) > 0
    assert len(tables.reader_vs_reference) > 0


def test_openi_import(tmp_path):
    datasets = require_datasets()
    wb = init_study(tmp_path / "openi", vocab="chestxray14", rule={"rule": "majority", "n": 1})
    summary = wb.import_openi(datasets / "openi" / "reports.csv", datasets / "openi" / "labels14.csv", "openi")
    assert summary.added == 3080
    assert summary.details["readings added"] == 3080 * 14
    ref = wb.reference_summary("openi")
    assert (ref["decided"] == 3080).all()
    again = wb.import_openi(datasets / "openi" / "reports.csv", datasets / "openi" / "labels14.csv", "openi")
    assert again.added == 0
