"""Shared fixtures: temporary studies on real SQLite and real Git, the shared datasets' location."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"
DATA = Path(__file__).resolve().parent / "data"

from fake_llm_server import fake_llm_server  # noqa: E402,F401  (fixture: OpenAI-compatible server on 127.0.0.1)


# the small fixture cohort: findings per report, and the (report, label) items its readers call positive
SMALL_FINDINGS = {row["id"]: row["findings"] for row in csv.DictReader((DATA / "reports_small.csv").open(encoding="utf-8"))}
SMALL_POSITIVE = {
    ("s2", "cardiomegaly"), ("s2", "pleural_effusion"), ("s2", "enlarged_cardiomediastinum"),
    ("s3", "consolidation"), ("s3", "lung_opacity"), ("s4", "support_devices"), ("s5", "cardiomegaly"),
    ("s6", "atelectasis"), ("s7", "fracture"), ("s7", "pneumothorax"), ("s8", "interstitial_lung_disease"),
    ("s8", "lung_opacity"),
}


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


@pytest.fixture(scope="session")
def pg_server():
    """Base URL of a PostgreSQL server: $WORKBENCH_TEST_PG_URL (CI starts one), else a throwaway one."""
    url = os.environ.get("WORKBENCH_TEST_PG_URL")
    if url:
        yield url
        return
    from pg import Server

    try:
        server = Server().start()
    except (FileNotFoundError, OSError) as exc:
        pytest.skip(f"no PostgreSQL server available ({exc}); .ci/run installs and starts one")
    yield server.base_url()
    server.stop()


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty PostgreSQL database for one test."""
    from pg import fresh_database

    return fresh_database(pg_server)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_study(request, tmp_path):
    """An empty ranscore-21 study on SQLite and on PostgreSQL (storage tests run on both)."""
    from workbench.services import init_study

    db_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    wb = init_study(tmp_path / "study", vocab="ranscore-21", db_url=db_url, rule={"rule": "at_least", "k": 4, "n": 6})
    yield wb
    wb.engine.dispose()
