"""Read and validate report and reading files before anything reaches the database.

Every reader checks the whole file and raises one ImportProblems listing every problem with the
row a user sees in a spreadsheet (header = row 1, first data row = row 2, a multi-line quoted
cell is one row; Parquet is numbered like the same table saved as CSV; JSONL: the line number),
so a radiologist fixing a file sees all mistakes at once instead of one per attempt.
Nothing here writes: services stores the returned frames inside one transaction.
Checks are vectorised with pandas; Python loops run only over the rows that have problems.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from workbench.core.attributes import mesh_attributes
from workbench.core.names import HIDDEN, TEXT_CONTROL, first_hidden
from workbench.core.vocab import Vocabulary, VocabularyError
from workbench.errors import UserError, WorkbenchError

TABLE_EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
ID_COLUMNS = ("id", "report_id", "uid")
TEXT_COLUMNS = ("text", "report")
SECTION_COLUMNS = ("findings", "impression")
MAX_REPORT_BYTES = 1_000_000
MESSAGE_CAP = 50
UNCERTAIN_CHOICES = (None, "positive", "negative", "reject")
BLANK_CHOICES = ("skip", "negative", "reject")
# the values readers and CheXpert-style files write; -1 is CheXpert's "uncertain"
VALUE_CODES = {"1": 1, "1.0": 1, "0": 0, "0.0": 0, "-1": -1, "-1.0": -1}
OPENI_READER = "openi-gold"
OPENI_LABELS = (
    "Atelectasis",
    "Cardiomegaly",
    "Effusion",
    "Infiltration",
    "Mass",
    "Nodule",
    "Pneumonia",
    "Pneumothorax",
    "Consolidation",
    "Edema",
    "Emphysema",
    "Fibrosis",
    "Pleural_Thickening",
    "Hernia",
)
READING_COLUMNS = ["report_id", "label", "reader", "value", "row"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file; row None for file-level problems."""

    row: int | None
    column: str | None
    message: str
    source: str | None = None  # set when one import spans several files (OpenI)

    def describe(self, default_source: str) -> str:
        """The problem as one line: 'reports.csv row 7, column 'id': ...'."""
        where = self.source or default_source
        if self.row is not None:
            where += f" row {self.row}"
        if self.column is not None:
            where += ("," if self.row is not None else "") + f" column {self.column!r}"
        return f"{where}: {self.message}"


class ImportProblems(WorkbenchError, ValueError):
    """Every problem found in an input file; str() lists them (capped), .problems keeps all."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = list(problems)
        super().__init__(source, self.problems)  # the constructor's arguments, so it pickles

    def __str__(self) -> str:
        """Summary line plus one line per problem, up to MESSAGE_CAP."""
        n = len(self.problems)
        lines = [f"{n} problem{'s' if n != 1 else ''} in {self.source}:"]
        lines += ["  " + p.describe(self.source) for p in self.problems[:MESSAGE_CAP]]
        if n > MESSAGE_CAP:
            lines.append(f"  ... and {n - MESSAGE_CAP} more")
        return "\n".join(lines)


@dataclass
class _Table:
    """A file read as strings, with each row's user-visible number and non-fatal read problems."""

    frame: pd.DataFrame
    rows: np.ndarray
    source: str
    problems: list[Problem] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # typed files (JSONL/Parquet): column -> pandas inferred kind

    def column(self, *names: str) -> str | None:
        """The actual header matching any of names (case-insensitive, first name wins)."""
        lookup = {str(c).strip().lower(): c for c in self.frame.columns}
        for name in names:
            if name.lower() in lookup:
                return lookup[name.lower()]
        return None

    def at(self, mask, column: str | None, messages) -> list[Problem]:
        """Problems for the rows where mask is true; messages is one string or one per such row."""
        mask = np.asarray(mask, dtype=bool)
        rows = self.rows[mask]
        if isinstance(messages, str):
            return [Problem(int(r), column, messages) for r in rows]
        return [Problem(int(r), column, m) for r, m in zip(rows, messages, strict=False)]


# ---------------------------------------------------------------------------------------------
# file reading


def read_table(path) -> pd.DataFrame:
    """Read a CSV/TSV/JSONL/Parquet file with every column as strings ("" for missing)."""
    table = _load(path)
    _raise_if(table.source, table.problems)
    return table.frame


def _load(path) -> _Table:
    """Read a table by extension; fatal problems raise, recoverable ones ride along."""
    path = Path(path)
    source = path.name
    kind = TABLE_EXTENSIONS.get(path.suffix.lower())
    if kind is None:
        _fail(
            source,
            f"unknown file type {path.suffix or '(no extension)'!r}; use one of {', '.join(sorted(TABLE_EXTENSIONS))}",
        )
    data = _read_bytes(path, source)
    if kind == "parquet":
        return _load_parquet(data, source)
    text, problems = _decode(data)
    if not text.strip():
        _fail(source, "file is empty")
    table = _load_jsonl(text, source) if kind == "jsonl" else _load_csv(text, source, "\t" if kind == "tsv" else ",")
    table.problems[:0] = problems
    return table


def _read_bytes(path: Path, source: str) -> bytes:
    """The file's bytes; a missing or empty file is a problem, not a traceback."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        _fail(source, f"file not found: {path}")
    except OSError as exc:
        _fail(source, f"cannot read file: {exc}")
    if not data.strip():
        _fail(source, "file is empty")
    return data


def _decode(data: bytes, limit: int = 20) -> tuple[str, list[Problem]]:
    """UTF-8 (with or without BOM); undecodable bytes become problems and U+FFFD, so checks go on."""
    try:
        return data.decode("utf-8-sig"), []
    except UnicodeDecodeError:
        pass
    problems, start = [], 0
    while True:
        try:
            data[start:].decode("utf-8")
            break
        except UnicodeDecodeError as exc:
            if len(problems) == limit:
                problems.append(
                    Problem(
                        None,
                        None,
                        f"more undecodable bytes after the first {limit}; the "
                        "file is probably not UTF-8 (Latin-1 or Windows-1252?)",
                    )
                )
                break
            offset = start + exc.start
            line = data.count(b"\n", 0, offset) + 1
            bad = data[offset : start + exc.end].hex(" ")
            problems.append(
                Problem(
                    None,
                    None,
                    f"line {line}, byte offset {offset}: byte(s) {bad} are not valid UTF-8; save the file as UTF-8",
                )
            )
            start += exc.end
    return data.decode("utf-8-sig", errors="replace"), problems


def _load_csv(text: str, source: str, sep: str) -> _Table:
    """CSV/TSV as strings; rows with too many fields are problems with their row number."""
    try:
        wrong_sep = _separator_problem(text, sep)
        # newline="": a lone carriage return ends a line, as in the spreadsheet that wrote it
        header = [h.strip() for h in next(csv.reader(io.StringIO(text, newline=""), delimiter=sep), [])]
    except csv.Error as exc:
        _fail(source, f"cannot parse as {'TSV' if sep == chr(9) else 'CSV'}: {exc}")
    if wrong_sep is not None:  # reading on would only produce misleading row problems
        raise ImportProblems(source, [wrong_sep])
    problems = _header_problems(header, sep)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        try:
            frame = pd.read_csv(
                io.StringIO(text),
                sep=sep,
                dtype=str,
                keep_default_na=False,
                skip_blank_lines=False,
                on_bad_lines="warn",
            )
        except (pd.errors.ParserError, ValueError) as exc:
            _fail(source, f"cannot parse as {'TSV' if sep == chr(9) else 'CSV'}: {exc}")
    skipped = []
    for warning in caught:
        for match in re.finditer(r"Skipping line (\d+): (.*)", str(warning.message)):
            skipped.append(int(match.group(1)))
            problems.append(
                Problem(int(match.group(1)), None, f"{match.group(2)} (check quoting and separators on this row)")
            )
    frame = _drop_unnamed(frame, header, problems)
    _refuse_duplicate_columns(frame, source, problems)
    # pandas numbers records as a spreadsheet does (a multi-line quoted cell is one row)
    rows = np.arange(2, 2 + len(frame) + len(skipped))
    if skipped:
        rows = rows[~np.isin(rows, skipped)]
    return _drop_blank_rows(_Table(frame.fillna(""), rows, source, problems))


def _refuse_duplicate_columns(frame: pd.DataFrame, source: str, problems: list[Problem]) -> None:
    """ " id" and "id" are one name once stripped: with two such columns nothing can be read reliably."""
    if frame.columns.has_duplicates:
        dup = sorted(set(frame.columns[frame.columns.duplicated()]))
        raise ImportProblems(
            source,
            [p for p in problems if "more than once" in p.message]
            or [Problem(1, name, "column appears more than once") for name in dup],
        )


def _header_problems(header: list[str], sep: str) -> list[Problem]:
    """pandas silently renames a repeated header to 'id.1', and a ';' file looks like one column."""
    seen, problems = set(), []
    for name in header:
        if name and name in seen:
            problems.append(Problem(1, name, "column appears more than once in the header"))
        seen.add(name)
    return problems


SEPARATOR_NAMES = {",": "comma", "\t": "tab", ";": "semicolon", "|": "pipe"}


def _separator_problem(text: str, sep: str) -> Problem | None:
    """A file whose header is one column with `sep` but several with another separator was saved with that one."""
    lines = [line for line in text.splitlines()[:50] if line.strip()]
    if not lines or len(next(csv.reader([lines[0]], delimiter=sep), [])) > 1:
        return None
    for other, name in SEPARATOR_NAMES.items():
        if other == sep:
            continue
        widths = {len(row) for row in csv.reader(lines[:20], delimiter=other)}
        if min(widths) > 1:
            hint = "save it as .tsv or comma-separated" if other == "\t" else "save it comma-separated (or as .tsv)"
            return Problem(
                1,
                None,
                f"the file looks {name}-separated (the header splits into "
                f"{len(next(csv.reader([lines[0]], delimiter=other)))} columns at {name}s, "
                f"1 at {SEPARATOR_NAMES[sep]}s); {hint}",
            )
    return None


def _drop_unnamed(frame: pd.DataFrame, header: list[str], problems: list[Problem]) -> pd.DataFrame:
    """Trailing separators make empty, nameless columns: drop them; a nameless column with values is a problem."""
    frame.columns = [str(c).strip() for c in frame.columns]
    if len(header) != len(frame.columns):
        return frame
    keep = []
    for position, (name, col) in enumerate(zip(header, frame.columns, strict=False), start=1):
        if name:
            keep.append(col)
        elif (frame[col].fillna("").str.strip() != "").any():
            problems.append(Problem(1, None, f"column {position} has values but no name in the header"))
    return frame if len(keep) == len(frame.columns) else frame[keep]


def _drop_blank_rows(table: _Table) -> _Table:
    """Fully blank rows carry nothing; drop them but keep the other rows' numbers."""
    frame = table.frame
    if frame.shape[1] == 0 or frame.empty:
        return table
    blank = np.ones(len(frame), dtype=bool)
    for col in frame.columns:
        blank &= (frame[col] == "").to_numpy()
    if blank.any():
        table.frame = frame.loc[~blank].reset_index(drop=True)
        table.rows = table.rows[~blank]
    return table


def _load_jsonl(text: str, source: str) -> _Table:
    """One JSON object per line; a bad line is a problem naming its line number."""
    records, rows, problems = [], [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(Problem(number, None, f"not valid JSON: {exc.msg} (column {exc.colno})"))
            continue
        if not isinstance(obj, dict):
            problems.append(Problem(number, None, f"expected a JSON object, got {type(obj).__name__}"))
            continue
        records.append(obj)
        rows.append(number)
    frame = pd.DataFrame.from_records(records) if records else pd.DataFrame()
    frame.columns = [str(c).strip() for c in frame.columns]
    _refuse_duplicate_columns(frame, source, problems)
    table = _Table(frame, np.array(rows, dtype=int), source, problems)
    _stringify(table)
    return table


def _load_parquet(data: bytes, source: str) -> _Table:
    """Parquet, numbered like the same table saved as CSV (first record = row 2)."""
    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        _fail(source, f"cannot read as Parquet: {exc}")
    frame = frame.reset_index(drop=True)
    frame.columns = [str(c).strip() for c in frame.columns]
    _refuse_duplicate_columns(frame, source, [])
    table = _Table(frame, np.arange(2, 2 + len(frame)), source)
    _stringify(table)
    return table


def _stringify(table: _Table) -> None:
    """Turn typed JSON/Parquet columns into strings as the user wrote them (7 -> "7", null -> "")."""
    frame = table.frame
    for col in list(frame.columns):
        series = frame[col]
        table.kinds[col] = pd.api.types.infer_dtype(series, skipna=True)
        if table.kinds[col] in ("string", "empty"):
            frame[col] = series.astype(object).where(series.notna(), "").astype(str)
            continue
        values = series.astype(object).tolist()
        nested = [i for i, v in enumerate(values) if isinstance(v, (dict, list, np.ndarray))]
        if nested:
            table.problems += table.at(
                np.isin(np.arange(len(values)), nested), col, "nested value (object or list); expected text or a number"
            )
        frame[col] = pd.Series([_cell_text(v) for v in values], index=frame.index, dtype=str)


def _cell_text(value) -> str:
    """One typed cell as text."""
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (dict, list, np.ndarray)):
        return json.dumps(value.tolist() if isinstance(value, np.ndarray) else value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _fail(source: str, message: str, column: str | None = None) -> None:
    """Raise a single file-level problem."""
    raise ImportProblems(source, [Problem(None, column, message)])


def _raise_if(source: str, problems: list[Problem]) -> None:
    """Raise ImportProblems when there are any, ordered by file then row."""
    if not problems:
        return
    order = {}
    for p in problems:
        order.setdefault(p.source, len(order))
    raise ImportProblems(source, sorted(problems, key=lambda p: (order[p.source], p.row or 0)))


# What a typed column may hold: ids are text or whole numbers (7 -> "7"); text is text.
ID_KINDS = ("string", "empty", "integer")
TEXT_KINDS = ("string", "empty")
KIND_WORDS = {
    "floating": "decimal numbers",
    "integer": "whole numbers",
    "mixed-integer": "numbers mixed with text",
    "mixed-integer-float": "whole and decimal numbers",
    "boolean": "true/false values",
    "mixed": "mixed types",
    "decimal": "decimal numbers",
    "datetime": "dates",
    "datetime64": "dates",
    "date": "dates",
    "bytes": "bytes",
    "timedelta": "durations",
    "timedelta64": "durations",
}


def _type_problems(table: _Table, column: str | None, allowed: tuple[str, ...], what: str) -> list[Problem]:
    """A typed (JSONL/Parquet) column whose values are not of the allowed kind: one problem naming column and type."""
    kind = table.kinds.get(column) if column is not None else None
    if kind is None or kind in allowed:
        return []
    want = "text or whole numbers" if "integer" in allowed else "text"
    hint = ""
    if kind == "floating" and table.frame[column].str.fullmatch(r"-?\d+\.0|").all():
        hint = " (whole numbers stored as decimals, as a missing value makes Parquet and pandas do)"
    return [
        Problem(
            None,
            column,
            f"holds {KIND_WORDS.get(kind, kind)} ({kind}){hint}; {what} must be {want}. "
            "Convert the column and export again",
        )
    ]


def _require_rows(table: _Table) -> None:
    """A file with a header and nothing under it is almost certainly the wrong file."""
    if table.frame.empty:
        message = "no data rows (the file has only a header)" if len(table.frame.columns) else "no data rows"
        _raise_if(table.source, table.problems + [Problem(None, None, message)])


def _stripped(table: _Table, column: str) -> pd.Series:
    """A column with surrounding whitespace removed (ids, labels, readers, values)."""
    return table.frame[column].str.strip()


# ---------------------------------------------------------------------------------------------
# reports


def read_reports(path, id_column: str = "id") -> pd.DataFrame:
    """Read reports: report_id, text, findings, impression (and language when present)."""
    table = _load(path)
    _require_rows(table)
    id_names = (
        tuple(dict.fromkeys((id_column.lower(),) + ID_COLUMNS)) if id_column.lower() in ID_COLUMNS else (id_column,)
    )
    frame, problems = _reports(table, id_names, allow_empty=False)
    _raise_if(table.source, table.problems + problems)
    return frame


def _reports(
    table: _Table, id_names: tuple[str, ...], allow_empty: bool, extra: tuple[str, ...] = ()
) -> tuple[pd.DataFrame, list[Problem]]:
    """Validate a reports table; returns the frame and its problems."""
    id_col = table.column(*id_names)
    text_col = table.column(*TEXT_COLUMNS)
    sections = {name: table.column(name) for name in SECTION_COLUMNS}
    missing = []
    if id_col is None:
        missing.append(f"no report id column (expected one of {', '.join(repr(n) for n in id_names)})")
    if text_col is None and not any(sections.values()):
        missing.append("no report text column (expected 'text' or 'report', or 'findings' and/or 'impression')")
    if missing:
        _raise_if(table.source, table.problems + [Problem(None, None, m) for m in missing])
    n = len(table.frame)
    out = pd.DataFrame({"report_id": _stripped(table, id_col)})
    out["text"] = table.frame[text_col] if text_col else pd.Series([""] * n, dtype=str)
    for name, col in sections.items():
        out[name] = table.frame[col] if col else pd.Series([""] * n, dtype=str)
    for name in extra + ("language",):
        col = table.column(name)
        if col is not None:
            out[name] = table.frame[col]
        elif name in extra:
            out[name] = pd.Series([""] * n, dtype=str)
    typed = _type_problems(table, id_col, ID_KINDS, "report ids")
    for col in (text_col, *sections.values()):
        typed += _type_problems(table, col, TEXT_KINDS, "report text")
    if typed:  # values were guessed from numbers: nothing further is meaningful
        _raise_if(table.source, table.problems + typed)
    problems = _id_problems(table, out["report_id"], id_col, "report id")
    empty = np.ones(n, dtype=bool)
    for name in ("text",) + SECTION_COLUMNS:
        empty &= (out[name].str.strip() == "").to_numpy()
    if allow_empty:
        out["empty"] = empty
    else:
        problems += table.at(empty, None, "report has no text (text, findings and impression are all empty)")
    problems += _oversized(table, out) + _control_problems(table, out, {"text": text_col, **sections})
    return out.reset_index(drop=True), problems


def _control_problems(table: _Table, out: pd.DataFrame, columns: dict[str, str | None]) -> list[Problem]:
    """Report text with a C0 control other than tab and line breaks (a NUL: PostgreSQL refuses it), per cell."""
    problems = []
    for name, col in columns.items():
        if col is None:
            continue
        bad = out[name].str.contains(TEXT_CONTROL).to_numpy(dtype=bool)
        problems += table.at(
            bad,
            col,
            [
                f"report text contains {first_hidden(t, TEXT_CONTROL)}; only tab, newline "
                "and carriage return are allowed among control characters: remove it and import again"
                for t in out[name][bad]
            ],
        )
    return problems


MAX_ID_CHARS = {"report id": 200, "reader": 100}  # the database columns' sizes


def _id_text_problems(table: _Table, ids: pd.Series, column: str, what: str) -> list[Problem]:
    """Ids with control, zero-width or direction characters (an id that could look like another on screen)
    or longer than the database keeps are refused."""
    limit = MAX_ID_CHARS.get(what, 200)
    hidden = ids.str.contains(HIDDEN).to_numpy(dtype=bool)
    problems = table.at(
        hidden,
        column,
        [
            f"{what} contains a control character or one that hides or reorders text ({first_hidden(i)}); ids are "
            "plain text (no tab, newline, NUL, zero-width space, right-to-left override ...)"
            for i in ids[hidden]
        ],
    )
    problems += table.at(
        (ids.str.len() > limit).to_numpy(dtype=bool), column, f"{what} is longer than {limit} characters"
    )
    return problems


def _id_problems(table: _Table, ids: pd.Series, column: str, what: str) -> list[Problem]:
    """Blank and duplicate ids; a duplicate names the row where the id first appeared."""
    blank = (ids == "").to_numpy()
    problems = table.at(blank, column, f"blank {what}") + _id_text_problems(table, ids, column, what)
    dup = ids.duplicated(keep="first").to_numpy() & ~blank
    if dup.any():
        first = pd.Series(table.rows, index=ids.index)[~ids.duplicated(keep="first")]
        first_row = dict(zip(ids[first.index], first, strict=False))
        problems += table.at(
            dup, column, [f"duplicate {what} {i!r} (first seen at row {first_row[i]})" for i in ids[dup]]
        )
    return problems


def _oversized(table: _Table, out: pd.DataFrame) -> list[Problem]:
    """More than MAX_REPORT_BYTES of text in one report is almost surely a broken file."""
    chars = sum(out[name].str.len().to_numpy() for name in ("text",) + SECTION_COLUMNS)
    # a character is at most 4 bytes: only encode the few that could be over the limit
    suspects = np.flatnonzero(chars * 4 > MAX_REPORT_BYTES)
    sizes = {i: sum(len(out[name].iat[i].encode("utf-8")) for name in ("text",) + SECTION_COLUMNS) for i in suspects}
    big = [i for i, size in sizes.items() if size > MAX_REPORT_BYTES]
    return [
        Problem(
            int(table.rows[i]),
            None,
            f"report has {sizes[i]:,} bytes of text, more than the "
            f"{MAX_REPORT_BYTES:,} allowed (a broken quote in a CSV?)",
        )
        for i in big
    ]


# ---------------------------------------------------------------------------------------------
# readings


def read_readings_long(
    path, vocab: Vocabulary, uncertain_as: str | None, known_report_ids: set[str] | None
) -> pd.DataFrame:
    """Read one reading per row (report_id, label, reader, value); returns report_id, label, reader, value, row."""
    _check_choices(uncertain_as, "skip")
    table = _load(path)
    _require_rows(table)
    cols = {
        "report_id": table.column("report_id", *ID_COLUMNS),
        "label": table.column("label"),
        "reader": table.column("reader"),
        "value": table.column("value"),
    }
    missing = [name for name, col in cols.items() if col is None]
    if missing:
        _raise_if(
            table.source,
            table.problems
            + [
                Problem(
                    None,
                    None,
                    "missing column(s): "
                    + ", ".join(repr(m) for m in missing)
                    + " (long format needs report_id, label, reader, value)",
                )
            ],
        )
    rid, raw_label, reader = (_stripped(table, cols[k]) for k in ("report_id", "label", "reader"))
    problems = _key_problems(table, rid, cols["report_id"], reader, cols["reader"], known_report_ids)
    label, label_problems = _resolve_labels(raw_label, vocab)
    problems += table.at((raw_label == "").to_numpy(), cols["label"], "blank label")
    problems += [Problem(int(r), cols["label"], m) for r, m in _masked(table.rows, label_problems)]
    value, value_problems = _values(
        _stripped(table, cols["value"]),
        uncertain_as,
        "reject",
        "blank value (long format needs 0 or 1 on every row; leave the row out when a reader did not mark the label)",
    )
    problems += [Problem(int(r), cols["value"], m) for r, m in _masked(table.rows, value_problems)]
    out = pd.DataFrame({"report_id": rid, "label": label, "reader": reader, "value": value, "row": table.rows})
    problems += _duplicate_readings(out)
    _raise_if(table.source, table.problems + problems)
    return _finish(out)


def read_readings_wide(
    path,
    vocab: Vocabulary,
    uncertain_as: str | None,
    known_report_ids: set[str] | None,
    reader_column: str = "reader",
    blank_as: str = "skip",
    ignore_columns: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Read one row per (report, reader) with a column per label; returns the long shape with row."""
    _check_choices(uncertain_as, blank_as)
    table = _load(path)
    _require_rows(table)
    id_col, reader_col = table.column("report_id", *ID_COLUMNS), table.column(reader_column)
    missing = ["report id ('report_id', 'id' or 'uid')"] if id_col is None else []
    missing += [repr(reader_column)] if reader_col is None else []
    if missing:
        _raise_if(table.source, table.problems + [Problem(None, None, "missing column(s): " + ", ".join(missing))])
    ignored = {c.strip().lower() for c in ignore_columns}
    headers = [
        c
        for c in table.frame.columns
        if c not in (id_col, reader_col) and c.lower() not in ignored and _attribute_header(c, vocab) is None
    ]  # "<label>.<attribute>" columns: read_reading_attributes
    label_of, problems = _label_columns(headers, vocab)
    if not headers:
        problems.append(Problem(None, None, "no label columns (wide format: one column per label)"))
    rid, reader = _stripped(table, id_col), _stripped(table, reader_col)
    problems += _key_problems(table, rid, id_col, reader, reader_col, known_report_ids)
    dup = (pd.DataFrame({"r": rid, "d": reader}).duplicated(keep="first") & (rid != "") & (reader != "")).to_numpy()
    problems += _duplicate_rows(table, dup, rid, reader)
    out, cell_problems = _cells(table, rid, reader, label_of, uncertain_as, blank_as)
    _raise_if(table.source, table.problems + problems + cell_problems)
    return _finish(out)


def _check_choices(uncertain_as: str | None, blank_as: str) -> None:
    """Programmer errors: an option outside its allowed values."""
    if uncertain_as not in UNCERTAIN_CHOICES:
        raise UserError(f"uncertain_as must be one of {UNCERTAIN_CHOICES}, not {uncertain_as!r}")
    if blank_as not in BLANK_CHOICES:
        raise UserError(f"blank_as must be one of {BLANK_CHOICES}, not {blank_as!r}")


def _key_problems(
    table: _Table, rid: pd.Series, rid_col: str, reader: pd.Series, reader_col: str, known: set[str] | None
) -> list[Problem]:
    """Blank report ids and readers, and report ids the study does not have."""
    typed = _type_problems(table, rid_col, ID_KINDS, "report ids") + _type_problems(
        table, reader_col, ID_KINDS, "readers"
    )
    if typed:
        _raise_if(table.source, table.problems + typed)
    blank_rid = (rid == "").to_numpy()
    problems = table.at(blank_rid, rid_col, "blank report id")
    problems += table.at((reader == "").to_numpy(), reader_col, "blank reader")
    problems += _id_text_problems(table, rid, rid_col, "report id") + _id_text_problems(
        table, reader, reader_col, "reader"
    )
    if known is not None:
        unknown = ~rid.isin(list(known)).to_numpy() & ~blank_rid
        problems += table.at(
            unknown,
            rid_col,
            [f"unknown report id {r!r} (not in the study nor among the reports being imported)" for r in rid[unknown]],
        )
    return problems


def _resolve_labels(raw: pd.Series, vocab: Vocabulary) -> tuple[pd.Series, pd.Series]:
    """Map ids or display names to ids; returns (ids with "" when invalid, messages with "" when fine)."""
    mapping, messages = {}, {}
    for key in pd.unique(raw):
        mapping[key], messages[key] = _resolve_label(key, vocab) if key else ("", "")
    return raw.map(mapping), raw.map(messages)


def _resolve_label(key: str, vocab: Vocabulary) -> tuple[str, str]:
    """One label key -> (id, "") or ("", why it is refused)."""
    found = vocab.resolve(key)
    if found is None:
        sample = ", ".join(vocab.asked_ids[:6]) + (", ..." if len(vocab.asked_ids) > 6 else "")
        close = difflib.get_close_matches(str(key), [lab.name for lab in vocab.labels] + vocab.ids, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return "", (
            f"unknown label {key!r}: not an id or display name in vocabulary {vocab.id!r} (valid ids: {sample}){hint}"
        )
    if found in vocab.derived_ids:
        return "", (
            f"label {key!r} ({found}) is derived in vocabulary {vocab.id!r}: it is computed from "
            "the other labels, not imported; leave it out"
        )
    return found, ""


def _label_columns(headers: list[str], vocab: Vocabulary) -> tuple[dict[str, str], list[Problem]]:
    """Wide format: header -> label id, with problems for unknown, derived and repeated labels."""
    label_of, seen, problems = {}, {}, []
    for header in headers:
        found, message = _resolve_label(header, vocab)
        if message:
            problems.append(Problem(None, header, message))
        elif found in seen:
            problems.append(
                Problem(None, header, f"column names label {found!r} again (as does column {seen[found]!r})")
            )
        else:
            label_of[header] = found
            seen[found] = header
    return label_of, problems


def _values(raw: pd.Series, uncertain_as: str | None, blank_as: str, blank_message: str) -> tuple[pd.Series, pd.Series]:
    """Map value strings to 1/0 (NaN when skipped or invalid) and per-row messages ("" when fine)."""
    code = raw.map(VALUE_CODES)
    blank = raw == ""
    uncertain = code == -1
    value = code.where(~uncertain, {"positive": 1, "negative": 0}.get(uncertain_as, np.nan))
    if blank_as == "negative":
        value = value.where(~blank, 0)
    messages = pd.Series("", index=raw.index, dtype=object)
    bad = code.isna() & ~blank
    if bad.any():
        messages[bad] = [f"value {v!r} is not 1, 0 or -1 (uncertain)" for v in raw[bad]]
    if uncertain_as is None:
        messages[uncertain] = "value -1 (uncertain) needs a rule: choose --uncertain-as positive|negative|reject"
    elif uncertain_as == "reject":
        messages[uncertain] = "value -1 (uncertain) rejected (--uncertain-as reject)"
    if blank_as == "reject":
        messages[blank] = blank_message
    return value, messages


def _masked(rows: np.ndarray, messages: pd.Series):
    """(row, message) pairs where a message is set."""
    mask = (messages != "").to_numpy()
    return zip(rows[mask], messages[mask], strict=False)


def _duplicate_readings(out: pd.DataFrame) -> list[Problem]:
    """Two rows for the same (report, label, reader); names the first row."""
    keys = ["report_id", "label", "reader"]
    valid = (out[keys] != "").all(axis=1)
    dup = out[keys].duplicated(keep="first") & valid
    if not dup.any():
        return []
    first = out[valid & ~out[keys].duplicated(keep="first")].set_index(keys)["row"]
    return [
        Problem(
            int(r.row),
            None,
            f"duplicate reading of {r.label!r} by {r.reader!r} for report "
            f"{r.report_id!r} (first at row {first[(r.report_id, r.label, r.reader)]})",
        )
        for r in out[dup].itertuples()
    ]


def _duplicate_rows(table: _Table, dup: np.ndarray, rid: pd.Series, reader: pd.Series) -> list[Problem]:
    """Wide format: a second row for the same (report, reader)."""
    if not dup.any():
        return []
    keys = pd.DataFrame({"r": rid, "d": reader, "row": table.rows})
    first = keys[~keys[["r", "d"]].duplicated(keep="first")].set_index(["r", "d"])["row"]
    return table.at(
        dup,
        None,
        [
            f"duplicate row for report {r!r} and reader {d!r} (first at row {first[(r, d)]})"
            for r, d in zip(rid[dup], reader[dup], strict=False)
        ],
    )


def _cells(
    table: _Table, rid: pd.Series, reader: pd.Series, label_of: dict[str, str], uncertain_as: str | None, blank_as: str
) -> tuple[pd.DataFrame, list[Problem]]:
    """Melt the label columns row-major into readings and check every cell."""
    headers = list(label_of)
    n, k = len(table.frame), len(headers)
    if k == 0:
        return pd.DataFrame(columns=READING_COLUMNS), []
    cells = pd.Series(table.frame[headers].to_numpy().ravel(), dtype=str).str.strip()
    value, messages = _values(cells, uncertain_as, blank_as, "blank value (--blank-as reject)")
    out = pd.DataFrame(
        {
            "report_id": np.repeat(rid.to_numpy(), k),
            "label": np.tile([label_of[h] for h in headers], n),
            "reader": np.repeat(reader.to_numpy(), k),
            "value": value,
            "row": np.repeat(table.rows, k),
        }
    )
    mask = (messages != "").to_numpy()
    header_of = np.tile(np.array(headers, dtype=object), n)
    problems = [
        Problem(int(r), h, m) for r, h, m in zip(out["row"][mask], header_of[mask], messages[mask], strict=False)
    ]
    return out[value.notna().to_numpy()], problems


def _finish(out: pd.DataFrame) -> pd.DataFrame:
    """The readings frame as callers get it: typed columns, fresh index."""
    out = out.reset_index(drop=True)
    return pd.DataFrame(
        {
            "report_id": out["report_id"].astype(str),
            "label": out["label"].astype(str),
            "reader": out["reader"].astype(str),
            "value": out["value"].astype("int64"),
            "row": out["row"].astype("int64"),
        }
    )


# ---------------------------------------------------------------------------------------------
# finding attributes of readings (side, severity, change, a study's own)

ATTRIBUTE_COLUMNS = ["report_id", "label", "reader", "attribute", "value"]


def _attribute_header(header: str, vocab: Vocabulary) -> str | None:
    """The attribute a wide-format "<label>.<attribute>" header names, or None for any other header."""
    if "." not in str(header):
        return None
    name = str(header).rsplit(".", 1)[1].strip().lower()
    return name if name in dict(vocab.attribute_values) else None


def read_reading_attributes(path, vocab: Vocabulary, fmt: str, readings: pd.DataFrame) -> pd.DataFrame:
    """Attribute values in a readings file: long format, a column per attribute (`side`, `severity`, ...);
    wide format, a column "<label>.<attribute>" (`Effusion.side`). A value needs a ticked label that carries
    the attribute and one of its values; anything else is refused with its row and column."""
    table = _load(path)
    names = dict(vocab.attribute_values)
    if fmt == "long":
        columns = {c: (None, c.strip().lower()) for c in table.frame.columns if c.strip().lower() in names}
    else:
        columns = {
            c: (str(c).rsplit(".", 1)[0], _attribute_header(c, vocab))
            for c in table.frame.columns
            if _attribute_header(c, vocab)
        }
    if not columns:
        return pd.DataFrame(columns=ATTRIBUTE_COLUMNS)
    rid = _stripped(table, table.column("report_id", *ID_COLUMNS))
    reader = _stripped(table, table.column("reader")) if table.column("reader") else pd.Series("", index=rid.index)
    ticked = {
        (r, lab, d)
        for r, lab, d, v in readings[["report_id", "label", "reader", "value"]].itertuples(index=False)
        if v == 1
    }
    labels = _stripped(table, table.column("label")) if fmt == "long" else None
    rows, problems = [], []
    for col, (label_key, attribute) in columns.items():
        cells = _stripped(table, col)
        for pos in [i for i, v in enumerate(cells) if v]:
            key = label_key if label_key is not None else labels.iloc[pos]
            label = vocab.resolve(key) or key
            value = cells.iloc[pos].lower()
            message = _attribute_problem(vocab, label, attribute, value)
            if message is None and (rid.iloc[pos], label, reader.iloc[pos]) not in ticked:
                message = f"{attribute} {value!r} given for {label!r}, which this reader did not tick (value 1)"
            if message:
                problems.append(Problem(int(table.rows[pos]), col, message))
            else:
                rows.append((rid.iloc[pos], label, reader.iloc[pos], attribute, value))
    _raise_if(table.source, problems)
    return pd.DataFrame(rows, columns=ATTRIBUTE_COLUMNS)


def _attribute_problem(vocab: Vocabulary, label: str, attribute: str, value: str) -> str | None:
    """Why a label's attribute value is not accepted, or None."""
    if label not in vocab.ids:
        return f"unknown label {label!r}"
    try:
        vocab.check_attribute(label, attribute, value)
    except VocabularyError as exc:
        return str(exc)
    return None


def read_openi_attributes(reports_path, vocab: Vocabulary) -> pd.DataFrame:
    """Attribute gold of OpenI's MeSH column ("Pleural Effusion/right/small") for the reader openi-gold."""
    table = _load(reports_path)
    uid, mesh = table.column("uid"), table.column("MeSH")
    if uid is None or mesh is None:
        return pd.DataFrame(columns=ATTRIBUTE_COLUMNS)
    specs = vocab.attribute_specs()
    rows = [
        (rid, label, OPENI_READER, name, value)
        for rid, cell in zip(_stripped(table, uid), _stripped(table, mesh), strict=False)
        for label, found in mesh_attributes(cell, specs).items()
        for name, value in found.items()
    ]
    return pd.DataFrame(rows, columns=ATTRIBUTE_COLUMNS)


# ---------------------------------------------------------------------------------------------
# OpenI


def read_openi(reports_path, labels_path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read OpenI reports.csv and labels14.csv: (reports with an `empty` flag, readings by openi-gold)."""
    reports_table, labels_table = _load(reports_path), _load(labels_path)
    _require_rows(reports_table)
    _require_rows(labels_table)
    reports, problems = _reports(reports_table, ("uid",), allow_empty=True, extra=("indication", "comparison"))
    problems = _sourced(reports_table, reports_table.problems + problems)
    readings, label_problems = _openi_labels(labels_table, set(reports["report_id"]))
    problems += _sourced(labels_table, labels_table.problems + label_problems)
    _raise_if(f"{reports_table.source} + {labels_table.source}", problems)
    return reports, readings


def _sourced(table: _Table, problems: list[Problem]) -> list[Problem]:
    """Tag problems with their file when one import reads two."""
    return [Problem(p.row, p.column, p.message, p.source or table.source) for p in problems]


def _openi_labels(table: _Table, report_ids: set[str]) -> tuple[pd.DataFrame, list[Problem]]:
    """labels14.csv: filename CXR<uid>, 14 label columns; `normal` and other columns ignored."""
    file_col = table.column("filename")
    label_of = {table.column(name): name.lower() for name in OPENI_LABELS if table.column(name)}
    missing = [name for name in OPENI_LABELS if not table.column(name)]
    if file_col is None or missing:
        names = (["filename"] if file_col is None else []) + missing
        return pd.DataFrame(columns=READING_COLUMNS), [Problem(None, None, "missing column(s): " + ", ".join(names))]
    filename = _stripped(table, file_col)
    matched = filename.str.extract(r"^(?i:CXR)(\S+)$")[0].fillna("")
    problems = table.at(
        (matched == "").to_numpy(), file_col, [f"filename {f!r} is not CXR<uid>" for f in filename[matched == ""]]
    )
    known = (matched == "") | matched.isin(list(report_ids))
    problems += table.at(
        ~known.to_numpy(), file_col, [f"labels for uid {u!r}, which has no report" for u in matched[~known]]
    )
    dup = (matched.duplicated(keep="first") & (matched != "")).to_numpy()
    reader = pd.Series(OPENI_READER, index=matched.index, dtype=str)
    problems += _duplicate_rows(table, dup, matched, reader)
    out, cell_problems = _cells(table, matched, reader, label_of, "reject", "reject")
    return _finish(out), problems + cell_problems


# ---------------------------------------------------------------------------------------------
# prompt dictionary


def read_prompt_dictionary(path) -> dict[str, str]:
    """Read a JSON or YAML mapping label -> free-text guidance."""
    path = Path(path)
    source = path.name
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        _fail(source, f"unknown file type {path.suffix or '(no extension)'!r}; use .json, .yaml or .yml")
    text, problems = _decode(_read_bytes(path, source))
    _raise_if(source, problems)
    data, lines, problems = (_parse_json if path.suffix.lower() == ".json" else _parse_yaml)(text, source)
    if not isinstance(data, dict):
        _fail(source, f"expected a mapping of label -> guidance text, got {_kind(data)}")
    if not data:
        problems.append(Problem(None, None, "mapping has no entries"))
    for key, value in data.items():
        if not isinstance(key, str):
            problems.append(
                Problem(lines.get(str(key)), None, f"key {key!r} must be a label name (text), got {_kind(key)}")
            )
        elif not isinstance(value, str):
            problems.append(Problem(lines.get(key), None, f"guidance for {key!r} must be text, got {_kind(value)}"))
    _raise_if(source, problems)
    return dict(data)


def _kind(value) -> str:
    """A user-facing type name."""
    names = {
        dict: "a mapping",
        list: "a list",
        str: "text",
        int: "a number",
        float: "a number",
        bool: "true/false",
        type(None): "nothing (null)",
    }
    return names.get(type(value), type(value).__name__)


def _parse_json(text: str, source: str):
    """JSON with repeated keys reported; returns (data, key lines (none for JSON), problems)."""
    problems = []

    def pairs(items):
        seen = {}
        for key, value in items:
            if key in seen:
                problems.append(Problem(None, None, f"key {key!r} appears more than once"))
            seen[key] = value
        return seen

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        _fail_row(source, exc.lineno, f"not valid JSON: {exc.msg} (column {exc.colno})")
    return data, {}, problems


def _parse_yaml(text: str, source: str):
    """YAML with repeated top-level keys reported; returns (data, key -> line, problems)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        _fail_row(source, mark.line + 1 if mark else None, f"not valid YAML: {getattr(exc, 'problem', exc)}")
    lines, problems = {}, []
    if isinstance(node, yaml.MappingNode):
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key, line = key_node.value, key_node.start_mark.line + 1
            if key in lines:
                problems.append(Problem(line, None, f"key {key!r} appears more than once (first at line {lines[key]})"))
            else:
                lines[key] = line
    return data, lines, problems


def _fail_row(source: str, row: int | None, message: str) -> None:
    """Raise a single problem at a line."""
    raise ImportProblems(source, [Problem(row, None, message)])


# ---------------------------------------------------------------------------------------------
# outside phrase lists (synonyms for the offline proposer)

PHRASE_LIST_COLUMNS = ("observation", "list", "raw_phrase")
PHRASE_LISTS = ("mention", "unmention")


def read_phrase_lists(path, vocab: Vocabulary) -> dict[str, dict[str, list[str]]]:
    """A CheXpert-labeler-style phrase table (observation, list, raw_phrase[, matched_as]) as
    {label id: {"mention": [...], "unmention": [...]}}; observations that name no label are left out.

    An observation names a label when the words of one contain the words of the other ("Pleural
    Effusion" -> effusion); the table is read where it lies at run time, never copied into a study.
    """
    table = _load(path)
    frame, problems = table.frame, list(table.problems)
    missing = [c for c in PHRASE_LIST_COLUMNS if c not in frame.columns]
    if missing:
        _raise_if(
            table.source,
            problems + [Problem(None, c, "missing column (needs observation, list, raw_phrase)") for c in missing],
        )
    _require_rows(table)
    kind = _stripped(table, "list").str.lower()
    problems += table.at(~kind.isin(PHRASE_LISTS), "list", "must be 'mention' or 'unmention'")
    phrase = frame["matched_as"] if "matched_as" in frame.columns else frame["raw_phrase"]
    phrase = phrase.where(phrase.str.strip() != "", frame["raw_phrase"]).str.replace("_", " ").str.strip()
    problems += table.at(phrase == "", "raw_phrase", "is empty")
    _raise_if(table.source, problems)
    words = {lab.id: _name_words(lab.name) | _name_words(lab.id) for lab in vocab.labels if not lab.derived}
    out: dict[str, dict[str, list[str]]] = {}
    for obs, k, p in zip(frame["observation"], kind, phrase, strict=False):
        ow = _name_words(obs)
        for lab, lw in words.items():
            if ow and (ow <= lw or lw <= ow):
                lists = out.setdefault(lab, {"mention": [], "unmention": []})
                if p not in lists[k]:
                    lists[k].append(p)
    return out


def _name_words(name: str) -> frozenset[str]:
    """The lower-case words of a label or observation name ("Pleural_Thickening" -> pleural, thickening)."""
    return frozenset(re.findall(r"[a-z0-9]+", str(name).lower().replace("_", " ")))
