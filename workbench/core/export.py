"""CSV files the workbench writes: every text cell that a spreadsheet would run as a formula is defused.

Report ids, evidence quoted from report text, reader ids and audit keys come from users and
files; a cell such as `=HYPERLINK(...)` or `@SUM(...)` opened in Excel or LibreOffice runs as a
formula (CSV injection). As OWASP recommends, such cells get a leading single quote, which the
spreadsheet shows as text. Numbers are left alone (a negative number is not a formula).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

# OWASP "CSV Injection": cells starting with these characters are interpreted by spreadsheets
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# a spreadsheet set to split on semicolons or tabs reads "x;=HYPERLINK(...)" (unquoted: no comma in it) as two
# cells, the second a formula: a formula start after such a separator is defused the same way
SPLIT_FORMULA = re.compile(r"([;\t][ ]*)([=+\-@])")


def neutralise_cell(value):
    """A text cell that could run as a formula, prefixed with a single quote; anything else unchanged.

    A carriage return inside a cell becomes a newline: the CSV writer quotes cells with newlines but
    not with bare CRs, and a spreadsheet would start a new row (and a new, unchecked cell) there.
    """
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START):
        value = "'" + value
    if ";" in value or "\t" in value:
        value = SPLIT_FORMULA.sub(r"\1'\2", value)
    return value.replace("\r\n", "\n").replace("\r", "\n") if "\r" in value else value


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of a table with every text cell and column name neutralised (numbers untouched)."""
    out = frame.copy()
    for col in out.columns:
        series = out[col]
        if series.dtype == object or pd.api.types.is_string_dtype(series.dtype):
            out[col] = series.map(neutralise_cell, na_action="ignore")
    out.columns = [neutralise_cell(str(c)) if isinstance(c, str) else c for c in out.columns]
    if out.index.dtype == object or pd.api.types.is_string_dtype(out.index.dtype):
        out.index = out.index.map(neutralise_cell)
    return out


def to_csv(frame: pd.DataFrame, path: str | Path | IO[str] | None = None, index: bool = False) -> str | None:
    """Write (or return) a table as CSV with formula cells neutralised: the one CSV writer of the workbench."""
    return csv_safe(frame).to_csv(path, index=index)


def json_records(frame: pd.DataFrame) -> list[dict]:
    """A table's rows as JSON-ready dicts at full precision (pandas' to_json rounds floats to 10 decimals).

    Missing and non-finite numbers are null; timestamps stay epoch milliseconds, as pandas wrote them.
    """
    return [{str(k): json_value(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def json_value(value):
    """One cell as a plain JSON value: numpy scalars as Python numbers, NaN/inf/NA as None."""
    if isinstance(value, pd.Timestamp):
        return None if pd.isna(value) else int(value.value // 1_000_000)
    if isinstance(value, pd.Timedelta):
        return None if pd.isna(value) else int(value.value // 1_000_000)
    if isinstance(value, (list, dict, tuple)):
        return value
    if value is None or pd.isna(value):
        return None
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value
