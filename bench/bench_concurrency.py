"""Stress: N concurrent simulated users x M writes each (readings through the services layer),
on SQLite and on PostgreSQL; verifies zero lost writes by counting and prints the throughput.

    python bench/bench_concurrency.py [--users 20 --writes 500] [--pg-url postgresql+psycopg://...]
    python bench/bench_concurrency.py --signin [--processes 8 --seconds 60] [--pg-url ...]

--signin is the team case of issue 34: separate processes, each signing in with a password and then writing
error notes, adjudications and readings as that user, for a fixed time; it counts writes and failures, on
SQLite and on PostgreSQL (a fresh database on the --pg-url server).

Without --pg-url it starts a throwaway PostgreSQL server when the binaries exist (tests/pg.py).
"""

from __future__ import annotations

import argparse
import contextlib
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


def _signin_worker(root: str, k: int, seconds: float, out) -> None:
    """One process: sign in, write a note, an adjudication and a reading, repeat until the time is up."""
    from workbench.services import Workbench

    wb = Workbench(Path(root))
    me = f"dr-{k:02d}"
    counts = {"ok": 0, "failed": 0, "first": ""}
    labels = wb.vocab.asked_ids
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        i += 1
        report, label = f"r{i % 200:05d}", labels[(i + k) % len(labels)]
        signed = _counted(counts, wb.authenticate, me, f"{me}-password-0001")
        if signed is None:
            continue
        user = wb.as_actor(signed)
        _counted(counts, user.add_note, report, label, "hedging/uncertainty", "does not change management", f"n{i}")
        _counted(counts, user.adjudicate, report, label, i % 2, f"reason {i}")
        _counted(counts, user.record_reading, me, report, {label: i % 2})
    out.put((counts["ok"], counts["failed"], counts["first"]))


def _counted(counts: dict, write, *args):
    """One write, counted as done or failed (the first failure kept)."""
    try:
        result = write(*args)
    except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
        counts["failed"] += 1
        counts["first"] = counts["first"] or repr(exc)[:300]
        return None
    counts["ok"] += 1
    return result if result is not None else True


def signin_stress(db_url: str | None, processes: int, seconds: float) -> dict:
    """N processes signing in and writing for a fixed time; counts writes and failures."""
    import multiprocessing as mp

    tmp = Path(tempfile.mkdtemp())
    wb = init_study(tmp / "study", vocab="ranscore-21", db_url=db_url)
    wb.import_reports(make_reports(tmp, 200), "dev")
    wb.add_user("boss", "admin", "boss-password-0001")
    for k in range(processes):
        wb.add_user(f"dr-{k:02d}", "adjudicator", f"dr-{k:02d}-password-0001")
    wb.engine.dispose()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_signin_worker, args=(str(tmp / "study"), k, seconds, out)) for k in range(processes)]
    t0 = time.perf_counter()
    [p.start() for p in procs]
    results = [out.get() for _ in procs]
    [p.join() for p in procs]
    ok, failed = sum(r[0] for r in results), sum(r[1] for r in results)
    return {
        "backend": "postgresql" if db_url else "sqlite",
        "processes": processes,
        "seconds": time.perf_counter() - t0,
        "writes": ok,
        "failed": failed,
        "failed_share": failed / max(1, ok + failed),
        "first_error": next((r[2] for r in results if r[2]), ""),
    }


@contextlib.contextmanager
def postgres(pg_url: str | None):
    """A maker of fresh PostgreSQL databases on pg_url's server (a throwaway server without one); None when
    there is no PostgreSQL."""
    server = None
    if pg_url is None:
        try:
            from pg import Server

            server = Server().start()
            pg_url = server.base_url()
        except (FileNotFoundError, OSError) as exc:
            print(f"PostgreSQL skipped: {exc}")
    try:
        if pg_url is None:
            yield None
            return
        from pg import fresh_database

        yield lambda: fresh_database(pg_url)
    finally:
        if server:
            server.stop()


def main() -> None:
    """Run on SQLite and PostgreSQL and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--pg-url", default=None)
    parser.add_argument("--signin", action="store_true", help="The sign-in team case (processes x seconds).")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    if args.signin:
        results = [signin_stress(None, args.processes, args.seconds)]
        with postgres(args.pg_url) as fresh:
            if fresh:
                results.append(signin_stress(fresh(), args.processes, args.seconds))
        for r in results:
            print(
                f"{r['backend']:10s} sign-in: {r['processes']} processes for {r['seconds']:.0f} s: {r['writes']:,} writes, "
                f"{r['failed']:,} failed ({r['failed_share']:.1%})"
            )
            if r["first_error"]:
                print("   first error:", r["first_error"])
        return
    results = [stress(None, args.users, args.writes)]
    with postgres(args.pg_url) as fresh:
        if fresh:
            results.append(stress(fresh(), args.users, args.writes))
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
