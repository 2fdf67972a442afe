"""Table-driven tests of reply parsing: real-looking model replies -> (value, status)."""

import json

import pytest

from workbench.core.evidence import evidence_found
from workbench.core.parsing import (
    PARSER_VERSION,
    Answer,
    parse_joint_reply,
    parse_reply,
)

REPORT = (
    "FINDINGS: Heart size is mildly enlarged. Small left pleural effusion with adjacent "
    "atelectasis. No pneumothorax. Right IJ central venous catheter tip in the SVC.\n"
    "IMPRESSION: Cardiomegaly. Small left effusion, slightly improved from prior."
)

# (reply, expected value, expected status)
PER_LABEL = [
    # strict JSON
    ('{"value": 1, "evidence": "Small left pleural effusion"}', 1, "ok"),
    ('{"value": 0, "evidence": ""}', 0, "ok"),
    ('{"evidence": "No pneumothorax.", "value": 0}', 0, "ok"),
    ('  {"value":1,"evidence":"Cardiomegaly."}  ', 1, "ok"),
    ('{"value": "1", "evidence": "Cardiomegaly"}', 1, "ok"),
    ('{"value": "0"}', 0, "ok"),
    ('{"value": true, "evidence": "Cardiomegaly"}', 1, "ok"),
    ('{"value": false}', 0, "ok"),
    ('{"value": 1.0, "evidence": "x"}', 1, "ok"),
    ('{"value": 1, "evidence": "brace } inside { a string"}', 1, "ok"),
    # fenced JSON
    ('```json\n{"value": 1, "evidence": "Small left effusion"}\n```', 1, "ok"),
    ('```\n{"value": 0, "evidence": ""}\n```', 0, "ok"),
    (
        'Here is the JSON:\n```json\n{\n  "value": 0,\n  "evidence": ""\n}\n```\nThe report does not mention it.',
        0,
        "ok",
    ),
    # JSON inside prose
    ('Sure! Here is my assessment.\n{"value": 1, "evidence": "Cardiomegaly."}\nLet me know if you need more.', 1, "ok"),
    ('Based on the findings, {"value": 0, "evidence": ""} is my answer.', 0, "ok"),
    # reasoning models
    (
        '<think>The report says small left effusion, so yes.</think>\n{"value": 1, "evidence": "Small left effusion"}',
        1,
        "ok",
    ),
    ('<think>\nLet me check {"value": 0} hmm no, it is present.\n</think>\n{"value": 1}', 1, "ok"),
    ('Okay, the report mentions effusion.\n</think>\n\n{"value": 1, "evidence": ""}', 1, "ok"),
    # lenient JSON
    ("{'value': 1, 'evidence': 'Cardiomegaly.'}", 1, "ok_tolerant"),
    ('{"value": 1, "evidence": "Cardiomegaly.",}', 1, "ok_tolerant"),
    ('{"answer": 1}', 1, "ok_tolerant"),
    ('{"Answer": "yes", "evidence": "Cardiomegaly"}', 1, "ok_tolerant"),
    ('{"value": "no"}', 0, "ok_tolerant"),
    ('{"pneumothorax": 0}', 0, "ok_tolerant"),
    # tolerant plain text
    ("1", 1, "ok_tolerant"),
    ("0", 0, "ok_tolerant"),
    ("0\n", 0, "ok_tolerant"),
    ("**1**", 1, "ok_tolerant"),
    ('"0"', 0, "ok_tolerant"),
    ("1.", 1, "ok_tolerant"),
    ("Yes", 1, "ok_tolerant"),
    ("no", 0, "ok_tolerant"),
    ("No.", 0, "ok_tolerant"),
    ("Yes, the report describes a small left pleural effusion.", 1, "ok_tolerant"),
    ("No - there is no pneumothorax.", 0, "ok_tolerant"),
    ("value: 1", 1, "ok_tolerant"),
    ("Value = 0", 0, "ok_tolerant"),
    ("Answer: 0", 0, "ok_tolerant"),
    ("Answer: 1\nEvidence: Small left pleural effusion.", 1, "ok_tolerant"),
    ("**Answer:** 1", 1, "ok_tolerant"),
    ("Final answer: 0", 0, "ok_tolerant"),
    ("The answer is 1.", 1, "ok_tolerant"),
    ("The answer is no.", 0, "ok_tolerant"),
    ("Label: 1 (effusion present)", 1, "ok_tolerant"),
    ("The report states cardiomegaly.\n\n1", 1, "ok_tolerant"),
    ("1\nThe heart is enlarged.", 1, "ok_tolerant"),
    ('"value": 1, "evidence": "Small left pleural eff', 1, "ok_tolerant"),  # truncated JSON
    ("I'm sorry, but the report does not mention it. Answer: 0", 0, "ok_tolerant"),
    # refusals
    ("I'm sorry, but I can't help with interpreting medical reports.", None, "refusal"),
    ("I cannot provide medical advice. Please consult a qualified healthcare professional.", None, "refusal"),
    ("As an AI language model, I am not able to provide a diagnosis.", None, "refusal"),
    ("I am unable to determine this from the information given.", None, "refusal"),
    ("As an AI, I cannot give medical diagnoses.\n0", None, "refusal"),
    # ambiguous or missing: never a silent 0
    ("0 or 1", None, "parse_error"),
    ("Value: 1 or 0", None, "parse_error"),
    ("Answer: 1. On reflection, final answer: 0", None, "parse_error"),
    ("0\nActually the effusion is there.\n1", None, "parse_error"),
    ("Yes. Answer: 0", None, "parse_error"),
    ("The report says 1 nodule and 0 masses.", None, "parse_error"),
    ("Label 1: Atelectasis", None, "parse_error"),
    ("The effusion is small and on the left.", None, "parse_error"),
    ("There is a 1.5 cm nodule.", None, "parse_error"),
    ("Maybe.", None, "parse_error"),
    ("", None, "parse_error"),
    ("   \n ", None, "parse_error"),
    ('{"value": , "evidence": "see report",,', None, "parse_error"),
    ('{"value": 2, "evidence": ""}', None, "parse_error"),
    ('{"value": -1, "evidence": "possible effusion"}', None, "parse_error"),
    ('{"value": null}', None, "parse_error"),
    ('{"value": "uncertain"}', None, "parse_error"),
    ('{"evidence": "Small left effusion", "confidence": 0.9}', None, "parse_error"),
    ('{"value": 1} and also {"value": 0}', None, "parse_error"),
    ("<think>The report mentions an effusion, so the answer should be", None, "parse_error"),
    ("[1, 0]", None, "parse_error"),
]


@pytest.mark.parametrize("reply,value,status", PER_LABEL)
def test_parse_reply_table(reply, value, status):
    decision = parse_reply(reply, REPORT)
    assert (decision.value, decision.status) == (value, status), decision
    if status in ("parse_error", "refusal"):
        assert decision.detail, "a failure must say why"


def test_none_is_a_call_error():
    decision = parse_reply(None)
    assert decision == Answer(None, "", "call_error", decision.detail)
    assert decision.detail


def test_no_silent_default_to_zero():
    decision = parse_reply("I think the findings are consistent with something.")
    assert decision.value is None
    assert decision.status == "parse_error"
    assert decision.detail.startswith("no 0/1 value found in reply: 'I think")


def test_detail_truncates_long_replies():
    decision = parse_reply("word " * 500)
    assert decision.status == "parse_error"
    assert len(decision.detail) < 200


def test_wrong_value_detail_names_the_value():
    assert "got 2" in parse_reply('{"value": 2}').detail
    assert "uncertain" in parse_reply('{"value": -1}').detail


@pytest.mark.parametrize("bad", [b"bytes", 42, ["a"], {"value": 1}])
def test_non_text_never_raises(bad):
    assert parse_reply(bad).status == "parse_error"


def test_evidence_found_flag():
    found = parse_reply('{"value": 1, "evidence": "small LEFT pleural effusion"}', REPORT)
    assert found.evidence_found is True
    invented = parse_reply('{"value": 1, "evidence": "large right effusion"}', REPORT)
    assert invented.evidence_found is False
    assert parse_reply('{"value": 1, "evidence": "x"}').evidence_found is None  # no report
    assert parse_reply('{"value": 0, "evidence": ""}', REPORT).evidence_found is None  # no evidence


def test_evidence_list_is_joined():
    decision = parse_reply('{"value": 1, "evidence": ["Cardiomegaly.", "Heart size is mildly enlarged"]}', REPORT)
    assert decision.status == "ok"
    assert decision.evidence_found is True


EVIDENCE = [
    ("Small left pleural effusion", True),
    ("small   left\npleural effusion", True),
    ("SMALL LEFT PLEURAL EFFUSION.", True),
    ("\u201cSmall left effusion, slightly improved\u201d", True),  # curly quotes, comma
    ('"No pneumothorax"', True),
    ("Right IJ central venous catheter tip in the SVC", True),
    ("Heart size is mildly enlarged ... atelectasis", True),  # ellipsis: pieces in order
    ("atelectasis ... Heart size", False),  # pieces out of order
    ("large right pleural effusion", False),
    ("pneumonia", False),
    ("", False),
    ("...", False),
]


@pytest.mark.parametrize("evidence,expected", EVIDENCE)
def test_evidence_found(evidence, expected):
    assert evidence_found(evidence, REPORT) is expected
    assert parse_reply(json.dumps({"value": 1, "evidence": evidence}), REPORT).evidence_found is (
        expected if evidence.strip() else None
    )


def test_evidence_in_chinese_report():
    report = "右侧少量胸腔积液。心影增大。"
    assert evidence_found("右侧少量胸腔积液", report)
    assert not evidence_found("左侧气胸", report)
    assert not evidence_found("anything", "")


LABELS = ["pleural_effusion", "pneumothorax", "cardiomegaly"]

JOINT = [
    # nested, flat, display names, list form, fenced, prose
    (
        '{"labels": {"pleural_effusion": {"value": 1, "evidence": "Small left pleural effusion"},'
        ' "pneumothorax": {"value": 0, "evidence": ""}, "cardiomegaly": {"value": 1, "evidence": "Cardiomegaly."}}}',
        {"pleural_effusion": (1, "ok"), "pneumothorax": (0, "ok"), "cardiomegaly": (1, "ok")},
    ),
    (
        '{"pleural_effusion": 1, "pneumothorax": 0, "cardiomegaly": "1"}',
        {"pleural_effusion": (1, "ok"), "pneumothorax": (0, "ok"), "cardiomegaly": (1, "ok")},
    ),
    (
        '{"Pleural Effusion": 1, "Pneumothorax": 0, "Cardiomegaly": true}',
        {"pleural_effusion": (1, "ok"), "pneumothorax": (0, "ok"), "cardiomegaly": (1, "ok")},
    ),
    (
        '{"labels": [{"id": "pleural_effusion", "value": 1}, {"id": "pneumothorax", "value": 0},'
        ' {"id": "cardiomegaly", "value": 0}]}',
        {"pleural_effusion": (1, "ok"), "pneumothorax": (0, "ok"), "cardiomegaly": (0, "ok")},
    ),
    (
        'Here you go:\n```json\n{"labels": {"pleural_effusion": {"value": 1}, "pneumothorax": {"value": 0},'
        ' "cardiomegaly": {"value": 1}}}\n```',
        {"pleural_effusion": (1, "ok"), "pneumothorax": (0, "ok"), "cardiomegaly": (1, "ok")},
    ),
    # one label missing or wrong: only that label fails
    (
        '{"labels": {"pleural_effusion": {"value": 1}, "pneumothorax": {"value": 0}}}',
        {"pleural_effusion": (1, "ok"), "pneumothorax": (0, "ok"), "cardiomegaly": (None, "parse_error")},
    ),
    (
        '{"pleural_effusion": 1, "pneumothorax": 2, "cardiomegaly": -1}',
        {"pleural_effusion": (1, "ok"), "pneumothorax": (None, "parse_error"), "cardiomegaly": (None, "parse_error")},
    ),
    (
        '{"labels": {"pleural_effusion": {"evidence": "x"}, "pneumothorax": {"value": "no"}, "cardiomegaly": 1}}',
        {"pleural_effusion": (None, "parse_error"), "pneumothorax": (0, "ok_tolerant"), "cardiomegaly": (1, "ok")},
    ),
    # plain lines
    (
        "pleural_effusion: 1\npneumothorax: 0\n- Cardiomegaly: yes",
        {
            "pleural_effusion": (1, "ok_tolerant"),
            "pneumothorax": (0, "ok_tolerant"),
            "cardiomegaly": (1, "ok_tolerant"),
        },
    ),
    # nothing usable
    ("The report shows a small effusion and an enlarged heart.", {lid: (None, "parse_error") for lid in LABELS}),
    ("I'm sorry, but I can't help with that.", {lid: (None, "refusal") for lid in LABELS}),
    ('{"findings": "none"}', {lid: (None, "parse_error") for lid in LABELS}),
    ("", {lid: (None, "parse_error") for lid in LABELS}),
]


@pytest.mark.parametrize("reply,expected", JOINT)
def test_parse_joint_reply_table(reply, expected):
    decisions = parse_joint_reply(reply, LABELS, REPORT)
    assert set(decisions) == set(LABELS)
    got = {lid: (d.value, d.status) for lid, d in decisions.items()}
    assert got == expected


def test_joint_missing_label_detail_and_evidence():
    decisions = parse_joint_reply(
        '{"labels": {"pleural_effusion": {"value": 1, "evidence": "small left pleural effusion"}}}', LABELS, REPORT
    )
    assert decisions["pleural_effusion"].evidence_found is True
    assert "cardiomegaly" in decisions["cardiomegaly"].detail


def test_joint_none_is_call_error_for_every_label():
    decisions = parse_joint_reply(None, LABELS)
    assert {d.status for d in decisions.values()} == {"call_error"}


def test_parser_version_is_a_string():
    assert isinstance(PARSER_VERSION, str) and PARSER_VERSION
