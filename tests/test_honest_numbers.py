"""Honest numbers (issue 12, items 5-7): failed extractions are counted and never scored as 0, a
hostile reply is one recorded failure, and a run has one executor at a time.

Real litellm over real HTTP to the fake OpenAI-compatible server, real SQLite (and PostgreSQL for
the lease), real processes for the two-executor race. No mocks.
"""

from __future__ import annotations

import json

import pandas as pd
from click.testing import CliRunner

from conftest import DATA
from fake_llm_server import running_server
from test_governance import local_bundle  # noqa: F401  (fixture: a study frozen from a local server)
from test_runs import N_REPORTS, Oracle
from workbench import scoring
from workbench.cli import main

REPORTS = DATA / "reports_small.csv"


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def generated_with_failing_report(tmp_path, report_id: str = "s1"):
    """The reference reports, one of which makes the server answer unparseable JSON."""
    frame = pd.read_csv(REPORTS)
    frame.loc[frame["id"] == report_id, "findings"] += " [[behaviour:malformed]]"
    path = tmp_path / "generated.csv"
    frame.to_csv(path, index=False)
    return path


# ---------------------------------------------------------------- item 5


def test_all_failed_extractions_give_no_score_and_a_nonzero_exit(local_bundle, tmp_path):
    _wb, server, bundle = local_bundle
    server.behaviour = "malformed"
    out = tmp_path / "out"
    result = cli("score", "--bundle", str(bundle), "--reference", str(REPORTS), "--generated", f"g={REPORTS}",
                 "--resamples", "20", "--out", str(out))
    assert result.exit_code == 3, result.output
    assert "Ran Score 0.0000" not in result.output
    assert "NO SCORE: all 160 (report, label) pairs have a failed extraction (generated: 160, reference: 160); causes: parse_error: 160" in result.output
    summary = pd.read_csv(out / "summary.csv")
    assert summary.loc[0, "failed_generated"] == 160 and summary.loc[0, "pairs_scored"] == 0
    assert pd.isna(summary.loc[0, "ran_score"])
    per_label = pd.read_csv(out / "g.per_label.csv").set_index("label")
    assert (per_label.loc[per_label.index != "no_finding", "failed_generated"] == N_REPORTS).all()
    assert json.loads((out / "results.json").read_text())["unscored"]["g"].startswith("all 160")


def test_partial_failures_are_counted_per_label_and_the_score_says_it_is_over_fewer_pairs(local_bundle, tmp_path):
    wb, _server, bundle = local_bundle
    generated = generated_with_failing_report(tmp_path)
    args = ["score", "--bundle", str(bundle), "--reference", str(REPORTS), "--generated", f"g={generated}",
            "--resamples", "20", "--out", str(tmp_path / "out")]
    strict = cli(*args)  # 20 of 160 pairs failed: 12.5% is over the default 10%
    assert strict.exit_code == 3
    assert "NO SCORE: 20 of 160 (report, label) pairs have a failed extraction (generated: 20, reference: 0; 12.5%, more than the 10% allowed)" in strict.output
    lenient = cli(*args, "--max-failed-share", "0.2")
    assert lenient.exit_code == 0, lenient.output
    assert "over 140 of 160 (report, label) pairs: 20 generated and 0 reference extractions failed and are left out" in lenient.output
    per_label = pd.read_csv(tmp_path / "out" / "g.per_label.csv").set_index("label")
    asked = wb.vocab.asked_ids
    assert (per_label.loc[asked, "failed_generated"] == 1).all() and (per_label.loc[asked, "n_scored"] == N_REPORTS - 1).all()
    per_report = pd.read_csv(tmp_path / "out" / "g.per_report.csv").set_index("report_id")
    assert set(per_report.loc["s1", "failed_labels"].split(";")) >= set(asked)
    api = scoring.score(bundle, REPORTS, {"g": generated}, n_resamples=20, max_failed_share=0.2)
    ran = api.generators["g"].ran_score
    assert (ran["pairs_scored"], ran["failed_generated"], ran["no_score"]) == (140, 20, "")
    # left out, not scored as 0: the same as scoring the seven reports that did not fail
    frame = pd.read_csv(REPORTS)
    frame[frame["id"] != "s1"].to_csv(tmp_path / "seven.csv", index=False)
    seven = scoring.score(bundle, tmp_path / "seven.csv", {"g": tmp_path / "seven.csv"}, n_resamples=20)
    assert ran["estimate"] == seven.generators["g"].ran_score["estimate"]
