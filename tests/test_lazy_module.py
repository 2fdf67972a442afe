"""runtime.lazy_module: the one deferred import runs the module's code on first attribute use, not before."""

from __future__ import annotations

import sys

from workbench import runtime


def test_a_lazy_module_runs_only_when_used(tmp_path, monkeypatch):
    (tmp_path / "wb_lazy_probe.py").write_text("import os\nos.environ['WB_LAZY_PROBE'] = 'ran'\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("WB_LAZY_PROBE", raising=False)
    monkeypatch.delitem(sys.modules, "wb_lazy_probe", raising=False)
    module = runtime.lazy_module("wb_lazy_probe")
    assert "WB_LAZY_PROBE" not in __import__("os").environ  # registered, not run
    assert module.VALUE == 42
    assert __import__("os").environ["WB_LAZY_PROBE"] == "ran"
    assert runtime.lazy_module("wb_lazy_probe") is module  # a second request returns the same module


def test_an_already_imported_module_is_returned_as_it_is():
    import json

    assert runtime.lazy_module("json") is json
