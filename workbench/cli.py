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
        user = os.environ.get("WORKBENCH_USER")
        if user:  # act with that account's role, so role rules apply to scripts too
            wb = wb.as_actor(wb.actor_for(user))
        return func(wb, *args, **kwargs)

    return wrapper


def _cli_actor():
    """The local operator (an admin: they have the study's files) unless $WORKBENCH_USER names an account."""
    from workbench.services import Actor

    return Actor(user="local", role="admin")


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


# ---------------------------------------------------------------- evaluation


@main.command()
@click.argument("run_id", type=int)
@click.option("--ci", type=click.Choice(["wilson", "clopper-pearson"]), default="wilson", show_default=True, help="Interval method (Clopper-Pearson reproduces the Ran Score paper).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--zero-division", type=click.Choice(["undefined", "zero", "one", "exclude"]), default="undefined", show_default=True,
              help="Precision/recall/F1 with a zero denominator: undefined (marked *, left out of macro means), 0, 1, or left out.")
@click.option("--full", is_flag=True, help="Every column (counts, specificity, NPV, kappa, intervals) instead of the paper's layout.")
@click.option("--previous", type=int, default=None, help="Another run to show the change in F1 against.")
@study_option
def metrics(wb, run_id, ci, fmt, zero_division, full, previous):
    """Per-label metrics of a run against the reference, with 95% intervals."""
    ev = wb.evaluate_run(run_id, ci=ci, zero_division=zero_division)
    prev = wb.evaluate_run(previous, ci=ci, zero_division=zero_division, n_resamples=0) if previous else None
    if fmt == "json":
        click.echo(json.dumps({"run": run_id, "ci": ci, "zero_division": zero_division, "excluded": ev.excluded,
                               "averages": ev.averages, "macro_f1_bootstrap": ev.bootstrap,
                               "labels": json.loads(ev.table.reset_index().to_json(orient="records"))}, indent=2, default=str))
        return
    table = ev.table.reset_index() if full else ev.paper_table(prev)
    echo_table(table, fmt)
    if fmt == "table":
        a, b = ev.averages, ev.bootstrap
        click.echo(f"\nmacro F1 {a['macro_f1']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}] (bootstrap over reports, {b['n_resamples']} resamples, seed {b['seed']}); "
                   f"macro accuracy {a['macro_accuracy']:.3f}; micro F1 {a['micro_f1']:.3f}")
        click.echo(f"intervals: {ci}; * = undefined (no positives on either side), policy: {zero_division}")
        click.echo("left out: " + "; ".join(f"{k}: {v}" for k, v in ev.excluded.items()))


@main.command()
@click.argument("run_a", type=int)
@click.argument("run_b", type=int)
@click.option("--mid-p", is_flag=True, help="Mid-p McNemar instead of the exact test.")
@click.option("--cases/--no-cases", default=True, show_default=True, help="List the fixed and broken cases.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def compare(wb, run_a, run_b, mid_p, cases, fmt):
    """Compare two runs on the same cohort: per-label change, McNemar with Holm, fixed and broken cases."""
    result = wb.compare_runs(run_a, run_b, mid_p=mid_p)
    table = result["table"].reset_index()
    cols = ["label", "n", "accuracy_a", "accuracy_b", "delta_accuracy", "f1_a", "f1_b", "delta_f1", "b", "c",
            "p_value", "p_holm", "verdict", "reports_needed"]
    echo_table(table[cols].round(4), fmt)
    if fmt == "table":
        click.echo(f"\nb = right in run {run_a}, wrong in run {run_b} (broken); c = fixed. macro F1 "
                   f"{result['macro_f1_a']:.3f} -> {result['macro_f1_b']:.3f}")
        click.echo("left out: " + "; ".join(f"{k}: {v}" for k, v in result["excluded"].items()))
        if cases and len(result["cases"]):
            click.echo("\n== fixed and broken cases ==")
            echo_table(result["cases"], fmt)


@main.command()
@click.option("--cohort", required=True, help="Cohort whose runs to list.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--per-label", is_flag=True, help="Include every label's accuracy and F1.")
@study_option
def history(wb, cohort, fmt, per_label):
    """Iteration history: macro accuracy and F1 of every run on a cohort, in prompt-version order."""
    frame = wb.iteration_history(cohort)
    if not per_label and len(frame):
        frame = frame[[c for c in frame.columns if ":" not in c]]
    echo_table(frame.round(4) if len(frame) else frame, fmt)


@main.command()
@click.argument("run_id", type=int)
@click.option("--label", default=None, help="Only this label.")
@click.option("--type", "kind", type=click.Choice(["FP", "FN", "failed"]), default=None, help="Only this kind.")
@click.option("--category", default=None, help="Only cases with a note of this error category.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def disagreements(wb, run_id, label, kind, category, fmt):
    """The disagreement queue of a run: where the labeller and the reference differ."""
    frame = wb.disagreements(run_id, label=label, kind=kind, category=category)
    cols = ["report_id", "label", "type", "reference", "prediction", "votes", "evidence", "status", "notes", "categories"]
    echo_table(frame[cols], fmt)
    if fmt == "table":
        click.echo(f"\n{len(frame)} disagreement(s)")


@main.command()
@click.argument("report_id")
@click.argument("label")
@click.option("--category", required=True, help="Error category (see error_categories in workbench.yaml).")
@click.option("--significance", required=True, type=click.Choice(["changes management", "does not change management", "unsure"]))
@click.option("--text", default="", help="What went wrong, in your words.")
@click.option("--reference-wrong", is_flag=True, help="The reference label is wrong: opens an adjudication item.")
@click.option("--run", "run_id", type=int, default=None, help="The run in which you saw it.")
@study_option
def note(wb, report_id, label, category, significance, text, reference_wrong, run_id):
    """Attach an error note to a (report, label) disagreement."""
    note_id = wb.add_note(report_id, label, category, significance, text, reference_wrong, run_id)
    click.echo(f"note {note_id} added" + (" and the item sent to adjudication" if reference_wrong else ""))


@main.command("notes")
@click.option("--run", "run_id", type=int, default=None, help="Only notes on this run's disagreements.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def notes_cmd(wb, run_id, fmt):
    """Counts of error notes by label and category (all, or on one run's disagreements)."""
    echo_table(wb.note_counts(run_id), fmt)


@main.command("ceiling")
@click.argument("run_id", type=int)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def ceiling(wb, run_id, fmt):
    """Human ceiling: labeller kappa beside the readers' Fleiss kappa; accuracy on unanimous vs split items."""
    echo_table(wb.human_ceiling(run_id).round(4), fmt)


# ---------------------------------------------------------------- prompts


@main.group()
def prompts():
    """Prompt versions: history, differences, revert, policy table, few-shot curation."""


@prompts.command("history")
@click.option("--label", default=None, help="Only versions that changed this label.")
@study_option
def prompts_history(wb, label):
    """Versions of the prompt set, newest first."""
    echo_table(wb.prompt_history(label)[["short", "when", "author", "message", "labels", "frozen as"]])


@prompts.command("show")
@click.argument("label")
@click.option("--prompt", "ref", default=None, help="Version (default: latest).")
@study_option
def prompts_show(wb, label, ref):
    """Print one label's prompt file at a version."""
    from workbench.services.prompting import label_yaml

    click.echo(label_yaml(wb.label_prompt(label, ref)))


@prompts.command("diff")
@click.argument("label")
@click.argument("ref_a")
@click.argument("ref_b", required=False)
@study_option
def prompts_diff(wb, label, ref_a, ref_b):
    """Difference of one label between two versions (unified text and fields)."""
    diff = wb.prompt_diff(label, ref_a, ref_b)
    click.echo(diff["unified"] or "(no difference)")
    click.echo(json.dumps(diff["fields"], indent=2, ensure_ascii=False))


@prompts.command("revert")
@click.argument("label")
@click.argument("ref")
@click.option("--message", default=None, help="Commit message.")
@study_option
def prompts_revert(wb, label, ref, message):
    """Restore a label's prompt from an earlier version, as a new version."""
    commit = wb.revert_label(label, ref, message)
    click.echo(f"reverted {label} to {ref}: new version {commit[:8]}")


@prompts.command("policy")
@click.option("--prompt", "ref", default=None, help="Version (default: latest).")
@study_option
def prompts_policy(wb, ref):
    """Every label's hedge and temporal policy side by side, with inconsistencies flagged."""
    echo_table(wb.policy_table(ref))
    findings = wb.policy_conflicts(ref)
    click.echo(f"\n{len(findings)} finding(s):")
    for f in findings:
        click.echo(f"  [{f.kind}] {f.message}")


@prompts.command("add-example")
@click.argument("report_id")
@click.argument("label")
@click.option("--why", default="", help="Why this is the right answer (default: the error note).")
@click.option("--run", "run_id", type=int, default=None, help="Run whose evidence to use.")
@click.option("--value", type=click.IntRange(0, 1), default=None, help="Answer (default: the reference value).")
@study_option
def prompts_add_example(wb, report_id, label, why, run_id, value):
    """Turn a disagreement into a few-shot example in your draft of the label's prompt."""
    lp, warnings = wb.add_example_from_case(report_id, label, why, run_id=run_id, value=value)
    click.echo(f"draft of {lp.label} now has {len(lp.examples)} example(s); save it with `workbench prompts save {lp.label} -m MESSAGE`")
    for w in warnings:
        click.echo(f"warning: {w}")


@prompts.command("save")
@click.argument("labels", nargs=-1, required=True)
@click.option("-m", "--message", required=True, help="What changed and why.")
@study_option
def prompts_save(wb, labels, message):
    """Save your drafts of the given labels as one new prompt version (a Git commit)."""
    commit = wb.commit_drafts([wb.vocab.label(lab).id for lab in labels], message)
    click.echo(f"saved version {commit[:8]}")


@prompts.command("import-dictionary")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("-m", "--message", default="Import prompt dictionary", show_default=True, help="Commit message.")
@study_option
def prompts_import_dictionary(wb, file, message):
    """Import a {label: guidance} JSON/YAML dictionary as a new version of every label."""
    commit = wb.import_prompt_dictionary(Path(file), message)
    click.echo(f"imported as version {commit[:8]}")


# ---------------------------------------------------------------- bundles and scoring


@main.command()
@click.option("--prompt", "prompt_ref", default=None, help="Prompt version to freeze (default: latest).")
@click.option("--name", required=True, help="Bundle name (also an annotated Git tag; never reused).")
@click.option("--cohort", default=None, help="Development cohort whose run justifies the freeze (default: the study's dev_cohort).")
@click.option("--ci", type=click.Choice(["wilson", "clopper-pearson"]), default="wilson", show_default=True)
@study_option
def freeze(wb, prompt_ref, name, cohort, ci):
    """Freeze a prompt version into a bundle (canonical JSON + YAML) with a sha256."""
    info = wb.freeze(name, prompt_ref, cohort=cohort, ci=ci)
    click.echo(f"froze {name}: sha256 {info['sha256']}\n  {info['json']}\n  {info['yaml']}\n  prompt {info['commit'][:8]}, run {info['run']}")


@main.command()
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False))
def verify(bundle):
    """Check a bundle's sha256 against its content."""
    from workbench.bundle import verify_bundle

    ok, recorded, actual = verify_bundle(Path(bundle))
    if ok:
        click.echo(f"ok: {bundle} sha256 {actual}")
    else:
        click.echo(f"MODIFIED: recorded sha256 {recorded} but content hashes to {actual}", err=True)
        raise SystemExit(1)


def _generated(values: tuple[str, ...]) -> dict:
    """Parse NAME=FILE options."""
    out = {}
    for item in values:
        if "=" not in item:
            raise click.BadParameter(f"{item!r}: use NAME=FILE", param_hint="--generated")
        name, path = item.split("=", 1)
        if not Path(path).exists():
            raise click.BadParameter(f"{path} does not exist", param_hint="--generated")
        out[name] = Path(path)
    return out


@main.command()
@click.option("--bundle", "bundle_path", required=True, type=click.Path(exists=True, dir_okay=False), help="Frozen bundle JSON.")
@click.option("--reference", required=True, type=click.Path(exists=True, dir_okay=False), help="Reference reports (id + text or findings/impression).")
@click.option("--generated", multiple=True, required=True, help="NAME=FILE of generated reports with the same ids; repeat for several generators.")
@click.option("--model", default=None, help="Label with another model than the bundle's (recorded in the output).")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Folder for CSV and JSON outputs.")
@click.option("--zero-division", type=click.Choice(["zero", "one", "exclude"]), default="zero", show_default=True,
              help="F1 of a label with no positive on either side: 0 (as the released Ran Score script), 1, or left out.")
@click.option("--resamples", type=int, default=1000, show_default=True, help="Bootstrap resamples for the Ran Score interval.")
@click.option("--study", "study", type=click.Path(file_okay=False), envvar="WORKBENCH_STUDY", default=None,
              help="Study whose database caches extractions (optional).")
def score(bundle_path, reference, generated, model, out, zero_division, resamples, study):
    """Score generated reports against reference reports with a frozen bundle (Ran Score)."""
    from workbench import scoring

    gens = _generated(generated)
    if study and (Path(study) / "workbench.yaml").exists():
        from workbench.services import Workbench

        wb = Workbench(resolve_study_path(study), actor=_cli_actor())
        wb.migrate()
        result = wb.score_generated(Path(bundle_path), Path(reference), gens, model=model, out=Path(out) if out else None,
                                    zero_division=zero_division, n_resamples=resamples)
    else:
        result = scoring.score(Path(bundle_path), Path(reference), gens, model=model, out=Path(out) if out else None,
                               zero_division=zero_division, n_resamples=resamples)
    click.echo(f"bundle {result.bundle_name} ({result.bundle_sha[:12]}), model {result.model}; "
               f"reference: {result.reference_stats['extracted']} extracted, {result.reference_stats['reused']} reused from cache")
    echo_table(result.summary().round(4))
    for name, g in result.generators.items():
        click.echo(f"\n== {name}: Ran Score {g.ran_score['estimate']:.4f} [{g.ran_score['lo']:.4f}, {g.ran_score['hi']:.4f}] ==")
        echo_table(g.per_label.reset_index().round(4))
    click.echo(f"\nzero division: {scoring.POLICY_TEXT[zero_division]}")
    if out:
        click.echo(f"wrote CSV and JSON to {out}")


@main.command()
@click.option("--bundle", "bundle_path", required=True, type=click.Path(exists=True, dir_okay=False), help="Frozen bundle JSON.")
@click.option("--pairs", type=click.Path(exists=True, dir_okay=False), default=str(DEMO_DIR / "robustness" / "pairs.csv"),
              show_default=True, help="CSV: pair_id,kind(paraphrase|significant),label,text_a,text_b.")
def robustness(bundle_path, pairs):
    """Share of harmless paraphrases labelled the same and significant changes detected, per label."""
    from workbench import scoring

    result = scoring.robustness(Path(bundle_path), Path(pairs))
    echo_table(result["per_kind"])
    click.echo("")
    echo_table(result["per_label"])


# ---------------------------------------------------------------- teams


@main.group()
def user():
    """Local accounts and roles (reader, adjudicator, prompt_engineer, admin)."""


@user.command("add")
@click.argument("user_id")
@click.option("--role", required=True, type=click.Choice(["reader", "adjudicator", "prompt_engineer", "admin"]))
@click.option("--name", default="", help="Full name (used as the Git author of prompt commits).")
@click.option("--email", default="", help="E-mail (Git author e-mail).")
@click.option("--password", default=None, help="Password (prompted, hidden, when not given).")
@click.option("--no-password", is_flag=True, help="No local password (sign-in through OIDC only).")
@study_option
def user_add(wb, user_id, role, name, email, password, no_password):
    """Create an account; the first account must be an admin."""
    if not no_password and password is None:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    wb.add_user(user_id, role, None if no_password else password, name=name, email=email)
    click.echo(f"added {user_id} ({role})")


@user.command("list")
@study_option
def user_list(wb):
    """List accounts and roles."""
    echo_table(wb.users())


@user.command("set-role")
@click.argument("user_id")
@click.argument("role", type=click.Choice(["reader", "adjudicator", "prompt_engineer", "admin"]))
@study_option
def user_set_role(wb, user_id, role):
    """Change an account's role."""
    wb.set_role(user_id, role)
    click.echo(f"{user_id} is now {role}")


# ---------------------------------------------------------------- assisted optimisation (cohort roles, splits, suggestions)


@main.command("cohort-role")
@click.argument("cohort")
@click.argument("role", type=click.Choice(["development", "validation", "test", "external"]))
@study_option
def cohort_role(wb, cohort, role):
    """Give a cohort a role; a test cohort is locked (metrics only through frozen bundles, every look counted)."""
    wb.set_cohort_role(cohort, role)
    click.echo(f"{cohort}: {role}")


@main.command()
@click.argument("cohort")
@click.option("--validation", type=float, default=0.3, show_default=True, help="Share of reports in the validation part.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (the same seed gives the same split).")
@click.option("--force", is_flag=True, help="Replace an existing split with a different one (recorded in the audit).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def split(wb, cohort, validation, seed, force, fmt):
    """Divide a development cohort into tuning and validation parts, stratified by label, reproducible by seed."""
    summary = wb.split_cohort(cohort, validation=validation, seed=seed, force=force)
    echo_table(summary.round(3), fmt)
    if fmt == "table":
        sizes = summary.attrs.get("reports", {})
        click.echo(f"\n{cohort}: {sizes.get('tuning', 0)} tuning and {sizes.get('validation', 0)} validation reports "
                   f"(seed {seed}); suggestions and the disagreement queue read only the tuning part")


@main.command("split-metrics")
@click.argument("run_id", type=int)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def split_metrics(wb, run_id, fmt):
    """Per-label F1 of a run on the tuning and validation parts side by side, with intervals and the gap."""
    parts = wb.evaluate_parts(run_id)
    frame = pd.DataFrame({f"{p}_{c}": parts[p]["table"][c] for p in parts for c in ("support", "f1", "f1_lo", "f1_hi")})
    frame["gap"] = frame["tuning_f1"] - frame["validation_f1"]
    echo_table(frame.reset_index().round(3), fmt)
    if fmt == "table":
        from workbench.services.optimising import fmt_figure as f

        for p, m in parts.items():
            click.echo(f"{p}: {m['reports']} reports, macro F1 {f(m['macro_f1'])} [{f(m['macro_f1_lo'])}, {f(m['macro_f1_hi'])}]")
        click.echo(f"gap (tuning - validation): {f(parts['tuning']['macro_f1'] - parts['validation']['macro_f1'])}")


@main.command("split-compare")
@click.argument("run_a", type=int)
@click.argument("run_b", type=int)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def split_compare(wb, run_a, run_b, fmt):
    """Compare two runs on tuning and on validation side by side: per-label F1 change and exact McNemar."""
    result = wb.compare_by_part(run_a, run_b)
    cols = ["f1_a", "f1_b", "delta_f1", "b", "c", "p_value", "verdict"]
    frame = pd.concat({part: r["table"][cols] for part, r in result.items()}, axis=1)
    frame.columns = [f"{p} {c}" for p, c in frame.columns]
    echo_table(frame.reset_index().round(4), fmt)
    if fmt == "table":
        from workbench.services.optimising import fmt_figure as f

        for part, r in result.items():
            click.echo(f"{part}: macro F1 {f(r['macro_f1_a'])} -> {f(r['macro_f1_b'])}")


@main.command("split-history")
@click.argument("cohort")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def split_history(wb, cohort, fmt):
    """Iteration history on tuning and validation with the gap between them (the overfitting signal)."""
    echo_table(wb.history_by_part(cohort).round(4), fmt)


@main.command()
@click.argument("label")
@click.option("--run", "run_id", type=int, default=None, help="Run whose disagreements to learn from (default: latest on the dev cohort).")
@click.option("--proposer", type=click.Choice(["auto", "offline", "llm"]), default="auto", show_default=True,
              help="llm: one reflective call to a model; offline: mined from the disagreements, scored with the rule-based labeller; auto: llm when a model is configured.")
@click.option("--model", default=None, help="Model for the llm proposer (default: the study's labeller).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@study_option
def suggest(wb, label, run_id, proposer, model, fmt):
    """Propose a revision of LABEL (or `all` failing labels) from its tuning disagreements and error notes,
    evaluated on tuning and validation before it is shown."""
    from workbench.services.optimising import suggestion_text

    results = (wb.suggest_failing(run_id, proposer=proposer, model=model) if label == "all"
               else [wb.suggest(label, run_id=run_id, proposer=proposer, model=model)])
    for result in results:
        result.get("evaluation", {}).pop("values", None)
        result.get("evaluation", {}).pop("evidence", None)
    if fmt == "json":
        click.echo(json.dumps(results if label == "all" else results[0], indent=2, default=str))
    else:
        click.echo("\n\n".join(suggestion_text(r) for r in results) or "no label has a disagreement on the tuning part")


@main.command()
@click.argument("proposal_id", type=int)
@study_option
def accept(wb, proposal_id):
    """Accept an offered proposal: it becomes your draft (save it with `workbench prompts save`)."""
    lp = wb.accept_proposal(proposal_id)
    click.echo(f"proposal {proposal_id} is now your draft of {lp.label}; review it, then "
               f"`workbench prompts save {lp.label} -m MESSAGE` (the message will name the notes it came from)")


@main.command()
@click.option("--labels", default=None, help="Comma-separated labels (default: every asked label).")
@click.option("--rounds", type=int, default=3, show_default=True, help="Rounds of suggest -> evaluate -> keep.")
@click.option("--run", "run_id", type=int, default=None, help="Run to start from (default: latest on the dev cohort).")
@click.option("--proposer", type=click.Choice(["auto", "offline", "llm"]), default="auto", show_default=True)
@click.option("--model", default=None, help="Model for the llm proposer.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the report here (.md or .json).")
@study_option
def optimise(wb, labels, rounds, run_id, proposer, model, out):
    """Rounds of suggest -> evaluate -> keep if validation does not drop; the best version is left as drafts."""
    from workbench.services.optimising import report_markdown

    label_list = [x.strip() for x in labels.split(",")] if labels else None
    report = wb.optimise(label_list, rounds=rounds, run_id=run_id, proposer=proposer, model=model,
                         on_progress=lambda m: click.echo(m, err=True))
    text = report_markdown(report)
    click.echo(text)
    if out:
        Path(out).write_text(json.dumps(report, indent=2, default=str) if out.endswith(".json") else text, encoding="utf-8")


@main.command("test-look")
@click.argument("bundle")
@click.option("--cohort", required=True, help="The test cohort.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@study_option
def test_look(wb, bundle, cohort, fmt):
    """Measure a frozen bundle on a locked test cohort (the look is recorded and counted)."""
    figures = wb.test_look(bundle, cohort, on_progress=_progress_bar())
    if fmt == "json":
        click.echo(json.dumps(figures, indent=2, default=str))
        return
    from workbench.services.optimising import fmt_figure as f

    echo_table(pd.DataFrame(figures["per_label"]).round(3))
    click.echo(f"\n{bundle} on {cohort}: macro F1 {f(figures['macro_f1'])} [{f(figures['macro_f1_lo'])}, "
               f"{f(figures['macro_f1_hi'])}]; {figures['message']}")


@main.command("test-looks")
@click.option("--bundle", default=None, help="Only this bundle.")
@study_option
def test_looks(wb, bundle):
    """Every look at a test cohort: who, when, which bundle."""
    echo_table(wb.test_looks(bundle))


@main.command("audit")
@click.option("--entity", default=None, help="Only one kind: reading, adjudication, note, prompt, bundle, run, user, endpoint.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def audit(wb, entity, fmt):
    """The append-only audit trail (who, when, old -> new), newest first; export with --format csv."""
    echo_table(wb.audit_log(entity=entity), fmt)


@main.command("allow-endpoint")
@click.argument("url")
@study_option
def allow_endpoint(wb, url):
    """Allow report text to be sent to an endpoint (URL prefix), e.g. https://api.openai.com."""
    wb.allow_endpoint(url)
    click.echo(f"allowed: {url}\nreport text may now be sent there when a run uses it")


@main.command("migrate-db")
@click.option("--to", "to_url", required=True, help="Empty target database, e.g. postgresql+psycopg://user@host/db")
@study_option
def migrate_db(wb, to_url):
    """Move a study's database (e.g. SQLite to PostgreSQL); row counts and checksums compared and printed."""
    report = wb.migrate_database(to_url)
    echo_table(report)
    click.echo(f"all {len(report)} tables match; the study now uses the new database")


@main.command()
@click.option("--path", "path", type=click.Path(file_okay=False), default=str(PROJECT_ROOT / "sessions" / "demo"),
              show_default=True, help="Where the demo study lives (created when absent).")
@click.option("--port", type=int, default=8501, show_default=True)
@click.option("--no-app", is_flag=True, help="Only create the demo study; do not start the app.")
@click.option("--reset", is_flag=True, help="Delete and recreate the demo study first.")
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Interface to serve on; the default keeps report text on this machine (0.0.0.0 serves the network).")
def demo(path, port, no_app, reset, address):
    """Create the synthetic demo study (offline labeller, SQLite) and start the app on it."""
    from workbench.demo import create_demo

    root = Path(path).resolve()
    wb = create_demo(root, reset=reset, echo=click.echo)
    click.echo(f"demo study ready at {wb.root}")
    if not no_app:
        _run_app(wb.root, port, address)


@main.command()
@click.option("--port", type=int, default=8501, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Interface to serve on; use 0.0.0.0 for a team server (with auth: local or oidc).")
@study_option
def app(wb, port, address):
    """Start the Streamlit app on a study."""
    if address not in ("127.0.0.1", "localhost", "::1") and wb.config.auth == "none":
        click.echo("warning: serving on the network with auth: none; anyone who reaches it can read the reports. "
                   "Set auth: local (workbench user add ...) or oidc in workbench.yaml.", err=True)
    _run_app(wb.root, port, address)


def _run_app(root: Path, port: int, address: str = "127.0.0.1") -> None:
    """Run Streamlit on the app module with the study in the environment (loopback by default)."""
    app_file = Path(__file__).resolve().parent / "ui" / "app.py"
    env = dict(os.environ, WORKBENCH_STUDY=str(root))
    cmd = [sys.executable, "-m", "streamlit", "run", str(app_file), "--server.port", str(port),
           "--server.address", address, "--browser.gatherUsageStats", "false", "--server.headless", "true",
           "--client.toolbarMode", "minimal"]
    click.echo(f"starting the app on http://{'localhost' if address == '127.0.0.1' else address}:{port} (Ctrl+C to stop)")
    raise SystemExit(subprocess.call(cmd, env=env))


if __name__ == "__main__":
    main()
