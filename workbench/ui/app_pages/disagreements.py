"""Disagreements: triage where the labeller and the reference differ, one case per screen.

Filters live in the sidebar; the queue (click a row), the report and the note form sit side by
side so a case is read and noted without scrolling at 1440x900. The note form is one keyboard
component (workbench.ui.keyboard): 1-9/0 choose what went wrong ("reference label wrong" also
sends the item to adjudication), M/N/U the clinical significance, Enter (Ctrl+Enter in the text)
saves and opens the next case without a note, arrows move through the filtered queue.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import streamlit as st

from workbench.core.reading import min_seconds_shown
from workbench.errors import WorkbenchError
from workbench.services import PERMISSIONS
from workbench.services.results import Case
from workbench.study import SIGNIFICANCE
from workbench.ui import components, keyboard, state, suggestions

CATEGORY_KEYS = list("1234567890-=")  # the number row: the 11th and 12th (severity, comparison) on - and =
SIGNIFICANCE_KEYS = {"changes management": "M", "does not change management": "N", "unsure": "U"}
WRONG = "reference label wrong"  # the category that is also the flag: one control sends the item to adjudication
KIND_TEXT = {
    "FP": "FP: labeller said 1",
    "FN": "FN: labeller said 0",
    "failed": "failed call",
    "attribute": "attribute: side, severity or change differs",
}
ORDERS = {"errors": "Labels with most errors first", "broken": "Broken by the last prompt change first"}


def render(wb) -> None:
    """Filter a run's queue, open a case, note what went wrong, move on."""
    st.title("Disagreements")
    components.help_line(
        "Each row is a (report, label) where the labeller's answer differs from the reference. Click a "
        "row or use ← →; keys 1-9/0 say what went wrong, M/N/U how much it matters, Enter saves and "
        "opens the next case without a note."
    )
    names = wb.vocab.names()
    state.seed_from_url(
        "disagreements",
        {
            "run": (state.RUN, int),
            "label": (state.DIS_LABEL, lambda v: wb.vocab.ids[wb.vocab.ids.index(v)]),
            "case": (state.DIS_PICK, state.pair),
            "compare": (state.DIS_COMPARE, lambda v: tuple(map(int, state.pair(v, "-")))),
        },
    )
    opened = st.session_state.pop(state.CASE, None)  # sent here from the Runs page
    if opened:  # a CaseRef
        st.session_state[state.RUN], st.session_state[state.DIS_LABEL] = opened.run_id, opened.label
        st.session_state[state.DIS_KIND] = st.session_state[state.DIS_CATEGORY] = None
        st.session_state[state.DIS_PICK] = (opened.report_id, opened.label)
        st.session_state[state.DIS_COMPARE] = opened.compare
    with st.sidebar:
        run_id = components.pick_run(state.read_stable(wb.runs.runs), state.RUN)
        if run_id is None:
            return
        label = st.selectbox(
            "Label", wb.vocab.ids, index=None, key=state.DIS_LABEL, format_func=names.get, placeholder="all labels"
        )
        kind = st.selectbox(
            "Type",
            list(KIND_TEXT),
            index=None,
            key=state.DIS_KIND,
            placeholder="FP, FN, failed and attribute",
            format_func=KIND_TEXT.get,
        )
        category = st.selectbox(
            "Error category",
            wb.config.error_categories,
            index=None,
            key=state.DIS_CATEGORY,
            placeholder="any (or none yet)",
        )
        order = st.radio("Order", list(ORDERS), format_func=ORDERS.get, key=state.DIS_ORDER)
        st.button(
            "Re-sort the queue",
            key=state.widget_key("dis-resort"),
            help="The queue keeps its order while you "
            "note and flag cases; this sorts it again by the counts as they are now.",
            on_click=lambda: st.session_state.pop(state.DIS_KEPT, None),
        )
    with components.shown_errors("reading the queue"):
        # the queue behind the notes is kept across note saves; its note counts are read fresh
        base, order_text = state.read_stable(wb.triage.disagreement_queue, run_id, label, kind, None, order=order)
        queue = _kept_order(wb.with_fresh_notes(base, category), (run_id, label, kind, category, order))
        _page(wb, run_id, queue, order_text, names)
    suggestions.panel(wb, label, run_id)


def _page(wb, run_id: int, queue, order_text: str, names: dict) -> None:
    """Counts, then queue | report | answer and note form."""
    noted = int((queue["notes"] > 0).sum())
    st.markdown(f"**{noted} of {len(queue)} with a note** · order: {components.md(order_text)}")
    if queue.empty:
        st.success("No disagreement matches these filters.")
        return
    keys = _keys(queue)
    pick = st.session_state.get(state.DIS_PICK)
    if pick not in keys:  # gone from the queue (e.g. flagged): stay at the same place, never jump to the top
        pos = min(int(st.session_state.get(state.DIS_POS, 0)), len(keys) - 1)
        pick = keys[pos]
    pos = keys.index(pick)
    st.session_state[state.DIS_PICK], st.session_state[state.DIS_POS] = pick, pos
    compare = st.session_state.get(state.DIS_COMPARE)
    state.to_url(
        run=run_id,
        label=st.session_state.get(state.DIS_LABEL),
        case="|".join(pick),
        compare="-".join(map(str, compare)) if compare else None,
    )
    components.compact_chips()
    # the queue's five columns in sight at 1280 px, the row checkboxes' 33 px too (tests/ui: fit)
    left, middle, right = st.columns([5, 3, 4], gap="xsmall")
    with left:
        _queue_table(queue, names, pos)
    with components.shown_errors("opening the case"):
        case = dataclasses.replace(state.read_stable(wb.triage.case, run_id, *pick), notes=wb.notes(pick[1], pick[0]))
        with middle:
            _report(wb, run_id, case)
        with right:
            _answer(wb, run_id, case)
            _attribute_difference(queue.iloc[pos])
            _note_form(wb, run_id, case, queue, pos, names)
        _compare_panel(wb, case)
        with st.expander("The prompt that produced this answer"):
            for message in case.messages:
                st.caption(message["role"])
                st.text(message["content"])
        components.call_facts(case.call, run_id)
        if wb.actor.role in PERMISSIONS["see_unblinded"]:  # every run's answers: never for a blinded reader
            with st.expander("Every run of this report, side by side (each call's request and reply)"):
                components.case_matrix(wb, *pick)
        _example_form(wb, run_id, *pick)
    _warm_next(wb, run_id, queue, pos)


def _keys(queue) -> list[tuple[str, str]]:
    """(report_id, label) of every row (tolist: iterating an arrow string column one value at a time cost 0.07 s
    per pass over a 10,000-row queue, three passes per save)."""
    return list(zip(queue["report_id"].tolist(), queue["label"].tolist(), strict=False))


def _kept_order(queue, ident: tuple):
    """The queue in the order it had when this session first showed it: a flag changes the counts it is sorted
    by, and a queue that re-sorts under the reader loses their place ("Case 1 of 17" became "Case 4 of 16")."""
    kept = st.session_state.setdefault(state.DIS_KEPT, {})
    keys = _keys(queue)
    if ident not in kept:
        kept.clear()  # one queue at a time: other filters start afresh
        kept[ident] = keys
        return queue
    rank = {k: i for i, k in enumerate(kept[ident])}
    order = sorted(range(len(keys)), key=lambda i: (rank.get(keys[i], len(rank)), i))  # new cases at the end
    return queue.iloc[order].reset_index(drop=True)


def _warm_next(wb, run_id: int, queue, pos: int) -> None:
    """Read the case that Enter will open next while the reader is still on this one (the page is
    already drawn), so saving a note shows the next case without waiting for the database."""
    following = _next_without_note(queue, pos)
    if following is None:
        return
    report_id, label = queue["report_id"].iloc[following], queue["label"].iloc[following]
    try:
        state.read_stable(wb.triage.case, run_id, report_id, label)
        state.read_stable(wb.triage.label_phrases, label, state.read_stable(wb.runs.run_info, run_id).prompt_commit)
    except WorkbenchError:
        pass  # it is shown (with its error) when opened


def _queue_table(queue, names: dict, pos: int) -> None:
    """The filtered queue around the open case; clicking a row opens that case."""
    start, end = components.window(len(queue), pos)
    part = queue.iloc[start:end]
    table = part.assign(
        label=part["label"].map(names),
        note=part["notes"].map(lambda n: str(n) if n else ""),
        case=[f"→ {i}" if i == pos + 1 else str(i) for i in range(start + 1, end + 1)],
    )
    clicks = st.session_state.get(state.DIS_CLICKED, 0)  # a new key after each click clears the old selection
    event = st.dataframe(
        table[["case", "report_id", "label", "type", "note"]],
        hide_index=True,
        height=560,
        on_select="rerun",
        selection_mode="single-row",
        key=state.widget_key("dis-queue", clicks),
        column_config={
            "report_id": st.column_config.TextColumn("report", width=64),
            "case": st.column_config.TextColumn("#", width=36, help="→ marks the open case"),
            "label": st.column_config.TextColumn("label", width=150),
            "type": st.column_config.TextColumn("type", width=40),
            "note": st.column_config.TextColumn("note", width=36, help="Notes on the case"),
        },
    )
    if end - start < len(queue):
        st.caption(f"Cases {start + 1}-{end} of {len(queue)} around the open one; ← → or the filters reach the rest.")
    rows = event.selection.rows if event else []
    if rows:
        st.session_state[state.DIS_CLICKED] = clicks + 1
        _go(queue, start + rows[0])
        st.rerun()


def _go(queue, pos: int) -> None:
    """Open the case at a queue position."""
    st.session_state[state.DIS_PICK] = (queue["report_id"].iloc[pos], queue["label"].iloc[pos])
    st.session_state[state.DIS_POS] = pos


def _report(wb, run_id: int, case: Case) -> None:
    """The report with labelled highlights."""
    pred = case.prediction or {}
    run = state.read_stable(wb.runs.run_info, run_id)
    with components.shown_errors("finding the label's phrases"):
        phrases = state.read_stable(wb.triage.label_phrases, case.label, run.prompt_commit)
    components.highlighted_report(case.text, pred.get("evidence") or "", phrases)


def _value(v) -> str:
    return "no answer" if pd.isna(v) else str(int(v))


def _answer(wb, run_id: int, case: Case) -> None:
    """The labeller's answer and evidence beside the reference and the votes."""
    pred = case.prediction or {}
    votes = case.votes
    positive = int(votes["value"].sum()) if len(votes) else 0
    wb.reading.record_look(case.report_id)  # the user's own reading of it can no longer change (blinding)
    st.markdown(
        f"Labeller (run {run_id}): **{_value(pred.get('value'))}** ({components.md(pred.get('status', 'no answer'))})"
        f" · reference: **{_value(case.reference)}** ({components.md(case.reference_status)})"
        f" · votes: {positive} of {len(votes)} positive"
    )
    if pred.get("detail"):
        st.caption("Parser detail:")
        st.text(pred["detail"])
    if len(case.notes):
        notes = case.notes
        st.caption(
            f"{len(notes)} earlier note(s): "
            + components.md(
                "; ".join(
                    f"{a}: {c} ({s})"
                    for a, c, s in zip(notes["author"], notes["category"], notes["significance"], strict=False)
                )
            )
        )


def _attribute_difference(row) -> None:
    """For an attribute case (presence agrees), which attributes differ: otherwise 1 beside 1 explains nothing."""
    if row.get("type") == "attribute":
        st.markdown(
            f"**Attributes differ** ({components.md(str(row['attribute_category']))}): "
            f"{components.md(str(row['detail']))}"
        )


def _note_form(wb, run_id: int, case: Case, queue, pos: int, names: dict) -> None:
    """Quick note as one keyboard form: category and significance by key, optional text, Enter (or
    Ctrl+Enter in the text) saves and opens the next case without a note; the arrows move."""
    item = f"{case.report_id}|{case.label}"
    draft = st.session_state.setdefault(state.DIS_NOTE, {})
    values = draft.get(item) or {"category": _suggested_category(wb, queue.iloc[pos]), "significance": None, "text": ""}
    categories = [
        {
            "id": c,
            "label": c + (" (sends it to adjudication)" if c == WRONG else ""),
            "key": CATEGORY_KEYS[i] if i < len(CATEGORY_KEYS) else None,
        }
        for i, c in enumerate(wb.config.error_categories)
    ]
    data = {
        "item": {
            "id": item,
            "heading": f"Case {pos + 1} of {len(queue)} · {case.report_id} · {names.get(case.label, case.label)}",
        },
        "groups": [
            {"id": "category", "title": "What went wrong", "kind": "one", "options": categories},
            {
                "id": "significance",
                "title": "Clinical significance",
                "kind": "one",
                "options": [
                    {"id": v, "label": v, "key": SIGNIFICANCE_KEYS.get(v, "").lower() or None} for v in SIGNIFICANCE
                ],
            },
        ],
        "values": values,
        "text": {
            "id": "text",
            "label": "Note (optional)",
            "placeholder": "e.g. 'no longer seen' means resolved",
            "hint": "In the note, Ctrl+Enter saves and Esc leaves the field.",
        },
        "require": [
            {"ids": ["category"], "message": "Choose what went wrong (1-9, 0) first."},
            {"ids": ["significance"], "message": "Choose its clinical significance (M, N, U) first."},
        ],
        "nav": {"prev": pos > 0, "next": pos < len(queue) - 1},
        "save_label": "Save, next",
        "context": {"run": run_id},
        "min_seconds_shown": min_seconds_shown(wb.config.reading),
    }
    keyboard.form(
        state.DIS_FORM,
        data,
        on_action=lambda payload: _act(wb, run_id, queue, payload),
        on_draft=lambda d: draft.update({d["item"]: d["values"]}),
        presses=wb,  # one Enter is applied once, whatever the load (the press is claimed in the database)
    )


def _suggested_category(wb, row) -> str | None:
    """An attribute case starts with its own error category chosen (laterality/location, severity,
    comparison) when the study has it; the reader may pick another."""
    if row.get("type") != "attribute":
        return None
    first = str(row.get("attribute_category") or "").split(", ")[0]
    return first if first in wb.config.error_categories else None


def _act(wb, run_id: int, queue, payload: dict) -> str | None:
    """Enter saves the note sent (exactly what was on screen) and opens the next case without a note;
    the arrows move. Returns an error message, or None."""
    report_id, _, label = str(payload.get("item", "")).partition("|")
    keys = _keys(queue)
    if (report_id, label) not in keys:
        return f"Not saved: {report_id} / {label} is not in this queue any more."
    pos = keys.index((report_id, label))
    if payload.get("kind") in ("prev", "next"):
        st.session_state.setdefault(state.DIS_NOTE, {})[payload["item"]] = payload.get("values")
        _go(queue, max(pos - 1, 0) if payload["kind"] == "prev" else min(pos + 1, len(queue) - 1))
        return None
    values = payload.get("values") or {}
    wrong = values.get("category") == WRONG
    wb.add_note(
        report_id,
        label,
        values.get("category"),
        values.get("significance"),
        str(values.get("text") or ""),
        reference_wrong=wrong,
        run_id=run_id,
    )
    state.bump(wb, notes_only=not wrong)  # a flag changes the reference: everything is read again
    st.session_state.get(state.DIS_NOTE, {}).pop(payload["item"], None)
    state.flash(f"Note saved on {report_id} / {wb.vocab.names().get(label, label)}.", "toast")
    following = _next_without_note(queue.assign(notes=np.where(np.arange(len(queue)) == pos, 1, queue["notes"])), pos)
    if following is not None:
        _go(queue, following)
    return None


def _next_without_note(queue, pos: int) -> int | None:
    """The first position after pos (wrapping) whose case has no note yet (vectorised: queues run to 10,000s)."""
    order = np.r_[pos + 1 : len(queue), 0:pos]
    free = order[queue["notes"].to_numpy()[order] == 0]
    return int(free[0]) if len(free) else None


def _compare_panel(wb, case: Case) -> None:
    """A case opened from Compare: both runs' answers and evidence, and the label's prompt diff."""
    pair = st.session_state.get(state.DIS_COMPARE)
    if not pair:
        return
    run_a, run_b = pair
    with st.container(border=True):
        st.markdown(f"**Before and after** · run {run_a} → run {run_b}")
        c = st.columns(2)
        for col, run_id, title in ((c[0], run_a, "Before"), (c[1], run_b, "After")):
            other = state.read_stable(wb.triage.case, run_id, case.report_id, case.label)
            pred = other.prediction or {}
            col.markdown(f"{title} (run {run_id}): **{_value(pred.get('value'))}**")
            col.text(pred.get("evidence") or "(no evidence quoted)")
        if case.label in wb.vocab.asked_ids:
            commit_a, commit_b = (
                state.read_stable(wb.runs.run_info, run_a).prompt_commit,
                state.read_stable(wb.runs.run_info, run_b).prompt_commit,
            )
            diff = state.read_stable(wb.prompts.prompt_diff, case.label, commit_a, commit_b)
            st.caption(f"Prompt of this label, {commit_a[:8]} → {commit_b[:8]}:")
            st.code(diff.unified or "(the prompt of this label did not change)", language="diff", wrap_lines=True)
            if diff.fields:
                st.text("\n".join(components.field_changes(diff.fields)))
        st.button(
            "Stop comparing",
            key=state.widget_key("dis-stop-compare"),
            on_click=lambda: st.session_state.update({state.DIS_COMPARE: None}),
        )


def _example_form(wb, run_id: int, report_id: str, label: str) -> None:
    """One click: this case becomes a few-shot example in your draft of the label's prompt."""
    with st.form(state.widget_key("example", run_id, report_id, label), clear_on_submit=True, border=False):
        c = st.columns([3, 1], vertical_alignment="bottom")
        why = c[0].text_input(
            "Why (shown to the model with the example)", placeholder="optional; the latest note is used"
        )
        submitted = c[1].form_submit_button("Add as few-shot example")
    if submitted:
        components.do(
            wb,
            "adding the example",
            wb.add_example_from_case,
            report_id,
            label,
            why,
            run_id=run_id,
            done=lambda res: (
                (f"Added {report_id} to your draft of {label} (see Prompts). Warning: " + " ".join(res[1]), "warning")
                if res[1]
                else f"Added {report_id} to your draft of {label} (see Prompts)."
            ),
        )
