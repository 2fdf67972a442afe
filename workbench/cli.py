"""`workbench ...`: the headless commands, thin over services (the app calls the same functions)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pandas as pd

from workbench.study import PROJECT_ROOT, StudyError, builtin_vocabularies, resolve_study_path

DEMO_DIR = PROJECT_ROOT / "annotations"


def study_option(func):
    """Add --study PATH (or $WORKBENCH_STUDY) to a command and open the Workbench for it."""

    @click.option("--study", "study", type=click.Path(file_okay=False), envvar="WORKBENCH_STUDY",
                  help="Study folder (default: $WORKBENCH_STUDY, else the current folder).")
    @functools.wraps(func)
    def wrapper(*args, study=None, **kwargs):
        from workbench.services import Workbench

        wb = Workbench(resolve_study_path(study), actor=_cli_actor())
        wb.migrate()
        return func(wb, *args, **kwargs)

    return wrapper


def _cli_actor():
    """The acting user: $WORKBENCH_USER with its stored role, else the local admin."""
    from workbench.services import Actor

    user = os.environ.get("WORKBENCH_USER")
    role = os.environ.get("WORKBENCH_ROLE", "admin")
    return Actor(user=user or "local", role=role)


def echo_table(frame: pd.DataFrame, fmt: str = "table") -> None:
    """Print a DataFrame as an aligned table, CSV or JSON."""
    if fmt == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(frame.to_json(orient="records", indent=2, force_ascii=False))
    else:
        with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 200):
            click.echo(frame.to_string(index=False))


class CliGroup(click.Group):
    """Turn known user errors into one clear line and exit code 2 instead of a traceback."""

    def invoke(self, ctx):
        from workbench.importers import ImportProblems
        from workbench.services import ConflictError, PermissionDenied

        try:
            return super().invoke(ctx)
        except (StudyError, ImportProblems, PermissionDenied, ConflictError, ValueError, KeyError) as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=CliGroup)
@click.version_option(package_name="workbench")
def main():
    """Clinician-in-the-loop prompt-optimisation workbench for labelling chest X-ray reports.

    Start with `workbench demo` (the app on a synthetic demo study, offline), or create your own
    study with `workbench init PATH --vocab ranscore-21`.
    """


@main.command()
@click.argument("path", type=click.Path(file_okay=False))
@click.option("--vocab", default="ranscore-21", show_default=True,
              help=f"Vocabulary: one of {', '.join(builtin_vocabularies()) or 'the shipped ones'} or a path to your own YAML file.")
@click.option("--db", "db_url", default=None, help="Database URL (default: an SQLite file in the study folder); e.g. postgresql+psycopg://user@host/db")
@click.option("--rule", type=click.Choice(["at_least", "majority"]), default="at_least", show_default=True, help="Reference rule.")
@click.option("--k", type=int, default=4, show_default=True, help="at_least: votes needed on either side.")
@click.option("--n", type=int, default=6, show_default=True, help="Readers needed per item (majority: minimum readers).")
@click.option("--prompts", "prompt_set", default=None, help="Starter prompt set in prompts/ (default: the vocabulary's).")
def init(path, vocab, db_url, rule, k, n, prompt_set):
    """Create a study at PATH: workbench.yaml, prompt Git repo, database."""
    from workbench.services import init_study

    rule_cfg = {"rule": rule, "k": k, "n": n} if rule == "at_least" else {"rule": "majority", "n": n}
    wb = init_study(Path(path), vocab=vocab, db_url=db_url, rule=rule_cfg, prompt_set=prompt_set)
    click.echo(f"created study {wb.root} (vocabulary {wb.vocab.id}, {len(wb.vocab.ids)} labels; "
               f"reference: {wb.rule().describe()}; database {wb.url.split('://')[0]})")


@main.group("import")
def import_():
    """Import reports, readings or an OpenI dataset into the study."""


@import_.command("reports")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--cohort", required=True, help="Cohort name (created when new), e.g. dev, test, external.")
@click.option("--language", default="en", show_default=True, help="Language of the reports.")
@study_option
def import_reports(wb, file, cohort, language):
    """Import reports from CSV, JSONL or Parquet (id + text, or findings/impression)."""
    click.echo(wb.import_reports(Path(file), cohort, language).message())


@import_.command("openi")
@click.argument("reports", type=click.Path(exists=True, dir_okay=False))
@click.argument("labels", type=click.Path(exists=True, dir_okay=False))
@click.option("--cohort", required=True, help="Cohort name for the OpenI reports.")
@study_option
def import_openi(wb, reports, labels, cohort):
    """Import OpenI reports.csv and labels14.csv (gold standard as reader 'openi-gold')."""
    click.echo(wb.import_openi(Path(reports), Path(labels), cohort).message())


@import_.command("readings")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["long", "wide"]), default="long", show_default=True,
              help="long: report_id,label,reader,value; wide: report_id,reader,<one column per label>.")
@click.option("--uncertain-as", type=click.Choice(["positive", "negative", "reject"]), default=None,
              help="How to read CheXpert-style -1 (uncertain) values; required when the file has any.")
@click.option("--blank-as", type=click.Choice(["skip", "negative", "reject"]), default="skip", show_default=True,
              help="Wide format: what a blank cell means.")
@study_option
def import_readings(wb, file, fmt, uncertain_as, blank_as):
    """Import readers' 0/1 labels."""
    click.echo(wb.import_readings(Path(file), fmt=fmt, uncertain_as=uncertain_as, blank_as=blank_as).message())


@main.command()
@click.option("--cohort", default=None, help="Limit to one cohort.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def reference(wb, cohort, fmt):
    """Per label: items decided by vote, adjudicated, and waiting for adjudication."""
    summary = wb.reference_summary(cohort)
    summary.index.name = "label"
    click.echo(f"reference rule: {wb.rule().describe()}") if fmt == "table" else None
    echo_table(summary.reset_index(), fmt)


@main.command()
@click.argument("report_id")
@click.argument("label")
@click.argument("value", type=click.IntRange(0, 1))
@click.option("--reason", required=True, help="Why this value (kept with the decision).")
@study_option
def adjudicate(wb, report_id, label, value, reason):
    """Set the reference value of one (report, label) item."""
    wb.adjudicate(report_id, wb.vocab.label(label).id, value, reason)
    click.echo(f"adjudicated {report_id}/{label} = {value}")


@main.command()
@click.option("--cohort", default=None, help="Limit to one cohort.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def agreement(wb, cohort, fmt):
    """Readers' agreement: Fleiss kappa per label, pairwise Cohen, each reader vs the reference."""
    tables = wb.agreement(cohort)
    for name, frame in tables.items():
        if fmt == "table":
            click.echo(f"\n== {name.replace('_', ' ')} ==")
        echo_table(frame, fmt)


@main.command()
@click.option("--cohort", default=None, help="Cohort to label (required for a new run).")
@click.option("--prompt", "prompt_ref", default=None, help="Prompt version: a commit, tag or branch (default: latest).")
@click.option("--model", default=None, help="Any litellm model string, e.g. openai/gpt-4o-mini, ollama/llama3, or workbench/rules (the offline rule-based baseline).")
@click.option("--api-base", default=None, help="OpenAI-compatible server URL, e.g. http://127.0.0.1:8000/v1 (vLLM, Ollama, llama.cpp).")
@click.option("--labels", default=None, help="Comma-separated label ids or names (default: all asked labels).")
@click.option("--concurrency", type=int, default=None, help="Calls in flight at once.")
@click.option("--resume", "resume", type=int, default=None, metavar="RUN", help="Finish a stopped run without repeating finished calls.")
@click.option("--retry-failed", "retry", type=int, default=None, metavar="RUN", help="Call again every failed (report, label) of a run.")
@study_option
def run(wb, cohort, prompt_ref, model, api_base, labels, concurrency, resume, retry):
    """Label a cohort with the labeller (cached, resumable); prints calls made and answers reused."""
    bar = _progress_bar()
    if resume is not None or retry is not None:
        summary = (wb.resume_run(resume, on_progress=bar) if resume is not None else wb.retry_failed(retry, on_progress=bar))
    else:
        if not cohort:
            raise click.UsageError("--cohort is required for a new run")
        label_list = [x.strip() for x in labels.split(",")] if labels else None
        summary = wb.start_run(cohort, prompt_ref=prompt_ref, model=model, labels=label_list, on_progress=bar,
                               api_base=api_base, concurrency=concurrency)
    click.echo("", err=True)
    click.echo(summary.message())


def _progress_bar():
    """A terminal progress callback (stderr), throttled to a few updates a second."""
    state = {"last": 0.0}

    def show(p) -> None:
        import time as _t

        now = _t.monotonic()
        if p.done < p.total and now - state["last"] < 0.2:
            return
        state["last"] = now
        width = 30
        filled = int(width * p.done / p.total) if p.total else width
        click.echo(f"\r[{'#' * filled}{'.' * (width - filled)}] {p.done}/{p.total} calls "
                   f"(made {p.made}, reused {p.reused}, failures {p.failures})", nl=False, err=True)

    return show


@main.command()
@click.option("--path", "path", type=click.Path(file_okay=False), default=str(PROJECT_ROOT / "sessions" / "demo"),
              show_default=True, help="Where the demo study lives (created when absent).")
@click.option("--port", type=int, default=8501, show_default=True)
@click.option("--no-app", is_flag=True, help="Only create the demo study; do not start the app.")
@click.option("--reset", is_flag=True, help="Delete and recreate the demo study first.")
def demo(path, port, no_app, reset):
    """Create the synthetic demo study (offline labeller, SQLite) and start the app on it."""
    from workbench.demo import create_demo

    root = Path(path).resolve()
    wb = create_demo(root, reset=reset, echo=click.echo)
    click.echo(f"demo study ready at {wb.root}")
    if not no_app:
        _run_app(wb.root, port)


@main.command()
@click.option("--port", type=int, default=8501, show_default=True)
@study_option
def app(wb, port):
    """Start the Streamlit app on a study."""
    _run_app(wb.root, port)


def _run_app(root: Path, port: int) -> None:
    """Run Streamlit on the app module with the study in the environment."""
    app_file = Path(__file__).resolve().parent / "ui" / "app.py"
    env = dict(os.environ, WORKBENCH_STUDY=str(root))
    cmd = [sys.executable, "-m", "streamlit", "run", str(app_file), "--server.port", str(port),
           "--browser.gatherUsageStats", "false", "--server.headless", "true"]
    click.echo(f"starting the app on http://localhost:{port} (Ctrl+C to stop)")
    raise SystemExit(subprocess.call(cmd, env=env))


if __name__ == "__main__":
    main()
