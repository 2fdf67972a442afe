"""Widgets shared by the pages: report text shown safely, errors shown plainly, run pickers,
the model notice and the progress panel of background jobs.

Report text is patient text written by other people: it is always shown as text (st.text) or,
when evidence must be highlighted, escaped first and then marked up (st.html, no Markdown), so a
report containing HTML or Markdown displays verbatim and cannot inject anything.
"""

from __future__ import annotations

import html
import json
import os
import re
from contextlib import contextmanager

import pandas as pd
import streamlit as st

from workbench.core.evidence import evidence_found, evidence_spans
from workbench.core.export import to_csv
from workbench.errors import WorkbenchError
from workbench.labeller.endpoints import is_offline
from workbench.services import ConflictError, PermissionDenied
from workbench.services.results import CallFacts
from workbench.services.runs import endpoint_label, is_local_model
from workbench.study import NO_AUTH_ON_NETWORK
from workbench.ui import state

REPORT_STYLE = (
    "white-space: pre-wrap; line-height: 1.6; padding: 0.75rem 1rem; "
    "border: 1px solid rgba(49, 51, 63, 0.2); border-radius: 0.5rem;"
)


def compact_chips() -> None:
    """Smaller buttons inside containers keyed chips-*, and narrower page margins: a whole key-driven form
    and its queue's columns fit on one screen at 1280x800 (the margins alone took 160 px)."""
    st.html(
        "<style>[class*='st-key-chips'] button {min-height: 2rem; padding: 0.1rem 0.6rem;}"
        "[class*='st-key-chips'] button p {font-size: 0.9rem;}"
        "[data-testid='stMainBlockContainer'] {padding-left: 1.5rem; padding-right: 1.5rem;}</style>"
    )


def compact_header(title: str, help_text: str) -> None:
    """A reading page's title and one line of help side by side, small, under a narrow top margin: the report,
    its chips and the save button start near the top of the screen (the big title, its help and Streamlit's
    6 rem top margin took about 300 px above the report; the longer help is in the form's ? panel)."""
    compact_chips()
    st.html(
        "<style>[data-testid='stMainBlockContainer'] {padding-top: 2.5rem;}"
        ".st-key-wb-compact-header h1 {font-size: 1.6rem; padding: 0;}</style>"
    )
    with st.container(horizontal=True, vertical_alignment="center", gap="medium", key="wb-compact-header"):
        st.title(title, anchor=False, width="content")
        st.caption(help_text)


def window(n_rows: int, pos: int, size: int = 100, before: int = 20) -> tuple[int, int]:
    """The slice of a long queue to send to the browser: `size` rows around position pos.

    A 3,000-row table re-sent on every key press costs more than the rest of the page."""
    start = max(0, min(pos - before, n_rows - size))
    return start, min(n_rows, start + size)


def help_line(text: str) -> None:
    """The one-line help under a page title."""
    st.caption(text)


# Every ASCII punctuation character may be backslash-escaped in CommonMark; Streamlit's own
# extensions (:colour[...], :emoji:, $math$, autolinked URLs) start with one of these too.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&=\"'^@/;%,?])")


def md(value) -> str:
    """Text from users or files made safe to put inside Markdown: it shows as typed, never as markup."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(value)).replace("\n", "  \n")


def exposure_notices(wb) -> None:
    """Say on every page what exposes the study: served to the network without sign-in, files others can read."""
    address = os.environ.get(NO_AUTH_ON_NETWORK)
    if address and wb.config.auth == "none":
        st.error(
            md(
                f"Served on the network ({address}) without sign-in (auth: none, started with --no-auth-on-network): "
                "anyone who reaches this address can read every report. Set auth: local or oidc in Settings."
            ),
            icon=":material/warning:",
        )
    for warning in wb.permission_warnings():
        st.warning(md(warning))


def user_text(value) -> None:
    """Text a user wrote (a commit message, a note) shown as plain text: no Markdown, no links made of URLs."""
    st.text(str(value))


def flashes() -> None:
    """Show the messages queued by the previous run (they quote ids and names: shown as text).

    They go in one slot drawn on every run, message or not: a message that came and went moved every element
    after it, and Streamlit mounted the page's keyboard form anew under a reader's click (the click was lost)."""
    slot = st.empty()
    messages = state.pop_flashes()
    shown = [(kind, message) for kind, message in messages if kind != "toast"]
    if shown:
        with slot.container():
            for kind, message in shown:
                getattr(st, kind)(md(message))
    for kind, message in messages:
        if kind == "toast":  # toasts float above the page: no place in it
            st.toast(md(message), icon=":material/check_circle:")


# ---------------------------------------------------------------- report text


def report_text(text: str) -> None:
    """A whole report, verbatim (no Markdown, no HTML), wrapped, never cut."""
    with st.container(border=True):
        st.text(text or "(empty report)", wrap=True)


# Okabe-Ito colours (safe for the common colour-vision deficiencies), lightened for a text background
EVIDENCE_STYLE = "background: #F0E442; color: inherit; padding: 0 2px;"  # yellow
LOOK_FOR_STYLE = "background: #A6D8F5; color: inherit; padding: 0 2px; border-bottom: 2px dotted #0072B2;"  # sky blue


def phrase_spans(text: str, phrases) -> list[tuple[int, int]]:
    """Where a label's phrases occur as whole words (case-insensitive, plural allowed), merged, in order."""
    spans = []
    for phrase in phrases or []:
        words = [re.escape(w) for w in str(phrase).split()]
        if not words:
            continue
        pattern = r"(?<!\w)" + r"\s+".join(words) + r"(?:e?s)?(?!\w)"
        spans += [(m.start(), m.end()) for m in re.finditer(pattern, text, flags=re.IGNORECASE)]
    return _merge(spans)


def _merge(spans) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def highlight_html(text: str, evidence: str, phrases=()) -> str:
    """The report escaped piece by piece, the labeller's evidence (found by core.evidence, the parser's rule)
    and the label's look-for phrases marked in two colours (evidence wins where they overlap): safe as HTML."""
    marks = [(a, b, "evidence") for a, b in evidence_spans(evidence, text)]
    taken = marks[:]
    for a, b in phrase_spans(text, phrases):
        if not any(a < e and s < b for s, e, _ in taken):
            marks.append((a, b, "look-for"))
    out, pos = [], 0
    for start, end, kind in sorted(marks):
        style, title = (
            (EVIDENCE_STYLE, "the labeller's quoted evidence")
            if kind == "evidence"
            else (LOOK_FOR_STYLE, "a look-for phrase of this label")
        )
        out.append(html.escape(text[pos:start]))
        out.append(f'<mark class="wb-{kind}" title="{title}" style="{style}">{html.escape(text[start:end])}</mark>')
        pos = end
    out.append(html.escape(text[pos:]))
    return f'<div class="wb-report" style="{REPORT_STYLE}">{"".join(out)}</div>'


def highlighted_report(text: str, evidence: str, phrases=()) -> None:
    """A report with the labeller's evidence and the label's phrases highlighted, and a legend saying which is which."""
    st.html(highlight_html(text or "(empty report)", evidence, phrases))
    quote = evidence.strip()
    found_ev, found_lf = evidence_found(quote, text or ""), bool(phrase_spans(text, phrases))
    legend = []
    if found_ev:
        legend.append(f'<mark style="{EVIDENCE_STYLE}">yellow</mark> = the labeller\'s quoted evidence')
    if found_lf:
        legend.append(
            f'<mark style="{LOOK_FOR_STYLE}">blue</mark> = this label\'s look-for phrases or name found in the text'
        )
    if not legend:
        legend.append("Nothing highlighted: no evidence quoted and none of this label's phrases occur in the text.")
    st.html('<div style="font-size: 0.85rem; opacity: 0.8">' + " · ".join(legend) + "</div>")
    if quote and not found_ev:
        st.caption("The labeller's evidence is not in the report text (it may have invented it):")
        st.text(quote)


# ---------------------------------------------------------------- errors


@contextmanager
def shown_errors(action: str = ""):
    """Turn the services' user errors into one clear message on the page instead of a traceback."""
    try:
        yield
    except PermissionDenied as exc:
        st.error(md(f"Not allowed{': ' + action if action else ''}. {exc}"))
    except ConflictError as exc:
        st.error(
            md(
                f"Someone else saved first{' (' + action + ')' if action else ''}: {exc}. "
                "Reload the page (press R) and redo your change; nothing of yours was lost."
            )
        )
    except WorkbenchError as exc:  # StudyError, PromptError, BundleError, ImportProblems ...: the user's to fix
        st.error(md(f"{action + ': ' if action else ''}{exc}"))
    except OSError as exc:  # a full or read-only disk: said without a traceback; anything else is a bug Streamlit shows
        st.error(md(f"{action + ': ' if action else ''}{exc}"))


def do(wb, action: str, fn, *args, done=None, rerun: bool = True, **kwargs):
    """Run a write through the services: errors shown; on success bump the revision, queue a message, rerun."""
    ok, result = False, None
    with shown_errors(action):
        result = fn(*args, **kwargs)
        ok = True
    if not ok:
        return None
    state.bump(wb)
    message = done(result) if callable(done) else done
    if message:
        state.flash(*message) if isinstance(message, tuple) else state.flash(message)
    if rerun:
        st.rerun()
    return result


# ---------------------------------------------------------------- model notice


def lazy_tabs(key: str, tabs: dict) -> None:
    """Tabs whose content is computed only when open (title -> zero-argument draw function)."""
    for tab, draw in zip(st.tabs(list(tabs), key=key, on_change="rerun"), tabs.values(), strict=False):
        if tab.open:
            with tab:
                draw()


def model_notice(wb) -> None:
    """Which model labels, and whether report text leaves this machine."""
    settings = wb.labeller_settings()
    model = settings.get("model", "")
    if is_offline(model):
        st.caption(f"Model: **{md(model)}**, a rule-based baseline, not an LLM. Report text stays on this machine.")
    elif is_local_model(settings):
        st.caption(f"Model: **{md(model)}** on {md(endpoint_label(settings))} (this machine).")
    else:
        st.warning(md(f"Model: {model}. Report text is sent to {endpoint_label(settings)}."), icon=":material/public:")


# ---------------------------------------------------------------- runs


def run_title(row) -> str:
    """One line naming a run: id, prompt version, model, status."""
    return f"run {int(row['id'])} · prompt {str(row['prompt_commit'])[:8]} · {row['model']} · {row['status']}"


def pick_run(runs: pd.DataFrame, key: str, label: str = "Run", default_index: int = 0, finished: bool = True):
    """A selectbox of runs (newest first); returns the chosen run id or None."""
    if finished:
        runs = runs[runs["status"].isin(["finished", "incomplete"])]
    if runs.empty:
        st.info("No finished run yet: start one on the Runs page.")
        return None
    titles = {int(r["id"]): run_title(r) for _, r in runs.iterrows()}
    ids = list(titles)
    if st.session_state.get(key) not in ids:
        st.session_state[key] = ids[min(default_index, len(ids) - 1)]
    return st.selectbox(label, ids, format_func=titles.get, key=key)


def latest_run_id(runs: pd.DataFrame):
    """The newest finished (or incomplete) run, or None."""
    done = runs[runs["status"].isin(["finished", "incomplete"])]
    return None if done.empty else int(done.iloc[0]["id"])


def pick_cohort(wb, key: str = state.COHORT) -> str | None:
    """A selectbox of cohorts, defaulting to the study's development cohort."""
    cohorts = state.read(wb.study.cohorts)
    names = cohorts["name"].tolist()
    if not names:
        st.info("No reports yet: import some with `workbench import reports FILE --cohort dev`.")
        return None
    if st.session_state.get(key) not in names:
        st.session_state[key] = wb.config.dev_cohort if wb.config.dev_cohort in names else names[0]
    counts = dict(zip(cohorts["name"], cohorts["reports"], strict=False))
    return st.selectbox("Cohort", names, key=key, format_func=lambda n: f"{n} ({counts[n]} reports)", width=360)


# ---------------------------------------------------------------- background jobs


def job_panel(job: state.Job, describe) -> None:
    """Live progress of a background job (polled twice a second); reruns the page when it ends."""

    def body() -> None:
        if job.running:
            fraction, text = describe(job.progress)
            st.progress(min(max(fraction, 0.0), 1.0), text=text)
            if st.button("Cancel", key=state.widget_key("cancel", job.name), help="Stop after the calls in flight"):
                job.cancel.set()
        elif not job.seen:
            job.seen = True
            st.rerun()

    if job.running:
        st.fragment(body, run_every=0.5)()
    else:
        job.seen = True


def download_csv(frame: pd.DataFrame, file_name: str, label: str = "Download CSV", key: str | None = None) -> None:
    """A CSV download of a table."""
    st.download_button(
        md(label),
        to_csv(frame).encode("utf-8"),
        file_name=file_name,
        mime="text/csv",
        key=key or state.widget_key("csv", file_name),
        on_click="ignore",
    )


def viewer_timezone() -> str:
    """The browser's timezone (IANA name), UTC when unknown."""
    try:
        return st.context.timezone or "UTC"
    except Exception:  # no browser (AppTest, bare mode)
        return "UTC"


def count(n: int, noun: str) -> str:
    """'1 draft', '2 drafts': a count with its noun in the right number (plural by -s)."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def when(value, tz: str | None = None) -> str:
    """A stored UTC timestamp as the viewer's local time to the minute, with the zone's abbreviation."""
    stamps = when_column(pd.Series([value]), tz)
    return stamps.iloc[0]


def when_column(values: pd.Series, tz: str | None = None) -> pd.Series:
    """Stored UTC timestamps as the viewer's local time to the minute ('' when missing or unreadable)."""
    tz = tz or viewer_timezone()
    stamps = pd.to_datetime(values, utc=True, errors="coerce", format="ISO8601")
    try:
        local = stamps.dt.tz_convert(tz)
    except Exception:  # an unknown zone name from the browser
        local, tz = stamps, "UTC"
    return local.dt.strftime("%Y-%m-%d %H:%M %Z").fillna("")


def audit_change(old_json: str, new_json: str) -> str:
    """An audit event's old and new values as one readable line: 'value: 0 → 1; reason: ...'."""

    def load(text):
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text

    def show(value) -> str:
        if isinstance(value, list):
            return ", ".join(show(v) for v in value) or "(none)"
        if isinstance(value, dict):
            return "; ".join(f"{k}: {show(v)}" for k, v in value.items())
        return "(empty)" if value in ("", None) else str(value)

    old, new = load(old_json), load(new_json)
    if isinstance(old, dict) and isinstance(new, dict):
        keys = list(dict.fromkeys([*old, *new]))
        parts = [
            f"{k}: {show(old.get(k))} → {show(new.get(k))}"
            if k in old and old.get(k) != new.get(k)
            else f"{k}: {show(new[k])}"
            for k in keys
            if k in new and (k not in old or old.get(k) != new.get(k))
        ]
        parts += [f"{k}: {show(old[k])} → (removed)" for k in keys if k not in new]
        return "; ".join(parts) or "no change"
    if old is None:
        return show(new) if new is not None else ""
    return f"{show(old)} → {show(new)}"


FIELD_NAMES = {
    "task": "question",
    "definition": "definition",
    "hedged": "hedged wording",
    "notes": "notes",
    "look_for": "look for",
    "do_not_label_when": "do not label when",
    "examples": "few-shot examples",
}


def field_changes(fields: dict) -> list[str]:
    """A prompt's field-level difference (policy.diff_label_prompts) as lines a person reads: old → new, + added, − removed."""
    if not fields:
        return []
    if fields.get("created") or fields.get("deleted"):
        return ["the label's prompt was " + ("created" if fields.get("created") else "deleted")]

    def name(field: str) -> str:
        return FIELD_NAMES.get(field, field.replace("temporal.", "temporal wording: "))

    lines = [f"{name(f)}: {a!s} → {b!s}" for f, (a, b) in fields.get("changed", {}).items()]
    lines += [f"{name(f)}: + {item}" for f, items in fields.get("added", {}).items() for item in items]
    lines += [f"{name(f)}: − {item}" for f, items in fields.get("removed", {}).items() for item in items]
    return lines


def label_quality(table: pd.DataFrame, names: dict) -> pd.DataFrame:
    """Per label F1 first, then precision, recall, accuracy, prevalence and counts (Evaluation.table rows)."""

    def fmt(values):
        return [("n/a" if pd.isna(v) else f"{v:.3f}") for v in values]

    out = pd.DataFrame({"label": [names.get(lab, lab) for lab in table.index], "F1": fmt(table["f1"])})
    if "f1_lo" in table:
        out["F1 95% interval"] = [
            f"[{lo:.3f}, {hi:.3f}]" if not pd.isna(lo) else "n/a"
            for lo, hi in zip(table["f1_lo"], table["f1_hi"], strict=False)
        ]
    return out.assign(
        **{
            "precision": fmt(table["precision"]),
            "recall": fmt(table["recall"]),
            "accuracy": fmt(table["accuracy"]),
            "prevalence": fmt(table["support"] / table["n"].where(table["n"] > 0)),
            "positives": table["support"].to_numpy(),
            "false positives": table["fp"].to_numpy(),
            "false negatives": table["fn"].to_numpy(),
            "items": table["n"].to_numpy(),
        }
    )


def history_table(history: pd.DataFrame, names: dict) -> pd.DataFrame:
    """The iteration history with readable column names, local times and per-label F1 under display names."""
    if history is None or history.empty:
        return pd.DataFrame()
    out = pd.DataFrame(
        {
            "run": history["run"],
            "prompt version": "v" + history["version"].astype(str) + " " + history["prompt"],
            "model": history["model"],
            "started": when_column(history["started"]),
            "macro F1": history["macro_f1"].round(3),
            "macro accuracy": history["macro_accuracy"].round(3),
            "micro F1": history["micro_f1"].round(3),
        }
    )
    for column in [c for c in history.columns if c.startswith("f1:")]:
        label = column.split(":", 1)[1]
        out[f"F1 {names.get(label, label)}"] = history[column].round(3)
    return out


def decimals(frame: pd.DataFrame, **extra) -> dict:
    """column_config showing every float column of a table with 3 decimals (plus any extra settings)."""
    floats = {
        c: st.column_config.NumberColumn(format="%.3f") for c in frame.columns if pd.api.types.is_float_dtype(frame[c])
    }
    return {**floats, **extra}


def pct(value) -> str:
    """A proportion as text (n/a when undefined)."""
    return "n/a" if pd.isna(value) else f"{value:.3f}"


def call_facts(call: CallFacts | None, run_id: int) -> None:
    """One call's facts under a case: latency, tokens, cost, finish reason, the model that answered, its thinking."""
    if call is None:
        return
    cost = "unknown" if pd.isna(call.cost) else f"${call.cost:.6f}"
    cached = call.cached_tokens
    where = "" if call.run_id == run_id else f" (answer from the cache: made by run {call.run_id})"
    st.caption(
        md(
            f"Call: {call.latency_s:.2f} s, {call.attempts} attempt(s) · "
            f"{call.prompt_tokens} prompt + {call.completion_tokens} completion tokens"
            + (f" ({int(cached)} cached)" if not pd.isna(cached) else "")
            + f" · cost {cost} · finish {call.finish_reason or 'n/a'} · "
            f"model {call.reported_model or 'n/a'}{where}"
        )
    )
    if call.reasoning:
        with st.expander("The model's thinking (kept out of parsing)"):
            st.text(call.reasoning)


def _matrix_cell(value) -> str:
    """A matrix cell as text: nothing for a missing figure, floats with the digits they need."""
    if pd.isna(value):
        return ""
    if isinstance(value, float):
        return f"{value:.6f}".rstrip("0").rstrip(".") if value < 1 else f"{value:.2f}"
    return str(value)


def case_matrix(wb, report_id: str, label: str) -> None:
    """Every run's answer for one (report, label) side by side, then one call's request, raw reply and facts
    (pick the run); no expander inside, so callers may put it in one."""
    matrix = state.read_stable(wb.evaluation.case_matrix, report_id, label)
    if not matrix.columns:
        st.caption("No run has labelled this report for this label.")
        return
    st.dataframe(matrix.table().map(_matrix_cell), key=state.widget_key(f"matrix-{report_id}-{label}"))
    if matrix.withheld:
        st.caption(f"Left out: run(s) {', '.join(map(str, matrix.withheld))}, on a test or validation cohort or part.")
    cols = matrix.columns
    pick = st.selectbox(
        "Call of",
        range(len(cols)),
        index=len(cols) - 1,
        format_func=lambda i: cols[i].heading,
        key=state.widget_key(f"matrix-call-{report_id}-{label}"),
    )
    call_detail(cols[pick])


def call_detail(column) -> None:
    """One answer's call: latency, tokens, cost, finish reason, model, the messages sent, the raw reply, the thinking."""
    call = column.call
    if call is None:
        st.caption("No call was recorded for this answer.")
        return
    if call.latency_s is not None:
        call_facts(call.facts(), column.run_id)
    else:
        st.caption("No latency, tokens or cost recorded (the offline labeller records none).")
    st.caption(
        "Messages sent"
        + (
            ""
            if call.messages_match
            else " (rendered again: this prompt version now renders differently from what was sent)"
        )
    )
    for message in call.messages:
        st.text(f"[{message['role']}]\n{message['content']}")
    st.caption("Raw reply" if call.reply is not None else "Raw reply not kept; the parser's detail:")
    st.code(call.reply if call.reply is not None else column.detail, language=None)
    if call.reasoning:
        st.caption("The model's thinking (kept out of parsing)")
        st.text(call.reasoning)


def noise_lines(lines: list[str]) -> None:
    """The noise-floor lines beside fixed and broken: a warning where noise alone could produce the verdict."""
    for line in lines:
        (st.warning if "could produce" in line else st.caption)(line)
