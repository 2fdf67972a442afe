"""Label set: mine candidate findings from a cohort, review them with the keyboard, adopt the approved set."""

from __future__ import annotations

import streamlit as st

from workbench.ui import charts, components, state

ACTIONS = {"approve": "Approve", "reject": "Reject", "merge": "Merge into", "rename": "Rename to"}


def render(wb) -> None:
    """Pick or mine a label set, see its long tail, review one candidate at a time, adopt it."""
    st.title("Label set")
    components.help_line(
        "Which findings does this corpus hold? Candidates are mined from the reports' own words and ranked by "
        "reports with an affirmed mention; each reviewer votes blind (keys: a approve, x reject, j next, k previous)."
    )
    names = state.read(wb.labelset.labelsets)
    _mine_form(wb, expanded=not names)
    if not names:
        return
    name = st.selectbox("Label set", names, key=state.LABELSET)
    with components.shown_errors("reading the label set"):
        rows = state.read(wb.labelset.labelset_candidates, name)
        rule = state.read(wb.labelset.review_rule, name)
        _overview(rows, rule)
        _review(wb, name, rows)
        _admin(wb, name, rows, rule)


def _mine_form(wb, expanded: bool) -> None:
    """Mine a cohort offline (the model engine is on the command line, with its estimate)."""
    with st.expander("Mine a cohort", expanded=expanded), st.form("labelset-mine"):
        cohorts = list(state.read(wb.study.cohorts)["name"])
        cohort = st.selectbox("Cohort", cohorts)
        min_reports = st.number_input("Affirmed reports a candidate needs", 1, 1000, 2)
        if st.form_submit_button("Mine offline") and cohort:
            components.do(
                wb,
                "mining",
                wb.labelset.mine_labelset,
                cohort,
                min_reports=int(min_reports),
                done=lambda r: f"{len(r.candidates)} candidates from {r.reports} reports",
            )


def _overview(rows: list[dict], rule) -> None:
    """Counts, the long tail and the prevalence chart with the vocabulary's coverage marked."""
    open_ = sum(r["status"] == "open" for r in rows)
    total = sum(r["affirmed_mentions"] for r in rows) or 1
    c = st.columns(5)
    c[0].metric("Candidates", len(rows))
    c[1].metric("Open", open_)
    c[2].metric("Settled", len(rows) - open_)
    for col, k in zip(c[3:], (10, 40), strict=False):
        col.metric(f"Top {k} cover", f"{sum(r['affirmed_mentions'] for r in rows[:k]) / total:.0%}")
    st.caption(f"approval rule: {rule.describe() if rule else 'not set yet (an admin sets it below)'}")
    st.plotly_chart(charts.labelset_prevalence(rows), key="labelset-prevalence")


def _review(wb, name: str, rows: list[dict]) -> None:
    """One candidate: its evidence, the votes once you have voted, and the vote buttons (with shortcuts)."""
    pos = min(st.session_state.get(state.LABELSET_POS, 0), len(rows) - 1)
    c = rows[pos]
    nav = st.columns([1, 1, 6])
    if nav[0].button("Previous", shortcut="k", disabled=pos == 0):
        st.session_state[state.LABELSET_POS] = pos - 1
        st.rerun()
    if nav[1].button("Next", shortcut="j", disabled=pos >= len(rows) - 1):
        st.session_state[state.LABELSET_POS] = pos + 1
        st.rerun()
    nav[2].markdown(f"**{pos + 1} / {len(rows)} · {components.md(c['name'])}** · {c['status']}")
    st.write(
        f"{c['affirmed_reports']} affirmed, {c['negated_reports']} negated, {c['uncertain_reports']} uncertain reports"
    )
    st.caption("forms: " + ", ".join(f"{f['text']} ({f['count']})" for f in c["forms"][:12]))
    for ex in c["examples"]:
        st.caption(f"{ex['report_id']} · {ex['assertion']}")
        components.user_text(ex["sentence"])
    votes = wb.labelset.candidate_votes(name, c["key"])
    st.caption(
        "votes: " + (", ".join(f"{r}: {' '.join(v).strip()}" for r, v in votes.items()) or "hidden until you vote")
    )
    b = st.columns(2)
    if b[0].button("Approve", shortcut="a", type="primary"):
        components.do(wb, "voting", wb.labelset.vote_candidate, name, c["key"], "approve")
    if b[1].button("Reject", shortcut="x"):
        components.do(wb, "voting", wb.labelset.vote_candidate, name, c["key"], "reject")
    _edit_forms(wb, name, c, rows)


def _edit_forms(wb, name: str, c: dict, rows: list[dict]) -> None:
    """Merge, rename, split, and edit the definition and look-for of the candidate under review."""
    with st.form(f"labelset-merge-{c['key']}"):
        others = {r["name"]: r["key"] for r in rows if r["key"] != c["key"]}
        target = st.selectbox("Merge into", list(others))
        new_name = st.text_input("or rename to")
        m = st.columns(2)
        if m[0].form_submit_button("Vote merge") and target:
            components.do(wb, "voting", wb.labelset.vote_candidate, name, c["key"], "merge", others[target])
        if m[1].form_submit_button("Vote rename"):
            components.do(wb, "voting", wb.labelset.vote_candidate, name, c["key"], "rename", new_name)
    with st.form(f"labelset-edit-{c['key']}"):
        definition = st.text_area("Definition", c["definition"])
        look_for = st.text_input("Look for (separated by ;)", "; ".join(c["look_for"]))
        forms = st.multiselect("Split these forms into a new candidate", [f["text"] for f in c["forms"]])
        split_name = st.text_input("New candidate's name")
        e = st.columns(2)
        if e[0].form_submit_button("Save definition and look-for"):
            components.do(wb, "editing", wb.labelset.edit_candidate, name, c["key"], definition, look_for.split(";"))
        if e[1].form_submit_button("Split") and forms:
            components.do(wb, "splitting", wb.labelset.split_candidate, name, c["key"], forms, split_name)


def _admin(wb, name: str, rows: list[dict], rule) -> None:
    """Adjudicators settle what stays contested; admins set the approval rule and adopt the label set."""
    role = wb.current_actor().role
    contested = [r for r in rows if r["status"] == "open" and r["waiting_on"]]
    if role in ("adjudicator", "admin") and contested:
        with st.expander(f"Settle contested candidates ({len(contested)})"), st.form("labelset-settle"):
            pick = st.selectbox(
                "Candidate", [f"{r['name']} — waiting on {', '.join(r['waiting_on'])}" for r in contested]
            )
            action = st.selectbox("Decision", ["approve", "reject"])
            reason = st.text_input("Reason")
            if st.form_submit_button("Settle") and pick:
                key = contested[
                    [f"{r['name']} — waiting on {', '.join(r['waiting_on'])}" for r in contested].index(pick)
                ]["key"]
                components.do(wb, "settling", wb.labelset.settle_candidate, name, key, action, "", reason)
    if role != "admin":
        return
    with st.expander("Approval rule and adoption"), st.form("labelset-rule"):
        reviewers = st.text_input("Reviewers (comma-separated)", ", ".join(rule.reviewers) if rule else "")
        kind = st.radio("Rule", ["unanimous", "k_of_n"], horizontal=True)
        k = st.number_input("k (k of n)", 0, 100, rule.k if rule else 0)
        if st.form_submit_button("Set rule"):
            components.do(wb, "setting the rule", wb.labelset.set_review_rule, name, reviewers.split(","), kind, int(k))
        if st.form_submit_button("Adopt as the study's vocabulary"):
            components.do(
                wb,
                "adopting",
                wb.labelset.adopt_labelset,
                name,
                done=lambda change: ("; ".join(change.lines()), "success"),
            )
