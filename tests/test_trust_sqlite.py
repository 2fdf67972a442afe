"""Issue 34 item 8: SQLite with sign-in under load. A signed-in user's write is not refused at once because its
account check read the database first, and a "database is locked" message tells the truth about the wait.

The interleaving is made deterministic with a second real SQLite connection that commits between a read and
a write; the load figures are in bench/bench_concurrency.py (--signin), never in a timed test."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from workbench.services import Actor
from workbench.store import db


def commit_elsewhere(wb) -> None:
    """Another process's write, committed now through its own connection."""
    other = sqlite3.connect(wb.root / "workbench.db", timeout=30)
    try:
        other.execute(
            "INSERT INTO meta (key, value) VALUES ('other-writer', 'x') ON CONFLICT(key) DO UPDATE SET value = value || 'x'"
        )
        other.commit()
    finally:
        other.close()


def test_a_signed_in_write_is_not_refused_because_its_account_check_read_first(small_study):
    wb = small_study
    wb.add_user("boss", "admin", "boss-pass-0001")
    wb.add_user("dr-a", "reader", "dr-a-pass-0001")
    signed_in = wb.as_actor(Actor(user="dr-a", role="reader", account=True))
    with signed_in.session() as s:  # the account check ran on entering
        commit_elsewhere(wb)  # another writer commits before this transaction's first write
        s.execute(text("INSERT INTO meta (key, value) VALUES ('mine', '1')"))
    with wb.session() as s:
        assert s.execute(text("SELECT value FROM meta WHERE key = 'mine'")).scalar() == "1"


def test_a_lock_error_says_how_long_it_really_waited(small_study):
    from workbench.cli import _storage_error

    wb = small_study
    with pytest.raises(OperationalError) as info, db.session_scope(wb.engine) as s:
        s.execute(text("SELECT COUNT(*) FROM meta")).scalar()  # a read: this transaction's snapshot
        commit_elsewhere(wb)
        s.execute(text("INSERT INTO meta (key, value) VALUES ('late', '1')"))  # refused at once by SQLite
    assert "locked" in str(info.value)
    message = _storage_error(info.value)
    assert f"stayed busy for {db.busy_timeout_s():g} s" not in message
    assert "SQLite gave up after" in message and "need PostgreSQL" in message, message
    waited = float(message.split("gave up after ")[1].split(" s")[0])
    assert waited < db.busy_timeout_s()
