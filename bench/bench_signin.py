"""Sign-in timing: does a failed sign-in take as long for an unknown user as for a known one?

Before, an unknown user failed in about 0.5 ms and a known one in about 600 ms (argon2), so an
attacker could list the accounts. Now unknown users are verified against a dummy argon2 hash.
Prints the median time of each kind of failure and their ratio (target: 0.8-1.25). Run alone:
``python bench/bench_signin.py [--repeats N]`` (failures are spread over many ids so the back-off
does not start).
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.services import PermissionDenied, init_study  # noqa: E402


def timed_failure(wb, user: str) -> float:
    """Seconds one failed sign-in takes."""
    start = time.perf_counter()
    with contextlib.suppress(PermissionDenied):
        wb.authenticate(user, "not-the-password-0")
    return time.perf_counter() - start


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wb = init_study(pathlib.Path(tmp) / "study")
        for i in range(args.repeats):
            wb.add_user(f"user-{i}", "admin", f"right-password-{i:04d}")
        timed_failure(wb, "warm-up")  # the dummy hash is made once per process
        known = [timed_failure(wb, f"user-{i}") for i in range(args.repeats)]
        unknown = [timed_failure(wb, f"nobody-{i}") for i in range(args.repeats)]
        wb.engine.dispose()
    k, u = statistics.median(known), statistics.median(unknown)
    print(f"failed sign-in, known user:   median {k * 1000:.1f} ms over {args.repeats}")
    print(f"failed sign-in, unknown user: median {u * 1000:.1f} ms over {args.repeats}")
    print(f"ratio unknown/known: {u / k:.2f} (target 0.8-1.25)")


if __name__ == "__main__":
    main()
