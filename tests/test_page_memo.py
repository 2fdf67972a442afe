"""The process-wide memos behind the pages (services/memo.py), on SQLite and PostgreSQL: readings saved
anywhere (another Workbench, another process, even with a stamp in the past) change the reference and
the reading counts, and a run's predictions are kept only once it has finished."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import text

from workbench.services import Workbench, memo
from workbench.store import queries as q

DATA = Path(__file__).parent / "data"


@pytest.fixture
def dev(any_study):
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    any_study.import_readings(DATA / "readings_small.csv")
    return any_study


def _from_every_reading(wb, cohort: str = "dev") -> pd.DataFrame:
    """The reference computed the other way: from every reading row, no aggregate and no memo."""
    with wb.session() as s:
        readings = q.readings_frame(s, cohort_id=wb.cohort_id(cohort))
    return wb.reference(cohort, readings=readings)


def _item(reference: pd.DataFrame, report: str, label: str) -> pd.Series:
    return reference.set_index(["report_id", "label"]).loc[(report, label)]


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    cols = ["report_id", "label", "positives", "n_readers", "value", "status"]
    pd.testing.assert_frame_equal(
        a[cols].sort_values(cols[:2]).reset_index(drop=True),
        b[cols].sort_values(cols[:2]).reset_index(drop=True),
        check_dtype=False,
    )


def test_reference_follows_a_reading_saved_by_another_workbench(dev):
    before = dev.reference("dev")
    item = _item(before, "s1", "atelectasis")
    other = Workbench(dev.root)  # its own engine: as another server or the CLI would be
    values = dict(zip(*other.my_readings("reader-a", "s1")[["label", "value"]].T.to_numpy(), strict=False))
    values["atelectasis"] = 1 - int(values["atelectasis"])
    other.record_reading("reader-a", "s1", {k: int(v) for k, v in values.items()})
    other.engine.dispose()
    after = dev.reference("dev")
    assert _item(after, "s1", "atelectasis")["positives"] == item["positives"] + (1 if values["atelectasis"] else -1)
    _same(after, _from_every_reading(dev))


def test_a_new_reader_counts_in_the_reference_and_the_progress(dev):
    dev.reference("dev"), dev.reader_progress("dev")  # the memos are warm
    dev.record_reading("reader-new", "s2", {lab: 1 for lab in dev.vocab.asked_ids})
    _same(dev.reference("dev"), _from_every_reading(dev))
    progress = dev.reader_progress("dev").set_index("reader")
    assert progress.loc["reader-new", "reports_started"] == 1 and progress.loc["reader-new", "reports_complete"] == 1


def test_a_reading_stamped_long_before_the_last_look_is_still_counted(dev, monkeypatch):
    """An insert whose stamp is older than the refresh window: the totals do not add up, so all is counted again."""
    with dev.session(write=True) as s:
        s.execute(text("UPDATE reading SET updated_at = '2020-01-01T00:00:00.000000+00:00'"))
    dev.record_reading("reader-b", "s2", {lab: 0 for lab in dev.vocab.asked_ids})
    dev.reference("dev")
    whole = []
    real = q.vote_counts
    monkeypatch.setattr(q, "vote_counts", lambda *a, **k: whole.append(1) or real(*a, **k))
    with dev.session(write=True) as s:
        q.ensure_readers(s, ["reader-late"])
        s.execute(
            text(
                "INSERT INTO reading (report_id, label, reader_id, value, version, created_at, updated_at) "
                "VALUES ('s3', 'atelectasis', 'reader-late', 1, 1, :t, :t)"
            ),
            {"t": "2000-01-01T00:00:00.000000+00:00"},
        )
    after = dev.reference("dev")
    assert whole == [1]
    assert _item(after, "s3", "atelectasis")["n_readers"] == 7
    _same(after, _from_every_reading(dev))


def test_a_changed_value_is_found_through_its_stamp_alone(dev, monkeypatch):
    """The refresh asks only for the reports whose readings changed lately (the last look's window), not all."""
    with dev.session(write=True) as s:  # the fixture's readings were saved long ago, not seconds before this look
        s.execute(text("UPDATE reading SET updated_at = '2020-01-01T00:00:00.000000+00:00'"))
    values = {lab: 0 for lab in dev.vocab.asked_ids}
    dev.record_reading("reader-b", "s2", values)
    dev.reference("dev")
    asked = []
    real = q.vote_counts_of
    monkeypatch.setattr(q, "vote_counts_of", lambda s, ids: asked.append(sorted(ids)) or real(s, ids))
    monkeypatch.setattr(q, "vote_counts", lambda *a, **k: pytest.fail("aggregated every reading again"))
    values["edema"] = 1
    dev.record_reading("reader-b", "s4", values)
    _same(dev.reference("dev"), _from_every_reading(dev))
    assert asked == [["s2", "s4"]]  # s2: saved within the window a commit may lag behind its stamp


def test_predictions_are_kept_only_once_a_run_has_finished(dev):
    run_id = dev.start_run(cohort="dev").run_id
    first = dev.predictions(run_id)
    with dev.session(write=True) as s:  # a resumed run is 'running' again, without a finish time
        q.update_run(s, run_id, status="running", finished_at=None)
        s.execute(
            text("UPDATE prediction SET value = 1 - value WHERE run_id = :r AND value IS NOT NULL"), {"r": run_id}
        )
    flipped = dev.predictions(run_id)
    assert (flipped["value"].dropna() == 1 - first["value"].dropna()).all()
    with dev.session(write=True) as s:
        q.update_run(s, run_id, status="finished", finished_at=q.now())
    pd.testing.assert_frame_equal(dev.predictions(run_id), flipped)
    matrix = dev.prediction_matrix(run_id)
    assert (
        matrix.loc["s1", "atelectasis"] == flipped.set_index(["report_id", "label"]).loc[("s1", "atelectasis"), "value"]
    )
    frame = dev.predictions(run_id)
    frame["value"] = -5  # a caller changing its copy changes nothing kept
    assert (dev.predictions(run_id)["value"].dropna() != -5).all()


def test_memo_is_bounded():
    kept = memo.Memo(2)
    for i in range(3):
        kept.put(i, i)
    assert kept.get(0) is None and kept.get(1) == 1 and kept.get(2) == 2


def test_metrics_follow_a_reading_that_changes_a_reference_value(dev):
    """Metrics are kept by the content they were computed from: a save that flips a reference value changes them."""
    run_id = dev.start_run(cohort="dev").run_id
    before = dev.evaluate_run(run_id, n_resamples=50)
    ref = dev.reference("dev")
    item = ref[(ref["status"] == "decided") & (ref["label"] == "atelectasis")].iloc[0]
    flip = 1 - int(item["value"])
    readers = dev.my_readings  # every reader of that report votes the other way: the reference value flips
    with dev.session() as s:
        names = q.readings_frame(s, report_ids_=[item["report_id"]])["reader"].unique()
    for reader in names:
        values = dict(zip(*readers(reader, item["report_id"])[["label", "value"]].T.to_numpy(), strict=False))
        values["atelectasis"] = flip
        dev.record_reading(reader, item["report_id"], {k: int(v) for k, v in values.items()})
    assert _item(dev.reference("dev"), item["report_id"], "atelectasis")["value"] == flip
    after = dev.evaluate_run(run_id, n_resamples=50)
    support = lambda ev: int(ev.table.loc["atelectasis", "support"])  # noqa: E731
    assert support(after) == support(before) + (1 if flip else -1)
    fresh_table = dev.evaluate_run(run_id, n_resamples=50).table
    fresh_table["f1"] = -1.0  # a caller changing its copy changes nothing kept
    pd.testing.assert_frame_equal(dev.evaluate_run(run_id, n_resamples=50).table, after.table)
