"""The Workbench facade: every flat name is its service's method, with that method's signature and types."""

import inspect
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.services import Workbench, _Forward, _forward
from workbench.services.runs import RunsService

ROOT = Path(__file__).resolve().parents[1]
FORWARDS = {name: f for name, f in vars(Workbench).items() if isinstance(f, _Forward)}


def test_the_facade_forwards_many_names():
    assert len(FORWARDS) > 150


@pytest.mark.parametrize("name", sorted(FORWARDS))
def test_a_flat_name_is_its_services_method_with_its_signature(study, name):
    forward = FORWARDS[name]
    service = getattr(study, forward.service)
    assert getattr(type(service), name) is forward.method  # the method the facade names is the one it calls
    assert getattr(study, name) == getattr(service, name)
    assert inspect.signature(getattr(study, name)) == inspect.signature(forward.method.__get__(service))


def test_a_facade_name_must_be_the_methods_own():
    with pytest.raises(TypeError, match="give it the method's name"):
        _forward(RunsService.start_run, "runs").__set_name__(Workbench, "begin")


def _mypy() -> str | None:
    """A mypy executable: the project venv's, else the tools' one on this machine."""
    return shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy", path="/work/tools/bin")


@pytest.mark.skipif(_mypy() is None, reason="mypy is not installed")
def test_a_type_checker_follows_a_flat_name_to_the_method(tmp_path):
    """mypy sees wb.start_run as RunsService.start_run: its parameters, and a wrong call is an error."""
    snippet = tmp_path / "use_facade.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from workbench.services import Workbench

            def use(wb: Workbench) -> None:
                reveal_type(wb.start_run)
                reveal_type(wb.submit_reading)
                wb.start_run(cohort=3)
                wb.submit_reading("ann", "r1", {}, no_such_option=True)
            """
        )
    )
    done = subprocess.run(
        [
            _mypy(),
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--python-executable",
            sys.executable,
            str(snippet),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout
    assert 'Revealed type is "def (cohort: str, prompt_ref: str | None =' in out, out
    assert "-> workbench.services.runs.RunSummary" in out, out
    assert 'Revealed type is "def (reader: str, report_id: str, values: dict' in out, out
    assert 'Argument "cohort" has incompatible type "int"; expected "str"' in out, out
    assert 'Unexpected keyword argument "no_such_option"' in out, out
