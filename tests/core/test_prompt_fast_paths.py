"""The run pipeline's fast renderers and cache keys must give exactly what the plain ones give:
a different key would silently throw away every cached (paid) answer."""

from __future__ import annotations

import dataclasses
import random

import pytest
import yaml

from workbench.core.prompts import (
    call_key,
    call_keyer,
    label_call_keyer,
    label_call_renderer,
    parse_prompt_set,
    render_label_call,
    report_json,
)
from workbench.core.vocab import parse_vocabulary
from workbench.shipped import shipped_dir

REPORTS = [
    "No pneumothorax. Small left effusion.",
    'Tube {in} place; "quoted" \\ backslash\n\tnew line',
    "胸腔积液。心影增大。",
    "emoji \U0001f600 and \u2028 separator and \x00 nul",
    "",
    "{report} {label_name} literal braces",
]


def _set(name: str):
    vocab = parse_vocabulary(yaml.safe_load((shipped_dir("vocab") / f"{name}.yaml").read_text()), name)
    files = {p.name: yaml.safe_load(p.read_text()) for p in sorted((shipped_dir("prompts") / name).glob("*.yaml"))}
    return vocab, parse_prompt_set(files, vocab.asked_ids)


@pytest.mark.parametrize("name", ["ranscore-21", "chexpert-14", "chestxray14"])
def test_label_call_renderer_matches_render_label_call(name):
    vocab, ps = _set(name)
    names = vocab.names()
    for label_id in vocab.asked_ids:
        render = label_call_renderer(ps, label_id, names[label_id])
        for report in REPORTS:
            assert render(report) == render_label_call(ps, label_id, names[label_id], report)


def test_call_keyer_gives_call_key_exactly():
    rng = random.Random(0)
    alphabet = "abc {}\"\\\n\t\u00e9\u4e2d\U0001f600\x00\x1f/<>&'"
    params = {
        "model": "openai/x",
        "temperature": 0.0,
        "seed": 0,
        "max_tokens": 256,
        "json_mode": False,
        "api_base": "http://127.0.0.1:8000/v1",
        "note": "\u00e9",
    }
    key = call_keyer(params)
    for _ in range(500):
        messages = [
            {
                "role": rng.choice(["system", "user", "assistant"]),
                "content": "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))),
            }
            for _ in range(rng.randint(1, 4))
        ]
        assert key(messages) == call_key(messages, params)


def test_call_keyer_falls_back_for_other_message_shapes():
    params = {"model": "m"}
    odd = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "user", "content": "x", "name": "n"}]
    assert call_keyer(params)(odd) == call_key(odd, params)


@pytest.mark.parametrize("name", ["ranscore-21", "chexpert-14", "chestxray14"])
def test_label_call_keyer_gives_the_plain_messages_and_call_key(name):
    vocab, ps = _set(name)
    names = vocab.names()
    params = {"model": "workbench/rules", "temperature": 0.0, "note": '\u00e9 "q" {report}'}
    rng = random.Random(1)
    alphabet = "abc {}\"\\\n\t\u00e9\u4e2d\U0001f600\x00\x1f/<>&'\u2028"
    reports = REPORTS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(40)]
    for label_id in vocab.asked_ids:
        keyed = label_call_keyer(ps, label_id, names[label_id], params)
        for report in reports:
            messages = render_label_call(ps, label_id, names[label_id], report)
            assert keyed(report, report_json(report)) == (messages, call_key(messages, params))


def test_label_call_keyer_with_the_report_twice_or_not_at_all():
    vocab, ps = _set("chestxray14")
    label_id = vocab.asked_ids[0]
    name = vocab.names()[label_id]
    params = {"model": "m"}
    for template in (
        "{report}\n{task}\n{guidance}\n{examples}\n{label_name}\n{output_format}\nagain: {report}!",
        "{report}",
        "{task} {guidance} {examples} {label_name} {output_format} (no report)",
    ):
        odd = dataclasses.replace(ps, task=dataclasses.replace(ps.task, per_label_template=template))
        keyed = label_call_keyer(odd, label_id, name, params)
        for report in REPORTS:
            messages = render_label_call(odd, label_id, name, report)
            assert keyed(report, report_json(report)) == (messages, call_key(messages, params))
