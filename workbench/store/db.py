"""Database engines and schema migrations for a study (SQLite by default, PostgreSQL by URL).

Migrations are an ordered list of steps from the first day, so a study created today still opens
after tomorrow's schema change: a new database gets the current tables and the latest version
number; an older one runs every step after its recorded version, in one transaction each.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError
from sqlmodel import Session, SQLModel, create_engine

from workbench.store import tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from workbench.store.queries import audit_event_hash


def _add_column(table: str, column: str, ddl: str) -> Callable[[Connection], None]:
    """A migration step adding a column when it is missing."""

    def step(conn: Connection) -> None:
        cols = {c["name"] for c in inspect(conn).get_columns(table)}
        if column not in cols:
            conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))

    return step


def _seal_audit(conn: Connection) -> None:
    """Add the audit chain columns and chain the events recorded before them (oldest first)."""
    _add_column("auditevent", "prev_hash", "VARCHAR(64) NOT NULL DEFAULT ''")(conn)
    _add_column("auditevent", "hash", "VARCHAR(64) NOT NULL DEFAULT ''")(conn)

    prev, last = "", None
    for row in conn.execute(
        text("SELECT id, at, actor, action, entity, entity_key, old_json, new_json FROM auditevent ORDER BY id")
    ):
        digest = audit_event_hash(tuple(row), prev)
        conn.execute(
            text("UPDATE auditevent SET prev_hash = :p, hash = :h WHERE id = :i"), {"p": prev, "h": digest, "i": row[0]}
        )
        prev, last = digest, row[0]
    if last is not None:
        conn.execute(text("DELETE FROM meta WHERE key = 'audit_head'"))
        conn.execute(text("INSERT INTO meta (key, value) VALUES ('audit_head', :v)"), {"v": f"{last} {prev}"})


def _add_user_disabled(conn: Connection) -> None:
    """users.disabled ("user" is a reserved word in PostgreSQL: quoted)."""
    cols = {c["name"] for c in inspect(conn).get_columns("user")}
    if "disabled" not in cols:
        conn.execute(text('ALTER TABLE "user" ADD COLUMN disabled BOOLEAN NOT NULL DEFAULT FALSE'))


def _drop_index(name: str) -> Callable[[Connection], None]:
    """A migration step dropping an index when it is there (same statement on SQLite and PostgreSQL)."""

    def step(conn: Connection) -> None:
        conn.execute(text(f"DROP INDEX IF EXISTS {name}"))

    return step


# (version, description, step); append only. Version 1 is the schema as first created.
def _steps(*steps: Callable[[Connection], None]) -> Callable[[Connection], None]:
    """Several steps as one migration step (run in its one transaction)."""

    def step(conn: Connection) -> None:
        for one in steps:
            one(conn)

    return step


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None] | None]] = [
    (1, "initial schema", None),
    (
        10,
        "run lease: one executor at a time",
        _steps(_add_column("run", "lease_holder", "VARCHAR(200)"), _add_column("run", "lease_expires_at", "FLOAT")),
    ),
    (20, "audit events chained by hash", _seal_audit),
    (21, "accounts can be disabled", _add_user_disabled),
    (
        40,
        "cohort roles (development, validation, test, external); split members and test looks (new tables)",
        _add_column("cohort", "role", "VARCHAR(20) NOT NULL DEFAULT 'development'"),
    ),
    (
        60,
        "readings indexed by when they changed (pages refresh the reference for those reports only)",
        lambda conn: conn.execute(text("CREATE INDEX IF NOT EXISTS ix_reading_updated_at ON reading (updated_at)")),
    ),
    (
        70,
        "predictions lose two indexes nothing reads (run_id is uq_prediction's first column; call_key is never "
        "searched): a 43,000-answer run writes a quarter less",
        _steps(_drop_index("ix_prediction_run_id"), _drop_index("ix_prediction_call_key")),
    ),
    (85, "command-line tokens expire", _add_column("usertoken", "expires_at", "VARCHAR(40) NOT NULL DEFAULT ''")),
    (100, "adaptive reading: agreement samples, report progress and reading claims (new tables)", None),
    (
        115,
        "per-call facts keep a failed call's raw reply (a success's is in the call cache)",
        _add_column("callfact", "reply", "TEXT"),
    ),
    (131, "label sets: candidates mined from a cohort and their reviewers' votes (new tables)", None),
    (137, "keyboard presses applied once per browser page, across reconnects and server processes (new table)", None),
    (140, "per-call facts record the address each call connected to", _add_column("callfact", "peer", "VARCHAR(60)")),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


BUSY_TIMEOUT_S = 30.0  # a writer waits this long for SQLite's write lock ($WORKBENCH_DB_WAIT_S), then fails
WAIT_NOTICE_S = 1.0  # a wait longer than this is said, so a command that waits is not taken for a hung one
_log = logging.getLogger("workbench.db")


def make_engine(url: str) -> Engine:
    """An engine with the settings this workbench relies on (WAL, foreign keys, busy timeout)."""
    if url.startswith("sqlite"):
        _create_private(url)
        # hide_parameters: SQL parameters hold report text; they must never reach an error message or log
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": busy_timeout_s()}, hide_parameters=True
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20, hide_parameters=True)


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database or an in-memory one)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url == "sqlite:///:memory:" or url.startswith("sqlite:///file:"):
        return None
    return Path(url[len(prefix) :])


def _create_private(url: str) -> None:
    """Create a new SQLite file readable by its owner only (0600): it holds report text and password
    hashes; SQLite gives its -wal and -shm files the same mode. An existing file is left as it is."""
    path = sqlite_file(url)
    if path is None or path.exists() or not path.parent.is_dir():
        return
    with contextlib.suppress(FileExistsError):  # another process made it first: its mode is its own
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def busy_timeout_s() -> float:
    """How long a SQLite writer waits for another's write lock before it gives up ($WORKBENCH_DB_WAIT_S, default 30 s)."""
    try:
        return max(0.1, float(os.environ.get("WORKBENCH_DB_WAIT_S", "") or BUSY_TIMEOUT_S))
    except ValueError:
        return BUSY_TIMEOUT_S


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    """Per-connection SQLite settings: foreign keys are off unless asked for on every connection."""
    dbapi_conn.isolation_level = None  # let SQLAlchemy emit BEGIN itself (see _sqlite_begin)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s() * 1000)}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _sqlite_begin(conn) -> None:
    """Writers take the write lock up front (BEGIN IMMEDIATE): two deferred transactions that both
    read and then write would otherwise fail with 'database is locked' instead of waiting."""
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("wb_write") else "BEGIN")


def schema_version(engine: Engine) -> int | None:
    """The recorded schema version, None for an empty database."""
    if not inspect(engine).has_table("meta"):
        return None
    with engine.connect() as conn:
        row = conn.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).first()
    return int(row[0]) if row else None


def migrate(engine: Engine) -> list[str]:
    """Bring the database to SCHEMA_VERSION; returns the steps applied."""
    current = schema_version(engine)
    if current is None:
        SQLModel.metadata.create_all(engine)
        _set_version(engine, SCHEMA_VERSION)
        return [f"created schema version {SCHEMA_VERSION}"]
    if current > SCHEMA_VERSION:
        raise RuntimeError(
            f"database schema version {current} is newer than this workbench ({SCHEMA_VERSION}): upgrade the workbench"
        )
    applied = []
    for version, description, step in MIGRATIONS:
        if version <= current:
            continue
        with engine.begin() as conn:
            if step is not None:
                step(conn)
            conn.execute(text("UPDATE meta SET value = :v WHERE key = 'schema_version'"), {"v": str(version)})
        applied.append(f"{version}: {description}")
    SQLModel.metadata.create_all(engine)  # new tables added by a step-less version
    return applied


def _set_version(engine: Engine, version: int) -> None:
    """Record the schema version."""
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM meta WHERE key = 'schema_version'"))
        conn.execute(text("INSERT INTO meta (key, value) VALUES ('schema_version', :v)"), {"v": str(version)})


@contextmanager
def _said_if_waiting(engine: Engine) -> Iterator[None]:
    """Say on stderr (the 'workbench.db' logger) when taking SQLite's write lock takes longer than a moment.

    A wait is a dict entry that one watcher thread per process looks at a few times a second: a
    timer thread per transaction would cost a paid run's every stored answer about half a millisecond."""
    if engine.dialect.name != "sqlite":
        yield
        return
    token = object()
    _WAITS[token] = time.monotonic()
    _start_watcher()
    try:
        yield
    finally:
        _WAITS.pop(token, None)


_WAITS: dict[object, float] = {}  # a transaction waiting for the write lock -> since when (monotonic)
_WATCHER_PID: int | None = None  # the process whose watcher thread runs (a forked worker starts its own)
_WATCHER_LOCK = threading.Lock()


def _start_watcher() -> None:
    """Start this process's wait watcher once."""
    global _WATCHER_PID
    if os.getpid() == _WATCHER_PID:
        return
    with _WATCHER_LOCK:
        if os.getpid() != _WATCHER_PID:
            threading.Thread(target=_watch_waits, name="workbench-db-wait", daemon=True).start()
            _WATCHER_PID = os.getpid()


def _watch_waits() -> None:
    """Log once per wait that has lasted WAIT_NOTICE_S."""
    said: set[int] = set()
    while True:
        time.sleep(0.25)
        now, waits = time.monotonic(), list(_WAITS.items())
        for token, since in waits:
            if now - since >= WAIT_NOTICE_S and id(token) not in said:
                said.add(id(token))
                _log.warning(
                    f"waiting for the database: another process is writing to it (giving up after "
                    f"{busy_timeout_s():g} s) ..."
                )
        said &= {id(token) for token, _ in waits}


@contextmanager
def session_scope(engine: Engine, write: bool = False) -> Iterator[Session]:
    """One transaction: commit on success, roll back everything on any error.

    write=True marks a read-then-write transaction: on SQLite it takes the write lock at BEGIN so
    concurrent writers queue (busy timeout) instead of failing half-way.
    """
    session = Session(engine, expire_on_commit=False)
    started = time.monotonic()
    try:
        if write:
            with _said_if_waiting(engine):
                session.connection(execution_options={"wb_write": True})
        yield session
        session.commit()
    except BaseException as exc:
        session.rollback()
        exc.workbench_waited_s = time.monotonic() - started  # what a "database is locked" message may claim
        raise
    finally:
        session.close()


def is_integrity_error(exc: BaseException) -> bool:
    """A unique-constraint violation from SQLAlchemy or straight from a DBAPI cursor (sqlite3, psycopg)."""
    return isinstance(exc, IntegrityError) or any(c.__name__ == "IntegrityError" for c in type(exc).__mro__)


def is_read_only_error(exc: BaseException) -> bool:
    """The database refused a write because it (or its folder) is read-only."""
    return isinstance(exc, OperationalError) and "readonly" in str(exc.orig).lower()


def storage_errors() -> tuple[type[BaseException], ...]:
    """Database and disk failures (SQLAlchemy imported only when one is raised: fast start)."""
    return (DBAPIError, SQLAlchemyError, OSError)
