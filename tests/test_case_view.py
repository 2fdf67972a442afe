"""The engineer's view of a case (issue 22 item 6, issue 25 item 2): one report's answers under every run side
by side, each call's raw request and reply with its facts, and text search within a run. Real SQLite, real
Git, the offline labeller, and real HTTP through litellm to tests/fake_llm_server.py."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from fake_llm_server import running_server

from workbench.cli import main
from workbench.errors import UserError
from workbench.services import Actor, PermissionDenied

KEYWORDS = {"pleural_effusion": ["effusion"], "pneumothorax": ["pneumothorax"]}


def two_versions(wb):
    """Two offline runs of dev under two prompt versions (the second looks for one more phrase)."""
    first = wb.start_run("dev")
    lp = wb.label_prompt("pleural_effusion")
    wb.save_prompts(
        [dataclasses.replace(lp, look_for=lp.look_for + ("fluid in the costophrenic angle",))],
        "one more phrase",
        wb.prompt_commit(),
    )
    second = wb.start_run("dev")
    return first.run_id, second.run_id


def test_case_matrix_has_one_column_per_run_with_answer_evidence_and_status(small_study):
    wb = small_study
    first, second = two_versions(wb)
    matrix = wb.case_matrix("s2", "pleural_effusion")
    with pytest.raises(dataclasses.FrozenInstanceError):
        matrix.report_id = "x"  # a frozen result, not a bare dict
    assert [c.run_id for c in matrix.columns] == [first, second]
    commits = {c.run_id: c.prompt_commit for c in matrix.columns}
    assert commits[first] != commits[second]
    table = matrix.table()
    assert list(table.index) == [
        "answer",
        "evidence",
        "status",
        "latency_s",
        "tokens",
        "cost",
        "finish_reason",
        "reported_model",
    ]
    assert list(table.columns) == [
        f"run {first} · {commits[first][:8]} · workbench/rules",
        f"run {second} · {commits[second][:8]} · workbench/rules",
    ]
    preds = {
        r: wb.predictions(r).set_index(["report_id", "label"]).loc[("s2", "pleural_effusion")] for r in (first, second)
    }
    assert table.loc["answer"].tolist() == [str(int(preds[r]["value"])) for r in (first, second)]
    assert table.loc["evidence"].tolist() == [preds[r]["evidence"] for r in (first, second)]
    assert table.loc["status"].tolist() == [preds[r]["status"] for r in (first, second)]
    assert "effusion" in matrix.text.lower()
    every = wb.case_matrix("s2")  # no label: every label of the report, one block per label
    assert {c.label for c in every.columns} >= {"pleural_effusion", "cardiomegaly"}
    assert every.table().index.nlevels == 2


def test_case_matrix_shows_each_calls_raw_request_reply_and_facts_from_the_server(small_study):
    wb = small_study
    offline = wb.start_run("dev", labels=["pleural_effusion"]).run_id
    with running_server(keywords=KEYWORDS) as srv:
        made = wb.start_run(
            "dev", labels=["pleural_effusion"], model="openai/fake", api_base=srv.url, max_retries=1, timeout_s=20
        ).run_id
        sent = {json.dumps(b["messages"]) for b in srv.bodies}
    matrix = wb.case_matrix("s2", "pleural_effusion")
    col = {c.run_id: c for c in matrix.columns}
    call = col[made].call
    assert json.dumps(list(call.messages)) in sent, "the messages shown are those the server received"
    assert json.loads(call.reply)["value"] == col[made].value, "the raw reply the answer was parsed from"
    assert call.latency_s > 0 and call.prompt_tokens > 0 and call.completion_tokens > 0
    assert call.made_by_run == made and call.finish_reason == "stop"
    assert col[offline].call.latency_s is None, "the offline labeller records no facts"
    assert col[offline].call.messages, "its request is still shown"
    table = matrix.table()
    assert float(table.loc["latency_s", col[made].heading]) == pytest.approx(call.latency_s)
    assert int(table.loc["tokens", col[made].heading]) == call.prompt_tokens + call.completion_tokens
    out = CliRunner().invoke(
        main, ["case", "s2", "--label", "pleural_effusion", "--format", "json", "--study", str(wb.root)]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["report_id"] == "s2" and [c["run_id"] for c in data["columns"]] == [offline, made]
    exported = data["columns"][1]["call"]
    assert exported["messages"] == list(call.messages) and exported["reply"] == call.reply
    assert exported["latency_s"] == pytest.approx(call.latency_s) and exported["reasoning"] is None


def test_case_matrix_keeps_a_reasoning_models_thinking_apart_from_its_reply(small_study):
    wb = small_study
    from test_model_path import shaped

    with running_server(keywords=KEYWORDS) as srv:
        srv.body_fn = shaped("deepseek_r1_reasoning_content")
        run_id = wb.start_run(
            "dev",
            labels=["pleural_effusion"],
            model="openai/deepseek-r1",
            api_base=srv.url,
            max_retries=1,
            timeout_s=20,
        ).run_id
    call = wb.case_matrix("s2", "pleural_effusion").columns[0].call
    assert call.reasoning.startswith("Okay, the user wants") and "Okay, the user wants" not in call.reply
    assert call.reported_model and call.made_by_run == run_id


def test_case_cli_table_and_csv(small_study):
    wb = small_study
    first, second = two_versions(wb)
    runner = CliRunner()
    table = runner.invoke(
        main, ["case", "s2", "--label", "Pleural Effusion", "--study", str(wb.root)], env={"COLUMNS": "200"}
    )
    assert table.exit_code == 0, table.output
    assert f"run {first}" in table.output and f"run {second}" in table.output and "evidence" in table.output
    csv = runner.invoke(main, ["case", "s2", "--label", "pleural_effusion", "--format", "csv", "--study", str(wb.root)])
    header, *rows = csv.output.strip().splitlines()
    assert header.startswith("row,") and [r.split(",")[0] for r in rows][:3] == ["answer", "evidence", "status"]
    missing = runner.invoke(main, ["case", "nope", "--study", str(wb.root)])
    assert missing.exit_code == 2 and "no report 'nope'" in missing.output


def test_readers_see_no_case_matrix_and_search_nothing(small_study):
    wb = small_study
    run_id = wb.start_run("dev").run_id
    reader = wb.as_actor(Actor("reader-x", "reader"))
    with pytest.raises(PermissionDenied):
        reader.case_matrix("s2", "pleural_effusion")
    with pytest.raises(PermissionDenied):
        reader.search_run(run_id, "effusion")


def test_search_evidence_answers_and_reports_case_insensitive_or_by_regex(small_study):
    wb = small_study
    run_id = wb.start_run("dev").run_id
    preds = wb.predictions(run_id)
    want = preds[preds["evidence"].str.lower().str.contains("effusion")]
    found = wb.search_run(run_id, "EFFUSION", where="evidence")
    assert len(want) > 0 and set(zip(found.cases["report_id"], found.cases["label"], strict=False)) == set(
        zip(want["report_id"], want["label"], strict=False)
    )
    assert set(found.cases["field"]) == {"evidence"}
    by_regex = wb.search_run(run_id, r"effusion|pneumothorax", where="evidence", regex=True)
    assert len(by_regex.cases) >= len(found.cases)
    assert wb.search_run(run_id, r"effusion|pneumothorax", where="evidence").cases.empty, "no regex unless asked"
    reports = wb.search_run(run_id, "pneumothorax", where="report")
    texts = {r: wb.case_matrix(r).text for r in set(preds["report_id"])}
    assert set(reports.cases["report_id"]) == {r for r, t in texts.items() if "pneumothorax" in t.lower()} != set()
    assert set(reports.cases["label"]) == set(json.loads(wb.run_info(run_id).labels_json)), (
        "every label of a matching report"
    )
    answers = wb.search_run(run_id, '"value": 1', where="answer")
    positive = preds[preds["value"] == 1]
    assert set(zip(answers.cases["report_id"], answers.cases["label"], strict=False)) == set(
        zip(positive["report_id"], positive["label"], strict=False)
    )
    every = wb.search_run(run_id, "effusion")
    assert {"report", "evidence", "answer"} >= set(every.cases["field"]) and len(every.cases) >= len(found.cases)
    with pytest.raises(UserError, match="not a valid regular expression"):
        wb.search_run(run_id, "(", regex=True)
    with pytest.raises(UserError, match="--in"):
        wb.search_run(run_id, "x", where="reference")


def test_search_cli(small_study):
    wb = small_study
    run_id = wb.start_run("dev").run_id
    runner = CliRunner()
    out = runner.invoke(
        main, ["search", str(run_id), "effusion", "--in", "evidence", "--format", "json", "--study", str(wb.root)]
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert rows and all("effusion" in r["snippet"].lower() for r in rows) and {"report_id", "label"} <= set(rows[0])
    regex = runner.invoke(
        main, ["search", str(run_id), "eff?usion", "--regex", "--study", str(wb.root)], env={"COLUMNS": "200"}
    )
    assert regex.exit_code == 0 and "match" in regex.output
    bad = runner.invoke(main, ["search", str(run_id), "(", "--regex", "--study", str(wb.root)])
    assert bad.exit_code == 2 and "not a valid regular expression" in bad.output


def test_search_and_matrix_on_sqlite_and_postgresql(any_study):
    from pathlib import Path

    wb = any_study
    wb.import_reports(Path(__file__).parent / "data" / "reports_small.csv", "dev")
    run_id = wb.start_run("dev", labels=["pleural_effusion", "pneumothorax"]).run_id
    found = wb.search_run(run_id, "EFFUSION", where="evidence")
    assert set(found.cases["report_id"]) >= {"s2"} and set(found.cases["field"]) == {"evidence"}
    assert wb.search_run(run_id, "100%_sure!", where="answer").cases.empty, "LIKE wildcards in the text are literal"
    answers = wb.search_run(run_id, '"value": 1', where="answer")
    assert ("s2", "pleural_effusion") in set(zip(answers.cases["report_id"], answers.cases["label"], strict=False))
    reports = wb.search_run(run_id, "pneumothorax", where="report", label="pneumothorax")
    assert set(reports.cases["label"]) == {"pneumothorax"} and "s1" in set(reports.cases["report_id"])
    matrix = wb.case_matrix("s2", "pleural_effusion")
    assert [c.run_id for c in matrix.columns] == [run_id] and matrix.columns[0].call.reply


def test_a_failed_calls_raw_reply_is_kept_for_the_case_view(small_study):
    from fake_llm_server import MALFORMED_REPLY

    wb = small_study
    with running_server(keywords=KEYWORDS) as srv:
        srv.behaviour = "malformed"
        run_id = wb.start_run(
            "dev", labels=["pleural_effusion"], model="openai/fake", api_base=srv.url, max_retries=1, timeout_s=20
        ).run_id
    column = wb.case_matrix("s2", "pleural_effusion").columns[0]
    assert (column.run_id, column.value, column.status) == (run_id, None, "parse_error")
    assert column.call.reply == MALFORMED_REPLY, "the whole reply, not the parser's shortened quote"
    assert column.call.latency_s > 0


def test_validation_reports_are_never_shown_to_the_person_tuning_prompts(small_study):
    wb = small_study
    wb.split_cohort("dev", validation=0.5, seed=0)
    run_id = wb.start_run("dev").run_id
    parts = wb.split_parts("dev")
    held = sorted(r for r, part in parts.items() if part == "validation")
    tuning = sorted(r for r, part in parts.items() if part == "tuning")
    matrix = wb.case_matrix(held[0], "pleural_effusion")
    assert matrix.columns == () and matrix.withheld == (run_id,) and matrix.text == ""
    assert wb.case_matrix(tuning[0], "pleural_effusion").columns[0].run_id == run_id
    every = wb.search_run(run_id, "e", where="report")  # nearly every report has an "e"
    assert set(every.cases["report_id"]) <= set(tuning) and len(every.cases) > 0
