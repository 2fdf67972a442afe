"""The command line as a prompt engineer's daily tool (issue 13): one test per numbered item, through the CLI."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA

from workbench.cli import main


def invoke(*args, env=None, input=None):
    """Run `workbench ARGS` in-process; returns the click Result."""
    return CliRunner().invoke(main, [str(a) for a in args], env=env, input=input, catch_exceptions=False)


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    """A small CSV file."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def read_csv(text: str) -> list[dict]:
    """CSV output -> rows."""
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def cli_study(tmp_path, monkeypatch):
    """A fresh 4-of-6 ranscore-21 study made with `workbench init`, the small cohort imported."""
    root = tmp_path / "s"
    assert invoke("init", root).exit_code == 0
    monkeypatch.setenv("WORKBENCH_STUDY", str(root))
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    assert invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "dev").exit_code == 0
    return root


# ---------------------------------------------------------------- item 9: the reference with extra or missing readers


def test_reference_with_more_readers_than_n_and_early_decisions(cli_study, tmp_path):
    rows = []
    # s1/atelectasis: 8 readers, 4-4 (a tie: adjudication); s2/atelectasis: 10 readers, 4 positive
    # (6 of 10 negative is short of the 7 of 10 that 4 of 6 means: adjudication)
    rows += [["s1", "atelectasis", f"r{i}", int(i < 4)] for i in range(8)]
    rows += [["s2", "atelectasis", f"r{i}", int(i < 4)] for i in range(10)]
    # s3/atelectasis: 5 of 6 read, all positive: the sixth reader cannot change it
    rows += [["s3", "atelectasis", f"r{i}", 1] for i in range(5)]
    path = write_csv(tmp_path / "r.csv", ["report_id", "label", "reader", "value"], rows)
    assert invoke("import", "readings", path).exit_code == 0
    out = invoke("reference", "--format", "csv")
    row = next(r for r in read_csv(out.output) if r["label"] == "atelectasis")
    assert (row["decided"], row["waiting"], row["positive"]) == ("1", "2", "1")
    table = invoke("reference").output
    assert "same share" in table  # the rule for extra readers is stated where the figures are


# ---------------------------------------------------------------- item 7: imports that guessed wrong


def test_parquet_with_float_ids_or_integer_text_is_refused_naming_column_and_type(cli_study, tmp_path):
    import pandas as pd

    float_ids = tmp_path / "float_ids.parquet"
    pd.DataFrame({"id": [1.5, 2.5], "text": ["Small effusion.", "Clear lungs."]}).to_parquet(float_ids)
    result = invoke("import", "reports", float_ids, "--cohort", "p")
    assert result.exit_code == 2
    assert "column 'id'" in result.output and "decimal numbers" in result.output
    int_text = tmp_path / "int_text.parquet"
    pd.DataFrame({"id": ["a1", "a2"], "text": [123, 456]}).to_parquet(int_text)
    result = invoke("import", "reports", int_text, "--cohort", "p")
    assert result.exit_code == 2 and "column 'text'" in result.output and "whole numbers" in result.output
    # integer ids are fine (stated): they become "7", "8"
    int_ids = tmp_path / "int_ids.parquet"
    pd.DataFrame({"id": [7, 8], "text": ["Small effusion.", "Clear lungs."]}).to_parquet(int_ids)
    assert "added 2" in invoke("import", "reports", int_ids, "--cohort", "p").output
    assert invoke("reference", "--cohort", "p").exit_code == 0


@pytest.mark.parametrize("sep,name", [("\t", "tab"), (";", "semicolon")])
def test_a_tab_or_semicolon_file_named_csv_is_diagnosed(cli_study, tmp_path, sep, name):
    path = tmp_path / "reports.csv"
    path.write_text(
        f"id{sep}findings{sep}impression\nq1{sep}Small effusion, left.{sep}Effusion.\n"
        f"q2{sep}Lungs clear, no effusion.{sep}Normal.\n",
        encoding="utf-8",
    )
    result = invoke("import", "reports", path, "--cohort", "q")
    assert result.exit_code == 2
    assert f"looks {name}-separated" in result.output and "has no text" not in result.output


def test_ids_of_another_cohort_are_named_once_with_a_count(cli_study):
    result = invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "other")
    assert result.exit_code == 2
    assert result.output.count("already belong") == 1
    assert "8 report id(s) already belong to cohort 'dev'" in result.output


# ---------------------------------------------------------------- item 6: bundle paths, freeze's cohort, whole help lines


def test_freeze_uses_the_only_cohort_and_verify_finds_bundles_from_anywhere(tmp_path, monkeypatch):
    root = tmp_path / "openi-study"
    assert invoke("init", root).exit_code == 0
    monkeypatch.setenv("WORKBENCH_STUDY", str(root))
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    assert invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "openi").exit_code == 0
    assert invoke("run", "--cohort", "openi").exit_code == 0
    result = invoke("freeze", "--name", "cxr-v1")
    assert result.exit_code == 0, result.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for given in ("bundles/cxr-v1.json", "cxr-v1", "cxr-v1.json", str(root / "bundles" / "cxr-v1.json")):
        result = invoke("verify", given)
        assert result.exit_code == 0 and result.output.startswith("ok:"), (given, result.output)
    result = CliRunner().invoke(main, ["verify", "nope"])
    assert result.exit_code == 2 and "no bundle 'nope'" in result.output


def test_freeze_with_several_cohorts_and_no_dev_names_the_choices(tmp_path, monkeypatch):
    root = tmp_path / "s2"
    assert invoke("init", root).exit_code == 0
    monkeypatch.setenv("WORKBENCH_STUDY", str(root))
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    assert invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "a").exit_code == 0
    result = CliRunner().invoke(main, ["freeze", "--name", "x"])
    assert result.exit_code == 2 and "no finished run" in result.output and "'a'" in result.output
    write_csv(tmp_path / "more.csv", ["id", "text"], [["z1", "Clear lungs."]])
    assert invoke("import", "reports", tmp_path / "more.csv", "--cohort", "b").exit_code == 0
    result = CliRunner().invoke(main, ["freeze", "--name", "x"])
    assert result.exit_code == 2 and "choose one with --cohort: a, b" in result.output


def _commands(group=main, prefix=()):
    import click

    for name, cmd in sorted(group.commands.items()):
        yield prefix + (name,), cmd, group
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))


def test_help_listings_show_whole_first_sentences():
    for path, cmd, _parent in _commands():
        first = " ".join(cmd.help.split("\n\n")[0].split())
        assert first.endswith("."), f"{' '.join(path)}: first paragraph is not a sentence: {first!r}"
        listing = " ".join(invoke(*path[:-1], "--help").output.split())
        assert first in listing, f"{' '.join(path)}: listing cuts {first!r}"


# ---------------------------------------------------------------- item 3: prompts edited without losing anything


def _prompt_file(root: Path, label: str = "pneumonia") -> Path:
    return root / "prompts" / f"{label}.yaml"


def _show(label: str = "pneumonia") -> str:
    result = invoke("prompts", "show", label)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_hand_edit_is_committed_by_save_as_written(cli_study):
    path = _prompt_file(cli_study)
    edited = path.read_text(encoding="utf-8").replace("hedged: positive", "hedged: negative  # agreed with the readers")
    path.write_text(edited, encoding="utf-8")
    status = invoke("prompts", "status").output
    assert "pneumonia" in status and "edited" in status
    result = invoke("prompts", "save", "-m", "Hedged pneumonia is negative")
    assert result.exit_code == 0 and "pneumonia" in result.output, result.output
    assert "hedged: negative" in _show()
    assert path.read_text(encoding="utf-8") == edited  # committed as written, comment kept
    assert "nothing to save" in invoke("prompts", "status").output
    log = invoke("prompts", "history", "--label", "pneumonia").output
    assert "Hedged pneumonia is negative" in log


def test_a_draft_and_a_different_hand_edit_are_refused_naming_both(cli_study):
    assert invoke("prompts", "set", "pneumonia", "look_for", "--add", "air bronchograms").exit_code == 0
    path = _prompt_file(cli_study)
    edited = path.read_text(encoding="utf-8").replace("hedged: positive", "hedged: negative")
    path.write_text(edited, encoding="utf-8")
    assert "differ" in invoke("prompts", "status").output
    result = CliRunner().invoke(main, ["prompts", "save", "pneumonia", "-m", "x"])
    assert result.exit_code == 2
    assert "your draft" in result.output and str(path) in result.output and "Nothing was saved" in result.output
    assert path.read_text(encoding="utf-8") == edited  # the hand edit is untouched
    assert "hedged: positive" in _show()  # and nothing was committed
    # the draft is still there: dropping it lets the hand edit be saved
    assert "from" in invoke("prompts", "status").output
    assert invoke("prompts", "discard", "pneumonia").exit_code == 0
    assert invoke("prompts", "save", "-m", "hand edit wins").exit_code == 0
    assert "hedged: negative" in _show()


def test_other_saves_never_overwrite_a_hand_edit(cli_study):
    """The app's save path (save_prompts) and revert refuse too, instead of writing over the file."""
    import dataclasses

    from workbench.services import Workbench

    path = _prompt_file(cli_study)
    edited = path.read_text(encoding="utf-8").replace("hedged: positive", "hedged: negative")
    path.write_text(edited, encoding="utf-8")
    wb = Workbench(cli_study)
    lp = wb.label_prompt("pneumonia")
    with pytest.raises(ValueError, match="uncommitted edits"):
        wb.save_prompts([dataclasses.replace(lp, definition="Lung infection.")], "app save", wb.prompt_commit())
    assert path.read_text(encoding="utf-8") == edited


def test_prompts_set_scalars_temporal_and_list_fields(cli_study):
    assert invoke("prompts", "set", "pneumonia", "hedged", "negative").exit_code == 0
    assert invoke("prompts", "set", "pneumonia", "temporal.stable", "negative").exit_code == 0
    assert (
        invoke(
            "prompts", "set", "pneumonia", "look_for", "--add", "air bronchograms", "--add", "lobar opacity"
        ).exit_code
        == 0
    )
    assert invoke("prompts", "set", "pneumonia", "look_for", "--remove", "infectious process").exit_code == 0
    bad = CliRunner().invoke(main, ["prompts", "set", "pneumonia", "hedged", "maybe"])
    assert bad.exit_code == 2 and "hedged" in bad.output and "positive" in bad.output
    bad = CliRunner().invoke(main, ["prompts", "set", "pneumonia", "colour", "red"])
    assert bad.exit_code == 2 and "no field 'colour'" in bad.output
    assert "from" in invoke("prompts", "status").output  # a draft, started from a version
    assert invoke("prompts", "save", "pneumonia", "-m", "scripted edit").exit_code == 0
    shown = _show()
    assert "hedged: negative" in shown and "stable: negative" in shown
    assert "air bronchograms" in shown and "lobar opacity" in shown and "infectious process" not in shown


def test_a_save_that_makes_a_prompt_contradict_itself_says_so(cli_study):
    assert invoke("prompts", "set", "atelectasis", "hedged", "positive").exit_code == 0
    exclusion = "the report only mentions 'possible'"
    drafted = CliRunner().invoke(main, ["prompts", "set", "atelectasis", "do_not_label_when", "--add", exclusion])
    assert drafted.exit_code == 0 and "updated in your draft" in drafted.stdout
    assert "warning: your draft now contradicts itself: [exclusion contradicts hedge policy]" in drafted.stderr
    saved = CliRunner().invoke(main, ["prompts", "save", "atelectasis", "-m", "hand edit"])
    assert saved.exit_code == 0, saved.output
    assert "saved version" in saved.stdout and "warning" not in saved.stdout
    assert "warning: [exclusion contradicts hedge policy]" in saved.stderr and "excludes 'possible'" in saved.stderr
    assert "1 contradiction(s) saved" in saved.stderr and "prompts policy" in saved.stderr
    # a save that adds no contradiction says nothing more
    assert invoke("prompts", "set", "atelectasis", "definition", "Collapse of part of a lung.").exit_code == 0
    quiet = CliRunner().invoke(main, ["prompts", "save", "atelectasis", "-m", "definition"])
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr and "contradiction" not in quiet.stderr


EDITOR_SCRIPT = """
import pathlib, sys
path = pathlib.Path(sys.argv[1])
log = pathlib.Path(sys.argv[2])
calls = log.read_text().count("call") if log.exists() else 0
text = path.read_text()
log.write_text(log.read_text() + "call\\n" + text + "\\n" if log.exists() else "call\\n" + text + "\\n")
mode = sys.argv[3]
if mode == "fix-second" and calls == 0:
    path.write_text(text.replace("hedged: positive", "hedged: maybe"))
elif mode == "fix-second":
    path.write_text(text.replace("hedged: maybe", "hedged: negative"))
elif mode == "always-bad":
    path.write_text(text.replace("hedged: positive", "hedged: maybe").replace("look_for:", "look_for:\\n  - x" * (calls + 1)))
"""


def _install_editor(tmp_path: Path, mode: str) -> Path:
    """$EDITOR as a small script (click passes the file name last); returns the log of what it was shown."""
    import sys

    (tmp_path / "editor.py").write_text(EDITOR_SCRIPT, encoding="utf-8")
    log = tmp_path / f"editor-{mode}.log"
    wrapper = tmp_path / f"ed-{mode}.sh"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "editor.py"}" "$1" "{log}" {mode}\n')
    wrapper.chmod(0o755)
    return wrapper, log


def test_prompts_edit_validates_and_reopens_with_the_error(cli_study, tmp_path, monkeypatch):
    wrapper, log = _install_editor(tmp_path, "fix-second")
    monkeypatch.setenv("EDITOR", str(wrapper))
    result = invoke("prompts", "edit", "pneumonia")
    assert result.exit_code == 0, result.output
    calls = log.read_text().split("call\n")[1:]
    assert len(calls) == 2 and "not saved" in calls[1] and "hedged" in calls[1]  # re-opened with the error
    assert "from" in invoke("prompts", "status").output  # kept as a draft
    assert invoke("prompts", "save", "pneumonia", "-m", "edited in my editor").exit_code == 0
    shown = _show()
    assert "hedged: negative" in shown and "workbench:" not in shown


def test_prompts_edit_keeps_text_it_could_not_save(cli_study, tmp_path, monkeypatch):
    wrapper, _ = _install_editor(tmp_path, "always-bad")
    monkeypatch.setenv("EDITOR", str(wrapper))
    result = CliRunner().invoke(main, ["prompts", "edit", "pneumonia", "--attempts", "3"])
    assert result.exit_code == 1 and "not saved" in result.output and "kept in" in result.output
    kept = list((cli_study / "rejected-edits").glob("pneumonia-*.yaml"))
    assert len(kept) == 1 and "hedged: maybe" in kept[0].read_text(encoding="utf-8")
    assert "hedged: positive" in _show()


# ---------------------------------------------------------------- items 4 and 5: output a person can read


@pytest.fixture(scope="module")
def demo_study(demo_template, tmp_path_factory):
    """The real demo study (two runs of the offline labeller), copied once for the read-only output tests."""
    root = tmp_path_factory.mktemp("demo") / "demo"
    shutil.copytree(demo_template, root)
    return root


def _demo(demo_study, *args):
    result = CliRunner().invoke(main, [str(a) for a in args] + ["--study", str(demo_study)])
    assert result.exit_code == 0, result.output
    return result.output


def test_disagreements_of_one_label_show_the_report_with_marks_and_the_note_command(demo_study):
    out = _demo(demo_study, "disagreements", "2", "--label", "lung_opacity")
    assert "FINDINGS:" in out  # the report text, on by default for one label
    assert ">>" in out and "<<" in out  # the labeller's evidence marked (false alarms quote it)
    assert "[atelectasis]" in out or "[consolidation]" in out  # look-for phrases of run 2's prompt marked
    assert "workbench error-note demo-" in out and "--run 2" in out
    assert "1.0" not in out and "0.0" not in out  # values as 0/1
    table = _demo(demo_study, "disagreements", "2", "--no-text")
    assert "FINDINGS:" not in table and "1.0" not in table
    assert "--label LABEL" in table  # how to see the reports


def _widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


@pytest.mark.parametrize(
    "args",
    [
        ("agreement",),
        ("ceiling", "2"),
        ("compare", "1", "2"),
        ("metrics", "2"),
        ("history", "--cohort", "dev"),
        ("disagreements", "2"),
        ("disagreements", "2", "--label", "support_devices"),
        ("reference",),
        ("prompts", "policy"),
        ("prompts", "history"),
        ("notes",),
        ("audit",),
    ],
)
def test_every_table_fits_100_columns(demo_study, args):
    out = _demo(demo_study, *args)
    assert _widest(out) <= 100, out
    import re

    assert not re.search(r"\bnan\b", out, flags=re.IGNORECASE)  # no raw NaN
    assert "Empty DataFrame" not in out


def test_wide_shows_every_column(demo_study):
    narrow = _demo(demo_study, "compare", "1", "2", "--no-cases")
    wide = _demo(demo_study, "compare", "1", "2", "--no-cases", "--wide")
    assert "accuracy_a" not in narrow and "accuracy_a" in wide and "p_value" in wide
    assert _widest(wide) > 100


def test_agreement_fleiss_table_has_a_label_column_and_rates_have_3_decimals(demo_study):
    out = _demo(demo_study, "agreement")
    fleiss = out.split("pairwise")[0]
    assert "label" in fleiss.splitlines()[2] and "\natelectasis " in fleiss
    import re

    assert not re.search(r"\d\.\d{4,}", out)  # 3 decimals for rates


def test_compare_hides_labels_without_change_unless_all(demo_study):
    out = _demo(demo_study, "compare", "1", "2", "--no-cases")
    assert "support_devices" in out and "lung_opacity" in out
    assert "\natelectasis " not in out and "no change hidden" in out and "--all" in out
    assert "more_reports" in out and "80% power" in out  # the power figure, explained once
    full = _demo(demo_study, "compare", "1", "2", "--no-cases", "--all")
    assert "\natelectasis " in full and "no difference seen" in full


def _one_reader_study(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "one"
    assert invoke("init", root, "--rule", "majority", "--n", "1").exit_code == 0
    monkeypatch.setenv("WORKBENCH_STUDY", str(root))
    monkeypatch.delenv("WORKBENCH_USER", raising=False)
    assert invoke("import", "reports", DATA / "reports_small.csv", "--cohort", "dev").exit_code == 0
    rows = [
        r for r in csv.DictReader((DATA / "readings_small.csv").open(encoding="utf-8")) if r["reader"] == "reader-a"
    ]
    path = write_csv(tmp_path / "one.csv", list(rows[0]), [list(r.values()) for r in rows])
    assert invoke("import", "readings", path).exit_code == 0
    return root


def test_a_one_reader_study_says_so_in_words_and_notes_are_not_repeated(tmp_path, monkeypatch):
    _one_reader_study(tmp_path, monkeypatch)
    out = invoke("agreement").output
    assert "one-reader study" in out and "reader-a" in out
    assert "Empty DataFrame" not in out and "Columns:" not in out
    assert invoke("run", "--cohort", "dev").exit_code == 0
    out = invoke("ceiling", "1").output
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(set(lines))  # no line (a note) repeated per label
    assert _widest(out) <= 100


def test_progress_is_a_few_lines_when_the_output_is_not_a_terminal(cli_study):
    result = CliRunner().invoke(main, ["run", "--cohort", "dev"])
    assert result.exit_code == 0, result.output
    err = result.stderr  # click 8.2+ keeps stderr apart
    progress = [line for line in err.splitlines() if "calls (" in line]
    assert "\r" not in err and 1 <= len(progress) <= 11
    assert progress[-1].startswith("160/160 calls (100%)")


# ---------------------------------------------------------------- item 10: bootstrap intervals do not depend on row order


def test_ran_score_interval_is_the_same_whatever_the_order_of_the_rows(cli_study, tmp_path):
    """`workbench score` on the same reports in another row order gives the same bootstrap interval."""
    import json

    assert invoke("run", "--cohort", "dev").exit_code == 0
    assert invoke("freeze", "--name", "order").exit_code == 0
    scoring = DATA / "scoring"
    files = {
        name: list(csv.reader((scoring / f"{name}.csv").open(encoding="utf-8")))
        for name in ("reference", "generated_a")
    }
    intervals = []
    for order in ("forward", "reversed"):
        paths = {}
        for name, rows in files.items():
            body = rows[1:] if order == "forward" else rows[:0:-1]
            paths[name] = write_csv(tmp_path / f"{order}-{name}.csv", rows[0], body)
        out = tmp_path / f"out-{order}"
        result = invoke(
            "score",
            "--bundle",
            "order",
            "--reference",
            paths["reference"],
            "--generated",
            f"A={paths['generated_a']}",
            "--out",
            out,
            "--resamples",
            "300",
        )
        assert result.exit_code == 0, result.output
        ran = json.loads((out / "results.json").read_text(encoding="utf-8"))["generators"]["A"]["ran_score"]
        intervals.append((ran["estimate"], ran["lo"], ran["hi"]))
    assert intervals[0] == intervals[1]


def test_disagreements_show_failed_calls_even_where_the_reference_waits(cli_study, fake_llm_server):
    """A failed call on an item waiting for adjudication is shown, not a crash on its missing reference."""
    assert invoke("import", "readings", DATA / "readings_small.csv").exit_code == 0
    fake_llm_server.behaviour = "malformed"
    CliRunner().invoke(
        main,
        [
            "run",
            "--cohort",
            "dev",
            "--labels",
            "pneumonia",
            "--model",
            "openai/fake",
            "--api-base",
            fake_llm_server.url,
        ],
    )  # its exit code is the run command's business
    result = CliRunner().invoke(main, ["disagreements", "1", "--label", "pneumonia", "--type", "failed"])
    assert result.exit_code == 0, result.output
    assert "failed (no answer)" in result.output and "labeller no answer" in result.output
    assert "reference waiting for adjudication" in result.output  # the 3-3 item of the small cohort
    assert "8 disagreement(s)" in result.output
