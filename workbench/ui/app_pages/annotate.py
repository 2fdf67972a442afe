"""Annotate: one reader, one report, every label in one form; blinded to everyone else."""

from __future__ import annotations

import streamlit as st

from workbench.ui import components, state


def render(wb) -> None:
    """Read the whole report, tick what it describes, save; only your own readings are shown."""
    st.title("Annotate")
    components.help_line("Read the report and tick every finding it describes (unticked = 0). You see only your "
                         "own readings: other readers' labels and the labeller's answers stay hidden.")
    reader = _reader(wb)
    cohort = components.pick_cohort(wb)
    if not reader or cohort is None:
        st.info("Choose or type your reader name in the sidebar to start.")
        return
    queue = state.read(wb, "reading_queue", reader, cohort)
    if queue.empty:
        st.info(f"Cohort {cohort} has no reports.")
        return
    done = int(queue["complete"].sum())
    st.progress(done / len(queue), text=f"{reader}: {done} of {len(queue)} reports complete")
    marks = dict(zip(queue["report_id"], queue["marked"]))
    n_labels = len(wb.vocab.asked_ids)
    if st.session_state.get(state.ANN_REPORT) not in marks:
        pending = queue.loc[~queue["complete"], "report_id"]
        st.session_state[state.ANN_REPORT] = pending.iloc[0] if len(pending) else queue["report_id"].iloc[0]
    report_id = st.selectbox("Report", list(marks), key=state.ANN_REPORT, format_func=lambda r: (
        f"{r}  ✓ done" if marks[r] >= n_labels else f"{r}  ({marks[r]} of {n_labels} marked)" if marks[r] else r))
    components.report_text(state.read(wb, "report_text", report_id)["text"])
    mine = state.read(wb, "my_readings", reader, report_id)
    prior = dict(zip(mine["label"], mine["value"]))
    names = wb.vocab.names()
    with st.form(state.widget_key("annotate", reader, report_id), border=True):
        st.caption("Tick = the report describes it (1). Tab moves, Space ticks, Enter on the button saves. "
                   + "".join(f"{names[d]} is derived (1 when nothing else is ticked). " for d in wb.vocab.derived_ids))
        columns = st.columns(3)
        for i, label in enumerate(wb.vocab.asked_ids):
            columns[i % 3].checkbox(names[label], value=bool(prior.get(label, 0)),
                                    key=state.widget_key("ann", reader, report_id, label))
        st.form_submit_button("Save and next", type="primary", on_click=_save,
                              args=(wb, reader, report_id, mine, queue))


def _reader(wb) -> str | None:
    """Who is reading: the signed-in user, or (local mode) a name chosen or typed in the sidebar."""
    if wb.config.auth != "none":
        return wb.actor.user
    with st.sidebar:
        chosen = st.selectbox("Reader", state.read(wb, "readers"), key=state.READER, index=None,
                              placeholder="Choose your name")
        typed = st.text_input("... or a new reader name", key=state.NEW_READER, placeholder="e.g. dr-smith")
        return typed.strip() or chosen


def _save(wb, reader: str, report_id: str, mine, queue) -> None:
    """Form callback: record the reading, then move to the next unfinished report."""
    from workbench.services import ConflictError, PermissionDenied

    values = {lab: int(bool(st.session_state[state.widget_key("ann", reader, report_id, lab)]))
              for lab in wb.vocab.asked_ids}
    versions = {lab: int(v) for lab, v in zip(mine["label"], mine["version"])}
    try:
        changed = wb.record_reading(reader, report_id, values, expected_versions=versions)
    except ConflictError as exc:
        state.bump(wb)
        for label in wb.vocab.asked_ids:  # show the stored values again, not the refused ones
            st.session_state.pop(state.widget_key("ann", reader, report_id, label), None)
        state.flash(f"Not saved: {exc}. The form now shows the stored values; redo your change.", "error")
        return
    except (PermissionDenied, ValueError) as exc:
        state.flash(f"Not saved: {exc}", "error")
        return
    state.bump(wb)
    state.flash(f"Saved {report_id} for {reader}: {changed['added']} new, {changed['changed']} changed, "
                f"{changed['unchanged']} unchanged.")
    ids = queue["report_id"].tolist()
    later = queue.iloc[ids.index(report_id) + 1:]
    pending = later.loc[~later["complete"], "report_id"].tolist() or \
        queue.loc[~queue["complete"] & (queue["report_id"] != report_id), "report_id"].tolist()
    if pending:
        st.session_state[state.ANN_REPORT] = pending[0]
