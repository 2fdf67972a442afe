"""What does `--batch` cost the workbench itself? A run sent as one provider batch job beside the same
run made call by call, both against the fake OpenAI-compatible server on 127.0.0.1 (issue 25, item 5).

Builds two identical studies of N synthetic reports x 20 asked labels (per-label mode) on SQLite and
times, side by side: the normal run (concurrency 8) and the batch run (write the JSONL, upload, create,
poll every 50 ms, download, parse and store every answer). The fake server runs in this process and
answers instantly, so the figures are the workbench's client work (the server's included), not a
provider's queue time: a real batch takes minutes to hours. Prints wall and CPU seconds, the upload
size, and checks that both runs stored the same answers.

    python bench/bench_batch.py [--reports N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]
os.environ.setdefault("WORKBENCH_BATCH_POLL_S", "0.05")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=200)
    args = parser.parse_args()
    from fake_llm_server import running_server
    from synthetic import write_study_inputs

    from workbench.services import init_study

    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp, running_server(batch_polls=1) as server:
        inputs = write_study_inputs(Path(tmp) / "inputs", n_reports=args.reports)
        figures, answers = {}, {}
        for how in ("normal", "batch"):
            wb = init_study(Path(tmp) / how, vocab="ranscore-21")
            wb.import_reports(inputs["reports"], "dev")
            wb.allow_endpoint(server.origin)  # a local server is allowed by its address and port
            wall, cpu = time.perf_counter(), time.process_time()
            summary = wb.start_run("dev", model="openai/fake", api_base=server.url, batch=how == "batch")
            figures[how] = (summary.calls_made, time.perf_counter() - wall, time.process_time() - cpu)
            preds = wb.predictions(summary.run_id)
            answers[how] = sorted(zip(preds["report_id"], preds["label"], preds["value"].fillna(-1), strict=False))
        for how, (calls, wall, cpu) in figures.items():
            print(f"{how:>6}: {calls:,} calls in {wall:.1f} s wall, {cpu:.1f} s CPU ({calls / wall:,.0f} calls/s)")
        upload = sum(len(f["data"]) for f in server.files.values() if f["object"]["purpose"] == "batch")
        print(
            f"batch upload: {upload / 1e6:.1f} MB; chat calls during the batch run: {server.count - figures['normal'][0]}"
        )
        print(f"same answers: {answers['normal'] == answers['batch']}")


if __name__ == "__main__":
    main()
