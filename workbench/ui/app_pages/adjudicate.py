"""Adjudicate: tied or flagged items, every reader's vote and the notes; the senior reader decides."""

from __future__ import annotations

import streamlit as st

from workbench.ui import components, state


def render(wb) -> None:
    """Pick an item from the queue, read the report, the votes and notes, set the value with a reason."""
    st.title("Adjudicate")
    components.help_line("Items the reader vote did not settle (ties, too few readers) or that someone flagged as "
                         "'the reference is wrong'. Your value overrides the vote; the reason is kept in the history.")
    cohort = components.pick_cohort(wb)
    if cohort is None:
        return
    queue = state.read(wb, "adjudication_queue", cohort)
    if queue.empty:
        st.success("Nothing waits for adjudication in this cohort.")
        return
    names = wb.vocab.names()
    items = list(zip(queue["report_id"], queue["label"]))
    info = {(r.report_id, r.label): r for r in queue.itertuples(index=False)}
    if st.session_state.get(state.ADJ_ITEM) not in items:
        st.session_state[state.ADJ_ITEM] = items[0]
    item = st.selectbox(f"Item ({len(items)} waiting)", items, key=state.ADJ_ITEM, format_func=lambda it: (
        f"{it[0]} · {names.get(it[1], it[1])} · {int(info[it].positives)} of {int(info[it].n_readers)} positive"
        + (" · flagged" if info[it].flagged else "") + f" · {info[it].reason}"))
    report_id, label = item
    left, right = st.columns([3, 2])
    with left:
        st.subheader(components.md(f"{report_id}: {names.get(label, label)}"))
        components.report_text(state.read(wb, "report_text", report_id)["text"])
    with right, components.shown_errors("reading the votes"):
        votes = state.read(wb, "item_votes", report_id)
        st.markdown("**Votes on this label**")
        st.dataframe(votes[votes["label"] == label][["reader", "value"]], hide_index=True)
        notes = state.read(wb, "notes", label, report_id)
        st.markdown(f"**Notes** ({len(notes)})")
        if len(notes):
            st.dataframe(notes[["author", "category", "significance", "text", "reference_wrong", "created_at"]], hide_index=True)
        history = state.read(wb, "adjudication_history", report_id, label)
        if len(history):
            st.markdown("**Earlier adjudications**")
            st.dataframe(history[["value", "adjudicator", "reason", "created_at"]], hide_index=True)
        with st.expander("Votes on the other labels of this report"):
            st.dataframe(votes.pivot_table(index="label", columns="reader", values="value").rename(index=names))
    _decide(wb, report_id, label)


def _decide(wb, report_id: str, label: str) -> None:
    """The adjudication form."""
    with st.form(state.widget_key("adjudicate", report_id, label), clear_on_submit=True):
        value = st.radio("Reference value", [1, 0], index=None, horizontal=True,
                         format_func=lambda v: "1: present" if v else "0: absent")
        reason = st.text_area("Reason (required)", placeholder="e.g. 'trace effusion' counts as present per study policy")
        submitted = st.form_submit_button("Save adjudication", type="primary")
    if not submitted:
        return
    if value is None or not reason.strip():
        st.error("Choose a value and give a reason.")
        return
    components.do(wb, "saving the adjudication", wb.adjudicate, report_id, label, int(value), reason,
                  done=f"Adjudicated {report_id} / {label} = {value}.")
