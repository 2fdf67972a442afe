"""Runs: start the labeller, read per-label metrics with intervals, compare two runs."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.core.metrics import p_text
from workbench.services.model_path import NeedsConfirmation
from workbench.services.results import CaseRef, CompareView
from workbench.ui import charts, components, state

CI_METHODS = {"wilson": "Wilson", "clopper-pearson": "Clopper-Pearson (as the Ran Score paper)"}
RUN_COLUMNS = [
    "id",
    "status",
    "model",
    "endpoint",
    "prompt_commit",
    "labels",
    "calls_total",
    "calls_made",
    "calls_reused",
    "failures",
    "started_at",
    "created_by",
]
CEILING_NAMES = {
    "labeller_kappa": "labeller kappa",
    "readers_fleiss_kappa": "readers' Fleiss kappa",
    "fleiss_note": "note",
    "mean_reader_accuracy": "mean reader accuracy",
    "labeller_accuracy": "labeller accuracy",
    "accuracy_unanimous": "labeller accuracy, unanimous votes",
    "n_unanimous": "items, unanimous",
    "accuracy_split": "labeller accuracy, split votes",
    "n_split": "items, split",
}
SEARCH_IN = {
    "all": "reports, evidence and answers",
    "report": "report text",
    "evidence": "evidence",
    "answer": "raw answers",
}
TABS = ("Metrics of a run", "Compare two runs", "Iteration history")
RUN_NAMES = {
    "id": "run",
    "prompt_commit": "prompt version",
    "calls_total": "calls",
    "calls_made": "calls made",
    "calls_reused": "from cache",
    "started_at": "started",
    "created_by": "started by",
}


def render(wb) -> None:
    """Start a run (live progress), list runs, metrics of one run, comparison of two, history."""
    st.title("Runs")
    components.help_line(
        "Label a cohort with a prompt version and a model (unchanged calls come from the cache), "
        "then read per-label accuracy with intervals and compare versions."
    )
    components.model_notice(wb)
    state.seed_from_url(
        "runs",
        {
            "run": (state.RUN, int),
            "a": (state.RUN_A, int),
            "b": (state.RUN_B, int),
            "tab": (state.RUNS_TAB, lambda v: TABS[int(v)]),
        },
    )
    _start(wb)
    runs = state.read(wb.runs.runs)
    if runs.empty:
        return
    _show_new_run(runs)
    stopped = runs[runs["status"] == "interrupted"]
    if len(stopped):  # apart from the results: their figures would cover only what was labelled before the stop
        st.warning(
            "Interrupted runs (not results; they are left out of metrics, comparisons and history): "
            + "; ".join(f"run {int(i)}: resume with `workbench run --resume {int(i)}`" for i in stopped["id"])
        )
    with st.expander(f"All runs ({len(runs)})"):
        st.dataframe(
            runs.assign(
                prompt_commit=runs["prompt_commit"].str[:8],
                started_at=components.when_column(runs["started_at"]),
                labels=runs["labels_json"].str.count(",") + 1,
            )[RUN_COLUMNS].rename(columns=RUN_NAMES),
            hide_index=True,
        )
    components.lazy_tabs(
        state.RUNS_TAB,
        dict(zip(TABS, (lambda: _metrics(wb, runs), lambda: _compare(wb, runs), lambda: _history(wb)), strict=False)),
    )
    tab = st.session_state.get(state.RUNS_TAB)
    state.to_url(
        tab=TABS.index(tab) if tab in TABS else None,
        run=st.session_state.get(state.RUN),
        a=st.session_state.get(state.RUN_A),
        b=st.session_state.get(state.RUN_B),
    )


def _history(wb) -> None:
    """Macro accuracy and F1 of every run on a cohort, in prompt-version order."""
    cohort = components.pick_cohort(wb, key=state.widget_key("history-cohort"))
    if cohort:
        history = state.read(wb.evaluation.iteration_history, cohort)
        st.plotly_chart(charts.history_chart(history), key="runs-history")
        st.dataframe(components.history_table(history, wb.vocab.names()), hide_index=True)
        from workbench.services.evaluation import drift_text

        for text in history.attrs.get("macro_labels", []):
            st.caption(f"Macro F1: {text}")
        drift = drift_text(wb.reference_drift([int(r) for r in history["run"]])) if len(history) else ""
        if drift:
            st.info(components.md(drift[0].upper() + drift[1:]))


def _start(wb) -> None:
    """The run form, or the live progress of the run this session started."""
    job = state.job("run")
    if job is not None:
        components.job_panel(job, _describe)
        if not job.running:
            if job.error is not None:
                st.error(components.md(f"The run stopped: {job.error}"))
            elif job.result.failures or job.result.status != "finished":  # a run with failures is not a success
                st.warning(components.md(job.result.message()))
                st.text("\n".join(filter(None, [job.result.stopped_reason, *job.result.causes()])))
            else:
                st.success(components.md(job.result.message()))
            if job.result is not None and job.result.notes:  # what the run chose (the CLI's `note:` lines)
                st.info(components.md("  \n".join(f"Note: {n}" for n in job.result.notes)))
            st.button("Dismiss", key=state.widget_key("dismiss-run"), on_click=state.clear_job, args=("run",))
        return
    versions = state.read(wb.prompts.prompt_history)
    with st.form(state.widget_key("start-run")):
        st.markdown("**Start a run**")
        c = st.columns(3)
        cohort = c[0].selectbox("Cohort", state.read(wb.study.cohorts)["name"].tolist())
        ref = c[1].selectbox(
            "Prompt version",
            versions["commit"].tolist(),
            format_func=dict(zip(versions["commit"], versions["short"] + ": " + versions["message"], strict=False)).get,
        )
        model = c[2].text_input("Model", wb.labeller_settings().get("model", ""), help="Change the default in Settings")
        labels = st.multiselect("Labels (none = all)", wb.vocab.asked_ids, format_func=wb.vocab.names().get)
        limit = wb.labeller_settings().get("confirm_above")
        accept = limit is not None and st.checkbox(
            f"Accept an estimated cost above ${float(limit):,.2f} (labeller.confirm_above)"
        )
        b = st.columns([1, 1, 4])
        estimate = b[0].form_submit_button("Estimate")
        submitted = b[1].form_submit_button("Start run", type="primary")
    if (estimate or (submitted and not accept and limit is not None)) and not _within_budget(
        wb, cohort, ref, model.strip() or None, labels or None, submitted
    ):
        return
    if submitted:
        worker = wb.as_actor(wb.actor)  # a plain view for the waiting thread (no per-rerun memo)
        # the run itself goes to its own process: the server (every page, every user) stays responsive
        state.start_job(
            "run",
            f"run on {cohort}",
            lambda j: worker.start_run_detached(
                cohort,
                prompt_ref=ref,
                model=model.strip() or None,
                labels=labels or None,
                confirmed=accept,
                on_progress=lambda p: setattr(j, "progress", p),
                cancel=j.cancel,
            ),
            on_done=lambda: state.bump(wb),
        )
        st.rerun()


def _within_budget(wb, cohort, ref, model, labels, starting: bool) -> bool:
    """Show the run's estimate (no model call); False when a start must wait for the cost to be accepted."""
    within = False
    with components.shown_errors("estimating the run"):
        est = wb.estimate_run(cohort, prompt_ref=ref, model=model, labels=labels)
        st.info(components.md("  \n".join(est.lines())))
        try:
            wb.check_budget(cohort, ref, model, labels)
            within = True
        except NeedsConfirmation as exc:
            if starting:
                st.error(
                    components.md(
                        f"{exc.summary[0].upper()}{exc.summary[1:]}: nothing was sent. Tick "
                        '"Accept an estimated cost above ..." and start the run again to accept it.'
                    )
                )
    return within


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
    left = p.left()  # measured on the run's own calls so far: a model with no history gets no figure before them
    return p.done / max(p.total, 1), f"{p.done} of {p.total} calls · {p.made} made · {p.reused} reused · " + (
        f"{p.failures} failures" + (f" · {left}" if left else "")
    )


def _metrics(wb, runs) -> None:
    """Per-label table with intervals, forest plot, confusion counts, human ceiling."""
    c = st.columns([3, 2, 2])
    with c[0]:
        run_id = components.pick_run(runs, state.RUN)
    ci = c[1].radio("Interval", list(CI_METHODS), format_func=CI_METHODS.get, key=state.CI)
    metric = c[2].radio(
        "Forest plot of",
        ["f1", "accuracy", "precision", "recall"],
        key=state.FOREST_METRIC,
        horizontal=True,
        format_func={"accuracy": "Accuracy", "f1": "F1", "precision": "Precision", "recall": "Recall"}.get,
    )
    if run_id is None:
        return
    ev = state.read(wb.evaluation.evaluate_run, run_id, ci=ci)
    a, b = ev.averages, ev.bootstrap
    m = st.columns(4)
    m[0].metric("Macro F1", components.pct(a["macro_f1"]), help=f"macro F1: {ev.macro.describe()}")
    m[1].metric(
        "Macro F1 interval",
        f"[{components.pct(b.get('lo'))}, {components.pct(b.get('hi'))}]",
        help="bootstrap 95% interval over reports",
    )
    m[2].metric("Micro F1", components.pct(a["micro_f1"]))
    m[3].metric(
        "Macro accuracy",
        components.pct(a["macro_accuracy"]),
        help="at low prevalence accuracy stays high even when most positives are missed: read F1 and recall",
    )
    st.caption(f"Macro F1: {ev.macro.describe()}. Left out: " + "; ".join(f"{k}: {v}" for k, v in ev.excluded.items()))
    names = wb.vocab.names()
    previous = _previous_run(runs, run_id)
    table = ev.paper_table(state.read(wb.evaluation.evaluate_run, previous, ci=ci, n_resamples=0) if previous else None)
    st.caption(
        "As the Ran Score paper's Table 4"
        + (f"; change in F1 against run {previous}" if previous else "")
        + ". * = undefined (no positive), never shown as 0."
    )
    table = table.assign(
        label=table["label"].map(names),
        prevalence=[f"{sup / n:.3f}" if n else "n/a" for sup, n in zip(table["support"], table["n"], strict=False)],
    )
    lead = ["label", "F1", "precision", "recall", "accuracy [95% CI]", "prevalence", "support", "n", "FP", "FN"]
    st.dataframe(
        table[lead + [c for c in table.columns if c not in lead]],
        hide_index=True,
        column_config={
            "support": st.column_config.NumberColumn("positives", help="reference positives"),
            "n": st.column_config.NumberColumn("items", help="reports with a settled reference and an answer"),
        },
    )
    costs = state.read(wb.costs.call_costs, run_id)
    if not costs.empty:
        with st.expander(f"Cost and tokens per label (run total ${costs['cost'].fillna(0).sum():,.4f})"):
            st.dataframe(costs.assign(label=costs["label"].map(lambda lab: names.get(lab, lab))), hide_index=True)
    st.plotly_chart(charts.forest_plot(ev.table, metric, names), key="runs-forest")
    st.plotly_chart(charts.confusion_bars(ev.table, names), key="runs-confusion")
    if st.toggle(
        "Human ceiling: the labeller beside the readers (kappas, unanimous vs split votes)",
        key=state.widget_key("ceiling"),
    ):
        with components.shown_errors("human ceiling"):
            ceiling = state.read(wb.evaluation.human_ceiling, run_id)
            scope = state.read(wb.adaptive.agreement_scope, state.read(wb.optimising.run_cohort, run_id))
            if scope:
                st.caption(components.md(scope[0].upper() + scope[1:] + "."))
            st.dataframe(
                ceiling.assign(label=ceiling["label"].map(lambda lab: names.get(lab, lab)))
                .rename(columns=CEILING_NAMES)
                .round(3),
                hide_index=True,
            )
    _search(wb, run_id, names)


def _search(wb, run_id: int, names: dict) -> None:
    """Search the run's reports, evidence and raw answers; a result opens its case with every run side by side."""
    c = st.columns([5, 2, 1])
    query = c[0].text_input(
        "Search this run's reports, evidence and answers",
        key=state.SEARCH,
        placeholder="e.g. effusion (case-insensitive)",
    )
    where = c[1].selectbox("In", list(SEARCH_IN), format_func=SEARCH_IN.get, key=state.SEARCH_IN)
    regex = c[2].checkbox("Regex", key=state.SEARCH_REGEX, help="The text is a regular expression.")
    if not query:
        return
    with components.shown_errors("searching the run"):
        cases = state.read(
            wb.evaluation.search_run, run_id, query, where=None if where == "all" else where, regex=regex
        ).cases
        st.caption(f"{len(cases)} match(es) in run {run_id} · click a row to open the case")
        if cases.empty:
            return
        event = st.dataframe(
            cases.assign(label=cases["label"].map(lambda lab: names.get(lab, lab))),
            hide_index=True,
            on_select="rerun",
            selection_mode="single-row",
            key=state.widget_key("search-table"),
            height=240,
        )
        keys = list(dict.fromkeys(zip(cases["report_id"], cases["label"], strict=False)))
        picked = event.selection.rows if event else []
        if picked:
            st.session_state[state.SEARCH_CASE] = (cases["report_id"].iloc[picked[0]], cases["label"].iloc[picked[0]])
        if st.session_state.get(state.SEARCH_CASE) not in keys:
            st.session_state[state.SEARCH_CASE] = keys[0]
        report_id, label = st.selectbox(
            "Case", keys, key=state.SEARCH_CASE, format_func=lambda k: f"{k[0]} · {names.get(k[1], k[1])}"
        )
        with st.expander(
            f"Case {report_id} · {names.get(label, label)}: every run side by side, each call's request and reply",
            expanded=True,
        ):
            components.case_matrix(wb, report_id, label)


def _previous_run(runs, run_id: int):
    """The finished run before this one on the same cohort (for the change in F1), or None."""
    done = runs[runs["status"].isin(["finished", "incomplete"])]
    cohort = done.loc[done["id"] == run_id, "cohort_id"]
    older = done[(done["cohort_id"] == cohort.iloc[0]) & (done["id"] < run_id)] if len(cohort) else done.iloc[0:0]
    return int(older.iloc[0]["id"]) if len(older) else None


def _compare(wb, runs) -> None:
    """Per label before/after, sorted by change with its interval; fixed and broken cases open in Disagreements."""
    c = st.columns(2)
    with c[0]:
        run_a = components.pick_run(runs, state.RUN_A, "Before (A)", default_index=1)
    with c[1]:
        run_b = components.pick_run(runs, state.RUN_B, "After (B)")
    if run_a is None or run_b is None or run_a == run_b:
        st.info("Choose two different runs on the same cohort.")
        return
    with components.shown_errors("comparing"):
        cmp = state.read(wb.evaluation.compare_view, run_a, run_b)
        table, counts, names = cmp.table, cmp.counts, wb.vocab.names()
        significant = table[table["significant"]]
        m = st.columns(3)
        m[0].metric(
            "Macro F1 (both runs' reports)",
            components.pct(cmp.macro_f1_b),
            f"{cmp.macro_f1_b - cmp.macro_f1_a:+.3f} from run {run_a}",
        )
        m[1].metric(
            "Labels significantly better / worse",
            f"{int((significant['verdict'] == 'better').sum())} / {int((significant['verdict'] == 'worse').sum())}",
            help="McNemar exact test, Holm-adjusted over labels",
        )
        m[2].metric("Fixed / broken items", f"{int(table['c'].sum())} / {int(table['b'].sum())}")
        components.noise_lines(wb.comparison_noise(run_a, run_b, table))
        _explain_numbers(cmp, counts, run_a, run_b)
        only = st.toggle("Only labels that changed", value=True, key=state.widget_key("only-changed"))
        shown = table[table["changed"]] if only else table
        st.caption(
            f"{len(shown)} of {len(table)} labels · sorted by change: significant first, then the largest change "
            "in F1 · shaded rows are significant (blue better, orange worse)"
        )
        st.dataframe(_compare_table(shown, names), hide_index=True, height=min(38 + 35 * max(len(shown), 1), 420))
        if len(shown):
            st.plotly_chart(charts.delta_chart(shown, names), key="runs-compare")
        st.caption("Left out: " + "; ".join(f"{k}: {v}" for k, v in cmp.excluded.items()))
        _cases(cmp.cases, run_a, run_b, names, set(wb.vocab.derived_ids))


def _explain_numbers(cmp: CompareView, counts: dict, run_a: int, run_b: int) -> None:
    """Why the macro F1 here can differ from the Metrics tab: which reports and labels each counts."""
    alone = counts["alone"]
    st.caption(
        f"Here both runs are scored on the same {counts['reports']} reports and {counts['labels']} labels: reports used as "
        f"few-shot examples in either prompt version are left out ({counts['leaked_either']}), and macro F1 is the "
        f"{cmp.macro_b.describe()}. The Metrics tab scores each run alone, leaving out only its own "
        f"version's examples: run {run_a} macro F1 {components.pct(alone['a']['macro_f1'])} on {alone['a']['reports']} "
        f"reports, run {run_b} {components.pct(alone['b']['macro_f1'])} on {alone['b']['reports']} reports. "
        f"Per-label 'items' count (report, label) pairs with a settled reference and an answer from both runs."
    )


def _compare_table(table, names: dict):
    """Readable columns, 3 decimals (p below 0.001 as "< 0.001"), the verdict and why, significant rows shaded."""
    out = pd.DataFrame(
        {
            "label": [names.get(lab, lab) for lab in table.index],
            "verdict": table["verdict"].to_numpy(),
            "change in F1": table["delta_f1"].to_numpy(),
            "95% interval": [
                f"[{lo:+.3f}, {hi:+.3f}]" if not pd.isna(lo) else "n/a"
                for lo, hi in zip(table["delta_f1_lo"], table["delta_f1_hi"], strict=False)
            ],
            "F1 before": table["f1_a"].to_numpy(),
            "F1 after": table["f1_b"].to_numpy(),
            "change in accuracy": table["delta_accuracy"].to_numpy(),
            "fixed": table["c"].to_numpy(),
            "broken": table["b"].to_numpy(),
            "McNemar p": table["p_value"].to_numpy(),
            "Holm p": table["p_holm"].to_numpy(),
            "items": table["n"].to_numpy(),
            "why the verdict": table["verdict_note"].to_numpy(),
        }
    )
    shade = {"better": "background-color: #CCE3F0", "worse": "background-color: #F9DCC4"}
    return out.style.apply(lambda row: [shade.get(row["verdict"], "")] * len(row), axis=1).format(
        {
            "change in F1": "{:+.3f}",
            "change in accuracy": "{:+.3f}",
            "F1 before": "{:.3f}",
            "F1 after": "{:.3f}",
            "McNemar p": p_text,
            "Holm p": p_text,
        },
        na_rep="n/a",
    )


def _cases(cases, run_a: int, run_b: int, names: dict, derived: set = frozenset()) -> None:
    """Fixed and broken cases; one click opens one in the Disagreements page."""
    st.markdown(
        f"**{int((cases['change'] == 'fixed').sum())} fixed, {int((cases['change'] == 'broken').sum())} broken**"
        " · click a row to open the case with both runs' answers and the prompt change"
    )
    if derived and cases["label"].isin(derived).any():  # a derived label has no prompt and no queue of its own
        st.caption(
            components.md(", ".join(names.get(d, d) for d in sorted(derived))) + " is derived from the asked "
            "labels (1 exactly when they are all 0): its changes are not listed here; open the asked label that changed."
        )
        cases = cases[~cases["label"].isin(derived)].reset_index(drop=True)
    if cases.empty:
        return
    shown = cases.assign(label=cases["label"].map(names)).rename(
        columns={"value_a": f"run {run_a} (before)", "value_b": f"run {run_b} (after)"}
    )
    event = st.dataframe(
        shown,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key=state.widget_key("cases-table"),
        height=240,
    )
    picked = event.selection.rows if event else []
    options = list(range(len(cases)))
    choice = st.selectbox(
        "Case",
        options,
        format_func=lambda i: " · ".join(
            [
                cases["change"].iloc[i],
                str(cases["report"].iloc[i]),
                names.get(cases["label"].iloc[i], cases["label"].iloc[i]),
            ]
        ),
    )
    if picked or st.button("Open in Disagreements", key=state.widget_key("open-case")):
        row = cases.iloc[picked[0] if picked else choice]
        run = run_a if row["change"] == "fixed" else run_b  # where it was a disagreement
        state.switch_to(
            "disagreements", {state.CASE: CaseRef(int(run), str(row["report"]), str(row["label"]), (run_a, run_b))}
        )
