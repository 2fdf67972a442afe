"""Replies a small model really gives, ended cleanly (issue 33 item 3): an answer about another label than the one
asked is its own failure kind, "wrong_label", with the raw reply kept for `workbench case`; a reply that begins with
its JSON answer ends there (the stop rule), and what it says after the object is rambling, counted and never read.

The reply shapes are SmolLM2-135M-Instruct's (tests/data/real_model/replies.json and the bench on OpenI): prose
that describes the report's other finding, JSON keyed by a finding's name, and a JSON answer followed by more
text until max_tokens. They are sent by the local fake server on 127.0.0.1 through the real run path.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fake_llm_server import completion_body, keyword_answer, running_server

from workbench.cli import main
from workbench.core import parsing
from workbench.core.parsing import Asked, parse_reply
from workbench.labeller import labelling

KEYWORDS = {"pleural_effusion": ["effusion"], "pneumothorax": ["pneumothorax"]}
RANSCORE = (
    ("atelectasis", "Atelectasis"),
    ("cardiomegaly", "Cardiomegaly"),
    ("no_finding", "No Finding"),
    ("pleural_effusion", "Pleural Effusion"),
    ("pleural_other", "Pleural Other"),
    ("pneumothorax", "Pneumothorax"),
)
# what SmolLM2 said about a report when asked about pneumothorax (plain recipe): the report's other finding
PROSE_ABOUT_EFFUSION = (
    "This chest X-ray report describes a pleural effusion, which is a fluid collection that occurs when there is "
    "an abnormal expansion of lung tissue. The finding described in the report is a semi-upright portable "
    "radiograph of the chest with a pleural effusion."
)
# SmolLM2 with json_mode and response_schema: the answer, then more of the prompt's text until max_tokens
RAMBLING = '{"value": 0, "evidence": ""}\n\nThe report does not describe the finding. Answer with one JSON object'


@pytest.fixture(scope="module", autouse=True)
def litellm_imported():
    """litellm's first import takes 5 s or more on a busy machine: keep it off every test's clock."""
    import litellm  # noqa: F401


def cli(wb, *args: str, ok=(0,)) -> str:
    result = CliRunner().invoke(main, [*args, "--study", str(wb.root)])
    assert result.exit_code in ok, (args, result.output, result.exception)
    return result.output


def cli_run(wb, url: str, labels: str) -> tuple[str, str, int]:
    """`workbench run` on dev against the fake server at url: its output, the output on one line, the run id."""
    model(wb, url)
    out = cli(wb, "run", "--cohort", "dev", "--labels", labels, ok=(0, 3))
    return out, " ".join(out.split()), int(out.split("run ")[1].split()[0])


def model(wb, url: str, **extra) -> None:
    """Point the study's labeller at the fake server (quick failures, few retries)."""
    import yaml

    path = wb.root / "workbench.yaml"
    conf = yaml.safe_load(path.read_text())
    conf["labeller"].update({"model": "openai/fake", "api_base": url, "max_retries": 1, "timeout_s": 20, **extra})
    path.write_text(yaml.safe_dump(conf, sort_keys=False))


def asked_about(messages) -> str:
    """The label a per-label call asks about, by its prompt's question (the fake server's view of the prompt)."""
    text = " ".join(str(m["content"]) for m in messages).lower()
    return "pneumothorax" if "describe a pneumothorax?" in text else "pleural_effusion"


def test_a_reply_about_another_label_is_a_wrong_label_failure_with_its_raw_reply_kept(small_study):
    wb = small_study

    def answer(messages) -> str:
        if asked_about(messages) == "pneumothorax":
            return PROSE_ABOUT_EFFUSION  # the prose names the other finding, never the one asked
        return keyword_answer(messages, KEYWORDS["pleural_effusion"])

    with running_server(answer_fn=answer) as srv:
        out, flat, run = cli_run(wb, srv.url, "pleural_effusion,pneumothorax")
    # before: "prose: 8 call(s) ... turn on labeller.json_mode", as if a format fix would make it answer the question
    assert "wrong_label: 8 call(s)" in flat and "prose" not in flat
    assert "answered about another label than the one asked" in flat
    preds = wb.predictions(run)
    pneumothorax = preds[preds["label"] == "pneumothorax"]
    assert set(pneumothorax["status"]) == {"wrong_label"} and pneumothorax["value"].isna().all()
    assert set(preds[preds["label"] == "pleural_effusion"]["status"]) == {"ok"}  # the other label is untouched
    report = pneumothorax["report_id"].iloc[0]
    case = json.loads(cli(wb, "case", report, "--label", "pneumothorax", "--format", "json"))
    column = case["columns"][0]
    assert column["status"] == "wrong_label" and "'Pleural Effusion', not the label asked" in column["detail"]
    assert column["call"]["reply"] == PROSE_ABOUT_EFFUSION  # the model's own words, as it sent them


def test_json_keyed_by_another_finding_is_a_wrong_label_failure(small_study):
    wb = small_study

    def answer(messages) -> str:
        if asked_about(messages) == "pneumothorax":
            return '{"Pleural Effusion": 1, "evidence": "small left effusion"}'
        return keyword_answer(messages, KEYWORDS["pleural_effusion"])

    with running_server(answer_fn=answer) as srv:
        run = wb.start_run("dev", labels=list(KEYWORDS), model="openai/fake", api_base=srv.url, max_retries=1)
    assert run.failure_kinds == {"wrong_label": 8}  # before: parse_error ("JSON has no value key"), hint: the format
    preds = wb.predictions(run.run_id)
    assert preds[preds["label"] == "pneumothorax"]["value"].isna().all()


def _length_body(body: dict, reply: str) -> dict:
    """The reply cut at max_tokens, as llama.cpp sends a reply that went on until then."""
    out = completion_body(str(body.get("model")), reply, body["messages"])
    out["choices"][0]["finish_reason"] = "length"
    return out


def test_a_reply_that_goes_on_after_its_json_answer_is_answered_and_its_rambling_counted(small_study):
    wb = small_study
    with running_server(reply=RAMBLING, body_fn=_length_body) as srv:
        out, flat, run = cli_run(wb, srv.url, "pleural_effusion")
    # before: "8 failures (truncated: 8)" and "raise labeller.max_tokens": the answer was complete at its "}"
    assert "0 failures" in flat and "truncated" not in flat
    assert "note: 8 replies went on after the JSON object (rambling)" in flat
    preds = wb.predictions(run)
    assert list(preds["value"]) == [0] * 8 and set(preds["status"]) == {"ok"}
    assert preds["detail"].str.startswith("rambling: ").all()
    assert "The report does not describe the finding" in preds["detail"].iloc[0]  # the ignored text, kept to be read


def test_an_answer_cut_inside_its_json_object_is_still_truncated():
    req = type("Req", (), {"meta": {"labels": ["pneumothorax"], "mode": "per_label", "report": "No pneumothorax."}})()
    cut = '{"value": 0, "evidence": "No pneumothorax. The lungs are clear and the heart size is normal and'
    res = labelling.llm.CallResult("k", cut, None, None, completion_tokens=30, finish_reason="length")
    assert labelling.decide(req, cut, res)["pneumothorax"].status == "truncated"


ASKED = Asked("pneumothorax", RANSCORE)


@pytest.mark.parametrize(
    "reply,status",
    [
        ('{"pleural_effusion": 1}', "wrong_label"),
        ('{"label": "Pleural Effusion", "value": 1, "evidence": ""}', "wrong_label"),
        ('{"finding": "atelectasis", "value": 0}', "wrong_label"),
        ('{"label": "Pneumothorax", "value": 1, "evidence": ""}', "ok"),  # names the label asked
        ('{"pneumothorax": 0}', "ok_tolerant"),
        ('{"value": 1, "evidence": "small pleural effusion, no pneumothorax"}', "ok"),  # evidence is not a label
        ('{"value": 0, "evidence": "", "side": "left"}', "ok"),  # an attribute, not a label
        ('{"no_finding": 1}', "ok_tolerant"),  # "No Finding" names no finding of its own
        ("The heart is enlarged. Answer: 1. A small pleural effusion.", "ok_tolerant"),  # a synonym: kept
        ("The report describes a small pleural effusion.", "wrong_label"),  # prose about another finding only
        ("Answer: 0. No pneumothorax; a pleural effusion.", "ok_tolerant"),
    ],
)
def test_which_label_a_reply_is_about(reply, status):
    decision = parsing.off_label_prose(parsing.prose_failure(parse_reply(reply, "x", (), ASKED), reply), reply, ASKED)
    assert decision.status == status, decision
    assert parse_reply(reply, "x").status != "wrong_label"  # without the label asked, nothing is checked


def test_the_stop_rule_reads_the_first_object_and_keeps_conflicts_a_failure():
    answer = parse_reply('```json\n{"value": 1, "evidence": "x"}\n```\nI hope this helps!', "x")
    assert (answer.value, answer.status) == (1, "ok") and answer.detail.startswith("rambling: 18 characters")
    assert parse_reply('```json\n{"value": 1, "evidence": "x"}\n```', "x").detail == ""  # a fence is not rambling
    assert parse_reply('{"value": 1} and also {"value": 0}', "x").status == "parse_error"  # never a guess
    assert parsing.leading_object('Sure: {"value": 1}') is None  # prose first: not an answer that began with JSON


def test_a_real_reply_about_another_finding_replayed_is_a_wrong_label_failure(tmp_path):
    # SmolLM2-135M asked about atelectasis on a synthetic demo report (the plain recipe) described the report's
    # edema and enlarged heart, never atelectasis: recorded once, replayed here
    from real_replies import OTHER_FIXTURE, OTHER_LABELS, REPORT_IDS, Replay, build_study
    from real_replies import cli as study_cli

    replay = Replay(OTHER_FIXTURE)
    with running_server(body_fn=replay, owned_by="me") as srv:
        study, output = build_study(tmp_path, srv.url, "plain", labels=OTHER_LABELS)
    assert not replay.missing, "requests with no recorded reply: the prompts changed; run bench/record_real_replies.py"
    flat = " ".join(output.split())
    # before: "prose: 8 call(s)"; the other seven name the label asked (or nothing) and stay prose
    assert "prose: 7 call(s)" in flat and "wrong_label: 1 call(s)" in flat
    assert "the reply is about 'Edema', not the label asked ('Atelectasis')" in flat
    wrong = [
        c
        for report in REPORT_IDS
        for c in json.loads(study_cli(study, "case", report, "--label", "atelectasis", "--format", "json"))["columns"]
        if c["status"] == "wrong_label"
    ]
    assert len(wrong) == 1 and wrong[0]["value"] is None
    assert "mild interstitial pulmonary edema" in wrong[0]["call"]["reply"]  # the raw reply, as the model wrote it
