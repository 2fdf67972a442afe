"""The README's prompt-engineering loop on real reports (OpenI, ../shared/datasets; skipped when absent):
import, split, run, suggest, optimise, evaluate-drafts, save, run again, split-compare, each as a user
types it, and the figures one command prints agree with the figures the next one prints (issue 21).

A subset of OpenI (the first 800 reports with their gold standard) keeps it to about a minute; the
offline labeller and proposer make it deterministic.
"""

from __future__ import annotations

import csv
import re

from click.testing import CliRunner
from conftest import require_datasets

from workbench.cli import main

N_REPORTS = 800
LABELS = "atelectasis,cardiomegaly,hernia"  # hernia: no gold positive, the label the macro rule is about


def subset(datasets, folder):
    """The first N_REPORTS OpenI reports and their labels14 rows, written to folder."""
    paths = {}
    with (datasets / "openi" / "reports.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))[:N_REPORTS]
    uids = {f"CXR{r['uid']}" for r in rows}
    paths["reports"] = _write(folder / "reports.csv", rows)
    with (datasets / "openi" / "labels14.csv").open(encoding="utf-8", newline="") as f:
        paths["labels"] = _write(folder / "labels14.csv", [r for r in csv.DictReader(f) if r["filename"] in uids])
    return paths


def _write(path, rows):
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def figure(text: str, pattern: str) -> float:
    """The one figure matching pattern (a regex with one group) in a command's output."""
    found = re.findall(pattern, " ".join(text.split()))
    assert len(found) == 1, (pattern, text)
    return float(found[0])


def test_the_openi_loop_prints_the_same_figures_in_every_command(tmp_path):
    files = subset(require_datasets(), tmp_path)
    study = tmp_path / "openi"

    def wb(*args: str) -> str:
        result = CliRunner().invoke(main, [*args, "--study", str(study)] if args[0] != "init" else list(args))
        assert result.exit_code == 0, (args, result.output)
        return result.output

    wb("init", str(study), "--vocab", "chestxray14", "--rule", "majority", "--n", "1")
    wb("import", "openi", str(files["reports"]), str(files["labels"]), "--cohort", "openi")
    wb("split", "openi", "--validation", "0.3", "--seed", "0")
    wb("run", "--cohort", "openi")
    first = wb("split-metrics", "1")
    start_val = figure(first, r"validation: \d+ reports, macro F1 ([0-9.]+)")
    start_tun = figure(first, r"tuning: \d+ reports, macro F1 ([0-9.]+)")

    suggestion = wb("suggest", "hernia", "--proposer", "offline")  # no --run: the development cohort by its role
    assert "proposal #1 for hernia (run 1)" in suggestion
    report = wb("optimise", "--labels", LABELS, "--rounds", "1", "--proposer", "offline")
    assert figure(report, r"at the start: tuning ([0-9.]+)") == start_tun
    assert figure(report, r"at the start: tuning [0-9.]+ \[[0-9., ]+\], validation ([0-9.]+)") == start_val
    end_val = figure(report, r"At the end: tuning [0-9.]+ \[[0-9., ]+\], validation ([0-9.]+)")
    drafted = re.findall(r"Left as drafts \(not saved\): ([a-z_, ]+)\.", report)
    assert drafted, report

    evaluated = wb("evaluate-drafts")
    assert figure(evaluated, r"validation: macro F1 ([0-9.]+) ->") == start_val
    assert figure(evaluated, r"validation: macro F1 [0-9.]+ -> ([0-9.]+)") == end_val

    wb("prompts", "save", "-m", "optimise round 1")
    wb("run", "--cohort", "openi")
    second = wb("split-metrics", "2")
    assert figure(second, r"validation: \d+ reports, macro F1 ([0-9.]+)") == end_val
    compared = wb("split-compare", "1", "2")
    assert figure(compared, r"validation: macro F1 ([0-9.]+) ->") == start_val
    assert figure(compared, r"validation: macro F1 [0-9.]+ -> ([0-9.]+)") == end_val
    history = wb("split-history", "openi", "--format", "csv")
    rows = list(csv.DictReader(history.splitlines()))
    assert [round(float(r["validation_macro_f1"]), 3) for r in rows] == [start_val, end_val]
