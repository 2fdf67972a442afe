"""The one base of every exception the workbench raises on purpose.

A `WorkbenchError` is a user's mistake or a refused action: the CLI prints its message on one line
and exits 2, and pages show it in an error box. Anything else that escapes is a bug: the CLI
prints the traceback and asks for a report (exit 1). This module imports nothing, so the pure
`core` may use it too.
"""


class WorkbenchError(Exception):
    """Base of every project exception: its message says what was wrong and what to do."""

    exit_code = 2  # the CLI's exit status: a mistake to fix and run again


class StorageFault(WorkbenchError):
    """The disk, the database or Git refused a write (full, read-only, not a folder); nothing half-written was kept."""

    exit_code = 1  # not the user's mistake: the same as any other storage failure


class UserError(WorkbenchError, ValueError):
    """A value the user gave is wrong (unknown label, cohort, run or reader; a bad option)."""


class NotFound(WorkbenchError, KeyError):
    """Something the user named does not exist; the message lists what does."""

    def __str__(self) -> str:
        # KeyError quotes its message ("'unknown label x'"); a user reads the sentence as written
        return str(self.args[0]) if self.args else ""
