"""Reading-room rules that need no storage: the study's reading settings and when an empty save asks first.

The keyboard form (workbench/ui/keyboard/form.js, needsEmptyConfirm) applies the same rule in the
browser; the two are tested on the same cases.
"""

from __future__ import annotations

READING_KEYS = ("min_seconds_empty",)


def min_seconds_empty(reading: dict | None) -> float:
    """workbench.yaml reading.min_seconds_empty: 0 (off, the default) or the seconds a report with nothing
    ticked must have been on screen before Enter saves it without asking."""
    reading = reading or {}
    unknown = sorted(set(reading) - set(READING_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (allowed: {', '.join(READING_KEYS)})")
    value = reading.get("min_seconds_empty", 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 600:
        raise ValueError(f"min_seconds_empty must be a number of seconds from 0 (off) to 600, got {value!r}")
    return float(value)


def needs_empty_confirmation(ticked: int, seconds_shown: float, min_seconds: float, confirmed: bool = False) -> bool:
    """Enter asks first: nothing ticked, the report shown for less than min_seconds (0 = never), not confirmed yet."""
    return min_seconds > 0 and ticked == 0 and seconds_shown < min_seconds and not confirmed
