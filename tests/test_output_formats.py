"""Numbers a user reads are the numbers computed (issue 21 items 1, 3, 4 and 8), through the real command."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_study(demo_template, tmp_path_factory):
    """The demo study (two runs of the offline labeller) with its dev cohort split into tuning and validation."""
    root = tmp_path_factory.mktemp("numbers") / "demo"
    shutil.copytree(demo_template, root)
    _cli(root, "split", "dev")
    return root


def _cli(study: Path, *args, columns: int = 100) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args] + ["--study", str(study)], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _in_a_terminal(study: Path, command: str, columns: int) -> str:
    """The command's output in a real terminal (a TTY from `script`) of the given width."""
    done = subprocess.run(["script", "-qc", f"workbench {command} --study {study}", "/dev/null"], capture_output=True,
                          text=True, env={**_env(), "COLUMNS": str(columns)}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.replace("\r\n", "\n")


def _rows(csv_text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(csv_text)))


# ---------------------------------------------------------------- item 1: tables never cut a number

@pytest.mark.skipif(shutil.which("script") is None, reason="needs `script` (util-linux) for a real terminal")
def test_split_metrics_in_a_100_column_terminal_shows_every_gap_whole(demo_study):
    out = _in_a_terminal(demo_study, "split-metrics 2", 100)
    assert max(len(line) for line in out.splitlines()) <= 100, out
    tokens = out.split()
    for row in _rows(_cli(demo_study, "split-metrics", "2", "--format", "csv")):
        assert f"{float(row['gap']):.3f}" in tokens, (row, out)  # -0.059, never "-" or "-0.0"
    assert "hidden: tuning_f1_lo, tuning_f1_hi, validation_f1_lo, validation_f1_hi; --wide shows them" in " ".join(out.split())


@pytest.mark.skipif(shutil.which("script") is None, reason="needs `script` (util-linux) for a real terminal")
def test_a_160_column_terminal_gets_160_columns(demo_study):
    out = _in_a_terminal(demo_study, "metrics 2 --full", 160)
    assert 100 < max(len(line) for line in out.splitlines()) <= 160, out


@pytest.mark.parametrize("command", ["split-metrics", "split-compare", "split-history", "split", "audit", "score",
                                     "history", "reference", "notes", "robustness", "metrics", "compare"])
def test_every_table_printing_command_takes_wide(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert "--wide" in result.output, result.output


def test_wide_shows_the_hidden_columns(demo_study):
    narrow, wide = _cli(demo_study, "split-metrics", "2"), _cli(demo_study, "split-metrics", "2", "--wide")
    assert "tuning_f1_lo" not in narrow.splitlines()[0] and "tuning_f1_lo" in wide.splitlines()[0]
    assert "hidden:" not in wide


# ---------------------------------------------------------------- item 8: a closed pipe ends quietly

def test_a_closed_pipe_ends_quietly(demo_study):
    """`workbench disagreements 1 --text | head -2`: more than a pipe's 64 KB, so the writer meets the closed end."""
    writer = subprocess.Popen(["workbench", "disagreements", "1", "--text", "--study", str(demo_study)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    head = subprocess.run(["head", "-2"], stdin=writer.stdout, capture_output=True, timeout=120)
    writer.stdout.close()
    code, err = writer.wait(timeout=120), writer.stderr.read()
    assert len(head.stdout.splitlines()) == 2
    assert code in (0, 141) and err == b"", (code, err)
