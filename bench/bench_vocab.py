"""Time vocabulary parsing and the refusal of an oversized vocabulary, and print the figures.

Run alone: ``python bench/bench_vocab.py``. Parses vocabularies of 250, 500 and 1,000 labels (the
limit; time should grow in proportion), checks 100,000 labels for duplicates (the step that was
quadratic: 4 min 23 s inside `init` before), and times the refusal of a 100,000-label file as
`init` reads it (it stops counting past the limit, before any label object is built).
Targets: 1,000 labels parse in under 0.1 s; the 100,000-label file is refused in under 1 s.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workbench.core.vocab import Label, VocabularyError, _check_unique, parse_vocabulary  # noqa: E402
from workbench.study import load_vocabulary_file  # noqa: E402


def vocabulary(n: int) -> dict:
    """n distinct labels as parsed YAML."""
    return {
        "id": "big",
        "name": "Big",
        "labels": [
            {"id": f"l{i}", "name": f"Label {i}", "category": "finding", "definition": "a finding"} for i in range(n)
        ],
    }


def timed(func) -> float:
    """Seconds one call takes."""
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main() -> None:
    """Print each figure."""
    for n in (250, 500, 1000):
        data = vocabulary(n)
        print(f"parse {n:>6,} labels: {timed(lambda data=data: parse_vocabulary(data)):.4f} s")
    labels = tuple(Label(id=f"l{i}", name=f"Label {i}", category="c", definition="d") for i in range(100_000))
    print(f"duplicate check, 100,000 labels: {timed(lambda: _check_unique(labels, 'bench')):.3f} s")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.yaml"
        items = "".join(
            f"  - id: l{i}\n    name: Label {i}\n    category: finding\n    definition: a finding\n"
            for i in range(100_000)
        )
        path.write_text(f"id: big\nname: Big\nlabels:\n{items}", encoding="utf-8")

        def refuse() -> None:
            try:
                load_vocabulary_file(path)
            except VocabularyError:
                return
            raise SystemExit("the 100,000-label file was not refused")

        print(f"refuse a 100,000-label file (10 MB): {timed(refuse):.3f} s")


if __name__ == "__main__":
    main()
