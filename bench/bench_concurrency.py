"""Stress: N concurrent simulated users x M writes each (readings through the services layer),
on SQLite and on PostgreSQL; verifies zero lost writes by counting and prints the throughput.

    python bench/bench_concurrency.py [--users 20 --writes 500] [--pg-url postgresql+psycopg://...]

Without --pg-url it starts a throwaway PostgreSQL server when the binaries exist (tests/pg.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from workbench.services import ConflictError, init_study  # noqa: E402
from workbench.store import queries as q  # noqa: E402
from workbench.store.tables import AuditEvent, Reading  # noqa: E402


def make_reports(folder: Path, n: int) -> Path:
    """A reports file with n tiny reports."""
    path = folder / "reports.csv"
    path.write_text("id,text\n" + "".join(f"r{i:05d},Report {i}.\n" for i in range(n)))
    return path


def stress(db_url: str | None, users: int, writes: int) -> dict:
    """Run the stress and verify counts; returns the figures."""
    tmp = Path(tempfile.mkdtemp())
    wb = init_study(tmp / "study", vocab="ranscore-21", db_url=db_url)
    wb.import_reports(make_reports(tmp, writes), "dev")
    labels = wb.vocab.asked_ids
    conflicts, errors = [0], []
    lock = threading.Lock()

    def user(k: int) -> None:
        me = f"user-{k:02d}"
        for i in range(writes):
            report = f"r{i:05d}"
            label = labels[(i + k) % len(labels)]
            for _attempt in range(20):
                try:
                    wb.record_reading(me, report, {label: (i + k) % 2})
                    break
                except ConflictError:
                    with lock:
                        conflicts[0] += 1
                except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                    errors.append(repr(exc))
                    break

    threads = [threading.Thread(target=user, args=(k,)) for k in range(users)]
    t0 = time.perf_counter()
    [t.start() for t in threads]
    [t.join() for t in threads]
    seconds = time.perf_counter() - t0
    with wb.session() as s:
        stored = q.count_rows(s, Reading)
        audited = q.count_rows(s, AuditEvent)
    wb.engine.dispose()
    expected = users * writes
    return {
        "backend": "postgresql" if db_url else "sqlite",
        "users": users,
        "writes": expected,
        "stored": stored,
        "lost": expected - stored,
        "audit_events": audited - 1,
        "conflicts_retried": conflicts[0],
        "errors": len(errors),
        "first_error": errors[0] if errors else "",
        "seconds": seconds,
        "writes_per_second": expected / seconds,
    }


def main() -> None:
    """Run on SQLite and PostgreSQL and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--pg-url", default=None)
    args = parser.parse_args()
    results = [stress(None, args.users, args.writes)]
    server = None
    pg_url = args.pg_url
    if pg_url is None:
        try:
            from pg import Server

            server = Server().start()
            pg_url = server.base_url()
        except (FileNotFoundError, OSError) as exc:
            print(f"PostgreSQL skipped: {exc}")
    try:
        if pg_url:
            from pg import fresh_database

            results.append(stress(fresh_database(pg_url), args.users, args.writes))
    finally:
        if server:
            server.stop()
    for r in results:
        print(
            f"{r['backend']:10s} {r['users']} users x {r['writes'] // r['users']} writes: stored {r['stored']:,} of {r['writes']:,} "
            f"(lost {r['lost']}), errors {r['errors']}, conflicts retried {r['conflicts_retried']}, "
            f"{r['seconds']:.1f} s, {r['writes_per_second']:.0f} writes/s"
        )
        if r["first_error"]:
            print("   first error:", r["first_error"][:300])


if __name__ == "__main__":
    main()
