"""Issue 34: bounded input. Every imported text column, file shape and YAML file is checked before it can cost
memory, time or a bare database error."""

from __future__ import annotations

import json

import pytest

from workbench.importers import MAX_COLUMNS, MAX_LINE_CHARS, ImportProblems, read_reports, read_table


def problems_of(call) -> list[str]:
    """Run call, expect ImportProblems, return its problems as described lines."""
    with pytest.raises(ImportProblems) as info:
        call()
    return [p.describe(info.value.source) for p in info.value.problems]


# ---------------------------------------------------------------------------------------------
# item 1: every imported text column gets the report text's control-character rule


@pytest.mark.parametrize("bad", ["\x00", "\x1b[2J", "\x07"])
def test_control_characters_in_language_are_refused_naming_row_and_column(tmp_path, bad):
    path = tmp_path / "reports.csv"
    path.write_text(f"id,text,language\nr1,No effusion.,en\nr2,Clear lungs.,e{bad}n\n", encoding="utf-8")
    lines = problems_of(lambda: read_reports(path))
    assert len(lines) == 1, lines
    assert "row 3, column 'language'" in lines[0] and "the language column contains U+00" in lines[0], lines


def test_control_characters_in_openi_extra_columns_are_refused(tmp_path):
    from workbench.importers import read_openi

    reports = tmp_path / "reports.csv"
    reports.write_text("uid,findings,impression,indication\n1,Clear.,Normal.,cough\x1b]8;;http://x\x07\n")
    labels = tmp_path / "labels.csv"
    labels.write_text("uid,MeSH\n1,normal\n")
    lines = problems_of(lambda: read_openi(reports, labels))
    assert any("column 'indication'" in line and "U+001B" in line for line in lines), lines


def test_clean_language_column_still_imports(tmp_path):
    path = tmp_path / "reports.csv"
    path.write_text("id,text,language\nr1,No effusion.\tok,en\n", encoding="utf-8")
    assert read_reports(path)["language"].tolist() == ["en"]


def test_study_import_with_esc_in_language_stores_nothing(study, tmp_path):
    path = tmp_path / "reports.csv"
    path.write_text("id,text,language\nr1,No effusion.,\x1b[31mzh\n", encoding="utf-8")
    with pytest.raises(ImportProblems, match="column 'language'"):
        study.import_reports(path, "dev")
    assert study.cohorts().empty


# ---------------------------------------------------------------------------------------------
# item 4: columns, cell size and line length bounded before any parser builds a table


def test_a_million_columns_csv_is_refused_with_the_limit_named(tmp_path):
    path = tmp_path / "wide.csv"
    header = ",".join(f"c{i}" for i in range(1_000_000))
    path.write_text(header + "\n" + ",".join("1" for _ in range(1_000_000)) + "\n")
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and f"{MAX_LINE_CHARS:,} allowed per line" in lines[0], lines


def test_many_columns_on_short_lines_are_refused_with_the_limit_named(tmp_path):
    path = tmp_path / "wide.tsv"
    path.write_text("\t".join(f"c{i}" for i in range(MAX_COLUMNS + 1)) + "\n" + "\t".join("1" * (MAX_COLUMNS + 1)))
    lines = problems_of(lambda: read_table(path))
    assert lines == [
        f"wide.tsv: the file has {MAX_COLUMNS + 1:,} columns, more than the {MAX_COLUMNS:,} allowed; "
        "is this the right file?"
    ]


def test_jsonl_with_many_distinct_keys_is_refused_before_a_table_is_built(tmp_path):
    path = tmp_path / "keys.jsonl"
    with path.open("w") as out:
        for line in range(200):
            out.write(json.dumps({f"k{line}_{i}": 1 for i in range(50)}) + "\n")
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and f"more than the {MAX_COLUMNS:,} allowed" in lines[0], lines


def test_one_huge_jsonl_line_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n' + json.dumps({"id": "b", "text": "y" * (MAX_LINE_CHARS + 1)}) + "\n")
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and lines[0].startswith("big.jsonl: line 2 has 4,000,0"), lines


def test_a_broken_quote_swallowing_the_file_is_refused_as_one_big_cell(tmp_path):
    path = tmp_path / "reports.csv"
    body = "".join(f"r{i},{'text ' * 100}\n" for i in range(5_000))
    # the quote opened on row 2 closes only at the end: one cell holds the rest of the file
    path.write_text('id,text\nr0,"opened too early\n' + body + '"\n')
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and "row 2, column 'text': cell has" in lines[0] and "2,000,000 allowed" in lines[0], lines


def test_parquet_with_too_many_columns_is_refused(tmp_path):
    import pandas as pd

    path = tmp_path / "wide.parquet"
    pd.DataFrame({f"c{i}": ["1"] for i in range(MAX_COLUMNS + 1)}).to_parquet(path)
    lines = problems_of(lambda: read_table(path))
    assert len(lines) == 1 and f"{MAX_COLUMNS + 1:,} columns" in lines[0], lines


def test_a_file_at_the_limits_still_reads(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text(",".join(f"c{i}" for i in range(MAX_COLUMNS)) + "\n" + ",".join("1" * MAX_COLUMNS) + "\n")
    assert read_table(path).shape == (1, MAX_COLUMNS)
