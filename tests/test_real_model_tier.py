"""The real-model tier (issue 33): the replay study labelled by a real model server, when one is given.

Set WORKBENCH_REAL_MODEL_URL to its OpenAI-compatible base (e.g. http://127.0.0.1:8080/v1, llama.cpp or vLLM;
docs/models.md "A real model on your laptop" serves SmolLM2-135M-Instruct) and optionally WORKBENCH_REAL_MODEL
(default openai/smollm2); otherwise every test here skips with that reason. `.ci/run` does not build llama.cpp:
run `pytest -m real_model` where a server runs. A 135M model labels badly; these tests check that the path works
end to end (every call answered with a parsed 0/1, the server recognised, the figures printed), not its accuracy.
"""

from __future__ import annotations

import json
import os

import pytest
from real_replies import LABELS, REPORT_IDS, build_study, cli

from workbench.labeller.llm import ModelConfig, check_model, server_facts

URL = os.environ.get("WORKBENCH_REAL_MODEL_URL", "")
MODEL = os.environ.get("WORKBENCH_REAL_MODEL", "openai/smollm2")

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not URL, reason="no real model server: set WORKBENCH_REAL_MODEL_URL (docs/models.md)"),
]


def test_the_server_answers_and_says_what_it_is():
    cfg = ModelConfig(model=MODEL, api_base=URL, timeout_s=600)
    assert check_model(cfg).strip()
    facts = server_facts(cfg)
    assert facts.slots is None or facts.slots >= 1


def test_the_documented_recipe_labels_every_call_with_a_parsed_answer(tmp_path):
    study, output = build_study(tmp_path, URL, "json", model=MODEL)
    flat = " ".join(output.split())
    calls = len(REPORT_IDS) * len(LABELS.split(","))
    assert f"{calls} calls needed, {calls} made" in flat, output
    preds = json.loads(cli(study, "metrics", "1", "--format", "json"))
    assert preds["excluded"]["failed or missing predictions"] <= calls // 4, output  # json_mode: few failures
    assert {e["label"] for e in preds["evidence"]} == set(LABELS.split(","))
