"""Shared fixtures: temporary studies on real SQLite and real Git, the shared datasets' location."""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
# Bytecode kept, as on a user's machine. This machine's environment sets PYTHONDONTWRITEBYTECODE=1:
# with it every xdist worker rewrote every test module's asserts from source at each run, and every
# `workbench` child process compiled the package again (together about a tenth of the suite's CPU).
# The workers and child processes inherit the environment from here.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Tables fit the terminal's width ($COLUMNS first); pytest-xdist workers set COLUMNS=80, a plain run
# has none (100). One width for every test, worker and child process; a test that wants another passes it.
os.environ["COLUMNS"] = "100"

ROOT = Path(__file__).resolve().parents[1]
# ../shared/datasets beside the project; WORKBENCH_DATASETS names another place (a git worktree's parent differs)
DATASETS = Path(os.environ.get("WORKBENCH_DATASETS") or ROOT.parent / "shared" / "datasets")
DATA = Path(__file__).resolve().parent / "data"

from fake_llm_server import (  # noqa: E402,F401  (fixture: OpenAI-compatible server on 127.0.0.1)
    building_templates,
    fake_llm_server,
    register_study,
)


def _studies_allow_the_tests_servers() -> None:
    """Every study the test process opens allows the fake servers it runs (their exact address:port, as an
    admin would name them): a study allows no local port by default (issue 34)."""
    from workbench.services import Workbench

    opened = Workbench.__init__

    def init(self, *args, **kwargs) -> None:
        opened(self, *args, **kwargs)
        register_study(self)

    Workbench.__init__ = init


_studies_allow_the_tests_servers()

# the small fixture cohort: findings per report, and the (report, label) items its readers call positive
SMALL_FINDINGS = {
    row["id"]: row["findings"] for row in csv.DictReader((DATA / "reports_small.csv").open(encoding="utf-8"))
}
SMALL_POSITIVE = {
    ("s2", "cardiomegaly"),
    ("s2", "pleural_effusion"),
    ("s2", "enlarged_cardiomediastinum"),
    ("s3", "consolidation"),
    ("s3", "lung_opacity"),
    ("s4", "support_devices"),
    ("s5", "cardiomegaly"),
    ("s6", "atelectasis"),
    ("s7", "fracture"),
    ("s7", "pneumothorax"),
    ("s8", "interstitial_lung_disease"),
    ("s8", "lung_opacity"),
}


def require_datasets() -> Path:
    """The shared datasets folder, or skip the test with a reason."""
    if not (DATASETS / "openi" / "reports.csv").exists():
        pytest.skip(f"shared datasets not found at {DATASETS} (they sit beside the project on developer machines)")
    return DATASETS


STUDY_RULE = {"rule": "at_least", "k": 4, "n": 6}


@pytest.fixture(scope="session")
def study_templates(tmp_path_factory):
    """Studies built once per session and copied per test: {"empty": folder, "small": folder}."""
    from workbench.services import Workbench, init_study

    base = tmp_path_factory.mktemp("templates")
    with building_templates():  # a server of the moment (a module's) is not allowed in every copy
        empty = init_study(base / "empty" / "study", vocab="ranscore-21", rule=STUDY_RULE)
        empty.engine.dispose()
        shutil.copytree(base / "empty", base / "small")
        small = Workbench(base / "small" / "study")
        small.import_reports(DATA / "reports_small.csv", "dev")
        small.import_readings(DATA / "readings_small.csv")
        small.engine.dispose()
    return {"empty": base / "empty" / "study", "small": base / "small" / "study"}


def copy_study(template: Path, target: Path):
    """A private, writable copy of a template study (a study folder holds only relative paths)."""
    from workbench.services import Workbench

    shutil.copytree(template, target)
    return Workbench(target)


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    """The demo study (two runs of the offline labeller), built once per session: copy it before writing."""
    from workbench.demo import create_demo

    root = tmp_path_factory.mktemp("demo-template") / "demo"
    with fast_password_hashing(), building_templates():
        create_demo(root, echo=lambda _m: None).engine.dispose()
    return root


@pytest.fixture
def study(study_templates, tmp_path):
    """An empty ranscore-21 study (4 of 6 rule) on SQLite in a temporary folder."""
    return copy_study(study_templates["empty"], tmp_path / "study")


@pytest.fixture
def small_study(study_templates, tmp_path):
    """The study with the small fixture cohort 'dev' (8 reports, 6 readers) imported."""
    return copy_study(study_templates["small"], tmp_path / "study")


def with_sign_in(wb):
    """The study with `auth: local` and two accounts, boss (admin, boss-pass-0001) and rdr (reader,
    reader-pass-0001): the set-up of the sign-in and token tests."""
    wb.add_user("boss", "admin", "boss-pass-0001")
    wb.add_user("rdr", "reader", "reader-pass-0001")
    path = wb.root / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    wb.migrate()
    return wb


def store_noise(wb, run_id: int, differ_every: int) -> None:
    """Store a noise measurement of a run as `workbench noise` would: one repeat in differ_every differs."""
    from workbench.store import queries as q

    preds = wb.predictions(run_id)
    preds = preds[preds["value"].notna()].head(200)
    rows = [
        (run_id, 1, r.report_id, r.label, 1, None, int(r.value), int(r.value) ^ (i % differ_every == 0), "ok")
        for i, r in enumerate(preds.itertuples(index=False))
    ]
    with wb.session(write=True) as s:
        q.put_noise_repeats(s, rows)


def fast_password_hasher():
    """Real argon2 with the smallest work factor (the default costs 0.3 s of CPU per hash or sign-in)."""
    from argon2 import PasswordHasher

    return PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


@contextlib.contextmanager
def fast_password_hashing():
    """Within the block the workbench hashes and checks passwords with fast_password_hasher()."""
    from workbench.services import team

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(team, "_hasher", fast_password_hasher)
        yield


@pytest.fixture(autouse=True)
def _fast_password_hashing(request):
    """Every test hashes passwords fast, except those marked real_argon2 (the product's parameters)."""
    if request.node.get_closest_marker("real_argon2"):
        yield
        return
    with fast_password_hashing():
        yield


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

    if request.param == "sqlite":
        wb = copy_study(request.getfixturevalue("study_templates")["empty"], tmp_path / "study")
        yield wb
        wb.engine.dispose()
        return
    db_url = request.getfixturevalue("pg_url")
    wb = init_study(tmp_path / "study", vocab="ranscore-21", db_url=db_url, rule={"rule": "at_least", "k": 4, "n": 6})
    yield wb
    wb.engine.dispose()


# The files that take longest (seconds summed over their tests, `pytest -n 2 --durations=120`, 2 December 2026). They are
# collected first so that, under `-n auto --dist loadfile`, each starts on a fresh worker while the
# many short files fill the other workers, instead of one of them starting last and running alone
# (xdist's own reorder, by number of tests, put the 67 s browser file near the end). Order only:
# a file missing here runs after these, in its usual place.
LONGEST_FILES = (
    "tests/ui/test_reading_keyboard.py",
    "tests/ui/test_browser.py",
    "tests/test_interrupted_runs.py",
    "tests/test_import_fuzz.py",
    "tests/test_honest_numbers.py",
    "tests/test_readme.py",
    "tests/test_adaptive_reading.py",
    "tests/test_routes.py",
    "tests/test_optimising.py",
    "tests/core/test_metrics.py",
    "tests/test_batch.py",
    "tests/test_workers.py",
    "tests/test_governance.py",
    "tests/test_background_runs.py",
    "tests/test_resume_kill.py",
    "tests/ui/test_app_pages.py",
    "tests/test_trust_local.py",
    "tests/test_readme_openi.py",
    "tests/test_frugal.py",
    "tests/test_failures.py",
    "tests/test_output_formats.py",
    "tests/test_bundle.py",
    "tests/test_provenance.py",
    "tests/core/test_parsing_fuzz.py",
    "tests/test_cold_start.py",
    "tests/ui/test_page_caches.py",
    "tests/ui/test_run_failures_page.py",
    "tests/test_trust_data.py",
    "tests/test_storage.py",
    "tests/test_attributes.py",
)


def pytest_collection_modifyitems(config, items):
    """Longest files first (see LONGEST_FILES); a stable sort keeps every file's own test order."""
    if _shuffled(config):
        return  # a shuffled run (pytest-random-order) keeps its own order
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def _shuffled(config) -> bool:
    """Whether pytest-random-order shuffles this run (--random-order or --random-order-bucket)."""
    try:
        from random_order.config import Config
    except ImportError:
        return False
    return Config(config).bucket_type != "none"


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than there are cores, so a core does not idle while a worker waits on
    a browser, a server or a child process."""
    return (os.cpu_count() or 1) + 1
