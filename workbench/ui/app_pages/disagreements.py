"""Disagreements: where the labeller and the reference differ, one case at a time, with error notes."""

from __future__ import annotations

import streamlit as st

from workbench.ui import components, state

MAX_OPTIONS = 300


def render(wb) -> None:
    """Filter a run's queue, open a case, write an error note, turn the case into a few-shot example."""
    st.title("Disagreements")
    components.help_line("Each row is a (report, label) where the labeller's answer differs from the reference. "
                         "Open one, say what went wrong, and add it as a few-shot example if it teaches something.")
    names = wb.vocab.names()
    opened = st.session_state.pop(state.CASE, None)  # sent here from the Runs page
    if opened:
        st.session_state[state.RUN], st.session_state[state.DIS_LABEL] = opened[0], opened[2]
        st.session_state[state.DIS_KIND] = st.session_state[state.DIS_CATEGORY] = None
    run_id = components.pick_run(state.read(wb, "runs"), state.RUN)
    if run_id is None:
        return
    c = st.columns(3)
    label = c[0].selectbox("Label", wb.vocab.ids, index=None, key=state.DIS_LABEL, format_func=names.get, placeholder="all labels")
    kind = c[1].selectbox("Type", ["FP", "FN", "failed"], index=None, key=state.DIS_KIND, placeholder="FP, FN and failed",
                          format_func={"FP": "FP: labeller said 1", "FN": "FN: labeller said 0", "failed": "failed call"}.get)
    category = c[2].selectbox("Error category", wb.config.error_categories, index=None, key=state.DIS_CATEGORY,
                              placeholder="any (or none yet)")
    queue = state.read(wb, "disagreements", run_id, label, kind, category)
    st.caption(f"{len(queue)} disagreements, labels with the highest error rate first")
    st.dataframe(queue[["report_id", "label", "type", "reference", "prediction", "votes", "notes", "categories",
                        "evidence"]], hide_index=True, height=220)
    options = list(zip(queue["report_id"], queue["label"]))[:MAX_OPTIONS]
    if opened and (opened[1], opened[2]) not in options:
        options.insert(0, (opened[1], opened[2]))
    if not options:
        st.success("No disagreement matches these filters.")
        return
    if opened or st.session_state.get(state.DIS_PICK) not in options:
        st.session_state[state.DIS_PICK] = (opened[1], opened[2]) if opened else options[0]
    picked = st.selectbox(f"Case (first {MAX_OPTIONS} shown; filter to narrow)" if len(queue) > MAX_OPTIONS else "Case",
                          options, key=state.DIS_PICK, format_func=lambda o: f"{o[0]} · {names.get(o[1], o[1])}")
    with components.shown_errors("opening the case"):
        _case(wb, run_id, *picked)


def _case(wb, run_id: int, report_id: str, label: str) -> None:
    """The report with evidence, votes, answer, prompt, notes; the note form and the example button."""
    case = state.read(wb, "case", run_id, report_id, label)
    pred = case["prediction"] or {}
    left, right = st.columns([3, 2])
    with left:
        st.subheader(components.md(f"{report_id}: {wb.vocab.names().get(label, label)}"))
        st.markdown(f"Labeller **{_value(pred.get('value'))}** ({pred.get('status', 'no answer')}) · reference "
                    f"**{_value(case['reference'])}** ({case['reference_status']})")
        components.highlighted_report(case["text"], pred.get("evidence") or "")
        if pred.get("detail"):
            st.caption("Parser detail:")
            st.text(pred["detail"])
        with st.expander("The prompt that produced this answer"):
            for message in case["messages"]:
                st.caption(message["role"])
                st.text(message["content"])
    with right:
        st.markdown("**Reader votes**")
        st.dataframe(case["votes"], hide_index=True)
        st.markdown(f"**Error notes** ({len(case['notes'])})")
        if len(case["notes"]):
            st.dataframe(case["notes"][["author", "category", "significance", "text", "reference_wrong"]], hide_index=True)
        _note_form(wb, run_id, report_id, label)
        _example_form(wb, run_id, report_id, label)


def _value(v) -> str:
    return "no answer" if v is None or v != v else str(int(v))


def _note_form(wb, run_id: int, report_id: str, label: str) -> None:
    """Record what went wrong and how much it matters."""
    from workbench.study import SIGNIFICANCE

    with st.form(state.widget_key("note", run_id, report_id, label), clear_on_submit=True):
        category = st.selectbox("What went wrong", wb.config.error_categories, index=None)
        significance = st.radio("Clinical significance", SIGNIFICANCE, index=None)
        text = st.text_area("Note", placeholder="e.g. 'no longer seen' means resolved")
        wrong = st.checkbox("The reference is wrong (sends the item to adjudication)")
        submitted = st.form_submit_button("Save note", type="primary")
    if submitted and (category is None or significance is None):
        st.error("Choose what went wrong and its clinical significance.")
    elif submitted:
        components.do(wb, "saving the note", wb.add_note, report_id, label, category, significance, text,
                      reference_wrong=wrong, run_id=run_id, done=f"Note saved on {report_id} / {label}.")


def _example_form(wb, run_id: int, report_id: str, label: str) -> None:
    """One click: this case becomes a few-shot example in your draft of the label's prompt."""
    with st.form(state.widget_key("example", run_id, report_id, label), clear_on_submit=True):
        why = st.text_input("Why (shown to the model with the example)", placeholder="optional; the latest note is used")
        submitted = st.form_submit_button("Add as few-shot example")
    if submitted:
        components.do(wb, "adding the example", wb.add_example_from_case, report_id, label, why, run_id=run_id,
                      done=lambda res: (f"Added {report_id} to your draft of {label} (see Prompts). Warning: "
                                        + " ".join(res[1]), "warning") if res[1] else
                      f"Added {report_id} to your draft of {label} (see Prompts).")
