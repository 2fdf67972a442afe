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
    done = subprocess.run(
        ["script", "-qc", f"workbench {command} --study {study}", "/dev/null"],
        capture_output=True,
        text=True,
        env={**_env(), "COLUMNS": str(columns)},
        timeout=120,
    )
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
    assert "hidden: tuning_f1_lo, tuning_f1_hi, validation_f1_lo, validation_f1_hi; --wide shows them" in " ".join(
        out.split()
    )


@pytest.mark.skipif(shutil.which("script") is None, reason="needs `script` (util-linux) for a real terminal")
def test_a_160_column_terminal_gets_160_columns(demo_study):
    out = _in_a_terminal(demo_study, "metrics 2 --full", 160)
    assert 100 < max(len(line) for line in out.splitlines()) <= 160, out


@pytest.mark.parametrize(
    "command",
    [
        "split-metrics",
        "split-compare",
        "split-history",
        "split",
        "audit",
        "score",
        "history",
        "reference",
        "notes",
        "robustness",
        "metrics",
        "compare",
    ],
)
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
    writer = subprocess.Popen(
        ["workbench", "disagreements", "1", "--text", "--study", str(demo_study)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    head = subprocess.run(["head", "-2"], stdin=writer.stdout, capture_output=True, timeout=120)
    writer.stdout.close()
    code, err = writer.wait(timeout=120), writer.stderr.read()
    assert len(head.stdout.splitlines()) == 2
    assert code in (0, 141) and err == b"", (code, err)


# ---------------------------------------------------------------- item 8: the Python API


def test_the_api_has_real_signatures_and_frozen_results():
    import dataclasses
    import inspect

    import workbench
    from workbench import scoring

    assert list(inspect.signature(workbench.score).parameters)[:3] == ["bundle", "reference", "generated"]
    assert "pairs" in inspect.signature(workbench.robustness).parameters
    for cls in (scoring.ScoreResult, scoring.GeneratorScore, scoring.RanScore, scoring.RobustnessResult):
        assert cls.__dataclass_params__.frozen and cls.__doc__
    ran = scoring.RanScore(**{f.name: 0 for f in dataclasses.fields(scoring.RanScore)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        ran.estimate = 1.0


@pytest.fixture(scope="module")
def demo_bundle(demo_study):
    from workbench.services import Workbench

    wb = Workbench(demo_study)
    info = wb.freeze("cxr-v1")
    wb.engine.dispose()
    return Path(info.json)


def test_score_takes_a_plain_path_or_a_mapping(demo_bundle):
    import workbench

    reference, generated = ROOT / "tests/data/scoring/reference.csv", ROOT / "tests/data/scoring/generated_a.csv"
    one = workbench.score(demo_bundle, reference, generated, n_resamples=50)
    named = workbench.score(str(demo_bundle), str(reference), {"A": str(generated)}, n_resamples=50)
    assert list(one.generators) == ["generated_a"] and list(named.generators) == ["A"]
    assert one.generators["generated_a"].ran_score.estimate == named.generators["A"].ran_score.estimate


def test_the_documented_example_prints_a_score(demo_bundle, tmp_path, capsys):
    text = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    example = re.search(r"## Print a Ran Score.*?```python\n(.*?)```", text, re.S).group(1)
    code = example.replace('"sessions/demo/bundles/cxr-v1.json"', repr(str(demo_bundle)))
    assert code != example  # the example names the demo's bundle
    cwd = os.getcwd()
    os.chdir(ROOT)  # the example's paths are relative to the project folder
    try:
        exec(compile(code, "docs/python-api.md", "exec"), {})
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr().out
    assert re.fullmatch(
        r"A: Ran Score \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] over \d+ labels\n"
        r"B: Ran Score \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] over \d+ labels\n",
        printed,
    ), printed


# ---------------------------------------------------------------- item 8: robustness pairs for the bundle's vocabulary


@pytest.fixture(scope="module")
def chestxray14_bundle(tmp_path_factory):
    """A chestxray14 study on the scoring fixture reports (six readers, every label negative), frozen."""
    import pandas as pd

    from workbench.services import init_study

    root = tmp_path_factory.mktemp("cx14")
    wb = init_study(root / "study", vocab="chestxray14", rule={"rule": "at_least", "k": 4, "n": 6})
    reports = ROOT / "tests/data/scoring/reference.csv"
    wb.import_reports(reports, "dev")
    ids = pd.read_csv(reports)["id"].astype(str)
    pd.DataFrame(
        [
            {"report_id": rid, "label": lab, "reader": f"reader-{k}", "value": 0}
            for rid in ids
            for lab in wb.vocab.asked_ids
            for k in range(6)
        ]
    ).to_csv(root / "readings.csv", index=False)
    wb.import_readings(root / "readings.csv")
    wb.start_run("dev")
    return Path(wb.freeze("cx14").json)


def test_robustness_picks_the_pairs_of_the_bundles_vocabulary(chestxray14_bundle):
    result = CliRunner().invoke(main, ["robustness", "--bundle", str(chestxray14_bundle)])
    assert result.exit_code == 0, result.output
    assert "vocabulary 'chestxray14'" in result.output and "enlarged_cardiomediastinum" not in result.output
    assert "cardiomegaly" in result.output


def test_robustness_says_when_no_shipped_pair_fits_and_how_to_pass_pairs():
    from workbench.core.vocab import parse_vocabulary
    from workbench.errors import UserError
    from workbench.scoring import default_pairs

    vocab = parse_vocabulary(
        {
            "id": "own",
            "name": "own",
            "labels": [{"id": "nodule_xyz", "name": "Nodule xyz", "category": "lung", "definition": "a made-up label"}],
        }
    )
    with pytest.raises(UserError, match="--pairs FILE"):
        default_pairs(vocab)


# ---------------------------------------------------------------- item 4: CSV and JSON for scripts


def _documented() -> dict[str, list[str]]:
    """`### \\`workbench COMMAND\\`` heading -> the names on its `Columns:` line (docs/output-formats.md)."""
    out, command = {}, None
    for line in (ROOT / "docs" / "output-formats.md").read_text(encoding="utf-8").splitlines():
        heading = re.match(r"### `workbench (.+)`$", line)
        if heading:
            command = heading.group(1)
        elif line.startswith("Columns:") and command:
            out[command] = re.findall(r"`([^`]+)`", line)
    return out


ARGS = {"RUN": "2", "RUN_A": "1", "RUN_B": "2", "COHORT": "dev"}


@pytest.mark.parametrize("command", [c for c in _documented() if "--format csv" in c])
def test_documented_columns_are_the_emitted_ones(demo_study, command):
    args = [ARGS.get(word, word) for word in command.split()]
    emitted = _cli(demo_study, *args)
    assert next(csv.reader(io.StringIO(emitted))) == _documented()[command]
    as_json = _cli(demo_study, *[a for a in args if a not in ("--format", "csv")], "--format", "json")
    import json

    data = json.loads(as_json)
    records = data["labels"] if isinstance(data, dict) else data
    if records:
        assert list(records[0]) == _documented()[command]


def test_score_summary_columns_are_documented(demo_bundle, tmp_path):
    import workbench

    workbench.score(
        demo_bundle,
        ROOT / "tests/data/scoring/reference.csv",
        {"A": ROOT / "tests/data/scoring/generated_a.csv"},
        n_resamples=20,
        out=tmp_path,
    )
    header = next(csv.reader((tmp_path / "summary.csv").open(encoding="utf-8")))
    documented = _documented()["score ... --out FOLDER"]
    assert header[: len(documented)] == documented
    extra = header[len(documented) :]  # one accuracy and one support column per attribute of the vocabulary
    assert extra and all(re.fullmatch(r"[a-z_]+_(accuracy|n)", c) for c in extra), extra


def test_csv_keeps_every_bound_in_its_own_column_at_full_precision(demo_study):
    metrics = _rows(_cli(demo_study, "metrics", "2", "--format", "csv"))
    assert {"accuracy", "accuracy_lo", "accuracy_hi", "f1_lo", "f1_hi"} <= set(metrics[0])
    assert not any("[" in value for row in metrics for value in row.values())
    split = _rows(_cli(demo_study, "split-metrics", "2", "--format", "csv"))
    assert any(len(row["tuning_f1"].split(".")[-1]) > 3 for row in split)  # not rounded to 3 decimals
    for row in split:
        assert float(row["gap"]) == pytest.approx(float(row["tuning_f1"]) - float(row["validation_f1"]), abs=1e-12)


# ---------------------------------------------------------------- item 3: verdicts explained


def test_p_values_below_a_thousandth_print_as_less_than_and_csv_keeps_the_float(demo_study):
    table = _cli(demo_study, "compare", "1", "2")
    assert "< 0.001" in table and "0.000" not in table
    rows = {r["label"]: r for r in _rows(_cli(demo_study, "compare", "1", "2", "--format", "csv"))}
    assert 0 < float(rows["lung_opacity"]["p_holm"]) < 0.001


def test_an_interval_that_excludes_zero_beside_an_undecided_verdict_is_explained(demo_study):
    """The demo's No Finding: 3 changed cases, so 'undecided', while the F1 interval lies above 0."""
    from workbench.services import Workbench

    table = Workbench(demo_study).compare_view(1, 2, n_resamples=200).table
    row = table.loc["no_finding"]
    assert row["verdict"] == "undecided" and row["delta_f1_lo"] > 0
    assert "excludes 0" in row["verdict_note"] and "fewer than the 10" in row["verdict_note"]
    assert (table.loc[table["verdict"] == "no change", "verdict_note"] == "").all()


def test_compare_rows_say_when_unadjusted_p_and_holm_disagree():
    import numpy as np
    import pandas as pd

    from workbench.core.metrics import verdict_notes

    table = pd.DataFrame(
        {
            "b": [2, 0],
            "c": [14, 1],
            "p_value": [0.004, 1.0],
            "p_holm": [0.08, 1.0],
            "verdict": ["no significant change", "undecided"],
        },
        index=["edema", "fracture"],
    )
    table.attrs.update(alpha=0.05, min_discordant=10)
    notes = verdict_notes(table)
    assert notes[0] == "p = 0.004 before adjustment, but Holm-adjusted over 2 labels p = 0.080, not below 0.05"
    assert notes[1] == "" and isinstance(notes, np.ndarray)


def test_an_estimate_at_the_edge_of_its_bootstrap_interval_is_explained_once(demo_study):
    out = _cli(demo_study, "split-metrics", "2", "--wide")
    assert out.count("expected of a percentile bootstrap") == 1, out


# ---------------------------------------------------------------- issue 30 item 6: JSON carries full floats


@pytest.mark.parametrize("command", [c for c in _documented() if "--format csv" in c])
def test_json_numbers_are_the_csv_numbers_to_the_last_digit(demo_study, command):
    import json

    args = [ARGS.get(word, word) for word in command.split()]
    csv_rows = _rows(_cli(demo_study, *args))
    data = json.loads(_cli(demo_study, *[a for a in args if a not in ("--format", "csv")], "--format", "json"))
    records = data["labels"] if isinstance(data, dict) else data
    assert len(records) == len(csv_rows)
    for as_csv, as_json in zip(csv_rows, records, strict=True):
        for name, value in as_json.items():
            if isinstance(value, float):
                assert value == float(as_csv[name]), (command, name, value, as_csv[name])


def test_a_p_value_far_below_ten_decimals_survives_json():
    import json

    import click
    import pandas as pd

    from workbench.cli import echo_table

    frame = pd.DataFrame({"label": ["hernia"], "p_value": [1.8e-12], "f1": [float("nan")], "b": [3]})

    @click.command()
    def show():
        echo_table(frame, "json")

    out = json.loads(CliRunner().invoke(show).output)
    assert out == [{"label": "hernia", "p_value": 1.8e-12, "f1": None, "b": 3}]
