"""Prompts: edit a label's prompt as your draft, see the notes on its errors, save it as a version."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.core.prompts import POLICY_VALUES, Example, LabelPrompt
from workbench.errors import UserError
from workbench.ui import components, state, suggestions

EXAMPLE_COLUMNS = ["text", "value", "why", "source_report_id", "note"]
TEMPORAL_HINTS = {"resolved": "no longer seen", "stable": "unchanged", "improving": "decreasing", "prior": "history of"}


def render(wb) -> None:
    """Editor on the user's draft, notes beside it, diff, commit, history with revert, policy table."""
    st.title("Prompts")
    components.help_line(
        "Edit one label's prompt as your draft (only you see it), read the error notes on its "
        "current disagreements, then save it as a new version (a Git commit) and re-run."
    )
    names = wb.vocab.names()
    state.seed_from_url(
        "prompts", {"label": (state.PROMPT_LABEL, lambda v: wb.vocab.asked_ids[wb.vocab.asked_ids.index(v)])}
    )
    label = st.selectbox("Label", wb.vocab.asked_ids, key=state.PROMPT_LABEL, format_func=names.get)
    state.to_url(label=label)
    components.lazy_tabs(
        state.PROMPTS_TAB,
        {
            "Edit": lambda: _edit(wb, label),
            "History": lambda: _history(wb, label),
            "Policy across labels": lambda: _policy(wb),
        },
    )


def _policy(wb) -> None:
    """Every label's hedge and temporal policy, with the inconsistencies found."""
    st.dataframe(state.read(wb.prompts.policy_table), hide_index=True)
    for finding in state.read(wb.prompts.policy_conflicts):
        st.warning(components.md(f"{finding.kind}: {finding.message}"))


def _edit(wb, label: str) -> None:
    """The editor on your draft with the notes beside it, the difference, and saving a version."""
    lp, base, exists = state.read(wb.prompts.draft, label)
    left, right = st.columns([3, 2])
    with left:
        _editor(wb, lp, base, exists)
    with right:
        _notes(wb, label)
    _diff(wb, label, exists)
    if exists:
        _evaluate_drafts(wb)
    suggestions.panel(wb, label)
    _commit(wb, label, exists)


def _editor(wb, lp: LabelPrompt, base: str, exists: bool) -> None:
    """The label's fields in one form; saving keeps them as your draft (validated, not yet a version)."""
    st.caption(("Your draft" if exists else "The current version") + f", based on version {base[:8]}")
    with st.form(state.widget_key("prompt", lp.label, hash(lp) & 0xFFFFFFFF)):
        task = st.text_input("Question", lp.task)
        definition = st.text_area("Definition", lp.definition)
        look_for = st.text_area("Look for (one phrase per line)", "\n".join(lp.look_for))
        exclusions = st.text_area("Do not label when (one rule per line)", "\n".join(lp.do_not_label_when))
        st.markdown("**Policy**: how each kind of wording counts for this label")
        c = st.columns(2)
        hedged = c[0].radio(
            "Hedged ('cannot exclude', 'possible', 'may represent')",
            POLICY_VALUES,
            index=POLICY_VALUES.index(lp.hedged),
            horizontal=True,
        )
        temporal = {
            k: c[(i + 1) % 2].radio(
                f"{k.capitalize()} ('{TEMPORAL_HINTS[k]}')",
                POLICY_VALUES,
                index=POLICY_VALUES.index(v),
                horizontal=True,
            )
            for i, (k, v) in enumerate(lp.temporal_policy().items())
        }
        examples = st.data_editor(
            _examples_frame(lp),
            num_rows="dynamic",
            hide_index=True,
            column_config={
                "value": st.column_config.SelectboxColumn("value", options=[0, 1], required=True),
                "text": st.column_config.TextColumn("example text", width="large", required=True),
            },
        )
        notes = st.text_area("Notes for editors (not sent to the model)", lp.notes)
        saved = st.form_submit_button("Save draft", type="primary")
    if saved:
        components.do(
            wb,
            "saving the draft",
            lambda: wb.save_draft(
                LabelPrompt(
                    label=lp.label,
                    task=task.strip(),
                    definition=definition.strip(),
                    look_for=_lines(look_for),
                    do_not_label_when=_lines(exclusions),
                    hedged=hedged,
                    temporal=tuple(temporal.items()),
                    examples=_examples(examples),
                    notes=notes.strip(),
                ),
                base,
            ),
            done=f"Draft of {lp.label} saved.",
        )
    if exists and st.button("Discard my draft", key=state.widget_key("discard", lp.label)):
        components.do(wb, "discarding the draft", wb.discard_draft, lp.label, done="Draft discarded.")


def _lines(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def _examples_frame(lp: LabelPrompt) -> pd.DataFrame:
    rows = [
        {
            "text": e.text,
            "value": e.value,
            "why": e.why,
            "source_report_id": e.source_report_id or "",
            "note": e.note or "",
        }
        for e in lp.examples
    ]
    return pd.DataFrame(rows, columns=EXAMPLE_COLUMNS)


def _examples(frame: pd.DataFrame) -> tuple[Example, ...]:
    """Edited rows back to examples; blank rows are dropped, a missing value is an error."""
    out = []
    for row in frame.fillna("").to_dict("records"):
        if not str(row["text"]).strip():
            continue
        if row["value"] in ("", None):
            raise UserError(f"the example {str(row['text'])[:40]!r} needs a value (0 or 1)")
        out.append(
            Example(
                text=str(row["text"]).strip(),
                value=int(row["value"]),
                why=str(row["why"]).strip(),
                source_report_id=str(row["source_report_id"]).strip() or None,
                note=str(row["note"]).strip() or None,
            )
        )
    return tuple(out)


def _notes(wb, label: str) -> None:
    """The error notes on this label's disagreements in the latest run."""
    latest = components.latest_run_id(state.read(wb.runs.runs))
    st.markdown("**Error notes on current disagreements**")
    if latest is None:
        st.info("No run yet.")
        return
    queue = state.read(wb.triage.disagreements, latest, label, None, None)
    notes = state.read(wb.triage.notes, label)
    notes = notes[notes["report_id"].isin(set(queue["report_id"]))]
    st.caption(
        f"Run {latest}: {len(queue)} disagreements on this label "
        f"({int((queue['type'] == 'FP').sum())} FP, {int((queue['type'] == 'FN').sum())} FN), {len(notes)} notes"
    )
    if len(notes):
        st.dataframe(notes["category"].value_counts().rename("notes"))
        st.dataframe(notes[["report_id", "category", "significance", "text", "reference_wrong"]], hide_index=True)
    if len(queue):
        st.dataframe(queue[["report_id", "type", "notes", "categories", "evidence"]], hide_index=True, height=240)


def _evaluate_drafts(wb) -> None:
    """Label your drafts through the call cache on tuning and validation beside the committed version
    (the same figures as `workbench evaluate-drafts`); nothing is committed."""
    if not st.button("Evaluate my drafts on tuning and validation", key=state.widget_key("evaluate-drafts")):
        return
    with components.shown_errors("evaluating the drafts"):
        result = wb.evaluate_drafts()
        rows = [
            {
                "label": e["label"],
                "part": part,
                "F1 now": m["f1_before"],
                "F1 with the draft": m["f1_after"],
                "fixed": m["fixed"],
                "broken": m["broken"],
                "verdict": m["verdict"] if part == "validation" else "",
            }
            for e in result.labels
            for part, m in e["parts"].items()
        ]
        st.dataframe(pd.DataFrame(rows).round(3), hide_index=True)
        st.caption(
            " · ".join(
                f"{part}: macro F1 {components.pct(result.before[part]['macro_f1'])} -> "
                f"{components.pct(result.after[part]['macro_f1'])}"
                for part in ("tuning", "validation")
            )
            + f" · against run {result.run}; {result.after['validation']['labels']}; nothing is committed"
        )


def _diff(wb, label: str, exists: bool) -> None:
    """What the draft changes (or what the last version changed)."""
    if exists:
        diff, title = state.read(wb.prompts.diff_against_draft, label), "Your draft against the version it started from"
    else:
        previous = state.read(wb.prompts.previous_version, label)
        if previous is None:
            st.caption("This label has not changed since the first version.")
            return
        diff, title = state.read(wb.prompts.prompt_diff, label, previous, None), f"Last change (from {previous[:8]})"
    with st.expander(title, expanded=exists):
        st.code(diff.unified or "(no difference)", language="diff", wrap_lines=True)
        changes = components.field_changes(diff.fields)
        if changes:
            st.caption("Field by field:")
            st.text("\n".join(changes))


def _commit(wb, label: str, exists: bool) -> None:
    """Save drafts as one new version with a message."""
    drafts = state.read(wb.prompts.drafts)
    st.markdown(f"**Save as a new version** · your open drafts: {', '.join(drafts['label']) or 'none'}")
    with st.form(state.widget_key("commit", label), clear_on_submit=True):
        message = st.text_input("Message (what changed and why)", key=state.COMMIT_MESSAGE)
        which = st.radio("Save", ["this label", "all my drafts"], horizontal=True)
        submitted = st.form_submit_button("Save version", type="primary", disabled=drafts.empty)
    if submitted:
        labels = [label] if which == "this label" else drafts["label"].tolist()
        if not message.strip():
            st.error("Write a message saying what changed and why.")
        elif which == "this label" and not exists:
            st.error("You have no draft of this label: edit it and press 'Save draft' first.")
        else:
            before = wb.prompt_commit()
            components.do(
                wb,
                "saving the version",
                wb.commit_drafts,
                labels,
                message.strip(),
                done=lambda commit: _saved_message(wb, before, commit, labels),
            )


def _saved_message(wb, before: str, commit: str, labels: list[str]) -> str | tuple[str, str]:
    """What a save says: the version, and as a warning any contradiction it put in a label's prompt."""
    text = f"Saved version {commit[:8]} ({', '.join(labels)}). Re-run on the Runs page."
    made = wb.contradictions_saved(before, commit, labels)
    if not made:
        return text
    found = "; ".join(f.message for f in made)
    return (
        f"{text} It saved {len(made)} contradiction(s) an LLM cannot follow: {found} (Policy across labels).",
        "warning",
    )


def _history(wb, label: str) -> None:
    """Versions of this label, newest first, with the difference to the current one and revert."""
    history = state.read(wb.prompts.prompt_history, label)
    st.dataframe(
        history.assign(when=components.when_column(history["when"]))[
            ["short", "when", "author", "message", "labels", "frozen as"]
        ].rename(columns={"short": "version"}),
        hide_index=True,
    )
    if len(history) < 2:
        return
    commits = history["commit"].tolist()[1:]
    messages = dict(zip(history["commit"], history["message"], strict=False))
    ref = st.selectbox("Earlier version", commits, key=state.REVERT_TO, format_func=lambda c: f"{c[:8]}: {messages[c]}")
    st.code(
        state.read(wb.prompts.prompt_diff, label, ref, None)["unified"] or "(same as now)",
        language="diff",
        wrap_lines=True,
    )
    if st.button(f"Revert {label} to {ref[:8]}", key=state.widget_key("revert", label)):
        components.do(
            wb, "reverting", wb.revert_label, label, ref, done=lambda c: f"Reverted {label}: new version {c[:8]}."
        )
