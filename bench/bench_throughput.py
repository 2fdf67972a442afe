"""How fast does the engine label a cohort, and how much faster than a one-call-at-a-time loop?

Starts the fake OpenAI-compatible server (tests/fake_llm_server.py) in its own process with a
fixed latency per call (its own process so that its threads do not compete with the measured
client for the GIL), runs reports x labels calls through workbench.labeller.llm.complete_all, and
prints calls/s and efficiency = (calls x latency / concurrency) / wall time. Then it times a
plain sequential litellm.completion loop (what the released Ran Score extractor does) on a
sample and extrapolates to the same number of calls.

    python bench/bench_throughput.py [--reports 300 --labels 20 --latency 0.1 --concurrency 32]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SYSTEM = (
    "You are a thoracic radiologist labelling chest X-ray reports. For the finding named below, "
    "answer 1 when the report states it is present (including improving or small), 0 when it is "
    "absent, negated, resolved or not mentioned. Hedged wording such as 'cannot exclude' counts as "
    'described in the label\'s policy. Reply with JSON only: {"value": 0 or 1, "evidence": '
    '"the exact sentence from the report"}.'
)
FINDINGS = [
    "Small left pleural effusion.",
    "Heart size is normal.",
    "No pneumothorax.",
    "Mild bibasilar atelectasis.",
    "Right IJ central venous catheter tip in the SVC.",
    "No focal consolidation.",
    "Stable mild cardiomegaly.",
    "Degenerative changes of the spine.",
]

PREFIX_SLOTS = 16  # prompt prefixes the fake server's simulated prefix cache keeps (fewer than --labels)


def start_server(latency: float) -> tuple[subprocess.Popen, str]:
    """The fake server in a child process; returns it and its api_base."""
    script = ROOT / "tests" / "fake_llm_server.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), "--latency", str(latency), "--prefix-slots", str(PREFIX_SLOTS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise SystemExit(f"fake server did not start: {url!r}")
    return proc, url


def server_stats(url: str) -> dict:
    """Request counts and the most requests the server saw in flight at once."""
    with urllib.request.urlopen(url + "/stats", timeout=5) as response:
        return json.load(response)


def make_requests(n_reports: int, n_labels: int):
    """reports x labels chat requests of a realistic size."""
    from workbench.labeller.llm import CallRequest

    requests = []
    for r in range(n_reports):
        report = " ".join(FINDINGS[(r + k) % len(FINDINGS)] for k in range(6)) + f" (study {r})"
        for lab in range(n_labels):
            user = f"Label: finding_{lab}\nDefinition: finding number {lab}.\nReport: {report}"
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
            requests.append(
                CallRequest(
                    key=f"{r}:{lab}", messages=messages, meta={"mode": "per_label", "labels": [f"finding_{lab}"]}
                )
            )
    return requests


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished worker processes."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def bench_engine(url: str, args, workers: int = 1) -> dict:
    """Run every call through the engine (K worker processes when workers > 1); wall, CPU, outcomes."""
    from workbench.labeller.llm import ModelConfig, complete_all_sync
    from workbench.labeller.workers import complete_all_workers

    cfg = ModelConfig(
        args.model, api_base=url, concurrency=args.concurrency, timeout_s=30, max_tokens=64, workers=workers
    )
    from workbench.labeller.labelling import prefix_order

    complete_all_sync(make_requests(1, min(args.concurrency, 32)), cfg, lambda q, r: None)  # warm clients
    requests = prefix_order(make_requests(args.reports, args.labels))  # as label_calls sends them
    done = {"ok": 0, "failed": 0}

    def on_result(req, res) -> None:
        done["ok" if res.error is None else "failed"] += 1

    before = server_stats(url)
    cpu0, t0 = _cpu_s(), time.perf_counter()
    complete_all_workers(requests, cfg, on_result)  # one process when workers == 1
    wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
    stats = server_stats(url)
    return {
        "calls": len(requests),
        "wall": wall,
        "cpu": cpu,
        **done,
        "cached_share": cached_share(before, stats),
        "http": stats["count"] - before["count"],
        "max_in_flight": stats["max_in_flight"],
    }


def cached_share(before: dict, after: dict) -> float:
    """The share of prompt tokens the server's prefix cache served between two /stats readings."""
    prompt = after["prompt_tokens"] - before["prompt_tokens"]
    return (after["cached_tokens"] - before["cached_tokens"]) / prompt if prompt else 0.0


def bench_bare_litellm(url: str, args) -> dict:
    """A default-settings litellm.acompletion loop at the same concurrency: the CPU yardstick."""
    import asyncio

    import litellm

    requests = make_requests(args.reports, args.labels)[: args.bare_sample]

    async def go(batch) -> None:
        sem = asyncio.Semaphore(args.concurrency)

        async def one(req) -> None:
            async with sem:
                await litellm.acompletion(
                    model=args.model,
                    messages=req.messages,
                    api_base=url,
                    api_key="sk-no-key-needed",
                    temperature=0,
                    max_tokens=64,
                )

        await asyncio.gather(*(one(r) for r in batch))

    kept = litellm.turn_off_message_logging
    litellm.turn_off_message_logging = False  # litellm's default (the workbench turns it on)
    try:
        with litellm_defaults():
            asyncio.run(go(requests[: args.concurrency]))  # warm
            before = server_stats(url)
            cpu0, t0 = time.process_time(), time.perf_counter()
            asyncio.run(go(requests))
    finally:
        litellm.turn_off_message_logging = kept
    return {
        "calls": len(requests),
        "wall": time.perf_counter() - t0,
        "cpu": time.process_time() - cpu0,
        "cached_share": cached_share(before, server_stats(url)),
    }


def bench_sequential(url: str, sample: int, model: str) -> float:
    """Seconds per call of a plain for-loop of litellm.completion (no concurrency)."""
    from workbench.labeller.llm import _litellm

    litellm = _litellm()
    requests = make_requests(1, sample + 3)
    call = dict(
        model=model, api_base=url, api_key="sk-no-key-needed", temperature=0, seed=0, max_tokens=64, num_retries=0
    )
    with litellm_defaults():
        for req in requests[:3]:  # warm the sync client
            litellm.completion(messages=req.messages, **call)
        t0 = time.perf_counter()
        for req in requests[3:]:
            litellm.completion(messages=req.messages, **call)
    return (time.perf_counter() - t0) / sample


@contextlib.contextmanager
def litellm_defaults():
    """litellm as installed: the OpenAI SDK path for openai/ models (the workbench chooses litellm's own
    HTTP handler through an environment variable litellm reads at every call)."""
    kept = os.environ.pop("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", None)
    try:
        yield
    finally:
        if kept is not None:
            os.environ["EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER"] = kept


def print_efficiency(args) -> None:
    """The engine (one worker) against a slower server: how close to concurrency / latency it gets."""
    proc, url = start_server(args.efficiency_latency)
    try:
        slow = argparse.Namespace(**{**vars(args), "reports": args.efficiency_reports})
        res = bench_engine(url, slow, workers=1)
        ideal = res["calls"] * args.efficiency_latency / args.concurrency
        print(
            f"\nengine, 1 worker process, {args.efficiency_latency * 1000:.0f} ms per call: {res['calls']} calls, "
            f"concurrency {args.concurrency}, wall {res['wall']:.1f} s, ideal {ideal:.1f} s; "
            f"efficiency {ideal / res['wall']:.2f} (target >= 0.8); ok {res['ok']}, failed {res['failed']}"
        )
    finally:
        proc.terminate()
        proc.wait(5)


def main(argv: list[str] | None = None) -> None:
    """Run both benchmarks and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=300)
    parser.add_argument("--labels", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.1, help="server seconds per call")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sequential-sample", type=int, default=100, help="calls timed in the sequential loop")
    parser.add_argument(
        "--workers",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[1, 2],
        help="worker process counts to time, comma-separated (default 1,2)",
    )
    parser.add_argument("--bare-sample", type=int, default=1000, help="calls in the default litellm loop")
    parser.add_argument(
        "--efficiency-latency",
        type=float,
        default=0.3,
        help="server seconds per call of the efficiency pass (one worker, --efficiency-reports x "
        "--labels calls; 0 skips it)",
    )
    parser.add_argument("--efficiency-reports", type=int, default=150)
    parser.add_argument(
        "--model",
        default="openai/fake-qwen3-14b",
        help="litellm model string sent to the fake server (hosted_vllm/... is a cheaper path)",
    )
    args = parser.parse_args(argv)

    proc, url = start_server(args.latency)
    try:
        t0 = time.perf_counter()
        from workbench.labeller.llm import _litellm

        _litellm()
        print(f"litellm import: {time.perf_counter() - t0:.1f} s (once per process; kept out of the timings)")
        print(f"fake server: {url}, {args.latency * 1000:.0f} ms per call, separate process; model {args.model}")
        print(
            f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start "
            "(other processes on the cores lower every figure below)"
        )

        bare = bench_bare_litellm(url, args)
        bare_ms = 1000 * bare["cpu"] / bare["calls"]
        print(
            f"\ndefault litellm.acompletion loop ({bare['calls']} calls, concurrency {args.concurrency}): "
            f"client CPU {bare_ms:.2f} ms per call, {bare['calls'] / bare['wall']:.0f} calls/s; report by report, "
            f"so prompts interleave: prompt tokens served from the server's prefix cache {bare['cached_share']:.1%}"
        )
        walls = {}
        for workers in args.workers:
            res = bench_engine(url, args, workers)
            calls, wall = res["calls"], res["wall"]
            walls[workers] = wall
            ideal = calls * args.latency / args.concurrency
            cpu_ms = 1000 * res["cpu"] / calls
            print(
                f"\nengine, {workers} worker process{'es' if workers > 1 else ''}: {calls} calls "
                f"({args.reports} reports x {args.labels} labels), concurrency {args.concurrency}"
            )
            print(
                f"  wall {wall:.1f} s, {calls / wall:.0f} calls/s; ideal {ideal:.1f} s "
                f"({args.concurrency / args.latency:.0f} calls/s)"
            )
            print(f"  efficiency {ideal / wall:.2f} (target >= 0.8 at 300 ms per call)")
            print(
                f"  ok {res['ok']}, failed {res['failed']}, HTTP requests {res['http']}, "
                f"server max in flight {res['max_in_flight']}"
            )
            print(
                f"  calls sharing a label prompt sent together: prompt tokens served from the server's prefix cache "
                f"{res['cached_share']:.1%} (the server keeps {PREFIX_SLOTS} prompt prefixes)"
            )
            print(
                f"  client CPU {cpu_ms:.2f} ms per call (litellm + engine{' + workers' if workers > 1 else ''}), "
                f"{cpu_ms / bare_ms:.2f} of the default litellm loop (target <= 0.7)"
            )

        if args.efficiency_latency:
            print_efficiency(args)

        per_call = bench_sequential(url, args.sequential_sample, args.model)
        seq_total = per_call * calls
        print(
            f"\nsequential litellm.completion loop: {1000 * per_call:.1f} ms per call, timed on "
            f"{args.sequential_sample} calls and extrapolated to {calls}: {seq_total:.0f} s "
            f"({seq_total / 60:.1f} min)"
        )
        for workers, wall in walls.items():
            print(
                f"speed-up over the loop with {workers} worker process{'es' if workers > 1 else ''}: "
                f"{seq_total / wall:.1f}x (targets: >= 15x with one, >= 22x with two at 100 ms)"
            )
    finally:
        proc.terminate()
        proc.wait(5)


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    main()
