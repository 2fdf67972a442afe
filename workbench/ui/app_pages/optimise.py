"""Optimise: the tuning/validation split, metrics on both parts with the gap, optimisation rounds and
their reports, and the looks at locked test cohorts."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.services.optimising import COHORT_ROLES, fmt_figure, report_markdown
from workbench.ui import charts, components, state

TABS = ("Split", "Tuning and validation", "Optimise", "Reports", "Test cohorts")
TAB = state.widget_key("optimise-tab")
PARTS = ("tuning", "validation")
# the services' column names as a clinician reads them (a part, "tuning" or "validation", stays in front)
HEADERS = {
    "n": "reports",
    "support": "positives",
    "accuracy_lo": "accuracy 95% low",
    "accuracy_hi": "accuracy 95% high",
    "f1": "F1",
    "f1_lo": "F1 95% low",
    "f1_hi": "F1 95% high",
    "f1_undefined": "F1 undefined",
    "f1_a": "F1 before",
    "f1_b": "F1 after",
    "delta_f1": "F1 change",
    "b": "broken",
    "c": "fixed",
    "p_value": "McNemar p",
    "macro_f1": "macro F1",
    "macro_labels": "macro F1 over",
    "gap": "gap (tuning - validation F1)",
    "version": "prompt version",
    "prompt": "prompt commit",
}


def render(wb) -> None:
    """Split, parts side by side, optimise, reports, test looks."""
    st.title("Optimise")
    components.help_line(
        "Tune on the tuning part, check on the validation part: proposals are offered only when "
        "validation does not drop, and the gap between the two is the overfitting signal."
    )
    state.seed_from_url(
        "optimise",
        {
            "tab": (TAB, lambda v: TABS[int(v)]),
            "cohort": (state.COHORT, str),
            "run": (state.OPT_RUN, int),
            "compare": (state.OPT_COMPARE, int),
            "report": (state.OPT_REPORT, int),
        },
    )
    components.lazy_tabs(
        TAB,
        dict(
            zip(
                TABS,
                (
                    lambda: _split(wb),
                    lambda: _parts(wb),
                    lambda: _optimise(wb),
                    lambda: _reports(wb),
                    lambda: _looks(wb),
                ),
                strict=False,
            )
        ),
    )
    tab = st.session_state.get(TAB)
    shown = {"Split": ("cohort",), "Tuning and validation": ("run", "compare"), "Reports": ("report",)}.get(tab, ())
    keys = {"cohort": state.COHORT, "run": state.OPT_RUN, "compare": state.OPT_COMPARE, "report": state.OPT_REPORT}
    state.to_url(
        tab=TABS.index(tab) if tab in TABS else None, **{name: st.session_state.get(keys[name]) for name in shown}
    )  # what the open tab shows


def _split(wb) -> None:
    """The development cohort's split, or the form that makes it."""
    cohort = components.pick_cohort(wb)
    if not cohort:
        return
    role = state.read(wb.splits.cohort_role, cohort)
    st.caption(f"Role of {cohort}: **{role}**")
    _role_form(wb, cohort, role)
    if role != "development":
        return
    if state.read(wb.splits.split_parts, cohort):
        summary = state.read(wb.splits.split_summary, cohort)
        sizes = summary.attrs.get("reports", {})
        st.markdown(f"{sizes.get('tuning', 0)} tuning and {sizes.get('validation', 0)} validation reports")
        st.dataframe(readable(summary, wb.vocab.names()), hide_index=True)
        return
    with st.form(state.widget_key("split", cohort)):
        fraction = st.slider("Validation share", 0.1, 0.5, 0.3, 0.05)
        seed = st.number_input("Seed", 0, 10_000, 0)
        submitted = st.form_submit_button("Split into tuning and validation", type="primary")
    if submitted:
        components.do(
            wb,
            "splitting",
            wb.split_cohort,
            cohort,
            validation=fraction,
            seed=int(seed),
            done=f"{cohort} split (seed {int(seed)}).",
        )


def _role_form(wb, cohort: str, role: str) -> None:
    """Change a cohort's role (a test cohort stays locked)."""
    if role == "test":
        return
    with st.form(state.widget_key("role", cohort)):
        new = st.selectbox("Role", COHORT_ROLES, index=COHORT_ROLES.index(role))
        submitted = st.form_submit_button("Set role")
    if submitted and new != role:
        components.do(wb, "setting the role", wb.set_cohort_role, cohort, new, done=f"{cohort} is now a {new} cohort.")


def _parts(wb) -> None:
    """Per-label F1 on both parts with intervals, and the history with the gap."""
    run_id = components.pick_run(state.read(wb.runs.runs), state.OPT_RUN)
    if run_id is None:
        return
    with components.shown_errors("measuring the parts"):
        parts = state.read(wb.optimising.evaluate_parts, run_id)
        cols = st.columns(2)
        for col, (part, m) in zip(cols, parts.items(), strict=False):
            col.metric(
                f"{part} macro F1 ({m.reports} reports)",
                components.pct(m.macro_f1),
                help=f"95% bootstrap interval {fmt_figure(m.macro_f1_lo)} to {fmt_figure(m.macro_f1_hi)}",
            )
            col.caption(f"Macro F1: {m.macro_labels}")
        frame = pd.DataFrame(
            {f"{p} {c}": parts[p].table[c] for p in parts for c in ("support", "f1", "f1_lo", "f1_hi")}
        )
        frame["gap"] = frame["tuning f1"] - frame["validation f1"]
        st.dataframe(readable(frame.round(3), wb.vocab.names()))
        history = state.read(wb.optimising.history_by_part, state.read(wb.optimising.run_cohort, run_id))
        st.plotly_chart(charts.parts_history_chart(history), key="optimise-history")
        st.dataframe(readable(history, {}), hide_index=True)
        _compare(wb, run_id)


def _compare(wb, run_id: int) -> None:
    """This run against another on the same cohort, tuning and validation side by side (exact McNemar)."""
    runs = state.read(wb.runs.runs)
    cohort_id = state.read(wb.runs.run_info, run_id).cohort_id
    others = runs[
        (runs["id"] != run_id) & (runs["cohort_id"] == cohort_id) & runs["status"].isin(["finished", "incomplete"])
    ]
    if others.empty:
        return
    if st.session_state.get(state.OPT_COMPARE) not in others["id"].tolist():  # e.g. a link to another cohort's run
        st.session_state.pop(state.OPT_COMPARE, None)
    other = st.selectbox(
        "Compare with an earlier run",
        others["id"].tolist(),
        index=None,
        key=state.OPT_COMPARE,
        format_func=lambda i: components.run_title(others.set_index("id").loc[i].to_dict() | {"id": i}),
    )
    if other is None:
        return
    result = state.read(wb.optimising.compare_by_part, int(other), run_id)
    cols = ["f1_a", "f1_b", "delta_f1", "b", "c", "p_value", "verdict"]
    frame = pd.concat({part: r.table[cols] for part, r in result.items()}, axis=1)
    frame.columns = [f"{p} {c}" for p, c in frame.columns]
    st.caption(
        " · ".join(f"{p}: macro F1 {fmt_figure(r.macro_f1_a)} -> {fmt_figure(r.macro_f1_b)}" for p, r in result.items())
        + f" · before = run #{int(other)}, after = run #{run_id}"
    )
    st.caption(f"Macro F1: {result['validation'].macro_labels}")
    st.dataframe(readable(frame.round(3), wb.vocab.names()))
    lines = [line for part, r in result.items() for line in wb.comparison_noise(int(other), run_id, r.table, part)]
    components.noise_lines(list(dict.fromkeys(lines)))  # "not measured" once, not once per part


def _optimise(wb) -> None:
    """Rounds of suggest -> evaluate -> keep, in the background; the best version left as drafts."""
    job = state.job("optimise")
    if job is not None:
        components.job_panel(job, lambda p: (0.5, str(p or "starting ...")))
        if not job.running:
            if job.error is not None:
                st.error(f"Optimisation stopped: {job.error}")
            else:
                report = job.result  # an OptimiseReport
                st.session_state[state.OPT_REPORT] = report.id
                st.success(f"Report #{report.id}: drafts left for {', '.join(report.drafts) or 'no label'}.")
            st.button("Dismiss", key=state.widget_key("dismiss-optimise"), on_click=state.clear_job, args=("optimise",))
        return
    names = wb.vocab.names()
    with st.form(state.widget_key("optimise-form")):
        labels = st.multiselect("Labels (none = every label)", wb.vocab.asked_ids, format_func=names.get)
        rounds = st.number_input("Rounds", 1, 10, 3)
        proposer = st.radio("Proposer", ["auto", "offline", "llm"], horizontal=True)
        submitted = st.form_submit_button("Optimise", type="primary")
    if submitted:
        worker = wb.as_actor(wb.actor)  # a plain view for the worker thread (no per-rerun memo)
        state.start_job(
            "optimise",
            "optimise",
            lambda j: worker.optimise(
                labels or None, rounds=int(rounds), proposer=proposer, on_progress=lambda m: setattr(j, "progress", m)
            ),
            on_done=lambda: state.bump(wb),
        )
        st.rerun()


def _reports(wb) -> None:
    """Stored optimisation reports (the same text as `workbench optimise`)."""
    reports = state.read(wb.optimising.optimisation_reports)
    if reports.empty:
        st.info("No optimisation yet.")
        return
    ids = [int(i) for i in reports["id"]]
    if st.session_state.get(state.OPT_REPORT) not in ids:
        st.session_state[state.OPT_REPORT] = ids[0]
    chosen = st.selectbox(
        "Report",
        ids,
        key=state.OPT_REPORT,
        format_func=lambda i: f"#{i} by {reports.set_index('id').loc[i, 'created_by']}",
    )
    st.markdown(report_markdown(reports.set_index("id").loc[chosen, "report"]))


def _looks(wb) -> None:
    """Measure a frozen bundle on a locked test cohort (a counted look), and every look so far."""
    st.caption(
        "A test cohort's metrics are computed only for frozen bundles; every look is recorded (who, when, "
        "which bundle) and counted."
    )
    cohorts = state.read(wb.study.cohorts)["name"].tolist()
    tests = [c for c in cohorts if state.read(wb.splits.cohort_role, c) == "test"]
    bundles = state.read(wb.freeze.bundles)
    if tests and len(bundles):
        with st.form(state.widget_key("look")):
            cohort = st.selectbox("Test cohort", tests)
            bundle = st.selectbox("Frozen bundle", bundles["name"].tolist())
            submitted = st.form_submit_button("Measure (counted look)", type="primary")
        if submitted:
            figures = components.do(wb, "measuring the test cohort", wb.test_look, bundle, cohort, rerun=False)
            if figures:
                f = fmt_figure
                st.success(
                    f"{bundle} on {cohort}: macro F1 {f(figures['macro_f1'])} [{f(figures['macro_f1_lo'])}, "
                    f"{f(figures['macro_f1_hi'])}]; {figures['message']}"
                )
                st.dataframe(readable(pd.DataFrame(figures["per_label"]), wb.vocab.names()), hide_index=True)
    else:
        st.info("Give a cohort the test role (Split tab) and freeze a bundle to measure it.")
    st.dataframe(state.read(wb.freeze.test_looks), hide_index=True)


def header(column: str) -> str:
    """A column as a clinician reads it: 'tuning f1_lo' -> 'tuning F1 95% low', 'validation_share' -> 'validation share'."""
    for part in PARTS:
        for sep in (" ", "_"):
            if column.startswith(part + sep):
                return f"{part} {header(column[len(part) + 1 :])}"
    return HEADERS.get(column, column.replace("_", " "))


def readable(frame: pd.DataFrame, names: dict) -> pd.DataFrame:
    """A table with readable headers and labels under the vocabulary's names (index or "label" column)."""
    out = frame.rename(columns=header)
    if "label" in out.columns:
        out["label"] = out["label"].map(lambda lab: names.get(lab, lab))
    if any(lab in names for lab in out.index):
        out = out.rename(index=lambda lab: names.get(lab, lab)).rename_axis("label")
    return out
