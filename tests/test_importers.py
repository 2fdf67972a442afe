"""Importers: every bad input is reported with its row, column and a message a user can act on."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.core.vocab import parse_vocabulary
from workbench.importers import (
    ImportProblems,
    Problem,
    read_openi,
    read_prompt_dictionary,
    read_readings_long,
    read_readings_wide,
    read_reports,
    read_table,
)

DATA = Path(__file__).parent / "data" / "importers"
DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"

VOCAB = parse_vocabulary(
    {
        "id": "mini-4",
        "name": "Mini",
        "labels": [
            {"id": "atelectasis", "name": "Atelectasis", "category": "lung", "definition": "Collapse."},
            {"id": "effusion", "name": "Pleural Effusion", "category": "pleura", "definition": "Fluid."},
            {"id": "support_devices", "name": "Support Devices", "category": "devices", "definition": "Lines."},
            {
                "id": "no_finding",
                "name": "No Finding",
                "category": "other",
                "definition": "None of the others.",
                "derived": "none_of_others",
            },
        ],
    }
)
KNOWN = {"r1", "r2", "r3", "007"}


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    """A real file in tmp_path."""
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def problems_of(call) -> list[Problem]:
    """Run call, expect ImportProblems, return its problems."""
    with pytest.raises(ImportProblems) as info:
        call()
    return info.value.problems


def assert_problems(problems: list[Problem], expected: list[tuple]) -> None:
    """expected: (row, column, substring) per problem, in order; column '*' means any."""
    got = [(p.row, p.column, p.message) for p in problems]
    assert len(problems) == len(expected), got
    for (row, column, message), problem in zip(expected, problems, strict=False):
        assert problem.row == row, got
        if column != "*":
            assert problem.column == column, got
        assert message in problem.message, got


# ---------------------------------------------------------------------------------------------
# read_table


def test_read_table_csv_keeps_strings_and_leading_zeros(tmp_path):
    frame = read_table(write(tmp_path, "r.csv", "id,text,n\n007,hello,1.50\n8,NA,\n"))
    assert frame["id"].tolist() == ["007", "8"]
    assert frame["text"].tolist() == ["hello", "NA"]  # "NA" is text, not missing
    assert frame["n"].tolist() == ["1.50", ""]


@pytest.mark.parametrize(
    "name, content",
    [
        ("r.tsv", "id\ttext\n007\thello, world\n"),
        ("r.jsonl", '{"id": "007", "text": "hello, world"}\n'),
        ("r.ndjson", '{"id": "007", "text": "hello, world"}\n'),
        ("r.CSV", '\ufeffid,text\n007,"hello, world"\n'),
    ],
)
def test_read_table_formats(tmp_path, name, content):
    frame = read_table(write(tmp_path, name, content))
    assert frame.to_dict("records") == [{"id": "007", "text": "hello, world"}]


def test_read_table_utf8_sig_header_is_clean(tmp_path):
    frame = read_table(write(tmp_path, "r.csv", "\ufeffid,text\nr1,épanchement\n".encode("utf-8")))
    assert list(frame.columns) == ["id", "text"]
    assert frame["text"].iat[0] == "épanchement"


def test_read_table_parquet_typed_columns_become_text(tmp_path):
    path = tmp_path / "r.parquet"
    pd.DataFrame({"id": ["007", "8"], "n": [1, 2], "x": [1.5, None], "b": [True, False]}).to_parquet(path)
    frame = read_table(path)
    assert frame.to_dict("list") == {"id": ["007", "8"], "n": ["1", "2"], "x": ["1.5", ""], "b": ["true", "false"]}


def test_read_table_jsonl_numbers_nulls_and_missing_keys(tmp_path):
    path = write(tmp_path, "r.jsonl", '{"id": 7, "v": 1.0}\n\n{"id": "007", "v": null, "w": true}\n')
    frame = read_table(path)
    assert frame.to_dict("list") == {"id": ["7", "007"], "v": ["1.0", ""], "w": ["", "true"]}


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("empty.csv", "", [(None, None, "file is empty")]),
        ("blank.csv", "\n  \n", [(None, None, "file is empty")]),
        ("empty.jsonl", "", [(None, None, "file is empty")]),
        ("bom-only.csv", b"\xef\xbb\xbf", [(None, None, "file is empty")]),
        ("empty.parquet", b"", [(None, None, "file is empty")]),
        ("r.xlsx", "id,text\n", [(None, None, "unknown file type '.xlsx'")]),
        ("r", "id,text\n", [(None, None, "unknown file type '(no extension)'")]),
        ("bad.parquet", b"not parquet at all", [(None, None, "cannot read as Parquet")]),
        ("r.csv", 'id,text\nr1,"unterminated\n', [(None, None, "cannot parse as CSV")]),
        ("dup.csv", "id,text,id\nr1,a,b\n", [(1, "id", "appears more than once")]),
        ("semi.csv", "id;text\nr1;a\n", [(1, None, "semicolon-separated")]),
        ("nameless.csv", "id,,text\nr1,x,a\n", [(1, None, "column 2 has values but no name")]),
        (
            "wide.csv",
            "id,text\nr1,a\nr2,b,c\nr3,d\nr4,e,f,g\n",
            [(3, None, "expected 2 fields, saw 3"), (5, None, "expected 2 fields, saw 4")],
        ),
        (
            "lines.jsonl",
            '{"id": "a"}\nnot json\n\n[1, 2]\n{"id": "b"}\n{"id": {"x": 1}}\n',
            [(2, None, "not valid JSON"), (4, None, "expected a JSON object, got list"), (6, "id", "nested value")],
        ),
    ],
)
def test_read_table_file_problems(tmp_path, name, content, expected):
    assert_problems(problems_of(lambda: read_table(write(tmp_path, name, content))), expected)


def test_read_table_drops_empty_nameless_columns(tmp_path):
    frame = read_table(write(tmp_path, "r.csv", "id,text,\nr1,a,\nr2,b,\n"))
    assert frame.to_dict("list") == {"id": ["r1", "r2"], "text": ["a", "b"]}


def test_read_table_missing_file(tmp_path):
    assert_problems(problems_of(lambda: read_table(tmp_path / "nope.csv")), [(None, None, "file not found")])


def test_read_table_header_only_is_an_empty_frame(tmp_path):
    frame = read_table(write(tmp_path, "r.csv", "id,text\n"))
    assert list(frame.columns) == ["id", "text"] and frame.empty


def test_undecodable_bytes_name_offset_and_line(tmp_path):
    content = b"id,text\nr1,ok\nr2,caf" + b"\xe9" + b"\nr2,dup\n"
    problems = problems_of(lambda: read_reports(write(tmp_path, "latin.csv", content)))
    # the decode problem and the checks that still ran on the rest of the file
    assert_problems(
        problems,
        [
            (None, None, "line 3, byte offset 20: byte(s) e9 are not valid UTF-8"),
            (4, "id", "duplicate report id 'r2' (first seen at row 3)"),
        ],
    )


def test_undecodable_bytes_are_capped(tmp_path):
    content = b"id,text\n" + b"".join(b"r%d,caf\xe9\n" % i for i in range(30))
    problems = problems_of(lambda: read_table(write(tmp_path, "latin.csv", content)))
    assert len(problems) == 21
    assert "probably not UTF-8" in problems[-1].message


def test_jsonl_undecodable_line(tmp_path):
    content = b'{"id": "a", "text": "x"}\n{"id": "b", "text": "caf\xe9"}\n'
    assert_problems(
        problems_of(lambda: read_table(write(tmp_path, "r.jsonl", content))), [(None, None, "line 2, byte offset 49")]
    )


# ---------------------------------------------------------------------------------------------
# ImportProblems


def test_import_problems_message_lists_and_caps():
    problems = [Problem(7, "id", "duplicate report id 'r5' (first seen at row 3)"), Problem(None, None, "file-level")]
    text = str(ImportProblems("reports.csv", problems))
    assert "reports.csv row 7, column 'id': duplicate report id 'r5' (first seen at row 3)" in text
    assert "reports.csv: file-level" in text
    many = ImportProblems("x.csv", [Problem(i, None, f"bad {i}") for i in range(2, 122)])
    assert len(many.problems) == 120
    assert "x.csv row 51: bad 51" in str(many) and "row 52:" not in str(many)
    assert "... and 70 more" in str(many)
    assert isinstance(many, ValueError)
    again = pickle.loads(pickle.dumps(many))
    assert again.problems == many.problems and str(again) == str(many)


# ---------------------------------------------------------------------------------------------
# read_reports


@pytest.mark.parametrize(
    "name, content, expected",
    [
        (
            "a.csv",
            "id,text\n007,Small effusion.\n",
            {"report_id": "007", "text": "Small effusion.", "findings": "", "impression": ""},
        ),
        (
            "b.csv",
            "Report_ID,Report\nx1,Clear lungs.\n",
            {"report_id": "x1", "text": "Clear lungs.", "findings": "", "impression": ""},
        ),
        (
            "c.csv",
            "UID,findings,impression\n 12 ,Clear.,Normal.\n",
            {"report_id": "12", "text": "", "findings": "Clear.", "impression": "Normal."},
        ),
        (
            "d.csv",
            "id,impression,language\nc1,无异常,zh\n",
            {"report_id": "c1", "text": "", "findings": "", "impression": "无异常", "language": "zh"},
        ),
        (
            "e.jsonl",
            '{"id": "007", "findings": "Clear.", "extra": 1}\n',
            {"report_id": "007", "text": "", "findings": "Clear.", "impression": ""},
        ),
    ],
)
def test_read_reports_accepts_layouts(tmp_path, name, content, expected):
    frame = read_reports(write(tmp_path, name, content))
    assert frame.to_dict("records") == [expected]


def test_read_reports_parquet_and_custom_id_column(tmp_path):
    path = tmp_path / "r.parquet"
    pd.DataFrame({"accession": ["007"], "text": ["Clear."]}).to_parquet(path)
    assert read_reports(path, id_column="accession")["report_id"].tolist() == ["007"]
    assert_problems(problems_of(lambda: read_reports(path)), [(None, None, "no report id column")])


@pytest.mark.parametrize(
    "content, expected",
    [
        ("name,text\na,b\n", [(None, None, "no report id column (expected one of 'id', 'report_id', 'uid')")]),
        ("id,notes\n1,x\n", [(None, None, "no report text column")]),
        ("notes\nx\n", [(None, None, "no report id column"), (None, None, "no report text column")]),
        ("id,text\n", [(None, None, "no data rows (the file has only a header)")]),
        ("id,text\nr1,a\n  ,b\n", [(3, "id", "blank report id")]),
        ("id,text\nr1,a\nr2,b\nr1,c\n", [(4, "id", "duplicate report id 'r1' (first seen at row 2)")]),
        (
            "id,findings,impression\nr1,,\nr2,x,\nr3,, \n",
            [(2, None, "report has no text"), (4, None, "report has no text")],
        ),
        # a blank line and a two-line quoted cell keep the numbering a spreadsheet shows
        ('id,text\nr1,a\n\nr2,"two\nlines"\nr1,c\n', [(5, "id", "duplicate report id 'r1' (first seen at row 2)")]),
        (
            "id,text\nr1,a\nr1,b\n,\nx,\nx,ok\n",
            [
                (3, "id", "duplicate report id 'r1' (first seen at row 2)"),
                (5, None, "report has no text"),
                (6, "id", "duplicate report id 'x' (first seen at row 5)"),
            ],
        ),
    ],
)
def test_read_reports_problems(tmp_path, content, expected):
    assert_problems(problems_of(lambda: read_reports(write(tmp_path, "reports.csv", content))), expected)


def test_read_reports_oversized_report(tmp_path):
    big = "x" * 1_000_001
    path = write(tmp_path, "reports.csv", f"id,findings,impression\nr1,ok,\nr2,{big},\nr3,{'é' * 600_000},\n")
    assert_problems(
        problems_of(lambda: read_reports(path)),
        [(3, None, "1,000,001 bytes of text"), (4, None, "1,200,000 bytes of text")],
    )


def test_read_reports_jsonl_rows_are_line_numbers(tmp_path):
    path = write(tmp_path, "r.jsonl", '{"id": "a", "text": "x"}\n\n{"id": "a", "text": "y"}\n')
    assert_problems(
        problems_of(lambda: read_reports(path)), [(3, "id", "duplicate report id 'a' (first seen at row 1)")]
    )


# ---------------------------------------------------------------------------------------------
# read_readings_long

LONG_HEADER = "report_id,label,reader,value\n"


def long_file(tmp_path, body: str, name: str = "readings.csv") -> Path:
    return write(tmp_path, name, LONG_HEADER + body)


def test_long_accepts_ids_and_display_names(tmp_path):
    path = long_file(
        tmp_path,
        "r1,Atelectasis,ana,1\nr1,pleural effusion,ana,0.0\n007,support_devices,bo,1.0\nr2,PLEURAL_EFFUSION,bo,0\n",
    )
    frame = read_readings_long(path, VOCAB, None, KNOWN)
    assert frame.to_dict("list") == {
        "report_id": ["r1", "r1", "007", "r2"],
        "label": ["atelectasis", "effusion", "support_devices", "effusion"],
        "reader": ["ana", "ana", "bo", "bo"],
        "value": [1, 0, 1, 0],
        "row": [2, 3, 4, 5],
    }
    assert frame["value"].dtype == "int64" and frame["row"].dtype == "int64"


@pytest.mark.parametrize("uncertain_as, expected", [("positive", [1, 0, 1]), ("negative", [0, 0, 1])])
def test_long_uncertain_mapped(tmp_path, uncertain_as, expected):
    path = long_file(tmp_path, "r1,atelectasis,a,-1\nr1,effusion,a,0\nr2,effusion,a,1\n")
    assert read_readings_long(path, VOCAB, uncertain_as, KNOWN)["value"].tolist() == expected


@pytest.mark.parametrize(
    "uncertain_as, expected",
    [
        (
            None,
            [
                (2, "value", "choose --uncertain-as positive|negative|reject"),
                (4, "value", "choose --uncertain-as positive|negative|reject"),
            ],
        ),
        ("reject", [(2, "value", "value -1 (uncertain) rejected"), (4, "value", "value -1 (uncertain) rejected")]),
    ],
)
def test_long_uncertain_refused(tmp_path, uncertain_as, expected):
    path = long_file(tmp_path, "r1,atelectasis,a,-1\nr1,effusion,a,0\nr2,effusion,a,-1.0\n")
    assert_problems(problems_of(lambda: read_readings_long(path, VOCAB, uncertain_as, KNOWN)), expected)


@pytest.mark.parametrize(
    "body, expected",
    [
        ("r9,atelectasis,a,1\n", [(2, "report_id", "unknown report id 'r9'")]),
        (
            "r1,Lung Opacity,a,1\n",
            [
                (
                    2,
                    "label",
                    "unknown label 'Lung Opacity': not an id or display name in "
                    "vocabulary 'mini-4' (valid ids: atelectasis, effusion",
                )
            ],
        ),
        ("r1,Pleural Efusion,a,1\n", [(2, "label", "did you mean 'Pleural Effusion'?")]),
        ("r1,No Finding,a,1\n", [(2, "label", "label 'No Finding' (no_finding) is derived")]),
        ("r1,atelectasis, ,1\n", [(2, "reader", "blank reader")]),
        (",atelectasis,a,1\n", [(2, "report_id", "blank report id")]),
        ("r1,,a,1\n", [(2, "label", "blank label")]),
        ("r1,atelectasis,a,\n", [(2, "value", "blank value")]),
        (
            "r1,atelectasis,a,2\nr1,effusion,a,yes\n",
            [(2, "value", "value '2' is not 1, 0 or -1"), (3, "value", "value 'yes' is not 1, 0 or -1")],
        ),
        (
            "r1,atelectasis,a,1\nr2,atelectasis,a,1\nr1,Atelectasis,a,0\n",
            [(4, None, "duplicate reading of 'atelectasis' by 'a' for report 'r1' (first at row 2)")],
        ),
        # every problem of the file at once, in row order
        (
            "r9,atelectasis,a,1\nr1,Lung Opacity,,5\n",
            [
                (2, "report_id", "unknown report id 'r9'"),
                (3, "reader", "blank reader"),
                (3, "label", "unknown label 'Lung Opacity'"),
                (3, "value", "value '5'"),
            ],
        ),
    ],
)
def test_long_problems(tmp_path, body, expected):
    path = long_file(tmp_path, body)
    assert_problems(problems_of(lambda: read_readings_long(path, VOCAB, None, KNOWN)), expected)


def test_long_missing_columns_named(tmp_path):
    path = write(tmp_path, "readings.csv", "report_id,label\nr1,atelectasis\n")
    assert_problems(
        problems_of(lambda: read_readings_long(path, VOCAB, None, KNOWN)),
        [(None, None, "missing column(s): 'reader', 'value'")],
    )


def test_long_without_known_ids_does_not_check_them(tmp_path):
    path = long_file(tmp_path, "anything,atelectasis,a,1\n")
    assert read_readings_long(path, VOCAB, None, None)["report_id"].tolist() == ["anything"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_long_other_formats(tmp_path, fmt):
    records = [
        {"report_id": "007", "label": "Pleural Effusion", "reader": "a", "value": 1},
        {"report_id": "007", "label": "effusion", "reader": "a", "value": 0},
    ]
    path = tmp_path / f"readings.{fmt}"
    if fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
        duplicate_row = 2
    else:
        pd.DataFrame(records).to_parquet(path)
        duplicate_row = 3
    assert_problems(
        problems_of(lambda: read_readings_long(path, VOCAB, None, KNOWN)),
        [(duplicate_row, None, f"first at row {duplicate_row - 1}")],
    )


def test_long_header_only(tmp_path):
    assert_problems(
        problems_of(lambda: read_readings_long(long_file(tmp_path, ""), VOCAB, None, KNOWN)),
        [(None, None, "no data rows")],
    )


def test_bad_option_is_a_programmer_error(tmp_path):
    path = long_file(tmp_path, "r1,atelectasis,a,1\n")
    with pytest.raises(ValueError, match="uncertain_as"):
        read_readings_long(path, VOCAB, "maybe", KNOWN)
    with pytest.raises(ValueError, match="blank_as"):
        read_readings_wide(path, VOCAB, None, KNOWN, blank_as="zero")


def test_long_378k_rows_all_read(tmp_path):
    # correctness at benchmark size; the speed itself is measured in bench/bench_foundation.py
    n_reports, readers = 3000, [f"rad{i}" for i in range(6)]
    labels = [{"id": f"lab_{i}", "name": f"Label {i}", "category": "c", "definition": "d"} for i in range(21)]
    vocab = parse_vocabulary({"id": "v21", "name": "v21", "labels": labels})
    ids = [f"r{i:04d}" for i in range(n_reports)]
    names = [lab["name"] if i % 2 else lab["id"] for i, lab in enumerate(labels)]
    frame = pd.DataFrame(
        {
            "report_id": np.repeat(ids, 6 * 21),
            "label": np.tile(names, n_reports * 6),
            "reader": np.tile(np.repeat(readers, 21), n_reports),
            "value": np.random.default_rng(0).integers(0, 2, n_reports * 6 * 21).astype(str),
        }
    )
    path = tmp_path / "big.csv"
    frame.to_csv(path, index=False)
    out = read_readings_long(path, vocab, None, set(ids))
    assert len(out) == 378_000 and out["row"].iat[-1] == 378_001
    assert set(out["label"]) == {lab["id"] for lab in labels}


# ---------------------------------------------------------------------------------------------
# read_readings_wide

WIDE = "report_id,reader,Atelectasis,pleural_effusion,Support Devices\n"


def wide_file(tmp_path, body: str, header: str = WIDE) -> Path:
    return write(tmp_path, "wide.csv", header + body)


def test_wide_happy_path_row_major(tmp_path):
    frame = read_readings_wide(wide_file(tmp_path, "r1,ana,1,0,1.0\n007,bo,0.0,1,0\n"), VOCAB, None, KNOWN)
    assert frame.to_dict("list") == {
        "report_id": ["r1"] * 3 + ["007"] * 3,
        "reader": ["ana"] * 3 + ["bo"] * 3,
        "label": ["atelectasis", "effusion", "support_devices"] * 2,
        "value": [1, 0, 1, 0, 1, 0],
        "row": [2, 2, 2, 3, 3, 3],
    }
    assert list(frame.columns) == ["report_id", "label", "reader", "value", "row"]


@pytest.mark.parametrize(
    "blank_as, expected",
    [
        ("skip", [("r1", "atelectasis", 1), ("r1", "support_devices", 0)]),
        ("negative", [("r1", "atelectasis", 1), ("r1", "effusion", 0), ("r1", "support_devices", 0)]),
    ],
)
def test_wide_blank_as(tmp_path, blank_as, expected):
    frame = read_readings_wide(wide_file(tmp_path, "r1,ana,1, ,0\n"), VOCAB, None, KNOWN, blank_as=blank_as)
    assert list(frame[["report_id", "label", "value"]].itertuples(index=False, name=None)) == expected


def test_wide_blank_as_reject(tmp_path):
    path = wide_file(tmp_path, "r1,ana,1,,0\nr2,ana,,1,1\n")
    assert_problems(
        problems_of(lambda: read_readings_wide(path, VOCAB, None, KNOWN, blank_as="reject")),
        [(2, "pleural_effusion", "blank value"), (3, "Atelectasis", "blank value")],
    )


@pytest.mark.parametrize(
    "uncertain_as, values, expected",
    [
        ("positive", [1, 1, 0], None),
        ("negative", [1, 0, 0], None),
        ("reject", None, [(2, "pleural_effusion", "value -1 (uncertain) rejected")]),
        (None, None, [(2, "pleural_effusion", "choose --uncertain-as positive|negative|reject")]),
    ],
)
def test_wide_uncertain(tmp_path, uncertain_as, values, expected):
    path = wide_file(tmp_path, "r1,ana,1,-1.0,0\n")
    if expected is None:
        assert read_readings_wide(path, VOCAB, uncertain_as, KNOWN)["value"].tolist() == values
    else:
        assert_problems(problems_of(lambda: read_readings_wide(path, VOCAB, uncertain_as, KNOWN)), expected)


@pytest.mark.parametrize(
    "header, body, expected",
    [
        ("report_id,Atelectasis\n", "r1,1\n", [(None, None, "missing column(s): 'reader'")]),
        ("reader,Atelectasis\n", "a,1\n", [(None, None, "missing column(s): report id")]),
        ("report_id,reader\n", "r1,a\n", [(None, None, "no label columns")]),
        (
            "report_id,reader,Atelectasis,Lung Opacity\n",
            "r1,a,1,1\n",
            [(None, "Lung Opacity", "unknown label 'Lung Opacity'")],
        ),
        ("report_id,reader,Atelectasis,No Finding\n", "r1,a,1,0\n", [(None, "No Finding", "is derived")]),
        (
            "report_id,reader,Atelectasis,atelectasis\n",
            "r1,a,1,0\n",
            [(None, "atelectasis", "names label 'atelectasis' again (as does column 'Atelectasis')")],
        ),
        (
            WIDE,
            "r1,a,1,0,0\nr2,a,0,0,0\nr1,a,0,0,0\n",
            [(4, None, "duplicate row for report 'r1' and reader 'a' (first at row 2)")],
        ),
        (
            WIDE,
            "r1,,1,0,0\nr9,a,0,0,0\n,b,0,0,0\n",
            [
                (2, "reader", "blank reader"),
                (3, "report_id", "unknown report id 'r9'"),
                (4, "report_id", "blank report id"),
            ],
        ),
        (WIDE, "r1,a,1,yes,0\nr2,a,2,0,0\n", [(2, "pleural_effusion", "value 'yes'"), (3, "Atelectasis", "value '2'")]),
    ],
)
def test_wide_problems(tmp_path, header, body, expected):
    path = wide_file(tmp_path, body, header)
    assert_problems(problems_of(lambda: read_readings_wide(path, VOCAB, None, KNOWN)), expected)


def test_wide_reader_column_and_ignored_columns(tmp_path):
    path = wide_file(tmp_path, "r1,F,ana,1\n", "ID,Sex,Radiologist,Atelectasis\n")
    frame = read_readings_wide(path, VOCAB, None, KNOWN, reader_column="radiologist", ignore_columns=("sex",))
    assert frame[["report_id", "label", "reader", "value"]].to_dict("records") == [
        {"report_id": "r1", "label": "atelectasis", "reader": "ana", "value": 1}
    ]


# ---------------------------------------------------------------------------------------------
# read_openi


def test_openi_fixture():
    reports, readings = read_openi(DATA / "openi_reports.csv", DATA / "openi_labels14.csv")
    assert reports["report_id"].tolist() == ["1", "2", "3", "4", "5"]
    assert {"report_id", "text", "findings", "impression", "indication", "comparison", "empty"} <= set(reports)
    assert reports["empty"].tolist() == [False, False, False, False, True]
    assert reports.loc[2, "findings"] == "" and reports.loc[2, "impression"].startswith("No pneumothorax")
    assert reports.loc[3, "findings"] == "Linear opacity at the left base.\nSmall left effusion."
    assert len(readings) == 5 * 14 and set(readings["reader"]) == {"openi-gold"}
    positives = readings[readings["value"] == 1]
    assert list(positives[["report_id", "label", "row"]].itertuples(index=False, name=None)) == [
        ("2", "cardiomegaly", 3),
        ("4", "atelectasis", 5),
        ("4", "effusion", 5),
    ]


def test_openi_problems(tmp_path):
    reports = (DATA / "openi_reports.csv").read_text() + "2,normal,normal,x,,,Clear.,Normal.\n"
    labels = (DATA / "openi_labels14.csv").read_text() + (
        "CXR9,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1\nCXR2,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1\n"
        "IMG3,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1\nCXR3,0,0,x,0,0,0,0,0,0,0,0,0,0,0,1\n"
    )
    problems = problems_of(
        lambda: read_openi(write(tmp_path, "reports.csv", reports), write(tmp_path, "labels14.csv", labels))
    )
    assert_problems(
        problems,
        [
            (7, "uid", "duplicate report id '2' (first seen at row 3)"),
            (7, "filename", "labels for uid '9', which has no report"),
            (8, None, "duplicate row for report '2'"),
            (9, "filename", "filename 'IMG3' is not CXR<uid>"),
            (10, None, "duplicate row for report '3'"),
            (10, "Effusion", "value 'x'"),
        ],
    )
    assert [p.source for p in problems] == ["reports.csv"] + ["labels14.csv"] * 5
    assert "labels14.csv row 7, column 'filename'" in str(ImportProblems("reports.csv + labels14.csv", problems))


def test_openi_missing_label_columns(tmp_path):
    labels = write(tmp_path, "labels14.csv", "filename,Atelectasis\nCXR1,0\n")
    assert_problems(
        problems_of(lambda: read_openi(DATA / "openi_reports.csv", labels)),
        [(None, None, "missing column(s): Cardiomegaly, Effusion")],
    )


def test_openi_real_dataset():
    openi = DATASETS / "openi"
    if not (openi / "reports.csv").exists():
        pytest.skip(f"OpenI dataset not found at {openi} (../shared/datasets is not part of the repo)")
    reports, readings = read_openi(openi / "reports.csv", openi / "labels14.csv")
    assert len(reports) == 3080 and reports["report_id"].is_unique
    assert (
        reports["empty"].sum()
        == ((reports["findings"].str.strip() == "") & (reports["impression"].str.strip() == "")).sum()
    )
    assert set(readings["label"]) == {
        "atelectasis",
        "cardiomegaly",
        "effusion",
        "infiltration",
        "mass",
        "nodule",
        "pneumonia",
        "pneumothorax",
        "consolidation",
        "edema",
        "emphysema",
        "fibrosis",
        "pleural_thickening",
        "hernia",
    }
    assert len(readings) == 3080 * 14
    assert set(readings["reader"]) == {"openi-gold"}
    assert set(readings["value"]) == {0, 1}
    assert set(readings["report_id"]) <= set(reports["report_id"])


# ---------------------------------------------------------------------------------------------
# read_prompt_dictionary


@pytest.mark.parametrize(
    "name, content",
    [
        ("p.json", '{"Atelectasis": "Plate-like atelectasis counts.", "effusion": "Blunted angle counts."}'),
        ("p.yaml", "Atelectasis: Plate-like atelectasis counts.\neffusion: >-\n  Blunted angle counts.\n"),
        ("p.yml", "Atelectasis: Plate-like atelectasis counts.\neffusion: Blunted angle counts.\n"),
    ],
)
def test_prompt_dictionary_reads(tmp_path, name, content):
    assert read_prompt_dictionary(write(tmp_path, name, content)) == {
        "Atelectasis": "Plate-like atelectasis counts.",
        "effusion": "Blunted angle counts.",
    }


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("p.json", '["a", "b"]', [(None, None, "expected a mapping of label -> guidance text, got a list")]),
        ("p.yaml", "just text\n", [(None, None, "expected a mapping of label -> guidance text, got text")]),
        (
            "p.json",
            '{"a": "ok", "b": 3, "c": ["x"]}',
            [
                (None, None, "guidance for 'b' must be text, got a number"),
                (None, None, "guidance for 'c' must be text, got a list"),
            ],
        ),
        (
            "p.yaml",
            "a: ok\nb:\n  - x\n5: text\n",
            [(2, None, "guidance for 'b' must be text, got a list"), (4, None, "key 5 must be a label name")],
        ),
        ("p.yaml", "a: ok\nb: x\na: again\n", [(3, None, "key 'a' appears more than once (first at line 1)")]),
        ("p.json", '{"a": "ok",\n "a": "x"}', [(None, None, "key 'a' appears more than once")]),
        ("p.json", '{"a": "ok",\n "b": }', [(2, None, "not valid JSON")]),
        ("p.yaml", "a: ok\nb: [unclosed\n", [(3, None, "not valid YAML")]),
        ("p.yaml", "", [(None, None, "file is empty")]),
        ("p.json", "{}", [(None, None, "mapping has no entries")]),
        ("p.txt", "a: b", [(None, None, "unknown file type '.txt'")]),
    ],
)
def test_prompt_dictionary_problems(tmp_path, name, content, expected):
    assert_problems(problems_of(lambda: read_prompt_dictionary(write(tmp_path, name, content))), expected)
