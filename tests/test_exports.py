"""CSV injection: every CSV the workbench writes defuses cells a spreadsheet would run as formulas
(OWASP: prefix with a single quote); importers refuse ids with control characters or too long.

The study's report ids, evidence, reader ids and audit keys are attacker-controlled text here.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import ROOT

from workbench.cli import main
from workbench.core.export import csv_safe, neutralise_cell, to_csv
from workbench.importers import ImportProblems, read_readings_long, read_reports
from workbench.services import init_study

EVIL = ['=HYPERLINK("http://127.0.0.2/x","click")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1,1)", "\tTAB", "\rCR"]
DANGEROUS = ("=", "+", "-", "@", "\t", "\r")


def cells(text: str) -> list[str]:
    """Every cell of a CSV text."""
    return [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]


def _number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def assert_defused(text: str) -> None:
    """No cell of a CSV text starts with a formula character."""
    bad = [c for c in cells(text) if c.startswith(DANGEROUS) and not _number(c)]
    assert not bad, f"formula cells written verbatim: {bad[:5]}"


def test_neutralise_cell_follows_owasp():
    for value in EVIL[:-1]:
        assert neutralise_cell(value) == "'" + value
    assert neutralise_cell("\rCR") == "'\nCR"  # quoted by the writer, never a bare CR that starts a row
    assert "\r" not in to_csv(pd.DataFrame({"x": ["a\r=cmd()", "b\r\n@x"]}))
    for value in ["plain", "s1", "a=b", "", "'=already quoted"]:
        assert neutralise_cell(value) == value
    assert neutralise_cell(-0.5) == -0.5 and neutralise_cell(3) == 3  # numbers are not formulas


def test_csv_safe_keeps_numbers_and_defuses_headers_and_text():
    frame = pd.DataFrame({"id": EVIL, "value": [-1.5, 2, -3, 4, 5, 6], "=bad header": ["x"] * 6})
    text = to_csv(frame)
    assert_defused(text)
    back = pd.read_csv(io.StringIO(text))
    assert back["value"].tolist() == [-1.5, 2, -3, 4, 5, 6]
    assert csv_safe(frame)["id"].tolist()[:5] == ["'" + v for v in EVIL[:5]]
    assert frame["id"].tolist() == EVIL  # the caller's table is not changed


@pytest.fixture(scope="module")
def evil_study(tmp_path_factory):
    """A study whose report ids, reader ids and note texts start with formula characters; run and frozen."""
    root = tmp_path_factory.mktemp("evil")
    wb = init_study(root / "study", vocab="ranscore-21", rule={"rule": "at_least", "k": 1, "n": 1})
    texts = [
        "Large right pleural effusion.",
        "Heart is enlarged.",
        "No acute findings.",
        "Right pneumothorax.",
        "Left lower lobe consolidation.",
        "Small left effusion.",
    ]
    ids = [e.strip() for e in EVIL[:4]] + ["@s5", "=s6"]
    reports = pd.DataFrame({"id": ids, "findings": texts, "impression": ["See findings."] * 6})
    reports.to_csv(root / "reports.csv", index=False)
    wb.import_reports(root / "reports.csv", "dev")
    rows = [
        {"report_id": rid, "label": lab, "reader": "=reader", "value": 0} for rid in ids for lab in wb.vocab.asked_ids
    ]
    pd.DataFrame(rows).to_csv(root / "readings.csv", index=False)
    wb.import_readings(root / "readings.csv")
    run = wb.start_run("dev", labels=None)
    wb.add_note(ids[0], "pleural_effusion", "other", "unsure", "=cmd|' /C calc'!A0", run_id=run.run_id)
    info = wb.freeze("evil-bundle")
    return {"wb": wb, "root": root, "ids": ids, "run": run.run_id, "bundle": info.json}


@pytest.mark.parametrize(
    "args",
    [
        ["audit", "--format", "csv"],
        ["disagreements", "{run}", "--format", "csv"],
        ["reference", "--format", "csv"],
        ["agreement", "--format", "csv"],
        ["history", "--cohort", "dev", "--format", "csv"],
        ["notes", "--format", "csv"],
    ],
)
def test_every_cli_csv_export_is_defused(evil_study, args, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STUDY", str(evil_study["wb"].root))
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    args = [a.format(run=evil_study["run"]) for a in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert_defused(result.output)


def test_audit_csv_shows_the_evil_key_quoted(evil_study, monkeypatch):
    monkeypatch.setenv("WORKBENCH_STUDY", str(evil_study["wb"].root))
    result = CliRunner().invoke(main, ["disagreements", str(evil_study["run"]), "--format", "csv"])
    assert "'=HYPERLINK" in result.output  # the id is still there, readable, as text


def test_score_csv_files_are_defused(evil_study, tmp_path):
    from workbench import scoring

    reference = evil_study["root"] / "reports.csv"
    result = scoring.score(Path(evil_study["bundle"]), reference, {"=gen": reference}, out=tmp_path / "out")
    files = sorted((tmp_path / "out").glob("*.csv"))
    assert len(files) == 5  # summary, per label, per report, attributes, report errors per label
    for path in files:
        assert_defused(path.read_text(encoding="utf-8"))
    assert "'=HYPERLINK" in (tmp_path / "out" / "_gen.per_report.csv").read_text(encoding="utf-8")
    assert "'=gen" in (tmp_path / "out" / "summary.csv").read_text(encoding="utf-8")
    assert list(result.generators) == ["=gen"]  # the data itself is unchanged; only the CSV cells are defused


def test_download_csv_in_the_app_is_defused(monkeypatch):
    import streamlit as st

    from workbench.ui import components

    sent = {}
    # AppTest does not expose download contents: capture what the button would serve
    monkeypatch.setattr(st, "download_button", lambda label, data, **kw: sent.update(data=data))
    components.download_csv(pd.DataFrame({"report_id": EVIL}), "x.csv")
    assert_defused(sent["data"].decode("utf-8"))


def test_no_csv_writer_bypasses_the_helper():
    """One CSV writer: any other to_csv/csv.writer in the package would skip the neutralising."""
    offenders = []
    for path in (ROOT / "workbench").rglob("*.py"):
        if path.name == "export.py" or "shipped" in path.parts:  # shipped/: the demo data's own generator script
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"\.to_csv\(|csv\.writer|DictWriter", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"write CSV through workbench.core.export.to_csv: {offenders}"


# ---------------------------------------------------------------- ids on import


@pytest.mark.parametrize(
    "bad,message",
    [
        ("s\x00x", "control character"),
        ("s\nx", "control character"),
        ("a\x1bb", "control character"),
        ("x" * 201, "longer than 200"),
    ],
)
def test_report_ids_with_control_characters_or_too_long_are_refused(tmp_path, bad, message):
    path = tmp_path / "r.jsonl"
    import json

    path.write_text(
        json.dumps({"id": "ok", "text": "Normal."}) + "\n" + json.dumps({"id": bad, "text": "Normal."}) + "\n"
    )
    with pytest.raises(ImportProblems, match=message):
        read_reports(path)


def test_reader_ids_are_checked_too(tmp_path):
    from workbench.study import find_vocabulary_file, load_vocabulary_file

    vocab = load_vocabulary_file(find_vocabulary_file("ranscore-21"))
    path = tmp_path / "readings.csv"
    path.write_text('report_id,label,reader,value\ns1,edema,"dr\x07bell",1\ns1,edema,' + "r" * 101 + ",0\n")
    with pytest.raises(ImportProblems) as info:
        read_readings_long(path, vocab, None, {"s1"})
    text = str(info.value)
    assert "reader contains a control character" in text and "reader is longer than 100" in text
