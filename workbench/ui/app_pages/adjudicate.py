"""Adjudicate: flagged items first, then ties; every vote and note beside the report; decided by keys.

Keys: 1 / 0 set the value, Q W E T Y U pick a preset reason (free text is optional), Enter saves
and opens the next item, arrows move through the queue.
"""

from __future__ import annotations

import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import components, state

REASONS = [
    "Stated in the report; a reader missed it",
    "Hedged wording: present per study policy",
    "Hedged wording: absent per study policy",
    "Resolved or prior: absent per study policy",
    "The finding belongs to another label",
    "Report ambiguous: senior reading",
]
REASON_KEYS = list("QWETYU")


def render(wb) -> None:
    """The queue, the item (report, votes, notes) and the decision."""
    st.title("Adjudicate")
    components.help_line("Items the reader vote did not settle: flagged ('the reference is wrong') first, then ties. "
                         "1 / 0 sets the value, Q-U picks a reason, Enter saves and opens the next item.")
    with st.sidebar:
        cohort = components.pick_cohort(wb)
    if cohort is None:
        return
    queue = state.read(wb, "adjudication_worklist", cohort)
    flagged, ties = int(queue["flagged"].sum()), int((queue["why"] == "tie").sum())
    st.markdown(f"**{len(queue)} waiting** · {flagged} flagged, {ties} ties, {len(queue) - flagged - ties} other"
                " · order: flagged first, then ties, then reports in order")
    if queue.empty:
        st.success("Nothing waits for adjudication in this cohort.")
        return
    items = list(zip(queue["report_id"], queue["label"]))
    if st.session_state.get(state.ADJ_ITEM) not in items:
        pos = min(int(st.session_state.get(state.ADJ_POS, 0)), len(items) - 1)
        st.session_state[state.ADJ_ITEM] = items[pos]
    pos = items.index(st.session_state[state.ADJ_ITEM])
    st.session_state[state.ADJ_POS] = pos
    components.compact_chips()
    left, middle, right = st.columns([2, 3, 3])
    with left:
        _queue_table(wb, queue)
    with middle:
        _item(wb, queue, pos)
    with right, components.shown_errors("reading the votes"):
        _votes(wb, *items[pos])
        _decide(wb, queue, pos)


def _queue_table(wb, queue) -> None:
    """The queue; clicking a row opens the item."""
    names = wb.vocab.names()
    table = queue.assign(label=queue["label"].map(names), item=range(1, len(queue) + 1),
                         votes=queue["positives"].astype(str) + " of " + queue["n_readers"].astype(str))
    clicks = st.session_state.get(state.ADJ_CLICKED, 0)
    event = st.dataframe(table[["item", "report_id", "label", "why", "votes"]], hide_index=True, height=520,
                         on_select="rerun", selection_mode="single-row", key=state.widget_key("adj-queue", clicks),
                         column_config={"item": "#", "report_id": "report"})
    rows = event.selection.rows if event else []
    if rows:
        st.session_state[state.ADJ_CLICKED] = clicks + 1
        _go(queue, rows[0])
        st.rerun()


def _go(queue, pos: int) -> None:
    st.session_state[state.ADJ_ITEM] = (queue["report_id"].iloc[pos], queue["label"].iloc[pos])
    st.session_state[state.ADJ_POS] = pos


def _item(wb, queue, pos: int) -> None:
    """Heading with navigation, and the report."""
    report_id, label = queue["report_id"].iloc[pos], queue["label"].iloc[pos]
    with st.container(horizontal=True, gap="small", vertical_alignment="center"):
        st.markdown(f"**Item {pos + 1} of {len(queue)}** · {components.md(report_id)} · "
                    f"{components.md(wb.vocab.names().get(label, label))} · {components.md(queue['why'].iloc[pos])}")
        st.button("Previous", key=state.widget_key("adj-prev"), shortcut="Left", disabled=pos == 0,
                  on_click=_go, args=(queue, max(pos - 1, 0)))
        st.button("Next", key=state.widget_key("adj-next"), shortcut="Right", disabled=pos >= len(queue) - 1,
                  on_click=_go, args=(queue, min(pos + 1, len(queue) - 1)))
    components.report_text(state.read(wb, "report_text", report_id)["text"])


def _votes(wb, report_id: str, label: str) -> None:
    """Every reader's vote on this label, the notes and earlier decisions."""
    votes = state.read(wb, "item_votes", report_id)
    mine = votes[votes["label"] == label]
    st.markdown("**Votes**: " + (components.md(", ".join(f"{r} {int(v)}" for r, v in zip(mine["reader"], mine["value"])))
                                 or "none"))
    notes = state.read(wb, "notes", label, report_id)
    for note in notes.itertuples(index=False):
        st.caption(components.md(f"Note by {note.author}: {note.category} ({note.significance})"
                                 + (" · reference wrong" if note.reference_wrong else "")))
        if note.text:
            components.user_text(note.text)
    history = state.read(wb, "adjudication_history", report_id, label)
    for h in history.itertuples(index=False):
        st.caption(components.md(f"Earlier: {int(h.value)} by {h.adjudicator} ({components.when(h.created_at)}), reason:"))
        components.user_text(h.reason)


def _decide(wb, queue, pos: int) -> None:
    """Value and reason by key; Enter saves and opens the next item."""
    item = (queue["report_id"].iloc[pos], queue["label"].iloc[pos])
    chosen = st.session_state.setdefault(state.ADJ_CHOICE, {})
    if chosen.get("item") != item:
        chosen.clear()
        chosen.update(item=item, value=None, reason=None)
    with st.container(horizontal=True, gap="small", key="chips-adj-value"):
        for value, text in ((1, "1: present"), (0, "0: absent")):
            st.button(text, key=state.widget_key("adj-value", value), shortcut=str(value),
                      type="primary" if chosen["value"] == value else "secondary",
                      on_click=chosen.update, kwargs={"value": value})
    st.caption("**Reason** (key; free text below is optional)")
    with st.container(horizontal=True, gap="small", key="chips-adj-reason"):
        for i, reason in enumerate(REASONS):
            st.button(reason, key=state.widget_key("adj-reason", i), shortcut=REASON_KEYS[i],
                      type="primary" if chosen["reason"] == reason else "secondary",
                      on_click=chosen.update, kwargs={"reason": reason})
    st.text_area("Reason in your words (optional)", key=state.widget_key("adj-text", *item), height=68,
                 placeholder="e.g. 'trace effusion' counts as present per study policy")
    st.button("Save and next", key=state.widget_key("adj-save"), type="primary", shortcut="Enter",
              on_click=_save, args=(wb, queue, pos))


def _save(wb, queue, pos: int) -> None:
    """Record the decision, then open the item that now takes this place in the queue."""
    chosen = st.session_state.get(state.ADJ_CHOICE, {})
    item = chosen.get("item")
    text = (st.session_state.get(state.widget_key("adj-text", *item), "") or "").strip() if item else ""
    reason = ": ".join(p for p in (chosen.get("reason"), text) if p)
    if item is None or chosen.get("value") is None or not reason:
        state.flash("Choose the value (1 or 0) and a reason (a preset key or your own words) first.", "error")
        return
    try:
        wb.adjudicate(item[0], item[1], int(chosen["value"]), reason)
    except WorkbenchError as exc:
        state.flash(f"Not saved: {exc}", "error")
        return
    state.bump(wb)
    state.flash(f"Adjudicated {item[0]} / {wb.vocab.names().get(item[1], item[1])} = {chosen['value']}.", "toast")
    if pos + 1 < len(queue):  # the decided item leaves the queue: the next one moves into its place
        st.session_state[state.ADJ_ITEM] = (queue["report_id"].iloc[pos + 1], queue["label"].iloc[pos + 1])
    chosen.clear()
