"""Issue 34 item 9: a model reply cannot drive the terminal. Text from reports, replies and users is printed
with control characters made visible (ESC as ␛), in tables and in the report views."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fake_llm_server import running_server

from workbench.cli import main
from workbench.terminal import render_table, visible, wrap

OSC8_LINK = "\x1b]8;;http://attacker.example/\x07click here\x1b]8;;\x07"
CLEAR_SCREEN = "\x1b[2J\x1b[H"
CSI_C1 = "\x9b31m"
EVIDENCE = f"{OSC8_LINK} {CLEAR_SCREEN}{CSI_C1} lines\rover\u202eeverything"


def test_visible_shows_every_driving_character_and_keeps_line_ends():
    assert visible(EVIDENCE) == (
        "␛]8;;http://attacker.example/␇click here␛]8;;␇ ␛[2J␛[H<U+009B>31m lines␍over<U+202E>everything"
    )
    assert visible("a\tb\r\nc\nd") == "a\tb\nc\nd"
    assert visible("plain text, ünïcode, 中文") == "plain text, ünïcode, 中文"


def test_tables_and_wrapped_text_never_carry_an_escape():
    import pandas as pd

    table = render_table(pd.DataFrame({"evidence": [EVIDENCE], "n": [1]}), wide=True)
    assert "\x1b" not in table and "\x9b" not in table and "␛[2J" in table
    assert "\x1b" not in wrap(EVIDENCE)


@pytest.fixture
def run_with_hostile_replies(small_study):
    """A finished run whose every reply says 'present' with escape sequences as evidence."""
    with running_server() as server:
        server.reply = json.dumps({"value": 1, "evidence": EVIDENCE})
        run = small_study.start_run("dev", model="openai/fake", api_base=server.url, max_retries=0, timeout_s=20)
    return small_study, run.run_id


@pytest.mark.parametrize(
    "args",
    [
        ["disagreements", "{run}", "--label", "pneumothorax"],
        ["disagreements", "{run}", "--wide"],
        ["case", "{report}", "--label", "pneumothorax"],
        ["search", "{run}", "click", "--in", "evidence", "--wide"],
    ],
    ids=["disagreements-text", "disagreements-table", "case", "search"],
)
def test_replies_reach_the_terminal_with_controls_visible(run_with_hostile_replies, args):
    wb, run_id = run_with_hostile_replies
    report = wb.disagreements(run_id, label="pneumothorax")["report_id"].iloc[0]
    argv = [a.format(run=run_id, report=report) for a in args] + ["--study", str(wb.root)]
    result = CliRunner().invoke(main, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x9b" not in result.output and "\x07" not in result.output
    assert "␛" in result.output, result.output
