"""Names a user types (labels, cohorts, runs, readers) that match nothing: one message that says what
exists and, when a known name is close, "did you mean ..." (a typo is refused, never read as "none")."""

from __future__ import annotations

import difflib

MAX_LISTED = 12  # beyond this the message names the closest ones, not every choice


def closest(name: str, known: list[str], n: int = 3) -> list[str]:
    """The known names nearest to a mistyped one (case-insensitive), best first."""
    lowered = {k.lower(): k for k in known}
    return [lowered[m] for m in difflib.get_close_matches(str(name).lower(), list(lowered), n=n, cutoff=0.6)]


def unknown_message(kind: str, name: str, known: list[str], fix: str = "", word: str = "no") -> str:
    """'unknown label 'support_device' (did you mean 'support_devices'?); labels: ...' in one line."""
    near = closest(name, known)
    text = f"{word} {kind} {name!r}"
    if near:
        text += f" (did you mean {' or '.join(repr(m) for m in near)}?)"
    listed = known if len(known) <= MAX_LISTED else known[:MAX_LISTED] + [f"... {len(known) - MAX_LISTED} more"]
    text += f"; {kind}s: {', '.join(map(str, listed))}" if known else f"; there is no {kind} yet"
    return text + (f"; {fix}" if fix else "")
