"""How long does a user wait for the command line? Cold starts of `workbench --help` and `metrics`.

Builds the demo study in a temporary folder (`workbench demo --no-app`), then times, as fresh
processes, `workbench --help` and `workbench metrics 1` on it: median and spread of 5 runs each
(imports included: that is what the user waits for). Targets (issue 14): --help <= 0.3 s,
metrics <= 1.0 s. Prints the load average at start; the machine is shared.

    python bench/bench_cli.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"--help": 0.3, "metrics 1": 1.0}


CPU = []  # CPU seconds (user + system) of each timed process: what a busy machine cannot inflate much


def timed(args: list[str], env: dict) -> float:
    """Wall seconds of one fresh `python -m workbench.cli ARGS` process (it must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "workbench.cli", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"workbench {' '.join(args)} failed ({done.returncode}): {done.stderr[-600:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # As on a user's machine, Python keeps compiled bytecode (the warm-up run writes it): a
    # developer's PYTHONDONTWRITEBYTECODE would make every run recompile the package (~0.15 s).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-cli-"))
    try:
        study = tmp / "demo"
        subprocess.run(
            [sys.executable, "-m", "workbench.cli", "demo", "--no-app", "--path", str(study)],
            env=env,
            check=True,
            capture_output=True,
        )
        commands = {"--help": ["--help"], "metrics 1": ["metrics", "1", "--study", str(study)]}
        for name, argv in commands.items():
            timed(argv, env)  # one warm-up: the OS file cache, as on a machine in daily use
            CPU.clear()
            runs = [timed(argv, env) for _ in range(args.repeat)]
            median = statistics.median(runs)
            verdict = "met" if median <= TARGETS[name] else "NOT met"
            print(
                f"workbench {name:<10} median {median:.2f} s (min {min(runs):.2f}, max {max(runs):.2f}, "
                f"{args.repeat} runs); target <= {TARGETS[name]:.1f} s: {verdict}; "
                f"CPU median {statistics.median(CPU):.2f} s"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
