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
    "{}",
]


def _slow(text: str, report: str) -> parsing.Answer:
    body, _ = parsing._strip_think(text)
    return parsing._from_objects(parsing._json_objects(body), body, report)


def test_fast_path_decides_as_the_tolerant_path():
    for text in REPLIES:
        fast, slow = parsing.parse_reply(text, REPORT), _slow(text, REPORT)
        assert (fast.value, fast.evidence, fast.status, fast.evidence_found) == (
            slow.value,
            slow.evidence,
            slow.status,
            slow.evidence_found,
        ), text


def test_replies_the_fast_path_leaves_to_the_tolerant_path():
    fenced = '```json\n{"value": 1, "evidence": "effusion"}\n```'
    thinking = '<think>{"value": 0}</think>{"value": 1, "evidence": "effusion"}'
    assert parsing.parse_reply(fenced, REPORT).value == 1
    assert parsing.parse_reply(thinking, REPORT).value == 1
    assert parsing.parse_reply('{"value": 1,}', REPORT).status == "ok_tolerant"  # trailing comma: lenient


def test_reply_memo_decides_as_parse_reply_whatever_the_order():
    reports = [REPORT, "No effusion. Normal heart.", "", None, 'Tube in place; "quoted" effusion']
    replies = REPLIES + [None, "yes", "I cannot help", '{"value": 1, "evidence": "effusion"}', "<think>x</think>1"]
    memo = parsing.ReplyMemo()
    for _ in range(2):  # the second pass answers from the memo where it may
        for report in reports:
            for text in replies:
                assert memo.parse(text, report) == parsing.parse_reply(text, report), (text, report)


def test_reply_memo_never_reuses_evidence_checked_against_another_report():
    memo = parsing.ReplyMemo()
    reply = '{"value": 1, "evidence": "pleural effusion"}'
    assert memo.parse(reply, REPORT).evidence_found is True
    assert memo.parse(reply, "Clear lungs.").evidence_found is False
    assert memo.parse('{"value": 0, "evidence": ""}', REPORT) is memo.parse('{"value": 0, "evidence": ""}', "Other.")


def test_reply_memo_is_bounded():
    memo = parsing.ReplyMemo(limit=3)
    for i in range(10):
        assert memo.parse(f'{{"value": 0, "evidence": "", "n": {i}}}', REPORT).value == 0
    assert len(memo._seen) == 3
