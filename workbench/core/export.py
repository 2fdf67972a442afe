"""CSV files the workbench writes: every text cell that a spreadsheet would run as a formula is defused.

Report ids, evidence quoted from report text, reader ids and audit keys come from users and
files; a cell such as `=HYPERLINK(...)` or `@SUM(...)` opened in Excel or LibreOffice runs as a
formula (CSV injection). As OWASP recommends, such cells get a leading single quote, which the
spreadsheet shows as text. Numbers are left alone (a negative number is not a formula).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import pandas as pd

# OWASP "CSV Injection": cells starting with these characters are interpreted by spreadsheets
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value):
    """A text cell that could run as a formula, prefixed with a single quote; anything else unchanged.

    A carriage return inside a cell becomes a newline: the CSV writer quotes cells with newlines but
    not with bare CRs, and a spreadsheet would start a new row (and a new, unchecked cell) there.
    """
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START):
        value = "'" + value
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
