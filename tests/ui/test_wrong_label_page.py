"""The Disagreements page shows an answer about another label than the one asked (issue 33): its failure kind,
"wrong_label", and the model's raw reply, as `workbench case` does (tests/test_reply_stop_rule.py has the rest)."""

from __future__ import annotations

from fake_llm_server import keyword_answer, running_server
from test_app_pages import all_text, assert_clean, open_page, study, workbench  # noqa: F401  (fixture)

from workbench.ui import state

# what SmolLM2-135M said when asked about one finding: the report's other finding (tests/test_reply_stop_rule.py)
ABOUT_EFFUSION = "This chest X-ray report describes a pleural effusion, which is a fluid collection."


def test_a_wrong_label_case_shows_its_kind_and_the_raw_reply(study):
    wb = workbench(study)

    def answer(messages) -> str:
        asked = " ".join(str(m["content"]) for m in messages).lower()
        return ABOUT_EFFUSION if "describe a pneumothorax?" in asked else keyword_answer(messages, ["effusion"])

    with running_server(answer_fn=answer) as srv:
        run = wb.start_run("dev", labels=["pneumothorax"], model="openai/fake", api_base=srv.url, max_retries=0)
    assert run.failure_kinds and set(run.failure_kinds) == {"wrong_label"}
    failed = wb.predictions(run.run_id)
    report = failed[failed["status"] == "wrong_label"]["report_id"].iloc[0]
    at = open_page(study, "disagreements", {state.RUN: run.run_id, state.DIS_PICK: (report, "pneumothorax")})
    assert_clean(at)
    assert at.session_state[state.DIS_PICK] == (report, "pneumothorax")
    assert ABOUT_EFFUSION in [c.value for c in at.code], "the model's own words, as it sent them"
    assert "wrong_label" in all_text(at) or any("wrong_label" in str(d.value) for d in at.dataframe)
