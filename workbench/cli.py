"""`workbench ...`: the headless commands, thin over services (the app calls the same functions)."""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import click

from workbench import runtime
from workbench.errors import WorkbenchError
from workbench.study import NO_AUTH_ON_NETWORK, StudyError, builtin_vocabularies, resolve_study_path

if TYPE_CHECKING:  # the services are imported when a command runs, not for `workbench --help`
    from workbench.services.results import AdaptiveStatus

pd = runtime.lazy_module("pandas")  # imported on first use: `workbench --help` starts ~0.3 s sooner

EXIT_INCOMPLETE = 3  # the command ran, but failed calls or extractions leave its result incomplete


def study_option(func):
    """Add --study PATH (or $WORKBENCH_STUDY) to a command and open the Workbench for it."""

    @click.option(
        "--study",
        "study",
        type=click.Path(file_okay=False),
        envvar="WORKBENCH_STUDY",
        help="Study folder (default: $WORKBENCH_STUDY, else the current folder).",
    )
    @functools.wraps(func)
    def wrapper(*args, study=None, **kwargs):
        from workbench.services import Workbench

        wb = Workbench(resolve_study_path(study), actor=_cli_actor())
        _warn_open_files(wb)
        wb.migrate()
        return func(wb.as_actor(_signed_in(wb)), *args, **kwargs)

    return wrapper


def _warn_open_files(wb) -> None:
    """Say (never change) when the study's folder or database can be read by other users."""
    for warning in wb.permission_warnings():
        click.echo(f"warning: {warning}", err=True)


def _cli_actor():
    """The local operator (an admin: they have the study's files) unless $WORKBENCH_USER names an account."""
    from workbench.services import Actor

    return Actor(user="local", role="admin")


def _signed_in(wb):
    """Who the command acts as.

    auth none: the local operator, or with $WORKBENCH_USER that account's role (so role rules apply
    to scripts). auth local/oidc: an account proven by $WORKBENCH_TOKEN (`workbench user token`) or
    its password (prompted); actions are attributed to it only then. A study without accounts yet
    is run by the local operator, so the first admin can be added.
    """
    user = os.environ.get("WORKBENCH_USER", "").strip()
    if wb.config.auth == "none":
        return wb.actor_for(user) if user else wb.actor
    if wb.users().empty:
        return wb.actor
    if not user:
        raise StudyError(
            f"this study signs users in (auth: {wb.config.auth}): set WORKBENCH_USER to your account and "
            "WORKBENCH_TOKEN to a token from `workbench user token NAME` (or type the password when asked)"
        )
    token = os.environ.get("WORKBENCH_TOKEN", "").strip()
    if token:
        return wb.authenticate_token(user, token)
    return wb.authenticate(user, click.prompt(f"password for {user}", hide_input=True, err=True))


def echo_table(
    frame: pd.DataFrame,
    fmt: str = "table",
    *,
    wide: bool | None = None,
    columns: list[str] | None = None,
    undefined: dict[str, str] | None = None,
    title: str | None = None,
    bootstrap: tuple[str, ...] = (),
) -> None:
    """Print a DataFrame as a table within the terminal's width (every column when wide), CSV or JSON.

    wide: None = the command's --wide flag; columns: what the table shows by default (CSV, JSON and
    --wide show every column); undefined: per column, why a value may be undefined (each reason printed
    once under the table); bootstrap: estimate columns whose COL_lo / COL_hi are percentile intervals.
    """
    if wide is None:
        wide = _wide_flag()
    if fmt == "csv":
        from workbench.core.export import to_csv

        click.echo(to_csv(frame), nl=False)
    elif fmt == "json":
        click.echo(json.dumps(json_records(frame), indent=2, ensure_ascii=False))
    else:
        from workbench.terminal import render_table

        if columns is not None and not wide:
            frame = frame[[c for c in columns if c in frame.columns]]
        click.echo(render_table(frame, wide=wide, undefined=undefined, title=title, bootstrap=bootstrap))


def _wide_flag() -> bool:
    """The running command's --wide (an exposed parameter, or a flag kept in the context)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx and (ctx.params.get("wide") or ctx.meta.get("wide")))


def json_default(obj):
    """json.dumps fallback for the services' results (services/results.py, imported only when a command needs it)."""
    from workbench.services.results import json_default as default

    return default(obj)


def json_records(frame: pd.DataFrame) -> list[dict]:
    """A table's rows for --format json, floats at full precision (core/export.py)."""
    from workbench.core.export import json_records as records

    return records(frame)


def say(text: str) -> None:
    """A line of explanation wrapped to the terminal's width."""

    from workbench.terminal import terminal_width, visible

    click.echo(textwrap.fill(visible(text), width=terminal_width(), break_long_words=False, break_on_hyphens=False))


def wrap_item(text: str) -> str:
    """A list item wrapped to 100 columns, continuation lines indented under it."""

    return textwrap.fill(
        text, width=100, initial_indent="  ", subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    )


def wide_option(func):
    """Add --wide (every column, no width limit) as the command's `wide` parameter."""
    return click.option("--wide", is_flag=True, help="Every column, without the terminal's width limit.")(func)


def wide_flag(func):
    """Add --wide to a command whose tables read it from the context (echo_table), not as a parameter."""

    def keep(ctx, _param, value):
        ctx.meta["wide"] = value

    return click.option(
        "--wide",
        is_flag=True,
        expose_value=False,
        callback=keep,
        help="Every column, without the terminal's width limit.",
    )(func)


# `workbench --help` lists the commands in the order of the work, not the alphabet (docs/gen_cli.py too)
SECTIONS: dict[str, tuple[str, ...]] = {
    "Study and data": ("init", "labelset", "demo", "app", "import", "cohort-role", "split"),
    "Reading": (
        "readings",
        "reference",
        "adjudicate",
        "adjudicate-attribute",
        "attribute-ties",
        "agreement",
        "adaptive",
    ),
    "Runs and evaluation": (
        "run",
        "metrics",
        "compare",
        "history",
        "split-metrics",
        "split-compare",
        "split-history",
        "disagreements",
        "case",
        "search",
        "error-note",
        "error-notes",
        "attributes",
        "calls",
        "noise",
        "ceiling",
    ),
    "Prompts and optimisation": ("prompts", "suggest", "accept", "optimise", "evaluate-drafts"),
    "Freezing and scoring": ("freeze", "bundle", "verify", "score", "robustness", "test-look", "test-look-history"),
    "Teams and admin": ("user", "audit", "allow-endpoint", "migrate-db"),
}


def hidden_alias(group: click.Group, command: click.Command, old_name: str) -> None:
    """Keep an old command name working (scripts, notes, habits) without listing it twice."""
    alias = copy.copy(command)
    alias.hidden = True
    group.add_command(alias, old_name)


class CliGroup(click.Group):
    """One line for a user's mistake (exit 2) or a storage failure (exit 1); a traceback for a bug (exit 1).

    Its help lists the commands by workflow (SECTIONS), then any not placed there.
    """

    def format_commands(self, ctx, formatter):
        """Commands under the section headings of SECTIONS (a command missing from them under "Other")."""
        shown = {n: c for n in self.list_commands(ctx) if (c := self.get_command(ctx, n)) and not c.hidden}
        placed = {n for names in SECTIONS.values() for n in names}
        groups = [(title, [n for n in names if n in shown]) for title, names in SECTIONS.items()]
        groups.append(("Other", [n for n in shown if n not in placed]))
        first = max((len(n) for n in shown), default=0)
        for title, names in groups:
            if names:
                with formatter.section(title):
                    for name in names:
                        _write_command_row(formatter, name, shown[name].get_short_help_str(10**6), first)

    def invoke(self, ctx):
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
            return result
        except BrokenPipeError:
            _quiet_closed_pipe()
        except (click.exceptions.ClickException, click.exceptions.Abort, click.exceptions.Exit):
            raise
        except WorkbenchError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except Exception as exc:
            if isinstance(exc, _storage_errors()):
                # one line, never the SQL or its parameters (they hold report text); nothing half-written
                click.echo(f"error: {_storage_error(exc)}", err=True)
                ctx.exit(1)
            _report_bug()
            ctx.exit(1)


def _write_command_row(formatter, name: str, text: str, first: int) -> None:
    """One listing row, its name column as wide in every section and its text wrapped at spaces only (a
    hyphenated word such as per-label is never split across lines)."""
    indent = formatter.current_indent
    lines = textwrap.wrap(text, max(formatter.width - indent - first - 2, 30), break_on_hyphens=False) or [""]
    formatter.write(f"{'':{indent}}{name:<{first}}  {lines[0]}\n")
    for line in lines[1:]:
        formatter.write(f"{'':{indent + first + 2}}{line}\n")


def _report_bug() -> None:
    """Print the traceback of the exception being handled and ask for a report: it is not the user's mistake."""

    traceback.print_exc(file=sys.stderr)
    click.echo(
        "error: this is a bug in the workbench, not a mistake of yours; please report it with the traceback above",
        err=True,
    )


def _quiet_closed_pipe():
    """The reader of our output went away (`workbench metrics 1 | head -2`): stop quietly, exit 141 like
    other tools killed by SIGPIPE; stdout goes to /dev/null so the final flush raises nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(141)


def _storage_errors() -> tuple[type[BaseException], ...]:
    """Database and disk failures (the store is imported only when one is raised: fast start)."""
    from workbench.store import db

    return db.storage_errors()


def _storage_error(exc: BaseException) -> str:
    """A one-line, text-free description of a database or disk failure."""

    orig = getattr(exc, "orig", None) or exc
    code = getattr(orig, "errno", None)
    message = (
        str(orig.args[0]) if getattr(orig, "args", None) and isinstance(orig.args[0], str) else type(orig).__name__
    )
    message = message.splitlines()[0][:200] if message else type(orig).__name__
    low = message.lower()
    if code == errno.ENOSPC or "disk is full" in low or "no space" in low:
        return "the disk is full: nothing was saved; free some space and run the command again"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM) or "readonly" in low or "read-only" in low:
        return "the study's database or folder is read-only: nothing was saved; check its permissions"
    if "locked" in low:
        from workbench.store.db import busy_timeout_s

        waited = getattr(exc, "workbench_waited_s", None)
        if waited is not None and waited < busy_timeout_s() - 0.5:  # SQLite gave up without waiting its bound
            return (
                f"the database was locked by another process's write and SQLite gave up after {waited:.1f} s (not "
                f"the {busy_timeout_s():g} s it may wait: a write that follows a read overtaken by another writer "
                "cannot wait); this command's last change was not saved; try again. Many people writing at once "
                "need PostgreSQL: workbench migrate-db --to postgresql+psycopg://..."
            )
        return (
            f"the database stayed busy for {busy_timeout_s():g} s (another process is writing to it); this "
            "command's last change was not saved; try again when the other one is done"
        )
    if isinstance(orig, OSError) and getattr(orig, "filename", None):
        return f"{orig.strerror or type(orig).__name__}: {orig.filename}"  # a path, never file content
    what = "database" if hasattr(exc, "orig") or "sql" in type(exc).__module__ else "file system"
    return f"the {what} refused the operation ({type(orig).__name__}); nothing was saved"


@click.group(cls=CliGroup)
@click.version_option(package_name="workbench")
def main():
    """Clinician-in-the-loop prompt-optimisation workbench for labelling chest X-ray reports.

    Start with `workbench demo` (the app on a synthetic demo study, offline), or create your own
    study with `workbench init PATH --vocab ranscore-21`.
    """
    runtime.single_threaded_blas()  # before any command imports numpy
    runtime.short_lived()


@main.command()
@click.argument("path", type=click.Path(file_okay=False))
@click.option(
    "--vocab",
    default="ranscore-21",
    show_default=True,
    help=f"Vocabulary: one of {', '.join(builtin_vocabularies()) or 'the shipped ones'} or a path to your own YAML file.",
)
@click.option(
    "--db",
    "db_url",
    default=None,
    help="Database URL (default: an SQLite file in the study folder); e.g. postgresql+psycopg://user@host/db. "
    "No password in it (it would be written to workbench.yaml): PGPASSWORD or ~/.pgpass holds it.",
)
@click.option(
    "--rule",
    type=click.Choice(["at_least", "positive_at_least", "majority"]),
    default="at_least",
    show_default=True,
    help="Reference rule: at_least (K votes on either side, else adjudication), positive_at_least "
    "(positive with K votes of N, otherwise negative: the Ran Score paper's rule) or majority.",
)
@click.option(
    "--k",
    type=int,
    default=4,
    show_default=True,
    help="at_least: votes needed on either side; positive_at_least: positive votes needed.",
)
@click.option(
    "--n", type=int, default=6, show_default=True, help="Readers needed per item (majority: minimum readers)."
)
@click.option(
    "--prompts", "prompt_set", default=None, help="Starter prompt set in prompts/ (default: the vocabulary's)."
)
def init(path, vocab, db_url, rule, k, n, prompt_set):
    """Create a study at PATH: workbench.yaml, prompt Git repo, database."""
    from workbench.services import init_study

    rule_cfg = {"rule": rule, "k": k, "n": n} if rule != "majority" else {"rule": "majority", "n": n}
    wb = init_study(Path(path), vocab=vocab, db_url=db_url, rule=rule_cfg, prompt_set=prompt_set)
    click.echo(
        f"created study {wb.root} (vocabulary {wb.vocab.id}, {len(wb.vocab.ids)} labels; "
        f"reference: {wb.rule().describe()}; database {wb.url.split('://')[0]})"
    )


@main.group("import")
def import_():
    """Import reports, readings or an OpenI dataset into the study."""


def _cohort_name(ctx, param, value):
    """--cohort checked before any file is read: short, one line, nothing hidden (services check it again)."""
    from workbench.core.names import check_cohort_name

    try:
        return check_cohort_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@import_.command("reports")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--cohort", required=True, callback=_cohort_name, help="Cohort name (created when new), e.g. dev, test, external."
)
@click.option("--language", default="en", show_default=True, help="Language of the reports.")
@study_option
def import_reports(wb, file, cohort, language):
    """Import reports from CSV, JSONL or Parquet (id + text, or findings/impression)."""
    click.echo(wb.import_reports(Path(file), cohort, language).message())


@import_.command("openi")
@click.argument("reports", type=click.Path(exists=True, dir_okay=False))
@click.argument("labels", type=click.Path(exists=True, dir_okay=False))
@click.option("--cohort", required=True, callback=_cohort_name, help="Cohort name for the OpenI reports.")
@study_option
def import_openi(wb, reports, labels, cohort):
    """Import OpenI reports.csv and labels14.csv (gold standard as reader 'openi-gold')."""
    click.echo(wb.import_openi(Path(reports), Path(labels), cohort).message())


@import_.command("readings")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["long", "wide"]),
    default="long",
    show_default=True,
    help="long: report_id,label,reader,value[,side,severity,...]; wide: report_id,reader,<one column per label>"
    "[,<label>.<attribute>] (attribute columns: docs/attributes.md).",
)
@click.option(
    "--uncertain-as",
    type=click.Choice(["positive", "negative", "reject"]),
    default=None,
    help="How to read CheXpert-style -1 (uncertain) values; required when the file has any.",
)
@click.option(
    "--blank-as",
    type=click.Choice(["skip", "negative", "reject"]),
    default="skip",
    show_default=True,
    help="Wide format: what a blank cell means.",
)
@study_option
def import_readings(wb, file, fmt, uncertain_as, blank_as):
    """Import readers' 0/1 labels."""
    click.echo(wb.import_readings(Path(file), fmt=fmt, uncertain_as=uncertain_as, blank_as=blank_as).message())


@main.group("readings")
def readings_():
    """A reader's own saved readings: undo the last save, export the comments and unsure marks."""


@readings_.command("undo")
@click.option("--reader", required=True, help="The reader whose last save is undone (yourself, when signed in).")
@study_option
def readings_undo(wb, reader):
    """Undo a reader's last saved reading: the values before it come back (a new reading goes back to a draft)."""
    done = wb.undo_last_save(reader)
    click.echo(
        f"Undid the last save of {done.report_id} by {reader}: {done.restored} label(s) restored, "
        f"{done.removed} new reading(s) removed."
    )


@readings_.command("comments")
@click.option("--cohort", default=None, help="Limit to one cohort.")
@click.option("--reader", default=None, help="Only one reader's (yours without unblinded access).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def readings_notes(wb, cohort, reader, fmt):
    """Readers' per-report comments and unsure marks, saved with their readings."""
    echo_table(wb.reading_notes(cohort=cohort, reader=reader), fmt)


hidden_alias(readings_, readings_notes, "notes")  # its name before issue 30


@main.command()
@click.option("--cohort", default=None, help="Limit to one cohort.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def reference(wb, cohort, fmt):
    """Per label: items decided by vote, adjudicated, and waiting for adjudication."""
    summary = wb.reference_summary(cohort)
    summary.index.name = "label"
    say(f"reference rule: {wb.rule().describe()}") if fmt == "table" else None
    echo_table(summary.reset_index(), fmt)
    if fmt == "table":
        for name in [cohort] if cohort else wb.cohorts()["name"].tolist():
            say(_reads_line(name, wb.adaptive_status(name)))
        if wb.vocab.attribute_specs():
            say(
                f"attribute ties waiting for adjudication: {len(wb.attribute_ties(cohort))} (`workbench attribute-ties`)"
            )


def _reads_line(cohort: str, status: AdaptiveStatus) -> str:
    """Reads done and saved, items decided / undecided / waiting, in one sentence."""
    saved = (
        f"reads saved {status.reads_saved:,} ({status.saved_share:.1%} of a full panel of {status.full_panel:,} reads)"
        if status.full_panel
        else "reads saved 0"
    )
    state = "on" if status.enabled else "off"
    return (
        f"{cohort} (adaptive reading {state}): reads done {status.reads_done:,}, {saved}; items decided "
        f"{status.decided:,}, undecided {status.undecided:,}, waiting for adjudication {status.waiting:,}; "
        f"reports still offered {status.reports_open:,} of {status.reports:,}"
    )


@main.command("adaptive")
@click.option("--on/--off", "enabled", default=None, help="Turn adaptive reading on or off (admins).")
@click.option("--share", type=float, default=None, help="Agreement sample: the share of reports kept at full overlap.")
@click.option("--seed", type=int, default=None, help="Seed of the agreement sample's draw.")
@click.option(
    "--extra-reader/--no-extra-reader",
    default=None,
    help="Majority rules: a tie at the panel goes to one more reader before adjudication.",
)
@click.option(
    "--order",
    type=click.Choice(["finish", "cohort"]),
    default=None,
    help="finish: reports nearest a decision first, then the agreement sample, then unread; cohort: the old order.",
)
@study_option
def adaptive(wb, enabled, share, seed, extra_reader, order):
    """Adaptive reading: a report leaves the readers' lists once its reference can no longer change."""
    changes = {
        k: v
        for k, v in {
            "enabled": enabled,
            "agreement_share": share,
            "seed": seed,
            "extra_reader": extra_reader,
            "order": order,
        }.items()
        if v is not None
    }
    settings = wb.set_adaptive(**changes) if changes else wb.adaptive_settings()
    say(
        f"adaptive reading {'on' if settings.enabled else 'off'}: agreement sample {settings.agreement_share:.0%} "
        f"(seed {settings.seed}), extra reader on a tie {'yes' if settings.extra_reader else 'no'}, order "
        f"{settings.order}. {wb.reading_order_text()}"
    )
    for name in wb.cohorts()["name"]:
        say(_reads_line(name, wb.adaptive_status(name)))


@main.command()
@click.argument("report_id")
@click.argument("label")
@click.argument("value", type=click.IntRange(0, 1))
@click.option("--reason", required=True, help="Why this value (kept with the decision).")
@click.option(
    "--confirm", is_flag=True, help="Save even though the reason names the other value ('absent' with value 1)."
)
@study_option
def adjudicate(wb, report_id, label, value, reason, confirm):
    """Set the reference value of one (report, label) item."""
    from workbench.services import ReasonContradicts  # loaded with the study already

    try:
        wb.adjudicate(report_id, wb.label_id(label), value, reason, confirmed=confirm)
    except ReasonContradicts as e:
        raise StudyError(f"{e} (--confirm)") from None
    click.echo(f"adjudicated {report_id}/{label} = {value}")


@main.command("adjudicate-attribute")
@click.argument("report_id")
@click.argument("label")
@click.argument("attribute")
@click.argument("value")
@click.option("--reason", default="", help="Why this value (kept in the audit trail).")
@study_option
def adjudicate_attribute(wb, report_id, label, attribute, value, reason):
    """Settle a tied attribute of one finding (readers who ticked LABEL split on ATTRIBUTE): its reference VALUE."""
    label = wb.label_id(label)
    wb.adjudicate_attribute(report_id, label, attribute, value, reason)
    click.echo(f"adjudicated {report_id}/{label} {attribute} = {value.strip().lower()}")


@main.command("attribute-ties")
@click.option("--cohort", default=None, help="Limit to one cohort.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def attribute_ties(wb, cohort, fmt):
    """Attribute ties waiting for adjudication: one row per (report, label, attribute) with the readers' values and counts."""
    ties = wb.attribute_ties(cohort)
    echo_table(ties, fmt)
    if fmt == "table":
        say(
            f"{len(ties)} attribute tie(s) waiting (findings whose presence reference is positive); settle one with "
            "`workbench adjudicate-attribute REPORT LABEL ATTRIBUTE VALUE`"
        )


@main.command()
@click.option("--cohort", default=None, help="Limit to one cohort.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_option
@study_option
def agreement(wb, cohort, fmt, wide):
    """Readers' agreement: Fleiss kappa per label, pairwise Cohen, each reader vs the reference."""
    tables = {name: _with_label_column(frame) for name, frame in wb.agreement(cohort).tables().items()}
    if fmt == "json":
        click.echo(json.dumps({name: json_records(frame) for name, frame in tables.items()}, indent=2))
        return
    if fmt == "csv":
        for name, frame in tables.items():
            echo_table(frame.assign(table=name), fmt)
        return
    readers = wb.readers()
    if len(readers) < 2 or all(frame.empty for name, frame in tables.items() if name != "reader_vs_reference"):
        click.echo(
            f"one-reader study: agreement between readers needs at least two readers of the same reports; "
            f"this study has {len(readers)} reader(s) ({', '.join(readers) or 'none yet'})."
        )
        if not tables["reader_vs_reference"].empty:
            click.echo("")
            echo_table(tables["reader_vs_reference"], title="each reader against the reference", wide=wide)
        return
    scope = wb.agreement_scope(cohort)
    say(scope) if scope else None
    shown = {
        "fleiss": ["label", "fleiss_kappa", "observed_agreement", "positive_rate", "n_items", "n_readers", "note"],
        "pairwise": ["label", "reader_a", "reader_b", "kappa", "n_items", "agreement", "note"],
        "reader_vs_reference": ["reader", "label", "n", "accuracy", "accuracy_lo", "accuracy_hi", "kappa", "note"],
    }
    for name, frame in tables.items():
        click.echo("")
        if frame.empty:
            click.echo(f"{name.replace('_', ' ')}: nothing to show")
            continue
        echo_table(
            frame,
            title=name.replace("_", " "),
            wide=wide,
            columns=shown.get(name),
            undefined={
                c: "kappa undefined: every reading of the label has the same value (see note)"
                for c in ("fleiss_kappa", "kappa")
            },
        )


def _with_label_column(frame: pd.DataFrame) -> pd.DataFrame:
    """Bring a named index (the label) back as the first column, so no table loses it."""
    return frame.reset_index() if frame.index.name else frame


@main.command()
@click.option("--cohort", default=None, help="Cohort to label (required for a new run).")
@click.option("--prompt", "prompt_ref", default=None, help="Prompt version: a commit, tag or branch (default: latest).")
@click.option(
    "--model",
    default=None,
    help="Any litellm model string, e.g. openai/gpt-4o-mini, ollama/llama3, or workbench/rules (the offline rule-based baseline).",
)
@click.option(
    "--api-base",
    default=None,
    help="OpenAI-compatible server URL, e.g. http://127.0.0.1:8000/v1 (vLLM, Ollama, llama.cpp).",
)
@click.option("--labels", default=None, help="Comma-separated label ids or names (default: all asked labels).")
@click.option("--concurrency", type=int, default=None, help="Calls in flight at once.")
@click.option(
    "--resume",
    "resume",
    type=int,
    default=None,
    metavar="RUN",
    help="Finish a stopped run without repeating finished calls.",
)
@click.option(
    "--retry-failed",
    "retry",
    type=int,
    default=None,
    metavar="RUN",
    help="Call again every failed (report, label) of a run.",
)
@click.option("--new", "new", is_flag=True, help="Start a new run even when an identical finished run exists.")
@click.option(
    "--estimate", is_flag=True, help="Print calls after the cache, tokens, cost and wall time; make no model call."
)
@click.option(
    "--yes", "yes", is_flag=True, help="Accept an estimated cost above labeller.confirm_above without asking."
)
@click.option(
    "--batch",
    "batch",
    is_flag=True,
    help="Send the calls as one provider batch job (OpenAI-compatible /v1/batches or Azure OpenAI's; often half price, answers within 24 h).",
)
@study_option
def run(wb, cohort, prompt_ref, model, api_base, labels, concurrency, resume, retry, new, estimate, yes, batch):
    """Label a cohort with the labeller (cached, resumable); prints calls made and answers reused.

    Exit codes: 0 every call answered; 2 refused before any call (bad option, endpoint not allowed,
    unknown model, run busy); 3 the run ended with failures or stopped early (causes are printed).
    """
    from workbench.services.runs import RunInterrupted

    bar = _progress_bar()
    try:
        with _sigterm_as_interrupt():
            summary = _run_or_resume(
                wb,
                bar,
                cohort,
                prompt_ref,
                model,
                api_base,
                labels,
                concurrency,
                resume,
                retry,
                new,
                estimate=estimate,
                yes=yes,
                batch=batch,
            )
    except RunInterrupted as exc:
        click.echo("", err=True)
        click.echo(str(exc), err=True)
        raise SystemExit(143 if _SIGTERM["received"] else 130) from None
    if summary is None:
        return
    click.echo("", err=True)
    click.echo(summary.message())
    for note in summary.notes:  # what the run chose on the way (concurrency fitted to the server, lowered on timeouts)
        click.echo(f"note: {note}", err=True)
    _cost_line(wb, summary.run_id)
    _report_failures(summary)


def _cost_line(wb, run_id: int) -> None:
    """A model run's tokens and cost so far (per label and per call: `workbench calls RUN`)."""
    from workbench.labeller.endpoints import is_offline

    run = wb.run_info(run_id)
    if is_offline(run.model):
        return
    cost = "unknown (litellm has no price for this model)" if run.cost is None else f"${run.cost:,.4f}"
    click.echo(
        f"tokens: {run.prompt_tokens or 0:,} prompt + {run.completion_tokens or 0:,} completion; cost {cost} "
        f"(per label: `workbench calls {run_id} --per-label`)"
    )


def _confirm_cost(wb, cohort, prompt_ref, model, labels, api_base, concurrency, batch=False) -> bool:
    """On a terminal, show the estimate and ask when it is above labeller.confirm_above; elsewhere the run
    refuses (NeedsConfirmation) unless --yes was given."""

    from workbench.services.model_path import NeedsConfirmation

    if not sys.stdin.isatty():
        return False
    try:
        wb.check_budget(cohort, prompt_ref, model, labels, None, batch, api_base=api_base, concurrency=concurrency)
        return False
    except NeedsConfirmation as exc:
        est = wb.estimate_run(
            cohort,
            prompt_ref=prompt_ref,
            model=model,
            labels=labels,
            api_base=api_base,
            concurrency=concurrency,
            batch=batch,
        )
        click.echo("\n".join(est.lines()), err=True)
        if not click.confirm(f"{exc}. Start the run anyway?", default=False, err=True):
            raise SystemExit(2) from None
        return True


def _run_or_resume(
    wb,
    bar,
    cohort,
    prompt_ref,
    model,
    api_base,
    labels,
    concurrency,
    resume,
    retry,
    new,
    *,
    estimate=False,
    yes=False,
    batch=False,
):
    """The run the options ask for: a resumption, a retry, or a new run (None when nothing changed since
    an identical run; an interrupted run of the same settings is resumed or refused, unless --new)."""
    jobs = dict(batch=batch, on_batch_status=lambda line: click.echo(line, err=True))  # a batch job's progress lines
    if resume is not None or retry is not None:
        return (
            wb.resume_run(resume, on_progress=bar, **jobs)
            if resume is not None
            else wb.retry_failed(retry, on_progress=bar, **jobs)
        )
    if not cohort:
        raise click.UsageError("--cohort is required for a new run")
    label_list = [x.strip() for x in labels.split(",")] if labels else None
    same = dict(prompt_ref=prompt_ref, model=model, labels=label_list, api_base=api_base, concurrency=concurrency)
    if estimate:  # no model call: calls after the cache, tokens, cost, wall time
        click.echo("\n".join(wb.estimate_run(cohort, batch=batch, **same).lines()))
        return None
    stopped = None if new else wb.interrupted_run(cohort, **same)
    if stopped is not None:
        hint = (
            f"run {stopped} of this prompt version, model and settings on {cohort} was interrupted: resume it with "
            f"`workbench run --resume {stopped}` (answered calls are kept), or start a fresh run with --new"
        )
        if not (sys.stdin.isatty() and click.confirm(f"{hint}\nresume run {stopped} now?", default=True, err=True)):
            from workbench.errors import UserError

            raise UserError(hint)
        return wb.resume_run(stopped, on_progress=bar, **jobs)
    unchanged = None if new else wb.unchanged_run(cohort, **same)
    if unchanged is not None:
        click.echo(
            f"nothing changed since run {unchanged} (same prompt version, model, parameters, endpoint, cohort "
            f"reports and labels; it finished without failures): see `workbench metrics {unchanged}`; "
            "use --new to label again anyway"
        )
        return None
    confirmed = yes or _confirm_cost(wb, cohort, prompt_ref, model, label_list, api_base, concurrency, batch)
    return wb.start_run(cohort, on_progress=bar, confirmed=confirmed, **jobs, **same)


_SIGTERM = {"received": False}


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """During a run SIGTERM stops it as Ctrl-C does: the run is marked interrupted and can be resumed."""

    def handler(signum, frame):
        _SIGTERM["received"] = True
        on_ctrl_c = signal.getsignal(signal.SIGINT)
        if not callable(on_ctrl_c) or on_ctrl_c is signal.default_int_handler:
            raise KeyboardInterrupt
        # inside the model engine asyncio's own Ctrl-C handler cancels the calls in order (an exception raised
        # here could land anywhere in the event loop and leave a half-made call behind)
        on_ctrl_c(signal.SIGINT, frame)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _report_failures(summary) -> None:
    """Distinct failure causes with counts and an example each; exit code 3 when the run is not complete."""
    if summary.stopped_reason:
        click.echo(summary.stopped_reason, err=True)
    if summary.failure_kinds:
        click.echo(f"failures by cause (details: `workbench disagreements {summary.run_id} --type failed`):", err=True)
        for line in summary.causes():
            click.echo(f"  {line}", err=True)
    elif summary.failures:
        click.echo(
            f"{summary.failures} failed (report, label) answer(s) remain from earlier attempts: "
            f"`workbench run --retry-failed {summary.run_id}`",
            err=True,
        )
    if summary.failures or summary.status != "finished":
        raise SystemExit(EXIT_INCOMPLETE)


def _progress_bar():
    """Run progress on stderr: a rich bar on a terminal, one line per 10% when the output is a log or pipe."""
    from workbench.terminal import progress_callback

    return progress_callback()


# ---------------------------------------------------------------- evaluation


@main.command()
@click.argument("run_id", type=int)
@click.option(
    "--ci",
    type=click.Choice(["wilson", "clopper-pearson"]),
    default="wilson",
    show_default=True,
    help="Interval method (Clopper-Pearson reproduces the Ran Score paper).",
)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option(
    "--zero-division",
    type=click.Choice(["undefined", "zero", "one", "exclude"]),
    default=None,
    help="Precision/recall/F1 with a zero denominator: undefined (marked *, left out of macro means), 0, 1, or left "
    "out (default: the study's zero_division, which every other view uses too).",
)
@click.option(
    "--full",
    is_flag=True,
    help="Every column (counts, specificity, NPV, kappa, intervals) instead of the paper's layout.",
)
@click.option("--previous", type=int, default=None, help="Another run to show the change in F1 against.")
@wide_option
@study_option
def metrics(wb, run_id, ci, fmt, zero_division, full, previous, wide):
    """Per-label metrics of a run against the reference, with 95% intervals."""
    zero_division = wb.macro_policy(zero_division)
    ev = wb.evaluate_run(run_id, ci=ci, zero_division=zero_division)
    prev = wb.evaluate_run(previous, ci=ci, zero_division=zero_division, n_resamples=0) if previous else None
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "run": run_id,
                    "ci": ci,
                    "zero_division": zero_division,
                    "excluded": ev.excluded,
                    "averages": ev.averages,
                    "macro_f1_bootstrap": ev.bootstrap,
                    "labels": json_records(ev.table.reset_index()),
                    "evidence": json_records(wb.evidence_check(run_id)),
                },
                indent=2,
                default=str,
            )
        )
        return
    table = ev.table.reset_index() if (full or wide or fmt != "table") else ev.paper_table(prev)
    if prev is not None and fmt != "table":  # scripts: the change in F1 as two more full-precision columns
        table["f1_previous"] = prev.table["f1"].reindex(table["label"]).to_numpy()
        table["delta_f1"] = table["f1"] - table["f1_previous"]
    echo_table(
        table,
        fmt,
        wide=wide,
        bootstrap=("f1",),
        undefined={
            c: "undefined: zero denominator (no positives on the side it divides by)"
            for c in ("precision", "recall", "f1", "specificity", "npv", "kappa")
        },
    )
    if fmt == "table":
        from workbench.terminal import EDGE_NOTE, at_edge

        a, b = ev.averages, ev.bootstrap
        click.echo("")
        if pd.isna(a["macro_f1"]):  # NaN: no pair could be scored (e.g. every call failed)
            say(
                f"macro F1 undefined: no (report, label) pair has both a labeller answer and a decided reference; failed "
                f"calls are left out, never counted as 0. {_finish_advice(wb, run_id)}"
            )
        else:
            say(
                f"macro F1 {a['macro_f1']:.3f} [{b['lo']:.3f}, {b['hi']:.3f}] (bootstrap over reports, {b['n_resamples']} "
                f"resamples, seed {b['seed']}); macro accuracy {a['macro_accuracy']:.3f}; micro F1 {a['micro_f1']:.3f}"
            )
            if at_edge(a["macro_f1"], b["lo"], b["hi"]):
                say(f"macro F1: {EDGE_NOTE}")
        say(f"macro F1: {ev.macro.describe()}")
        say(f"intervals: {ci}; * = undefined (no positives on either side), policy: {zero_division}")
        say("left out: " + "; ".join(f"{k}: {v}" for k, v in ev.excluded.items()))
        unfound = _evidence_line(wb.evidence_check(run_id))
        if unfound:
            say(unfound)


def _evidence_line(check) -> str:
    """Evidence quoted but not in the report, per label ("" when every quote was found)."""
    missing = check[check["evidence_not_in_report"] > 0]
    if missing.empty:
        return ""
    parts = [f"{r.label} {r.evidence_not_in_report} of {r.evidence_quoted}" for r in missing.itertuples(index=False)]
    return (
        "evidence not in the report (answers whose quote is not in the report text, of those quoting any): "
        + "; ".join(parts)
    )


@main.command()
@click.argument("run_a", type=int)
@click.argument("run_b", type=int)
@click.option("--mid-p", is_flag=True, help="Mid-p McNemar instead of the exact test.")
@click.option("--cases/--no-cases", default=True, show_default=True, help="List the fixed and broken cases.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--all", "show_all", is_flag=True, help="Also the labels on which the two runs agree on every report.")
@wide_option
@study_option
def compare(wb, run_a, run_b, mid_p, cases, fmt, show_all, wide):
    """Compare two runs on the same cohort: per-label change, McNemar with Holm, fixed and broken cases."""
    result = wb.compare_runs(run_a, run_b, mid_p=mid_p)
    table = result.table.reset_index()
    cols = [
        "label",
        "n",
        "accuracy_a",
        "accuracy_b",
        "delta_accuracy",
        "f1_a",
        "f1_b",
        "delta_f1",
        "b",
        "c",
        "p_value",
        "p_holm",
        "verdict",
        "verdict_note",
        "reports_needed",
        "reports_note",
    ]
    if fmt != "table":
        echo_table(table[cols], fmt)
        return
    changed = table[(table["b"] + table["c"]) > 0]
    shown = table if show_all else changed
    attrs = result.table.attrs
    shown = shown.assign(
        more_reports=[
            _needed_text(v, note) for v, note in zip(shown["reports_needed"], shown["reports_note"], strict=False)
        ]
    )
    if len(shown):
        echo_table(
            shown,
            wide=wide,
            columns=["label", "f1_a", "f1_b", "b", "c", "p_holm", "verdict", "more_reports", "verdict_note"],
            undefined={
                c: "F1 undefined: no positive in the reference or the run on these reports"
                for c in ("f1_a", "f1_b", "delta_f1")
            },
        )
    hidden = len(table) - len(shown)
    if len(shown):
        click.echo("")
    say(
        f"{hidden} label(s) with no change hidden (the runs agree on every report; --all shows them)"
        if hidden
        else "every label shown"
    )
    say(
        f"b = right in run {run_a}, wrong in run {run_b} (broken); c = wrong in run {run_a}, right in run {run_b} "
        f"(fixed); p_holm = exact McNemar{' (mid-p)' if mid_p else ''}, Holm-adjusted over {len(table)} labels; "
        "verdict 'undecided' = fewer than 10 changed cases."
    )
    say(
        f"more_reports = further paired reports for 80% power to call the change significant (exact McNemar "
        f"at alpha {attrs.get('alpha', 0.05)}/{len(table)}, Holm's strictest step) if the observed rates of fixed "
        "and broken cases held; 0 = the cohort is already large enough."
    )
    say(f"macro F1 {result.macro_f1_a:.3f} -> {result.macro_f1_b:.3f} ({result.macro_b.describe()})")
    _drift_line(wb, [run_a, run_b])
    say("left out: " + "; ".join(f"{k}: {v}" for k, v in result.excluded.items()))
    if cases and len(result.cases):
        click.echo("")
        echo_table(result.cases, title="fixed and broken cases", wide=wide)

    _noise_lines(wb, run_a, run_b, result.table)


def _noise_lines(wb, run_a: int, run_b: int, table) -> None:
    """Beside fixed and broken: how many changes noise alone would explain at the measured noise rate."""
    for line in wb.comparison_noise(run_a, run_b, table):
        say(line)


def _needed_text(value: float, note: str) -> str:
    """The power figure as a person reads it: a count, or why there is none."""
    if not pd.isna(value):
        return f"{int(value):,}"
    return "no difference seen" if "no difference" in str(note) else str(note)


@main.command()
@click.option("--cohort", required=True, help="Cohort whose runs to list.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--per-label", is_flag=True, help="Include every label's accuracy and F1.")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also runs with failed or missing answers (marked in the result column; left out by default).",
)
@wide_flag
@study_option
def history(wb, cohort, fmt, per_label, show_all):
    """Iteration history: macro accuracy and F1 of every finished run on a cohort, in prompt-version order."""
    frame = wb.iteration_history(cohort, include_unfinished=show_all)
    if not per_label and len(frame):
        frame = frame[[c for c in frame.columns if ":" not in c]]
    stopped = wb.interrupted_runs(cohort)
    unfinished = [] if show_all else _unfinished_runs(wb, cohort)
    if fmt == "table" and not len(frame):
        click.echo(f"no finished run on cohort {cohort!r} yet: workbench run --cohort {cohort}")
        _unfinished_lines(wb, unfinished)
        _interrupted_lines(stopped)
        return
    shown = frame.drop(columns=["macro_labels"] + ([] if show_all else ["result"]), errors="ignore")
    echo_table(shown if fmt == "table" else frame, fmt, wide=True if per_label else None)
    if fmt == "table":
        for text in frame.attrs.get("macro_labels", []):
            say(f"macro F1: {text}")
        _drift_line(wb, list(frame["run"]) if len(frame) else [])
        _unfinished_lines(wb, unfinished)
        _interrupted_lines(stopped)


def _finish_advice(wb, run_id: int) -> str:
    """How to finish a run that lacks answers: a stopped batch job is polled again (--resume), never re-sent."""
    pending = wb.pending_batch(run_id)
    if pending is not None:
        return (
            f"Its batch {pending['batch_id']} is still with the provider: `workbench run --resume {run_id}` polls it "
            "and stores its answers (nothing is sent again)."
        )
    return f"Fix the cause, then `workbench run --retry-failed {run_id}`."


def _unfinished_runs(wb, cohort: str) -> list:
    """Runs left out of the history because answers failed or are missing."""
    runs = wb.run_results(cohort)
    return list(runs[runs["result"] != "finished"].sort_values("id").itertuples(index=False))


def _unfinished_lines(wb, runs: list) -> None:
    """Runs with failed answers, apart from the results: each with what it got and how to finish it."""
    if not runs:
        return
    click.echo("")
    say("runs with failed or missing answers (not results; `--all` lists them in the table):")
    for row in runs:
        got = "no answer at all" if row.result == "failed" else f"{row.answered} answer(s), {row.failures} failed"
        click.echo(
            wrap_item(
                f"run {row.id} (prompt {row.prompt_commit[:8]}, {row.model}): {row.result}, {got}; see why with "
                f"`workbench disagreements {row.id} --type failed`. {_finish_advice(wb, int(row.id))}"
            )
        )


def _drift_line(wb, run_ids: list[int]) -> None:
    """Say so when the reference changed under these runs since they were scored, and which figures moved."""
    from workbench.services.evaluation import drift_text

    text = drift_text(wb.reference_drift([int(r) for r in run_ids]))
    if text:
        click.echo("")
        say(text)


def _interrupted_lines(stopped) -> None:
    """Interrupted runs, apart from the results: each with how far it got and how to finish it."""
    if not len(stopped):
        return
    click.echo("")
    say("interrupted runs (not results: their figures would cover only the reports labelled before the stop):")
    for row in stopped.itertuples(index=False):
        click.echo(
            wrap_item(
                f"run {row.id} (prompt {row.prompt_commit[:8]}, {row.model}): resume with "
                f"`workbench run --resume {row.id}`"
            )
        )


@main.command()
@click.argument("run_id", type=int)
@click.option("--label", default=None, help="Only this label.")
@click.option(
    "--type",
    "kind",
    type=click.Choice(["FP", "FN", "failed", "attribute"]),
    default=None,
    help="Only this kind (attribute: a matched finding whose side, severity or change differs).",
)
@click.option("--category", default=None, help="Only cases with a note of this error category.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option(
    "--text/--no-text",
    "show_text",
    default=None,
    help="Show each report with the evidence and look-for matches marked (default: on with --label).",
)
@wide_option
@study_option
def disagreements(wb, run_id, label, kind, category, fmt, show_text, wide):
    """The disagreement queue of a run: where the labeller and the reference differ."""
    frame = wb.disagreements(run_id, label=label, kind=kind, category=category)
    cols = [
        "report_id",
        "label",
        "type",
        "reference",
        "prediction",
        "votes",
        "evidence",
        "status",
        "notes",
        "categories",
    ]
    if (frame["type"] == "attribute").any():  # which attribute differs and the category a note on it takes
        cols += ["detail", "attribute_category"]
    if fmt != "table":
        echo_table(frame[cols], fmt)
        return
    if show_text is None:
        show_text = label is not None
    if show_text:
        _disagreement_texts(wb, run_id, frame)
    elif len(frame):
        echo_table(
            frame[cols],
            wide=wide,
            columns=[c for c in cols if c != "evidence"],
            undefined={"prediction": "no answer (the call failed)"},
        )
    click.echo("")
    say(
        f"{len(frame)} disagreement(s)"
        + (
            ""
            if show_text or not len(frame)
            else f"; see the reports with: workbench disagreements {run_id} --label LABEL"
        )
    )
    if len(frame):
        click.echo(
            f"note one: workbench error-note REPORT LABEL --run {run_id} \\\n"
            "    --category CATEGORY --significance SIGNIFICANCE --text 'what went wrong'"
        )
        say(
            "categories: "
            + ", ".join(wb.config.error_categories)
            + "; significance: changes management, does not change management, unsure"
        )


KIND_WORDS = {"FN": "missed", "FP": "false alarm", "failed": "no answer", "attribute": "attribute differs"}


def _disagreement_texts(wb, run_id: int, frame: pd.DataFrame) -> None:
    """Each disagreement with its report: labeller evidence in >>...<<, the prompt's look-for phrases in [...]."""
    from workbench.terminal import emphasise, wrap

    commit = wb.run_info(run_id).prompt_commit
    phrases: dict[str, list[str]] = {}
    for row in frame.itertuples(index=False):
        if row.label not in phrases:
            phrases[row.label] = (
                list(wb.label_prompt(row.label, commit).look_for) if row.label in wb.vocab.asked_ids else []
            )
        text, found, _ = emphasise(wb.report_text(row.report_id).text, row.evidence or "", phrases[row.label])
        value = "no answer" if pd.isna(row.prediction) else int(row.prediction)
        reference = "waiting for adjudication" if pd.isna(row.reference) else int(row.reference)
        click.echo("")
        say(
            f"{row.report_id}  {row.label}  {row.type} ({KIND_WORDS.get(row.type, row.type)}): reference "
            f"{reference} ({row.votes} readers), labeller {value}"
            + (f"; {row.notes} note(s): {row.categories}" if row.notes else "")
        )
        click.echo(wrap(text))
        if row.evidence and not found:
            click.echo(wrap(f"evidence (not found in the report): {row.evidence}"))
        elif not row.evidence:
            click.echo(wrap("evidence: none quoted by the labeller"))
        click.echo(
            f"  workbench error-note {row.report_id} {row.label} --run {run_id} \\\n"
            "      --category CATEGORY --significance SIGNIFICANCE --text '...'"
        )
    if len(frame):
        click.echo("")
        say(">>...<< = the labeller's evidence; [...] = a look-for phrase of the prompt version the run used")


@main.command("error-note")
@click.argument("report_id")
@click.argument("label")
@click.option("--category", required=True, help="Error category (see error_categories in workbench.yaml).")
@click.option(
    "--significance", required=True, type=click.Choice(["changes management", "does not change management", "unsure"])
)
@click.option("--text", default="", help="What went wrong, in your words.")
@click.option("--reference-wrong", is_flag=True, help="The reference label is wrong: opens an adjudication item.")
@click.option("--run", "run_id", type=int, default=None, help="The run in which you saw it.")
@study_option
def note(wb, report_id, label, category, significance, text, reference_wrong, run_id):
    """Attach an error note to a (report, label) disagreement."""
    note_id = wb.add_note(report_id, label, category, significance, text, reference_wrong, run_id)
    click.echo(f"note {note_id} added" + (" and the item sent to adjudication" if reference_wrong else ""))


@main.command("error-notes")
@click.option("--run", "run_id", type=int, default=None, help="Only notes on this run's disagreements.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def notes_cmd(wb, run_id, fmt):
    """Counts of error notes by label and category (all, or on one run's disagreements)."""
    counts = wb.note_counts(run_id)
    if fmt != "table":
        echo_table(counts, fmt)
    elif len(counts):  # one row per (label, category): categories as columns would not fit
        long = counts.melt(id_vars="label", var_name="category", value_name="notes")
        echo_table(long[long["notes"] > 0].sort_values(["label", "notes"], ascending=[True, False]))
    else:
        click.echo("no error notes yet" + (f" on run {run_id}'s disagreements" if run_id is not None else ""))


hidden_alias(main, note, "note")  # the names before issue 30: error notes are not the readers' comments
hidden_alias(main, notes_cmd, "notes")


@main.command("ceiling")
@click.argument("run_id", type=int)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_option
@study_option
def ceiling(wb, run_id, fmt, wide):
    """Human ceiling: labeller kappa beside the readers' Fleiss kappa; accuracy on unanimous vs split items."""
    table = _with_label_column(wb.human_ceiling(run_id))
    if fmt != "table":
        echo_table(table, fmt)
        return
    notes = [n for n in dict.fromkeys(table.get("fleiss_note", pd.Series(dtype=str)).fillna("")) if n]
    short = {
        "readers_fleiss_kappa": "readers_kappa",
        "mean_reader_accuracy": "readers_acc",
        "labeller_accuracy": "labeller_acc",
        "accuracy_unanimous": "acc_unanimous",
        "accuracy_split": "acc_split",
    }
    scope = wb.agreement_scope(wb.run_cohort(run_id))  # the run's cohort's sample, not every cohort's
    say(scope) if scope else None
    echo_table(
        table.drop(columns=["fleiss_note"], errors="ignore").rename(columns=short),
        wide=wide,
        columns=["label", "labeller_kappa", "readers_kappa", "acc_unanimous", "acc_split", "n_split"],
        undefined={
            "readers_kappa": "; ".join(notes) or "readers' kappa undefined",
            "labeller_kappa": "labeller kappa undefined (one value everywhere)",
            "acc_unanimous": "no item of this kind",
            "acc_split": "no item of this kind",
        },
    )
    say(
        "readers_kappa = the readers' Fleiss kappa (the human ceiling); acc_unanimous / acc_split = the labeller's "
        "accuracy on items every reader agreed on / on split votes (n_split of them). --wide adds the readers' mean "
        "accuracy and the labeller's overall accuracy."
    )


# ---------------------------------------------------------------- prompts


@main.group()
def prompts():
    """Prompt versions: history, differences, revert, policy table, few-shot curation."""


@prompts.command("history")
@click.option("--label", default=None, help="Only versions that changed this label.")
@wide_flag
@study_option
def prompts_history(wb, label):
    """Versions of the prompt set, newest first."""
    frame = wb.prompt_history(label)[["short", "when", "author", "message", "labels", "frozen as"]]
    frame["labels"] = [x if x.count(",") < 3 else f"{x.count(',') + 1} labels" for x in frame["labels"]]
    echo_table(frame)


@prompts.command("show")
@click.argument("label")
@click.option("--prompt", "ref", default=None, help="Version (default: latest).")
@click.option("--draft", is_flag=True, help="Your draft (or the uncommitted edit of the file) instead of a version.")
@study_option
def prompts_show(wb, label, ref, draft):
    """Print one label's prompt file at a version, or your draft of it."""
    from workbench.services.prompting import label_yaml

    if draft and ref:
        raise click.UsageError("--draft and --prompt name two different things: give one")
    click.echo(label_yaml(wb.pending_prompt(label) if draft else wb.label_prompt(label, ref)))


@prompts.command("diff")
@click.argument("label")
@click.argument("ref_a")
@click.argument("ref_b", required=False)
@study_option
def prompts_diff(wb, label, ref_a, ref_b):
    """Difference of one label between two versions (unified text and fields); `draft` names your draft,
    e.g. `workbench prompts diff LABEL HEAD draft`."""
    diff = wb.prompt_diff(label, ref_a, ref_b)
    click.echo(diff.unified or "(no difference)")
    click.echo(json.dumps(diff.fields, indent=2, ensure_ascii=False))


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
@click.option(
    "--prompt", "ref", default=None, help="Version (default: the latest, with your drafts and uncommitted edits)."
)
@wide_option
@study_option
def prompts_policy(wb, ref, wide):
    """Every label's hedge and temporal policy side by side, with inconsistencies flagged (between related labels,
    and inside a label: exclusions, look-for phrases and examples against its policy, look-for phrases naming no
    finding of the label)."""
    table = wb.policy_table(ref).replace({"positive": "pos", "negative": "neg"})
    table["label"] = [f"{lab} *" if draft else lab for lab, draft in zip(table["label"], table["draft"], strict=True)]
    echo_table(
        table.drop(columns="draft"),
        wide=wide,
        columns=["label", "hedged", "resolved", "stable", "improving", "prior", "look_for", "examples"],
    )
    say(
        'pos/neg = what hedged wording ("cannot exclude") and temporal wording (resolved, stable, improving, prior) '
        "count as; look_for / examples = how many phrases and few-shot examples. --wide adds exclusions."
        + (" * = your draft, not saved yet." if table["draft"].any() else "")
    )
    findings = wb.policy_conflicts(ref)
    click.echo(f"\n{len(findings)} finding(s):")
    for f in findings:
        click.echo(wrap_item(f"[{f.kind}] {f.message}"))


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
    click.echo(
        f"draft of {lp.label} now has {len(lp.examples)} example(s); save it with `workbench prompts save {lp.label} -m MESSAGE`"
    )
    for w in warnings:
        click.echo(f"warning: {w}")


@prompts.command("save")
@click.argument("labels", nargs=-1)
@click.option("-m", "--message", required=True, help="What changed and why.")
@study_option
def prompts_save(wb, labels, message):
    """Save drafts and uncommitted edits of the prompt folder (the given labels, or all) as one new version.

    `_task` names the shared task file (_task.yaml: the template and the attribute cue lists)."""
    before = wb.prompt_commit()
    commit, saved = wb.save_labels(list(labels) or None, message)
    click.echo(f"saved version {commit[:8]} ({', '.join(saved)})")
    made = wb.contradictions_saved(before, commit, saved)
    for f in made:
        click.echo(wrap_item(f"warning: [{f.kind}] {f.message}"), err=True)
    if made:
        click.echo(
            f"{len(made)} contradiction(s) saved: an LLM cannot follow both sides; `workbench prompts policy` lists "
            "them (optimise and accept refuse such a change)",
            err=True,
        )


@prompts.command("status")
@wide_flag
@study_option
def prompts_status(wb):
    """List your drafts and the uncommitted edits in the study's prompt folder, with any problem."""
    table = wb.prompt_status()
    if not len(table):
        click.echo(f"nothing to save: no drafts, and {wb.paths.prompts} matches the latest version")
        return
    echo_table(table)
    click.echo("\nsave with: workbench prompts save [LABEL ...] -m MESSAGE")


@prompts.command("edit")
@click.argument("label")
@click.option(
    "--attempts",
    type=int,
    default=10,
    show_default=True,
    help="Re-open the editor at most this often on an invalid file.",
)
@study_option
def prompts_edit(wb, label, attempts):
    """Open $EDITOR on your draft of a label (or its uncommitted file), validated on close."""
    from workbench.core.prompts import PromptError

    label = wb.asked_label(label)
    original, target = wb.editable_text(label)
    text, error = original, None
    for _ in range(max(attempts, 1)):
        shown = text if error is None else _with_error(text, error)
        edited = click.edit(shown, extension=".yaml", require_save=True)
        if edited is None:  # closed without saving
            break
        text = _without_error(edited)
        try:
            wb.store_edited_text(label, text, target)
        except (PromptError, StudyError) as exc:
            error = str(exc)
            continue
        where = "your draft" if target == "draft" else f"{wb.paths.prompts / (label + '.yaml')}"
        click.echo(f"{label}: saved to {where}; commit it with `workbench prompts save {label} -m MESSAGE`")
        return
    if text == original:
        click.echo(f"{label}: nothing changed")
        return
    kept = _keep_rejected(wb, label, text)
    raise click.ClickException(
        f"{label}: not saved ({error or 'editor closed without saving'}); your text is kept in {kept}"
    )


ERROR_MARK = "# workbench: "


def _with_error(text: str, error: str) -> str:
    """The buffer re-opened with the validation error on top (removed again on save)."""
    lines = [
        f"{ERROR_MARK}{line}" for line in ["not saved: " + error, "fix it and save, or quit without saving to stop"]
    ]
    return "\n".join(lines) + "\n" + text


def _without_error(text: str) -> str:
    """Drop the lines _with_error added."""
    return "".join(line for line in text.splitlines(True) if not line.startswith(ERROR_MARK))


def _keep_rejected(wb, label: str, text: str) -> Path:
    """Write an edit that could not be saved next to the study, so it is never lost."""

    folder = wb.root / "rejected-edits"
    folder.mkdir(exist_ok=True)
    path = folder / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@prompts.command("set")
@click.argument("label")
@click.argument("field")
@click.argument("value", required=False)
@click.option(
    "--add", "add", multiple=True, help="List fields (look_for, do_not_label_when): add this item; repeatable."
)
@click.option("--remove", "remove", multiple=True, help="List fields: remove this item; repeatable.")
@study_option
def prompts_set(wb, label, field, value, add, remove):
    """Change one field of your draft of a label, e.g. `prompts set pneumonia hedged negative`."""
    lp, target = wb.set_prompt_field(label, field, value, tuple(add), tuple(remove))
    where = "draft" if target == "draft" else "uncommitted file"
    click.echo(
        f"{lp.label}: {field} updated in your {where}; commit it with `workbench prompts save {lp.label} -m MESSAGE`"
    )
    latest = wb.prompt_set().labels.get(lp.label)  # a label new to the prompt set has no version to compare with
    for f in wb.prompts.new_contradictions(latest, lp) if latest else []:
        click.echo(wrap_item(f"warning: your {where} now contradicts itself: [{f.kind}] {f.message}"), err=True)


@prompts.command("discard")
@click.argument("label")
@study_option
def prompts_discard(wb, label):
    """Throw away your draft of a label (the prompt folder's files are left alone)."""
    wb.discard_draft(label)
    click.echo(f"{label}: draft discarded")


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
@click.option(
    "--cohort",
    default=None,
    help="Cohort whose run justifies the freeze (default: the study's dev_cohort, else its only cohort).",
)
@click.option("--ci", type=click.Choice(["wilson", "clopper-pearson"]), default="wilson", show_default=True)
@click.option(
    "--sign",
    "sign_key",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Sign the bundle with this Ed25519 private key (from `workbench bundle keygen`).",
)
@study_option
def freeze(wb, prompt_ref, name, cohort, ci, sign_key):
    """Freeze a prompt version into a bundle (canonical JSON + YAML) with a sha256."""
    from workbench import bundle as bundle_mod

    if sign_key:
        bundle_mod._load_private(Path(sign_key))  # a bad key is refused before anything is frozen
    info = wb.freeze(name, prompt_ref, cohort=cohort, ci=ci)
    click.echo(
        f"froze {name}: sha256 {info.sha256}\n  {info.json}\n  {info.yaml}\n  prompt {info.commit[:8]}, run {info.run}"
    )
    for note in info.notes:
        click.echo(f"note: {note}", err=True)
    if sign_key:
        click.echo(f"  signed with key {bundle_mod.sign_bundle(info.json, Path(sign_key))}")


@main.group("bundle")
def bundle_group():
    """Team signing keys for bundles (Ed25519): a signature says who froze a bundle, the sha256 only that it is intact."""


@bundle_group.command("keygen")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False),
    help="Private key file to create (owner-only); the public key is written beside it as OUT.pub.",
)
def bundle_keygen(out):
    """Create a team signing key pair; keep the private key secret, share the .pub file."""
    from workbench.bundle import _load_public, _raw_public, generate_key, key_id

    private, public = generate_key(Path(out))
    click.echo(
        f"private key: {private} (keep it secret)\npublic key: {public} (share it)\n"
        f"key id: {key_id(_raw_public(_load_public(public)))}"
    )


@bundle_group.command("sign")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False))
@click.option("--key", "key", required=True, type=click.Path(exists=True, dir_okay=False), help="Ed25519 private key.")
def bundle_sign(bundle, key):
    """Sign an existing bundle (its hash must verify first)."""
    from workbench.bundle import sign_bundle

    click.echo(f"signed {bundle} with key {sign_bundle(Path(bundle), Path(key))}")


@main.command()
@click.argument("bundle")
@click.option(
    "--public-key",
    "public_key",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Also check the bundle's Ed25519 signature with this team public key (who made it).",
)
@click.option(
    "--study",
    "study",
    type=click.Path(file_okay=False),
    default=None,
    help="Also check the bundle against this study: its annotated tag and its audit trail (a bundle name "
    "is looked up in its bundles/, else in $WORKBENCH_STUDY's).",
)
def verify(bundle, public_key, study):
    """Check a bundle (a path, or a name in the study's bundles/): sha256 over its exact content (integrity); optionally its signature and its study."""
    from workbench.bundle import verify_bundle, verify_signature

    bundle = find_bundle(bundle, study or os.environ.get("WORKBENCH_STUDY"))
    ok, recorded, actual = verify_bundle(Path(bundle))
    if ok:
        click.echo(f"ok: {bundle} sha256 {actual}")
    else:
        click.echo(f"MODIFIED: recorded sha256 {recorded} but content hashes to {actual}", err=True)
        raise SystemExit(1)
    failed = False
    if public_key:
        signed, message = verify_signature(Path(bundle), Path(public_key))
        click.echo(f"{'ok' if signed else 'NOT VERIFIED'}: {message}", err=not signed)
        failed |= not signed
    if study:
        from workbench.services import Workbench

        wb = Workbench(resolve_study_path(study), actor=_cli_actor())
        wb.migrate()
        for check in wb.check_bundle(Path(bundle)):
            click.echo(
                f"{'ok' if check['ok'] else 'MISMATCH'}: {check['check']}: {check['detail']}", err=not check["ok"]
            )
            failed |= not check["ok"]
    if failed:
        raise SystemExit(1)


def find_bundle(name: str, study: str | None) -> Path:
    """A bundle path or name, looked up in the current folder, then in the study's bundles/ folder."""
    root = resolve_study_path(study)
    tried = []
    for folder in (Path.cwd(), root, root / "bundles"):
        for candidate in (folder / name, folder / f"{name}.json"):
            if candidate.is_file():
                return candidate
            tried.append(str(candidate))
    raise click.UsageError(f"no bundle {name!r}; looked for " + ", ".join(dict.fromkeys(tried)))


SCORE_SHORT = {
    "ran_score_lo": "ci_lo",
    "ran_score_hi": "ci_hi",
    "invented_findings_fp": "invented_fp",
    "missed_findings_fn": "missed_fn",
    "failed_generated": "failed_gen",
    "failed_reference": "failed_ref",
}
SCORE_COLUMNS = [
    "generator",
    "reports",
    "macro_f1",
    "ran_score",
    "ci_lo",
    "ci_hi",
    "invented_fp",
    "missed_fn",
    "failed_gen",
    "failed_ref",
]


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


def _allow_options(func):
    """--api-base, --allow-endpoint (repeatable) and --study for the commands that label texts with a bundle."""
    func = click.option(
        "--study",
        "study",
        type=click.Path(file_okay=False),
        envvar="WORKBENCH_STUDY",
        default=None,
        help="Study whose database caches extractions and whose allowed endpoints apply (optional).",
    )(func)
    func = click.option(
        "--allow-endpoint",
        "allow",
        multiple=True,
        metavar="URL",
        help="Also allow report text to go to this endpoint (URL prefix) for this command; repeatable. "
        "Without it text goes only to the bundle's own local endpoint (or --study's allowed list).",
    )(func)
    func = click.option(
        "--api-base",
        default=None,
        help="Server URL for --model (an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1).",
    )(func)
    return click.option(
        "--model", default=None, help="Label with another model than the bundle's (recorded in the output)."
    )(func)


def _bundle_study(study):
    """The Workbench of --study when it names a study folder, else None."""
    if study and (Path(study) / "workbench.yaml").exists():
        from workbench.services import Workbench

        wb = Workbench(resolve_study_path(study), actor=_cli_actor())
        wb.migrate()
        return wb
    return None


@main.command()
@click.option(
    "--bundle", "bundle_path", required=True, help="Frozen bundle: a path, or a name in the study's bundles/."
)
@click.option(
    "--reference",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Reference reports (id + text or findings/impression).",
)
@click.option(
    "--generated",
    multiple=True,
    required=True,
    help="NAME=FILE of generated reports with the same ids; repeat for several generators.",
)
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Folder for CSV and JSON outputs.")
@click.option(
    "--zero-division",
    type=click.Choice(["zero", "one", "exclude"]),
    default="zero",
    show_default=True,
    help="F1 of a label with no positive on either side: 0 (as the released Ran Score script), 1, or left out.",
)
@click.option(
    "--resamples", type=int, default=1000, show_default=True, help="Bootstrap resamples for the Ran Score interval."
)
@click.option(
    "--max-failed-share",
    type=click.FloatRange(0, 1),
    default=0.10,
    show_default=True,
    help="A generator with more than this share of failed (report, label) extractions gets no score (exit code 3).",
)
@click.option(
    "--batch",
    "batch",
    is_flag=True,
    help="Send the extractions as provider batch jobs (OpenAI-compatible /v1/batches or Azure OpenAI's); with --study a restart resumes them.",
)
@_allow_options
@wide_flag
def score(
    bundle_path,
    reference,
    generated,
    model,
    api_base,
    allow,
    study,
    out,
    zero_division,
    resamples,
    max_failed_share,
    batch,
):
    """Score generated reports against reference reports with a frozen bundle (Ran Score)."""
    from workbench import scoring
    from workbench.terminal import EDGE_NOTE, at_edge

    bundle_path = find_bundle(bundle_path, study)
    gens = _generated(generated)
    wb = _bundle_study(study)
    common = dict(
        model=model,
        out=Path(out) if out else None,
        zero_division=zero_division,
        n_resamples=resamples,
        api_base=api_base,
        allow_endpoints=list(allow),
        max_failed_share=max_failed_share,
    )
    status = lambda line: click.echo(line, err=True)  # noqa: E731 (a batch job's progress lines)
    if wb is not None:
        result = wb.score_generated(
            Path(bundle_path), Path(reference), gens, batch=batch, on_batch_status=status, **common
        )
    else:
        from workbench.labeller import batch as batch_mod

        engine = batch_mod.BatchEngine(batch_mod.MemoryJournal(), on_status=status) if batch else None
        result = scoring.score(Path(bundle_path), Path(reference), gens, engine=engine, **common)
    click.echo(
        f"bundle {result.bundle_name} ({result.bundle_sha[:12]}), model {result.model}; report text went to {result.endpoint}; "
        f"reference: {result.reference_stats['extracted']} extracted, {result.reference_stats['reused']} reused from cache"
    )
    echo_table(result.summary().rename(columns=SCORE_SHORT), columns=SCORE_COLUMNS)
    for name, g in result.generators.items():
        r = g.ran_score
        click.echo("")
        if r.no_score:  # whole lines, never wrapped into a table title: scripts and people grep them
            click.echo(f"== {name}: NO SCORE: {r.no_score} ==")
            title = f"{name}: per label (no score)"
        else:
            left_out = (
                ""
                if r.pairs_scored == r.pairs_total
                else (
                    f" over {r.pairs_scored} of {r.pairs_total} (report, label) pairs: {r.failed_generated} generated and "
                    f"{r.failed_reference} reference extractions failed and are left out"
                )
            )
            click.echo(f"== {name}: Ran Score {r.estimate:.3f} [{r.lo:.3f}, {r.hi:.3f}]{left_out} ==")
            if at_edge(r.estimate, r.lo, r.hi):
                say(
                    f"Ran Score: {EDGE_NOTE}"
                    + ("; this interval was widened to contain the estimate" if "widened" in r.interval else "")
                )
            title = f"{name}: per label"
        echo_table(
            g.per_label.reset_index(),
            title=title,
            columns=[
                "label",
                "support",
                "tp",
                "fp",
                "fn",
                "precision",
                "recall",
                "f1",
                "failed_generated",
                "failed_reference",
            ],
        )
        _echo_attribute_scores(name, g)
    click.echo("")
    say(f"zero division: {scoring.POLICY_TEXT[zero_division]}")
    say(scoring.ENTITY_F1_RULE)
    if out:
        click.echo(f"wrote CSV and JSON to {out}")
    if result.unscored():
        for name, why in result.unscored().items():
            click.echo(f"error: no score for {name}: {why}", err=True)
        raise SystemExit(EXIT_INCOMPLETE)


@main.command()
@click.option(
    "--bundle", "bundle_path", required=True, help="Frozen bundle: a path, or a name in the study's bundles/."
)
@click.option(
    "--pairs",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="CSV: pair_id,kind(paraphrase|significant),label,text_a,text_b (default: the shipped pairs that fit "
    "the bundle's vocabulary).",
)
@_allow_options
@wide_flag
def robustness(bundle_path, pairs, model, api_base, allow, study):
    """Share of harmless paraphrases labelled the same and significant changes detected, per label."""
    from workbench import scoring

    bundle_path = find_bundle(bundle_path, study)
    wb = _bundle_study(study)
    allowed = [*(wb.config.allowed_endpoints if wb is not None else []), *allow]
    result = scoring.robustness(
        Path(bundle_path), Path(pairs) if pairs else None, model=model, api_base=api_base, allow_endpoints=allowed
    )
    click.echo(f"pairs: {result.source}; report text went to {result.endpoint}")
    echo_table(result.per_kind)
    click.echo("")
    echo_table(result.per_label)


# ---------------------------------------------------------------- teams


@main.group()
def user():
    """Local accounts and roles (reader, adjudicator, prompt_engineer, admin)."""


def password_options(func):
    """--password-stdin, and the refused --password VALUE (kept hidden so old scripts get an explanation)."""
    func = click.option(
        "--password-stdin",
        is_flag=True,
        help="Read the password from the first line of stdin (scripts) instead of a hidden prompt.",
    )(func)
    return click.option(
        "--password",
        default=None,
        hidden=True,
        expose_value=False,
        callback=_refuse_password_value,
        help="Refused: see --password-stdin.",
    )(func)


def _refuse_password_value(ctx, param, value) -> None:
    """A password given as an option shows in `ps` and the shell history: refuse it (before any sign-in) and say what to do."""
    if value is not None:
        raise click.UsageError(
            "--password VALUE is no longer accepted: a password on the command line shows in `ps` "
            "and the shell history. Type it at the hidden prompt, or pipe it with --password-stdin "
            "(e.g. `printf '%s\\n' \"$PW\" | workbench user add ... --password-stdin`)"
        )


def _stdin_line(what: str) -> str:
    """One line of stdin (the newline removed); an empty stream is an error."""
    line = sys.stdin.readline()
    if not line:
        raise click.UsageError(f"--password-stdin: no {what} on stdin (expected one line)")
    return line.rstrip("\r\n")


def _new_password(from_stdin: bool, what: str) -> str:
    """A new password: from stdin, or typed twice at a hidden prompt."""
    if from_stdin:
        return _stdin_line(what)
    return click.prompt(what, hide_input=True, confirmation_prompt=True, err=True)


@user.command("add")
@click.argument("user_id")
@click.option("--role", required=True, type=click.Choice(["reader", "adjudicator", "prompt_engineer", "admin"]))
@click.option("--name", default="", help="Full name (used as the Git author of prompt commits).")
@click.option("--email", default="", help="E-mail (Git author e-mail).")
@password_options
@click.option("--no-password", is_flag=True, help="No local password (sign-in through OIDC only).")
@study_option
def user_add(wb, user_id, role, name, email, password_stdin, no_password):
    """Create an account; the first account must be an admin. The password is typed at a hidden prompt
    (twice) or read from the first line of stdin with --password-stdin, never given as an option."""
    password = None if no_password else _new_password(password_stdin, "password")
    wb.add_user(user_id, role, password, name=name, email=email)
    click.echo(f"added {user_id} ({role})")


@user.command("passwd")
@click.argument("user_id")
@password_options
@study_option
def user_passwd(wb, user_id, password_stdin):
    """Change a password (yours: the current one first; an admin: anyone's). Ends the account's tokens.

    With --password-stdin the first line of stdin is the new password; for your own account the first
    line is the current password and the second the new one.
    """
    actor = wb.current_actor()
    own = actor.account and actor.user == user_id
    current = None
    if own:
        current = (
            _stdin_line("current password")
            if password_stdin
            else click.prompt("current password", hide_input=True, err=True)
        )
    wb.set_password(user_id, _new_password(password_stdin, "new password"), current=current)
    click.echo(
        f"password of {user_id} changed; its command-line tokens are revoked (make a new one with `workbench user token {user_id}`)"
    )


@user.command("list")
@wide_flag
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
@click.option(
    "--validation", type=float, default=0.3, show_default=True, help="Share of reports in the validation part."
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Random seed (the same seed gives the same split)."
)
@click.option("--force", is_flag=True, help="Replace an existing split with a different one (recorded in the audit).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def split(wb, cohort, validation, seed, force, fmt):
    """Divide a development cohort into tuning and validation parts, stratified by label, reproducible by seed."""
    summary = wb.split_cohort(cohort, validation=validation, seed=seed, force=force)
    echo_table(summary, fmt)
    if fmt == "table":
        sizes = summary.attrs.get("reports", {})
        click.echo(
            f"\n{cohort}: {sizes.get('tuning', 0)} tuning and {sizes.get('validation', 0)} validation reports "
            f"(seed {seed}); suggestions and the disagreement queue read only the tuning part"
        )


@main.command("split-metrics")
@click.argument("run_id", type=int)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def split_metrics(wb, run_id, fmt):
    """Per-label F1 of a run on the tuning and validation parts side by side, with intervals and the gap."""
    import pandas as pd

    parts = wb.evaluate_parts(run_id)
    frame = pd.DataFrame({f"{p}_{c}": parts[p].table[c] for p in parts for c in ("support", "f1", "f1_lo", "f1_hi")})
    frame["gap"] = frame["tuning_f1"] - frame["validation_f1"]
    echo_table(frame.reset_index(), fmt, bootstrap=("tuning_f1", "validation_f1"))
    if fmt == "table":
        from workbench.services.optimising import fmt_figure as f

        for p, m in parts.items():
            click.echo(
                f"{p}: {m.reports} reports, macro F1 {f(m.macro_f1)} [{f(m.macro_f1_lo)}, {f(m.macro_f1_hi)}]"
                f" ({m.macro_labels})"
            )
        click.echo(f"gap (tuning - validation): {f(parts['tuning'].macro_f1 - parts['validation'].macro_f1)}")


@main.command("split-compare")
@click.argument("run_a", type=int)
@click.argument("run_b", type=int)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def split_compare(wb, run_a, run_b, fmt):
    """Compare two runs on tuning and on validation side by side: per-label F1 change and exact McNemar."""
    result = wb.compare_by_part(run_a, run_b)
    cols = ["f1_a", "f1_b", "delta_f1", "b", "c", "p_value", "verdict"]
    frame = pd.concat({part: r.table[cols] for part, r in result.items()}, axis=1)
    frame.columns = [f"{p} {c}" for p, c in frame.columns]
    frame.index.name = "label"
    echo_table(
        frame.reset_index(),
        fmt,  # 100 columns: the change and verdict per part (CSV/JSON: all)
        columns=["label", "tuning delta_f1", "tuning verdict", "validation delta_f1", "validation verdict"],
    )
    if fmt == "table":
        from workbench.services.optimising import fmt_figure as f

        for part, r in result.items():
            click.echo(f"{part}: macro F1 {f(r.macro_f1_a)} -> {f(r.macro_f1_b)} ({r.macro_labels})")
        lines = [line for part, r in result.items() for line in wb.comparison_noise(run_a, run_b, r.table, part)]
        for line in dict.fromkeys(lines):  # each part's lines name it; "not measured" once, not once per part
            say(line)


def macro_lines_by_row(frame) -> dict[str, str]:
    """Each distinct "mean over" text of a split-history table -> the rows (runs, parts) it belongs to."""
    where: dict[str, list[str]] = {}
    for row in frame.itertuples(index=False):
        for part in ("tuning", "validation"):
            where.setdefault(getattr(row, f"{part}_macro_labels"), []).append(f"run {row.run} {part}")
    total = 2 * len(frame)
    return {text: "every row, both parts" if len(rows) == total else ", ".join(rows) for text, rows in where.items()}


@main.command("split-history")
@click.argument("cohort")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def split_history(wb, cohort, fmt):
    """Iteration history on tuning and validation with the gap between them (the overfitting signal)."""
    frame = wb.history_by_part(cohort)
    if fmt != "table":
        echo_table(frame, fmt)
        return
    echo_table(frame.drop(columns=["tuning_macro_labels", "validation_macro_labels"]), fmt)
    for text, rows in macro_lines_by_row(frame).items():
        say(f"macro F1 ({rows}): {text}")


@main.command()
@click.argument("label")
@click.option(
    "--run",
    "run_id",
    type=int,
    default=None,
    help="Run whose disagreements to learn from (default: the newest finished run on the development cohort).",
)
@click.option(
    "--proposer",
    type=click.Choice(["auto", "offline", "llm"]),
    default="auto",
    show_default=True,
    help="llm: one reflective call to a model; offline: mined from the disagreements, scored with the rule-based labeller; auto: llm when a model is configured.",
)
@click.option("--model", default=None, help="Model for the llm proposer (default: the study's labeller).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option(
    "--phrases",
    "phrase_list",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Outside phrase list (CheXpert labeler CSV: observation, list, raw_phrase) read in place: its synonyms are tried as offline candidates.",
)
@study_option
def suggest(wb, label, run_id, proposer, model, fmt, phrase_list):
    """Propose a revision of LABEL (or `all` failing labels) from its tuning disagreements and error notes,
    evaluated on tuning and validation before it is shown."""
    from workbench.services.optimising import suggestion_text

    results = (
        wb.suggest_failing(run_id, proposer=proposer, model=model, phrase_list=phrase_list)
        if label == "all"
        else [wb.suggest(label, run_id=run_id, proposer=proposer, model=model, phrase_list=phrase_list)]
    )
    # each with its noise line (or that the run's noise is not measured)
    noise = ["\n".join(wb.suggestion_noise_lines(r)) for r in results]
    if fmt == "json":
        shown = [{**r.to_dict(), "noise": n} for r, n in zip(results, noise, strict=True)]
        click.echo(json.dumps(shown if label == "all" else shown[0], indent=2, default=json_default))
    else:
        click.echo(
            "\n\n".join(suggestion_text(r) + (f"\n{n}" if n else "") for r, n in zip(results, noise, strict=True))
            or "no label has a disagreement on the tuning part"
        )


@main.command("calls")
@click.argument("run_id", type=int)
@click.option(
    "--per-label", is_flag=True, help="Sum per label: calls, tokens, cost, cost and tokens per label answer, latency."
)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@study_option
def calls_cmd(wb, run_id, per_label, fmt):
    """Per-call facts of a run (latency, tokens, cached tokens, cost, finish reason, the model that answered), for export."""
    echo_table(wb.call_costs(run_id) if per_label else wb.call_facts(run_id), fmt)


@main.command("case")
@click.argument("report_id")
@click.option("--label", default=None, help="Only this label (id or name; default: every label of the report).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="json also carries each call's messages, raw reply and thinking.",
)
@wide_option
@study_option
def case_cmd(wb, report_id, label, fmt, wide):
    """One report's answers under every run that labelled it, side by side: answer, evidence, status, latency,
    tokens, cost, finish reason and the model that answered, one column per run (prompt version, model)."""
    matrix = wb.case_matrix(report_id, label)
    if fmt == "json":
        from workbench.services.results import strict

        click.echo(json.dumps(strict(matrix.to_json()), indent=2, ensure_ascii=False, default=str, allow_nan=False))
        return
    if not matrix.columns:
        click.echo(f"no run has labelled report {report_id}" + (f" for {matrix.label}" if matrix.label else ""))
        return
    table = matrix.table().reset_index()
    if fmt == "table":
        from workbench.terminal import visible

        click.echo(visible(matrix.text) + "\n")
    why = "not recorded (the offline labeller records no latency, tokens or cost; a model with no known price has no cost)"
    echo_table(table, fmt, undefined={c.heading: why for c in matrix.columns})
    if matrix.withheld and fmt == "table":
        say(
            f"left out: run(s) {', '.join(map(str, matrix.withheld))}, on a test or validation cohort or part "
            "(their answers are never shown to the person tuning prompts)"
        )


@main.command("search")
@click.argument("run_id", type=int)
@click.argument("query")
@click.option(
    "--in",
    "where",
    type=click.Choice(["report", "evidence", "answer"]),
    default=None,
    help="Search only the report text, the evidence or the raw answer (default: all three).",
)
@click.option("--regex", is_flag=True, help="QUERY is a regular expression (default: a plain substring).")
@click.option("--label", default=None, help="Only this label.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_option
@study_option
def search_cmd(wb, run_id, query, where, regex, label, fmt, wide):
    """Find the (report, label) cases of a run whose report, evidence or answer contains QUERY (case-insensitive);
    open one with `workbench case REPORT --label LABEL`."""
    result = wb.search_run(run_id, query, where=where, regex=regex, label=label)
    if fmt != "table":
        echo_table(result.cases, fmt)
        return
    click.echo(f"{len(result.cases)} match(es) in run {run_id}" + (f" ({where})" if where else ""))
    if len(result.cases):
        echo_table(result.cases, fmt)


@main.command()
@click.argument("run_id", type=int)
@click.option(
    "--sample",
    type=int,
    default=200,
    show_default=True,
    help="(report, label) answers to ask again, stratified by label and answer.",
)
@click.option(
    "--repeats",
    type=int,
    default=2,
    show_default=True,
    help="Times each is asked again (a new seed each time where the model takes one).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@click.option("--format", "fmt", type=click.Choice(["text", "csv", "json"]), default="text", show_default=True)
@study_option
def noise(wb, run_id, sample, repeats, seed, fmt):
    """The noise floor: ask a sample of a run's calls again (no cache) and print per label and overall
    `noise rate X [lo, hi]` (Wilson 95%): the share of repeated answers that differ from the run's answer."""
    result = wb.measure_noise(run_id, sample=sample, repeats=repeats, seed=seed)
    if fmt == "text":
        click.echo("\n".join(result.lines()))
    else:
        echo_table(result.table, fmt)


@main.command()
@click.argument("proposal_id", type=int)
@study_option
def accept(wb, proposal_id):
    """Accept an offered proposal: it becomes your draft (save it with `workbench prompts save`)."""
    lp = wb.accept_proposal(proposal_id)
    click.echo(
        f"proposal {proposal_id} is now your draft of {lp.label}; review it, then "
        f"`workbench prompts save {lp.label} -m MESSAGE` (the message will name the notes it came from)"
    )


@main.command()
@click.option("--labels", default=None, help="Comma-separated labels (default: every asked label).")
@click.option("--rounds", type=int, default=3, show_default=True, help="Rounds of suggest -> evaluate -> keep.")
@click.option(
    "--run",
    "run_id",
    type=int,
    default=None,
    help="Run to start from (default: the newest finished run on the development cohort).",
)
@click.option("--proposer", type=click.Choice(["auto", "offline", "llm"]), default="auto", show_default=True)
@click.option("--model", default=None, help="Model for the llm proposer.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the report here (.md or .json).")
@click.option(
    "--phrases",
    "phrase_list",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Outside phrase list (CheXpert labeler CSV: observation, list, raw_phrase) read in place: its synonyms are tried as offline candidates.",
)
@click.option(
    "--screen/--no-screen",
    default=True,
    show_default=True,
    help="Label each proposal first on the label's tuning disagreements plus a stratified sample of agreements; ask the whole validation part (which decides) only for those that pass, and carry the rest of tuning over (the report says how many answers; a run of the saved version asks them).",
)
@study_option
def optimise(wb, labels, rounds, run_id, proposer, model, out, phrase_list, screen):
    """Rounds of suggest -> evaluate -> keep if validation does not drop; the best version is left as drafts."""
    from workbench.services.optimising import report_markdown

    label_list = [x.strip() for x in labels.split(",")] if labels else None
    report = wb.optimise(
        label_list,
        rounds=rounds,
        run_id=run_id,
        proposer=proposer,
        model=model,
        on_progress=lambda m: click.echo(m, err=True),
        phrase_list=phrase_list,
        screen=screen,
    )
    text = report_markdown(report)
    click.echo(text)
    if out:
        Path(out).write_text(
            json.dumps(report, indent=2, default=json_default) if out.endswith(".json") else text, encoding="utf-8"
        )


@main.command("evaluate-drafts")
@click.option(
    "--run",
    "run_id",
    type=int,
    default=None,
    help="Run of the committed version to compare with (default: the newest finished run on the development cohort).",
)
@click.option(
    "--labels", default=None, help="Comma-separated labels (default: every label with a draft or an uncommitted edit)."
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@study_option
def evaluate_drafts(wb, run_id, labels, fmt):
    """Label your drafts through the call cache on tuning and validation and compare them with the committed
    version, before anything is committed."""
    from workbench.services.optimising import drafts_text

    result = wb.evaluate_drafts(run_id, [x.strip() for x in labels.split(",")] if labels else None)
    click.echo(json.dumps(result, indent=2, default=json_default) if fmt == "json" else drafts_text(result))


@main.command("test-look")
@click.argument("bundle")
@click.option("--cohort", required=True, help="The test cohort.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def test_look(wb, bundle, cohort, fmt):
    """Measure a frozen bundle on a locked test cohort (the look is recorded and counted)."""
    import pandas as pd

    figures = wb.test_look(bundle, cohort, on_progress=_progress_bar())
    if fmt == "json":
        click.echo(json.dumps(figures, indent=2, default=str))
        return
    from workbench.services.optimising import fmt_figure as f

    echo_table(pd.DataFrame(figures["per_label"]).round(3))
    click.echo(
        f"\n{bundle} on {cohort}: macro F1 {f(figures['macro_f1'])} [{f(figures['macro_f1_lo'])}, "
        f"{f(figures['macro_f1_hi'])}]; {figures['message']}"
    )


@main.command("test-look-history")
@click.option("--bundle", default=None, help="Only this bundle.")
@wide_flag
@study_option
def test_looks(wb, bundle):
    """Every look at a test cohort: who, when, which bundle."""
    echo_table(wb.test_looks(bundle))


hidden_alias(main, test_looks, "test-looks")  # its name before issue 30


@user.command("disable")
@click.argument("user_id")
@study_option
def user_disable(wb, user_id):
    """Disable an account: it can do nothing (app, CLI, tokens) until enabled again."""
    wb.set_disabled(user_id, True)
    click.echo(f"{user_id} is disabled")


@user.command("enable")
@click.argument("user_id")
@study_option
def user_enable(wb, user_id):
    """Enable a disabled account again."""
    wb.set_disabled(user_id, False)
    click.echo(f"{user_id} is enabled")


@user.command("token")
@click.argument("user_id")
@click.option("--revoke", is_flag=True, help="Delete every token of the account instead.")
@click.option(
    "--days",
    type=click.IntRange(1, 365),
    default=90,
    show_default=True,
    help="Days until the token expires (disable, a password or role change end it sooner).",
)
@study_option
def user_token(wb, user_id, revoke, days):
    """Make a command-line token for your own account (use it as WORKBENCH_TOKEN); shown once."""
    if revoke:
        click.echo(f"revoked {wb.revoke_tokens(user_id)} token(s) of {user_id}")
        return
    click.echo(wb.create_token(user_id, days=days))
    click.echo(
        f"(shown once; only its hash is stored; expires in {days} days) "
        f"export WORKBENCH_USER={user_id} WORKBENCH_TOKEN=<the token>",
        err=True,
    )


@main.command("audit")
@click.option(
    "--entity",
    default=None,
    help="Only one kind: reading, reading_note, adjudication, note, prompt, bundle, run, user, endpoint, settings.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option(
    "--verify", "check", is_flag=True, help="Check the hash chain instead: reports the first broken link (exit 1)."
)
@wide_flag
@study_option
def audit(wb, entity, fmt, check):
    """The append-only audit trail (who, when, old -> new), newest first; export with --format csv."""
    if check:
        result = wb.verify_audit()
        if result.ok:
            click.echo(f"ok: {result.events} audit events, every link of the hash chain intact")
            return
        click.echo(f"BROKEN: {result.reason} (checked {result.events} events)", err=True)
        raise SystemExit(1)
    echo_table(wb.audit_log(entity=entity), fmt, columns=["id", "at", "actor", "action", "entity", "entity_key"])


@main.command("allow-endpoint")
@click.argument("url")
@study_option
def allow_endpoint(wb, url):
    """Allow report text to be sent to an endpoint (URL prefix), e.g. https://api.openai.com; a server on this
    machine by its address and port, e.g. 127.0.0.1:8080 (never every local port)."""
    entry = wb.allow_endpoint(url)
    click.echo(f"allowed: {entry}\nreport text may now be sent there when a run uses it")


@main.command("migrate-db")
@click.option(
    "--to",
    "to_url",
    required=True,
    help="Empty target database, e.g. postgresql+psycopg://user@host/db (no password in it: PGPASSWORD or ~/.pgpass).",
)
@wide_flag
@study_option
def migrate_db(wb, to_url):
    """Move a study's database (e.g. SQLite to PostgreSQL); row counts and checksums compared and printed."""
    report = wb.migrate_database(to_url)
    echo_table(report)
    click.echo(f"all {len(report)} tables match; the study now uses the new database")


@main.command()
@click.option(
    "--path",
    "path",
    type=click.Path(file_okay=False),
    default=str(Path("sessions") / "demo"),  # under the current folder: an installed package has no checkout
    show_default=True,
    help="Where the demo study lives (created when absent).",
)
@click.option("--port", type=int, default=8501, show_default=True)
@click.option("--no-app", is_flag=True, help="Only create the demo study; do not start the app.")
@click.option("--reset", is_flag=True, help="Delete and recreate the demo study first.")
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="Interface to serve on; the default keeps report text on this machine (0.0.0.0 serves the network).",
)
@click.option(
    "--no-auth-on-network",
    "open_network",
    is_flag=True,
    help="Serve the demo (auth: none) on a non-loopback --address anyway.",
)
def demo(path, port, no_app, reset, address, open_network):
    """Create the synthetic demo study (offline labeller, SQLite) and start the app on it."""
    from workbench.demo import create_demo

    open_network = check_network_auth(address, "none", open_network) if not no_app else False  # the demo has no sign-in
    root = Path(path).resolve()
    wb = create_demo(root, reset=reset, echo=click.echo)
    click.echo(f"demo study ready at {wb.root}")
    wb.engine.dispose()  # no database connection is carried into the server process
    if not no_app:
        _run_app(wb.root, port, address, open_network)


@main.command()
@click.option("--port", type=int, default=8501, show_default=True)
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="Interface to serve on; use 0.0.0.0 for a team server (with auth: local or oidc).",
)
@click.option(
    "--study",
    "study",
    type=click.Path(file_okay=False),
    envvar="WORKBENCH_STUDY",
    help="Study folder (default: $WORKBENCH_STUDY, else the current folder).",
)
@click.option(
    "--no-auth-on-network",
    "open_network",
    is_flag=True,
    help="Serve a study with auth: none on a non-loopback --address anyway (everyone who reaches it reads every report; the app says so on every page).",
)
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    metavar="URL",
    help="Another origin whose pages may use the app (scheme://host[:port]: the address readers type when a proxy "
    "serves the app under another name). Repeatable. The app's own origin needs none.",
)
def app(port, address, study, open_network, origins):
    """Start the Streamlit app on a study (each user signs in in the browser when auth is local or oidc)."""
    from workbench.services import Workbench

    listed = [checked_origin(o) for o in origins]
    wb = Workbench(resolve_study_path(study), actor=_cli_actor())
    _warn_open_files(wb)
    wb.migrate()
    open_network = check_network_auth(address, wb.config.auth, open_network)
    wb.engine.dispose()  # no database connection is carried into the server process
    _run_app(wb.root, port, address, open_network, listed)


def checked_origin(text: str) -> str:
    """An origin as a browser sends it (scheme://host[:port], no path), or a clear error naming what is wrong."""
    from urllib.parse import urlsplit

    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise click.BadParameter(
            f"{text!r} is not an origin: give scheme://host[:port] with no path, e.g. https://reading.example.org",
            param_hint="--allow-origin",
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise click.BadParameter(f"{text!r} has more than scheme, host and port", param_hint="--allow-origin")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def check_network_auth(address: str, auth: str, open_network: bool) -> bool:
    """Refuse to serve a study without sign-in beyond this machine unless asked; True when it will be."""
    from workbench.labeller.endpoints import is_loopback_host

    if is_loopback_host(address) or auth != "none":
        return False
    if not open_network:
        raise StudyError(
            f"refusing to serve on {address} with auth: none: anyone who reaches it could read every report. Set "
            "auth: local (`workbench user add ...`) or oidc in workbench.yaml, serve on 127.0.0.1, or pass "
            "--no-auth-on-network to serve it anyway (the app then says so on every page)"
        )
    click.echo(
        f"warning: serving on {address} with auth: none (--no-auth-on-network): anyone who reaches it can "
        "read every report",
        err=True,
    )
    return True


def app_environment(root: Path, address: str, open_network: bool = False) -> dict:
    """The app server's environment: the study, and whether it is served to the network without sign-in."""
    env = dict(os.environ, WORKBENCH_STUDY=str(root))
    env.pop(NO_AUTH_ON_NETWORK, None)
    if open_network:
        env[NO_AUTH_ON_NETWORK] = address
    return env


def app_command(port: int, address: str = "127.0.0.1", *options: str) -> list[str]:
    """The command that serves the app (tests and benches start the same one): Streamlit runs
    workbench/ui/serve.py, its ASGI app with the middleware that answers a deep link without 404s."""
    server = Path(__file__).resolve().parent / "ui" / "serve.py"
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(server),
        "--server.port",
        str(port),
        "--server.address",
        address,
        "--browser.gatherUsageStats",
        "false",
        "--server.headless",
        "true",
        "--client.toolbarMode",
        "minimal",
        *options,
    ]


def _run_app(
    root: Path, port: int, address: str = "127.0.0.1", open_network: bool = False, origins: list | None = None
) -> None:
    """Run Streamlit on the app module with the study in the environment (loopback by default)."""
    env = app_environment(root, address, open_network)
    cmd = app_command(port, address, *(f"--server.corsAllowedOrigins={o}" for o in origins or ()))
    click.echo(
        f"starting the app on http://{'localhost' if address == '127.0.0.1' else address}:{port} (Ctrl+C to stop)"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        # the command becomes the server (same process id): SIGTERM from systemd, a container or a
        # shell stops Streamlit itself, and nothing is left holding the port
        os.execve(sys.executable, cmd, env)
    raise SystemExit(_call_forwarding_signals(cmd, env))


def _call_forwarding_signals(cmd: list[str], env: dict) -> int:
    """Run a child and pass SIGTERM/SIGINT on to it (where exec is not available); returns its exit code."""

    child = subprocess.Popen(cmd, env=env)

    def forward(signum, _frame):
        child.send_signal(signum)

    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGBREAK"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), forward)
    return child.wait()


@main.command("attributes")
@click.argument("run_id", type=int)
@click.option("--label", default=None, help="One label (id or display name); default every label with attributes.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option(
    "--metrics",
    "show_metrics",
    is_flag=True,
    help="Accuracy and coverage per label and attribute on matched findings, with 95% Wilson intervals.",
)
@click.option(
    "--confusion",
    "show_confusion",
    is_flag=True,
    help="The confusion of values on matched findings: reference value x labeller value, with counts "
    "('-' where a side gave none).",
)
@wide_option
@study_option
def attributes_cmd(wb, run_id, label, fmt, show_metrics, show_confusion, wide):
    """Finding attributes (side, severity, change ...) of a run: one row per (report, label, attribute)
    with the labeller's value, the reference value when there is one, and the evidence."""
    if show_confusion:
        confusion = wb.attribute_metrics(run_id, label).confusion
        echo_table(confusion, fmt, wide=wide)
        if fmt == "table":
            say("matched findings (labeller and reference both positive); '-' = no value given on that side")
        return
    if show_metrics:
        result = wb.attribute_metrics(run_id, label)
        if fmt == "json":
            click.echo(
                json.dumps(
                    {
                        "run": run_id,
                        "rule": result.rule,
                        "parse_failures": result.parse_failures,
                        "attributes": json_records(result.table),
                        "confusion": json_records(result.confusion),
                    },
                    indent=2,
                )
            )
            return
        echo_table(
            result.table.round(3),
            fmt,
            wide=wide,
            columns=[
                "label",
                "attribute",
                "reference",
                "n",
                "correct",
                "accuracy",
                "accuracy_lo",
                "accuracy_hi",
                "coverage",
            ],
        )
        if fmt == "table":
            click.echo("")
            say(
                result.rule + f"; attribute parse failures (recorded, never guessed): {result.parse_failures}; "
                "the confusion of values: `--confusion`"
            )
        return
    rows = wb.attribute_rows(run_id, label)
    echo_table(rows, fmt, wide=wide)
    if fmt == "table":
        matched = rows["reference"].notna() & rows["value"].notna()
        say(
            f"{len(rows)} row(s); {int(matched.sum())} with both values, "
            f"{int((matched & (rows['value'] != rows['reference'])).sum())} disagree (`--metrics` for accuracy)"
        )
        _echo_attribute_failures(wb.attribute_failures(run_id, label))


def _echo_attribute_failures(failures) -> None:
    """The findings whose attributes object was malformed: their empty values are a failure, not "not stated"."""
    if failures.empty:
        return
    n = len(failures)
    say(f"{n} attribute parse failure{'s' if n != 1 else ''} (recorded, never guessed; the presence answer counts):")
    for r in failures.head(5).itertuples(index=False):
        say(f"  {r.report_id} {r.label}: {r.detail}")
    if n > 5:
        say(f"  ... and {n - 5} more; `workbench case REPORT --label LABEL` shows a reply")


def _echo_attribute_scores(name: str, g) -> None:
    """A generator's attribute accuracy per label on matched findings and its report-level error count."""
    if len(g.attributes):
        click.echo("")
        shown = g.attributes[g.attributes["reference"] > 0].round(3)
        echo_table(
            shown,
            title=f"{name}: attributes on matched findings (support = reference values)",
            columns=["label", "attribute", "reference", "n", "accuracy", "accuracy_lo", "accuracy_hi", "coverage"],
        )
        say(
            "attribute accuracy per label and attribute, micro-pooled over labels in the 'all' rows; n = matched "
            "findings (both reports positive) where both give the attribute a value; 95% Wilson intervals"
        )
    e = g.report_errors
    if e and len(g.report_errors_by_label) and e["reports"]:
        click.echo("")
        shown = g.report_errors_by_label
        echo_table(
            shown[(shown["support"] > 0) | (shown["errors"] > 0) | (shown["label"] == "all")],
            title=f"{name}: report-level errors per label",
        )
        say(
            "support = reference positives; labels with no reference positive and no error are not shown; "
            "the 'all' row sums every label"
        )
    if e:
        click.echo(
            f"{name}: report-level errors {e['total']} over {e['reports']} reports (mean {e['mean']:.2f}: "
            f"{e['fp']} invented + {e['fn']} missed + {e['attribute_mismatches']} attribute mismatches)"
            if e["reports"]
            else f"{name}: no report without a failed extraction to count errors on"
        )
        say(e["rule"])  # the averaging rule beside the figure (SPEC-CXR: publish it with the support)


# ---------------------------------------------------------------- label set (mined, reviewed, adopted)


@main.group("labelset")
def labelset_():
    """The label set from the corpus: mine candidate findings, review them, adopt the approved vocabulary."""


def _candidate_table(candidates: list[dict]):
    """Candidates as a table: rank, key, name, report counts, first forms, status."""
    return pd.DataFrame(
        [
            {
                "rank": c.get("rank", i),
                "key": c["key"],
                "name": c["name"],
                "affirmed": c["affirmed_reports"],
                "negated": c["negated_reports"],
                "uncertain": c["uncertain_reports"],
                "forms": ", ".join(f["text"] for f in c["forms"][:3]),
                "overlaps": ", ".join(c.get("overlaps") or []),
                **({"status": c["status"], "waiting_on": ", ".join(c["waiting_on"])} if "status" in c else {}),
            }
            for i, c in enumerate(candidates, 1)
        ]
    )


labelset_name = click.option("--labelset", "name", required=True, help="The label set.")  # the review commands share it


@labelset_.command("mine")
@click.option("--cohort", required=True, help="Cohort whose reports are mined.")
@click.option(
    "--engine",
    type=click.Choice(["offline", "model"]),
    default="offline",
    show_default=True,
    help="offline: rules and scikit-learn, deterministic, local; model: one extraction call per report.",
)
@click.option("--model", default=None, help="The model engine's model (default: the study's labeller model).")
@click.option(
    "--against", default=None, help="Compare with a vocabulary: chexpert-14, ranscore-21, a file, or 'study'."
)
@click.option("--min-reports", type=int, default=2, show_default=True, help="Affirmed reports a candidate needs.")
@click.option("--labelset", "name", default=None, help="Name of the label set (default: the cohort's name).")
@click.option("--top", type=int, default=40, show_default=True, help="Candidates shown in the table.")
@click.option("--estimate", is_flag=True, help="Model engine: say what mining would cost, make no call.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@study_option
def labelset_mine(wb, cohort, engine, model, against, min_reports, name, top, estimate, fmt):
    """Mine a cohort's candidate findings, ranked by reports with an affirmed mention (`--format json`: the list)."""
    if estimate:
        est = wb.labelset.estimate_mining(cohort, model)
        for line in est.lines():
            click.echo(line)
        return
    result = wb.labelset.mine_labelset(cohort, engine, against, min_reports, name, model)
    if fmt == "json":
        click.echo(json.dumps([c.to_json() for c in result.candidates], indent=2, ensure_ascii=False))
        return
    shown = [c.to_json() for c in result.candidates[:top]]
    echo_table(
        _candidate_table(shown), columns=["rank", "name", "affirmed", "negated", "uncertain", "forms", "overlaps"]
    )
    tail = ", ".join(f"top {k}: {v:.0%}" for k, v in result.tail().items())
    click.echo(
        f"label set {result.labelset!r}: {len(result.candidates)} candidates from {result.reports} reports "
        f"({result.engine}); affirmed mentions covered by {tail}"
    )
    if result.calls:
        c = result.calls
        cost = "unknown" if c["cost"] is None else f"${c['cost']:.4f}"
        click.echo(f"calls: {c['made']} made, {c['reused']} from the cache, {c['failed']} failed; cost {cost}")
    if result.comparison is not None:
        cmp = result.comparison
        click.echo(
            f"against {cmp.vocabulary}: {len(cmp.additions)} additions, unsupported: "
            f"{', '.join(cmp.unsupported) or 'none'}"
        )
        for c in cmp.additions[:top]:
            click.echo(wrap_item(f"+ {c.name} ({c.affirmed_reports} reports): {', '.join(t for t, _ in c.forms[:3])}"))
        for label, forms in cmp.missing_forms.items():
            click.echo(wrap_item(f"{label} look_for lacks: {', '.join(f'{t} ({n})' for t, n in forms)}"))


@labelset_.command("list")
@labelset_name
@click.option("--open", "only_open", is_flag=True, help="Only candidates still open, with who has not agreed.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@wide_flag
@study_option
def labelset_list(wb, name, only_open, fmt):
    """A label set's candidates with their review status (open ones say who has not agreed)."""
    rows = wb.labelset.labelset_candidates(name)
    if only_open:
        rows = [r for r in rows if r["status"] == "open"]
    echo_table(
        _candidate_table(rows), fmt, columns=["rank", "key", "name", "affirmed", "forms", "status", "waiting_on"]
    )
    rule = wb.labelset.review_rule(name)
    if fmt == "table":
        click.echo(f"approval rule: {rule.describe() if rule else 'not set (`workbench labelset rule`)'}")


@labelset_.command("show")
@click.argument("key")
@labelset_name
@study_option
def labelset_show(wb, key, name):
    """One candidate: forms, counts, examples, attributes, and the votes once you have voted."""
    row = next((r for r in wb.labelset.labelset_candidates(name) if r["key"] == key), None)
    if row is None:
        raise click.ClickException(f"no candidate {key!r} in label set {name!r}")
    click.echo(
        f"{row['name']} [{row['key']}]: {row['affirmed_reports']} affirmed, {row['negated_reports']} negated, "
        f"{row['uncertain_reports']} uncertain reports; {row['status']}"
    )
    click.echo(f"definition: {row['definition']}")
    click.echo(f"look for: {'; '.join(row['look_for'])}")
    click.echo("forms: " + ", ".join(f"{f['text']} ({f['count']})" for f in row["forms"][:15]))
    if row.get("attributes"):
        click.echo("attributes: " + "; ".join(f"{a}: {dict(v)}" for a, v in row["attributes"].items()))
    for ex in row["examples"]:
        click.echo(wrap_item(f"{ex['report_id']} ({ex['assertion']}): {ex['sentence']}"))
    votes = wb.labelset.candidate_votes(name, key)
    click.echo(
        "votes: "
        + (", ".join(f"{r}: {' '.join(v).strip()}" for r, v in votes.items()) if votes else "hidden until you vote")
    )


@labelset_.command("rule")
@labelset_name
@click.option("--reviewers", required=True, help="Comma-separated reviewers whose votes count.")
@click.option("--rule", type=click.Choice(["unanimous", "k_of_n"]), default="unanimous", show_default=True)
@click.option("--k", type=int, default=0, help="k_of_n: agreeing votes needed.")
@study_option
def labelset_rule(wb, name, reviewers, rule, k):
    """Set who reviews a label set and how many must agree (admins); unanimous is Ran Score's rule."""
    parsed = wb.labelset.set_review_rule(name, reviewers.split(","), rule, k)
    click.echo(f"label set {name!r}: approval {parsed.describe()}")


@labelset_.command("vote")
@click.argument("key")
@click.argument("action", type=click.Choice(["approve", "reject", "merge", "rename"]))
@click.argument("argument", required=False, default="")
@labelset_name
@click.option("--reviewer", default=None, help="Vote as this reviewer (yourself when signed in).")
@study_option
def labelset_vote(wb, key, action, argument, name, reviewer):
    """Vote on a candidate: approve, reject, merge TARGET_KEY, or rename NEW_NAME."""
    out = wb.labelset.vote_candidate(name, key, action, argument, reviewer)
    state = (
        f"settled: {' '.join(out.decision).strip()}"
        if out.status == "settled"
        else (f"open, waiting on {', '.join(out.waiting_on)}")
    )
    click.echo(f"{key}: {state}")


@labelset_.command("edit")
@click.argument("key")
@labelset_name
@click.option("--definition", default=None, help="New definition.")
@click.option("--look-for", "look_for", default=None, help="New look-for phrases, separated by ';'.")
@study_option
def labelset_edit(wb, key, name, definition, look_for):
    """Edit a candidate's definition or look-for phrases (audited)."""
    wb.labelset.edit_candidate(name, key, definition, look_for.split(";") if look_for is not None else None)
    click.echo(f"{key}: edited")


@labelset_.command("split")
@click.argument("key")
@labelset_name
@click.option("--forms", required=True, help="Surface forms to move out, separated by ';'.")
@click.option("--name", "new_name", required=True, help="Name of the new candidate.")
@study_option
def labelset_split(wb, key, name, forms, new_name):
    """Move some surface forms of a candidate into a new candidate of their own."""
    new_key = wb.labelset.split_candidate(name, key, [f.strip() for f in forms.split(";") if f.strip()], new_name)
    click.echo(f"{key}: split into {new_key}")


@labelset_.command("settle")
@click.argument("key")
@click.argument("action", type=click.Choice(["approve", "reject", "merge", "rename"]))
@click.argument("argument", required=False, default="")
@labelset_name
@click.option("--reason", required=True, help="Why (kept in the audit trail).")
@study_option
def labelset_settle(wb, key, action, argument, name, reason):
    """Settle a contested candidate (adjudicators and admins); the decision wins over the votes."""
    out = wb.labelset.settle_candidate(name, key, action, argument, reason)
    click.echo(f"{key}: settled by adjudication: {' '.join(out.decision).strip()}")


@labelset_.command("adopt")
@labelset_name
@click.option("--message", default="", help="Commit message (default: what changed).")
@study_option
def labelset_adopt(wb, name, message):
    """Make the approved label set the study's vocabulary (committed beside the prompts; old data kept)."""
    change = wb.labelset.adopt_labelset(name, message)
    for line in change.lines():
        click.echo(line)


@labelset_.command("export")
@labelset_name
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Vocabulary file to write.")
@study_option
def labelset_export(wb, name, out):
    """Write the approved label set as a vocabulary file, for `workbench init NEW --vocab FILE`."""
    path = wb.labelset.export_labelset(name, Path(out))
    click.echo(f"wrote {path}")


def _whole_sentence_summaries(group: click.Group) -> None:
    """Show each command's whole first paragraph in listings (click cuts it at 45 characters or at 'e.g.')."""
    for cmd in group.commands.values():
        if cmd.help and not cmd.short_help:
            cmd.short_help = " ".join(cmd.help.split("\n\n")[0].split())
        if isinstance(cmd, click.Group):
            _whole_sentence_summaries(cmd)


_whole_sentence_summaries(main)


if __name__ == "__main__":
    main()
