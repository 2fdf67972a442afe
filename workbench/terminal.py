"""Terminal output for the CLI: tables that fit the terminal, numbers a person reads, progress that
does not flood a log file.

Tables fit the terminal's width (100 columns in a pipe or log) without ever cutting a number: text
columns are elided with "…" or wrapped, and when the table is still too wide whole columns are left
out and named under it (`--wide` shows them). Values are formatted by column (whole numbers as
integers, rates with 3 decimals, durations in minutes, timestamps to the minute), and an undefined
value is shown as a dash explained once under the table. CSV and JSON output never pass through
here: scripts get every column and full precision.
"""

from __future__ import annotations

import io
import math
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Callable

import pandas as pd

from workbench.core.evidence import evidence_found, evidence_spans
from workbench.core.metrics import p_text

WIDTH = 100
DASH = "–"
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(:\d\d(\.\d+)?)?([+-]\d\d:\d\d|Z)?$")
P_COLUMNS = ("p_value", "p_holm", "p")
SHORT_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d$")
VALUE_COLUMNS = ("reference", "prediction", "value", "value_a", "value_b", "vote")
_NARROW = frozenset(DASH + "–—’‘“”…·×±≤≥") | frozenset(chr(c) for c in range(32, 127))  # one terminal cell each
NUMERIC_TEXT = re.compile(r"^[-+]?[\d.,]*[*]?$|^–$")  # "0.909", "0.909*", "–": right-aligned like numbers
WHOLE_TEXT = re.compile(r"^[-+\d.,;:\s\[\]()*%<>=–]*$")  # "0.955 [0.914, 0.977]", "< 0.001": numbers, never cut
ELIDED_MIN = 8  # an identifier column keeps at least this many cells before "…"
WRAPPED_MIN = 12  # a prose column wraps to no fewer cells than this
HIDE_FIRST = ("_lo", "_hi")  # interval bounds go before other columns when a table must lose some


# Characters that drive a terminal or reorder what it shows: C0 controls but tab and line feed (ESC starts a
# clear-screen, a cursor move or a clickable OSC 8 link), DEL, the C1 controls (U+009B is a one-byte CSI),
# and the bidirectional embeddings, overrides and isolates.
DRIVING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(ch: str) -> str:
    """A control character as something a person sees: its Unicode control picture (␛, ␀, ␡) or <U+XXXX>."""
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)
    return "\u2421" if code == 0x7F else f"<U+{code:04X}>"


def visible(text: str) -> str:
    """Text from reports, model replies or users, safe to print: control characters shown, never obeyed
    (a CRLF line end stays a line end)."""
    text = str(text)
    if not DRIVING.search(text):
        return text
    return DRIVING.sub(lambda m: _shown(m.group()), text.replace("\r\n", "\n"))


def terminal_width() -> int:
    """The terminal's real width ($COLUMNS, else the terminal's own), or 100 for a pipe or log."""

    return max(20, shutil.get_terminal_size((WIDTH, 24)).columns)


def _is_missing(value) -> bool:
    """NaN, None and pandas NA."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def _column_kind(name: str, series: pd.Series) -> str:
    """How to print a column: int, rate, p, minutes, seconds (call latencies), bool or text."""
    if pd.api.types.is_bool_dtype(series):
        return "bool"
    if not pd.api.types.is_numeric_dtype(series):
        return "text"
    if "latency" in name:  # a call takes seconds: "0.0 min" beside a header that says _s reads as wrong
        return "seconds"
    if name.endswith(("_s", "_seconds", "seconds")):
        return "minutes"
    if name in P_COLUMNS or name.endswith(tuple(f" {c}" for c in P_COLUMNS)):  # "tuning p_value" too
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
    if kind == "seconds":
        return f"{float(value):.1f} s"
    if kind == "p":
        return p_text(float(value))
    if kind == "rate":
        return f"{float(value):.3f}"
    text = visible(value)
    stamp = TIMESTAMP.match(text)
    return f"{stamp.group(1)} {stamp.group(2)}" if stamp else text


def formatted(frame: pd.DataFrame) -> tuple[list[list[str]], list[str], list[str]]:
    """(rows of text, column kinds, columns holding an undefined value)."""
    kinds = [_column_kind(str(c), frame[c]) for c in frame.columns]
    rows = [
        [format_value(v, k) for v, k in zip(record, kinds, strict=False)]
        for record in frame.itertuples(index=False, name=None)
    ]
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


def render_table(
    frame: pd.DataFrame,
    wide: bool = False,
    undefined: dict[str, str] | None = None,
    title: str | None = None,
    width: int | None = None,
    bootstrap: tuple[str, ...] = (),
) -> str:
    """A DataFrame as a plain-text table within the terminal's width (or `width`; no limit when wide).

    No number is ever cut: text columns are elided or wrapped, then whole columns left out and named
    in a note. Notes under the table explain dashes once, and (for the estimate columns named in
    bootstrap, bounds in COL_lo / COL_hi) an estimate shown at the edge of its percentile interval."""
    if not wide:  # a column with nothing in it only takes width
        frame = frame[[c for c in frame.columns if not (frame[c].astype(str).str.strip() == "").all()]]
    rows, kinds, missing = formatted(frame)
    header = [str(col) for col in frame.columns]
    right = [kind != "text" or all(NUMERIC_TEXT.match(row[i]) for row in rows) for i, kind in enumerate(kinds)]
    limit = None if wide else (width or terminal_width())
    text = _plain_table(header, rows, right, limit) if title is None else None
    hidden: list[str] = []
    if text is None:
        keep, widths = _fit(header, rows, right, limit)
        hidden = [header[i] for i in range(len(header)) if i not in keep]
        text = _rich_table(
            [header[i] for i in keep],
            [[row[i] for i in keep] for row in rows],
            [kinds[i] for i in keep],
            [right[i] for i in keep],
            wide,
            title,
            widths=widths,
            width=limit,
        )
    notes = undefined_notes([c for c in missing if c not in hidden], undefined)
    notes += edge_notes(frame, [c for c in bootstrap if not {c, f"{c}_lo", f"{c}_hi"} & set(hidden)])
    if hidden:
        notes.append(f"hidden: {', '.join(hidden)}; --wide shows them")
    return "\n".join(text.splitlines() + [wrap(note, indent="", width=limit) if limit else note for note in notes])


EDGE_NOTE = (
    "an estimate equal to a bound of its interval is expected of a percentile bootstrap (the resampled "
    "values pile up there, e.g. F1 1.000 when most resamples are perfect); the interval is one-sided there, "
    "not wrong"
)


def at_edge(estimate, lo, hi) -> bool:
    """Whether an estimate, printed to 3 decimals, equals a printed bound of its interval."""
    if any(_is_missing(v) for v in (estimate, lo, hi)):
        return False
    shown = f"{float(estimate):.3f}"
    return shown in (f"{float(lo):.3f}", f"{float(hi):.3f}")


def edge_notes(frame: pd.DataFrame, estimates: list[str]) -> list[str]:
    """One line when an estimate, as printed, equals a bound of its bootstrap percentile interval."""
    at = [
        col
        for col in estimates
        if {col, f"{col}_lo", f"{col}_hi"} <= set(frame.columns)
        and any(at_edge(*values) for values in zip(frame[col], frame[f"{col}_lo"], frame[f"{col}_hi"], strict=False))
    ]
    return [f"{', '.join(at)}: {EDGE_NOTE}"] if at else []


def _cell_width(text: str) -> int:
    """Terminal cells a string takes (wide characters count two)."""
    if set(text) <= _NARROW:
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _fit(header: list[str], rows: list[list[str]], right: list[bool], limit: int | None) -> tuple[list[int], list[int]]:
    """(columns kept, their widths) so the table fits limit cells without cutting a number or a heading word.

    Numbers (and cells made of numbers, like "0.955 [0.914, 0.977]") keep their full width; identifier
    columns may be elided to ELIDED_MIN, prose columns wrapped to WRAPPED_MIN; then columns are left
    out, interval bounds first, from the right, never the first."""
    natural, least = [], []
    for i, name in enumerate(header):
        cells = [row[i] for row in rows]
        word = max((_cell_width(w) for w in name.split()), default=1)
        full = max([_cell_width(name), *(_cell_width(c) for c in cells)])
        if right[i] or all(WHOLE_TEXT.match(c) or SHORT_STAMP.match(c) for c in cells):
            floor = max([word, *(_cell_width(c) for c in cells)])
        else:  # the first column names the row: elided only when very long
            floor = max(word, min(full, WRAPPED_MIN if _is_prose(cells) else 32 if i == 0 else ELIDED_MIN))
        natural.append(full)
        least.append(floor)
    keep = list(range(len(header)))
    if limit is None:
        return keep, natural

    def room(cols: list[int]) -> int:
        return limit - sum(least[i] for i in cols) - 2 * (len(cols) - 1)

    hidden: list[list[int]] = []
    for unit in _hiding_order(header):
        if room(keep) >= 0:
            break
        keep = [i for i in keep if i not in unit]
        hidden.append(unit)
    for unit in reversed(hidden):  # a narrower column left out later may leave room for an earlier one
        if room(keep + unit) >= 0:
            keep = sorted(keep + unit)
    widths = {i: least[i] for i in keep}
    spare = room(keep)
    while spare > 0:  # grow the elided and wrapped columns towards their natural width, one cell each in turn
        growing = [i for i in keep if widths[i] < natural[i]]
        if not growing:
            break
        for i in growing[:spare]:
            widths[i] += 1
        spare -= min(spare, len(growing))
    return keep, [widths[i] for i in keep]


def _hiding_order(header: list[str]) -> list[list[int]]:
    """Groups of columns to leave out, in turn: interval bounds (a COL_lo with its COL_hi) first, then
    the other columns, each from the right; never the first column."""
    position = {name: i for i, name in enumerate(header)}
    units, seen = [], set()
    for i in range(len(header) - 1, 0, -1):
        if i in seen:
            continue
        name = header[i]
        stem = name[:-3] if name.endswith(HIDE_FIRST) else None
        pair = [position.get(stem + "_lo"), position.get(stem + "_hi")] if stem else []
        unit = sorted({j for j in pair if j not in (None, 0)} | {i})
        seen.update(unit)
        units.append(unit)
    return sorted(units, key=lambda u: not header[u[0]].endswith(HIDE_FIRST))  # stable: right to left within each


def _is_prose(cells: list[str]) -> bool:
    """Cells with words (spaces, not a timestamp): they wrap instead of being elided."""
    return any(" " in c and not SHORT_STAMP.match(c) for c in cells)


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
        return "  ".join(
            cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(row, widths, right, strict=False)
        ).rstrip()

    return "\n".join([line(header), "─" * total, *(line(row) for row in rows)])


def _rich_table(
    header: list[str],
    rows: list[list[str]],
    kinds: list[str],
    right: list[bool],
    wide: bool,
    title: str | None,
    widths: list[int] | None = None,
    width: int | None = WIDTH,
) -> str:
    """The table laid out by rich; with widths (from _fit) each column has exactly that width: headings
    wrap at spaces, identifiers are elided with "…", prose wraps, numbers are never cut."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), title=title, title_justify="left"
    )
    styles = []
    for position, (col, kind) in enumerate(zip(header, kinds, strict=False)):
        # identifiers (no spaces) stay whole; prose columns wrap to make room
        cells = [row[position] for row in rows]
        words = kind == "text" and _is_prose(cells)
        whole = right[position] or all(WHOLE_TEXT.match(c) or SHORT_STAMP.match(c) for c in cells)
        styles.append(
            {} if widths is None else {"no_wrap": True, "overflow": "ellipsis"} if not (words or whole) else {}
        )
        table.add_column(
            Text(col, no_wrap=False, overflow="fold") if widths is not None else Text(col),
            justify="right" if right[position] else "left",
            overflow="fold",
            no_wrap=not words,
            width=None if widths is None else widths[position],
        )
    for row in rows:
        table.add_row(*[Text(cell, **style) for cell, style in zip(row, styles, strict=False)])
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=100_000 if wide or width is None else width,
        color_system=None,
        highlight=False,
        emoji=False,
        markup=False,
        force_terminal=False,
        legacy_windows=False,
    )
    console.print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def wrap(text: str, indent: str = "  ", width: int = WIDTH) -> str:
    """A paragraph wrapped to the terminal width with an indent (words kept whole)."""

    return textwrap.fill(
        visible(text),
        width=width,
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def emphasise(text: str, evidence: str, phrases: list[str]) -> tuple[str, int, int]:
    """The report with the labeller's evidence in >>...<< and look-for phrase matches in [...].

    Returns (text, evidence found (0/1), phrase matches). The evidence is found by core.evidence (the
    parser's rule: case, spacing and punctuation aside, ellipsis-joined fragments in order; each fragment
    marked); phrases match case-insensitively on word boundaries, so "ETT" does not match inside "settled".
    """
    evidence = (evidence or "").strip()
    found_evidence = int(evidence_found(evidence, text))
    spans: list[tuple[int, int, str]] = [(a, b, "evidence") for a, b in evidence_spans(evidence, text)]
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
        left = p.left() if hasattr(p, "left") else ""  # measured on the run's own calls (the bar has its own column)
        line = f"{p.done}/{p.total} calls ({share:.0%}): {self._describe(p)}" + (f", {left}" if left else "")
        print(line, file=self.stream, flush=True)

    def _bar(self, p) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        if self.bar is None:
            self.bar = RichProgress(
                TextColumn("calls"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=Console(file=self.stream),
                transient=False,
            )
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
