"""Names and identifiers a person reads or types: ids and cohort names that must look like what they are,
report text as stored, and names that match nothing ("did you mean ...").

An id must look like what it is: a right-to-left override, a zero-width space or a line separator
can make two different ids look the same on screen, or one id look like another. Report text may
hold tabs and line breaks but no other C0 control: a NUL is stored by SQLite and refused by
PostgreSQL, and no report needs one.
"""

from __future__ import annotations

import difflib
import re
import unicodedata

from workbench.errors import UserError

MAX_COHORT_CHARS = 100
# Control (Cc), format (Cf: zero-width, bidi embeddings, overrides and isolates, soft hyphen, BOM, tags),
# line and paragraph separators, and the fillers that render as blank; written out (not computed from
# unicodedata over every code point) so importing this module stays instant. A test checks it
# against unicodedata.
HIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\u2800\u3164\ufeff\uffa0\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
    # look-alikes that are not format characters: the combining grapheme joiner, variation selectors (VS16
    # makes "r1" and "r1\ufe0f" look the same) and spaces other than the plain one (a no-break space)
    "\u00a0\u034f\u2000-\u200a\u202f\u205f\u3000\ufe00-\ufe0f\U000e0100-\U000e01ef]"
)
# in report text: every C0 control but tab, line feed and carriage return (the importers accept CRLF files)
TEXT_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def describe_char(ch: str) -> str:
    """'U+202E (RIGHT-TO-LEFT OVERRIDE)': a character a reader cannot see, named."""
    name = unicodedata.name(ch, "") or {"\x00": "NUL"}.get(ch, "control character")
    return f"U+{ord(ch):04X} ({name})"


def first_hidden(text: str, pattern: re.Pattern = HIDDEN) -> str | None:
    """Where the first character matching pattern is, as 'U+... (NAME) at character N'; None when there is none."""
    found = pattern.search(text)
    return None if found is None else f"{describe_char(found.group())} at character {found.start() + 1}"


def check_cohort_name(name: str) -> str:
    """A cohort name as given, or UserError: not blank, at most 100 characters, nothing hidden or reordering."""
    if not isinstance(name, str) or not name.strip():
        raise UserError("a cohort name cannot be blank; give a short name such as dev, test or external")
    if len(name) > MAX_COHORT_CHARS:
        raise UserError(
            f"cohort name is {len(name):,} characters long; at most {MAX_COHORT_CHARS} (a short name such as dev)"
        )
    hidden = first_hidden(name)
    if hidden:
        raise UserError(
            f"cohort name {name.encode('unicode_escape').decode('ascii')!r} contains {hidden}: "
            "no line breaks, control, zero-width or direction characters; type the name plainly"
        )
    if name != name.strip():
        raise UserError(f"cohort name {name!r} starts or ends with spaces; give it without them")
    return name


MAX_LISTED = 12  # beyond this the message names the closest ones, not every choice


def closest(name: str | int, known: list[str], n: int = 3) -> list[str]:
    """The known names nearest to a mistyped one (case-insensitive), best first."""
    lowered = {k.lower(): k for k in known}
    return [lowered[m] for m in difflib.get_close_matches(str(name).lower(), list(lowered), n=n, cutoff=0.6)]


def unknown_message(kind: str, name: str | int, known: list[str], fix: str = "", word: str = "no") -> str:
    """'unknown label 'support_device' (did you mean 'support_devices'?); labels: ...' in one line (an id, an
    int, as written: 'no run 99')."""
    near = closest(name, known)
    text = f"{word} {kind} {name!r}"
    if near:
        text += f" (did you mean {' or '.join(repr(m) for m in near)}?)"
    listed = known if len(known) <= MAX_LISTED else known[:MAX_LISTED] + [f"... {len(known) - MAX_LISTED} more"]
    text += f"; {kind}s: {', '.join(map(str, listed))}" if known else f"; there is no {kind} yet"
    return text + (f"; {fix}" if fix else "")
