"""The "Suggest a revision" panel: a proposal for one label, evaluated on tuning and validation,
shown with its diff, fixed and broken cases and the McNemar verdict, accepted into the draft.

One function the Prompts and Disagreements pages call with one line, so those pages stay thin.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.services.results import Suggestion
from workbench.ui import components, state


def panel(wb, label: str | None, run_id: int | None = None) -> None:
    """A "Suggest a revision" button for a label; the last suggestion of this session beneath it."""
    if not label or label not in wb.vocab.asked_ids:
        return
    with st.expander(f"Suggest a revision of {wb.vocab.names().get(label, label)}", expanded=False):
        st.caption(
            "Proposed from this label's disagreements on the tuning part and their error notes, then checked "
            "on tuning and validation. Accepting makes it your draft; nothing is saved by itself."
        )
        unsplit = _unsplit_cohort(wb, run_id)
        if unsplit:
            _split_first(wb, unsplit)
            return
        if st.button("Suggest a revision", key=state.widget_key("suggest", label, run_id)):
            with components.shown_errors("suggesting a revision"), st.spinner("Proposing and evaluating ..."):
                st.session_state[state.SUGGESTION] = wb.suggest(label, run_id)
        result = st.session_state.get(state.SUGGESTION)
        if result and result.label == label:
            show(wb, result)


def _unsplit_cohort(wb, run_id: int | None) -> str | None:
    """The development cohort a suggestion would be checked on, when it is not split yet (else None)."""
    try:
        cohort = state.read(wb.optimising.run_cohort, run_id) if run_id is not None else wb.development_cohort()
    except WorkbenchError:  # no development cohort or run: the Suggest button says why
        return None
    if state.read(wb.splits.cohort_role, cohort) != "development" or state.read(wb.splits.split_parts, cohort):
        return None
    return cohort


def _split_first(wb, cohort: str) -> None:
    """Suggestions need a validation part to be checked on: the button that makes it, in place of Suggest."""
    st.info(
        f"A suggestion is checked on the validation part, and {cohort} is not split yet. Split it here "
        "(30% validation, seed 0; Optimise > Split offers other shares), then suggest."
    )
    if st.button(f"Split {cohort} into tuning and validation", key=state.widget_key("suggest-split", cohort)):
        components.do(
            wb, "splitting", wb.split_cohort, cohort, validation=0.3, seed=0, done=f"{cohort} split (seed 0)."
        )


def show(wb, result: Suggestion) -> None:
    """A proposal: status, changes, per-part evaluation, diff, and accept when it is offered."""
    edit, ev = result.edit, result.evaluation
    if result.status != "ok" or edit is None or ev is None:
        st.warning(f"No revision to offer ({result.status}): {result.detail}")
        if result.reply:  # the model proposer's unusable reply, as it came (also kept with the proposal)
            st.caption("The proposer replied:")
            st.code(result.reply, language=None)
        return
    st.markdown(
        f"**Proposal #{result.proposal}** by the {edit['source']}"
        + (f", from error notes {', '.join('#' + str(n) for n in edit['note_ids'])}" if edit["note_ids"] else "")
    )
    st.text("\n".join(edit["changes"]))
    rows = [
        {
            "part": part,
            "reports": m["reports"],
            "F1 before": m["f1_before"],
            "F1 after": m["f1_after"],
            "fixed": m["fixed"],
            "broken": m["broken"],
            "McNemar p": m["p_value"],
            "verdict": m["verdict"],
            "fixed cases": ", ".join(m["fixed_cases"][:20]),
            "broken cases": ", ".join(m["broken_cases"][:20]),
        }
        for part, m in ev["parts"].items()
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    components.noise_lines(wb.suggestion_noise_lines(result))
    st.caption(f"{ev['calls']['made']} calls made, {ev['calls']['reused']} answers reused from the cache")
    st.code(result.diff or "(no difference)", language="diff", wrap_lines=True)
    if not result.offered:
        st.error(f"Not offered: {ev['why']}.")
        return
    st.success(ev["why"])
    if st.button("Accept as my draft", key=state.widget_key("accept", result.proposal), type="primary"):
        components.do(
            wb,
            "accepting the proposal",
            wb.accept_proposal,
            result.proposal,
            done=f"Proposal #{result.proposal} is your draft of {result.label}: review and save it on Prompts.",
        )
