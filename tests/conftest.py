"""Shared fixtures: temporary studies on real SQLite and real Git, the shared datasets' location."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
DATA = Path(__file__).resolve().parent / "data"


def require_datasets() -> Path:
    """The shared datasets folder, or skip the test with a reason."""
    if not (DATASETS / "openi" / "reports.csv").exists():
        pytest.skip(f"shared datasets not found at {DATASETS} (they sit beside the project on developer machines)")
    return DATASETS


@pytest.fixture
def study(tmp_path):
    """An empty ranscore-21 study (4 of 6 rule) on SQLite in a temporary folder."""
    from workbench.services import init_study

    return init_study(tmp_path / "study", vocab="ranscore-21", rule={"rule": "at_least", "k": 4, "n": 6})


@pytest.fixture
def small_study(study):
    """The study with the small fixture cohort 'dev' (8 reports, 6 readers) imported."""
    study.import_reports(DATA / "reports_small.csv", "dev")
    study.import_readings(DATA / "readings_small.csv")
    return study
