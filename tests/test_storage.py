"""Every storage function, on SQLite and on a real PostgreSQL server (the `any_study` fixture)."""

import inspect
import json
import threading

import pandas as pd
import pytest

from workbench.store import db, queries as q
from workbench.store.tables import Reading, Report

from conftest import DATA

pytestmark = pytest.mark.postgres


def test_every_storage_function_is_tested_here():
    public = {n for n, f in inspect.getmembers(q, inspect.isfunction) if f.__module__ == q.__name__ and not n.startswith("_")}
    source = open(__file__, encoding="utf-8").read()
    untested = sorted(n for n in public if f"q.{n}(" not in source)
    assert untested == [], f"storage functions without a test: {untested}"


def test_schema_version_and_migrate_idempotent(any_study):
    assert db.schema_version(any_study.engine) == db.SCHEMA_VERSION
    assert any_study.migrate() == []


def test_cohorts_reports_readers_readings(any_study):
    with any_study.session() as s:
        cohort, created = q.get_or_create_cohort(s, "dev", "en")
        assert created and q.get_or_create_cohort(s, "dev")[1] is False
        assert q.get_cohort(s, "dev").id == cohort.id
        frame = pd.DataFrame({"report_id": ["a", "b"], "text": ["", ""], "findings": ["No effusion.", "Effusion."],
                              "impression": ["Normal.", "Effusion."], "language": ["en", "en"], "text_hash": ["h1", "h2"]})
        assert q.insert_reports(s, cohort.id, frame, 0) == 2
        assert q.max_report_seq(s, cohort.id) == 1
        assert q.report_hashes(s) == {"a": ("h1", cohort.id), "b": ("h2", cohort.id)}
        assert q.report_ids(s, cohort.id) == ["a", "b"]
        assert list(q.reports_frame(s, cohort.id)["report_id"]) == ["a", "b"]
        assert q.get_report(s, "b").findings == "Effusion."
        assert q.list_cohorts(s).set_index("name").loc["dev", "reports"] == 2
        assert q.ensure_readers(s, ["r1", "r2"]) == 2 and q.ensure_readers(s, ["r1"]) == 0
        assert q.list_readers(s) == ["r1", "r2"]
        readings = pd.DataFrame({"report_id": ["a", "a", "b"], "label": ["edema"] * 3, "reader": ["r1", "r2", "r1"], "value": [1, 0, 1]})
        assert q.insert_readings(s, readings) == 3
        assert len(q.readings_frame(s, cohort_id=cohort.id)) == 3
        assert len(q.readings_frame(s, report_ids_=["a"], reader="r1")) == 1
        votes = q.vote_counts(s, cohort_id=cohort.id).set_index(["report_id", "label"])
        assert votes.loc[("a", "edema"), "positives"] == 1 and votes.loc[("a", "edema"), "n_readers"] == 2
        assert len(q.vote_counts(s, report_id="b")) == 1
        per = q.reading_counts(s, cohort_id=cohort.id).set_index(["reader", "report_id"])["labels"].to_dict()
        assert per == {("r1", "a"): 1, ("r2", "a"): 1, ("r1", "b"): 1}
        reading = q.get_reading(s, "a", "edema", "r1")
        assert q.update_reading(s, reading.id, 0, expected_version=1) is True
        assert q.update_reading(s, reading.id, 1, expected_version=1) is False  # stale version
        assert q.count_rows(s, Reading) == 3 and q.count_rows(s, Report) == 2


def test_adjudications_flags_notes_audit(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        q.add_adjudication(s, "s1", "edema", 1, "senior", "first")
        q.add_adjudication(s, "s1", "edema", 0, "senior", "second")
        adj = q.adjudications_frame(s)
        assert list(adj["reason"]) == ["first", "second"] and adj["seq"].is_monotonic_increasing
        note = q.add_note(s, report_id="s1", label="edema", run_id=None, author="rad", category="other",
                          significance="unsure", text="t", reference_wrong=True)
        q.add_flag(s, "s1", "edema", "rad", "wrong", note.id)
        assert len(q.flags_frame(s)) == 1
        assert q.notes_frame(s, label="edema")["reference_wrong"].tolist() == [True]
        q.add_audit(s, "rad", "add", "note", "s1/edema", None, {"x": 1})
        q.add_audit_many(s, [{"at": q.now(), "actor": "a", "action": "import", "entity": "readings", "entity_key": "f",
                              "old_json": "", "new_json": "{}"}])
        log = q.list_audit(s, entity="note")
        assert json.loads(log.iloc[0]["new"]) == {"x": 1}


def test_runs_predictions_cache(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        cohort = q.get_cohort(s, "dev")
        run = q.add_run(s, cohort_id=cohort.id, prompt_commit="c" * 40, model="m", params_json="{}", mode="per_label",
                        labels_json='["edema"]')
        q.add_run_counts(s, run.id, calls_made=2, failures=1)
        q.update_run(s, run.id, status="finished")
        assert q.get_run(s, run.id).calls_made == 2
        assert q.list_runs(s, cohort.id).iloc[0]["status"] == "finished"
        rows = [{"report_id": "s1", "label": "edema", "value": 1, "evidence": "e", "evidence_found": True,
                 "status": "ok", "detail": "", "call_key": "k1"},
                {"report_id": "s2", "label": "edema", "value": None, "evidence": "", "evidence_found": None,
                 "status": "parse_error", "detail": "bad", "call_key": "k2"}]
        q.upsert_predictions(s, run.id, rows)
        q.upsert_predictions(s, run.id, rows[:1])  # replacing, not duplicating
        assert len(q.predictions_frame(s, run.id)) == 2
        one = q.predictions_frame(s, run.id, report_id="s1", label="edema")
        assert len(one) == 1 and one.iloc[0]["evidence_found"] is True
        assert q.done_prediction_keys(s, run.id) == {("s1", "edema")}
        q.put_cached_call(s, "k1", "m", '{"value": 1}', 10, 2, None)
        q.put_cached_call(s, "k1", "m", "other", 1, 1, None)  # first writer wins
        assert q.cached_calls(s, ["k1", "k9"])["k1"].response == '{"value": 1}'
        q.put_extraction(s, "x1", "b" * 64, "t" * 64, '{"edema": 1}')
        assert q.get_extractions(s, ["x1"]) == {"x1": '{"edema": 1}'}


def test_users_and_drafts(any_study):
    any_study.add_user("boss", "admin", "password-123")
    with any_study.session() as s:
        assert q.get_user(s, "boss").role == "admin"
        assert list(q.list_users(s)["id"]) == ["boss"]
        q.put_draft(s, "edema", "boss", "c1", "yaml 1")
        q.put_draft(s, "edema", "boss", "c2", "yaml 2")
        assert q.get_draft(s, "edema", "boss").content == "yaml 2"
        assert list(q.list_drafts(s, "boss")["label"]) == ["edema"]
        q.delete_draft(s, "edema", "boss")
        assert q.get_draft(s, "edema", "boss") is None


def test_rejected_import_leaves_database_unchanged(any_study, tmp_path):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    bad = tmp_path / "bad.csv"
    bad.write_text("report_id,label,reader,value\ns1,edema,r1,1\ns1,edema,r1,0\nzz,edema,r1,1\n")
    with pytest.raises(Exception):
        any_study.import_readings(bad)
    with any_study.session() as s:
        assert q.count_rows(s, Reading) == 0


def test_two_readers_saving_the_same_report_at_once(any_study):
    """Concurrent first saves of one (report, reader): one lands, the other gets a clear conflict."""
    from workbench.services import ConflictError

    any_study.import_reports(DATA / "reports_small.csv", "dev")
    values = {lab: 1 for lab in any_study.vocab.asked_ids}
    outcomes, barrier = [], threading.Barrier(2)

    def save(v):
        barrier.wait()
        try:
            outcomes.append(any_study.record_reading("reader-a", "s1", {k: v for k in values}))
        except ConflictError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=save, args=(v,)) for v in (0, 1)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    mine = any_study.my_readings("reader-a", "s1")
    assert len(mine) == len(values)  # nothing half-written: all labels, from one save
    assert mine["value"].nunique() == 1
    errors = [o for o in outcomes if isinstance(o, Exception)]
    assert len(errors) <= 1 and all("reload" in str(e) for e in errors)


def test_stress_zero_lost_writes_small(any_study, tmp_path):
    """The bench/bench_concurrency.py stress at a smaller size: every write stored, none lost."""
    import sys

    sys.path.insert(0, str(DATA.parents[1] / "bench"))
    from bench_concurrency import stress

    url = any_study.url if any_study.url.startswith("postgresql") else None
    if url:  # the stress creates its own study; give it a fresh database on the same server
        from pg import fresh_database

        url = fresh_database(url.rsplit("/", 1)[0] + "/postgres")
    result = stress(url, users=5, writes=40)
    assert result["errors"] == 0, result["first_error"]
    assert result["lost"] == 0 and result["stored"] == 200
    assert result["audit_events"] == 200  # one audit event per write


def test_reading_drafts_and_work_lists(any_study):
    with any_study.session() as s:
        cohort, _ = q.get_or_create_cohort(s, "dev", "en")
        frame = pd.DataFrame({"report_id": ["a", "b", "c"], "text": ["", "", ""], "findings": ["x", "y", "z"],
                              "impression": ["", "", ""], "language": ["en"] * 3, "text_hash": ["h1", "h2", "h3"]})
        q.insert_reports(s, cohort.id, frame, 0)
    with any_study.session() as s:
        assert q.get_reading_draft(s, "dr", "a") is None
        q.put_reading_draft(s, "dr", "a", {"edema": 1})
        q.put_reading_draft(s, "dr", "a", {"edema": 0, "fracture": 1})  # an upsert, not a second row
        q.put_reading_draft(s, "dr", "b", {"edema": 1})
    with any_study.session() as s:
        assert q.get_reading_draft(s, "dr", "a") == {"edema": 0, "fracture": 1}
        assert sorted(q.reading_draft_ids(s, "dr")) == ["a", "b"]
        q.delete_reading_draft(s, "dr", "a")
    with any_study.session() as s:
        assert q.reading_draft_ids(s, "dr") == ["b"]
        q.ensure_readers(s, ["dr"])
        q.insert_readings(s, pd.DataFrame({"report_id": ["a", "a"], "label": ["edema", "fracture"], "reader": ["dr", "dr"],
                                           "value": [1, 0]}))
        counts = q.reader_report_counts(s, "dr", cohort.id)
        assert counts[["report_id", "labels"]].values.tolist() == [["a", 2]] and counts["saved_at"].iloc[0]
        assert q.get_work_list(s, cohort.id) is None
        q.put_work_list(s, cohort.id, 2, "boss")
        assert q.add_assignments(s, cohort.id, [("b", "dr"), ("a", "dr"), ("a", "other")], "boss") == 3
    with any_study.session() as s:
        assert q.get_work_list(s, cohort.id).overlap == 2
        assert q.assignments_frame(s, cohort.id).values.tolist() == [["a", "dr"], ["a", "other"], ["b", "dr"]]
        assert q.assignments_frame(s, cohort.id, reader="dr")["report_id"].tolist() == ["a", "b"]
