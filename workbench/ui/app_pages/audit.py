"""Audit: the append-only log of who changed what, viewable and exportable."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.ui import components, state

ENTITIES = ["reading", "adjudication", "note", "prompt", "run", "bundle", "reports", "readings"]


def render(wb) -> None:
    """Filter the audit log by entity and key; download it as CSV."""
    st.title("Audit log")
    components.help_line(
        "Every change, oldest entries never altered: imports, readings, adjudications, notes, "
        "prompt versions, runs, freezes. Filter, then export as CSV."
    )
    if not hasattr(wb, "audit_log"):
        st.info("This version of the workbench has no audit-log service yet (Workbench.audit_log).")
        return
    c = st.columns(2)
    entity = c[0].selectbox(
        "Entity", ENTITIES, index=None, key=state.AUDIT_ENTITY, placeholder="all", accept_new_options=True
    )
    key = c[1].text_input("Key (e.g. demo-001/edema)", key=state.AUDIT_KEY).strip() or None
    with components.shown_errors("reading the audit log"):
        log = state.read(wb.team.audit_log, entity=entity, key=key)
        st.caption(
            f"{len(log)} events, newest first · times in your timezone ({components.md(components.viewer_timezone())})"
        )
        shown = pd.DataFrame(
            {
                "when": components.when_column(log["at"]),
                "who": log["actor"],
                "action": log["action"],
                "entity": log["entity"],
                "key": log["entity_key"],
                "change (old → new)": [
                    components.audit_change(o, n) for o, n in zip(log["old"], log["new"], strict=False)
                ],
            }
        )
        st.dataframe(
            shown, hide_index=True, column_config={"change (old → new)": st.column_config.TextColumn(width="large")}
        )
        components.download_csv(log, "audit.csv", "Download CSV (exact stored values, UTC)")
