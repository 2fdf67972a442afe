"""The model path a team can trust with its budget (issue 25): estimates before a run, per-call facts,
reply shapes as data, the noise floor. Real HTTP through litellm to tests/fake_llm_server.py."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import store_noise
from fake_llm_server import running_server

from workbench.cli import main
from workbench.labeller import labelling
from workbench.services.model_path import NeedsConfirmation

SHAPES = json.loads((Path(__file__).parent / "data" / "reply_shapes.json").read_text())
KEYWORDS = {"pleural_effusion": ["effusion"], "pneumothorax": ["pneumothorax"], "consolidation": ["consolidation"]}


def remote(srv, model: str = "openai/fake", **extra) -> dict:
    """start_run keyword arguments for the fake server (quick failures, few retries)."""
    return {"model": model, "api_base": srv.url, "max_retries": 1, "timeout_s": 20, **extra}


def shaped(name: str):
    """A body_fn answering in a recorded reply shape, with the fake server's correct answer inside."""

    def body(request: dict, reply: str) -> dict:
        value = json.loads(reply).get("value", 0) if reply.startswith("{") else 0
        text = json.dumps(SHAPES[name]).replace("$ANSWER", reply.replace("\\", "\\\\").replace('"', '\\"'))
        return json.loads(text.replace("$VALUE", str(value)))

    return body


# ---------------------------------------------------------------- 1. estimates and the budget


def test_estimate_makes_no_model_call_and_counts_the_cache(small_study):
    wb = small_study
    with running_server() as srv:
        est = wb.estimate_run("dev", labels=["pleural_effusion"], **remote(srv, model="openai/gpt-4o-mini"))
        assert srv.count == 0  # no request reached the server
        assert (est.calls, est.cached, est.to_make) == (8, 0, 8)
        assert est.prompt_tokens > 8 * 50 and est.completion_tokens == 8 * 30
        assert est.cost is not None and est.cost > 0 and "litellm's price map" in est.how["cost"]
        wb.start_run("dev", labels=["pleural_effusion"], confirmed=True, **remote(srv, model="openai/gpt-4o-mini"))
        made = srv.count
        again = wb.estimate_run("dev", labels=["pleural_effusion"], **remote(srv, model="openai/gpt-4o-mini"))
        assert srv.count == made and (again.cached, again.to_make, again.cost) == (8, 0, 0.0)
        # now the model has recorded calls: their completion tokens and latency replace the assumptions
        other = wb.estimate_run("dev", labels=["pneumothorax"], **remote(srv, model="openai/gpt-4o-mini"))
        assert "recorded calls" in other.how["completion"] and "recorded calls" in other.how["time"]


def test_a_registered_price_and_an_unknown_one(small_study):
    wb = small_study
    with running_server() as srv:
        wb.config.allowed_endpoints.append("http://10.9.9.9:8000/v1")
        unknown = wb.estimate_run(
            "dev", labels=["pleural_effusion"], model="openai/some-new-model", api_base="http://10.9.9.9:8000/v1"
        )
        assert unknown.cost is None and "labeller.price" in unknown.how["cost"]
        wb.config.labeller["price"] = {"input_per_million": 1.0, "output_per_million": 2.0}
        priced = wb.estimate_run("dev", labels=["pleural_effusion"])  # the study's own model keeps its price
        assert priced.how["cost"].startswith("the study's registered price")
        assert srv.count == 0


def test_confirm_above_refuses_without_confirmation(small_study):
    wb = small_study
    with running_server() as srv:
        wb.config.labeller.update(confirm_above=0.000001)
        with pytest.raises(NeedsConfirmation, match="confirm_above"):
            wb.start_run("dev", labels=["pleural_effusion"], **remote(srv, model="openai/gpt-4o-mini"))
        assert srv.count == 0 and wb.runs().empty  # nothing sent, no run recorded
        done = wb.start_run(
            "dev", labels=["pleural_effusion"], confirmed=True, **remote(srv, model="openai/gpt-4o-mini")
        )
        assert done.status == "finished" and srv.count == 8
        wb.start_run("dev", labels=["pleural_effusion"])  # the offline labeller costs nothing: never asks


def test_cli_estimate_and_confirm(small_study):
    wb = small_study
    wb.config.labeller.update(confirm_above=0.000001)
    wb.save_config()
    runner = CliRunner()
    with running_server() as srv:
        args = [
            "run",
            "--study",
            str(wb.root),
            "--cohort",
            "dev",
            "--labels",
            "pleural_effusion",
            "--model",
            "openai/gpt-4o-mini",
            "--api-base",
            srv.url,
        ]
        out = runner.invoke(main, [*args, "--estimate"])
        assert out.exit_code == 0, out.output
        assert "8 to make" in out.output and "no model call was made" in out.output and srv.count == 0
        refused = runner.invoke(main, args)  # not a terminal: refused, never asked
        assert refused.exit_code == 2 and "confirm_above" in refused.output and srv.count == 0
        accepted = runner.invoke(main, [*args, "--yes"])
        assert accepted.exit_code == 0, accepted.output
        assert srv.count == 8 and re.search(
            r"tokens: [0-9,]+ prompt \+ [0-9,]+ completion; cost \$0\.", accepted.output
        )


# ---------------------------------------------------------------- 2 and 3. per-call facts, reply shapes


def run_shape(wb, srv, shape: str, model: str, **extra):
    """A one-label run against the fake server answering in a recorded shape."""
    srv.body_fn = shaped(shape)
    return wb.start_run("dev", labels=["pleural_effusion"], **remote(srv, model=model, **extra))


def test_reasoning_replies_parse_their_answer_and_keep_the_thinking_apart(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        for shape, model, thinking in (
            ("qwen3_think_vllm", "openai/qwen3-14b", "The question asks 0 or 1"),
            ("deepseek_r1_reasoning_content", "openai/deepseek-r1", "Okay, the user wants"),
        ):
            summary = run_shape(wb, srv, shape, model)
            assert (summary.status, summary.failures) == ("finished", 0), summary.failure_kinds
            preds = wb.predictions(summary.run_id)
            assert preds.set_index("report_id")["value"].to_dict()["s1"] in (0, 1)
            facts = wb.call_facts(summary.run_id)
            assert len(facts) == 8 and set(facts["finish_reason"]) == {"stop"}
            assert set(facts["reported_model"]) == {SHAPES[shape]["model"]}
            case = wb.case(summary.run_id, "s1", "pleural_effusion")
            assert case.call.reasoning.startswith(thinking)  # shown in the case view, never parsed
            assert "think>" not in (case.prediction["evidence"] or "")


def test_openai_json_mode_and_ollama_facts_are_recorded_and_summed_per_label(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        summary = run_shape(wb, srv, "openai_json_mode", "openai/gpt-4o-mini", json_mode=True)
        assert srv.bodies[-1]["response_format"] == {"type": "json_object"}
        facts = wb.call_facts(summary.run_id)
        assert set(facts["cached_tokens"]) == {1152} and set(facts["prompt_tokens"]) == {1290}
        assert (facts["cost"] > 0).all() and (facts["latency_s"] > 0).all()
        costs = wb.call_costs(summary.run_id).set_index("label")
        assert costs.loc["pleural_effusion", "calls"] == 8
        assert costs.loc["pleural_effusion", "cost_per_label"] == pytest.approx(facts["cost"].mean())
        assert costs.loc["pleural_effusion", "tokens_per_label"] == 1290 + 18
        ollama = run_shape(wb, srv, "ollama_openai_json", "openai/llama3.1:8b", json_mode=True)
        assert (ollama.failures, set(wb.call_facts(ollama.run_id)["reported_model"])) == (0, {"llama3.1:8b"})
        # a re-run reuses every answer: the case view shows the facts of the run that paid for them
        again = wb.start_run(
            "dev", labels=["pleural_effusion"], **remote(srv, model="openai/gpt-4o-mini", json_mode=True)
        )
        assert again.calls_made == 0
        call = wb.case(again.run_id, "s2", "pleural_effusion").call
        assert call.run_id == summary.run_id and call.cached_tokens == 1152
        assert wb.call_facts(again.run_id)["from_cache"].all()


def test_anthropic_text_replies_through_its_own_surface(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        summary = run_shape(wb, srv, "anthropic_text", "anthropic/claude-3-5-haiku-20241022")
        assert srv.count == 8 and (summary.failures, summary.status) == (0, "finished"), summary.causes()
        facts = wb.call_facts(summary.run_id)
        assert set(facts["reported_model"]) == {"claude-3-5-haiku-20241022"} and set(facts["finish_reason"]) == {"stop"}


def test_ollama_native_chat_sends_format_json_and_records_its_facts(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        srv.body_fn = shaped("ollama_native_format_json")
        base = srv.url.removesuffix("/v1")  # Ollama's own API sits at the root: /api/chat
        summary = wb.start_run(
            "dev",
            labels=["pleural_effusion"],
            json_mode=True,
            **{**remote(srv, model="ollama_chat/llama3.1:8b"), "api_base": base},
        )
        assert (summary.status, summary.failures) == ("finished", 0), summary.causes()
        assert srv.count == 8 and all(body["format"] == "json" for body in srv.bodies)  # Ollama's JSON mode
        assert all("response_format" not in body for body in srv.bodies)
        facts = wb.call_facts(summary.run_id)
        assert set(facts["prompt_tokens"]) == {402} and set(facts["completion_tokens"]) == {19}
        assert set(facts["finish_reason"]) == {"stop"} and (facts["latency_s"] > 0).all()
        srv.body_fn = None  # the same questions through the OpenAI surface: the same answers
        plain = wb.start_run("dev", labels=["pleural_effusion"], **remote(srv))
        answers = lambda run: wb.predictions(run).set_index("report_id")["value"].astype(int).to_dict()  # noqa: E731
        assert answers(summary.run_id) == answers(plain.run_id) and 0 < sum(answers(plain.run_id).values()) < 8


def test_truncated_and_refused_replies_are_their_own_failure_kinds_with_a_hint(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        cut = run_shape(wb, srv, "truncated_length", "openai/qwen3-14b")
        assert cut.failure_kinds == {"truncated": 8} and "raise labeller.max_tokens" in cut.causes()[0]
        assert set(wb.predictions(cut.run_id)["status"]) == {"truncated"}
        refused = run_shape(wb, srv, "openai_refusal", "openai/gpt-4o")
        assert refused.failure_kinds == {"refusal": 8} and "declined" in refused.causes()[0]
        assert "can't assist" in refused.failure_examples["refusal"]
        filtered = run_shape(wb, srv, "azure_content_filter", "openai/gpt-4o")  # Azure OpenAI's content filter
        assert filtered.failure_kinds == {"refusal": 8} and "content filter" in filtered.failure_examples["refusal"]
        srv.body_fn = None  # failures are never cached: a retry asks again and now gets answers
        assert wb.retry_failed(cut.run_id).failures == 0


def test_a_json_schema_is_sent_where_litellm_says_the_model_supports_it_or_the_server_is_local(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        ok = wb.start_run(
            "dev", labels=["pleural_effusion"], **remote(srv, model="openai/gpt-4o-mini", response_schema=True)
        )
        sent = srv.bodies[-1]["response_format"]
        assert ok.failures == 0 and sent["type"] == "json_schema"
        assert sent["json_schema"]["schema"]["properties"]["value"]["enum"] == [0, 1]
        srv.reset()
        plain = wb.start_run(
            "dev", labels=["pleural_effusion"], **remote(srv, model="openai/qwen3-14b", response_schema=True)
        )
        assert plain.failures == 0 and srv.count == 8
        # litellm does not list qwen3-14b, but the server is on this machine: sent (issue 33; before: not sent)
        assert all(body["response_format"]["type"] == "json_schema" for body in srv.bodies)
    remote_cfg = labelling.model_config(
        {"model": "openai/qwen3-14b", "api_base": "https://models.example.org/v1", "response_schema": True}
    )
    unchanged, how = labelling.with_response_schema(remote_cfg, "per_label")
    assert unchanged.response_format is None and "response_schema asked for, not sent" in how


# ---------------------------------------------------------------- 4. the noise floor

FLIP_EVERY = 5  # one repeated answer in five is flipped: a noise rate of exactly 0.2


class Flipping:
    """The correct answer, except that every FLIP_EVERY-th call with a seed other than the run's flips it."""

    def __init__(self) -> None:
        self.lock, self.repeats = threading.Lock(), 0

    def __call__(self, request: dict, reply: str) -> dict:
        from fake_llm_server import completion_body

        if request.get("seed") not in (None, 0):
            with self.lock:
                self.repeats += 1
                flip = self.repeats % FLIP_EVERY == 0
            if flip:
                reply = json.dumps({"value": 1 - json.loads(reply)["value"], "evidence": ""})
        return completion_body(request.get("model", "fake"), reply, request["messages"])


def test_noise_on_a_server_that_flips_a_known_share(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS, body_fn=Flipping()) as srv:
        run = wb.start_run("dev", labels=list(KEYWORDS), **remote(srv))
        assert run.failures == 0
        srv.reset()
        result = wb.measure_noise(run.run_id, sample=1000, repeats=5)
        assert result.pairs == 24 and srv.count == 5 * 24  # every answer, asked five more times: no cache
        assert {b.get("seed") for b in srv.bodies} == {1, 2, 3, 4, 5}  # a new seed per repeat
        rate, lo, hi = result.overall()
        assert rate == pytest.approx(1 / FLIP_EVERY) and lo < rate < hi and hi - lo < 0.2
        assert any(line.startswith("all: noise rate") for line in result.lines())
        assert wb.run_info(run.run_id).calls_made == run.calls_made  # the repeats are kept apart from the run
        assert len(wb.predictions(run.run_id)) == run.calls_total
        offline = wb.start_run("dev")
        runner = CliRunner()
        out = runner.invoke(main, ["compare", str(offline.run_id), str(run.run_id), "--study", str(wb.root)])
        assert out.exit_code == 0, out.output
        assert re.search(r"noise, \w+: \d+ changed; at noise rate [0-9.]+ noise alone would explain about", out.output)
        quiet = runner.invoke(main, ["noise", str(offline.run_id), "--study", str(wb.root)])
        assert quiet.exit_code == 0 and "noise rate 0 [0, 0]" in quiet.output and "deterministic" in quiet.output


def test_per_call_facts_export_from_the_cli(small_study):
    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        summary = run_shape(wb, srv, "openai_json_mode", "openai/gpt-4o-mini")
    runner = CliRunner()
    out = runner.invoke(main, ["calls", str(summary.run_id), "--format", "csv", "--study", str(wb.root)])
    assert out.exit_code == 0, out.output
    header, *rows = out.output.strip().splitlines()
    assert {"latency_s", "cached_tokens", "cost", "finish_reason", "reported_model"} <= set(header.split(","))
    assert len(rows) == 8 and all("gpt-4o-mini-2024-07-18" in r for r in rows)
    per_label = runner.invoke(
        main, ["calls", str(summary.run_id), "--per-label", "--format", "json", "--study", str(wb.root)]
    )
    assert json.loads(per_label.output)[0]["label"] == "pleural_effusion"


def _moves_validation(wb, label: str, run_id: int) -> bool:
    """Whether the offline proposer's suggestion for a label changes some validation answer (a noise line needs one)."""
    result = wb.suggest(label, run_id, proposer="offline")
    part = (result.evaluation or {}).get("parts", {}).get("validation", {})
    return bool(part.get("fixed", 0) + part.get("broken", 0))


def test_split_compare_and_suggest_print_the_noise_lines_per_part_from_the_cli(demo_template, tmp_path):
    from conftest import copy_study

    wb = copy_study(demo_template, tmp_path / "demo")
    wb.split_cohort("dev", 0.3, 0)
    newer, older = (int(i) for i in wb.runs("dev")["id"].tolist()[:2])
    label = next(
        lab for lab in wb.disagreements(newer)["label"].value_counts().index if _moves_validation(wb, lab, newer)
    )
    runner = CliRunner()
    split = ["split-compare", str(older), str(newer), "--study", str(wb.root)]
    suggest = ["suggest", label, "--run", str(newer), "--proposer", "offline", "--study", str(wb.root)]
    not_measured = f"noise: not measured (`workbench noise {newer}`"
    out = runner.invoke(main, split)
    assert out.exit_code == 0, out.output
    assert out.output.count(not_measured) == 1  # once, not once per part
    out = runner.invoke(main, suggest)
    assert out.exit_code == 0, out.output
    assert "proposal #" in out.output and not_measured in out.output
    store_noise(wb, newer, differ_every=2)  # a noise rate of one half: every change is within noise
    out = runner.invoke(main, split)
    lines = [line for line in out.output.splitlines() if line.startswith("noise, ")]
    changed = wb.compare_by_part(older, newer)
    for part in ("tuning", "validation"):
        table = changed[part].table
        moved = [lab for lab, row in table.iterrows() if row["b"] + row["c"]]
        assert moved and all(any(line.startswith(f"noise, {lab} ({part}): ") for line in lines) for lab in moved)
    assert all(re.search(r"changed; at noise rate [0-9.]+ noise alone would explain about", line) for line in lines)
    out = runner.invoke(main, suggest)
    assert re.search(
        rf"^noise, {label} \(validation\): \d+ changed; at noise rate [0-9.]+ noise alone would explain",
        out.output,
        re.M,
    ), out.output
