"""The command line as a prompt engineer's daily tool (issue 13): one test per numbered item, through the CLI."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main

from conftest import DATA


def invoke(*args, env=None, input=None):
    """Run `workbench ARGS` in-process; returns the click Result."""
    return CliRunner().invoke(main, [str(a) for a in args], env=env, input=input, catch_exceptions=False)


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    """A small CSV file."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def read_csv(text: str) -> list[dict]:
    """CSV output -> rows."""
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def cli_study(tmp_path, monkeypatch):
    """A fresh 4-of-6 ranscore-21 study made with `workbench init`, the small cohort imported."""
    root = tmp_path / "s"
    assert invoke("init", root).exit_code == 0
    monkeypatch.setenv("WORKBENCH_STUDY", str(root))
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    assert invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "dev").exit_code == 0
    return root


# ---------------------------------------------------------------- item 9: the reference with extra or missing readers


def test_reference_with_more_readers_than_n_and_early_decisions(cli_study, tmp_path):
    rows = []
    # s1/atelectasis: 8 readers, 4-4 (a tie: adjudication); s2/atelectasis: 10 readers, 4 positive
    # (6 of 10 negative is short of the 7 of 10 that 4 of 6 means: adjudication)
    rows += [["s1", "atelectasis", f"r{i}", int(i < 4)] for i in range(8)]
    rows += [["s2", "atelectasis", f"r{i}", int(i < 4)] for i in range(10)]
    # s3/atelectasis: 5 of 6 read, all positive: the sixth reader cannot change it
    rows += [["s3", "atelectasis", f"r{i}", 1] for i in range(5)]
    path = write_csv(tmp_path / "r.csv", ["report_id", "label", "reader", "value"], rows)
    assert invoke("import", "readings", path).exit_code == 0
    out = invoke("reference", "--format", "csv")
    row = next(r for r in read_csv(out.output) if r["label"] == "atelectasis")
    assert (row["decided"], row["waiting"], row["positive"]) == ("1", "2", "1")
    table = invoke("reference").output
    assert "same share" in table  # the rule for extra readers is stated where the figures are


# ---------------------------------------------------------------- item 7: imports that guessed wrong


def test_parquet_with_float_ids_or_integer_text_is_refused_naming_column_and_type(cli_study, tmp_path):
    import pandas as pd

    float_ids = tmp_path / "float_ids.parquet"
    pd.DataFrame({"id": [1.5, 2.5], "text": ["Small effusion.", "Clear lungs."]}).to_parquet(float_ids)
    result = invoke("import", "reports", float_ids, "--cohort", "p")
    assert result.exit_code == 2
    assert "column 'id'" in result.output and "decimal numbers" in result.output
    int_text = tmp_path / "int_text.parquet"
    pd.DataFrame({"id": ["a1", "a2"], "text": [123, 456]}).to_parquet(int_text)
    result = invoke("import", "reports", int_text, "--cohort", "p")
    assert result.exit_code == 2 and "column 'text'" in result.output and "whole numbers" in result.output
    # integer ids are fine (stated): they become "7", "8"
    int_ids = tmp_path / "int_ids.parquet"
    pd.DataFrame({"id": [7, 8], "text": ["Small effusion.", "Clear lungs."]}).to_parquet(int_ids)
    assert "added 2" in invoke("import", "reports", int_ids, "--cohort", "p").output
    assert invoke("reference", "--cohort", "p").exit_code == 0


@pytest.mark.parametrize("sep,name", [("\t", "tab"), (";", "semicolon")])
def test_a_tab_or_semicolon_file_named_csv_is_diagnosed(cli_study, tmp_path, sep, name):
    path = tmp_path / "reports.csv"
    path.write_text(f"id{sep}findings{sep}impression\nq1{sep}Small effusion, left.{sep}Effusion.\n"
                    f"q2{sep}Lungs clear, no effusion.{sep}Normal.\n", encoding="utf-8")
    result = invoke("import", "reports", path, "--cohort", "q")
    assert result.exit_code == 2
    assert f"looks {name}-separated" in result.output and "has no text" not in result.output


def test_ids_of_another_cohort_are_named_once_with_a_count(cli_study):
    result = invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "other")
    assert result.exit_code == 2
    assert result.output.count("already belong") == 1
    assert "8 report id(s) already belong to cohort 'dev'" in result.output


# ---------------------------------------------------------------- item 6: bundle paths, freeze's cohort, whole help lines


def test_freeze_uses_the_only_cohort_and_verify_finds_bundles_from_anywhere(tmp_path, monkeypatch):
    root = tmp_path / "openi-study"
    assert invoke("init", root).exit_code == 0
    monkeypatch.setenv("WORKBENCH_STUDY", str(root))
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    assert invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "openi").exit_code == 0
    assert invoke("run", "--cohort", "openi").exit_code == 0
    result = invoke("freeze", "--name", "cxr-v1")
    assert result.exit_code == 0, result.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for given in ("bundles/cxr-v1.json", "cxr-v1", "cxr-v1.json", str(root / "bundles" / "cxr-v1.json")):
        result = invoke("verify", given)
        assert result.exit_code == 0 and result.output.startswith("ok:"), (given, result.output)
    result = CliRunner().invoke(main, ["verify", "nope"])
    assert result.exit_code == 2 and "no bundle 'nope'" in result.output


def test_freeze_with_several_cohorts_and_no_dev_names_the_choices(tmp_path, monkeypatch):
    root = tmp_path / "s2"
    assert invoke("init", root).exit_code == 0
    monkeypatch.setenv("WORKBENCH_STUDY", str(root))
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    assert invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "a").exit_code == 0
    result = CliRunner().invoke(main, ["freeze", "--name", "x"])
    assert result.exit_code == 2 and "no finished run" in result.output and "'a'" in result.output
    write_csv(tmp_path / "more.csv", ["id", "text"], [["z1", "Clear lungs."]])
    assert invoke("import", "reports", tmp_path / "more.csv", "--cohort", "b").exit_code == 0
    result = CliRunner().invoke(main, ["freeze", "--name", "x"])
    assert result.exit_code == 2 and "choose one with --cohort: a, b" in result.output


def _commands(group=main, prefix=()):
    import click

    for name, cmd in sorted(group.commands.items()):
        yield prefix + (name,), cmd, group
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))


def test_help_listings_show_whole_first_sentences():
    for path, cmd, parent in _commands():
        first = " ".join(cmd.help.split("\n\n")[0].split())
        assert first.endswith("."), f"{' '.join(path)}: first paragraph is not a sentence: {first!r}"
        listing = " ".join(invoke(*path[:-1], "--help").output.split())
        assert first in listing, f"{' '.join(path)}: listing cuts {first!r}"
