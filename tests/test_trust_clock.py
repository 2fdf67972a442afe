"""Issue 34 item 12: a run's executor lease and the expiry of tokens and browser sessions follow the database's
clock, not the client's: a client whose clock runs ahead neither takes over a live run nor mints a token valid for
years, and one whose clock runs behind neither keeps an expired token alive nor writes a lease that is already over.

The client's clock is skewed in this process (time.time, and the datetime the team service reads: the clock is an
outside system, so the seam is the clock function) while the database's stays true, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import with_sign_in

from workbench.services import team
from workbench.services.runs import RunLease
from workbench.services.study import PermissionDenied
from workbench.store import queries as q
from workbench.study import StudyError

DATA = Path(__file__).resolve().parent / "data"
AHEAD, BEHIND = 120.0, -120.0  # seconds: twice the 60 s a lease lives


def skew_time(monkeypatch, seconds: float) -> None:
    """time.time() of this process runs `seconds` off the true clock (the database's stays true)."""
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)


def skew_datetime(monkeypatch, delta: timedelta) -> None:
    """datetime.now() as the team service reads it runs `delta` off the true clock."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + delta

    monkeypatch.setattr(team, "datetime", Skewed)


def db_now(wb) -> float:
    with wb.session() as s:
        return q.db_epoch(s)


@pytest.fixture
def run_study(any_study):
    """A study on SQLite or PostgreSQL with one finished offline run: (workbench, run id)."""
    any_study.import_reports(DATA / "reports_small.csv", "dev")
    return any_study, any_study.start_run("dev", labels=["edema"]).run_id


def test_the_database_clock_is_the_true_one_whatever_the_clients_says(run_study, monkeypatch):
    wb, _ = run_study
    skew_time(monkeypatch, 3600 * 24 * 365)
    assert abs(db_now(wb) - datetime.now(UTC).timestamp()) < 5


def test_a_client_whose_clock_runs_ahead_does_not_take_over_a_live_run(run_study, monkeypatch):
    wb, run_id = run_study
    RunLease(wb, run_id, ttl_s=60).take()  # the live executor, on a true clock
    skew_time(monkeypatch, AHEAD)
    with pytest.raises(StudyError, match=f"run {run_id} is already being executed by"):
        RunLease(wb, run_id, ttl_s=60).take()


def test_a_client_whose_clock_runs_ahead_does_not_call_a_live_run_abandoned(run_study, monkeypatch):
    wb, run_id = run_study
    with wb.session() as s:
        q.update_run(s, run_id, status="running")
        assert q.take_run_lease(s, run_id, "elsewhere:4242:abcd", q.db_epoch(s) + 60, q.db_epoch(s))
    skew_time(monkeypatch, AHEAD)
    assert wb.runs.settle_abandoned_runs() == []
    assert wb.run_info(run_id).status == "running"


def test_a_client_whose_clock_runs_behind_writes_a_lease_that_lives_its_full_time(run_study, monkeypatch):
    wb, run_id = run_study
    skew_time(monkeypatch, BEHIND)
    lease = RunLease(wb, run_id, ttl_s=60)
    lease.take()
    with wb.session() as s:
        left = q.get_run(s, run_id).lease_expires_at - q.db_epoch(s)
    assert 50 < left <= 60  # by the database's clock; the client's would have written one already over


@pytest.fixture
def accounts(any_study):
    """A local-auth study on SQLite or PostgreSQL with a reader: (workbench, the reader signed in)."""
    wb = any_study
    with_sign_in(wb)
    return wb, wb.as_actor(wb.authenticate("rdr", "reader-pass-0001"))


def token_expiry(wb) -> datetime:
    with wb.session() as s:
        ((_, _, expires),) = q.user_tokens(s, "rdr")
    return datetime.fromisoformat(expires)


def test_a_token_made_under_a_clock_years_ahead_lives_its_days_by_the_database_clock(accounts, monkeypatch):
    wb, rdr = accounts
    skew_datetime(monkeypatch, timedelta(days=3650))
    token = rdr.create_token("rdr", days=7)
    days = (token_expiry(wb).timestamp() - db_now(wb)) / 86400
    assert 6.9 < days <= 7  # not ten years and seven days
    assert wb.authenticate_token("rdr", token).user == "rdr"


def test_an_expired_token_stays_expired_under_a_clock_running_behind(accounts, monkeypatch):
    from sqlalchemy import text

    wb, rdr = accounts
    token = rdr.create_token("rdr", days=7)
    past = datetime.fromtimestamp(db_now(wb) - 60, UTC).isoformat(timespec="seconds")
    with wb.session() as s:
        s.execute(text("UPDATE usertoken SET expires_at = :e"), {"e": past})
    skew_datetime(monkeypatch, timedelta(days=-365))
    with pytest.raises(PermissionDenied, match="expired"):
        wb.authenticate_token("rdr", token)


def test_a_browser_session_expires_by_the_database_clock(accounts, monkeypatch):
    from sqlalchemy import text

    wb, rdr = accounts
    skew_datetime(monkeypatch, timedelta(days=3650))
    cookie = rdr.start_web_session(hours=1)
    with wb.session() as s:
        sessions = s.execute(text("SELECT expires_at FROM websession")).scalars().all()
    left = datetime.fromisoformat(sessions[0]).timestamp() - db_now(wb)
    assert 3500 < left <= 3600
    assert wb.resume_web_session(cookie).user == "rdr"


# ---------------------------------------------------------------- reading claims (adaptive reading)


def skew_reading_clock(monkeypatch, delta: timedelta) -> None:
    """datetime.now() as the store reads it (q.now(), the clock claims were stamped by) runs `delta` off the
    true clock."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + delta

    monkeypatch.setattr(q, "datetime", Skewed)
    from workbench.services import adaptive  # where claim expiries were computed before they were the database's

    monkeypatch.setattr(adaptive, "datetime", Skewed, raising=False)


@pytest.fixture
def claims_study(any_study, tmp_path):
    """Adaptive reading on, no agreement sample: a report given to one reader is given to nobody else meanwhile."""
    import pandas as pd

    path = tmp_path / "reports.csv"
    pd.DataFrame(
        {"id": [f"c{i}" for i in range(8)], "findings": [f"Report {i}: lungs clear." for i in range(8)]}
    ).to_csv(path, index=False)
    any_study.import_reports(path, "dev")
    any_study.set_adaptive(enabled=True, agreement_share=0.0)
    return any_study


@pytest.mark.parametrize("taker_ahead", [True, False])
def test_a_skewed_reader_clock_neither_takes_over_nor_gives_away_a_live_claim(claims_study, monkeypatch, taker_ahead):
    """A reading claim lives 30 minutes by the database's clock: a second reader whose clock runs two hours ahead
    is not given the first reader's report, and a first reader whose clock runs two hours behind does not write a
    claim that is already over."""
    wb = claims_study
    readers = ["rad1", "rad2", "rad3"]
    skew = timedelta(hours=2)
    if not taker_ahead:
        skew_reading_clock(monkeypatch, -skew)  # the claim is written by a clock behind
    held = wb.next_report(readers[0], "dev")
    monkeypatch.undo()
    if taker_ahead:
        skew_reading_clock(monkeypatch, skew)  # the next reader asks with a clock ahead
    assert wb.adaptive.open_report(readers[1], "dev", held) is False, "another reader took a live claim"
    assert held not in [wb.next_report(r, "dev") for r in readers[1:]]
