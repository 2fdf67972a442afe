"""Reading-room rules that need no storage: the study's reading settings and when an empty save asks first.

The keyboard form (workbench/ui/keyboard/form.js, needsEmptyConfirm) applies the same rule in the
browser; the two are tested on the same cases.
"""

from __future__ import annotations

READING_KEYS = ("min_seconds_empty", "min_seconds_shown")
# A save (Enter, the Save button) pressed sooner than this after a report appeared, or before it appeared (a
# second Enter held while the first was stored), does not save it: nobody has read a report in half a second,
# and a double Enter 80-250 ms apart used to store the next report unseen with every label 0.
MIN_SECONDS_SHOWN = 0.5


def _known(reading: dict | None) -> dict:
    """The reading settings, refusing an unknown key."""
    reading = reading or {}
    unknown = sorted(set(reading) - set(READING_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (allowed: {', '.join(READING_KEYS)})")
    return reading


def min_seconds_shown(reading: dict | None) -> float:
    """workbench.yaml reading.min_seconds_shown: how long a report must have been on screen before a save key
    acts on it (0.5 s by default; 0 turns the guard off, up to 10 s)."""
    value = _known(reading).get("min_seconds_shown", MIN_SECONDS_SHOWN)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 10:
        raise ValueError(f"min_seconds_shown must be a number of seconds from 0 (off) to 10, got {value!r}")
    return float(value)


def save_too_soon(pressed_after_shown_s: float, min_seconds: float) -> bool:
    """A save pressed before the report appeared (negative) or sooner than min_seconds after it is ignored."""
    return min_seconds > 0 and pressed_after_shown_s < min_seconds


def min_seconds_empty(reading: dict | None) -> float:
    """workbench.yaml reading.min_seconds_empty: 0 (off, the default) or the seconds a report with nothing
    ticked must have been on screen before Enter saves it without asking."""
    value = _known(reading).get("min_seconds_empty", 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 600:
        raise ValueError(f"min_seconds_empty must be a number of seconds from 0 (off) to 600, got {value!r}")
    return float(value)


def needs_empty_confirmation(ticked: int, seconds_shown: float, min_seconds: float, confirmed: bool = False) -> bool:
    """Enter asks first: nothing ticked, the report shown for less than min_seconds (0 = never), not confirmed yet."""
    return min_seconds > 0 and ticked == 0 and seconds_shown < min_seconds and not confirmed
