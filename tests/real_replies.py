"""The replay study: a few synthetic demo reports labelled by a real small model (SmolLM2-135M-Instruct under
llama.cpp), recorded once by bench/record_real_replies.py and replayed here through the fake server, so the
parsing, the failure kinds, the case view and the Disagreements page meet real model output in every test run.

The same recipe builds the study for the recording and for the replay: the requests must match byte for byte
(a request with no recorded reply is answered 404 with the command that records it again).
"""

from __future__ import annotations

import csv
import hashlib
import json
import pathlib

import yaml
from click.testing import CliRunner

from workbench.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "real_model" / "replies.json"
REPORT_IDS = ("demo-001", "demo-002", "demo-004", "demo-012")
LABELS = "cardiomegaly,pleural_effusion"
# a second recording with the plain recipe: labels the model answered beside, about another finding of the report
OTHER_FIXTURE = ROOT / "tests" / "data" / "real_model" / "replies_other_labels.json"
OTHER_LABELS = "pneumothorax,atelectasis"
# the README's plain recipe (prose and looping replies), and the recipe docs/models.md gives for llama.cpp
RECIPES = {
    "plain": {"max_tokens": 96},
    "json": {"max_tokens": 96, "json_mode": True, "response_schema": True},
}
MODEL = "openai/smollm2"


def subset(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The replay reports and their readings (from annotations/demo), written to folder."""
    demo = ROOT / "annotations" / "demo"
    with (demo / "reports.csv").open(encoding="utf-8", newline="") as f:
        reports = [r for r in csv.DictReader(f) if r["id"] in REPORT_IDS]
    with (demo / "readings.csv").open(encoding="utf-8", newline="") as f:
        readings = [r for r in csv.DictReader(f) if r["report_id"] in REPORT_IDS]
    folder.mkdir(parents=True, exist_ok=True)
    paths = (folder / "reports.csv", folder / "readings.csv")
    for path, rows in zip(paths, (reports, readings), strict=True):
        with path.open("w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return paths


def cli(study: pathlib.Path, *args: str, ok=(0,)) -> str:
    """One workbench command on the study, as typed; its output."""
    result = CliRunner().invoke(main, [*args, "--study", str(study)] if args[0] != "init" else list(args))
    assert result.exit_code in ok, (args, result.output, result.exception)
    return result.output


def build_study(
    folder: pathlib.Path, api_base: str, recipe: str, labels: str = LABELS, **extra
) -> tuple[pathlib.Path, str]:
    """The replay study in folder, labelled by the model at api_base with one recipe; (study, the run's output)."""
    study = folder / "study"
    reports, readings = subset(folder)
    cli(study, "init", str(study), "--vocab", "ranscore-21")
    cli(study, "import", "reports", str(reports), "--cohort", "dev")
    cli(study, "import", "readings", str(readings))
    conf = yaml.safe_load((study / "workbench.yaml").read_text())
    conf["labeller"].update({"model": MODEL, "api_base": api_base, "timeout_s": 3600, **RECIPES[recipe], **extra})
    (study / "workbench.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    return study, cli(study, "run", "--cohort", "dev", "--labels", labels, ok=(0, 3))


def request_key(body: dict) -> str:
    """What identifies a recorded call: its messages and response_format (the rest is the recipe's)."""
    wanted = {"messages": body.get("messages"), "response_format": body.get("response_format")}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()


def recorded(fixture: pathlib.Path = FIXTURE) -> dict[str, dict]:
    """request_key -> the recorded reply body."""
    calls = json.loads(fixture.read_text())["calls"]
    return {request_key(c["request"]): c["response"] for c in calls if c["status"] == 200}


class Replay:
    """A fake server's body_fn answering each request with its recorded reply body; misses are kept (a test
    asserts there are none) and answered with a reply that says how to record again."""

    def __init__(self, fixture: pathlib.Path = FIXTURE) -> None:
        self.calls, self.missing = recorded(fixture), []

    def __call__(self, body: dict, reply: str) -> dict:
        found = self.calls.get(request_key(body))
        if found is not None:
            return found
        from fake_llm_server import completion_body

        self.missing.append(body)
        note = "no recorded reply for this request: run bench/record_real_replies.py again"
        return completion_body(body.get("model", "fake"), note, body["messages"])
