"""Annotate: one report per screen from the reader's work list, keyboard first, blinded.

Every tick (with the comment and the attribute values of the ticked findings) is kept at once as the
reader's server-side draft, so moving between reports, reloading or losing the connection never loses
it; a reading counts only once saved.
"""

from __future__ import annotations

import streamlit as st

from workbench.core.attributes import attribute_keys
from workbench.core.reading import min_seconds_empty, min_seconds_shown
from workbench.errors import WorkbenchError
from workbench.services import ConflictError
from workbench.services.reading import reading_pace
from workbench.services.results import DraftReading, ReadingNote
from workbench.ui import components, keyboard, state

# one key per label, in vocabulary order: digits, then letters (Streamlit reserves C and R;
# S skips, the arrows move, Enter saves)
LABEL_KEYS = list("1234567890") + list("qwetyuiopadfghjklzxvbnm")
UNSURE_KEY, COMMENT_KEY = ".", "/"  # never a label key: "." marks the reading unsure, "/" opens the comment
HOW_TO_READ = (
    "Press the key shown on every finding the report describes (unticked = 0). Enter saves "
    "and opens the next unread report; ← → move; S skips. Ticks, attributes and the comment are kept as your "
    "draft at once. "
    "Blinded: other readers and the labeller stay hidden."
)
STATE_TEXT = {
    "completed": "saved",
    "edited": "saved, changes not saved",
    "draft": "draft (not saved)",
    "unread": "unread",
}
READ = ("completed", "edited")


def render(wb) -> None:
    """The work list, one report, a key per label, save and next."""
    components.compact_header(  # the rest of the help is in the form's ? panel: the report starts near the top
        "Annotate", "Keys tick findings, Enter saves, ? shows how to read. Blinded: others' readings stay hidden."
    )
    state.seed_from_url("annotate", {"cohort": (state.COHORT, str), "report": (state.ANN_REPORT, str)})
    reader = _reader(wb)
    with st.sidebar:
        cohort = components.pick_cohort(wb)
    if not reader or cohort is None:
        st.info("Choose or type your reader name in the sidebar to start.")
    else:
        with components.shown_errors("opening your work list"):
            work = state.read(wb.adaptive.work_list, reader, cohort, drafts=False)
            drafts = set(wb.reading_draft_ids(reader))
            _annotate(wb, reader, cohort, work, drafts)
    if cohort is not None and wb.actor.role == "admin":
        _work_lists(wb, cohort)


def _annotate(wb, reader: str, cohort: str, work, drafts: set) -> None:
    """The report on screen with its label keys and the navigation: one keyboard form."""
    if work.empty:
        st.info(f"Your work list on {components.md(cohort)} is empty.")
        return
    work = work.assign(
        state=[
            (("edited" if s == "completed" else "draft") if r in drafts else s)
            for r, s in zip(work["report_id"], work["state"], strict=False)
        ]
    )
    ids = work["report_id"].tolist()
    given = None
    if st.session_state.get(state.ANN_REPORT) not in ids:
        pending = work.loc[~work["state"].isin(READ), "report_id"]
        given = (
            wb.next_report(reader, cohort) if wb.adaptive_settings().enabled else None
        )  # claimed: one reader at a time
        st.session_state[state.ANN_REPORT] = given if given in ids else (pending.iloc[0] if len(pending) else ids[0])
    report_id = st.session_state[state.ANN_REPORT]
    _hold(wb, reader, cohort, report_id, given, work)
    state.to_url(cohort=cohort, report=report_id)
    pos = ids.index(report_id)
    _progress(wb, reader, cohort, work, pos)
    draft = wb.draft_reading(reader, report_id) if report_id in drafts else None  # one read for ticks, note, attributes
    values, versions = _current(wb, reader, report_id, draft)
    data = _form_data(wb, report_id, pos, work, values, versions)
    if wb.config.annotate_attributes:
        _with_attributes(wb, reader, report_id, data, draft)
    _with_note(wb, reader, report_id, data, draft)
    keyboard.form(
        state.ANN_FORM,
        data,
        on_action=lambda payload: _act(wb, reader, work, payload),
        on_draft=lambda draft: _keep_draft(wb, reader, ids, draft),
        presses=wb,  # one Enter is applied once, whatever the load (the press is claimed in the database)
    )
    _queue(work)
    _my_readings(wb, reader, cohort, ids)


def _hold(wb, reader: str, cohort: str, report_id: str, given: str | None, work) -> None:
    """Adaptive reading: a report opened by the arrows or a link is claimed like one next_report gives, so it is
    not given to another reader while this one reads it (once per report shown; the claim lasts 30 minutes)."""
    if not wb.adaptive_settings().enabled or work.loc[work["report_id"] == report_id, "state"].isin(READ).any():
        return
    key = (reader, cohort, report_id)
    if st.session_state.get(state.ANN_HELD) != key:
        if report_id != given:  # next_report claimed the one it gave
            wb.open_report(reader, cohort, report_id)
        st.session_state[state.ANN_HELD] = key


def _with_attributes(wb, reader: str, report_id: str, data: dict, draft: DraftReading | None = None) -> None:
    """Add a picker per label with attributes to the form: shown while its label is ticked, its values on Shift +
    a key and by click, and the values kept with the reader's draft, else their stored ones, on screen (a report
    opened again must not save an empty picker over them). Part of the form, so Enter saves exactly the values
    shown."""
    kept = draft.attributes if draft is not None else None
    stored = kept if kept is not None else wb.reader_attributes(reader, report_id)
    keys = attribute_keys(wb.vocab.attribute_values)
    names = wb.vocab.names()
    for label, spec in wb.vocab.attribute_specs().items():
        if label not in wb.vocab.asked_ids:
            continue
        for name, choices in spec:
            group = _attribute_group(label, name)
            data["groups"].append(
                {
                    "id": group,
                    "title": f"{names[label]}: {name}",
                    "kind": "one",
                    "scope": {"group": "labels", "option": label, "title": names[label]},
                    "options": [{"id": v, "label": v, "key": keys.get((name, v)), "hint": name} for v in choices],
                }
            )
            data["values"][group] = stored.get(label, {}).get(name)
    scheme = " · ".join(
        f"{name} " + "/".join(keys[(name, v)].upper() for v in choices if (name, v) in keys)
        for name, choices in wb.vocab.attribute_values
    )
    data["attributes_title"] = "Attributes of the ticked findings (Shift + key: the finding ticked last)"
    data["help"].insert(
        2,
        {
            "title": "Attributes:",
            "text": f"Shift + key sets an attribute of the finding ticked last ({scheme}); click a value to set "
            "it on another finding (its row then takes the keys). Saved with the reading by Enter.",
        },
    )


def _attribute_group(label: str, name: str) -> str:
    """The form's group id of one attribute of one label."""
    return f"attr.{label}.{name}"


def _picked_attributes(wb, values: dict, sent: dict) -> dict[str, dict[str, str | None]]:
    """label -> {attribute: value or None} as shown in the form that was saved, for the ticked labels."""
    return {
        label: {name: sent.get(_attribute_group(label, name)) or None for name, _ in spec}
        for label, spec in wb.vocab.attribute_specs().items()
        if values.get(label)
    }


def _form_data(wb, report_id: str, pos: int, work, values: dict, versions: dict) -> dict:
    """What the keyboard form shows: the report, one chip per asked label with its key, the navigation."""
    names = wb.vocab.names()
    derived = "".join(f" · {names[d]} is derived" for d in wb.vocab.derived_ids)
    options = [
        {
            "id": lab,
            "label": names[lab],
            "key": LABEL_KEYS[i] if i < len(LABEL_KEYS) else None,
            "hint": _guideline(wb.vocab.label(lab)),
        }
        for i, lab in enumerate(wb.vocab.asked_ids)
    ]
    return {
        "item": {
            "id": report_id,
            "heading": report_id,
            "text": state.read(wb.reading.report_text, report_id).text,
            "caption": f"Report {pos + 1} of {len(work)} · " + STATE_TEXT[work["state"].iloc[pos]],
        },
        "groups": [
            {"id": "labels", "title": "Findings", "kind": "multi", "options": options, "note": "unticked = 0" + derived}
        ],
        "values": {"labels": [lab for lab in wb.vocab.asked_ids if values.get(lab)]},
        "nav": {"prev": pos > 0, "next": pos < len(work) - 1, "skip": True},
        "save_label": "Save and next",
        "context": {"versions": versions},
        "help": [
            {"title": "How to read:", "text": HOW_TO_READ},
            {"title": "Order:", "text": wb.reading_order_text()},
            *({"title": o["label"], "text": o["hint"]} for o in options),
        ],
        "footer": "? shows how to read and the label definitions.",
    }


def _guideline(label) -> str:
    """A label's definition and the wording to look for, from the vocabulary (the chip's tooltip and the ? panel)."""
    return label.definition + (f" Look for: {'; '.join(label.look_for)}." if label.look_for else "")


def _progress(wb, reader: str, cohort: str, work, pos: int) -> None:
    """n of N read, drafts, and the reader's pace."""
    done = int(work["state"].isin(READ).sum())
    n_drafts = int((work["state"] == "draft").sum())
    pace = reading_pace(work["saved_at"], len(work) - done)
    text = f"{components.md(reader)}: {done} of {len(work)} read · {components.count(n_drafts, 'draft')}"
    if pace["seconds_per_report"]:
        text += (
            f" · pace {pace['seconds_per_report']:.0f} s per report ({pace['reports_per_hour']:.0f} an hour), "
            f"about {_duration(pace['left_seconds'])} left"
        )
    st.progress(done / len(work), text=text)


def _duration(seconds: float) -> str:
    """Seconds as '2 h 05 min' or '7 min'."""
    minutes = int(round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def _current(wb, reader: str, report_id: str, draft: DraftReading | None) -> tuple[dict, dict]:
    """The ticks shown (the draft, else the saved reading, else all 0) and the saved versions."""
    mine = state.read(wb.reading.my_readings, reader, report_id)
    saved = dict(zip(mine["label"], mine["value"].astype(int), strict=False))
    shown = draft.ticks if draft is not None else saved
    values = {lab: int(shown.get(lab, 0)) for lab in wb.vocab.asked_ids}
    stored = {lab: int(v) for lab, v in zip(mine["label"], mine["version"], strict=False)}
    # version 0: no reading when the report was opened, so a save from another window meanwhile is a conflict
    return values, {lab: stored.get(lab, 0) for lab in wb.vocab.asked_ids}


def _ticks(wb, values: dict) -> dict:
    """The form's values (ticked label ids) as label -> 0/1 over every asked label."""
    on = set(values.get("labels") or [])
    return {lab: int(lab in on) for lab in wb.vocab.asked_ids}


def _note_sent(values: dict) -> tuple[str, bool]:
    """The comment and unsure mark the form sent (kept with a draft, saved with a reading)."""
    return str(values.get("comment") or ""), values.get("unsure") == "unsure"


def _keep_draft(wb, reader: str, ids: list, draft: dict) -> None:
    """Keep the ticks on screen (with the comment and the attributes) as the reader's server-side draft (only for a
    report of the work list)."""
    if draft.get("item") not in ids:
        return
    try:
        _save_draft(wb, reader, draft["item"], _ticks(wb, draft["values"]), draft["values"])
    except WorkbenchError as exc:
        state.flash(f"Draft not kept: {exc}", "error")


def _save_draft(wb, reader: str, report_id: str, values: dict, sent: dict) -> None:
    """Keep what the form sent as the reader's draft: ticks, comment and unsure mark, and, when the picker is on,
    the attribute values of the ticked findings (moving to another report must not lose them)."""
    picked = _picked_attributes(wb, values, sent) if wb.config.annotate_attributes else None
    wb.save_reading_draft(reader, report_id, values, *_note_sent(sent), attributes=picked)


def _act(wb, reader: str, work, payload: dict) -> str | None:
    """Enter saves the reading sent (exactly the ticks on screen) and opens the next unsaved report;
    the arrows and S keep the ticks as a draft and move. Returns an error message, or None."""
    ids = work["report_id"].tolist()
    report_id = payload.get("item")
    if payload.get("kind") == "undo":
        return _undo(wb, reader, ids)
    if report_id not in ids:
        return f"Not saved: {report_id} is not in your work list any more; reload the page."
    values = _ticks(wb, payload.get("values") or {})
    pos = ids.index(report_id)
    if payload.get("kind") != "save":
        _save_draft(wb, reader, report_id, values, payload.get("values") or {})  # read fresh
        target = {
            "prev": ids[max(pos - 1, 0)],
            "next": ids[min(pos + 1, len(ids) - 1)],
            "skip": _next_open(work, report_id) or ids[min(pos + 1, len(ids) - 1)],
        }.get(payload.get("kind"))
        st.session_state[state.ANN_REPORT] = target or report_id
        return None
    versions = ((payload.get("context") or {}).get("versions")) or {}
    sent = payload.get("values") or {}
    try:
        changed = wb.submit_reading(
            reader,
            report_id,
            values,
            expected_versions={k: int(v) for k, v in versions.items()},
            comment=_note_sent(sent)[0],
            unsure=_note_sent(sent)[1],
        )
    except ConflictError:
        _save_draft(wb, reader, report_id, values, sent)
        state.bump(wb)
        return _conflict(wb, reader, report_id, values)
    if wb.config.annotate_attributes:
        for label, picked in _picked_attributes(wb, values, sent).items():
            wb.record_reading_attributes(reader, report_id, label, picked)
    state.bump(wb)
    state.flash(
        f"Saved {report_id} for {reader}: {changed.added} new, {changed.changed} changed, "
        f"{changed.unchanged} unchanged.",
        "toast",
    )  # a toast: the next report keeps its place on screen
    if wb.adaptive_settings().enabled:  # the next one is given afresh: reports may have left the list meanwhile
        st.session_state.pop(state.ANN_REPORT, None)
        return None
    following = _next_open(
        work.assign(state=work["state"].where(work["report_id"] != report_id, "completed")), report_id
    )
    st.session_state[state.ANN_REPORT] = following or report_id
    return None


def _conflict(wb, reader: str, report_id: str, yours: dict) -> str:
    """A save from a stale copy: both versions, label by label, and how to keep either."""
    mine = wb.my_readings(reader, report_id)
    saved = dict(zip(mine["label"], mine["value"].astype(int), strict=False))
    names = wb.vocab.names()
    differ = [lab for lab in wb.vocab.asked_ids if saved.get(lab, 0) != yours.get(lab, 0)]
    both = "; ".join(f"{names.get(lab, lab)}: saved {saved.get(lab, 0)}, yours {yours.get(lab, 0)}" for lab in differ)
    return (
        f"Not saved: {report_id} was saved from another window or tab since you opened it. "
        + (f"The two differ on {both}. " if differ else "Both have the same ticks. ")
        + "Your ticks are on screen: press Enter to save yours over it, or reload the page to keep the saved one."
    )


def _with_note(wb, reader: str, report_id: str, data: dict, draft: DraftReading | None = None) -> None:
    """Add the unsure mark, the comment field, undo and the empty-save confirmation to the form's data."""
    note = (
        (draft.note if draft is not None else None)  # a draft's own (after an undo, or typed before a move)
        or wb.reading_note(reader, report_id)
        or ReadingNote("", False)
    )
    data["groups"].append(
        {
            "id": "unsure",
            "title": "Unsure",
            "kind": "one",
            "note": "saved with the reading",
            "inline": True,
            "options": [
                {
                    "id": "unsure",
                    "label": "Unsure of this reading",
                    "key": UNSURE_KEY,
                    "hint": "Mark a reading you are not confident about (it is saved as ticked).",
                }
            ],
        }
    )
    data["values"]["unsure"] = "unsure" if note.unsure else None
    data["text"] = {
        "id": "comment",
        "label": "Comment (optional, saved with the reading)",
        "placeholder": f"{COMMENT_KEY} to write · Esc leaves the field · Ctrl+Enter saves",
        "hint": "In the comment, Enter adds a line; the label keys work again after Esc.",
    }
    data["values"]["comment"] = note.comment
    data["nav"]["undo"] = wb.last_saved_report(reader) is not None
    data["min_seconds_empty"] = min_seconds_empty(wb.config.reading)
    data["min_seconds_shown"] = min_seconds_shown(wb.config.reading)
    data["footer"] = (
        f"? shows how to read and the label definitions · {UNSURE_KEY} marks unsure · {COMMENT_KEY} writes a comment · "
        "Ctrl+Z undoes your last save."
    )


def _undo(wb, reader: str, ids: list) -> str | None:
    """Ctrl+Z: undo the reader's last save and open that report again (its previous values on screen)."""
    try:
        done = wb.undo_last_save(reader)
    except WorkbenchError as exc:
        return f"Nothing undone: {exc}"
    state.bump(wb)
    state.flash(
        f"Undid your last save of {done.report_id}: {done.restored} label(s) restored, "
        f"{done.removed} new reading(s) removed.",
        "toast",
    )
    if done.report_id in ids:
        st.session_state[state.ANN_REPORT] = done.report_id
    return None


def _my_readings(wb, reader: str, cohort: str, ids: list) -> None:
    """Review mode: the reader's own saved readings and drafts, searchable by report id or text; a row opens it."""
    if not st.toggle(
        "My readings: review your saved readings and drafts", key=state.widget_key("my-readings-on", cohort)
    ):
        return  # read only when asked for: the search reads report texts
    with st.container(border=True):
        search = st.text_input(
            "Search by report id or report text",
            key=state.widget_key("my-readings-search", cohort),
            placeholder="e.g. b00012 or effusion",
        )
        mine = wb.my_reading_list(reader, cohort, search)  # fresh: drafts change without a revision
        if mine.empty:
            st.caption("No saved reading or draft matches." if search else "You have no saved reading or draft yet.")
            return
        clicks = st.session_state.get(state.ANN_CLICKED, 0)
        event = st.dataframe(
            mine.assign(saved_at=components.when_column(mine["saved_at"])),  # local time, not a raw ISO stamp
            hide_index=True,
            height=260,
            on_select="rerun",
            selection_mode="single-row",
            key=state.widget_key("my-readings", clicks),
            column_config={"report_id": "report", "saved_at": "saved"},
        )
        rows = event.selection.rows if event else []
        if rows and mine["report_id"].iloc[rows[0]] in ids:
            st.session_state[state.ANN_CLICKED] = clicks + 1
            st.session_state[state.ANN_REPORT] = mine["report_id"].iloc[rows[0]]
            st.rerun()


def _next_open(work, report_id: str) -> str | None:
    """The next report after this one (wrapping) that is not saved yet."""
    ids = work["report_id"].tolist()
    pos = ids.index(report_id)
    order = work.iloc[list(range(pos + 1, len(work))) + list(range(0, pos))]
    pending = order.loc[~order["state"].isin(READ), "report_id"]
    return pending.iloc[0] if len(pending) else None


def _queue(work) -> None:
    """The whole work list with each report's state; click a row to open it."""
    with st.expander(
        f"Work list: {int(work['state'].isin(READ).sum())} saved, "
        f"{components.count(int((work['state'] == 'draft').sum()), 'draft')}, "
        f"{int((work['state'] == 'unread').sum())} unread"
    ):
        pos = work["report_id"].tolist().index(st.session_state[state.ANN_REPORT])
        start, end = components.window(len(work), pos)
        part = work.iloc[start:end]
        table = part.assign(position=range(start + 1, end + 1), state=part["state"].map(STATE_TEXT))
        clicks = st.session_state.get(state.ANN_CLICKED, 0)  # a new key after each click clears the selection
        event = st.dataframe(
            table[["position", "report_id", "state"]],
            hide_index=True,
            height=260,
            on_select="rerun",
            selection_mode="single-row",
            key=state.widget_key("ann-queue", clicks),
            column_config={"report_id": "report", "position": "#"},
        )
        if end - start < len(work):
            st.caption(f"Reports {start + 1}-{end} of {len(work)} around the open one.")
        rows = event.selection.rows if event else []
        if rows:
            st.session_state[state.ANN_CLICKED] = clicks + 1
            st.session_state[state.ANN_REPORT] = work["report_id"].iloc[start + rows[0]]
            st.rerun()


def _reader(wb) -> str | None:
    """Who is reading: the signed-in user, or (local mode) a name chosen or typed in the sidebar."""
    if wb.config.auth != "none":
        return wb.actor.user
    with st.sidebar:
        chosen = st.selectbox(
            "Reader", state.read(wb.reading.readers), key=state.READER, index=None, placeholder="Choose your name"
        )
        typed = st.text_input(
            "... or a new reader name",
            key=state.NEW_READER,
            placeholder="e.g. dr-smith",
            help="After Enter, press Tab (or click the report) so that the keys reach the labels.",
        )
        return typed.strip() or chosen


def _work_lists(wb, cohort: str) -> None:
    """Admins: give each report of the cohort to N readers (the overlap target)."""
    if not st.toggle("Work lists (admin): assign reports to readers", key=state.widget_key("work-lists", cohort)):
        return  # the status counts every reading of the cohort: only when asked for
    with st.container(border=True):
        status = state.read(wb.reading.work_list_status, cohort)
        if len(status):
            st.caption(f"Each report goes to {int(status['overlap'].iloc[0])} readers; readers see only their list.")
            st.dataframe(status, hide_index=True)
        else:
            st.caption("No work lists on this cohort: every reader reads every report.")
        with st.form(state.widget_key("assign", cohort)):
            readers = st.text_input(
                "Readers (comma-separated user ids)", ", ".join(status["reader"]) if len(status) else ""
            )
            overlap = st.number_input("Readers per report (overlap)", min_value=1, value=2, step=1)
            submitted = st.form_submit_button("Assign")
        if submitted:
            components.do(
                wb,
                "assigning work lists",
                wb.assign_work,
                cohort,
                readers.split(","),
                int(overlap),
                done=lambda r: f"Assigned {r.added} report places.",
            )
