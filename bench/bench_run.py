"""How fast is `workbench run` end to end? The OpenI development run with the offline labeller.

Builds a study from the OpenI reports in ../shared/datasets (3,080 reports x 14 ChestX-ray14
labels = 43,120 calls; chestxray14 starter prompts; majority of one reader, the gold standard) on
SQLite and, when PostgreSQL server binaries are on the machine, on a throwaway PostgreSQL
server. For each it times, side by side in one run:

- a first run (every call made by the offline labeller, every answer written),
- a fully cached re-run (every answer from the call cache, predictions written again),
- the same first run through the CLI (`workbench run`, a fresh process: imports included).

Targets (issue 14): first run <= 5 s end to end (>= 600 reports/s), cached re-run <= 2 s.
Prints the load average at start; the machine is shared, so compare figures from one run. Under
each row, the workbench's own CPU seconds (this process for the in-process runs, the child for the
CLI): wall time on a busy machine is inflated by other processes, CPU time far less.

    python bench/bench_run.py [--no-postgres] [--reports N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # pg.py: the throwaway PostgreSQL server
DATASET = ROOT.parent / "shared" / "datasets" / "openi"
TARGET_FIRST_S, TARGET_CACHED_S = 5.0, 2.0


def build_study(folder: Path, db_url: str | None, n_reports: int | None):
    """A chestxray14 study with the OpenI reports (optionally the first N) as cohort 'dev'."""
    import pandas as pd

    from workbench.services import Workbench, init_study

    reports, labels = DATASET / "reports.csv", DATASET / "labels14.csv"
    if n_reports:  # the first N reports and their gold rows (filename = "CXR" + uid)
        kept = pd.read_csv(reports).head(n_reports)
        gold = pd.read_csv(labels)
        reports, labels = folder.parent / f"{folder.name}-reports.csv", folder.parent / f"{folder.name}-labels.csv"
        kept.to_csv(reports, index=False)
        gold[gold["filename"].isin("CXR" + kept["uid"].astype(str))].to_csv(labels, index=False)
    init_study(folder, vocab="chestxray14", db_url=db_url, rule={"rule": "majority", "n": 1})
    wb = Workbench(folder)
    wb.import_openi(reports, labels, "dev")
    return wb


def time_runs(folder: Path, db_url: str | None, n_reports: int | None) -> dict:
    """First run and fully cached re-run in this process, then a first run through the CLI."""
    wb = build_study(folder, db_url, n_reports)
    from workbench.labeller import rules

    rules.clear_caches()  # the labeller starts cold, as in a fresh process
    started, cpu = time.perf_counter(), time.process_time()
    first = wb.start_run("dev")
    first_s, first_cpu = time.perf_counter() - started, time.process_time() - cpu
    started, cpu = time.perf_counter(), time.process_time()
    cached = wb.start_run("dev")
    cached_s, cached_cpu = time.perf_counter() - started, time.process_time() - cpu
    assert first.calls_made == first.calls_total and cached.calls_reused == cached.calls_total, (first, cached)
    reports = len(wb.prediction_matrix(first.run_id))
    # the CLI on a second, identical study (no cache): what a user waits for, imports included
    cli_folder = folder.parent / (folder.name + "-cli")
    cli_db = None
    if db_url:
        from pg import fresh_database

        cli_db = fresh_database(db_url.rsplit("/", 1)[0] + "/postgres")
    build_study(cli_folder, cli_db, n_reports).engine.dispose()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # as on a user's machine, the package's bytecode is there (PYTHONDONTWRITEBYTECODE, set on developer
    # machines, would make the timed run recompile every workbench module first: ~0.3 s)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "workbench")], env=env, check=True)
    started, children = time.perf_counter(), _children_cpu()
    done = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "run", "--cohort", "dev", "--study", str(cli_folder)],
        env=env,
        capture_output=True,
        text=True,
    )
    cli_s, cli_cpu = time.perf_counter() - started, _children_cpu() - children
    if done.returncode != 0:
        raise SystemExit(f"workbench run failed ({done.returncode}): {done.stderr[-800:]}")
    return {
        "reports": reports,
        "calls": first.calls_total,
        "first_s": first_s,
        "cached_s": cached_s,
        "cli_s": cli_s,
        "first_cpu": first_cpu,
        "cached_cpu": cached_cpu,
        "cli_cpu": cli_cpu,
    }


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the CLI run)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def print_row(name: str, r: dict) -> None:
    """One database's figures with the targets beside them."""
    ok = lambda value, target: "met" if value <= target else "NOT met"  # noqa: E731
    print(
        f"{name:<11} {r['reports']:>7,} {r['calls']:>7,} {r['first_s']:>8.2f} s {r['reports'] / r['first_s']:>8,.0f}/s "
        f"{r['cached_s']:>8.2f} s {r['cli_s']:>8.2f} s   first {ok(r['cli_s'], TARGET_FIRST_S)}, "
        f"cached {ok(r['cached_s'], TARGET_CACHED_S)}"
    )
    print(
        f"{'  CPU':<11} {'':>7} {'':>7} {r['first_cpu']:>8.2f} s {'':>10} {r['cached_cpu']:>8.2f} s "
        f"{r['cli_cpu']:>8.2f} s   (the workbench's own CPU seconds: what load on the machine does not inflate; "
        "a database server's not included)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--reports", type=int, default=None, help="only the first N OpenI reports")
    args = parser.parse_args()
    if not (DATASET / "reports.csv").exists():
        raise SystemExit(f"OpenI dataset not found at {DATASET}; see ../shared/datasets/README.md")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    print(
        f"{'database':<11} {'reports':>7} {'calls':>7} {'first run':>10} {'speed':>10} {'cached':>10} {'CLI first':>10}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-run-"))
    try:
        print_row("SQLite", time_runs(tmp / "sqlite", None, args.reports))
        if args.no_postgres:
            return
        try:
            from pg import Server, fresh_database

            server = Server().start()
        except (FileNotFoundError, OSError, subprocess.CalledProcessError) as exc:
            print(f"PostgreSQL    skipped: {exc}")
            return
        try:
            print_row("PostgreSQL", time_runs(tmp / "pg", fresh_database(server.base_url()), args.reports))
        finally:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        "first run and cached re-run timed in-process (Workbench.start_run); 'CLI first' is `workbench run` "
        "in a fresh process on an identical study, imports included (the end-to-end target)."
    )


if __name__ == "__main__":
    main()
