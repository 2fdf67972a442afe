"""One error base: a user's mistake is one line and exit 2, anything else is a bug with its traceback and exit 1."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import shutil

import pytest
from click.testing import CliRunner

import workbench
from workbench.cli import main
from workbench.errors import NotFound, UserError, WorkbenchError
from workbench.services import Workbench


def _project_exceptions():
    """Every exception class defined in a workbench module (UI modules need Streamlit's runtime: left out)."""
    found = {}
    for info in pkgutil.walk_packages(workbench.__path__, "workbench."):
        if info.name.startswith("workbench.ui"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{info.name}.{name}"] = obj
    return found


def test_every_public_project_exception_derives_from_workbench_error():
    classes = _project_exceptions()
    assert len(classes) >= 12  # the classes that existed before the base, at least
    private = {k for k in classes if k.rsplit(".", 1)[1].startswith("_")}  # internal control flow, never shown
    loose = sorted(k for k, c in classes.items() if k not in private and not issubclass(c, WorkbenchError))
    assert loose == []


def test_not_found_reads_as_written_and_is_still_a_key_error():
    exc = NotFound("unknown label 'x'")
    assert str(exc) == "unknown label 'x'" and isinstance(exc, KeyError) and isinstance(exc, LookupError)
    assert isinstance(UserError("bad"), ValueError)


@pytest.fixture
def demo(demo_template, tmp_path):
    shutil.copytree(demo_template, tmp_path / "demo")
    return str(tmp_path / "demo")


def test_a_programmer_error_in_a_command_shows_its_traceback_and_exits_1(demo, monkeypatch):
    def broken(self, *args, **kwargs):
        raise KeyError("macro_f1")  # a bug: a key the code expected, not something the user named

    monkeypatch.setattr(Workbench, "evaluate_run", broken)
    result = CliRunner().invoke(main, ["metrics", "2", "--study", demo])
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.output and "KeyError: 'macro_f1'" in result.output
    assert "this is a bug" in result.output


def test_a_users_mistake_is_one_line_and_exit_2(demo):
    result = CliRunner().invoke(main, ["metrics", "99", "--study", demo])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.startswith("error: ")
    assert result.output.startswith("error: no run 99") and len(result.output.strip().splitlines()) == 1
