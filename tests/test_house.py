"""House rules read from the source: one answer to "is this the offline labeller", NaN tested by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workbench.labeller.endpoints import RULES_PREFIX, is_offline

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for folder in ("workbench", "bench") for p in (ROOT / folder).rglob("*.py"))


def test_is_offline_answers_for_the_rule_based_labeller_only():
    assert is_offline("workbench/rules") and is_offline(RULES_PREFIX + "anything")
    assert not is_offline("openai/gpt-4o-mini") and not is_offline("ollama/workbench/rules")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_offline_question_is_asked_through_is_offline(path):
    text = path.read_text(encoding="utf-8")
    literal = re.findall(r"""startswith\((?:["']workbench/["']|(?:\w+\.)?[A-Z_]*PREFIX)\)""", text)
    if path.name == "endpoints.py":
        assert len(literal) == 1  # is_offline itself
    else:
        assert not literal, f"{path.name}: use workbench.labeller.endpoints.is_offline(model)"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nan_is_tested_by_name_not_by_self_comparison(path):
    text = path.read_text(encoding="utf-8")
    selfcmp = re.findall(r"(?<![\w.\]])([\w.]+(?:\[[^\]]*\])?) [!=]= \1(?![\w.\[])", text)
    assert not selfcmp, f"{path.name}: `x != x` for NaN: use math.isnan or pd.isna ({selfcmp})"


def test_the_architecture_pages_import_graph_is_the_codes():
    """docs/architecture.md's picture is generated from the imports; moving a module without regenerating fails."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "gen_architecture.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "services --> labeller" in page and "core --> " not in page  # core imports no other layer
