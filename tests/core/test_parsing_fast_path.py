"""parse_reply's fast path for a bare JSON object must decide exactly as the tolerant path does."""

from __future__ import annotations

from workbench.core import parsing

REPORT = "Heart size normal. Small left pleural effusion. No pneumothorax."
REPLIES = [
    '{"value": 1, "evidence": "Small left pleural effusion"}',
    '{"value": 0, "evidence": ""}',
    '  {"value": "1", "evidence": "left pleural"}\n',
    '{"value": true, "evidence": ["Small left", "effusion"]}',
    '{"value": 1.0, "evidence": "not in the report"}',
    '{"answer": "yes", "quote": "effusion"}',
    '{"pneumothorax": 0}',
    '{"value": -1, "evidence": ""}',
    '{"value": 2}',
    '{"evidence": "x", "other": 1}',
    '{"value": 1, "evidence": "a {brace} and \\"quote\\""}',
    '{}',
]


def _slow(text: str, report: str) -> parsing.Decision:
    body, _ = parsing._strip_think(text)
    return parsing._from_objects(parsing._json_objects(body), body, report)


def test_fast_path_decides_as_the_tolerant_path():
    for text in REPLIES:
        fast, slow = parsing.parse_reply(text, REPORT), _slow(text, REPORT)
        assert (fast.value, fast.evidence, fast.status, fast.evidence_found) == \
               (slow.value, slow.evidence, slow.status, slow.evidence_found), text


def test_replies_the_fast_path_leaves_to_the_tolerant_path():
    fenced = '```json\n{"value": 1, "evidence": "effusion"}\n```'
    thinking = '<think>{"value": 0}</think>{"value": 1, "evidence": "effusion"}'
    assert parsing.parse_reply(fenced, REPORT).value == 1
    assert parsing.parse_reply(thinking, REPORT).value == 1
    assert parsing.parse_reply('{"value": 1,}', REPORT).status == "ok_tolerant"  # trailing comma: lenient
