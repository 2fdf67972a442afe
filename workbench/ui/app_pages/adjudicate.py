"""Adjudicate: flagged items first, then ties; every vote and note beside the report; decided by keys.

The decision is one keyboard form (workbench.ui.keyboard): 1 / 0 set the value, Q W E T Y U pick a
preset reason (free text is optional), Enter saves and opens the next item, arrows move through the queue.
Below it, attribute ties (readers who ticked a finding split on its side, severity ...) are settled with
plain Streamlit widgets in their own form, which the keyboard form leaves alone (it ignores keys typed
into inputs).
"""

from __future__ import annotations

import streamlit as st

from workbench.core.reading import min_seconds_shown
from workbench.services import ReasonContradicts
from workbench.ui import components, keyboard, state

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
    components.help_line(
        "Items the reader vote did not settle: flagged ('the reference is wrong') first, then ties. "
        "1 / 0 sets the value, Q-U picks a reason, Enter saves and opens the next item."
    )
    state.seed_from_url("adjudicate", {"cohort": (state.COHORT, str), "item": (state.ADJ_ITEM, state.pair)})
    with st.sidebar:
        cohort = components.pick_cohort(wb)
    if cohort is None:
        return
    queue = state.read(wb.study.adjudication_worklist, cohort)
    flagged, ties = int(queue["flagged"].sum()), int((queue["why"] == "tie").sum())
    st.markdown(
        f"**{len(queue)} waiting** · {flagged} flagged, {ties} ties, {len(queue) - flagged - ties} other"
        " · order: flagged first, then ties, then reports in order"
    )
    if queue.empty:
        st.success("Nothing waits for adjudication in this cohort.")
    else:
        _presence(wb, queue, cohort)
    _attribute_ties(wb, cohort)


def _presence(wb, queue, cohort: str) -> None:
    """The presence items: the queue, the open item's report and its decision."""
    items = list(zip(queue["report_id"].tolist(), queue["label"].tolist(), strict=False))
    if st.session_state.get(state.ADJ_ITEM) not in items:
        pos = min(int(st.session_state.get(state.ADJ_POS, 0)), len(items) - 1)
        st.session_state[state.ADJ_ITEM] = items[pos]
    pos = items.index(st.session_state[state.ADJ_ITEM])
    st.session_state[state.ADJ_POS] = pos
    state.to_url(cohort=cohort, item="|".join(items[pos]))
    components.compact_chips()
    # every column of the queue (why, votes) in sight at 1280 px, the row checkboxes' 33 px too (tests/ui: fit)
    left, middle, right = st.columns([9, 5, 5], gap="xsmall")
    with left:
        _queue_table(wb, queue, pos)
    with middle:
        components.report_text(state.read(wb.reading.report_text, items[pos][0]).text)
    with right, components.shown_errors("reading the votes"):
        _decide(wb, queue, pos)
        _votes(wb, *items[pos])


def _queue_table(wb, queue, pos: int) -> None:
    """The queue (the open item marked →); clicking a row opens the item."""
    names = wb.vocab.names()
    table = queue.assign(
        label=queue["label"].map(names),
        item=[f"→ {i}" if i == pos + 1 else str(i) for i in range(1, len(queue) + 1)],
        votes=queue["positives"].astype(str) + " of " + queue["n_readers"].astype(str),
    )
    clicks = st.session_state.get(state.ADJ_CLICKED, 0)
    event = st.dataframe(
        table[["item", "report_id", "label", "why", "votes"]],
        hide_index=True,
        height=520,
        on_select="rerun",
        selection_mode="single-row",
        key=state.widget_key("adj-queue", clicks),
        column_config={
            "item": st.column_config.TextColumn("#", width=36, help="→ marks the open item"),
            "report_id": st.column_config.TextColumn("report", width=64),
            "label": st.column_config.TextColumn("label", width=150),
            "why": st.column_config.TextColumn("why", width=64),
            "votes": st.column_config.TextColumn("votes", width=52),
        },
    )
    rows = event.selection.rows if event else []
    if rows:
        st.session_state[state.ADJ_CLICKED] = clicks + 1
        _go(queue, rows[0])
        st.rerun()


def _go(queue, pos: int) -> None:
    st.session_state[state.ADJ_ITEM] = (queue["report_id"].iloc[pos], queue["label"].iloc[pos])
    st.session_state[state.ADJ_POS] = pos


def _votes(wb, report_id: str, label: str) -> None:
    """Every reader's vote on this label, the notes and earlier decisions."""
    votes = state.read(wb.study.item_votes, report_id)
    mine = votes[votes["label"] == label]
    st.markdown(
        "**Votes**: "
        + (
            components.md(", ".join(f"{r} {int(v)}" for r, v in zip(mine["reader"], mine["value"], strict=False)))
            or "none"
        )
    )
    notes = state.read(wb.triage.notes, label, report_id)
    for note in notes.itertuples(index=False):
        st.caption(
            components.md(
                f"Note by {note.author}: {note.category} ({note.significance})"
                + (" · reference wrong" if note.reference_wrong else "")
            )
        )
        if note.text:
            components.user_text(note.text)
    history = state.read(wb.study.adjudication_history, report_id, label)
    for h in history.itertuples(index=False):
        st.caption(
            components.md(f"Earlier: {int(h.value)} by {h.adjudicator} ({components.when(h.created_at)}), reason:")
        )
        components.user_text(h.reason)


def _decide(wb, queue, pos: int) -> None:
    """The decision as one keyboard form: 1 / 0 the value, Q-U a preset reason, optional text;
    Enter (Ctrl+Enter in the text) saves and opens the next item; the arrows move."""
    report_id, label = queue["report_id"].iloc[pos], queue["label"].iloc[pos]
    item = f"{report_id}|{label}"
    draft = st.session_state.setdefault(state.ADJ_DRAFT, {})
    data = {
        "item": {
            "id": item,
            "heading": f"Item {pos + 1} of {len(queue)} · {report_id} · "
            f"{wb.vocab.names().get(label, label)} · {queue['why'].iloc[pos]}",
        },
        "groups": [
            {
                "id": "value",
                "title": "Reference value",
                "kind": "one",
                "options": [
                    {"id": "1", "label": "1: present", "key": "1"},
                    {"id": "0", "label": "0: absent", "key": "0"},
                ],
            },
            {
                "id": "reason",
                "title": "Reason",
                "kind": "one",
                "note": "a key, or your own words below",
                "options": [
                    {"id": r, "label": r, "key": k.lower()} for r, k in zip(REASONS, REASON_KEYS, strict=False)
                ],
            },
        ],
        "values": draft.get(item) or {"value": None, "reason": None, "text": ""},
        "text": {
            "id": "text",
            "label": "Reason in your words (optional)",
            "placeholder": "e.g. 'trace effusion' counts as present per study policy",
            "hint": "In the text, Ctrl+Enter saves and Esc leaves the field.",
        },
        "require": [
            {"ids": ["value"], "message": "Choose the value (1 or 0) first."},
            {"ids": ["reason", "text"], "message": "Choose a reason (Q-U) or write one first."},
        ],
        "nav": {"prev": pos > 0, "next": pos < len(queue) - 1},
        "save_label": "Save and next",
        "min_seconds_shown": min_seconds_shown(wb.config.reading),
    }
    keyboard.form(
        state.ADJ_FORM,
        data,
        on_action=lambda payload: _act(wb, queue, payload),
        on_draft=lambda d: draft.update({d["item"]: d["values"]}),
        presses=wb,  # one Enter is applied once, whatever the load (the press is claimed in the database)
    )


def _act(wb, queue, payload: dict) -> str | None:
    """Enter records the decision sent (exactly what was on screen), then opens the item that now takes
    its place in the queue; the arrows move. Returns an error message, or None."""
    report_id, _, label = str(payload.get("item", "")).partition("|")
    items = list(zip(queue["report_id"].tolist(), queue["label"].tolist(), strict=False))
    if (report_id, label) not in items:
        return f"Not saved: {report_id} / {label} is not waiting any more."
    pos = items.index((report_id, label))
    values = payload.get("values") or {}
    if payload.get("kind") in ("prev", "next"):
        st.session_state.setdefault(state.ADJ_DRAFT, {})[payload["item"]] = values
        _go(queue, max(pos - 1, 0) if payload["kind"] == "prev" else min(pos + 1, len(queue) - 1))
        return None
    if values.get("value") not in ("0", "1"):
        return "Not saved: choose the value (1 or 0) first."
    reason = ": ".join(p for p in (values.get("reason"), str(values.get("text") or "").strip()) if p)
    decision = (payload["item"], values.get("value"), reason)
    try:  # the same decision sent again after the question is the adjudicator's confirmation
        wb.adjudicate(report_id, label, int(values.get("value")), reason, confirmed=_questioned(decision))
    except ReasonContradicts as e:
        st.session_state[state.ADJ_QUESTIONED] = decision
        return f"{str(e).capitalize()}: press Enter again to save it as it is."
    st.session_state.pop(state.ADJ_QUESTIONED, None)
    state.bump(wb)
    st.session_state.get(state.ADJ_DRAFT, {}).pop(payload["item"], None)
    state.flash(f"Adjudicated {report_id} / {wb.vocab.names().get(label, label)} = {values.get('value')}.", "toast")
    if pos + 1 < len(queue):  # the decided item leaves the queue: the next one moves into its place
        st.session_state[state.ADJ_ITEM] = items[pos + 1]
    st.session_state[state.ADJ_POS] = pos
    return None


def _questioned(decision: tuple) -> bool:
    """Whether this very decision (item, value, reason) was just questioned, so sending it again confirms it."""
    return st.session_state.get(state.ADJ_QUESTIONED) == decision


def _attribute_ties(wb, cohort: str) -> None:
    """Attribute ties of confirmed findings: the readers' values with their counts, the report, and a picker."""
    if not wb.vocab.attribute_specs():
        return
    ties = state.read(wb.attributes.attribute_ties, cohort)
    st.subheader("Attribute ties")
    if ties.empty:
        st.caption(
            "No attribute tie waits: the readers who ticked each finding agree on its side, severity and change."
        )
        return
    names = wb.vocab.names()
    keys = [f"{r}|{lab}|{a}" for r, lab, a in zip(ties["report_id"], ties["label"], ties["attribute"], strict=False)]
    if st.session_state.get(state.ADJ_ATTR_TIE) not in keys:
        st.session_state[state.ADJ_ATTR_TIE] = keys[0]
    st.caption(
        f"{len(ties)} waiting: readers who ticked a finding split on one of its attributes. Pick the tie "
        "(type to search), then the value (arrows); Enter in the reason field or the button saves."
    )
    st.dataframe(
        ties.assign(label=ties["label"].map(names))[["report_id", "label", "attribute", "votes"]],
        hide_index=True,
        height=min(36 * (len(ties) + 1) + 2, 220),
    )
    rows = dict(zip(keys, ties.itertuples(index=False), strict=False))
    key = st.selectbox(
        "Tie",
        keys,
        key=state.ADJ_ATTR_TIE,
        format_func=lambda k: (
            f"{rows[k].report_id} · {names.get(rows[k].label, rows[k].label)} · {rows[k].attribute}: {rows[k].votes}"
        ),
    )
    tie = rows[key]
    left, right = st.columns([3, 3])
    with left:
        components.report_text(state.read(wb.reading.report_text, tie.report_id).text)
    with right, components.shown_errors("saving the attribute"):
        _attribute_form(wb, tie, names.get(tie.label, tie.label))


def _attribute_form(wb, tie, label_name: str) -> None:
    """The tied values first, then the other allowed values; saved with an optional reason (audited)."""
    allowed = dict(wb.vocab.attribute_specs()[tie.label])[tie.attribute]
    tied = tie.tied.split(", ")
    options = tied + [v for v in allowed if v not in tied]
    key = f"{tie.report_id}|{tie.label}|{tie.attribute}"
    with st.form(state.widget_key("adj-attr", key), border=False):
        value = st.radio(
            f"{label_name}: {tie.attribute} (readers: {tie.votes})",
            options,
            index=None,
            horizontal=True,
            key=state.widget_key("adj-attr-value", key),
            format_func=lambda v: f"{v} (tied)" if v in tied else v,
        )
        reason = st.text_input(
            "Reason (optional)",
            key=state.widget_key("adj-attr-reason", key),
            placeholder="e.g. the impression says left",
        )
        saved = st.form_submit_button("Save attribute")
    if not saved:
        return
    if value is None:
        st.warning("Not saved: choose the value first.")
        return
    wb.adjudicate_attribute(tie.report_id, tie.label, tie.attribute, value, reason)
    state.bump(wb)
    state.flash(f"Adjudicated {tie.report_id} / {label_name} {tie.attribute} = {value}.", "toast")
    st.rerun()
