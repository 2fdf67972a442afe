"""The reply parser never raises and never guesses on hostile replies (hypothesis, thousands of inputs).

A model's reply is untrusted text: deep nesting, huge numbers, odd Unicode, broken JSON and
half-closed <think> blocks must each become a Answer (a value or a recorded failure), never
an exception that aborts a run.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.core.parsing import STATUSES, TOO_DEEP, parse_joint_reply, parse_reply

LABELS = ["pleural_effusion", "edema", "No Finding"]
REPORT = "Small left pleural effusion. No edema."

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["value", "evidence", "labels", "answer", "id", *LABELS]) | st.text(max_size=8),
            inner,
            max_size=4,
        )
    ),
    max_leaves=30,
)
fragments = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        '"',
        "'",
        ":",
        ",",
        "```json",
        "```",
        "<think>",
        "</think>",
        "value",
        '"value": 1',
        "Answer: 0",
        "yes",
        "no",
        "\\",
        "\n",
        "null",
        "true",
        "NaN",
        "I'm sorry, but",
        "pleural_effusion: 1",
        "1e999",
        "-1",
        "\u202e",
        "\x00",
    ]
)
replies = st.one_of(
    st.text(max_size=300),
    st.lists(fragments | st.text(max_size=5), max_size=60).map("".join),
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    st.tuples(st.text(max_size=30), json_values, st.text(max_size=30)).map(lambda t: t[0] + json.dumps(t[1]) + t[2]),
)


def _check(decision) -> None:
    assert decision.status in STATUSES
    assert decision.value in (0, 1, None)
    assert (decision.value is None) == (decision.status not in ("ok", "ok_tolerant"))
    assert isinstance(decision.detail, str) and isinstance(decision.evidence, str)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies)
def test_per_label_parser_never_raises(reply):
    _check(parse_reply(reply, REPORT))


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies)
def test_joint_parser_never_raises_and_answers_every_label(reply):
    out = parse_joint_reply(reply, LABELS, REPORT)
    assert list(out) == LABELS
    for decision in out.values():
        _check(decision)


DEEP = [
    '{"value":' * 5000 + "1" + "}" * 5000,
    "[" * 100_000 + "]" * 100_000,
    '{"value": 1, "evidence": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"labels": {"edema": ' + '{"value":' * 3000 + "1" + "}" * 3002,
    "{'value': " + "(" * 5000 + "1" + ")" * 5000 + "}",
]


def test_deeply_nested_replies_are_one_recorded_parse_failure():
    for reply in DEEP:
        single = parse_reply(reply, REPORT)
        assert single.value is None and single.status == "parse_error", reply[:40]
        joint = parse_joint_reply(reply, LABELS, REPORT)
        assert all(d.value is None and d.status == "parse_error" for d in joint.values()), reply[:40]
    assert parse_reply(DEEP[0]).detail == TOO_DEEP
