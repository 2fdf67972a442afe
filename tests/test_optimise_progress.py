"""optimise says what it is doing while it works (issue 30, item 11): the round and the label, the step (proposing,
screening, asking validation) with its calls so far, the time spent and an estimate of the time left, as `run`
shows its progress. Before, it printed only "round 1: atelectasis" for minutes."""

from __future__ import annotations

import re

from click.testing import CliRunner
from test_optimising import opt_study, opt_template  # noqa: F401  (fixtures)

from workbench.cli import main


def test_optimise_reports_its_steps_counts_and_time_left(opt_study):  # noqa: F811
    lines: list[str] = []
    wb = opt_study
    wb.optimise(labels=["cardiomegaly", "mass"], rounds=2, proposer="offline", on_progress=lines.append)
    assert lines[0].startswith("round 1 of 2, label 1 of 2 (cardiomegaly): proposing a revision; ")
    assert "0 of 4 label turns done" in lines[0] and "left" not in lines[0]  # no pace yet, no guess
    calls = [
        x
        for x in lines
        if re.search(r"\(cardiomegaly\): screening the proposal on part of tuning: \d+ of \d+ calls", x)
    ]
    assert calls and re.search(r"\d+ of (\d+) calls \(\d+ made, \d+ cached\)", calls[-1])
    assert any("asking validation: " in x for x in lines)
    second = next(x for x in lines if x.startswith("round 1 of 2, label 2 of 2 (mass): proposing"))
    assert "1 of 4 label turns done, about" in second and "left at most" in second


def test_cli_optimise_prints_progress_on_stderr(opt_study):  # noqa: F811
    result = CliRunner().invoke(
        main,
        [
            "optimise",
            "--labels",
            "cardiomegaly",
            "--rounds",
            "1",
            "--proposer",
            "offline",
            "--study",
            str(opt_study.root),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "round 1 of 1, label 1 of 1 (cardiomegaly): proposing a revision" in result.stderr
    assert "# Optimisation report" in result.stdout and "proposing" not in result.stdout
