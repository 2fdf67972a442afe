"""Freeze and score: a prompt version becomes a hashed bundle that scores generated reports anywhere."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import streamlit as st

from workbench.ui import charts, components, state


def render(wb) -> None:
    """Freeze a version, download bundles, score generators (Ran Score), check robustness."""
    st.title("Freeze and score")
    components.help_line(
        "Freeze a prompt version into a bundle (sha256 over its content), then score generated "
        "reports against reference reports with it: per label FP (invented) and FN (missed), Ran Score."
    )
    _freeze(wb)
    bundles = state.read(wb.freeze.bundles)
    if bundles.empty:
        st.info("No bundle yet.")
        return
    shown = bundles.drop(columns=["path"])
    if "frozen_at" in shown:
        shown["frozen_at"] = components.when_column(shown["frozen_at"])
    st.dataframe(
        shown.rename(
            columns={
                "prompt_commit": "prompt version",
                "macro_f1": "macro F1",
                "frozen_by": "frozen by",
                "frozen_at": "frozen",
            }
        ),
        hide_index=True,
        column_config={"macro F1": st.column_config.NumberColumn(format="%.3f")},
    )
    paths = dict(zip(bundles["name"], bundles["path"], strict=False))
    name = st.selectbox("Bundle", list(paths), key=state.widget_key("bundle"))
    st.download_button(
        components.md(f"Download {name}.json"),
        Path(paths[name]).read_bytes(),
        file_name=f"{name}.json",
        mime="application/json",
        on_click="ignore",
        key=state.widget_key("dl-bundle", name),
    )
    score, robust = st.tabs(["Score generated reports", "Robustness"])
    with score:
        _score(wb, paths[name])
    with robust:
        _robustness(wb, paths[name])


def _freeze(wb) -> None:
    """Name a version and freeze it (needs a finished run of that version on the development cohort)."""
    history = state.read(wb.prompts.prompt_history)
    with st.form(state.widget_key("freeze"), clear_on_submit=True):
        st.markdown("**Freeze a version**")
        c = st.columns(2)
        name = c[0].text_input("Bundle name", placeholder="e.g. cxr-v3 (letters, digits, . _ -)")
        ref = c[1].selectbox(
            "Prompt version",
            history["commit"].tolist(),
            format_func=dict(zip(history["commit"], history["short"] + ": " + history["message"], strict=False)).get,
        )
        submitted = st.form_submit_button("Freeze", type="primary")
    if submitted:
        with st.spinner("Freezing: metrics with intervals and bootstrap, tag, bundle ..."):
            components.do(
                wb,
                "freezing",
                wb.freeze,
                name.strip(),
                ref,
                done=lambda r: " ".join(
                    [
                        f"Frozen {r.name}: sha256 {r.sha256} (prompt {r.commit[:8]}, run {r.run}).",
                        *(f"Note: {n}." for n in r.notes),
                    ]
                ),
            )


def _saved(upload, folder: Path) -> Path:
    """An uploaded file written to a private temporary folder (the importers read files)."""
    path = folder / Path(upload.name).name
    path.write_bytes(upload.getvalue())
    return path


def _then_removed(folder: Path, work):
    """Run `work`, then delete the uploads' temporary folder whatever happened (they hold report text)."""
    try:
        return work()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _score(wb, bundle_path: str) -> None:
    """Upload reference and generated reports; score in the background; show and download results."""
    job = state.job("score")
    if job is not None and (job.running or job.error):
        components.job_panel(
            job, lambda p: (p[0] / max(p[1], 1), f"{p[0]} of {p[1]} texts") if p else (0.0, "Starting ...")
        )
        if job.error:
            st.error(components.md(f"Scoring failed: {job.error}"))
            st.button("Dismiss", on_click=state.clear_job, args=("score",), key=state.widget_key("dismiss-score"))
        return
    with st.form(state.widget_key("score-form")):
        ref = st.file_uploader(
            "Reference reports (CSV/JSONL: id + text, or findings/impression)", type=["csv", "jsonl", "parquet"]
        )
        gens = st.file_uploader(
            "Generated reports, one file per generator (same ids)",
            type=["csv", "jsonl", "parquet"],
            accept_multiple_files=True,
        )
        policy = st.radio(
            "Labels with no positive on either side",
            ["zero", "one", "exclude"],
            horizontal=True,
            help="zero: F1 = 0 as the released Ran Score script; one: F1 = 1; exclude: left out and counted",
        )
        submitted = st.form_submit_button("Score", type="primary")
    if submitted and (ref is None or not gens):
        st.error("Upload the reference reports and at least one generated file.")
    elif submitted:
        folder = Path(tempfile.mkdtemp(prefix="workbench-score-"))
        ref_path, gen_paths = _saved(ref, folder), {Path(g.name).stem: _saved(g, folder) for g in gens}
        worker = wb.as_actor(wb.actor)  # a plain view for the worker thread
        state.start_job(
            "score",
            "scoring",
            lambda j: _then_removed(
                folder,
                lambda: worker.score_generated(
                    bundle_path,
                    ref_path,
                    gen_paths,
                    zero_division=policy,
                    on_progress=lambda done, total: setattr(j, "progress", (done, total)),
                ),
            ),
        )
        st.rerun()
    if job is not None and job.result is not None:
        _results(job.result, wb.vocab.names())


def _results(result, names: dict) -> None:
    """Summary (Table 5 layout), Ran Score with interval, per-label FP/FN, downloads."""
    summary = result.summary()
    st.dataframe(summary, hide_index=True, column_config=components.decimals(summary))
    st.plotly_chart(charts.score_chart(summary), key="score-chart")
    st.caption(f"Report text went to {result.endpoint}.")
    for name, g in result.generators.items():
        r = g.ran_score
        if r.no_score:
            st.error(components.md(f"{name}: no score: {r.no_score}"))
        else:
            fewer = (
                ""
                if r.pairs_scored == r.pairs_total
                else (
                    f" · over {r.pairs_scored} of {r.pairs_total} (report, label) pairs (failed extractions left out)"
                )
            )
            st.markdown(
                f"**{components.md(name)}**: Ran Score {r.estimate:.3f} [{r.lo:.3f}, {r.hi:.3f}] · {r.policy}{fewer}"
            )
        st.dataframe(
            g.per_label.rename(index=lambda lab: names.get(lab, lab)),
            column_config=components.decimals(g.per_label, fp="FP (invented)", fn="FN (missed)"),
        )
        components.download_csv(g.per_label.reset_index(), f"{name}.per_label.csv", f"{name}: per-label CSV")
        components.download_csv(g.per_report, f"{name}.per_report.csv", f"{name}: per-report CSV")
    components.download_csv(summary, "summary.csv", "Summary CSV")
    st.download_button(
        "Results JSON",
        json.dumps(result.to_json(), indent=2, default=str).encode("utf-8"),
        file_name="results.json",
        mime="application/json",
        on_click="ignore",
        key=state.widget_key("dl-json"),
    )


def _robustness(wb, bundle_path: str) -> None:
    """Same labels for harmless paraphrases, different labels for significant changes."""
    upload = st.file_uploader(
        "Pairs (pair_id, kind, label, text_a, text_b); default: the shipped synthetic pairs",
        type=["csv"],
        key=state.widget_key("pairs"),
    )
    if st.button("Check robustness", key=state.widget_key("robust")):
        folder = Path(tempfile.mkdtemp(prefix="workbench-pairs-"))
        pairs = _saved(upload, folder) if upload else None
        with st.spinner("Labelling the pairs ..."), components.shown_errors("robustness"):
            st.session_state[state.ROBUST_RESULT] = _then_removed(folder, lambda: wb.robustness(bundle_path, pairs))
    result = st.session_state.get(state.ROBUST_RESULT)
    if result is not None:
        st.dataframe(result.per_kind, hide_index=True, column_config=components.decimals(result.per_kind))
        st.dataframe(result.per_label, hide_index=True, column_config=components.decimals(result.per_label))
        with st.expander("Every pair"):
            st.dataframe(result.pairs, hide_index=True)
        components.download_csv(result.pairs, "robustness.csv", "Robustness CSV")
