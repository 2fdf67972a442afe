"""The package carries its own data and says which versions it works with: the vocabularies, starter prompts and
demo files resolve through importlib.resources inside the package (so a wheel has them), pyproject's package-data
covers every one of them, the dependencies are ranges that the lock file's exact versions satisfy, and the version
is the CHANGELOG's. `.ci/run` proves the built wheel itself (installed non-editably, `workbench demo` run from it)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import workbench
from workbench.shipped import FOLDERS, shipped_dir
from workbench.study import PROMPTS_DIR, VOCAB_DIR, builtin_vocabularies, find_vocabulary_file

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PACKAGE = Path(workbench.__file__).resolve().parent


def _locked() -> dict[str, str]:
    """The exact versions in requirements.lock, by normalised name."""
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    return {_norm(m[1]): m[2] for m in re.finditer(r"^([A-Za-z0-9._-]+)==(\S+)", text, flags=re.MULTILINE)}


def _norm(name: str) -> str:
    """A distribution name as PyPI compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_shipped_folders_resolve_inside_the_package_through_importlib_resources():
    for name in FOLDERS:
        folder = shipped_dir(name)
        assert folder == Path(str(files("workbench.shipped") / name)) and folder.is_dir()
        assert PACKAGE in folder.resolve().parents, f"{name}/ is read from outside the package: {folder}"
    assert shipped_dir("vocab") == VOCAB_DIR and shipped_dir("prompts") == PROMPTS_DIR


def test_every_shipped_vocabulary_has_its_starter_prompts_and_the_demo_files_are_there():
    assert builtin_vocabularies() == ["chestxray14", "chexpert-14", "ranscore-21"]
    for name in builtin_vocabularies():
        assert find_vocabulary_file(name).parent == VOCAB_DIR
        assert (PROMPTS_DIR / name / "_task.yaml").is_file()
    for csv in ("demo/reports.csv", "demo/readings.csv", "demo-zh/reports.csv", "robustness/pairs.csv"):
        assert (shipped_dir("annotations") / csv).is_file(), csv


def test_an_unknown_shipped_folder_is_a_clear_error():
    with pytest.raises(ValueError, match="no shipped folder 'datasets'"):
        shipped_dir("datasets")


def test_package_data_covers_every_shipped_file_but_the_demo_generator():
    """A file the globs miss is in the checkout but not in the wheel: a pipx install would lack it."""
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["workbench"]
    shipped = [p for p in (PACKAGE / "shipped").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    missed = []
    for path in shipped:
        rel = path.relative_to(PACKAGE).as_posix()
        if path.suffix == ".py":
            continue  # __init__.py is a module; make_demo.py regenerates the demo files in a checkout
        if not any(fnmatch.fnmatch(rel, g.replace("**/", "*")) for g in globs):
            missed.append(rel)
    assert len(shipped) > 60 and not missed, missed


def test_the_checkouts_top_level_data_folders_point_into_the_package():
    for name in FOLDERS:
        top = ROOT / name
        assert top.is_symlink() and top.resolve() == shipped_dir(name).resolve(), name


def test_dependencies_are_ranges_litellm_exact_and_the_lock_satisfies_them():
    project = PYPROJECT["project"]
    locked = _locked()
    for text in project["dependencies"] + project["optional-dependencies"]["test"]:
        req = Requirement(text)
        name = _norm(req.name)
        if name in ("litellm", "ruff"):
            assert str(req.specifier).startswith("=="), f"{name} is pinned exactly"
        else:
            assert any(s.operator == "<" for s in req.specifier), f"{text}: no upper bound"
        assert name in locked, f"{name} is not in requirements.lock: run uv pip compile (docs/testing.md)"
        assert req.specifier.contains(locked[name], prereleases=True), f"lock has {name}=={locked[name]}, not {text}"
    assert locked["litellm"] not in ("1.82.7", "1.82.8")


def test_the_version_is_the_changelogs_latest():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    latest = re.search(r"^## \[?(\d+\.\d+\.\d+)\]? - (\d{4}-\d{2}-\d{2})", changelog, flags=re.MULTILINE)
    assert latest, "CHANGELOG.md has no '## X.Y.Z - YYYY-MM-DD' heading"
    assert PYPROJECT["project"]["version"] == latest[1] == "0.4.1"
