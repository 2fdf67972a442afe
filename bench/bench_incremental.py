"""What does a re-run cost after editing one label's prompt? (the call cache at work)

Builds a generated study (bench/synthetic.py: 300 reports, every one of its 21 labels asked),
labels it in per-label mode through real litellm and real HTTP against the fake OpenAI-compatible
server (tests/fake_llm_server.py, in its own process by default so that its threads do not
compete with the measured client for the GIL), edits one label's prompt (a new look-for phrase
for pleural effusion, committed to the study's Git repo) and labels the cohort again.

Prints the calls of the full run, the calls of the re-run (counted by the workbench and by the
server), their ratio beside the expected one (1 / asked labels: 1/21 here; 1/20 with the Ran
Score vocabulary, whose No Finding is derived) and both wall times. Exits 1 if the re-run made
any call that the edit did not change.

    python bench/bench_incremental.py [--reports 300 --latency 0.05 --concurrency 32 --in-process]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # fake_llm_server
sys.path.insert(0, str(ROOT / "bench"))  # synthetic
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

EDITED_LABEL = "pleural_effusion"
NEW_PHRASE = "blunting of the costophrenic angle"


class Server:
    """The fake server in a child process (default) or in this one; counts requests either way."""

    def __init__(self, latency: float, in_process: bool):
        self.proc = None
        self.fake = None
        if in_process:
            from fake_llm_server import FakeLLMServer

            self.fake = FakeLLMServer(latency=latency).start()
            self.url = self.fake.url
            return
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fake_llm_server.py"), "--latency", str(latency)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.stop()
            raise SystemExit(f"fake server did not start: {self.url!r}")

    def count(self) -> int:
        """Chat requests the server has answered so far."""
        if self.fake is not None:
            return self.fake.count
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as response:
            return int(json.load(response)["count"])

    def stop(self) -> None:
        if self.fake is not None:
            self.fake.stop()
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def build_study(folder: Path, n_reports: int):
    """The generated study with its reports imported into cohort 'dev'."""
    from synthetic import write_study_inputs

    from workbench.services import init_study

    inputs = write_study_inputs(folder / "inputs", n_reports=n_reports)
    wb = init_study(folder / "study", vocab=str(inputs["vocab"]), prompt_set=str(inputs["prompts"]))
    wb.import_reports(inputs["reports"], "dev")
    return wb


def edit_one_label(wb) -> str:
    """The edit a prompt engineer makes: one more look-for phrase for one label, as a new version."""
    lp = wb.label_prompt(EDITED_LABEL)
    edited = dataclasses.replace(lp, look_for=lp.look_for + (NEW_PHRASE,))
    return wb.save_prompts([edited], f"{EDITED_LABEL}: look for '{NEW_PHRASE}'", base_commit=wb.prompt_commit())


def timed_run(wb, server: Server, concurrency: int):
    """One run of cohort 'dev' through the server: (summary, wall seconds, server requests)."""
    wb.allow_endpoint(server.url.removesuffix("/v1"))  # a local server is allowed by its address and port
    before = server.count()
    start = time.perf_counter()
    summary = wb.start_run("dev", model="openai/fake", api_base=server.url, concurrency=concurrency)
    seconds = time.perf_counter() - start
    return summary, seconds, server.count() - before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=300, help="reports in the generated cohort")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the fake server waits per call")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight at once")
    parser.add_argument("--in-process", action="store_true", help="run the fake server in this process")
    args = parser.parse_args(argv)

    from workbench.labeller.llm import _litellm

    t0 = time.perf_counter()
    _litellm()  # imported once up front so that the first run's wall time is the run's
    import_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="wb-bench-incremental-") as tmp:
        wb = build_study(Path(tmp), args.reports)
        asked = len(wb.vocab.asked_ids)
        server = Server(args.latency, args.in_process)
        try:
            full, full_s, full_requests = timed_run(wb, server, args.concurrency)
            commit = edit_one_label(wb)
            rerun, rerun_s, rerun_requests = timed_run(wb, server, args.concurrency)
            again, again_s, again_requests = timed_run(wb, server, args.concurrency)
        finally:
            server.stop()

    ratio = rerun.calls_made / full.calls_made if full.calls_made else float("nan")
    expected = 1 / asked
    print(
        f"study: {args.reports} reports x {asked} asked labels (vocabulary {wb.vocab.id}), per-label mode; "
        f"fake server latency {args.latency * 1000:.0f} ms/call, concurrency {args.concurrency}, "
        f"server {'in this process' if args.in_process else 'in its own process'}; litellm import {import_s:.1f} s"
    )
    print(
        f"full run:                 {full.calls_made:6d} calls made ({full_requests} seen by the server), "
        f"{full.calls_reused} reused, {full.failures} failures, {full_s:7.2f} s wall "
        f"({full.calls_made / full_s:.0f} calls/s)"
    )
    print(
        f"edit {EDITED_LABEL} ({commit[:8]}), re-run: {rerun.calls_made:4d} calls made ({rerun_requests} seen by the server), "
        f"{rerun.calls_reused} reused, {rerun.failures} failures, {rerun_s:7.2f} s wall"
    )
    print(
        f"unchanged re-run:         {again.calls_made:6d} calls made ({again_requests} seen by the server), "
        f"{again.calls_reused} reused, {again_s:7.2f} s wall"
    )
    print(
        f"re-run calls / full-run calls = {ratio:.4f}; expected 1/{asked} = {expected:.4f} "
        f"(1/20 = 0.0500 with the Ran Score vocabulary, where No Finding is derived and not asked)"
    )
    print(f"re-run wall time / full-run wall time = {rerun_s / full_s:.4f}")
    ok = (
        rerun.calls_made == args.reports
        and rerun_requests == args.reports
        and again.calls_made == 0
        and full.failures == 0
        and rerun.failures == 0
    )
    print(
        "OK: only the edited label's calls were made"
        if ok
        else "MISMATCH: the re-run made calls the edit did not change"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
