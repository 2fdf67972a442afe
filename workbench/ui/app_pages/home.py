"""Home: the study at a glance and what needs attention next."""

from __future__ import annotations

import streamlit as st

from workbench.services import PERMISSIONS
from workbench.ui import charts, components, state


def render(wb) -> None:
    """Cohorts, readers, reference status, prompt version, latest run, history, attention list."""
    st.title(f"Study: {components.md(wb.config.name)}")
    components.help_line(
        "The study at a glance: who has read what, whether the reference is settled, "
        "how the current prompts score, and what to look at next."
    )
    state.seed_from_url("home", {"cohort": (state.COHORT, str)})  # an unknown cohort falls back to the default
    cohort = components.pick_cohort(wb)
    if cohort is None:
        return
    state.to_url(cohort=cohort)
    if wb.actor.role not in PERMISSIONS["see_unblinded"]:
        _reader_home(wb, cohort)  # a blinded reader: their own progress only
        return
    summary = state.read(wb.study.reference_summary, cohort)
    history = state.read(wb.prompts.prompt_history)
    runs = state.read(wb.runs.runs, cohort)
    latest = components.latest_run_id(runs)
    ev = state.read(wb.evaluation.evaluate_run, latest, n_resamples=0) if latest else None
    c = st.columns(5)
    c[0].metric(
        "Reference decided",
        int(summary["decided"].sum() + summary["adjudicated"].sum()),
        help="(report, label) items settled by the reader vote or by adjudication",
    )
    c[1].metric("Waiting for adjudication", int(summary["waiting"].sum()))
    c[2].metric("Prompt version", f"v{len(history)}", help=f"commit {history.iloc[0]['short']} (its message is below)")
    c[3].metric(
        "Latest run: macro F1",
        components.pct(ev.averages["macro_f1"]) if ev else "no run",
        help="mean over labels of each label's F1: how good the labeller is at finding each finding",
    )
    c[4].metric(
        "Latest run: macro accuracy",
        components.pct(ev.averages["macro_accuracy"]) if ev else "no run",
        help="high whenever findings are rare, even if most positives are missed: read it beside F1",
    )
    st.caption(
        components.md(
            f"Current prompt version {history.iloc[0]['short']} ({components.when(history.iloc[0]['when'])}, "
            f"{history.iloc[0]['author']}), its message:"
            + (f" · latest run {latest} ({runs.set_index('id').loc[latest, 'model']})" if latest else "")
        )
    )
    components.user_text(history.iloc[0]["message"])
    _reads(wb, cohort)
    _attention(wb, cohort, summary, latest, ev)
    st.plotly_chart(charts.history_chart(state.read(wb.evaluation.iteration_history, cohort)), key="home-history")
    _readers(wb, cohort)
    with st.expander("Reference status per label"):
        settled = (summary["decided"] + summary["adjudicated"]).where(lambda x: x > 0)
        st.dataframe(
            summary.assign(prevalence=(summary["positive"] / settled).round(3))
            .rename(index=wb.vocab.names())
            .rename_axis("label")
        )
    with st.expander("Cohorts"):
        st.dataframe(state.read(wb.study.cohorts), hide_index=True)


def _reader_home(wb, cohort: str) -> None:
    """A blinded reader's Home: their own progress and the way to Annotate; no reference, score, queue of others'
    work or other reader (a reader must not see what would tell them how others read)."""
    work = wb.work_list(wb.actor.user, cohort)
    saved = int((work["state"] == "completed").sum())
    drafts = int((work["state"] == "draft").sum())
    left = len(work) - saved
    c = st.columns(3)
    c[0].metric("Your readings saved", f"{saved:,} of {len(work):,}")
    c[1].metric("Your drafts", f"{drafts:,}", help="reports with ticks you have not saved yet")
    c[2].metric("Left to read", f"{left:,}")
    if len(work):
        st.progress(saved / len(work), text=f"{saved / len(work):.0%} of your work list on {cohort}")
    if left and st.button("Go on reading", type="primary", key=state.widget_key("home-read")):
        state.switch_to("annotate")


def _reads(wb, cohort: str) -> None:
    """Adaptive reading at a glance: reads done and saved, items decided, undecided and waiting."""
    status = state.read(wb.adaptive.adaptive_status, cohort)
    c = st.columns(5)
    c[0].metric("Reads done", f"{status.reads_done:,}", help="one reader's reading of one report")
    c[1].metric(
        "Reads saved",
        f"{status.reads_saved:,}",
        delta=f"{status.saved_share:.0%} of a full panel" if status.full_panel else None,
        delta_color="off",
        help=f"panel places of reports that left every list, of {status.full_panel:,} reads for a full panel",
    )
    c[2].metric("Items decided", f"{status.decided:,}", help="(report, label) items with a reference value")
    c[3].metric("Undecided", f"{status.undecided:,}", help="still being read: the outcome can still change")
    c[4].metric("Waiting", f"{status.waiting:,}", help="no decisive vote (a tie) or flagged: adjudication")
    st.caption(components.md(f"Adaptive reading is {'on' if status.enabled else 'off'}. {wb.reading_order_text()}"))


def _attention(wb, cohort: str, summary, latest, ev) -> None:
    """Lowest-F1 labels, open adjudications, disagreements nobody has written a note on."""
    st.subheader("Needs attention")
    left, right = st.columns(2)
    with left:
        if ev is None:
            st.info("No run yet: start the labeller on the Runs page.")
        else:
            worst = ev.table.sort_values("f1", na_position="first").head(5)
            st.markdown("**Labels with the lowest F1** (latest run; undefined F1 first)")
            st.dataframe(components.label_quality(worst, wb.vocab.names()), hide_index=True)
    with right:
        st.metric("Open adjudications", int(summary["waiting"].sum()))
        if wb.vocab.attribute_specs():
            st.metric(
                "Attribute ties waiting",
                len(state.read(wb.attributes.attribute_ties, cohort)),
                help="readers who ticked a confirmed finding split on its side, severity or change: adjudication",
            )
        if wb.actor.role in PERMISSIONS["adjudicate"] and st.button("Adjudicate", key=state.widget_key("home-adj")):
            state.switch_to("adjudicate")
        if latest is not None:
            queue = state.read(wb.triage.disagreements, latest, None, None, None)
            st.metric(
                "Disagreements without notes", int((queue["notes"] == 0).sum()), help=f"of {len(queue)} in run {latest}"
            )
            if st.button("Review disagreements", key=state.widget_key("home-dis")):
                state.switch_to("disagreements", {state.RUN: latest})


def _readers(wb, cohort: str) -> None:
    """Each reader's progress on the cohort."""
    st.subheader("Readers")
    progress = state.read(wb.reading.reader_progress, cohort)
    if progress.empty:
        st.info("No readings yet.")
        return
    progress = progress.assign(share=progress["reports_complete"] / progress["reports_in_scope"].clip(lower=1))
    st.dataframe(
        progress.rename(
            columns={
                "reports_started": "reports started",
                "reports_complete": "reports complete",
                "reports_in_scope": "reports in cohort",
            }
        ),
        hide_index=True,
        column_config={
            "share": st.column_config.ProgressColumn("complete", min_value=0.0, max_value=1.0, format="percent")
        },
    )
