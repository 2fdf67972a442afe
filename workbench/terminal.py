"""Terminal output for the CLI: tables that fit 100 columns, numbers a person reads, progress that
does not flood a log file.

Tables are drawn with rich (wrapping long cells instead of running off the screen); values are
formatted by column (whole numbers as integers, rates with 3 decimals, durations in minutes,
timestamps to the minute), and an undefined value is shown as a dash explained once under the
table. CSV and JSON output never pass through here: scripts get every column and full precision.
"""

from __future__ import annotations

import io
import math
import re
import sys
import time
from typing import Callable

import pandas as pd

WIDTH = 100
DASH = "–"
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(:\d\d(\.\d+)?)?([+-]\d\d:\d\d|Z)?$")
P_COLUMNS = ("p_value", "p_holm", "p")
SHORT_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d$")
VALUE_COLUMNS = ("reference", "prediction", "value", "value_a", "value_b", "vote")
_NARROW = frozenset(DASH + "–—’‘“”…·×±≤≥") | frozenset(chr(c) for c in range(32, 127))  # one terminal cell each
NUMERIC_TEXT = re.compile(r"^[-+]?[\d.,]*[*]?$|^–$")  # "0.909", "0.909*", "–": right-aligned like numbers


def _is_missing(value) -> bool:
    """NaN, None and pandas NA."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def _column_kind(name: str, series: pd.Series) -> str:
    """How to print a column: int, rate, p, minutes, bool or text."""
    if pd.api.types.is_bool_dtype(series):
        return "bool"
    if not pd.api.types.is_numeric_dtype(series):
        return "text"
    if name.endswith(("_s", "_seconds", "seconds")):
        return "minutes"
    if name in P_COLUMNS:
        return "p"
    finite = series.dropna()
    whole = bool(len(finite)) and bool((finite == finite.round()).all())
    # floats that are all 0/1 are rates (recall 1.000) unless the column holds a 0/1 label value
    if pd.api.types.is_integer_dtype(series) or (whole and (name in VALUE_COLUMNS or (finite.abs() > 1).any())):
        return "int"
    return "rate"


def format_value(value, kind: str) -> str:
    """One cell as text (a dash for an undefined value)."""
    if _is_missing(value):
        return DASH
    if kind == "bool":
        return "yes" if value else "no"
    if kind == "int":
        return str(int(value))
    if kind == "minutes":
        return f"{float(value) / 60:.1f} min"
    if kind == "p":
        return "<0.001" if 0 < float(value) < 0.001 else f"{float(value):.3f}"
    if kind == "rate":
        return f"{float(value):.3f}"
    text = str(value)
    stamp = TIMESTAMP.match(text)
    return f"{stamp.group(1)} {stamp.group(2)}" if stamp else text


def formatted(frame: pd.DataFrame) -> tuple[list[list[str]], list[str], list[str]]:
    """(rows of text, column kinds, columns holding an undefined value)."""
    kinds = [_column_kind(str(c), frame[c]) for c in frame.columns]
    rows = [[format_value(v, k) for v, k in zip(record, kinds)] for record in frame.itertuples(index=False, name=None)]
    undefined = [str(c) for c in frame.columns if frame[c].map(_is_missing).any()]
    return rows, kinds, undefined


def undefined_notes(columns: list[str], explained: dict[str, str] | None) -> list[str]:
    """One line per distinct reason a dash appears (each explained once)."""
    if not columns:
        return []
    explained = explained or {}
    by_reason: dict[str, list[str]] = {}
    for col in columns:
        by_reason.setdefault(explained.get(col, "not defined for this row"), []).append(col)
    return [f"{DASH} in {', '.join(cols)}: {reason}" for reason, cols in by_reason.items()]


def render_table(frame: pd.DataFrame, wide: bool = False, undefined: dict[str, str] | None = None,
                 title: str | None = None) -> str:
    """A DataFrame as a plain-text table within WIDTH columns (no limit when wide), with notes on dashes."""
    if not wide:  # a column with nothing in it only takes width
        frame = frame[[c for c in frame.columns if not (frame[c].astype(str).str.strip() == "").all()]]
    rows, kinds, missing = formatted(frame)
    header = [str(col) for col in frame.columns]
    right = [kind != "text" or all(NUMERIC_TEXT.match(row[i]) for row in rows) for i, kind in enumerate(kinds)]
    text = _plain_table(header, rows, right, None if wide else WIDTH) if title is None else None
    if text is None:
        text = _rich_table(header, rows, kinds, right, wide, title)
    return "\n".join(text.splitlines() + undefined_notes(missing, undefined))


def _plain_table(header: list[str], rows: list[list[str]], right: list[bool], width: int | None) -> str | None:
    """The table as rich draws it (box SIMPLE_HEAD, no edges) when nothing needs wrapping, else None.

    Most tables fit as they are; drawing those here keeps rich (~50 ms to import and lay out)
    off `workbench metrics` and friends. Identical output to rich's is tested."""
    cells = [header, *rows]
    if not all(header) or not all(set(cell) <= _NARROW and cell == cell.strip() for row in cells for cell in row):
        return None  # no column, a blank heading, spaces at a cell's ends, wide or control characters: rich's rules
    widths = [max(1, *(len(row[i]) for row in cells)) for i in range(len(header))]
    total = sum(widths) + 2 * (len(widths) - 1)  # two spaces between columns (padding, then rich's separator)
    if width is not None and total > width:
        return None  # rich wraps or folds columns to fit

    def line(row: list[str]) -> str:
        return "  ".join(cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(row, widths, right)).rstrip()

    return "\n".join([line(header), "─" * total, *(line(row) for row in rows)])


def _rich_table(header: list[str], rows: list[list[str]], kinds: list[str], right: list[bool], wide: bool,
                title: str | None) -> str:
    """The table laid out by rich: long cells wrap or fold to fit the width."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), title=title,
                  title_justify="left")
    for position, (col, kind) in enumerate(zip(header, kinds)):
        # identifiers (no spaces) stay whole; prose columns wrap to make room
        words = kind == "text" and any(" " in row[position] and not SHORT_STAMP.match(row[position]) for row in rows)
        table.add_column(Text(col), justify="right" if right[position] else "left", overflow="fold", no_wrap=not words)
    for row in rows:
        table.add_row(*[Text(cell) for cell in row])
    buffer = io.StringIO()
    console = Console(file=buffer, width=100_000 if wide else WIDTH, color_system=None, highlight=False,
                      emoji=False, markup=False, force_terminal=False, legacy_windows=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def wrap(text: str, indent: str = "  ", width: int = WIDTH) -> str:
    """A paragraph wrapped to the terminal width with an indent (words kept whole)."""
    import textwrap

    return textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def emphasise(text: str, evidence: str, phrases: list[str]) -> tuple[str, int, int]:
    """The report with the labeller's evidence in >>...<< and look-for phrase matches in [...].

    Returns (text, evidence found (0/1), phrase matches). Matching is case-insensitive on word
    boundaries, so "ETT" does not match inside "settled".
    """
    spans: list[tuple[int, int, str]] = []
    found_evidence = 0
    if evidence and evidence.strip():
        at = text.lower().find(evidence.strip().lower())
        if at >= 0:
            spans.append((at, at + len(evidence.strip()), "evidence"))
            found_evidence = 1
    matches = 0
    for phrase in sorted({p for p in phrases if p and p.strip()}, key=len, reverse=True):
        for hit in re.finditer(rf"(?<!\w){re.escape(phrase.strip())}(?!\w)", text, flags=re.IGNORECASE):
            if not any(s < hit.end() and hit.start() < e for s, e, kind in spans if kind == "phrase"):
                spans.append((hit.start(), hit.end(), "phrase"))
                matches += 1
    # phrase marks go inside or outside the evidence mark; never split one another
    marks: list[tuple[int, int, str]] = []
    for start, end, kind in spans:
        if kind == "evidence":  # at one position: closing marks first, then evidence opens outside a phrase
            marks += [(start, 2, ">>"), (end, 1, "<<")]
        else:
            marks += [(start, 3, "["), (end, 0, "]")]
    out, last = [], 0
    for pos, _, mark in sorted(marks):
        out.append(text[last:pos])
        out.append(mark)
        last = pos
    out.append(text[last:])
    return "".join(out), found_evidence, matches


class Progress:
    """A progress callback for runs: a rich bar on a terminal, a line per 10% otherwise (logs stay readable)."""

    def __init__(self, stream=None, is_terminal: bool | None = None, step: float = 0.1):
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if is_terminal is None else is_terminal
        self.step = step
        self.next_share = step
        self.bar = None
        self.task = None
        self.last = 0.0

    def __call__(self, p) -> None:
        """Report one progress event (done, total, made, reused, failures)."""
        if self.terminal:
            self._bar(p)
        else:
            self._line(p)

    def _describe(self, p) -> str:
        return f"made {p.made}, reused {p.reused}, failures {p.failures}"

    def _line(self, p) -> None:
        if not p.total:
            return
        share = p.done / p.total if p.total else 1.0
        if share + 1e-12 < self.next_share and p.done < p.total:
            return
        while self.next_share <= share + 1e-12:
            self.next_share += self.step
        if p.done >= p.total:
            self.next_share = math.inf
        print(f"{p.done}/{p.total} calls ({share:.0%}): {self._describe(p)}", file=self.stream, flush=True)

    def _bar(self, p) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeRemainingColumn

        if self.bar is None:
            self.bar = RichProgress(TextColumn("calls"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                    TextColumn("{task.description}"), console=Console(file=self.stream),
                                    transient=False)
            self.task = self.bar.add_task(self._describe(p), total=p.total, completed=p.done)
            self.bar.start()
        now = time.monotonic()
        if p.done < p.total and now - self.last < 0.1:
            return
        self.last = now
        self.bar.update(self.task, completed=p.done, total=p.total, description=self._describe(p))
        if p.done >= p.total:
            self.close()

    def close(self) -> None:
        """Stop a live bar (safe to call more than once)."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def progress_callback() -> Callable:
    """The CLI's run progress reporter on stderr."""
    return Progress()
