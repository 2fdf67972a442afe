"""Write the import graph of the workbench's layers into docs/architecture.md (a Mermaid flowchart between markers).

Read from the code (every `import workbench...` in every module, function-level imports included), so the
picture cannot drift: tests/test_house.py fails when the committed one differs from what this prints.
Run `python docs/gen_architecture.py` after moving a module; `--check` only compares.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "workbench"
PAGE = HERE / "architecture.md"
BEGIN, END = "<!-- import graph: begin (docs/gen_architecture.py) -->", "<!-- import graph: end -->"
# the layers drawn, top to bottom; a top-level module outside these is drawn under its own name
LAYERS = ("ui", "cli", "services", "labeller", "scoring", "bundle", "importers", "study", "store", "core", "shipped")
FOUNDATION = ("errors", "runtime", "__init__")  # imported from everywhere (or the package's own face): not drawn


def layer_of(module: str) -> str | None:
    """The drawn layer of a dotted module name under workbench (None for the package itself)."""
    parts = module.split(".")
    if parts[0] != "workbench" or len(parts) < 2 or parts[1] in FOUNDATION:
        return None
    return parts[1]


def imports_of(path: Path) -> set[str]:
    """The workbench modules one file imports (absolute imports; the project writes no relative ones)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("workbench")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workbench"):
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def edges() -> dict[str, set[str]]:
    """layer -> the layers it imports (itself left out)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        source = layer_of(".".join(rel.parts))
        if source is None:
            continue
        for module in imports_of(path):
            target = layer_of(module)
            if target and target != source and _is_module(target):
                found[source].add(target)
    return found


def _is_module(name: str) -> bool:
    """A subpackage or module of workbench (not a name imported from the package's __init__)."""
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").exists()


def mermaid() -> str:
    """The graph as a Mermaid flowchart, layers in LAYERS order, the rest after them by name."""
    graph = edges()
    nodes = sorted(set(graph) | {t for ts in graph.values() for t in ts}, key=_order)
    lines = ["```mermaid", "flowchart TD"]
    lines += [f"    {n}[{n}/]" if (PACKAGE / n).is_dir() else f"    {n}[{n}.py]" for n in nodes]
    lines += [f"    {s} --> {t}" for s in nodes for t in sorted(graph.get(s, ()), key=_order)]
    lines.append("```")
    return "\n".join(lines)


def _order(name: str) -> tuple[int, str]:
    return (LAYERS.index(name) if name in LAYERS else len(LAYERS), name)


def page_with_graph(page: str) -> str:
    """The page's text with the generated graph between the markers."""
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{mermaid()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    """Rewrite the page, or with --check say whether it is current."""
    page = PAGE.read_text(encoding="utf-8")
    new = page_with_graph(page)
    if "--check" in argv:
        if new != page:
            print("docs/architecture.md: the import graph is stale; run python docs/gen_architecture.py")
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
