"""Cold starts: the everyday read commands import only what they use (issue 14, item 3).

The figures live in bench/bench_cli.py; these tests pin the cause: a module that a command does
not need must not be imported by it, so a refactor that pulls one back in fails here, not on a
stopwatch.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("scipy", "git", "litellm", "plotly", "streamlit", "statsmodels", "sklearn")

PROBE = """
import json, sys
from workbench.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    sys.stdout.flush()
    # a module runtime.lazy_module registered but nobody used is not loaded: its code never ran
    loaded = {m.split('.')[0] for m, mod in list(sys.modules.items()) if type(mod).__name__ != "_LazyModule"}
    print("\\nMODULES " + json.dumps(sorted(loaded)), file=sys.stderr)
"""


def _loaded(*argv: str) -> set[str]:
    """Top-level modules loaded by one fresh `workbench ARGV` process."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    line = [ln for ln in done.stderr.splitlines() if ln.startswith("MODULES ")][-1]
    return set(json.loads(line.removeprefix("MODULES ")))


def test_metrics_imports_no_statistics_git_or_model_libraries(small_study):
    """`workbench metrics RUN` (Wilson intervals, bootstrap F1) needs neither scipy nor Git nor litellm."""
    run = small_study.start_run("dev")
    loaded = _loaded("metrics", str(run.run_id), "--study", str(small_study.paths.root))
    assert "pandas" in loaded  # the probe really ran the command
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


MODEL_CLIENTS = {"openai", "httpx", "litellm", "aiohttp"}


def test_commands_that_call_no_model_import_no_model_client(small_study):
    """Issue 30 item 7: the OpenAI SDK (and httpx under it) cost about 1 s; only a model call needs them."""
    wb = small_study
    wb.split_cohort("dev", validation=0.3, seed=0)
    first = wb.start_run("dev").run_id
    wb.set_prompt_field("pneumonia", "hedged", "negative")
    wb.commit_drafts(["pneumonia"], "hedging is negative")
    second = wb.start_run("dev").run_id
    study = ("--study", str(wb.paths.root))
    for argv in (
        ("metrics", str(first)),
        ("history", "--cohort", "dev"),
        ("compare", str(first), str(second)),
        ("disagreements", str(first)),
        ("split-metrics", str(first)),
        ("reference", "--cohort", "dev"),
        ("prompts", "show", "pneumonia"),
    ):
        loaded = _loaded(*argv, *study)
        assert "pandas" in loaded or argv[0] == "prompts", argv  # the probe really ran the command
        assert not loaded & MODEL_CLIENTS, (argv, sorted(loaded & MODEL_CLIENTS))


REFUSAL_PROBE = PROBE.replace("main(sys.argv[1:], standalone_mode=False)", "main(sys.argv[1:])")


def test_a_refused_argument_is_refused_before_the_heavy_imports(small_study):
    """A typo's refusal does not wait for pandas, the database layer or the services (20-37 s under load)."""
    study = ("--study", str(small_study.paths.root))
    for argv, words in (
        (("metrcs", "1"), "No such command 'metrcs'"),
        (("metrics", "one"), "'one' is not a valid integer"),
        (("history",), "Missing option '--cohort'"),
        (("run", "--cohort", "dev", "--concurrency", "many"), "'many' is not a valid integer"),
        (("compare", "1", "2", "--format", "xml"), "'xml' is not one of"),
    ):
        done = subprocess.run([sys.executable, "-c", REFUSAL_PROBE, *argv, *study], capture_output=True, text=True)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr[-800:])
        line = [ln for ln in done.stderr.splitlines() if ln.startswith("MODULES ")][-1]
        loaded = set(json.loads(line.removeprefix("MODULES ")))
        assert not loaded & {*HEAVY, *MODEL_CLIENTS, "pandas", "sqlalchemy", "numpy"}, (argv, sorted(loaded))


def test_help_imports_nothing_heavy():
    """`workbench --help` loads neither pandas nor the database layer."""
    loaded = _loaded("--help")
    assert not loaded & {*HEAVY, "pandas", "sqlalchemy", "sqlmodel"}, sorted(loaded & {*HEAVY, "pandas", "sqlalchemy"})


def test_vocabulary_is_parsed_once_while_unchanged_and_again_after_an_edit(tmp_path):
    """The app opens the study on every rerun: the vocabulary is parsed once, yet an edit is seen."""
    import os
    import shutil

    from workbench.study import find_vocabulary_file, load_vocabulary_file

    path = tmp_path / "vocab.yaml"
    shutil.copy(find_vocabulary_file("ranscore-21"), path)
    first = load_vocabulary_file(path)
    assert load_vocabulary_file(path) is first  # not parsed again
    label = first.asked_ids[0]
    text = path.read_text()
    name = first.names()[label]
    path.write_text(text.replace(f"name: {name}", f"name: {name} (edited)", 1))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert load_vocabulary_file(path).names()[label] == f"{name} (edited)"
