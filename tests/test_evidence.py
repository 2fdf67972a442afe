"""One evidence matcher (core/evidence.py) decides "is the labeller's quote in the report" for the parser, the
app and the CLI: a quote with odd spacing or ellipsis-joined fragments is found by all three, or by none.

Before, the parser normalised spacing and took "..." as a join, while the app (a case-insensitive exact search)
said "it may have invented it" and the CLI (a lower-cased exact search) printed "not found verbatim"."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from workbench.cli import main
from workbench.core.evidence import evidence_found, evidence_spans, in_report_order
from workbench.core.parsing import Answer, parse_reply
from workbench.services import Workbench, memo
from workbench.store import db
from workbench.store import queries as q
from workbench.terminal import emphasise
from workbench.ui import state
from workbench.ui.components import highlight_html

REPORT = "FINDINGS: Heart size is normal. Small left pleural effusions.\nIMPRESSION: No pneumothorax; tube in place."

FOUND = [
    ("left  pleural effusions", ["left pleural effusions"]),  # two spaces
    ("left pleural ... size normal", None),  # fragments out of order: not found
    ("Heart size ... left pleural", ["Heart size", "left pleural"]),
    ("heart size is normal … left\tpleural\neffusions", ["Heart size is normal", "left pleural effusions"]),
    ("\u201cNo pneumothorax\u201d", ["No pneumothorax"]),
    ("no pneumothorax, tube in place", ["No pneumothorax; tube in place"]),  # punctuation does not count
    ("ＳＭＡＬＬ left", ["Small left"]),  # NFKC: full-width letters
    ("[...] tube in place", ["tube in place"]),
    ("large right effusion", None),
    ("...", None),
    ("", None),
]


@pytest.mark.parametrize("evidence,marked", FOUND)
def test_the_rule_and_the_marked_stretches(evidence, marked):
    assert evidence_found(evidence, REPORT) is (marked is not None)
    spans = evidence_spans(evidence, REPORT)
    assert [REPORT[a:b] for a, b in spans] == (marked or [])


def test_overlapping_fragments_are_one_marked_stretch():
    assert evidence_found("left pleural ... pleural effusions", REPORT)
    assert [REPORT[a:b] for a, b in evidence_spans("left pleural ... pleural effusions", REPORT)] == [
        "left pleural effusions"
    ]


def test_combining_accents_match_their_composed_form():
    report = "Cafe\u0301 au lait spots. Re\u0301sume\u0301 of findings."
    assert evidence_found("café au lait", report)
    assert [report[a:b] for a, b in evidence_spans("café au lait", report)] == ["Cafe\u0301 au lait"]


def test_a_list_of_quotes_is_stored_in_report_order_and_found_by_the_same_rule():
    answer = parse_reply(json.dumps({"value": 1, "evidence": ["tube in place", "Heart size is normal"]}), REPORT)
    assert answer.evidence == "Heart size is normal ... tube in place"
    assert answer.evidence_found is True and evidence_found(answer.evidence, REPORT)
    assert in_report_order(["nowhere", "tube", "Heart"], REPORT) == ["Heart", "tube", "nowhere"]


WORDS = st.sampled_from(["left", "Left", "pleural", "effusion", "É", "e\u0301", "ﬁ", "ß", "Σ", "'s", "...", "…"])
GAPS = st.sampled_from([" ", "  ", "\n", ", ", ". ", " - ", "\u201c", "\u201d", ""])


@given(st.lists(st.tuples(WORDS, GAPS), max_size=12), st.lists(st.tuples(WORDS, GAPS), max_size=5))
def test_found_and_marked_agree(report_parts, quote_parts):
    """evidence_found (the parser's fast path) and evidence_spans (the faces' marks) never disagree."""
    report = "".join(w + g for w, g in report_parts)
    quote = "".join(w + g for w, g in quote_parts)
    assert evidence_found(quote, report) is bool(evidence_spans(quote, report))


def test_the_answer_record_is_the_stored_row_and_back():
    answer = parse_reply('{"value": 1, "evidence": "left  pleural effusions"}', REPORT)
    row = answer.row()
    assert list(row) == list(Answer.COLUMNS) == list(q.PREDICTION_COLUMNS[2:-1])
    assert Answer.from_row(row) == answer
    assert Answer.from_row({**row, "value": float("nan"), "evidence_found": float("nan")}).value is None


# ---------------------------------------------------------------- the three faces on one stored answer


@pytest.fixture
def quoted_case(demo_template, tmp_path):
    """A copy of the demo study whose first Disagreements case carries a model's quote with two spaces and an
    ellipsis join, stored through the parser's Answer (as a run stores it)."""
    study = tmp_path / "demo"
    shutil.copytree(demo_template, study)
    wb = Workbench(study)
    queue = wb.disagreements(2)
    case = queue.iloc[0]
    text = wb.report_text(case.report_id).text
    words = re.findall(r"\w+", text)
    quote = f"{words[0].upper()}  {words[1]} ... {' '.join(words[-2:])}"  # first two words, last two: in order
    answer = parse_reply(json.dumps({"value": int(case.prediction), "evidence": quote}), text)
    with db.session_scope(wb.engine, write=True) as session:
        row = {"report_id": case.report_id, "label": case.label, **answer.row(), "call_key": "quoted-case"}
        q.upsert_predictions(session, 2, [row])
    wb.engine.dispose()
    memo.RUN_PREDICTIONS.clear()  # a finished run's answers never change but here: forget the copy read above
    return study, case.report_id, case.label, quote, answer


def app_script(study_path: str) -> None:
    """The app opened on Disagreements (AppTest runs this function's body as the script)."""
    from workbench.ui import app

    app.main(study=study_path, start="disagreements")


def test_parser_app_and_cli_agree_the_quote_is_in_the_report(quoted_case):
    study, report_id, label, quote, answer = quoted_case
    assert answer.evidence == quote and answer.evidence_found is True  # the parser

    at = AppTest.from_function(app_script, args=(str(study),), default_timeout=60)
    at.session_state[state.DIS_PICK] = (report_id, label)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    captions = " ".join(str(c.value) for c in at.caption)
    assert "may have invented it" not in captions  # the app
    html = " ".join(str(h.proto.body) for h in at.get("html"))
    assert html.count('class="wb-evidence"') == 2, "both fragments marked"

    out = CliRunner().invoke(main, ["disagreements", "2", "--label", label, "--study", str(study)])
    assert out.exit_code == 0, out.output
    case = out.output[out.output.index(f"{report_id}  {label}") :].split("workbench error-note")[0]
    assert "not found" not in case  # the CLI
    assert case.count(">>") == 2, case


def test_a_quote_not_in_the_report_is_said_by_every_face():
    answer = parse_reply('{"value": 1, "evidence": "left pleural ... size normal"}', REPORT)
    assert answer.evidence_found is False
    assert "wb-evidence" not in highlight_html(REPORT, answer.evidence)
    assert emphasise(REPORT, answer.evidence, [])[1] == 0
