"""Runs: start the labeller, read per-label metrics with intervals, compare two runs."""

from __future__ import annotations

import streamlit as st

from workbench.ui import charts, components, state

CI_METHODS = {"wilson": "Wilson", "clopper-pearson": "Clopper-Pearson (as the Ran Score paper)"}
RUN_COLUMNS = ["id", "status", "model", "endpoint", "prompt_commit", "labels", "calls_total", "calls_made",
               "calls_reused", "failures", "started_at", "created_by"]


def render(wb) -> None:
    """Start a run (live progress), list runs, metrics of one run, comparison of two, history."""
    st.title("Runs")
    components.help_line("Label a cohort with a prompt version and a model (unchanged calls come from the cache), "
                         "then read per-label accuracy with intervals and compare versions.")
    components.model_notice(wb)
    _start(wb)
    runs = state.read(wb, "runs")
    if runs.empty:
        return
    _show_new_run(runs)
    with st.expander(f"All runs ({len(runs)})"):
        st.dataframe(runs.assign(prompt_commit=runs["prompt_commit"].str[:8],
                                 labels=runs["labels_json"].str.count(",") + 1)[RUN_COLUMNS], hide_index=True)
    components.lazy_tabs(state.RUNS_TAB, {
        "Metrics of a run": lambda: _metrics(wb, runs),
        "Compare two runs": lambda: _compare(wb, runs),
        "Iteration history": lambda: _history(wb),
    })


def _history(wb) -> None:
    """Macro accuracy and F1 of every run on a cohort, in prompt-version order."""
    cohort = components.pick_cohort(wb, key=state.widget_key("history-cohort"))
    if cohort:
        history = state.read(wb, "iteration_history", cohort)
        st.plotly_chart(charts.history_chart(history), key="runs-history")
        st.dataframe(history, hide_index=True)


def _start(wb) -> None:
    """The run form, or the live progress of the run this session started."""
    job = state.job("run")
    if job is not None:
        components.job_panel(job, _describe)
        if not job.running:
            if job.error is not None:
                st.error(components.md(f"The run stopped: {job.error}"))
            else:
                st.success(components.md(job.result.message()))
            st.button("Dismiss", key=state.widget_key("dismiss-run"), on_click=state.clear_job, args=("run",))
        return
    versions = state.read(wb, "prompt_history")
    with st.form(state.widget_key("start-run")):
        st.markdown("**Start a run**")
        c = st.columns(3)
        cohort = c[0].selectbox("Cohort", state.read(wb, "cohorts")["name"].tolist())
        ref = c[1].selectbox("Prompt version", versions["commit"].tolist(),
                             format_func=dict(zip(versions["commit"], versions["short"] + ": " + versions["message"])).get)
        model = c[2].text_input("Model", wb.labeller_settings().get("model", ""), help="Change the default in Settings")
        labels = st.multiselect("Labels (none = all)", wb.vocab.asked_ids, format_func=wb.vocab.names().get)
        submitted = st.form_submit_button("Start run", type="primary")
    if submitted:
        worker = wb.as_actor(wb.actor)  # a plain view for the worker thread (no per-rerun memo)
        state.start_job("run", f"run on {cohort}", lambda j: worker.start_run(
            cohort, prompt_ref=ref, model=model.strip() or None, labels=labels or None,
            on_progress=lambda p: setattr(j, "progress", p), cancel=j.cancel), on_done=lambda: state.bump(wb))
        st.rerun()


def _show_new_run(runs) -> None:
    """Once a run of this session has finished, show it and compare it with the run before it."""
    job = state.job("run")
    if job is None or job.running or job.error is not None or job.handled:
        return
    job.handled = True
    run_id = job.result.run_id
    st.session_state[state.RUN] = st.session_state[state.RUN_B] = run_id
    previous = _previous_run(runs, run_id)
    if previous is not None:
        st.session_state[state.RUN_A] = previous


def _describe(p) -> tuple[float, str]:
    if p is None:
        return 0.0, "Preparing the calls ..."
    return p.done / max(p.total, 1), f"{p.done} of {p.total} calls · {p.made} made · {p.reused} reused · {p.failures} failures"


def _metrics(wb, runs) -> None:
    """Per-label table with intervals, forest plot, confusion counts, human ceiling."""
    c = st.columns([3, 2, 2])
    with c[0]:
        run_id = components.pick_run(runs, state.RUN)
    ci = c[1].radio("Interval", list(CI_METHODS), format_func=CI_METHODS.get, key=state.CI)
    metric = c[2].radio("Forest plot of", ["accuracy", "f1"], format_func={"accuracy": "Accuracy", "f1": "F1"}.get,
                        key=state.FOREST_METRIC, horizontal=True)
    if run_id is None:
        return
    ev = state.read(wb, "evaluate_run", run_id, ci=ci)
    a, b = ev.averages, ev.bootstrap
    m = st.columns(4)
    m[0].metric("Macro accuracy", components.pct(a["macro_accuracy"]))
    m[1].metric("Macro F1", components.pct(a["macro_f1"]), help="bootstrap 95% interval over reports")
    m[2].metric("Macro F1 interval", f"[{components.pct(b.get('lo'))}, {components.pct(b.get('hi'))}]")
    m[3].metric("Micro F1", components.pct(a["micro_f1"]))
    st.caption("Left out: " + "; ".join(f"{k}: {v}" for k, v in ev.excluded.items()))
    names = wb.vocab.names()
    previous = _previous_run(runs, run_id)
    table = ev.paper_table(state.read(wb, "evaluate_run", previous, ci=ci, n_resamples=0) if previous else None)
    st.caption("As the Ran Score paper's Table 4" + (f"; change in F1 against run {previous}" if previous else "")
               + ". * = undefined (no positive), never shown as 0.")
    st.dataframe(table.assign(label=table["label"].map(names)), hide_index=True)
    st.plotly_chart(charts.forest_plot(ev.table, metric, names), key="runs-forest")
    st.plotly_chart(charts.confusion_bars(ev.table, names), key="runs-confusion")
    if st.toggle("Human ceiling: the labeller beside the readers (kappas, unanimous vs split votes)",
                 key=state.widget_key("ceiling")):
        with components.shown_errors("human ceiling"):
            st.dataframe(state.read(wb, "human_ceiling", run_id), hide_index=True)


def _previous_run(runs, run_id: int):
    """The finished run before this one on the same cohort (for the change in F1), or None."""
    done = runs[runs["status"].isin(["finished", "incomplete"])]
    cohort = done.loc[done["id"] == run_id, "cohort_id"]
    older = done[(done["cohort_id"] == cohort.iloc[0]) & (done["id"] < run_id)] if len(cohort) else done.iloc[0:0]
    return int(older.iloc[0]["id"]) if len(older) else None


def _compare(wb, runs) -> None:
    """Before/after per label with McNemar; fixed and broken cases open in Disagreements."""
    c = st.columns(2)
    with c[0]:
        run_a = components.pick_run(runs, state.RUN_A, "Before (A)", default_index=1)
    with c[1]:
        run_b = components.pick_run(runs, state.RUN_B, "After (B)")
    if run_a is None or run_b is None or run_a == run_b:
        st.info("Choose two different runs on the same cohort.")
        return
    with components.shown_errors("comparing"):
        cmp = state.read(wb, "compare_runs", run_a, run_b)
        st.metric("Macro F1", components.pct(cmp["macro_f1_b"]), f"{cmp['macro_f1_b'] - cmp['macro_f1_a']:+.3f} from run {run_a}")
        table = cmp["table"]
        number = st.column_config.NumberColumn
        st.dataframe(table[["n", "accuracy_a", "accuracy_b", "delta_accuracy", "f1_a", "f1_b", "delta_f1", "b", "c",
                            "p_value", "p_holm", "verdict"]].rename(index=wb.vocab.names()),
                     column_config={**{c: number(format="%.3f") for c in ("accuracy_a", "accuracy_b", "f1_a", "f1_b")},
                                    "delta_accuracy": number("change in accuracy", format="%+.3f"),
                                    "delta_f1": number("change in F1", format="%+.3f"), "b": number("broken"),
                                    "c": number("fixed"), "p_value": number("McNemar p", format="%.4f"),
                                    "p_holm": number("Holm p", format="%.4f")})
        st.plotly_chart(charts.comparison_chart(table, "f1", wb.vocab.names(), str(run_a), str(run_b)), key="runs-compare")
        st.caption("Left out: " + "; ".join(f"{k}: {v}" for k, v in cmp["excluded"].items()))
        _cases(cmp["cases"], run_a, run_b)


def _cases(cases, run_a: int, run_b: int) -> None:
    """Fixed and broken cases; one click opens one in the Disagreements page."""
    st.markdown(f"**{int((cases['change'] == 'fixed').sum())} fixed, {int((cases['change'] == 'broken').sum())} broken**")
    if cases.empty:
        return
    event = st.dataframe(cases, hide_index=True, on_select="rerun", selection_mode="single-row",
                         key=state.widget_key("cases-table"), height=240)
    picked = event.selection.rows if event else []
    options = list(range(len(cases)))
    choice = st.selectbox("Case", options, format_func=lambda i: " · ".join(map(str, cases.iloc[i][["change", "report", "label"]])))
    if picked or st.button("Open in Disagreements", key=state.widget_key("open-case")):
        row = cases.iloc[picked[0] if picked else choice]
        run = run_a if row["change"] == "fixed" else run_b  # where it was a disagreement
        state.switch_to("disagreements", {state.CASE: (run, row["report"], row["label"], (run_a, run_b))})
