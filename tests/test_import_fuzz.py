"""Fuzzing the importers with hypothesis: thousands of generated files and rows (CSV with any
separator, quoting and bytes; JSONL with any JSON values; Parquet with typed columns), read on
their own and imported into a real study. No input crashes a reader (a problem is always an
ImportProblems naming what is wrong), and an import either stores the whole file or nothing."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from workbench import importers
from workbench.importers import ImportProblems
from workbench.study import StudyError

FUZZ = settings(
    max_examples=600,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ_DB = settings(
    max_examples=250,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

HEADERS = [
    "id",
    "report_id",
    "uid",
    "text",
    "report",
    "findings",
    "impression",
    "language",
    "label",
    "reader",
    "value",
    "notes",
    "",
    " id ",
    "ID",
]
# text with the characters that break files: separators, quotes, newlines, BOM, NUL, surrogate-free unicode
CELL = st.text(
    alphabet=st.one_of(
        st.sampled_from(list(",;\t\"'\n\r \\|\ufeff\x00é漢-1")), st.characters(blacklist_categories=("Cs",))
    ),
    max_size=24,
)
VALUES = st.sampled_from(["0", "1", "-1", "1.0", "0.0", "", " 1 ", "2", "yes", "nan", "-1.0"])


@st.composite
def csv_bytes(draw):
    """A CSV-ish file: any header, rows of any cells, any separator, quoted or raw, sometimes raw bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=400))
    sep = draw(st.sampled_from([",", "\t", ";", "|"]))
    header = draw(st.lists(st.sampled_from(HEADERS), min_size=1, max_size=6))
    rows = draw(st.lists(st.lists(CELL, min_size=0, max_size=len(header) + 2), max_size=12))
    buffer = io.StringIO()
    if draw(st.booleans()):
        writer = csv.writer(buffer, delimiter=sep)
        writer.writerow(header)
        writer.writerows(rows)
    else:  # written by hand, as a broken export would be
        buffer.write("\n".join(sep.join(r) for r in [header, *rows]))
    encoding = draw(st.sampled_from(["utf-8", "utf-8-sig", "latin-1", "utf-16"]))
    return buffer.getvalue().encode(encoding, errors="replace")


JSON_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), CELL),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(CELL, inner, max_size=3)),
    max_leaves=6,
)


@st.composite
def jsonl_bytes(draw):
    """JSON lines: objects with known and unknown keys and any values, plus garbage lines."""
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(CELL))
        elif kind == 1:
            lines.append(json.dumps(draw(JSON_VALUE)))
        else:
            keys = draw(st.lists(st.sampled_from(HEADERS), max_size=5))
            lines.append(json.dumps({k: draw(JSON_VALUE) for k in keys}))
    return "\n".join(lines).encode("utf-8")


COLUMN = st.one_of(
    st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=8),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=8),
    st.lists(st.one_of(st.none(), CELL), min_size=1, max_size=8),
    st.lists(st.booleans(), min_size=1, max_size=8),
)


@st.composite
def parquet_bytes(draw):
    """A Parquet file with typed columns under the names importers look for."""
    names = draw(st.lists(st.sampled_from(HEADERS[:12]), min_size=1, max_size=5, unique=True))
    length = draw(st.integers(1, 8))
    data = {}
    for name in names:
        values = draw(COLUMN)
        data[name] = (values * length)[:length]
    buffer = io.BytesIO()
    try:
        pd.DataFrame(data).to_parquet(buffer)
    except Exception:  # a combination pyarrow cannot write is not a file a user can have
        assume(False)
    return buffer.getvalue()


def _check_reports(frame: pd.DataFrame) -> None:
    """What a successful read promises: unique, non-blank ids and some text per report."""
    assert frame["report_id"].is_unique and (frame["report_id"] != "").all()
    text = frame["text"].str.strip() + frame["findings"].str.strip() + frame["impression"].str.strip()
    assert (text != "").all()


def _read(tmp_path: Path, name: str, data: bytes, reader):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        return reader(path)
    except ImportProblems as exc:
        assert exc.problems and str(exc)  # every refusal says what is wrong
        return None


@FUZZ
@given(data=csv_bytes(), ext=st.sampled_from([".csv", ".tsv"]))
def test_reading_any_csv_never_crashes(tmp_path_factory, data, ext):
    tmp = tmp_path_factory.mktemp("csv", numbered=True)
    frame = _read(tmp, f"r{ext}", data, importers.read_reports)
    if frame is not None:
        _check_reports(frame)


@FUZZ
@given(data=jsonl_bytes())
def test_reading_any_jsonl_never_crashes(tmp_path_factory, data):
    frame = _read(tmp_path_factory.mktemp("jsonl", numbered=True), "r.jsonl", data, importers.read_reports)
    if frame is not None:
        _check_reports(frame)


@settings(FUZZ, max_examples=300)
@given(data=parquet_bytes())
def test_reading_any_parquet_never_crashes_and_refuses_guessed_types(tmp_path_factory, data):
    frame = _read(tmp_path_factory.mktemp("pq", numbered=True), "r.parquet", data, importers.read_reports)
    if frame is not None:
        _check_reports(frame)
        original = pd.read_parquet(io.BytesIO(data))
        for col in ("text", "findings", "impression"):
            if col in original:  # text columns were text, never numbers turned into text
                assert pd.api.types.infer_dtype(original[col], skipna=True) in ("string", "empty")


@pytest.fixture(scope="module")
def fuzz_study(tmp_path_factory):
    """One study that every generated import goes into (SQLite, real Git)."""
    from conftest import DATA

    from workbench.services import init_study

    wb = init_study(
        tmp_path_factory.mktemp("fuzz") / "study", vocab="ranscore-21", rule={"rule": "at_least", "k": 4, "n": 6}
    )
    wb.import_reports(DATA / "reports_small.csv", "dev")
    return wb


def _counts(wb) -> tuple[int, int, int]:
    from workbench.store import queries as q
    from workbench.store.tables import Cohort, Reading, Report

    with wb.session() as s:
        return q.count_rows(s, Report), q.count_rows(s, Reading), q.count_rows(s, Cohort)


ID = st.one_of(st.sampled_from([f"s{i}" for i in range(1, 9)]), st.text("abz0123456789-_", min_size=0, max_size=6))
LABEL = st.one_of(st.sampled_from(["atelectasis", "pneumonia", "Cardiomegaly", "No Finding", "edema"]), CELL)


@st.composite
def report_rows(draw):
    """A reports file of mostly plausible rows: new ids, ids of the study, blanks, duplicates, odd text."""
    rows = draw(st.lists(st.tuples(ID, st.one_of(CELL, st.just("Small left effusion."))), min_size=1, max_size=15))
    return [["id", "text"], *[list(r) for r in rows]]


@st.composite
def reading_rows(draw):
    """A long readings file: known and unknown reports, labels, readers and values."""
    rows = draw(
        st.lists(
            st.tuples(ID, LABEL, st.sampled_from(["reader-a", "reader-z", "", "r b"]), VALUES), min_size=1, max_size=30
        )
    )
    return [["report_id", "label", "reader", "value"], *[list(r) for r in rows]]


def _write_rows(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


@FUZZ_DB
@given(rows=report_rows(), cohort=st.sampled_from(["dev", "fuzz", "other"]))
def test_report_imports_store_the_whole_file_or_nothing(fuzz_study, tmp_path_factory, rows, cohort):
    path = _write_rows(tmp_path_factory.mktemp("rep", numbered=True) / "reports.csv", rows)
    before = _counts(fuzz_study)
    try:
        summary = fuzz_study.import_reports(path, cohort)
    except (ImportProblems, StudyError):
        after = _counts(fuzz_study)
        assert after[:2] == before[:2], "a refused import wrote reports or readings"
        return
    after = _counts(fuzz_study)
    assert after[0] == before[0] + summary.added and after[1] == before[1]
    filled = [r for r in rows[1:] if any(cell.strip() for cell in r)]  # fully blank rows are skipped, as documented
    assert summary.added + summary.unchanged == len(filled)


@FUZZ_DB
@given(rows=reading_rows(), uncertain=st.sampled_from([None, "positive", "negative", "reject"]))
def test_reading_imports_store_the_whole_file_or_nothing(fuzz_study, tmp_path_factory, rows, uncertain):
    path = _write_rows(tmp_path_factory.mktemp("rdg", numbered=True) / "readings.csv", rows)
    before = _counts(fuzz_study)
    try:
        summary = fuzz_study.import_readings(path, uncertain_as=uncertain)
    except (ImportProblems, StudyError):
        assert _counts(fuzz_study) == before, "a refused import wrote something"
        return
    after = _counts(fuzz_study)
    assert after[1] == before[1] + summary.added and after[0] == before[0]


@st.composite
def wide_rows(draw):
    """A wide readings file: report and reader columns, label columns (known, derived, unknown), any cells."""
    labels = draw(st.lists(LABEL, min_size=0, max_size=4))
    header = ["report_id", "reader", *labels]
    rows = draw(
        st.lists(st.lists(st.one_of(VALUES, ID, CELL), min_size=len(header), max_size=len(header)), max_size=10)
    )
    return [header, *rows]


@settings(FUZZ, max_examples=400)
@given(
    rows=wide_rows(),
    uncertain=st.sampled_from([None, "positive", "negative", "reject"]),
    blank=st.sampled_from(["skip", "negative", "reject"]),
)
def test_reading_any_wide_readings_file_never_crashes(fuzz_study, tmp_path_factory, rows, uncertain, blank):
    path = _write_rows(tmp_path_factory.mktemp("wide", numbered=True) / "wide.csv", rows)
    known = {f"s{i}" for i in range(1, 9)}
    try:
        frame = importers.read_readings_wide(path, fuzz_study.vocab, uncertain, known, blank_as=blank)
    except ImportProblems as exc:
        assert exc.problems
        return
    assert set(frame["report_id"]) <= known and set(frame["value"]) <= {0, 1}
    assert not frame.duplicated(["report_id", "label", "reader"]).any()
