"""Every storage function, on SQLite and on a real PostgreSQL server (the `any_study` fixture)."""

import inspect
import json
import threading
from pathlib import Path

import pandas as pd
import pytest
from conftest import DATA
from sqlalchemy import select

from workbench.errors import WorkbenchError
from workbench.store import db
from workbench.store import queries as q
from workbench.store.tables import Cohort, Reading, Report

pytestmark = pytest.mark.postgres


def test_every_storage_function_is_tested_here():
    public = {
        n for n, f in inspect.getmembers(q, inspect.isfunction) if f.__module__ == q.__name__ and not n.startswith("_")
    }
    source = Path(__file__).read_text(encoding="utf-8")
    untested = sorted(n for n in public if f"q.{n}(" not in source)
    assert untested == [], f"storage functions without a test: {untested}"


def add_edema_run(s, cohort_id: int):
    """A per-label run of the edema label on a cohort (the storage tests' stand-in run)."""
    return q.add_run(
        s,
        cohort_id=cohort_id,
        prompt_commit="c" * 40,
        model="m",
        params_json="{}",
        mode="per_label",
        labels_json='["edema"]',
    )


def reading_stamp(s, report_id: str, reader: str) -> str:
    """updated_at of one reading."""
    return s.execute(
        select(Reading.updated_at).where(Reading.report_id == report_id, Reading.reader_id == reader)
    ).scalar_one()


def test_schema_version_and_migrate_idempotent(any_study):
    assert db.schema_version(any_study.engine) == db.SCHEMA_VERSION
    assert any_study.migrate() == []


def test_cohorts_reports_readers_readings(any_study):
    with any_study.session() as s:
        cohort, created = q.get_or_create_cohort(s, "dev", "en")
        assert created and q.get_or_create_cohort(s, "dev")[1] is False
        assert q.get_cohort(s, "dev").id == cohort.id == q.stored_id(cohort)  # flushed on creation: it has an id
        with pytest.raises(ValueError, match="never written"):
            q.stored_id(Cohort(name="unsaved", created_at=q.now()))
        frame = pd.DataFrame(
            {
                "report_id": ["a", "b"],
                "text": ["", ""],
                "findings": ["No effusion.", "Effusion."],
                "impression": ["Normal.", "Effusion."],
                "language": ["en", "en"],
                "text_hash": ["h1", "h2"],
            }
        )
        assert q.insert_reports(s, cohort.id, frame, 0) == 2
        assert q.max_report_seq(s, cohort.id) == 1
        assert q.report_hashes(s) == {"a": ("h1", cohort.id), "b": ("h2", cohort.id)}
        assert q.report_ids(s, cohort.id) == ["a", "b"]
        assert list(q.reports_frame(s, cohort.id)["report_id"]) == ["a", "b"]
        assert q.get_report(s, "b").findings == "Effusion."
        assert q.list_cohorts(s).set_index("name").loc["dev", "reports"] == 2
        assert q.ensure_readers(s, ["r1", "r2"]) == 2 and q.ensure_readers(s, ["r1"]) == 0
        assert q.list_readers(s) == ["r1", "r2"]
        readings = pd.DataFrame(
            {"report_id": ["a", "a", "b"], "label": ["edema"] * 3, "reader": ["r1", "r2", "r1"], "value": [1, 0, 1]}
        )
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
        top, stamp = q.reading_watermark(s)
        assert (
            q.count_readings(s) == 3
            and top == max(r[0] for r in s.execute(select(Reading.id)).all())
            and stamp == reading_stamp(s, "a", "r1")
        )
        assert q.reports_read_since(s, stamp) == ["a"] and sorted(q.reports_read_since(s, "2000-01-01")) == ["a", "b"]
        assert q.vote_counts_of(s, ["b"]).to_dict("records") == [
            {"report_id": "b", "label": "edema", "positives": 1, "n_readers": 1}
        ]
        assert q.reading_counts_of(s, ["a"]).set_index(["reader", "report_id"])["labels"].to_dict() == {
            ("r1", "a"): 1,
            ("r2", "a"): 1,
        }


def test_adjudications_flags_notes_audit(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        q.add_adjudication(s, "s1", "edema", 1, "senior", "first")
        q.add_adjudication(s, "s1", "edema", 0, "senior", "second")
        adj = q.adjudications_frame(s)
        assert list(adj["reason"]) == ["first", "second"] and adj["seq"].is_monotonic_increasing
        note = q.add_note(
            s,
            report_id="s1",
            label="edema",
            run_id=None,
            author="rad",
            category="other",
            significance="unsure",
            text="t",
            reference_wrong=True,
        )
        q.add_flag(s, "s1", "edema", "rad", "wrong", note.id)
        assert len(q.flags_frame(s)) == 1
        assert q.notes_frame(s, label="edema")["reference_wrong"].tolist() == [True]
        q.add_audit(s, "rad", "add", "note", "s1/edema", None, {"x": 1})
        q.add_audit_many(
            s,
            [
                {
                    "at": q.now(),
                    "actor": "a",
                    "action": "import",
                    "entity": "readings",
                    "entity_key": "f",
                    "old_json": "",
                    "new_json": "{}",
                }
            ],
        )
        log = q.list_audit(s, entity="note")
        assert json.loads(log.iloc[0]["new"]) == {"x": 1}


def test_runs_predictions_cache(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        cohort = q.get_cohort(s, "dev")
        run = add_edema_run(s, cohort.id)
        q.add_run_counts(s, run.id, calls_made=2, failures=1)
        q.update_run(s, run.id, status="finished")
        assert q.get_run(s, run.id).calls_made == 2
        assert q.list_runs(s, cohort.id).iloc[0]["status"] == "finished"
        rows = [
            {
                "report_id": "s1",
                "label": "edema",
                "value": 1,
                "evidence": "e",
                "evidence_found": True,
                "status": "ok",
                "detail": "",
                "call_key": "k1",
            },
            {
                "report_id": "s2",
                "label": "edema",
                "value": None,
                "evidence": "",
                "evidence_found": None,
                "status": "parse_error",
                "detail": "bad",
                "call_key": "k2",
            },
        ]
        q.upsert_predictions(s, run.id, rows)
        q.upsert_predictions(s, run.id, rows[:1])  # replacing, not duplicating
        assert len(q.predictions_frame(s, run.id)) == 2
        one = q.predictions_frame(s, run.id, report_id="s1", label="edema")
        assert len(one) == 1 and one.iloc[0]["evidence_found"] is True
        assert q.done_prediction_keys(s, run.id) == {("s1", "edema")}
        q.put_cached_call(s, "k1", "m", '{"value": 1}', 10, 2, None)
        q.put_cached_call(s, "k1", "m", "other", 1, 1, None)  # first writer wins
        assert q.cached_calls(s, ["k1", "k9"])["k1"].response == '{"value": 1}'
        q.put_cached_calls(s, [q.CachedCall("k2", "m", "a", 3, 1, 0.5), q.CachedCall("k1", "m", "x", 0, 0, None)])
        got = q.cached_calls(s, ["k1", "k2"])
        assert got["k1"].response == '{"value": 1}' and got["k2"] == q.CachedCall("k2", "m", "a", 3, 1, 0.5)
        q.upsert_predictions(s, run.id, [{**rows[1], "value": 0, "status": "ok", "detail": "retried"}])
        again = q.predictions_frame(s, run.id, report_id="s2", label="edema")
        assert len(again) == 1 and again.iloc[0]["value"] == 0 and again.iloc[0]["detail"] == "retried"
        assert q.prediction_tally(s, run.id) == (2, 0)
        q.upsert_predictions(s, run.id, [{**rows[0], "value": None, "status": "call_error"}])
        assert q.prediction_tally(s, run.id) == (2, 1) and q.prediction_tally(s, run.id + 1) == (0, 0)
        q.put_extraction(s, "x1", "b" * 64, "t" * 64, '{"edema": 1}')
        assert q.get_extractions(s, ["x1"]) == {"x1": '{"edema": 1}'}


def test_run_lease_is_taken_by_exactly_one_of_two_executors_and_taken_over_after_expiry(any_study):
    """Two engines on one database race for a run's lease: one wins each round (conditional UPDATE)."""
    from workbench.services import Workbench

    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        run = add_edema_run(s, q.get_cohort(s, "dev").id)
    other = Workbench(any_study.root)  # a second engine: another executor's connections
    try:
        for round_ in range(10):
            now = 1000.0 * (round_ + 1)
            barrier, won = threading.Barrier(2), []

            def race(wb, holder, barrier=barrier, now=now, won=won):
                barrier.wait()
                with wb.session() as s:
                    if q.take_run_lease(s, run.id, holder, now + 30, now):
                        won.append(holder)

            threads = [threading.Thread(target=race, args=(wb, f"h{i}")) for i, wb in enumerate((any_study, other))]
            [t.start() for t in threads]
            [t.join() for t in threads]
            assert len(won) == 1, won
            winner, loser = won[0], ({"h0", "h1"} - set(won)).pop()
            with any_study.session() as s:
                assert not q.take_run_lease(s, run.id, loser, now + 30, now + 29)  # live: refused
                assert q.renew_run_lease(s, run.id, winner, now + 60) and not q.renew_run_lease(
                    s, run.id, loser, now + 60
                )
                assert q.take_run_lease(s, run.id, winner, now + 90, now + 59)  # the holder may take it again
                assert q.take_run_lease(s, run.id, loser, now + 200, now + 91)  # expired: taken over
                assert not q.renew_run_lease(s, run.id, winner, now + 300)  # the old holder learns it lost
                assert q.take_run_lease(s, run.id, winner, now + 250, now + 100, dead_holder=loser)  # a dead holder
                q.release_run_lease(s, run.id, loser)  # not ours: nothing happens
                assert q.get_run(s, run.id).lease_holder == winner
                q.release_run_lease(s, run.id, winner)
                assert q.get_run(s, run.id).lease_holder is None
    finally:
        other.engine.dispose()


def test_the_database_clock_is_read_from_the_database(any_study, monkeypatch):
    """db_epoch / db_time: the database's clock (leases and expiries), whatever this process's time.time says."""
    import time
    from datetime import UTC, datetime

    true = datetime.now(UTC).timestamp()
    monkeypatch.setattr(time, "time", lambda: 0.0)  # a client clock at 1970 changes nothing
    with any_study.session() as s:
        epoch, when, later = q.db_epoch(s), q.db_time(s), q.db_stamp(s, 60)
    assert abs(epoch - true) < 5 and when.tzinfo is not None and abs(when.timestamp() - epoch) < 5
    assert abs(datetime.fromisoformat(later).timestamp() - (epoch + 60)) < 5  # in q.now()'s format, 60 s on
    assert len(later) == len(q.now())


def test_a_run_left_running_by_a_gone_executor_is_marked_only_while_that_executor_holds_it(any_study):
    """running_runs lists a running run with its lease; mark_run_abandoned is one conditional UPDATE."""
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        cohort = q.get_cohort(s, "dev").id
        run = add_edema_run(s, cohort)
        q.update_run(s, run.id, status="running")
        assert q.take_run_lease(s, run.id, "gone", 130.0, 100.0)
    with any_study.session() as s:
        assert q.running_runs(s, cohort) == [(run.id, "gone", 130.0)]
        assert not q.mark_run_abandoned(s, run.id, "someone-else", "interrupted", "2026-12-05T00:00:00")
        assert q.mark_run_abandoned(s, run.id, "gone", "interrupted", "2026-12-05T00:00:00")
    with any_study.session() as s:
        assert q.get_run(s, run.id).status == "interrupted" and q.get_run(s, run.id).lease_holder is None
        assert q.running_runs(s) == []
        assert not q.mark_run_abandoned(s, run.id, None, "interrupted", "2026-12-05T00:00:01")  # no longer running


def test_a_version_1_database_gets_the_run_lease_columns(any_study):
    from sqlalchemy import inspect as sa_inspect
    from sqlalchemy import text

    with any_study.engine.begin() as conn:
        conn.execute(text("ALTER TABLE run DROP COLUMN lease_holder"))
        conn.execute(text("ALTER TABLE run DROP COLUMN lease_expires_at"))
        conn.execute(text("UPDATE meta SET value = '1' WHERE key = 'schema_version'"))
    applied = any_study.migrate()
    assert "10: run lease: one executor at a time" in applied
    assert {"lease_holder", "lease_expires_at"} <= {c["name"] for c in sa_inspect(any_study.engine).get_columns("run")}


def test_a_version_40_database_loses_the_unread_prediction_indexes(any_study):
    from sqlalchemy import inspect as sa_inspect
    from sqlalchemy import text

    with any_study.engine.begin() as conn:  # the indexes a database created before version 70 has
        conn.execute(text("CREATE INDEX ix_prediction_run_id ON prediction (run_id)"))
        conn.execute(text("CREATE INDEX ix_prediction_call_key ON prediction (call_key)"))
        conn.execute(text("UPDATE meta SET value = '40' WHERE key = 'schema_version'"))
    assert {"ix_prediction_run_id", "ix_prediction_call_key"} <= {
        i["name"] for i in sa_inspect(any_study.engine).get_indexes("prediction")
    }
    assert any(step.startswith("70: ") for step in any_study.migrate())
    inspector = sa_inspect(any_study.engine)
    assert {i["name"] for i in inspector.get_indexes("prediction")} & {
        "ix_prediction_run_id",
        "ix_prediction_call_key",
    } == set()
    unique = inspector.get_unique_constraints("prediction")  # what a run's predictions are read by
    assert any(u["column_names"] == ["run_id", "report_id", "label"] for u in unique)
    assert db.schema_version(any_study.engine) == db.SCHEMA_VERSION and any_study.migrate() == []


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
    with pytest.raises(WorkbenchError, match="bad.csv"):
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


def test_audit_chain_tokens_login_failures_meta(any_study):
    """The chained audit trail, tokens, failed sign-ins and meta values, on SQLite and PostgreSQL."""
    from sqlalchemy import text

    with any_study.session() as s:
        q.add_audit(s, "ann", "add", "note", "s1/edema", None, {"text": "x"})
        q.add_audit_many(
            s,
            [
                {
                    "at": q.now(),
                    "actor": "ann",
                    "action": "import",
                    "entity": "reports",
                    "entity_key": "dev",
                    "old_json": "",
                    "new_json": "{}",
                }
                for _ in range(3)
            ],
        )
        result = q.verify_audit(s)
        assert result.ok and result.events >= 4
        rows = s.execute(
            text(
                "SELECT id, at, actor, action, entity, entity_key, old_json, new_json, prev_hash, hash "
                "FROM auditevent ORDER BY id"
            )
        ).all()
        assert rows[-1][9] == q.audit_event_hash(tuple(rows[-1][:8]), rows[-1][8]) and rows[-1][8] == rows[-2][9]
        q.set_meta(s, "k", "v1")
        q.set_meta(s, "k", "v2")
        assert q.get_meta(s, "k") == "v2" and q.get_meta(s, "missing") is None
    any_study.add_user("boss", "admin", "boss-pass-0001")
    with any_study.session() as s:
        q.add_user_token(s, "boss", "d" * 64)
        assert q.user_token_digests(s, "boss") == ["d" * 64]
        assert q.delete_user_tokens(s, "boss") == 1 and q.user_token_digests(s, "boss") == []
        q.add_user_token(s, "boss", "e" * 64, "2099-01-01T00:00:00+00:00")
        ((digest, created, expires),) = q.user_tokens(s, "boss")
        assert digest == "e" * 64 and created and expires == "2099-01-01T00:00:00+00:00"
        assert q.revoke_credentials(s, "boss") == 1 and q.user_tokens(s, "boss") == []
        assert q.record_login_failure(s, "nobody").failures == 1
        assert q.record_login_failure(s, "nobody").failures == 2
        assert q.get_login_failure(s, "nobody").failures == 2
        q.clear_login_failures(s, "nobody")
        assert q.get_login_failure(s, "nobody") is None
    with any_study.engine.begin() as conn:
        conn.execute(text("UPDATE auditevent SET actor = 'mallory' WHERE id = (SELECT MIN(id) FROM auditevent)"))
    with any_study.session() as s:
        assert not q.verify_audit(s).ok


def test_concurrent_audit_writers_keep_one_chain(any_study):
    """Separate transactions appending at once (advisory lock on PostgreSQL, write lock on SQLite)."""
    barrier = threading.Barrier(6)

    def write(i):
        barrier.wait()
        for k in range(5):
            with any_study.session(write=True) as s:
                q.add_audit(s, f"user-{i}", "add", "note", f"{i}/{k}", None, {"k": k})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    with any_study.session() as s:
        result = q.verify_audit(s)
    assert result.ok, result


def test_a_version_1_database_migrates_to_the_chain_and_disabled_accounts(any_study):
    """The steps of versions 20 and 21 on a database made before them (SQLite and PostgreSQL)."""
    from sqlalchemy import inspect as sa_inspect
    from sqlalchemy import text

    any_study.add_user("boss", "admin", "boss-pass-0001")
    with any_study.engine.begin() as conn:
        conn.execute(text("ALTER TABLE auditevent DROP COLUMN prev_hash"))
        conn.execute(text("ALTER TABLE auditevent DROP COLUMN hash"))
        conn.execute(text('ALTER TABLE "user" DROP COLUMN disabled'))
        conn.execute(text("DELETE FROM meta WHERE key = 'audit_head'"))
        conn.execute(text("UPDATE meta SET value = '1' WHERE key = 'schema_version'"))
    applied = db.migrate(any_study.engine)
    assert {"20", "21"} <= {a.split(":")[0] for a in applied}  # later versions (other tables) may follow
    assert "disabled" in {c["name"] for c in sa_inspect(any_study.engine).get_columns("user")}
    with any_study.session() as s:
        assert q.verify_audit(s).ok
        assert not q.get_user(s, "boss").disabled


def test_cohort_roles_splits_looks_proposals_optimisations(any_study):
    with any_study.session() as s:
        cohort, _ = q.get_or_create_cohort(s, "dev", "en")
        test, _ = q.get_or_create_cohort(s, "held", "en")
        frame = pd.DataFrame(
            {
                "report_id": ["a", "b", "c"],
                "text": ["", "", ""],
                "findings": ["x", "y", "z"],
                "impression": ["", "", ""],
                "language": ["en"] * 3,
                "text_hash": ["h1", "h2", "h3"],
            }
        )
        q.insert_reports(s, cohort.id, frame.iloc[:2], 0)
        q.insert_reports(s, test.id, frame.iloc[2:], 0)
        assert q.cohort_roles(s) == {"dev": "development", "held": "development"}
        q.set_cohort_role(s, test.id, "test")
        assert q.cohort_roles(s)["held"] == "test"
        q.put_split(s, cohort.id, {"a": "tuning", "b": "validation"}, 0, 0.3, "me")
        q.put_split(s, cohort.id, {"a": "validation", "b": "tuning"}, 1, 0.5, "me")  # replaces, never adds
        split = q.split_frame(s, cohort.id).set_index("report_id")
        assert split["part"].to_dict() == {"a": "validation", "b": "tuning"} and set(split["seed"]) == {1}
        roles = q.report_cohort_roles(s, ["a", "c", "zz"]).set_index("report_id")
        assert roles.loc["a", "part"] == "validation" and roles.loc["c", "role"] == "test"
        assert pd.isna(roles.loc["c", "part"]) and "zz" not in roles.index
        run = q.add_run(
            s,
            cohort_id=test.id,
            prompt_commit="c" * 40,
            model="m",
            params_json="{}",
            mode="per_label",
            labels_json="[]",
        )
        q.add_look(s, test.id, "v1", "f" * 64, run.id, "dr-a")
        q.add_look(s, test.id, "v2", "e" * 64, None, "dr-b")
        assert q.looks_frame(s)["bundle"].tolist() == ["v1", "v2"]
        assert q.looks_frame(s, "v1")["actor"].tolist() == ["dr-a"]
        p = q.add_proposal(
            s,
            label="edema",
            author="me",
            source="offline",
            status="offered",
            base_commit="c" * 40,
            run_id=run.id,
            edit_json="{}",
            note_ids_json="[1, 2]",
        )
        assert q.get_proposal(s, p.id).status == "offered"
        q.update_proposal(s, p.id, status="saved", commit="d" * 40)
        assert q.get_proposal(s, p.id).commit == "d" * 40
        assert q.proposals_frame(s, label="edema", status="saved", author="me")["id"].tolist() == [p.id]
        assert q.proposals_frame(s, status="offered").empty
        oid = q.add_optimisation(s, "me", run.id, json.dumps({"rounds": []}))
        assert q.optimisations_frame(s).set_index("id").loc[oid, "report_json"] == '{"rounds": []}'


def test_put_cached_calls_in_bulk_first_writer_wins(any_study):
    with any_study.session() as s:
        q.put_cached_call(s, "k1", "m", "first", 1, 1, None)
    with any_study.session() as s:
        q.put_cached_calls(s, [("k1", "m", "second", 2, 2, 0.5), ("k2", "m", "new", 3, 4, 0.25)])
        q.put_cached_calls(s, [])
    with any_study.session() as s:
        cached = q.cached_calls(s, ["k1", "k2"])
    assert cached["k1"].response == "first" and cached["k2"].response == "new"
    assert (cached["k2"].prompt_tokens, cached["k2"].completion_tokens, cached["k2"].cost) == (3, 4, 0.25)


def test_reading_drafts_and_work_lists(any_study):
    with any_study.session() as s:
        cohort, _ = q.get_or_create_cohort(s, "dev", "en")
        frame = pd.DataFrame(
            {
                "report_id": ["a", "b", "c"],
                "text": ["", "", ""],
                "findings": ["x", "y", "z"],
                "impression": ["", "", ""],
                "language": ["en"] * 3,
                "text_hash": ["h1", "h2", "h3"],
            }
        )
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
        q.insert_readings(
            s,
            pd.DataFrame(
                {"report_id": ["a", "a"], "label": ["edema", "fracture"], "reader": ["dr", "dr"], "value": [1, 0]}
            ),
        )
        counts = q.reader_report_counts(s, "dr", cohort.id)
        assert counts[["report_id", "labels"]].values.tolist() == [["a", 2]] and counts["saved_at"].iloc[0]
        assert q.get_work_list(s, cohort.id) is None
        q.put_work_list(s, cohort.id, 2, "boss")
        assert q.add_assignments(s, cohort.id, [("b", "dr"), ("a", "dr"), ("a", "other")], "boss") == 3
    with any_study.session() as s:
        assert q.get_work_list(s, cohort.id).overlap == 2
        assert q.assignments_frame(s, cohort.id).values.tolist() == [["a", "dr"], ["a", "other"], ["b", "dr"]]
        assert q.assignments_frame(s, cohort.id, reader="dr")["report_id"].tolist() == ["a", "b"]


def test_bulk_writes_above_the_copy_threshold(any_study, monkeypatch):
    """Batches large enough for PostgreSQL's COPY path store exactly what row-by-row inserts store:
    awkward text, NULLs, booleans, a key twice in one batch (last wins for predictions, first for the cache)."""
    copies = []
    real_copy = q._pg_copy_insert
    monkeypatch.setattr(q, "_pg_copy_insert", lambda cur, table, *a: (copies.append(table), real_copy(cur, table, *a)))
    n = q.COPY_MIN_ROWS + 50
    ids = [f"r{i}" for i in range(n)]
    odd = "tab\there, new\nline, back\\slash \\N, quote \" ' , comma; \u00e9\u4e2d\U0001f600 \\."
    with any_study.session() as s:
        cohort, _ = q.get_or_create_cohort(s, "dev", "en")
        q.insert_reports(
            s,
            cohort.id,
            pd.DataFrame(
                {
                    "report_id": ids,
                    "text": [odd] * n,
                    "findings": [""] * n,
                    "impression": [""] * n,
                    "language": ["en"] * n,
                    "text_hash": [f"h{i}" for i in range(n)],
                }
            ),
            0,
        )
        readings = pd.DataFrame(
            {"report_id": ids, "label": ["edema"] * n, "reader": ["r1"] * n, "value": [i % 2 for i in range(n)]}
        )
        q.ensure_readers(s, ["r1"])
        assert q.insert_readings(s, readings) == n
        run = add_edema_run(s, cohort.id)
        rows = [
            {
                "report_id": r,
                "label": "edema",
                "value": i % 2 if i % 7 else None,
                "evidence": odd if i % 3 else "",
                "evidence_found": [True, False, None][i % 3],
                "status": "ok",
                "detail": "",
                "call_key": f"k{i}",
            }
            for i, r in enumerate(ids)
        ]
        q.upsert_predictions(s, run.id, rows + [{**rows[0], "value": 1, "detail": "the later row"}])
        q.put_cached_calls(s, [q.CachedCall("k0", "m", "first", 1, 1, None)])
        q.put_cached_calls(
            s,
            [q.CachedCall(f"k{i}", "m", odd + str(i), i, 2 * i, i / 8 if i % 2 else None) for i in range(n)]
            + [q.CachedCall("k1", "m", "second in the batch", 0, 0, None)],
        )
    with any_study.session() as s:
        stored = q.predictions_frame(s, run.id).set_index("report_id")
        cached = q.cached_calls(s, [f"k{i}" for i in range(n)] + ["line\nbreak"])
        assert len(q.readings_frame(s, cohort_id=cohort.id)) == n
    assert len(stored) == n and stored.loc["r0", "value"] == 1 and stored.loc["r0", "detail"] == "the later row"
    for i in range(1, n):
        row = stored.loc[f"r{i}"]
        assert (None if pd.isna(row["value"]) else row["value"]) == (i % 2 if i % 7 else None)
        assert row["evidence"] == (odd if i % 3 else "") and row["evidence_found"] == [True, False, None][i % 3]
    assert cached["k0"].response == "first" and cached["k1"].response == odd + "1"
    assert cached[f"k{n - 1}"] == q.CachedCall(f"k{n - 1}", "m", odd + str(n - 1), n - 1, 2 * (n - 1), (n - 1) / 8)
    assert len(cached) == n
    if any_study.url.startswith("postgresql"):
        assert copies == ["reading", "prediction", "callcache"]


def test_prompt_version_examples_first_writer_wins(any_study):
    commit = "a" * 40
    with any_study.session() as s:
        assert q.version_examples(s, commit) is None  # not recorded yet: the caller reads Git
        q.put_version_examples(s, commit, {"r2", "r1"})
        q.put_version_examples(s, commit, {"other"})  # a commit's examples cannot differ: ignored
    with any_study.session() as s:
        assert q.version_examples(s, commit) == {"r1", "r2"}
        q.put_version_examples(s, "b" * 40, set())
        assert q.version_examples(s, "b" * 40) == set()  # none recorded differs from not recorded


def test_prediction_and_reading_attributes(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        cohort = q.get_cohort(s, "dev")
        run = q.add_run(
            s,
            cohort_id=cohort.id,
            prompt_commit="c" * 40,
            model="m",
            params_json="{}",
            mode="per_label",
            labels_json='["pleural_effusion"]',
        )
        rows = [
            {
                "report_id": f"s{i % 8 + 1}",
                "label": "pleural_effusion",
                "attribute": a,
                "value": v,
                "status": "ok",
                "detail": "",
            }
            for i in range(8)
            for a, v in (("side", "left"), ("severity", "mild"))
        ]
        q.upsert_prediction_attributes(s, run.id, rows * 13)  # 208 rows: PostgreSQL's COPY path, last row of a key wins
        q.upsert_prediction_attributes(
            s,
            run.id,
            [{**rows[0], "attribute": "", "value": None, "status": "attribute_parse_error", "detail": "not an object"}],
        )
        stored = q.prediction_attributes_frame(s, run.id)
        assert len(stored) == 15  # s1's two values were replaced by its parse failure
        assert stored[stored["report_id"] == "s1"]["status"].tolist() == ["attribute_parse_error"]
        assert len(q.prediction_attributes_frame(s, run.id, label="edema")) == 0
        q.ensure_readers(s, ["ann"])
        frame = pd.DataFrame(
            [("s1", "pleural_effusion", "ann", "side", "left"), ("s2", "pleural_effusion", "ann", "side", "right")],
            columns=q.READING_ATTRIBUTE_COLUMNS,
        )
        assert q.put_reading_attributes(s, frame) == 2
        q.put_reading_attributes(s, frame.assign(value="bilateral").iloc[:1])  # replaced, not duplicated
        q.put_reading_attributes(s, frame.iloc[:1].assign(reader="senior"), adjudicated=True)
        mine = q.reading_attributes_frame(s, cohort.id)
        assert sorted(mine["value"]) == ["bilateral", "right"]
        assert q.reading_attributes_frame(s, adjudicated=True)["reader"].tolist() == ["senior"]
        one = q.reading_attributes_frame(s, report_id="s2", reader="ann")  # one reader's values of one report
        assert one[["report_id", "value"]].values.tolist() == [["s2", "right"]]
        assert q.reading_attributes_frame(s, cohort.id, report_id="s2", reader="senior").empty
        q.delete_reading_attributes(s, "s1", "pleural_effusion", "ann")
        assert q.reading_attributes_frame(s)["report_id"].tolist() == ["s2"]


def test_adaptive_reading_storage(any_study, tmp_path):
    wb = any_study
    path = tmp_path / "r.csv"
    pd.DataFrame({"id": ["x1", "x2", "x3"], "findings": ["a", "b", "c"]}).to_csv(path, index=False)
    wb.import_reports(path, "dev")
    wb.record_reading("local", "x1", {"edema": 1})
    with wb.session(write=True) as s:
        cid = q.get_cohort(s, "dev").id
        q.lock_adaptive(s, cid)
        assert q.count_cohort_reports(s, cid) == 3 and q.report_cohorts(s, ["x1", "x3"]) == {"x1": cid, "x3": cid}
        q.put_agreement_sample(s, cid, ["x2"], 0, 0.3, None, "local")
        assert q.agreement_sample_ids(s, cid) == {"x2"} and q.agreement_sample_ids(s, cid, ["x1"]) == set()
        frame = pd.DataFrame(
            {
                "report_id": ["x1", "x2", "x3"],
                "open": [True, True, False],
                "tie": [False] * 3,
                "readers": [1, 0, 4],
                "cap": [6, 6, 6],
            }
        )
        q.put_report_progress(s, cid, frame, replace=True)
        q.put_report_progress(s, cid, frame.iloc[:1].assign(readers=2))
        assert q.report_progress(s, cid).set_index("report_id")["readers"].to_dict() == {"x1": 2, "x2": 0, "x3": 4}
        assert q.reader_pairs(s, cid) == [("x1", "local")]
        q.put_claims(s, cid, [("x1", "local")], done=True)
        q.put_claims(s, cid, [("x2", "other")], done=False, expires_at="9999")
        assert q.has_open_claim(s, cid, "other") and not q.has_open_claim(s, cid, "local")
        frame = q.adaptive_candidates(s, cid, "local", q.now()).set_index("report_id")
        assert frame.loc["x1", "mine"] and frame.loc["x1", "done"] and frame.loc["x2", "in_flight"] == 1
        assert frame.loc["x2", "sample"] and not frame.loc["x3", "open"]
        # local read x1; x2 is in the sample (another reader in flight is fine); x3 is closed
        assert q.first_offered(s, cid, "local", q.now(), "finish") == "x2"
        assert q.first_offered(s, cid, "third", q.now(), "finish") == "x1"  # started reports first
        assert q.first_offered(s, cid, "third", q.now(), "cohort") == "x1"
        # one report: offered to this reader, or None
        assert q.first_offered(s, cid, "third", q.now(), "finish", "x2") == "x2"
        assert q.first_offered(s, cid, "local", q.now(), "finish", "x1") is None  # read by them
        assert q.first_offered(s, cid, "third", q.now(), "finish", "x3") is None  # closed


def test_call_facts_and_noise_repeats(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        cohort = q.get_cohort(s, "dev")
        run = q.add_run(
            s,
            cohort_id=cohort.id,
            prompt_commit="c" * 40,
            model="openai/m",
            params_json="{}",
            mode="per_label",
            labels_json='["edema"]',
        )
        fact = ["k1", run.id, "edema", 0.25, 1, 120, 9, 64, 0.0012, "stop", "m-2026", None, "127.0.0.1:8080"]
        q.put_call_facts(
            s, [tuple(fact), ("k2", run.id, "edema", 0.5, 2, 100, 0, None, None, "length", "m-2026", "think", None)]
        )
        q.put_call_facts(s, [tuple(fact[:3] + [0.3] + fact[4:])])  # a call made again keeps its latest facts
        facts = q.call_facts(s, ["k1", "k2", "nope", ""]).set_index("call_key")
        assert facts.loc["k1", "latency_s"] == 0.3 and facts.loc["k1", "cached_tokens"] == 64 and len(facts) == 2
        assert facts.loc["k2", "finish_reason"] == "length" and facts.loc["k2", "reasoning"] == "think"
        assert facts.loc["k1", "peer"] == "127.0.0.1:8080"  # the address the call connected to
        assert q.run_peers(s, run.id) == ["127.0.0.1:8080"]  # k2 connected nowhere (None)
        assert q.run_call_facts(s, run.id)["call_key"].tolist() == ["k1", "k2"]
        assert q.call_facts(s, []).empty
        assert q.model_call_history(s, "openai/m") == [(0.3, 9)]  # only calls with completion tokens count
        assert q.next_noise_measurement(s, run.id) == 1
        q.put_noise_repeats(s, [(run.id, 1, "s1", "edema", k, k, 1, 1 if k else 0, "ok") for k in range(3)])
        assert q.next_noise_measurement(s, run.id) == 2
        repeats = q.noise_repeats(s, [run.id, run.id])
        assert repeats["value"].tolist() == [0, 1, 1] and set(repeats["seed"]) == {0, 1, 2}
        assert q.noise_repeats(s, []).empty


def test_case_rows_search_rows_and_failed_replies(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        cohort = q.get_cohort(s, "dev")
        runs = [
            q.add_run(
                s,
                cohort_id=cohort.id,
                prompt_commit=c * 40,
                model="openai/m",
                params_json="{}",
                mode="per_label",
                labels_json='["edema"]',
            ).id
            for c in "ab"
        ]
        for run_id, value, key in ((runs[0], 1, "k1"), (runs[1], None, "k2")):
            q.upsert_predictions(
                s,
                run_id,
                [
                    dict(
                        report_id="s1",
                        label="edema",
                        value=value,
                        evidence="Mild EDEMA 100%",
                        evidence_found=True,
                        status="ok" if value else "parse_error",
                        detail="" if value else "not JSON: 'x'",
                        call_key=key,
                    )
                ],
            )
        q.put_cached_call(s, "k1", "openai/m", '{"value": 1}', 10, 2, None)
        q.put_call_facts(s, [("k2", runs[1], "edema", 0.2, 1, 10, 2, None, None, "stop", "m", None, None)])
        q.put_call_replies(s, [("x" * 5000, "k2"), ("y", "no-such-key")])
        assert q.call_replies(s, ["k1", "k2", ""]) == {"k2": "x" * 5000}
        both = q.report_predictions(s, "s1")
        assert both["run_id"].tolist() == runs and both["call_key"].tolist() == ["k1", "k2"]
        assert q.report_predictions(s, "s1", "atelectasis").empty and q.report_predictions(s, "s2").empty
        answers = q.search_rows(s, runs[0], "answer")
        assert answers["text"].tolist() == ['{"value": 1}']
        assert q.search_rows(s, runs[1], "answer")["text"].tolist() == ["not JSON: 'x'"], "uncached: the detail"
        assert len(q.search_rows(s, runs[0], "evidence", like="%edema 100!%%")) == 1
        assert q.search_rows(s, runs[0], "evidence", like="%edema 1000%").empty
        assert len(q.search_rows(s, runs[0], "report", report_ids=["s1", "s2"])) == 1
        assert q.search_rows(s, runs[0], "evidence", label="atelectasis").empty


def test_web_sessions_end_with_every_revoking_event(any_study):
    any_study.add_user("boss", "admin", "boss-pass-0001")
    with any_study.session() as s:
        q.add_web_session(s, "boss", "a" * 64, "2099-01-01T00:00:00+00:00")
        q.add_web_session(s, "boss", "b" * 64, "2099-01-01T00:00:00+00:00")
        row = q.get_web_session(s, "a" * 64)
        assert row.user_id == "boss" and row.revoked_at == "" and q.get_web_session(s, "c" * 64) is None
        assert q.revoke_web_session(s, "a" * 64) == 1 and q.revoke_web_session(s, "a" * 64) == 0  # signed out once
        assert q.get_web_session(s, "a" * 64).revoked_at != ""
        q.add_user_token(s, "boss", "d" * 64)
        assert q.revoke_credentials(s, "boss") == 1  # the token ...
        assert q.get_web_session(s, "b" * 64).revoked_at != ""  # ... and the browser session with it
        q.add_web_session(s, "boss", "e" * 64, "2099-01-01T00:00:00+00:00")
        assert q.revoke_web_sessions(s, "boss") == 1 and q.revoke_web_sessions(s, "boss") == 0


def test_run_scoring_is_kept_as_first_recorded_and_reference_changes_are_counted(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    with any_study.session() as s:
        cohort = q.get_cohort(s, "dev")
        run = add_edema_run(s, cohort.id)
        q.put_run_scoring(s, run.id, "2026-01-01T00:00:00+00:00", {"edema": [1, 0, 0, 7]})
        q.put_run_scoring(s, run.id, "2026-06-01T00:00:00+00:00", {"edema": [0, 1, 1, 6]})  # the first one stays
        assert q.run_scorings(s, [run.id]) == {run.id: ("2026-01-01T00:00:00+00:00", {"edema": [1, 0, 0, 7]})}
        assert q.run_scorings(s, []) == {}
        assert q.reference_changes_since(s, cohort.id, "2026-01-01T00:00:00+00:00") == {
            "adjudications": 0,
            "readings": 0,
        }
        q.ensure_readers(s, ["senior"])
        q.add_adjudication(s, "s1", "edema", 1, "senior", "clear on the film")
        assert q.reference_changes_since(s, cohort.id, "2026-01-01T00:00:00+00:00")["adjudications"] == 1
        assert q.reference_changes_since(s, cohort.id, "2999-01-01T00:00:00+00:00")["adjudications"] == 0


def small_cohort(s, ids=("a", "b", "c")):
    """A cohort "dev" with reports `ids` (seq in that order); its id."""
    cohort, _ = q.get_or_create_cohort(s, "dev", "en")
    n = len(ids)
    q.insert_reports(
        s,
        cohort.id,
        pd.DataFrame(
            {
                "report_id": list(ids),
                "text": [""] * n,
                "findings": ["x"] * n,
                "impression": [""] * n,
                "language": ["en"] * n,
                "text_hash": [f"h-{i}" for i in ids],
            }
        ),
        0,
    )
    return cohort.id


def test_batch_jobs(any_study):
    with any_study.session() as s:
        cid = small_cohort(s)
        run = add_edema_run(s, cid)
        assert q.pending_batch_job(s, f"run:{run.id}") is None and q.batch_jobs(s, run.id).empty
        common = dict(scope=f"run:{run.id}", run_id=run.id, model="m", api_base="http://x", keys_sha="0" * 64)
        q.add_batch_job(s, batch_id="b1", input_file_id="in1", status="in_progress", requests=3, **common)
        q.add_batch_job(s, batch_id="b2", input_file_id="in2", status="validating", requests=2, **common)
        q.add_batch_job(
            s,
            scope="calls:abc",
            run_id=None,
            batch_id="b3",
            input_file_id="in3",
            status="completed",
            model="m",
            api_base="http://x",
            keys_sha="1" * 64,
        )
    with any_study.session() as s:
        pending = q.pending_batch_job(s, f"run:{run.id}")
        assert pending["batch_id"] == "b2" and pending["input_file_id"] == "in2" and pending["requests"] == 2  # newest
        assert q.pending_batch_job(s, "calls:abc")["batch_id"] == "b3" and q.pending_batch_job(s, "calls:zzz") is None
        q.update_batch_job(s, "b2", status="failed")
        assert q.pending_batch_job(s, f"run:{run.id}")["batch_id"] == "b1"  # an ended job is never picked up again
        q.update_batch_job(s, "b1", status="completed", output_file_id="out1")
        assert q.pending_batch_job(s, f"run:{run.id}")["output_file_id"] == "out1"
        q.update_batch_job(s, "b1", status="collected")
        assert q.pending_batch_job(s, f"run:{run.id}") is None
        for status in ("expired", "cancelled"):
            q.update_batch_job(s, "b3", status=status)
            assert q.pending_batch_job(s, "calls:abc") is None
        jobs = q.batch_jobs(s, run.id)
        assert jobs["batch_id"].tolist() == ["b1", "b2"] and jobs["status"].tolist() == ["collected", "failed"]
        assert jobs["output_file_id"].iloc[0] == "out1" and jobs["requests"].tolist() == [3, 2]
        assert (jobs["updated_at"] >= jobs["created_at"]).all() and q.batch_jobs(s, run.id + 1).empty


def test_reading_save_log_and_delete_reading(any_study):
    with any_study.session() as s:
        small_cohort(s)
        assert q.last_reading_save(s, "dr") is None
        q.add_reading_save(s, "dr", "a", {"edema": None}, {"edema": 1}, None, {"edema": 1})
        q.add_reading_save(s, "dr", "b", {"edema": 0}, {"edema": 2}, {"comment": "c", "unsure": True}, None)
        q.add_reading_save(s, "other", "a", {}, {}, None, None)
    with any_study.session() as s:
        last = q.last_reading_save(s, "dr")
        assert last.report_id == "b" and json.loads(last.before_json) == {"edema": 0}
        assert json.loads(last.after_json) == {"edema": 2} and json.loads(last.note_before_json) == {
            "comment": "c",
            "unsure": True,
        }
        assert json.loads(last.draft_before_json) is None and last.undone_at == ""
        first_id, last_id = q.last_reading_save(s, "dr").id, last.id
        assert q.mark_reading_save_undone(s, last_id) is True
        assert q.mark_reading_save_undone(s, last_id) is False  # undone once only
    with any_study.session() as s:
        prior = q.last_reading_save(s, "dr")
        assert prior.report_id == "a" and prior.id < first_id and json.loads(prior.draft_before_json) == {"edema": 1}
        q.add_reading_save(s, "dr", "a", {"edema": 1}, {"edema": 3}, None, None)
    with any_study.session() as s:
        newest = q.last_reading_save(s, "dr")
        assert newest.report_id == "a" and newest.id > prior.id
        assert q.mark_reading_save_undone(s, newest.id)
        q.restamp_last_reading_save(s, "dr", "a", {"edema": 4})  # the undo gave the earlier save's values new versions
        q.restamp_last_reading_save(s, "dr", "c", {"edema": 9})  # no save of c: nothing happens
    with any_study.session() as s:
        again = q.last_reading_save(s, "dr")
        assert again.id == prior.id and json.loads(again.after_json) == {"edema": 4}
        assert q.last_reading_save(s, "other").report_id == "a"
        q.ensure_readers(s, ["dr"])
        q.insert_readings(
            s, pd.DataFrame({"report_id": ["a", "b"], "label": ["edema"] * 2, "reader": ["dr"] * 2, "value": [1, 0]})
        )
        reading = q.get_reading(s, "a", "edema", "dr")
        assert q.delete_reading(s, reading.id, expected_version=2) is False  # changed since: kept
        assert q.get_reading(s, "a", "edema", "dr") is not None
        assert q.delete_reading(s, reading.id, expected_version=1) is True
        assert q.delete_reading(s, reading.id, expected_version=1) is False  # already gone
    with any_study.session() as s:
        assert q.get_reading(s, "a", "edema", "dr") is None and q.get_reading(s, "b", "edema", "dr") is not None


def test_reading_notes(any_study):
    with any_study.session() as s:
        small_cohort(s)
        assert q.get_reading_note(s, "dr", "a") is None and q.reading_notes_frame(s).empty
        q.put_reading_note(s, "dr", "a", {"comment": "faint line", "unsure": True})
        q.put_reading_note(s, "dr", "a", {"comment": "no, a fold", "unsure": 0})  # replaced, not a second row
        q.put_reading_note(s, "ann", "b", {"comment": "", "unsure": True})
        q.put_reading_note(s, "dr", "c", {"comment": "gone soon", "unsure": False})
        q.put_reading_note(s, "dr", "c", None)  # dropped
        q.put_reading_note(s, "dr", "b", None)  # none to drop: nothing happens
    with any_study.session() as s:
        assert q.get_reading_note(s, "dr", "a") == {"comment": "no, a fold", "unsure": False}
        assert q.get_reading_note(s, "ann", "b") == {"comment": "", "unsure": True}
        assert q.get_reading_note(s, "dr", "c") is None and q.get_reading_note(s, "ann", "a") is None
        notes = q.reading_notes_frame(s)
        assert notes[["report_id", "reader", "comment", "unsure"]].values.tolist() == [
            ["a", "dr", "no, a fold", False],
            ["b", "ann", "", True],
        ]
        assert notes["updated_at"].str.len().gt(0).all()
        assert q.reading_notes_frame(s, reader="ann")["report_id"].tolist() == ["b"]
        assert q.reading_notes_frame(s, report_ids_=["a", "zz"])["reader"].tolist() == ["dr"]
        assert q.reading_notes_frame(s, report_ids_=["b"], reader="dr").empty


def test_adaptive_facts_claims_and_sample_readings(any_study):
    with any_study.session(write=True) as s:
        cid = small_cohort(s, ("x1", "x2", "x3"))
        assert q.cohort_id_named(s, "dev") == cid and q.cohort_id_named(s, "nope") is None
        other, _ = q.get_or_create_cohort(s, "held", "en")
        assert q.cohort_id_named(s, "held") == other.id != cid
        assert q.adaptive_facts(s, cid, "dr") == {
            "sample": None,
            "progress": None,
            "reports": 3,
            "work_list": False,
            "open_claim": False,
        }
        assert q.adaptive_facts(s, other.id, "dr")["reports"] == 0
        q.set_meta(s, f"adaptive_sample:{cid}", '{"seed": 0}')
        q.set_meta(s, f"adaptive_progress:{cid}", "sig")
        q.put_work_list(s, cid, 2, "boss")
        s.flush()  # an ORM add; adaptive_facts reads on the DBAPI cursor
        q.put_report_progress(
            s,
            cid,
            pd.DataFrame(
                {
                    "report_id": ["x1", "x2", "x3"],
                    "open": [True, True, False],
                    "tie": [False] * 3,
                    "readers": [0, 0, 0],
                    "cap": [2, 2, 2],
                }
            ),
            replace=True,
        )
        stamp = q.now()
        assert q.own_claim(s, cid, "dr", stamp) is None  # no claim
        q.put_claims(s, cid, [("x3", "dr"), ("x2", "dr")], done=False, expires_at="9999")
        facts = q.adaptive_facts(s, cid, "dr")
        assert facts == {
            "sample": '{"seed": 0}',
            "progress": "sig",
            "reports": 3,
            "work_list": True,
            "open_claim": True,
        }
        assert q.adaptive_facts(s, cid, "ann")["open_claim"] is False
        assert q.own_claim(s, cid, "dr", stamp) == "x2"  # x3 is closed
        assert q.own_claim(s, cid, "dr", stamp, "x2") == "x2" and q.own_claim(s, cid, "dr", stamp, "x3") is None
        assert q.own_claim(s, cid, "ann", stamp) is None
        q.put_claims(s, cid, [("x2", "dr")], done=True)  # read: no longer an unread claim
        assert q.own_claim(s, cid, "dr", stamp) is None
        q.put_claims(s, cid, [("x1", "dr")], done=False, expires_at="9999")
        assert q.own_claim(s, cid, "dr", stamp) == "x1"
        q.put_report_progress(
            s, cid, pd.DataFrame({"report_id": ["x1"], "open": [True], "tie": [False], "readers": [2], "cap": [2]})
        )
        assert q.own_claim(s, cid, "dr", stamp) is None  # no room left
        assert q.count_sample_readings(s, cid) == 0
        q.put_agreement_sample(s, cid, ["x1", "x2"], 0, 0.5, None, "boss")
        assert q.count_sample_readings(s, cid) == 0
        q.ensure_readers(s, ["dr", "ann"])
        q.insert_readings(
            s,
            pd.DataFrame(
                {
                    "report_id": ["x1", "x1", "x2", "x3"],
                    "label": ["edema", "fracture", "edema", "edema"],
                    "reader": ["dr", "dr", "ann", "dr"],
                    "value": [1, 0, 1, 1],
                }
            ),
        )
        assert q.count_sample_readings(s, cid) == 3  # x3 is outside the sample
        assert q.count_sample_readings(s, other.id) == 0
        q.delete_agreement_sample(s, other.id)  # another cohort's: nothing happens
        assert q.agreement_sample_ids(s, cid) == {"x1", "x2"}
        q.delete_agreement_sample(s, cid)
        assert q.agreement_sample_ids(s, cid) == set() and q.count_sample_readings(s, cid) == 0
        assert len(q.readings_frame(s, cohort_id=cid)) == 4  # the readings themselves stay


def test_keyboard_presses_are_claimed_once_answered_and_pruned(any_study):
    with any_study.session() as s:
        assert q.claim_press(s, "page-1", "wb.kbd.annotate", 1, "dr", "2026-12-06T05:00:00.000000+00:00") is None
    with any_study.session() as s:  # the same press again (a resend reaching another process): the first record
        again = q.claim_press(s, "page-1", "wb.kbd.annotate", 1, "dr", "2026-12-06T05:00:01.000000+00:00")
        assert (again.seq, again.done, again.at) == (1, False, "2026-12-06T05:00:00.000000+00:00")
        assert q.claim_press(s, "page-1", "wb.kbd.annotate", 2, "dr", "2026-12-06T05:00:02.000000+00:00") is None
        q.finish_press(s, "page-1", "wb.kbd.annotate", 1, "Not saved: refused")
    with any_study.session() as s:
        done = q.claim_press(s, "page-1", "wb.kbd.annotate", 1, "dr", "2026-12-06T05:00:03.000000+00:00")
        assert (done.done, done.error) == (True, "Not saved: refused")
        q.prune_presses(s, "2026-12-06T05:00:01.500000+00:00")
    with any_study.session() as s:  # seq 1 is forgotten: a press claimed anew
        assert q.claim_press(s, "page-1", "wb.kbd.annotate", 1, "dr", "2026-12-06T05:00:04.000000+00:00") is None
        assert q.claim_press(s, "page-1", "wb.kbd.annotate", 2, "dr", "2026-12-06T05:00:05.000000+00:00") is not None
