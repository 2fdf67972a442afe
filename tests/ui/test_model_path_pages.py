"""The model path in the app (issue 25, items 1 and 2): the Runs page estimates a run before Start run
without a model call, asks before a run whose estimate is above labeller.confirm_above, and shows a
model run's cost and tokens per label. Real HTTP to tests/fake_llm_server.py, through AppTest."""

from __future__ import annotations

import json
from pathlib import Path

from fake_llm_server import running_server
from test_app_pages import all_text, assert_clean, button, open_page, wait_for_job

SHAPES = json.loads((Path(__file__).parents[1] / "data" / "reply_shapes.json").read_text())


def _point_at(wb, srv, **labeller) -> None:
    """The study's labeller: gpt-4o-mini (litellm has its price) at the fake server."""
    wb.config.labeller.update(model="openai/gpt-4o-mini", api_base=srv.url, max_retries=0, timeout_s=20, **labeller)
    wb.save_config()


def test_runs_page_estimates_with_no_model_call_and_asks_before_a_run_above_confirm_above(small_study):
    wb = small_study
    with running_server() as srv:
        _point_at(wb, srv, confirm_above=0.000001)
        at = open_page(wb.root, "runs")
        at.multiselect[0].select("pleural_effusion")
        button(at, "Estimate").click().run()
        assert_clean(at)
        shown = all_text(at)
        assert "no model call was made" in shown and "8 to make" in shown and "litellm's price map" in shown
        assert srv.count == 0
        button(at, "Start run").click().run()  # above the budget, not accepted: refused, nothing sent
        assert_clean(at)
        refusals = [e.value.replace("\\", "") for e in at.error]
        assert len(refusals) == 1 and "above labeller.confirm_above" in refusals[0], all_text(at)
        assert 'nothing was sent. Tick "Accept an estimated cost above' in refusals[0] and "--yes" not in refusals[0]
        assert srv.count == 0 and wb.runs().empty
        accept = [c for c in at.checkbox if c.label.startswith("Accept an estimated cost above")]
        assert len(accept) == 1
        accept[0].check()
        button(at, "Start run").click().run()
        assert_clean(at)
        wait_for_job(at, "run")
        runs = wb.runs()
        assert len(runs) == 1 and runs.iloc[0]["status"] == "finished" and srv.count == 8


def test_runs_page_shows_a_model_runs_cost_and_tokens_per_label(small_study):
    wb = small_study
    with running_server() as srv:
        _point_at(wb, srv)
        reply = SHAPES["openai_json_mode"]
        srv.body_fn = lambda request, answer: json.loads(
            json.dumps(reply).replace("$ANSWER", answer.replace("\\", "\\\\").replace('"', '\\"'))
        )
        summary = wb.start_run("dev", labels=["pleural_effusion", "pneumothorax"], confirmed=True)
    assert summary.failures == 0
    costs = wb.call_costs(summary.run_id).set_index("label")
    at = open_page(wb.root, "runs")
    title = f"Cost and tokens per label (run total ${costs['cost'].sum():,.4f})"
    assert [e.label for e in at.expander if e.label.startswith("Cost and tokens")] == [title]
    shown = [d.value for d in at.dataframe if "tokens_per_label" in d.value.columns]
    assert len(shown) == 1
    table = shown[0].set_index("label")
    names = wb.vocab.names()
    assert list(table.index) == [names["pleural_effusion"], names["pneumothorax"]] or list(table.index) == [
        names["pneumothorax"],
        names["pleural_effusion"],
    ]
    assert list(table["calls"]) == [8, 8] and (table["cost"] > 0).all()
    assert list(table["tokens_per_label"]) == [1290 + 18] * 2  # the recorded reply's usage, per label answer


def test_a_reasoning_models_thinking_is_in_the_case_view_and_never_in_its_answer(small_study):
    from workbench.ui import state

    wb = small_study
    with running_server(keywords=("effusion",)) as srv:
        _point_at(wb, srv)
        reply = SHAPES["qwen3_think_vllm"]
        srv.body_fn = lambda request, answer: json.loads(
            json.dumps(reply)
            .replace("$ANSWER", answer.replace("\\", "\\\\").replace('"', '\\"'))
            .replace("$VALUE", str(json.loads(answer)["value"]))
        )
        summary = wb.start_run("dev", labels=["pleural_effusion"], confirmed=True)
    assert summary.failures == 0
    at = open_page(wb.root, "runs", {state.RUNS_TAB: "Metrics of a run", state.RUN: summary.run_id})
    at.text_input(key=state.SEARCH).input("effusion").run()
    assert_clean(at)
    shown = all_text(at)
    thinking = wb.case(summary.run_id, at.session_state[state.SEARCH_CASE][0], "pleural_effusion").call.reasoning
    assert thinking and "The model's thinking (kept out of parsing)" in shown and thinking in shown
    answers = [d.value for d in at.dataframe if any(str(c).startswith("run ") for c in d.value.columns)][0]
    assert "think" not in " ".join(str(v) for v in answers.loc["evidence"])
