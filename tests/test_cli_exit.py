"""A CLI process ends without the interpreter's final garbage collection, and still runs every exit handler."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _exit_report(body: str) -> str:
    """Stdout of a fresh interpreter running BODY after an exit probe that runs after every other handler."""
    probe = textwrap.dedent(
        """
        import atexit, gc, sys
        atexit.register(lambda: print(f"frozen at exit: {gc.get_freeze_count()}", flush=True))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe + textwrap.dedent(body)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_short_lived_process_freezes_its_objects_after_the_other_exit_handlers():
    out = _exit_report(
        """
        import atexit
        from workbench import runtime
        runtime.short_lived()
        runtime.short_lived()  # a second call registers nothing more
        atexit.register(lambda: print("handler ran", flush=True))
        """
    )
    lines = out.splitlines()
    assert lines[0] == "handler ran"  # handlers registered later still run, and first
    assert lines[1].startswith("frozen at exit: ")
    assert int(lines[1].split(": ")[1]) > 1000  # the modules' objects were moved out of the collector's way
    assert len(lines) == 2


def test_a_process_that_is_not_short_lived_keeps_the_final_collection():
    out = _exit_report("from workbench import runtime\n")
    assert out.strip() == "frozen at exit: 0"


def test_the_command_line_group_makes_its_process_short_lived():
    out = _exit_report(
        """
        from workbench.cli import main
        main(["demo", "--help"], standalone_mode=False)
        """
    )
    assert int(out.splitlines()[-1].split(": ")[1]) > 1000
