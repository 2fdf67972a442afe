"""A real model's replies in every test run (issue 33): SmolLM2-135M-Instruct's requests and replies on the demo
study's synthetic reports, recorded once under llama.cpp (tests/data/real_model/replies.json, by
bench/record_real_replies.py) and replayed through the fake server, so the parsing, the failure kinds, the
case view and the metrics meet what a small model really says, without the model.

What it said: with the README's plain OpenAI-compatible recipe, prose about the finding and no JSON (cut off at
max_tokens, or ended); with json_mode and response_schema, JSON every time, whose "evidence" copies the
prompt's placeholder instead of quoting the report, and whose attributes name values the vocabulary does not have.
"""

from __future__ import annotations

import json

import pytest
from fake_llm_server import running_server
from real_replies import LABELS, REPORT_IDS, Replay, build_study, cli, recorded

N_CALLS = len(REPORT_IDS) * len(LABELS.split(","))


@pytest.fixture(scope="module", autouse=True)
def litellm_imported():
    """litellm's first import takes 5 s or more on a busy machine: keep it off every test's clock."""
    import litellm  # noqa: F401


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """Both recipes' studies labelled by the replayed model: {recipe: (study, the run's output)}."""
    replay = Replay()
    studies = {}
    with running_server(body_fn=replay, owned_by="me") as srv:  # the server as llama-cpp-python describes itself
        for recipe in ("plain", "json"):
            studies[recipe] = build_study(tmp_path_factory.mktemp(recipe), srv.url, recipe)
    assert not replay.missing, "requests with no recorded reply: the prompts changed; run bench/record_real_replies.py"
    return studies


def test_every_recorded_call_is_replayed():
    assert len(recorded()) == 2 * N_CALLS


def test_the_plain_recipe_fails_on_every_call_by_kind_with_hints_that_fit(replayed):
    _study, output = replayed["plain"]
    flat = " ".join(output.split())
    assert f"{N_CALLS} failures" in flat
    # the real replies: prose about the finding, cut off at max_tokens (7 of 8) or ended; none loops, and more
    # tokens would only buy more prose: no "raise max_tokens" hint (before: "truncated: 7 ... raise max_tokens")
    assert f"prose: {N_CALLS} call(s)" in flat
    assert "looping" not in flat and "truncated" not in flat and "raise labeller.max_tokens" not in flat
    assert "turn on labeller.json_mode or labeller.response_schema" in flat  # the prose hint names the fix


def test_the_case_view_keeps_the_raw_reply_of_a_failed_real_call(replayed):
    study, _ = replayed["plain"]
    case = json.loads(cli(study, "case", "demo-002", "--label", "cardiomegaly", "--format", "json"))
    column = case["columns"][0]
    assert column["status"] == "prose" and column["value"] is None
    assert column["call"]["reply"].startswith("The report describes cardiomegaly")  # the model's own words, kept
    assert column["call"]["finish_reason"] in ("length", "stop")


def test_json_mode_and_the_schema_give_json_on_every_call(replayed):
    study, output = replayed["json"]
    flat = " ".join(output.split())
    assert f"{N_CALLS} made, 0 answers reused from the cache, 0 already done, 0 failures" in flat
    assert "JSON schema sent as response_format to the server on this machine (llama-cpp-python)" in flat
    assert "concurrency 1 instead of 8" in flat


def test_made_up_evidence_is_counted_per_label(replayed):
    study, _ = replayed["json"]
    evidence = {e["label"]: e for e in json.loads(cli(study, "metrics", "1", "--format", "json"))["evidence"]}
    # the real replies quote the prompt's "<short summary of the report ...>" placeholder, never the report
    assert evidence["cardiomegaly"]["evidence_quoted"] == 4
    assert evidence["cardiomegaly"]["evidence_not_in_report"] == 4
    text = " ".join(cli(study, "metrics", "1").split())
    assert "evidence not in the report" in text and "cardiomegaly 4 of 4" in text


def test_metrics_of_a_run_whose_every_call_failed_count_no_evidence(replayed):
    study, _ = replayed["plain"]
    data = json.loads(cli(study, "metrics", "1", "--format", "json"))
    # found by the real_model tier: a run with no quoted evidence crashed `metrics` (KeyError 'label')
    assert [(e["evidence_quoted"], e["evidence_not_in_report"]) for e in data["evidence"]] == [(0, 0), (0, 0)]
    assert "evidence not in the report" not in cli(study, "metrics", "1")
