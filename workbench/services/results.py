"""The results pages and the CLI read, as frozen dataclasses: their fields are the contract.

Each is also read like the dict it replaces (`case["text"]`, `{**case, ...}`), so a caller written
against the old dict keeps working while new code reads attributes (`case.text`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pandas as pd


@dataclass(frozen=True, eq=False)
class Result:
    """A frozen result that can also be read by field name."""

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        """A field's value, or default when there is no such field."""
        return getattr(self, key) if key in self.keys() else default

    def keys(self) -> tuple[str, ...]:
        """The field names."""
        return tuple(f.name for f in fields(self))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (values as they are)."""
        return {k: getattr(self, k) for k in self.keys()}


@dataclass(frozen=True, eq=False)
class Case(Result):
    """One (report, label) of a run: the report, readers' votes, the reference, the labeller's answer and its call."""

    report_id: str
    label: str
    text: str
    findings: str
    impression: str
    votes: pd.DataFrame  # reader, value
    reference: int | None
    reference_status: str | None
    prediction: dict | None  # the stored prediction row: value, evidence, status, call_key ...
    notes: pd.DataFrame
    messages: list  # the request's chat messages, as sent
    call: dict | None  # latency, tokens, cost, finish reason, the model that answered and its thinking


@dataclass(frozen=True, eq=False)
class Comparison(Result):
    """Two runs on the same reports: per-label changes with the paired test, fixed/broken cases and both macros."""

    run_a: int
    run_b: int
    table: pd.DataFrame  # per label: a, b (discordant counts), metrics of both runs, deltas, verdict
    cases: pd.DataFrame  # fixed and broken (report, label) cases
    excluded: dict  # what was left out of the comparison and how many
    macro_f1_a: float
    macro_f1_b: float
    macro_a: Any  # core.metrics MacroFigure: value and the labels it averages
    macro_b: Any
    zero_division: str


@dataclass(frozen=True)
class CaseRef:
    """A case sent from one page to another: run, report and label, and the comparison it came from."""

    run_id: int
    report_id: str
    label: str
    compare: tuple[int, int] | None = None
