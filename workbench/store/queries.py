"""Storage functions: verb_noun(session, ...) returning plain values or DataFrames.

They take the caller's session so a service can put several of them in one transaction (an
import is all or nothing). Bulk paths use SQLAlchemy Core inserts: 378,000 readings in seconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, Protocol

import pandas as pd
from sqlalchemy import delete, func, insert, or_, select, text, update
from sqlmodel import Session

from workbench.core.parsing import Answer
from workbench.store.tables import (
    Adjudication,
    AgreementSample,
    AppliedPress,
    AuditEvent,
    BatchJob,
    Cohort,
    CohortLook,
    ErrorNote,
    Extraction,
    Flag,
    LoginFailure,
    Meta,
    Optimisation,
    Prediction,
    PromptDraft,
    PromptVersionExamples,
    Proposal,
    Reader,
    Reading,
    ReadingDraft,
    ReadingNote,
    ReadingSave,
    Report,
    Run,
    RunScoring,
    SplitMember,
    User,
    UserToken,
    WebSession,
    WorkAssignment,
    WorkList,
)

CHUNK = 5000


def now() -> str:
    """UTC timestamp as an ISO string with microseconds (sortable, portable)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


# the database's own clock as epoch seconds: PostgreSQL's server clock; SQLite's is the machine the file is on
_DB_EPOCH = {
    "postgresql": "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
    "sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
}


def db_epoch(session: Session) -> float:
    """Epoch seconds by the database's clock, not this client's: leases and expiries compare times written by
    different machines, and a client whose clock is skewed must not take over a live run or mint a token for years.
    (A statement that reads no table: it opens no read transaction on SQLite.)"""
    dialect = session.get_bind().dialect.name
    return float(session.execute(text(_DB_EPOCH.get(dialect, _DB_EPOCH["postgresql"]))).scalar_one())


def db_time(session: Session) -> datetime:
    """The database's clock as an aware UTC datetime (see db_epoch)."""
    return datetime.fromtimestamp(db_epoch(session), UTC)


def db_stamp(session: Session, seconds: float = 0.0) -> str:
    """An ISO stamp `seconds` from now by the database's clock, in the format of now() (reading claims)."""
    return (db_time(session) + timedelta(seconds=seconds)).isoformat(timespec="microseconds")


class _Stored(Protocol):
    id: int | None


def stored_id(row: _Stored) -> int:
    """The id of a row read from the database or flushed to it (the table's `id: int | None` is None only
    before the first write): an int the typed queries take."""
    if row.id is None:
        raise ValueError(f"this {type(row).__name__} was never written: it has no id yet")
    return row.id


def _frame(session: Session, stmt, columns: list[str]) -> pd.DataFrame:
    """Run a select and return a DataFrame with the given columns."""
    rows = session.execute(stmt).all()
    return pd.DataFrame(rows, columns=columns)


def _raw_rows(session: Session, sql: str, params: tuple = ()) -> list[tuple]:
    """Run SQL on the DBAPI cursor: 5-10x faster than ORM rows for the 378,000-row hot paths."""
    conn = session.connection()
    style = conn.dialect.paramstyle
    if style in ("format", "pyformat"):
        sql = sql.replace("?", "%s")
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, params)
        return cursor.fetchall()
    finally:
        cursor.close()


def _raw_insert(
    session: Session, table: str, columns: list[str], rows: list[tuple], suffix: str = "", key: int = 0
) -> None:
    """executemany on the DBAPI cursor for bulk inserts (inside the session's transaction); COPY on PostgreSQL.

    ``suffix`` is appended to the statement (an ON CONFLICT clause; SQLite and PostgreSQL share it).
    ``key``: the first ``key`` columns are the conflict target of a DO UPDATE suffix (the last row
    of a key wins, as it does when rows are executed one by one)."""
    conn = session.connection()
    if conn.dialect.name == "postgresql" and len(rows) >= COPY_MIN_ROWS:
        _pg_copy_insert(conn.connection.cursor(), table, columns, rows, suffix, key)
        return
    mark = "%s" if conn.dialect.paramstyle in ("format", "pyformat") else "?"
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))}) {suffix}"
    cursor = conn.connection.cursor()
    try:
        for i in range(0, len(rows), 50000):
            cursor.executemany(sql, rows[i : i + 50000])
    finally:
        cursor.close()


COPY_MIN_ROWS = 200  # below this, a temporary table costs PostgreSQL more than executemany's pipeline


def _pg_copy_insert(cursor, table: str, columns: list[str], rows: list[tuple], suffix: str, key: int) -> None:
    """Bulk insert on PostgreSQL: COPY (5-10x faster than executemany), through a temporary table when the
    insert has an ON CONFLICT clause (COPY has none). Inside the caller's transaction: all or nothing."""
    cols = ", ".join(columns)
    try:
        if not suffix:
            with cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        if key:  # one INSERT may not update a row twice: keep each key's last row
            rows = list({row[:key]: row for row in rows}.values())
        staging = f"wb_copy_{table}"
        cursor.execute(f"CREATE TEMPORARY TABLE {staging} ON COMMIT DROP AS SELECT {cols} FROM {table} WITH NO DATA")
        with cursor.copy(f"COPY {staging} ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {staging} {suffix}")
        cursor.execute(f"DROP TABLE {staging}")
    finally:
        cursor.close()


def _bulk_insert(session: Session, table, rows: list[dict]) -> None:
    """Insert many rows in chunks through Core (fast executemany)."""
    for i in range(0, len(rows), CHUNK):
        session.execute(insert(table.__table__), rows[i : i + CHUNK])


# ---------------------------------------------------------------- audit


AUDIT_LOCK = 7_212_016  # PostgreSQL advisory lock id: one writer extends the audit chain at a time


def audit_event_hash(row: tuple, prev_hash: str) -> str:
    """sha256 of one event's canonical content (id, at, actor, action, entity, key, old, new) and the previous hash."""
    payload = json.dumps(
        [*(str(v) if i == 0 else (v or "") for i, v in enumerate(row)), prev_hash],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _event_row(event: AuditEvent) -> tuple:
    """The hashed fields of an event, in order."""
    return (
        event.id,
        event.at,
        event.actor,
        event.action,
        event.entity,
        event.entity_key,
        event.old_json,
        event.new_json,
    )


def _chain(session: Session, events: list[AuditEvent]) -> None:
    """Insert events at the end of the chain: each stores the previous event's hash and its own."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": AUDIT_LOCK})
    session.add_all(events)
    session.flush()  # ids; on SQLite this also takes the write lock, so the tail read next is the latest
    first = min(e.id for e in events)
    prev = (
        session.execute(
            select(AuditEvent.hash).where(AuditEvent.id < first).order_by(AuditEvent.id.desc()).limit(1)
        ).scalar()
        or ""
    )
    for event in sorted(events, key=lambda e: e.id):
        event.prev_hash = prev
        event.hash = prev = audit_event_hash(_event_row(event), prev)
    head = session.get(Meta, "audit_head")
    value = f"{max(e.id for e in events)} {prev}"
    if head is None:
        session.add(Meta(key="audit_head", value=value))
    else:
        head.value = value
    session.flush()


def _audit_event(actor: str, action: str, entity: str, key: str, old=None, new=None) -> AuditEvent:
    """An unsaved audit event."""
    return AuditEvent(
        at=now(),
        actor=actor or "local",
        action=action,
        entity=entity,
        entity_key=key,
        old_json="" if old is None else json.dumps(old, ensure_ascii=False, sort_keys=True, default=str),
        new_json="" if new is None else json.dumps(new, ensure_ascii=False, sort_keys=True, default=str),
    )


def add_audit(session: Session, actor: str, action: str, entity: str, key: str, old=None, new=None) -> None:
    """Append one audit event to the hash chain (never updated or deleted)."""
    _chain(session, [_audit_event(actor, action, entity, key, old, new)])


def add_audit_many(session: Session, events: list[dict]) -> None:
    """Append many audit events at once (bulk imports), chained like single ones."""
    if events:
        _chain(session, [AuditEvent(**e) for e in events])


def get_meta(session: Session, key: str) -> str | None:
    """A value of the database's own key/value table."""
    row = session.get(Meta, key)
    return None if row is None else row.value


def set_meta(session: Session, key: str, value: str) -> None:
    """Set a key/value fact about the database."""
    row = session.get(Meta, key)
    if row is None:
        session.add(Meta(key=key, value=value))
    else:
        row.value = value
        session.add(row)


class AuditCheck(NamedTuple):
    """The audit trail checked: whether it is intact, events read, the first broken event (when known) and why."""

    ok: bool
    events: int
    broken_at: int | None
    reason: str  # "" when intact


def verify_audit(session: Session) -> AuditCheck:
    """Walk the chain oldest first: an AuditCheck; the first broken link is reported."""
    prev, count, last_id = "", 0, None
    stmt = select(
        AuditEvent.id,
        AuditEvent.at,
        AuditEvent.actor,
        AuditEvent.action,
        AuditEvent.entity,
        AuditEvent.entity_key,
        AuditEvent.old_json,
        AuditEvent.new_json,
        AuditEvent.prev_hash,
        AuditEvent.hash,
    ).order_by(AuditEvent.id)
    for row in session.execute(stmt.execution_options(yield_per=5000)):
        count += 1
        if row.prev_hash != prev:
            return AuditCheck(
                False,
                count,
                row.id,
                f"event {row.id} does not follow event {last_id if last_id is not None else '(start)'}: "
                "an event before it was deleted or changed",
            )
        if audit_event_hash(tuple(row[:8]), prev) != row.hash:
            return AuditCheck(
                False,
                count,
                row.id,
                f"event {row.id} was changed after it was recorded (its content does not match its hash)",
            )
        prev, last_id = row.hash, row.id
    head = session.get(Meta, "audit_head")
    if head is not None and head.value != f"{last_id} {prev}":
        head_id = head.value.split(" ")[0]
        return AuditCheck(
            False,
            count,
            int(head_id) if head_id.isdigit() else None,
            f"the trail ends at event {last_id} but event {head_id} was recorded last: events were deleted from the end",
        )
    if head is None and count:
        return AuditCheck(False, count, None, "the record of the last event is missing")
    return AuditCheck(True, count, None, "")


def list_audit(session: Session, entity: str | None = None, key: str | None = None, limit: int = 1000) -> pd.DataFrame:
    """Audit events newest first."""
    stmt = select(
        AuditEvent.id,
        AuditEvent.at,
        AuditEvent.actor,
        AuditEvent.action,
        AuditEvent.entity,
        AuditEvent.entity_key,
        AuditEvent.old_json,
        AuditEvent.new_json,
    )
    if entity:
        stmt = stmt.where(AuditEvent.entity == entity)
    if key:
        stmt = stmt.where(AuditEvent.entity_key == key)
    stmt = stmt.order_by(AuditEvent.id.desc()).limit(limit)
    return _frame(session, stmt, ["id", "at", "actor", "action", "entity", "entity_key", "old", "new"])


# ---------------------------------------------------------------- cohorts and reports


def get_or_create_cohort(session: Session, name: str, language: str = "en") -> tuple[Cohort, bool]:
    """The cohort with this name, created when absent; (cohort, created)."""
    cohort = session.execute(select(Cohort).where(Cohort.name == name)).scalar_one_or_none()
    if cohort is not None:
        return cohort, False
    cohort = Cohort(name=name, language=language, created_at=now())
    session.add(cohort)
    session.flush()
    return cohort, True


def get_cohort(session: Session, name: str) -> Cohort | None:
    """A cohort by name."""
    return session.execute(select(Cohort).where(Cohort.name == name)).scalar_one_or_none()


def list_cohorts(session: Session) -> pd.DataFrame:
    """Cohorts with their report counts."""
    stmt = (
        select(Cohort.id, Cohort.name, Cohort.language, func.count(Report.id))
        .join(Report, Report.cohort_id == Cohort.id, isouter=True)
        .group_by(Cohort.id, Cohort.name, Cohort.language)
        .order_by(Cohort.id)
    )
    return _frame(session, stmt, ["id", "name", "language", "reports"])


def report_hashes(session: Session) -> dict[str, tuple[str, int]]:
    """report id -> (text hash, cohort id) for every report in the study."""
    rows = session.execute(select(Report.id, Report.text_hash, Report.cohort_id)).all()
    return {r[0]: (r[1], r[2]) for r in rows}


def insert_reports(session: Session, cohort_id: int, frame: pd.DataFrame, start_seq: int = 0) -> int:
    """Insert validated report rows (report_id, text, findings, impression, language, text_hash)."""
    stamp = now()
    rows = [
        {
            "id": r.report_id,
            "cohort_id": cohort_id,
            "seq": start_seq + i,
            "text": r.text,
            "findings": r.findings,
            "impression": r.impression,
            "language": r.language,
            "text_hash": r.text_hash,
            "created_at": stamp,
        }
        for i, r in enumerate(frame.itertuples(index=False))
    ]
    _bulk_insert(session, Report, rows)
    return len(rows)


def max_report_seq(session: Session, cohort_id: int) -> int:
    """Highest report position in a cohort (-1 when empty)."""
    value = session.execute(select(func.max(Report.seq)).where(Report.cohort_id == cohort_id)).scalar()
    return -1 if value is None else int(value)


def reports_frame(session: Session, cohort_id: int | None = None, ids: Iterable[str] | None = None) -> pd.DataFrame:
    """Reports with their sections, in import order."""
    stmt = select(
        Report.id,
        Report.cohort_id,
        Report.seq,
        Report.text,
        Report.findings,
        Report.impression,
        Report.language,
        Report.text_hash,
    )
    if cohort_id is not None:
        stmt = stmt.where(Report.cohort_id == cohort_id)
    if ids is not None:
        stmt = stmt.where(Report.id.in_(list(ids)))
    stmt = stmt.order_by(Report.cohort_id, Report.seq)
    return _frame(
        session, stmt, ["report_id", "cohort_id", "seq", "text", "findings", "impression", "language", "text_hash"]
    )


def report_ids(session: Session, cohort_id: int) -> list[str]:
    """Report ids of a cohort in import order."""
    stmt = select(Report.id).where(Report.cohort_id == cohort_id).order_by(Report.seq)
    return [r[0] for r in session.execute(stmt).all()]


def get_report(session: Session, report_id: str) -> Report | None:
    """One report."""
    return session.get(Report, report_id)


# ---------------------------------------------------------------- readers and readings


def ensure_readers(session: Session, reader_ids: Iterable[str], kind: str = "human") -> int:
    """Create the readers that do not exist yet; returns how many were created."""
    existing = {r[0] for r in session.execute(select(Reader.id)).all()}
    new = sorted(set(reader_ids) - existing)
    if new:
        # ON CONFLICT DO NOTHING: two first saves by one new reader must not collide (SQLite and PostgreSQL)
        stamp = now()
        conn = session.connection()
        mark = "%s" if conn.dialect.paramstyle in ("format", "pyformat") else "?"
        cursor = conn.connection.cursor()
        try:
            cursor.executemany(
                f"INSERT INTO reader (id, kind, created_at) VALUES ({mark}, {mark}, {mark}) ON CONFLICT DO NOTHING",
                [(r, kind, stamp) for r in new],
            )
        finally:
            cursor.close()
    return len(new)


def list_readers(session: Session) -> list[str]:
    """All reader ids."""
    return [r[0] for r in session.execute(select(Reader.id).order_by(Reader.id)).all()]


def _reading_filter(
    cohort_id: int | None = None,
    report_ids_: list[str] | None = None,
    reader: str | None = None,
    report_id: str | None = None,
) -> tuple[str, tuple]:
    """FROM/JOIN/WHERE over readings (alias r) and its parameters, shared by the reading queries."""
    sql, where, params = " FROM reading r", [], []
    if cohort_id is not None:
        sql += " JOIN report p ON p.id = r.report_id"
        where.append("p.cohort_id = ?")
        params.append(cohort_id)
    if report_ids_ is not None:
        where.append(f"r.report_id IN ({', '.join(['?'] * len(report_ids_))})")
        params.extend(report_ids_)
    if report_id is not None:
        where.append("r.report_id = ?")
        params.append(report_id)
    if reader is not None:
        where.append("r.reader_id = ?")
        params.append(reader)
    return sql + (" WHERE " + " AND ".join(where) if where else ""), tuple(params)


def readings_frame(
    session: Session, cohort_id: int | None = None, report_ids_: Iterable[str] | None = None, reader: str | None = None
) -> pd.DataFrame:
    """Readings as a long frame: report_id, label, reader, value, version."""
    columns = ["report_id", "label", "reader", "value", "version"]
    ids = None if report_ids_ is None else list(report_ids_)
    if ids == []:
        return pd.DataFrame(columns=columns)
    tail, params = _reading_filter(cohort_id, ids, reader)
    rows = _raw_rows(session, "SELECT r.report_id, r.label, r.reader_id, r.value, r.version" + tail, params)
    return pd.DataFrame(rows, columns=columns)


def _reading_groups(
    session: Session,
    select: str,
    group_by: str,
    columns: list[str],
    cohort_id: int | None = None,
    report_id: str | None = None,
    report_ids_: list[str] | None = None,
) -> pd.DataFrame:
    """One aggregate over readings per group, in the database; a list of report ids goes in chunks of 500."""
    chunks = [None] if report_ids_ is None else [report_ids_[i : i + 500] for i in range(0, len(report_ids_), 500)]
    rows: list = []
    for chunk in chunks:
        tail, params = _reading_filter(cohort_id, report_ids_=chunk, report_id=report_id)
        rows += _raw_rows(session, select + tail + " GROUP BY " + group_by, params)
    return pd.DataFrame(rows, columns=columns)


_VOTES = (
    "SELECT r.report_id, r.label, SUM(r.value), COUNT(*)",
    "r.report_id, r.label",
    ["report_id", "label", "positives", "n_readers"],
)
_LABELS_READ = (
    "SELECT r.reader_id, r.report_id, COUNT(*)",
    "r.reader_id, r.report_id",
    ["reader", "report_id", "labels"],
)


def vote_counts(session: Session, cohort_id: int | None = None, report_id: str | None = None) -> pd.DataFrame:
    """Per (report, label): positives and readers, aggregated in the database."""
    return _reading_groups(session, *_VOTES, cohort_id, report_id)


def reading_counts(session: Session, cohort_id: int | None = None) -> pd.DataFrame:
    """Per (reader, report): number of labels read, aggregated in the database."""
    return _reading_groups(session, *_LABELS_READ, cohort_id)


def insert_readings(session: Session, frame: pd.DataFrame) -> int:
    """Insert validated readings (report_id, label, reader, value)."""
    stamp = now()
    rows = list(
        zip(
            frame["report_id"].tolist(),
            frame["label"].tolist(),
            frame["reader"].tolist(),
            frame["value"].astype(int).tolist(),
            [1] * len(frame),
            [stamp] * len(frame),
            [stamp] * len(frame),
            strict=False,
        )
    )
    _raw_insert(
        session, "reading", ["report_id", "label", "reader_id", "value", "version", "created_at", "updated_at"], rows
    )
    return len(rows)


def get_reading(session: Session, report_id: str, label: str, reader: str) -> Reading | None:
    """One reading."""
    stmt = select(Reading).where(Reading.report_id == report_id, Reading.label == label, Reading.reader_id == reader)
    return session.execute(stmt).scalar_one_or_none()


def update_reading(session: Session, reading_id: int, value: int, expected_version: int) -> bool:
    """Change a reading only if nobody changed it since `expected_version` (optimistic lock)."""
    result = session.execute(
        update(Reading)
        .where(Reading.id == reading_id, Reading.version == expected_version)
        .values(value=value, version=expected_version + 1, updated_at=now())
    )
    return result.rowcount == 1


# ---------------------------------------------------------------- adjudication


def add_adjudication(
    session: Session, report_id: str, label: str, value: int, adjudicator: str, reason: str
) -> Adjudication:
    """Record an adjudication (older ones are kept as history)."""
    adj = Adjudication(
        report_id=report_id, label=label, value=value, adjudicator=adjudicator, reason=reason, created_at=now()
    )
    session.add(adj)
    session.flush()
    return adj


def adjudications_frame(session: Session, cohort_id: int | None = None) -> pd.DataFrame:
    """All adjudications (history included), oldest first; seq orders them against flags."""
    stmt = select(
        Adjudication.id,
        Adjudication.report_id,
        Adjudication.label,
        Adjudication.value,
        Adjudication.adjudicator,
        Adjudication.reason,
        Adjudication.created_at,
    )
    if cohort_id is not None:
        stmt = stmt.join(Report, Report.id == Adjudication.report_id).where(Report.cohort_id == cohort_id)
    frame = _frame(
        session,
        stmt.order_by(Adjudication.id),
        ["id", "report_id", "label", "value", "adjudicator", "reason", "created_at"],
    )
    frame["seq"] = frame["created_at"]
    return frame


def add_flag(session: Session, report_id: str, label: str, opened_by: str, reason: str, note_id: int | None) -> Flag:
    """Send a decided item back to adjudication."""
    flag = Flag(report_id=report_id, label=label, opened_by=opened_by, reason=reason, note_id=note_id, created_at=now())
    session.add(flag)
    session.flush()
    return flag


def flags_frame(session: Session, cohort_id: int | None = None) -> pd.DataFrame:
    """All flags, oldest first."""
    stmt = select(Flag.id, Flag.report_id, Flag.label, Flag.opened_by, Flag.reason, Flag.created_at)
    if cohort_id is not None:
        stmt = stmt.join(Report, Report.id == Flag.report_id).where(Report.cohort_id == cohort_id)
    frame = _frame(session, stmt.order_by(Flag.id), ["id", "report_id", "label", "opened_by", "reason", "created_at"])
    frame["seq"] = frame["created_at"]
    return frame


# ---------------------------------------------------------------- runs, predictions, cache


def add_run(session: Session, **fields) -> Run:
    """Create a run row."""
    run = Run(started_at=now(), **fields)
    session.add(run)
    session.flush()
    return run


def get_run(session: Session, run_id: int) -> Run | None:
    """One run."""
    return session.get(Run, run_id)


def list_runs(session: Session, cohort_id: int | None = None) -> pd.DataFrame:
    """Runs newest first with their counts."""
    cols = [
        Run.id,
        Run.cohort_id,
        Run.prompt_commit,
        Run.prompt_ref,
        Run.model,
        Run.mode,
        Run.status,
        Run.started_at,
        Run.finished_at,
        Run.calls_total,
        Run.calls_made,
        Run.calls_reused,
        Run.failures,
        Run.prompt_tokens,
        Run.completion_tokens,
        Run.cost,
        Run.endpoint,
        Run.labels_json,
        Run.created_by,
    ]
    stmt = select(*cols)
    if cohort_id is not None:
        stmt = stmt.where(Run.cohort_id == cohort_id)
    return _frame(session, stmt.order_by(Run.id.desc()), [c.key for c in cols])


def update_run(session: Session, run_id: int, **fields) -> None:
    """Set fields of a run."""
    session.execute(update(Run).where(Run.id == run_id).values(**fields))


def take_run_lease(
    session: Session, run_id: int, holder: str, expires_at: float, now: float, dead_holder: str | None = None
) -> bool:
    """Become a run's executor in one conditional UPDATE: when nobody holds it, we already do, it
    expired, or it is held by dead_holder (a process known to be dead). True when taken."""
    free = [Run.lease_holder.is_(None), Run.lease_holder == holder, Run.lease_expires_at < now]
    if dead_holder:
        free.append(Run.lease_holder == dead_holder)
    stmt = update(Run).where(Run.id == run_id, or_(*free)).values(lease_holder=holder, lease_expires_at=expires_at)
    return session.execute(stmt.execution_options(synchronize_session=False)).rowcount == 1


def renew_run_lease(session: Session, run_id: int, holder: str, expires_at: float) -> bool:
    """Extend our lease; False when another executor took the run over."""
    stmt = update(Run).where(Run.id == run_id, Run.lease_holder == holder).values(lease_expires_at=expires_at)
    return session.execute(stmt.execution_options(synchronize_session=False)).rowcount == 1


def running_runs(session: Session, cohort_id: int | None = None) -> list[tuple[int, str | None, float | None]]:
    """(id, lease holder, lease expiry) of every run whose status is still `running`."""
    stmt = select(Run.id, Run.lease_holder, Run.lease_expires_at).where(Run.status == "running")
    if cohort_id is not None:
        stmt = stmt.where(Run.cohort_id == cohort_id)
    return [tuple(row) for row in session.execute(stmt).all()]


def mark_run_abandoned(session: Session, run_id: int, holder: str | None, status: str, finished_at: str) -> bool:
    """Set a `running` run whose executor is gone to `status`, only if that executor still holds it (one
    conditional UPDATE: a live executor that renewed or took it over in between keeps it). True when marked."""
    held = Run.lease_holder.is_(None) if holder is None else Run.lease_holder == holder
    stmt = (
        update(Run)
        .where(Run.id == run_id, Run.status == "running", held)
        .values(status=status, finished_at=finished_at, lease_holder=None, lease_expires_at=None)
    )
    return session.execute(stmt.execution_options(synchronize_session=False)).rowcount == 1


def release_run_lease(session: Session, run_id: int, holder: str) -> None:
    """Give the run up (only if we still hold it)."""
    stmt = (
        update(Run).where(Run.id == run_id, Run.lease_holder == holder).values(lease_holder=None, lease_expires_at=None)
    )
    session.execute(stmt.execution_options(synchronize_session=False))


def add_run_counts(session: Session, run_id: int, **deltas) -> None:
    """Increment a run's counters atomically (calls_made=1, failures=1, ...)."""
    values = {k: getattr(Run, k) + v for k, v in deltas.items()}
    session.execute(update(Run).where(Run.id == run_id).values(**values))


def upsert_predictions(session: Session, run_id: int, rows: list[dict]) -> None:
    """Store predictions, replacing earlier ones for the same (run, report, label).

    One executemany of INSERT ... ON CONFLICT DO UPDATE (SQLite >= 3.24 and PostgreSQL): no ORM
    objects and no separate delete, so a 43,000-cell run is written in well under a second."""
    if not rows:
        return
    cols = PREDICTION_COLUMNS
    updates = ", ".join(f"{c} = excluded.{c}" for c in cols[2:])
    data = [(run_id, *(r[c] for c in cols)) for r in rows]
    _raw_insert(
        session,
        "prediction",
        ["run_id", *cols],
        data,
        f"ON CONFLICT (run_id, report_id, label) DO UPDATE SET {updates}",
        key=3,
    )


PREDICTION_COLUMNS = ["report_id", "label", *Answer.COLUMNS, "call_key"]


def predictions_frame(
    session: Session, run_id: int, report_id: str | None = None, label: str | None = None
) -> pd.DataFrame:
    """A run's predictions as a long frame (optionally one report / one cell)."""
    sql = f"SELECT {', '.join(PREDICTION_COLUMNS)} FROM prediction WHERE run_id = ?"
    params: list = [run_id]
    if report_id is not None:
        sql += " AND report_id = ?"
        params.append(report_id)
    if label is not None:
        sql += " AND label = ?"
        params.append(label)
    frame = pd.DataFrame(_raw_rows(session, sql, tuple(params)), columns=PREDICTION_COLUMNS)
    # SQLite returns 0/1 for booleans (and pandas turns a NULL among them into NaN, which bool() calls True):
    # keep the type the ORM gave
    frame["evidence_found"] = frame["evidence_found"].map(lambda v: None if pd.isna(v) else bool(v)).astype(object)
    return frame


def prediction_tally(session: Session, run_id: int) -> tuple[int, int]:
    """A run's stored predictions and how many of them are failures (value None), counted in the database."""
    rows = _raw_rows(session, "SELECT COUNT(*), COUNT(*) - COUNT(value) FROM prediction WHERE run_id = ?", (run_id,))
    return int(rows[0][0]), int(rows[0][1])


def done_prediction_keys(session: Session, run_id: int) -> set[tuple[str, str]]:
    """(report, label) pairs with a successful prediction in a run."""
    stmt = select(Prediction.report_id, Prediction.label).where(
        Prediction.run_id == run_id, Prediction.value.is_not(None)
    )
    return {(r[0], r[1]) for r in session.execute(stmt).all()}


class CachedCall(NamedTuple):
    """One call-cache row, as plain values (43,000 ORM objects would cost seconds)."""

    key: str
    model: str
    response: str
    prompt_tokens: int
    completion_tokens: int
    cost: float | None


CACHE_COLUMNS = ["key", "model", "response", "prompt_tokens", "completion_tokens", "cost"]


def cached_calls(session: Session, keys: Iterable[str]) -> dict[str, CachedCall]:
    """Cached answers for the given call keys."""
    keys = list(set(keys))
    if not keys:
        return {}
    out: dict[str, CachedCall] = {}
    sql_cols = ", ".join(CACHE_COLUMNS)
    if session.connection().dialect.name == "postgresql":
        # one join against the key array: a long IN list is compared row by row when the planner has no
        # statistics yet (a table filled in the same session), 0.9 s per 900 keys at 43,000 rows
        # the keys go as one newline-joined text: adapting 43,000 strings as an array costs 0.1 s of client CPU
        joined = "\n".join(keys)
        plain = joined.count("\n") == len(keys) - 1  # no key holds a newline (call keys are hex digests)
        sql = (
            f"SELECT {', '.join('c.' + c for c in CACHE_COLUMNS)} FROM callcache c "
            f"JOIN unnest({'string_to_array(?, chr(10))' if plain else '?::text[]'}) AS k(key) ON c.key = k.key"
        )
        return {row[0]: CachedCall(*row) for row in _raw_rows(session, sql, (joined if plain else keys,))}
    for i in range(0, len(keys), 900):  # SQLite's bound-parameter limit
        chunk = keys[i : i + 900]
        sql = f"SELECT {sql_cols} FROM callcache WHERE key IN ({', '.join('?' * len(chunk))})"
        for row in _raw_rows(session, sql, tuple(chunk)):
            out[row[0]] = CachedCall(*row)
    return out


def put_cached_calls(session: Session, calls: list[CachedCall]) -> None:
    """Store many model answers in the call cache in one statement (first writer wins)."""
    if calls:
        created = now()
        _raw_insert(
            session,
            "callcache",
            [*CACHE_COLUMNS, "created_at"],
            [(*c, created) for c in calls],
            "ON CONFLICT (key) DO NOTHING",
        )


def put_cached_call(
    session: Session,
    key: str,
    model: str,
    response: str,
    prompt_tokens: int,
    completion_tokens: int,
    cost: float | None,
) -> None:
    """Store a model answer in the call cache (first writer wins)."""
    put_cached_calls(session, [CachedCall(key, model, response, prompt_tokens, completion_tokens, cost)])


# ---------------------------------------------------------------- error notes


def add_note(session: Session, **fields) -> ErrorNote:
    """Record an error note."""
    note = ErrorNote(created_at=now(), **fields)
    session.add(note)
    session.flush()
    return note


def notes_frame(session: Session, label: str | None = None, report_id: str | None = None) -> pd.DataFrame:
    """Error notes oldest first."""
    cols = [
        ErrorNote.id,
        ErrorNote.report_id,
        ErrorNote.label,
        ErrorNote.run_id,
        ErrorNote.author,
        ErrorNote.category,
        ErrorNote.significance,
        ErrorNote.text,
        ErrorNote.reference_wrong,
        ErrorNote.created_at,
    ]
    stmt = select(*cols)
    if label:
        stmt = stmt.where(ErrorNote.label == label)
    if report_id:
        stmt = stmt.where(ErrorNote.report_id == report_id)
    return _frame(session, stmt.order_by(ErrorNote.id), [c.key for c in cols])


# ---------------------------------------------------------------- scoring cache


def get_extractions(session: Session, keys: Iterable[str]) -> dict[str, str]:
    """Cached labels (JSON) for extraction keys."""
    keys = list(set(keys))
    out = {}
    for i in range(0, len(keys), 900):
        for row in session.execute(
            select(Extraction.key, Extraction.labels_json).where(Extraction.key.in_(keys[i : i + 900]))
        ).all():
            out[row[0]] = row[1]
    return out


def put_extraction(session: Session, key: str, bundle_sha: str, text_hash: str, labels_json: str) -> None:
    """Cache a bundle's labels for one text."""
    if session.get(Extraction, key) is None:
        session.add(
            Extraction(key=key, bundle_sha=bundle_sha, text_hash=text_hash, labels_json=labels_json, created_at=now())
        )


# ---------------------------------------------------------------- users


def get_user(session: Session, user_id: str) -> User | None:
    """One user."""
    return session.get(User, user_id)


def list_users(session: Session) -> pd.DataFrame:
    """Users without their password hashes."""
    stmt = select(User.id, User.name, User.email, User.role, User.created_at, User.disabled).order_by(User.id)
    frame = _frame(session, stmt, ["id", "name", "email", "role", "created_at", "disabled"])
    frame["disabled"] = frame["disabled"].astype(bool)
    return frame


def user_token_digests(session: Session, user_id: str) -> list[str]:
    """sha256 digests of a user's command-line tokens."""
    return list(session.execute(select(UserToken.token_hash).where(UserToken.user_id == user_id)).scalars())


def user_tokens(session: Session, user_id: str) -> list[tuple[str, str, str]]:
    """(sha256 digest, created_at, expires_at) of each of a user's command-line tokens."""
    stmt = select(UserToken.token_hash, UserToken.created_at, UserToken.expires_at).where(UserToken.user_id == user_id)
    return [tuple(row) for row in session.execute(stmt)]


def add_user_token(session: Session, user_id: str, digest: str, expires_at: str = "") -> None:
    """Store a token's digest (never the token) and when it expires."""
    session.add(UserToken(user_id=user_id, token_hash=digest, created_at=now(), expires_at=expires_at))


def revoke_credentials(session: Session, user_id: str) -> int:
    """End every credential of a user but the password itself: command-line tokens and browser sessions;
    returns how many tokens were deleted.

    The one place every revoking event goes through (disable, password change, role change, a user's
    own revoke): a new kind of credential is revoked by adding it here.
    """
    revoke_web_sessions(session, user_id)
    return delete_user_tokens(session, user_id)


def delete_user_tokens(session: Session, user_id: str) -> int:
    """Delete a user's tokens; returns how many."""
    return session.execute(delete(UserToken).where(UserToken.user_id == user_id)).rowcount or 0


def add_web_session(session: Session, user_id: str, digest: str, expires_at: str) -> None:
    """Store a browser session's token digest (never the token) with its expiry."""
    session.add(WebSession(user_id=user_id, token_hash=digest, created_at=now(), expires_at=expires_at))


def get_web_session(session: Session, digest: str) -> WebSession | None:
    """The browser session of a token digest (revoked and expired ones included), or None."""
    return session.execute(select(WebSession).where(WebSession.token_hash == digest)).scalars().first()


def revoke_web_session(session: Session, digest: str) -> int:
    """Revoke one browser session (sign-out); returns how many were open."""
    stmt = (
        update(WebSession).where(WebSession.token_hash == digest, WebSession.revoked_at == "").values(revoked_at=now())
    )
    return session.execute(stmt).rowcount or 0


def revoke_web_sessions(session: Session, user_id: str) -> int:
    """Revoke every open browser session of a user (disable, role change); returns how many."""
    stmt = update(WebSession).where(WebSession.user_id == user_id, WebSession.revoked_at == "").values(revoked_at=now())
    return session.execute(stmt).rowcount or 0


def get_login_failure(session: Session, user_id: str) -> LoginFailure | None:
    """The failed sign-in record of a user id (known or not)."""
    return session.get(LoginFailure, user_id[:300])


def record_login_failure(session: Session, user_id: str) -> LoginFailure:
    """Count one more failed sign-in for a user id."""
    row = session.get(LoginFailure, user_id[:300])
    if row is None:
        row = LoginFailure(user_id=user_id[:300], failures=0)
    row.failures += 1
    row.last_at = now()
    session.add(row)
    session.flush()
    return row


def clear_login_failures(session: Session, user_id: str) -> None:
    """Forget failed sign-ins of a user id (after a success)."""
    session.execute(delete(LoginFailure).where(LoginFailure.user_id == user_id[:300]))


def count_rows(session: Session, table) -> int:
    """Number of rows in a table."""
    return int(session.execute(select(func.count()).select_from(table.__table__)).scalar())


# ---------------------------------------------------------------- prompt drafts


def get_draft(session: Session, label: str, author: str) -> PromptDraft | None:
    """A user's draft of one label's prompt."""
    stmt = select(PromptDraft).where(PromptDraft.label == label, PromptDraft.author == author)
    return session.execute(stmt).scalar_one_or_none()


def put_draft(session: Session, label: str, author: str, base_commit: str, content: str) -> None:
    """Create or replace a draft."""
    draft = get_draft(session, label, author)
    if draft is None:
        session.add(PromptDraft(label=label, author=author, base_commit=base_commit, content=content, updated_at=now()))
    else:
        draft.base_commit, draft.content, draft.updated_at = base_commit, content, now()
        session.add(draft)


def delete_draft(session: Session, label: str, author: str) -> None:
    """Drop a draft (after it was committed or discarded)."""
    session.execute(delete(PromptDraft).where(PromptDraft.label == label, PromptDraft.author == author))


def list_drafts(session: Session, author: str | None = None) -> pd.DataFrame:
    """Open drafts."""
    stmt = select(PromptDraft.label, PromptDraft.author, PromptDraft.base_commit, PromptDraft.updated_at)
    if author:
        stmt = stmt.where(PromptDraft.author == author)
    return _frame(session, stmt.order_by(PromptDraft.label), ["label", "author", "base_commit", "updated_at"])


# ---------------------------------------------------------------- cohort roles, splits, test looks, proposals


def cohort_roles(session: Session) -> dict[str, str]:
    """cohort name -> role."""
    return {r[0]: r[1] for r in session.execute(select(Cohort.name, Cohort.role)).all()}


def set_cohort_role(session: Session, cohort_id: int, role: str) -> None:
    """Change a cohort's role."""
    session.execute(update(Cohort).where(Cohort.id == cohort_id).values(role=role))


def put_split(
    session: Session, cohort_id: int, assignment: dict[str, str], seed: int, fraction: float, actor: str
) -> None:
    """Replace a cohort's split membership with a new assignment (one transaction)."""
    session.execute(delete(SplitMember).where(SplitMember.cohort_id == cohort_id))
    stamp = now()
    _bulk_insert(
        session,
        SplitMember,
        [
            {
                "report_id": rid,
                "cohort_id": cohort_id,
                "part": part,
                "seed": seed,
                "validation_fraction": fraction,
                "created_by": actor,
                "created_at": stamp,
            }
            for rid, part in assignment.items()
        ],
    )


def split_frame(session: Session, cohort_id: int | None = None) -> pd.DataFrame:
    """Split membership: report_id, cohort_id, part, seed, validation_fraction, created_at."""
    cols = [
        SplitMember.report_id,
        SplitMember.cohort_id,
        SplitMember.part,
        SplitMember.seed,
        SplitMember.validation_fraction,
        SplitMember.created_at,
    ]
    stmt = select(*cols)
    if cohort_id is not None:
        stmt = stmt.where(SplitMember.cohort_id == cohort_id)
    return _frame(session, stmt, [c.key for c in cols])


def report_cohort_roles(session: Session, ids: Iterable[str]) -> pd.DataFrame:
    """For report ids: cohort role and split part (None when the cohort is not split)."""
    ids = list(ids)
    rows = []
    for i in range(0, len(ids), 900):
        stmt = (
            select(Report.id, Cohort.role, SplitMember.part)
            .join(Cohort, Cohort.id == Report.cohort_id)
            .join(SplitMember, SplitMember.report_id == Report.id, isouter=True)
            .where(Report.id.in_(ids[i : i + 900]))
        )
        rows += session.execute(stmt).all()
    return pd.DataFrame(rows, columns=["report_id", "role", "part"])


def add_look(session: Session, cohort_id: int, bundle: str, bundle_sha: str, run_id: int | None, actor: str) -> None:
    """Record one look at a test cohort's metrics."""
    session.add(
        CohortLook(cohort_id=cohort_id, bundle=bundle, bundle_sha=bundle_sha, run_id=run_id, actor=actor, at=now())
    )


def looks_frame(session: Session, bundle: str | None = None) -> pd.DataFrame:
    """Looks at test cohorts, oldest first."""
    cols = [
        CohortLook.id,
        CohortLook.cohort_id,
        CohortLook.bundle,
        CohortLook.bundle_sha,
        CohortLook.run_id,
        CohortLook.actor,
        CohortLook.at,
    ]
    stmt = select(*cols)
    if bundle:
        stmt = stmt.where(CohortLook.bundle == bundle)
    return _frame(session, stmt.order_by(CohortLook.id), [c.key for c in cols])


def add_proposal(session: Session, **fields) -> Proposal:
    """Store a proposal."""
    stamp = now()
    row = Proposal(created_at=stamp, updated_at=stamp, **fields)
    session.add(row)
    session.flush()
    return row


def get_proposal(session: Session, proposal_id: int) -> Proposal | None:
    """One proposal."""
    return session.get(Proposal, proposal_id)


def update_proposal(session: Session, proposal_id: int, **fields) -> None:
    """Change a proposal's status (and commit)."""
    session.execute(update(Proposal).where(Proposal.id == proposal_id).values(updated_at=now(), **fields))


def proposals_frame(
    session: Session, label: str | None = None, status: str | None = None, author: str | None = None
) -> pd.DataFrame:
    """Proposals newest first."""
    cols = [
        Proposal.id,
        Proposal.label,
        Proposal.author,
        Proposal.source,
        Proposal.status,
        Proposal.base_commit,
        Proposal.run_id,
        Proposal.note_ids_json,
        Proposal.commit,
        Proposal.created_at,
        Proposal.updated_at,
    ]
    stmt = select(*cols)
    if label:
        stmt = stmt.where(Proposal.label == label)
    if status:
        stmt = stmt.where(Proposal.status == status)
    if author:
        stmt = stmt.where(Proposal.author == author)
    return _frame(session, stmt.order_by(Proposal.id.desc()), [c.key for c in cols])


def add_optimisation(session: Session, created_by: str, run_id: int, report_json: str) -> int:
    """Store an optimisation report; returns its id."""
    row = Optimisation(created_by=created_by, created_at=now(), run_id=run_id, report_json=report_json)
    session.add(row)
    session.flush()
    return row.id


def optimisations_frame(session: Session) -> pd.DataFrame:
    """Optimisation reports newest first (with their JSON)."""
    cols = [
        Optimisation.id,
        Optimisation.created_by,
        Optimisation.created_at,
        Optimisation.run_id,
        Optimisation.report_json,
    ]
    return _frame(session, select(*cols).order_by(Optimisation.id.desc()), [c.key for c in cols])


# ---------------------------------------------------------------- reading room (drafts and work lists)


def get_reading_draft(session: Session, reader: str, report_id: str) -> dict | None:
    """A reader's unsaved ticks on one report (label -> 0/1), or None."""
    stmt = select(ReadingDraft.values_json).where(ReadingDraft.reader_id == reader, ReadingDraft.report_id == report_id)
    row = session.execute(stmt).first()
    return None if row is None else json.loads(row[0])


def put_reading_draft(session: Session, reader: str, report_id: str, values: dict) -> None:
    """Create or replace a reader's draft in one statement (two tabs saving at once cannot collide)."""
    _raw_rows_write(
        session,
        "INSERT INTO readingdraft (reader_id, report_id, values_json, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (reader_id, report_id) DO UPDATE SET values_json = excluded.values_json, "
        "updated_at = excluded.updated_at",
        (reader, report_id, json.dumps(values, sort_keys=True), now()),
    )


def claim_press(session: Session, page: str, form: str, seq: int, actor: str, at: str) -> AppliedPress | None:
    """Record a keyboard press as being applied, in one statement; None when it is new, else the earlier record
    (two claims at once: the unique key lets one in)."""
    written = _raw_rows_write(
        session,
        "INSERT INTO appliedpress (page, form, seq, actor, at, done, error) VALUES (?, ?, ?, ?, ?, ?, '') "
        "ON CONFLICT (page, form, seq) DO NOTHING",
        (page, form, seq, actor, at, False),
    )
    if written:
        return None
    return session.scalars(
        select(AppliedPress).where(AppliedPress.page == page, AppliedPress.form == form, AppliedPress.seq == seq)
    ).first()


def finish_press(session: Session, page: str, form: str, seq: int, error: str) -> None:
    """Record the answer given to a press ("" = applied)."""
    session.execute(
        update(AppliedPress)
        .where(AppliedPress.page == page, AppliedPress.form == form, AppliedPress.seq == seq)
        .values(done=True, error=error)
    )


def prune_presses(session: Session, before: str) -> None:
    """Forget presses recorded before a time (the table stays small: a page resends within seconds)."""
    session.execute(delete(AppliedPress).where(AppliedPress.at < before))


def delete_reading_draft(session: Session, reader: str, report_id: str) -> None:
    """Drop a draft (its reading was saved)."""
    session.execute(delete(ReadingDraft).where(ReadingDraft.reader_id == reader, ReadingDraft.report_id == report_id))


def reading_draft_ids(session: Session, reader: str) -> list[str]:
    """Reports on which a reader has an unsaved draft."""
    return [r[0] for r in session.execute(select(ReadingDraft.report_id).where(ReadingDraft.reader_id == reader)).all()]


def delete_reading(session: Session, reading_id: int, expected_version: int) -> bool:
    """Remove a reading only if nobody changed it since `expected_version` (undo of a first save)."""
    result = session.execute(delete(Reading).where(Reading.id == reading_id, Reading.version == expected_version))
    return result.rowcount == 1


def get_reading_note(session: Session, reader: str, report_id: str) -> dict | None:
    """A reader's comment and unsure mark on one report ({comment, unsure}), or None."""
    stmt = select(ReadingNote.comment, ReadingNote.unsure).where(
        ReadingNote.reader_id == reader, ReadingNote.report_id == report_id
    )
    row = session.execute(stmt).first()
    return None if row is None else {"comment": row[0], "unsure": bool(row[1])}


def put_reading_note(session: Session, reader: str, report_id: str, note: dict | None) -> None:
    """Create, replace or (None) drop a reader's note on one report."""
    session.execute(delete(ReadingNote).where(ReadingNote.reader_id == reader, ReadingNote.report_id == report_id))
    if note is not None:
        session.add(
            ReadingNote(
                reader_id=reader,
                report_id=report_id,
                comment=note["comment"],
                unsure=bool(note["unsure"]),
                updated_at=now(),
            )
        )
        session.flush()


def reading_notes_frame(
    session: Session, report_ids_: Iterable[str] | None = None, reader: str | None = None
) -> pd.DataFrame:
    """Readers' notes: report_id, reader, comment, unsure, updated_at (optionally of some reports or one reader)."""
    columns = ["report_id", "reader", "comment", "unsure", "updated_at"]
    stmt = select(
        ReadingNote.report_id, ReadingNote.reader_id, ReadingNote.comment, ReadingNote.unsure, ReadingNote.updated_at
    ).order_by(ReadingNote.report_id, ReadingNote.reader_id)
    if reader is not None:
        stmt = stmt.where(ReadingNote.reader_id == reader)
    rows = session.execute(stmt).all()
    frame = pd.DataFrame([tuple(r) for r in rows], columns=columns).astype({"unsure": bool})
    return frame if report_ids_ is None else frame[frame["report_id"].isin(set(report_ids_))]


def add_reading_save(
    session: Session, reader: str, report_id: str, before: dict, after: dict, note_before, draft_before
) -> None:
    """Log one save of a reading for undo (values before, versions after, the note and draft it replaced)."""
    session.add(
        ReadingSave(
            reader_id=reader,
            report_id=report_id,
            at=now(),
            before_json=json.dumps(before, sort_keys=True),
            after_json=json.dumps(after, sort_keys=True),
            note_before_json=json.dumps(note_before),
            draft_before_json=json.dumps(draft_before),
        )
    )


def last_reading_save(session: Session, reader: str):
    """A reader's latest save not undone yet, or None."""
    stmt = (
        select(ReadingSave)
        .where(ReadingSave.reader_id == reader, ReadingSave.undone_at == "")
        .order_by(ReadingSave.id.desc())
        .limit(1)
    )
    return session.execute(stmt).scalar_one_or_none()


def restamp_last_reading_save(session: Session, reader: str, report_id: str, after: dict) -> None:
    """Give a reader's latest save of a report that is not undone the versions after an undo of a later one
    (the undo restored its values with new versions: it can be undone in turn)."""
    stmt = (
        select(ReadingSave.id)
        .where(ReadingSave.reader_id == reader, ReadingSave.report_id == report_id, ReadingSave.undone_at == "")
        .order_by(ReadingSave.id.desc())
        .limit(1)
    )
    row = session.execute(stmt).first()
    if row is not None:
        session.execute(
            update(ReadingSave).where(ReadingSave.id == row[0]).values(after_json=json.dumps(after, sort_keys=True))
        )


def mark_reading_save_undone(session: Session, save_id: int) -> bool:
    """Mark a save undone (only once: False when another undo got there first)."""
    result = session.execute(
        update(ReadingSave).where(ReadingSave.id == save_id, ReadingSave.undone_at == "").values(undone_at=now())
    )
    return result.rowcount == 1


def reader_report_counts(session: Session, reader: str, cohort_id: int) -> pd.DataFrame:
    """Per report of a cohort: how many labels one reader has saved, and when last."""
    rows = _raw_rows(
        session,
        "SELECT r.report_id, COUNT(*), MAX(r.updated_at) FROM reading r JOIN report p ON p.id = r.report_id "
        "WHERE p.cohort_id = ? AND r.reader_id = ? GROUP BY r.report_id",
        (cohort_id, reader),
    )
    return pd.DataFrame(rows, columns=["report_id", "labels", "saved_at"])


def get_work_list(session: Session, cohort_id: int):
    """A cohort's work-list settings (overlap), or None when readers may read every report."""
    return session.get(WorkList, cohort_id)


def put_work_list(session: Session, cohort_id: int, overlap: int, created_by: str) -> None:
    """Set a cohort's overlap target."""
    row = session.get(WorkList, cohort_id) or WorkList(
        cohort_id=cohort_id, overlap=overlap, created_by=created_by, updated_at=now()
    )
    row.overlap, row.created_by, row.updated_at = overlap, created_by, now()
    session.add(row)


def assignments_frame(session: Session, cohort_id: int, reader: str | None = None) -> pd.DataFrame:
    """Work-list assignments of a cohort (report_id, reader) in report order."""
    stmt = (
        select(WorkAssignment.report_id, WorkAssignment.reader_id)
        .join(Report, Report.id == WorkAssignment.report_id)
        .where(WorkAssignment.cohort_id == cohort_id)
    )
    if reader is not None:
        stmt = stmt.where(WorkAssignment.reader_id == reader)
    return _frame(session, stmt.order_by(Report.seq, WorkAssignment.reader_id), ["report_id", "reader"])


def add_assignments(session: Session, cohort_id: int, rows: list[tuple[str, str]], assigned_by: str) -> int:
    """Put (report_id, reader) pairs on work lists."""
    stamp = now()
    _bulk_insert(
        session,
        WorkAssignment,
        [
            {"cohort_id": cohort_id, "report_id": r, "reader_id": d, "assigned_by": assigned_by, "created_at": stamp}
            for r, d in rows
        ],
    )
    return len(rows)


def _raw_rows_write(session: Session, sql: str, params: tuple) -> int:
    """One write statement on the DBAPI cursor (placeholders adapted to the driver); the rows it wrote."""
    conn = session.connection()
    if conn.dialect.paramstyle in ("format", "pyformat"):
        sql = sql.replace("?", "%s")
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, params)
        return cursor.rowcount
    finally:
        cursor.close()


# ---------------------------------------------------------------- prompt versions


def version_examples(session: Session, commit: str) -> set[str] | None:
    """The few-shot example report ids recorded for a prompt commit, or None if not recorded yet."""
    row = session.get(PromptVersionExamples, commit)
    return None if row is None else set(json.loads(row.report_ids))


def put_version_examples(session: Session, commit: str, report_ids: set[str]) -> None:
    """Record a prompt commit's example report ids (first writer wins: the answer cannot differ)."""
    _raw_insert(
        session,
        "promptversionexamples",
        ["prompt_commit", "report_ids"],
        [(commit, json.dumps(sorted(report_ids)))],
        "ON CONFLICT (prompt_commit) DO NOTHING",
    )


# ---------------------------------------------------------------- readings: what changed since a look (page caches)


def reading_watermark(session: Session) -> tuple:
    """(highest id, latest updated_at) of all readings: changes whenever a reading is added or changed (two index look-ups)."""
    row = _raw_rows(session, "SELECT MAX(id), MAX(updated_at) FROM reading")[0]
    return row[0], row[1]


def count_readings(session: Session) -> int:
    """How many readings there are."""
    return int(_raw_rows(session, "SELECT COUNT(*) FROM reading")[0][0])


def reports_read_since(session: Session, stamp: str) -> list[str]:
    """Reports with a reading added or changed at or after `stamp` (an ISO time; uses ix_reading_updated_at)."""
    # no DISTINCT: SQLite would scan the unique index for it instead of seeking ix_reading_updated_at
    rows = _raw_rows(session, "SELECT report_id FROM reading WHERE updated_at >= ?", (stamp,))
    return list(dict.fromkeys(r[0] for r in rows))


def vote_counts_of(session: Session, report_ids_: list[str]) -> pd.DataFrame:
    """vote_counts for some reports only."""
    return _reading_groups(session, *_VOTES, report_ids_=report_ids_)


def reading_counts_of(session: Session, report_ids_: list[str]) -> pd.DataFrame:
    """reading_counts for some reports only."""
    return _reading_groups(session, *_LABELS_READ, report_ids_=report_ids_)


# ---------------------------------------------------------------- finding attributes


PREDICTION_ATTRIBUTE_COLUMNS = ["report_id", "label", "attribute", "value", "status", "detail"]
READING_ATTRIBUTE_COLUMNS = ["report_id", "label", "reader", "attribute", "value"]


def upsert_prediction_attributes(session: Session, run_id: int, rows: list[dict]) -> None:
    """Store a run's attribute rows, first clearing what the same (run, report, label) cells had before
    (a re-labelled cell may now have fewer attributes)."""
    if not rows:
        return
    cells = sorted({(r["report_id"], r["label"]) for r in rows})
    for i in range(0, len(cells), 400):
        chunk = cells[i : i + 400]
        where = " OR ".join(["(report_id = ? AND label = ?)"] * len(chunk))
        _raw_rows_write(
            session,
            f"DELETE FROM predictionattribute WHERE run_id = ? AND ({where})",
            (run_id, *[x for cell in chunk for x in cell]),
        )
    data = [(run_id, *(r[c] for c in PREDICTION_ATTRIBUTE_COLUMNS)) for r in rows if r.get("attribute") is not None]
    _raw_insert(
        session,
        "predictionattribute",
        ["run_id", *PREDICTION_ATTRIBUTE_COLUMNS],
        data,
        "ON CONFLICT (run_id, report_id, label, attribute) DO UPDATE SET value = excluded.value, "
        "status = excluded.status, detail = excluded.detail",
        key=4,
    )


def prediction_attributes_frame(session: Session, run_id: int, label: str | None = None) -> pd.DataFrame:
    """A run's attribute rows (report_id, label, attribute, value, status, detail)."""
    sql = f"SELECT {', '.join(PREDICTION_ATTRIBUTE_COLUMNS)} FROM predictionattribute WHERE run_id = ?"
    params: list = [run_id]
    if label is not None:
        sql += " AND label = ?"
        params.append(label)
    return pd.DataFrame(_raw_rows(session, sql + " ORDER BY id", tuple(params)), columns=PREDICTION_ATTRIBUTE_COLUMNS)


def put_reading_attributes(session: Session, frame: pd.DataFrame, adjudicated: bool = False) -> int:
    """Insert or replace readers' attribute values (report_id, label, reader, attribute, value)."""
    if frame.empty:
        return 0
    stamp = now()
    rows = [
        (r, lab, reader, a, v, adjudicated, stamp)
        for r, lab, reader, a, v in frame[READING_ATTRIBUTE_COLUMNS].itertuples(index=False)
    ]
    _raw_insert(
        session,
        "readingattribute",
        ["report_id", "label", "reader_id", "attribute", "value", "adjudicated", "updated_at"],
        rows,
        "ON CONFLICT (report_id, label, reader_id, attribute, adjudicated) DO UPDATE SET "
        "value = excluded.value, updated_at = excluded.updated_at",
        key=5,
    )
    return len(rows)


def delete_reading_attributes(session: Session, report_id: str, label: str, reader: str) -> None:
    """Forget one reader's attribute values of one (report, label) (the tick was removed or re-set)."""
    _raw_rows_write(
        session,
        "DELETE FROM readingattribute WHERE report_id = ? AND label = ? AND reader_id = ? AND adjudicated = ?",
        (report_id, label, reader, False),
    )


def reading_attributes_frame(
    session: Session,
    cohort_id: int | None = None,
    adjudicated: bool = False,
    report_id: str | None = None,
    reader: str | None = None,
) -> pd.DataFrame:
    """Readers' (or adjudicators') attribute values: report_id, label, reader, attribute, value, oldest first;
    of one cohort, one report and one reader when given."""
    sql = (
        "SELECT a.report_id, a.label, a.reader_id, a.attribute, a.value FROM readingattribute a"
        + (" JOIN report p ON p.id = a.report_id WHERE p.cohort_id = ? AND" if cohort_id is not None else " WHERE")
        + (" a.report_id = ? AND" if report_id is not None else "")
        + (" a.reader_id = ? AND" if reader is not None else "")
        + " a.adjudicated = ? ORDER BY a.updated_at, a.id"
    )
    params = tuple(v for v in (cohort_id, report_id, reader) if v is not None) + (adjudicated,)
    return pd.DataFrame(_raw_rows(session, sql, params), columns=READING_ATTRIBUTE_COLUMNS)


# ---------------------------------------------------------------- per-call facts and noise repeats

FACT_COLUMNS = [
    "call_key",
    "run_id",
    "labels",
    "latency_s",
    "attempts",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost",
    "finish_reason",
    "reported_model",
    "reasoning",
    "peer",
]


def put_call_facts(session: Session, facts: list[tuple]) -> None:
    """Store per-call facts (tuples in FACT_COLUMNS order); a call made again (a retried failure) keeps its latest facts."""
    if facts:
        created = now()
        cols = [*FACT_COLUMNS, "created_at"]
        _raw_insert(
            session,
            "callfact",
            cols,
            [(*f, created) for f in facts],
            "ON CONFLICT (call_key) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in cols[1:]),
            key=1,
        )


def call_facts(session: Session, keys: Iterable[str]) -> pd.DataFrame:
    """Per-call facts of the given call keys (one row per key that has them)."""
    keys = sorted(set(k for k in keys if k))
    frames = []
    for i in range(0, len(keys), 900):
        chunk = keys[i : i + 900]
        sql = f"SELECT {', '.join(FACT_COLUMNS)} FROM callfact WHERE call_key IN ({', '.join('?' * len(chunk))})"
        frames.append(pd.DataFrame(_raw_rows(session, sql, tuple(chunk)), columns=FACT_COLUMNS))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=FACT_COLUMNS)


def put_call_replies(session: Session, rows: list[tuple[str, str]]) -> None:
    """Keep failed calls' raw replies (reply, call key) with their facts (written just before)."""
    for row in rows:  # failures are few; a success's reply is in the call cache
        _raw_rows_write(session, "UPDATE callfact SET reply = ? WHERE call_key = ?", row)


def call_replies(session: Session, keys: Iterable[str]) -> dict[str, str]:
    """call key -> the raw reply kept with a failed call's facts."""
    keys = sorted(set(k for k in keys if k))
    out: dict[str, str] = {}
    for i in range(0, len(keys), 900):
        chunk = keys[i : i + 900]
        sql = f"SELECT call_key, reply FROM callfact WHERE reply IS NOT NULL AND call_key IN ({', '.join('?' * len(chunk))})"
        out.update(dict(_raw_rows(session, sql, tuple(chunk))))
    return out


def run_call_facts(session: Session, run_id: int) -> pd.DataFrame:
    """Per-call facts of the calls a run made itself."""
    sql = f"SELECT {', '.join(FACT_COLUMNS)} FROM callfact WHERE run_id = ? ORDER BY call_key"
    return pd.DataFrame(_raw_rows(session, sql, (run_id,)), columns=FACT_COLUMNS)


def run_peers(session: Session, run_id: int) -> list[str]:
    """The addresses (address:port) a run's own calls connected to, sorted."""
    sql = "SELECT DISTINCT peer FROM callfact WHERE run_id = ? AND peer IS NOT NULL ORDER BY peer"
    return [row[0] for row in _raw_rows(session, sql, (run_id,))]


def model_call_history(
    session: Session, model: str, limit: int = 2000, settings: dict | None = None
) -> list[tuple[float, int]]:
    """(latency_s, completion_tokens) of this model's most recent successful calls (for an estimate); with
    settings, only calls of runs whose recorded parameters have the same value for each of its keys (another
    server, max_tokens or JSON mode answers at another speed)."""
    sql = (
        "SELECT f.latency_s, f.completion_tokens, r.params_json FROM callfact f JOIN run r ON r.id = f.run_id "
        "WHERE r.model = ? AND f.completion_tokens > 0 ORDER BY f.created_at DESC"
    )
    out: list[tuple[float, int]] = []
    same: dict[str, bool] = {}
    for latency, tokens, params_json in _raw_rows(session, sql, (model,)):
        if settings and params_json not in same:
            params = json.loads(params_json or "{}")
            same[params_json] = all(params.get(k) == v for k, v in settings.items())
        if not settings or same[params_json]:
            out.append((float(latency), int(tokens)))
            if len(out) >= limit:
                break
    return out


NOISE_COLUMNS = ["run_id", "measurement", "report_id", "label", "repeat", "seed", "original", "value", "status"]


def next_noise_measurement(session: Session, run_id: int) -> int:
    """The number of a run's next noise measurement (1 for the first)."""
    rows = _raw_rows(session, "SELECT MAX(measurement) FROM noiserepeat WHERE run_id = ?", (run_id,))
    return int(rows[0][0] or 0) + 1 if rows else 1


def put_noise_repeats(session: Session, rows: list[tuple]) -> None:
    """Store repeated answers (tuples in NOISE_COLUMNS order)."""
    if rows:
        created = now()
        _raw_insert(session, "noiserepeat", [*NOISE_COLUMNS, "created_at"], [(*r, created) for r in rows])


def noise_repeats(session: Session, run_ids: Iterable[int]) -> pd.DataFrame:
    """Every repeated answer of the given runs' noise measurements."""
    ids = sorted(set(int(r) for r in run_ids))
    if not ids:
        return pd.DataFrame(columns=NOISE_COLUMNS)
    sql = (
        f"SELECT {', '.join(NOISE_COLUMNS)} FROM noiserepeat WHERE run_id IN ({', '.join('?' * len(ids))}) ORDER BY id"
    )
    return pd.DataFrame(_raw_rows(session, sql, tuple(ids)), columns=NOISE_COLUMNS)


# ---------------------------------------------------------------- the reference a run was scored against


def put_run_scoring(session: Session, run_id: int, scored_at: str, counts: dict) -> None:
    """Record a run's first scoring (kept as it was: later changes of the reference are measured against it)."""
    if session.get(RunScoring, run_id) is None:
        session.add(RunScoring(run_id=run_id, scored_at=scored_at, counts_json=json.dumps(counts)))


def run_scorings(session: Session, run_ids: list[int]) -> dict[int, tuple[str, dict]]:
    """run id -> (when it was first scored, {label: [tp, fp, fn, tn]} then)."""
    if not run_ids:
        return {}
    rows = session.execute(select(RunScoring).where(RunScoring.run_id.in_(run_ids))).scalars().all()
    return {r.run_id: (r.scored_at, json.loads(r.counts_json)) for r in rows}


def reference_changes_since(session: Session, cohort_id: int, since: str) -> dict[str, int]:
    """Adjudications made and readings changed on a cohort's reports after a moment."""
    in_cohort = select(Report.id).where(Report.cohort_id == cohort_id)
    adjudications = session.execute(
        select(func.count())
        .select_from(Adjudication)
        .where(Adjudication.created_at > since, Adjudication.report_id.in_(in_cohort))
    ).scalar_one()
    readings = session.execute(
        select(func.count()).select_from(Reading).where(Reading.updated_at > since, Reading.report_id.in_(in_cohort))
    ).scalar_one()
    return {"adjudications": int(adjudications), "readings": int(readings)}


# ---------------------------------------------------------------- adaptive reading (services/adaptive.py)


ADAPTIVE_LOCK = 7_212_017  # PostgreSQL advisory lock class: one adaptive-reading writer per cohort at a time


def lock_adaptive(session: Session, cohort_id: int) -> None:
    """Serialise the claims and progress of one cohort (SQLite's write transactions already are)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k, :c)"), {"k": ADAPTIVE_LOCK, "c": cohort_id})


def agreement_sample_ids(session: Session, cohort_id: int | None = None, among: list[str] | None = None) -> set[str]:
    """Report ids in the agreement sample (of one cohort, or of every cohort; only those `among` when given)."""
    sql, params = "SELECT report_id FROM agreementsample", []
    if cohort_id is not None:
        sql, params = sql + " WHERE cohort_id = ?", [cohort_id]
    if among is not None:
        if not among:
            return set()
        sql += (" AND" if params else " WHERE") + f" report_id IN ({', '.join('?' * len(among))})"
        params += list(among)
    return {r[0] for r in _raw_rows(session, sql, tuple(params))}


def put_agreement_sample(
    session: Session, cohort_id: int, report_ids_: list[str], seed: int, share: float, run_id: int | None, actor: str
) -> None:
    """Record a cohort's agreement sample."""
    stamp = now()
    _bulk_insert(
        session,
        AgreementSample,
        [
            {
                "report_id": r,
                "cohort_id": cohort_id,
                "seed": seed,
                "share": share,
                "run_id": run_id,
                "drawn_by": actor,
                "drawn_at": stamp,
            }
            for r in report_ids_
        ],
    )


def count_sample_readings(session: Session, cohort_id: int) -> int:
    """How many readings the reports of a cohort's agreement sample have."""
    rows = _raw_rows(
        session,
        "SELECT COUNT(*) FROM reading r JOIN agreementsample g ON g.report_id = r.report_id WHERE g.cohort_id = ?",
        (cohort_id,),
    )
    return int(rows[0][0])


def delete_agreement_sample(session: Session, cohort_id: int) -> None:
    """Forget a cohort's agreement sample (before it is drawn again; only while none of it has been read)."""
    _raw_rows_write(session, "DELETE FROM agreementsample WHERE cohort_id = ?", (cohort_id,))


def put_report_progress(session: Session, cohort_id: int, frame: pd.DataFrame, replace: bool = False) -> None:
    """Store per-report progress rows (report_id, open, tie, readers, cap); replace=True: the cohort's whole table."""
    if replace:
        _raw_rows_write(session, "DELETE FROM reportprogress WHERE cohort_id = ?", (cohort_id,))
    stamp = now()
    rows = [
        (r, cohort_id, bool(o), bool(t), int(n), int(c), stamp)
        for r, o, t, n, c in zip(
            frame["report_id"], frame["open"], frame["tie"], frame["readers"], frame["cap"], strict=False
        )
    ]
    _raw_insert(
        session,
        "reportprogress",
        ["report_id", "cohort_id", "open", "tie", "readers", "cap", "updated_at"],
        rows,
        "ON CONFLICT (report_id) DO UPDATE SET open = excluded.open, tie = excluded.tie, readers = excluded.readers, "
        "cap = excluded.cap, updated_at = excluded.updated_at",
        key=1,
    )


def report_progress(session: Session, cohort_id: int) -> pd.DataFrame:
    """A cohort's per-report progress rows."""
    rows = _raw_rows(
        session, "SELECT report_id, open, tie, readers, cap FROM reportprogress WHERE cohort_id = ?", (cohort_id,)
    )
    frame = pd.DataFrame(rows, columns=["report_id", "open", "tie", "readers", "cap"])
    return frame.astype({"open": bool, "tie": bool})


def put_claims(
    session: Session, cohort_id: int, pairs: list[tuple[str, str]], done: bool, expires_at: str = ""
) -> None:
    """Give (report, reader) pairs to readers (done=False, until expires_at) or mark them read (done=True)."""
    if not pairs:
        return
    stamp = db_stamp(session)  # claims expire by the database's clock: readers' machines disagree
    keep_done = "readingclaim.done OR excluded.done" if not done else "excluded.done"
    rows = [(cohort_id, r, d, done, stamp, expires_at or stamp) for r, d in dict.fromkeys(pairs)]
    _raw_insert(
        session,
        "readingclaim",
        ["cohort_id", "report_id", "reader_id", "done", "claimed_at", "expires_at"],
        rows,
        f"ON CONFLICT (report_id, reader_id) DO UPDATE SET done = {keep_done}, "
        "claimed_at = excluded.claimed_at, expires_at = excluded.expires_at",
    )


_OFFER_ORDER = {  # core/adaptive.py's reading_order, in SQL
    "finish": "CASE WHEN g.report_id IS NOT NULL THEN 1 WHEN p.readers > 0 THEN 0 ELSE 2 END, p.readers DESC, r.seq",
    "cohort": "r.seq",
}


def first_offered(
    session: Session, cohort_id: int, reader: str, stamp: str, order: str, report_id: str | None = None
) -> str | None:
    """The first report core.adaptive.offered gives this reader, in reading order, found by the database
    (one row back instead of the cohort's candidates: the next-report hot path); with report_id, that report
    when it is offered to the reader, else None."""
    one = " AND p.report_id = ?" if report_id is not None else ""
    sql = (
        "SELECT p.report_id FROM reportprogress p JOIN report r ON r.id = p.report_id "
        "LEFT JOIN agreementsample g ON g.report_id = p.report_id "
        "LEFT JOIN readingclaim m ON m.report_id = p.report_id AND m.reader_id = ? "
        "LEFT JOIN (SELECT report_id, COUNT(*) AS n FROM readingclaim WHERE cohort_id = ? AND done = FALSE "
        "AND expires_at > ? AND reader_id <> ? GROUP BY report_id) f ON f.report_id = p.report_id "
        "WHERE p.cohort_id = ? AND p.open = TRUE AND m.report_id IS NULL AND p.readers + COALESCE(f.n, 0) < p.cap "
        f"AND (g.report_id IS NOT NULL OR COALESCE(f.n, 0) = 0){one} ORDER BY {_OFFER_ORDER[order]} LIMIT 1"
    )
    params = (reader, cohort_id, stamp, reader, cohort_id) + ((report_id,) if report_id is not None else ())
    rows = _raw_rows(session, sql, params)
    return rows[0][0] if rows else None


_IN_FLIGHT = (
    "LEFT JOIN (SELECT report_id, COUNT(*) AS n FROM readingclaim WHERE cohort_id = ? AND done = FALSE "
    "AND expires_at > ? AND reader_id <> ? GROUP BY report_id) f ON f.report_id = p.report_id "
)


def own_claim(session: Session, cohort_id: int, reader: str, stamp: str, report_id: str | None = None) -> str | None:
    """The reader's own unread claim that services/adaptive.py's _pick gives back (an open report with room,
    live or held by nobody else), first in cohort order; found by the database like first_offered (with
    report_id: that claim only)."""
    one = " AND m.report_id = ?" if report_id is not None else ""
    sql = (
        "SELECT p.report_id FROM readingclaim m JOIN reportprogress p ON p.report_id = m.report_id "
        "JOIN report r ON r.id = p.report_id "
        + _IN_FLIGHT
        + "WHERE m.cohort_id = ? AND m.reader_id = ? AND m.done = FALSE AND p.open = TRUE "
        f"AND (m.expires_at > ? OR COALESCE(f.n, 0) = 0) AND p.readers + COALESCE(f.n, 0) < p.cap{one} "
        "ORDER BY r.seq LIMIT 1"
    )
    params = (cohort_id, stamp, reader, cohort_id, reader, stamp) + ((report_id,) if report_id is not None else ())
    rows = _raw_rows(session, sql, params)
    return rows[0][0] if rows else None


def has_open_claim(session: Session, cohort_id: int, reader: str) -> bool:
    """Whether a reader holds a claim on a report of the cohort they have not read yet."""
    rows = _raw_rows(
        session,
        "SELECT 1 FROM readingclaim WHERE cohort_id = ? AND reader_id = ? AND done = FALSE LIMIT 1",
        (cohort_id, reader),
    )
    return bool(rows)


def adaptive_candidates(session: Session, cohort_id: int, reader: str, stamp: str) -> pd.DataFrame:
    """Per report of a cohort: seq, open, readers, cap, sample, and for this reader: mine (read or claimed),
    done, expires_at; in_flight = other readers' live claims. One query over the cohort's progress rows."""
    sql = (
        "SELECT p.report_id, r.seq, p.open, p.readers, p.cap, g.report_id IS NOT NULL, m.report_id IS NOT NULL, "
        "COALESCE(m.done, FALSE), COALESCE(m.expires_at, ''), COALESCE(f.n, 0) "
        "FROM reportprogress p JOIN report r ON r.id = p.report_id "
        "LEFT JOIN agreementsample g ON g.report_id = p.report_id "
        "LEFT JOIN readingclaim m ON m.report_id = p.report_id AND m.reader_id = ? "
        "LEFT JOIN (SELECT report_id, COUNT(*) AS n FROM readingclaim WHERE cohort_id = ? AND done = FALSE "
        "AND expires_at > ? AND reader_id <> ? GROUP BY report_id) f ON f.report_id = p.report_id "
        "WHERE p.cohort_id = ?"
    )
    rows = _raw_rows(session, sql, (reader, cohort_id, stamp, reader, cohort_id))
    frame = pd.DataFrame(
        rows,
        columns=["report_id", "seq", "open", "readers", "cap", "sample", "mine", "done", "expires_at", "in_flight"],
    )
    return frame.astype(
        {"open": bool, "sample": bool, "mine": bool, "done": bool, "readers": int, "cap": int, "in_flight": int}
    )


def cohort_id_named(session: Session, name: str) -> int | None:
    """A cohort's id by name, on the DBAPI cursor (the next-report hot path; get_cohort builds an ORM row)."""
    rows = _raw_rows(session, "SELECT id FROM cohort WHERE name = ?", (name,))
    return int(rows[0][0]) if rows else None


def adaptive_facts(session: Session, cohort_id: int, reader: str) -> dict:
    """What next_report checks before choosing, in one round trip: the sample and progress meta values, the
    cohort's report count, whether it has work lists and whether the reader holds an unread claim."""
    rows = _raw_rows(
        session,
        "SELECT (SELECT value FROM meta WHERE key = ?), (SELECT value FROM meta WHERE key = ?), "
        "(SELECT COUNT(*) FROM report WHERE cohort_id = ?), "
        "(SELECT COUNT(*) FROM worklist WHERE cohort_id = ?), "
        "(SELECT COUNT(*) FROM (SELECT 1 FROM readingclaim WHERE cohort_id = ? AND reader_id = ? "
        "AND done = FALSE LIMIT 1) c)",
        (f"adaptive_sample:{cohort_id}", f"adaptive_progress:{cohort_id}", cohort_id, cohort_id, cohort_id, reader),
    )
    sample, progress, reports, work_list, claim = rows[0]
    return {
        "sample": sample,
        "progress": progress,
        "reports": int(reports),
        "work_list": bool(work_list),
        "open_claim": bool(claim),
    }


def reader_pairs(session: Session, cohort_id: int) -> list[tuple[str, str]]:
    """(report, reader) pairs with at least one reading in a cohort."""
    rows = _raw_rows(
        session,
        "SELECT DISTINCT r.report_id, r.reader_id FROM reading r JOIN report p ON p.id = r.report_id "
        "WHERE p.cohort_id = ?",
        (cohort_id,),
    )
    return [(a, b) for a, b in rows]


def count_cohort_reports(session: Session, cohort_id: int) -> int:
    """How many reports a cohort has."""
    return int(_raw_rows(session, "SELECT COUNT(*) FROM report WHERE cohort_id = ?", (cohort_id,))[0][0])


def report_cohorts(session: Session, report_ids_: list[str]) -> dict[str, int]:
    """report id -> cohort id."""
    out: dict[str, int] = {}
    for i in range(0, len(report_ids_), 900):
        out.update(
            dict(
                session.execute(
                    select(Report.id, Report.cohort_id).where(Report.id.in_(report_ids_[i : i + 900]))
                ).all()
            )
        )
    return out


# ---------------------------------------------------------------- the engineer's view of a case, and search

CASE_COLUMNS = ["run_id", "label", *Answer.COLUMNS, "call_key"]


def report_predictions(session: Session, report_id: str, label: str | None = None) -> pd.DataFrame:
    """Every run's predictions for one report (optionally one label), oldest run first."""
    sql = f"SELECT {', '.join(CASE_COLUMNS)} FROM prediction WHERE report_id = ?"
    params: list = [report_id]
    if label is not None:
        sql += " AND label = ?"
        params.append(label)
    rows = _raw_rows(session, sql + " ORDER BY run_id, label", tuple(params))
    return pd.DataFrame(rows, columns=CASE_COLUMNS)


SEARCH_TEXT = {"evidence": "p.evidence", "answer": "COALESCE(c.response, p.detail)", "report": "''"}


def search_rows(
    session: Session,
    run_id: int,
    field: str,
    like: str | None = None,
    label: str | None = None,
    report_ids: list[str] | None = None,
) -> pd.DataFrame:
    """A run's (report_id, label, value, status, text) rows, text being the evidence or the raw answer (the call
    cache's reply; a failure's detail, which quotes it); like: a lower-case LIKE pattern the text must match
    (a prefilter run in the database); report_ids: only these reports."""
    text = SEARCH_TEXT[field]
    join = " LEFT JOIN callcache c ON c.key = p.call_key" if field == "answer" else ""
    sql = f"SELECT p.report_id, p.label, p.value, p.status, {text} FROM prediction p{join} WHERE p.run_id = ?"
    params: list = [run_id]
    if like is not None:
        sql += f" AND lower({text}) LIKE ? ESCAPE '!'"
        params.append(like)
    if label is not None:
        sql += " AND p.label = ?"
        params.append(label)
    columns = ["report_id", "label", "value", "status", "text"]
    if report_ids is None:
        return pd.DataFrame(_raw_rows(session, sql, tuple(params)), columns=columns)
    frames = [pd.DataFrame(columns=columns)]
    for i in range(0, len(report_ids), 900):  # SQLite's bound-parameter limit
        chunk = report_ids[i : i + 900]
        rows = _raw_rows(session, sql + f" AND p.report_id IN ({', '.join('?' * len(chunk))})", (*params, *chunk))
        frames.append(pd.DataFrame(rows, columns=columns))
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------- batch jobs (workbench/labeller/batch.py)

BATCH_ENDED = ("failed", "expired", "cancelled", "collected")  # a job in one of these is never polled again


def add_batch_job(session: Session, **fields) -> None:
    """Record a provider batch job the moment it is created (before it is polled)."""
    stamp = now()
    session.add(BatchJob(**fields, created_at=stamp, updated_at=stamp))


def pending_batch_job(session: Session, scope: str) -> dict | None:
    """The newest batch job of a scope that has not ended (still to poll or to collect), as a dict; None when none."""
    row = (
        session.execute(
            select(BatchJob)
            .where(BatchJob.scope == scope, BatchJob.status.not_in(BATCH_ENDED))
            .order_by(BatchJob.id.desc())
        )
        .scalars()
        .first()
    )
    return None if row is None else row.model_dump()


def update_batch_job(session: Session, batch_id: str, **fields) -> None:
    """Set a batch job's status or file ids."""
    session.execute(update(BatchJob).where(BatchJob.batch_id == batch_id).values(**fields, updated_at=now()))


def batch_jobs(session: Session, run_id: int) -> pd.DataFrame:
    """A run's batch jobs, oldest first."""
    cols = ["batch_id", "input_file_id", "output_file_id", "status", "requests", "created_at", "updated_at"]
    stmt = select(*(getattr(BatchJob, c) for c in cols)).where(BatchJob.run_id == run_id).order_by(BatchJob.id)
    return _frame(session, stmt, cols)
