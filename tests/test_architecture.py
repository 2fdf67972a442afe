"""The dependency direction of ../shared/DESIGN.md, checked on the source."""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "workbench"
FORBIDDEN_IN_CORE = {"streamlit", "sqlmodel", "sqlalchemy", "litellm", "git", "requests", "httpx"}


def imported_modules(path: Path) -> set[str]:
    """Top-level and dotted names a module imports (anywhere in it, lazy imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted((PKG / "core").glob("*.py")), ids=lambda p: p.name)
def test_core_is_pure(path):
    names = imported_modules(path)
    bad = {n for n in names if n.split(".")[0] in FORBIDDEN_IN_CORE}
    assert not bad, f"{path.name} imports {bad}"
    project = {
        n for n in names if n.startswith("workbench") and not n.startswith("workbench.core") and n != "workbench.errors"
    }  # errors.py imports nothing: the base of every exception
    assert not project, f"core module {path.name} imports {project}"


def test_only_llm_imports_litellm():
    offenders = [
        p.relative_to(PKG)
        for p in PKG.rglob("*.py")
        if p.name != "llm.py" and any(n.split(".")[0] == "litellm" for n in imported_modules(p))
    ]
    assert offenders == []


def test_only_store_imports_sqlmodel_and_git():
    offenders = []
    for p in PKG.rglob("*.py"):
        if "store" in p.parts:
            continue
        names = {n.split(".")[0] for n in imported_modules(p)}
        if names & {"sqlmodel", "git"}:
            offenders.append(str(p.relative_to(PKG)))
    assert offenders == []


def test_nothing_imports_ui_or_cli():
    offenders = []
    for p in PKG.rglob("*.py"):
        if "ui" in p.parts or p.name == "cli.py":
            continue
        names = imported_modules(p)
        if any(n.startswith("workbench.ui") or n == "workbench.cli" for n in names):
            offenders.append(str(p.relative_to(PKG)))
    assert offenders == []


def test_only_store_imports_sqlalchemy():
    offenders = sorted(
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if "store" not in p.parts and any(n.split(".")[0] == "sqlalchemy" for n in imported_modules(p))
    )
    assert offenders == []


SERVICES = sorted((PKG / "services").glob("*.py"))


def _classes(path: Path) -> list[ast.ClassDef]:
    return [n for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.ClassDef)]


def test_services_are_plain_objects_not_mixins():
    """Every service class derives from Service alone, and the Workbench facade from nothing: no mixin
    order decides what a call does."""
    bases = {
        f"{p.name}:{c.name}": [ast.unparse(b) for b in c.bases]
        for p in SERVICES
        for c in _classes(p)
        if c.name.endswith("Service") and c.name != "Service" or c.name == "Workbench"
    }
    assert bases["__init__.py:Workbench"] == []
    wrong = {k: v for k, v in bases.items() if k != "__init__.py:Workbench" and v != ["Service"]}
    assert wrong == {}
    assert len(bases) >= 12


def test_no_service_calls_super_beyond_its_constructor():
    """A service reaches another through the collaborator its constructor took, never through super()."""
    offenders = []
    for p in SERVICES:
        for c in _classes(p):
            if not c.name.endswith("Service") or c.name == "Service":
                continue
            for f in (n for n in c.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"):
                if any(isinstance(x, ast.Call) and ast.unparse(x.func) == "super" for x in ast.walk(f)):
                    offenders.append(f"{p.name}:{c.name}.{f.name}")
    assert offenders == []


def test_every_service_method_has_one_owner_and_the_facade_names_it():
    """Each flat facade name forwards to the one service that defines it (what other services call of a
    collaborator is public and named for the domain, without a flat name of its own)."""
    from workbench.services import Workbench, _Forward

    forwarded = {name: f.service for name, f in vars(Workbench).items() if isinstance(f, _Forward)}
    owners: dict[str, list[str]] = {}
    for p in SERVICES:
        for c in _classes(p):
            if c.name.endswith("Service") and c.name != "Service":
                for f in c.body:
                    if isinstance(f, ast.FunctionDef) and not f.name.startswith("_"):
                        owners.setdefault(f.name, []).append(c.name)
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
    wb_services = {name: cls.__name__ for name, cls in _a_workbench_services().items()}
    assert {n: s for n, s in forwarded.items() if owners.get(n) != [wb_services[s]]} == {}


def _a_workbench_services() -> dict:
    """The service attribute names of Workbench and their classes, read from its constructor."""
    from workbench import services

    init = next(f for f in _classes(PKG / "services" / "__init__.py")[-1].body if getattr(f, "name", "") == "__init__")
    out = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = ast.unparse(node.targets[0])
            if target.startswith("self."):
                out[target.removeprefix("self.")] = getattr(services, ast.unparse(node.value.func))
    return out


def _private_reaches(path: Path, base: Path = PKG) -> list[str]:
    """`self.<collaborator>._name` and `wb.<service>._name` in a module: a reach into another object's private part."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            reach = isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name)
            # self.<collaborator>._x and wb.<service>._x; a service's own context is part of itself
            if reach and owner.value.id in ("self", "wb") and owner.attr != "ctx":
                found.append(f"{path.relative_to(base)}:{node.lineno}: {ast.unparse(node)}")
    return sorted(found)


def test_no_service_reaches_into_a_collaborators_private_methods():
    """What one service uses of another is public and named for the domain (study.cohort_name, not _cohort_name)."""
    offenders = [hit for p in sorted(PKG.rglob("*.py")) for hit in _private_reaches(p)]
    assert offenders == []


def test_the_private_reach_check_sees_one(tmp_path):
    """The check above finds a collaborator's private method called, and leaves a service's own alone."""
    module = tmp_path / "x.py"
    module.write_text("def f(self, wb):\n    self._own()\n    self.study._cohort_name(1)\n    wb.runs._cached\n")
    hits = [h.split(": ", 1)[1] for h in _private_reaches(module, tmp_path)]
    assert hits == ["self.study._cohort_name", "wb.runs._cached"]


# Public service methods that still return a bare dict (a record in a dict's clothes), to become records
# (services/results.py) one by one: the list may only shrink. Mappings keyed by data (label -> value) are
# annotated as such (dict[str, int]) and are not records.
DICT_RETURNS_LEFT = {
    "freezing.py:FreezeService.bundle_content",
    "freezing.py:FreezeService.test_look",
    "runs.py:RunsService.labeller_settings",
    "runs.py:RunsService.pending_batch",
    "runs.py:RunsService.settings_from_params",
}


def _bare_dict_returns(path: Path) -> list[str]:
    """Public methods of a module's service classes annotated `-> dict` (or `dict | None`) or returning a dict
    display with fixed string keys: what a page or the CLI would read by subscript."""

    def bare(annotation) -> bool:
        return annotation is not None and ast.unparse(annotation).replace(" ", "") in ("dict", "dict|None")

    def record_literal(f) -> bool:
        return any(
            isinstance(n, ast.Return)
            and isinstance(n.value, ast.Dict)
            and n.value.keys
            and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in n.value.keys)
            for n in ast.walk(f)
        )

    return [
        f"{path.name}:{c.name}.{f.name}"
        for c in _classes(path)
        if c.name.endswith("Service") and c.name != "Service"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and not f.name.startswith("_") and (bare(f.returns) or record_literal(f))
    ]


def test_services_return_records_not_bare_dicts():
    """No new public service method returns a bare dict; one turned into a record leaves the list above."""
    found = {hit for p in SERVICES for hit in _bare_dict_returns(p)}
    assert found - DICT_RETURNS_LEFT == set(), "return a frozen dataclass (services/results.py), not a dict"
    assert DICT_RETURNS_LEFT - found == set(), "now a record: take it off DICT_RETURNS_LEFT"


def test_the_dict_return_check_sees_one(tmp_path):
    """The check finds a record-shaped dict and a `-> dict` annotation, and leaves mappings and private ones alone."""
    module = tmp_path / "x.py"
    module.write_text(
        "class XService(Service):\n"
        "    def counts(self):\n        return {'added': 1}\n"
        "    def settings(self) -> dict:\n        return self.x\n"
        "    def values(self) -> dict[str, int]:\n        return {k: 1 for k in 'ab'}\n"
        "    def _inner(self):\n        return {'a': 1}\n"
    )
    assert _bare_dict_returns(module) == ["x.py:XService.counts", "x.py:XService.settings"]


def test_result_records_are_read_by_attribute_not_by_key():
    """The records pages and the CLI read have no dict face: `case.text`, never `case["text"]` (issue 29)."""
    from workbench import scoring
    from workbench.services import results

    records = (
        results.Case,
        results.Comparison,
        results.CompareView,
        results.EditEvaluation,
        results.OptimiseReport,
        results.DraftsEvaluation,
        results.StoredProposal,
        results.PartMetrics,
        results.PartComparison,
        results.Suggestion,
        scoring.RanScore,
        scoring.RobustnessResult,
    )
    faced = [c.__name__ for c in records for face in ("__getitem__", "get", "keys", "items") if hasattr(c, face)]
    assert faced == []
