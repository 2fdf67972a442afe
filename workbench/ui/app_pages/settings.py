"""Settings: the labelling model, concurrency, the reference rule and where report text may go."""

from __future__ import annotations

import secrets

import streamlit as st

from workbench.core.adaptive import ORDERS
from workbench.core.reference import RULE_NAMES, RULES, WITH_K
from workbench.services.runs import endpoint_allowed, endpoint_label, is_local_model
from workbench.services.study import ROLES
from workbench.ui import components, state

RULES_MODEL = "workbench/rules"


def render(wb) -> None:
    """Edit the study's labeller settings, reference rule and allowed endpoints (admin only)."""
    st.title("Settings")
    components.help_line(
        "The model that labels, how many calls run at once, the reference rule, and the endpoints "
        "report text may be sent to. Changes apply to new runs."
    )
    cfg = wb.config
    st.caption(components.md(f"Reference rule now: {wb.rule().describe()} · study file: {wb.paths.config}"))
    lab, rule = dict(cfg.labeller), dict(cfg.reference)
    with st.form(state.widget_key("settings")):
        st.markdown("**Labelling model**")
        model = st.text_input(
            "Model (a litellm model string)",
            lab.get("model", RULES_MODEL),
            help=f"{RULES_MODEL} is a rule-based baseline, not an LLM; e.g. openai/gpt-4o-mini, "
            "openai/Qwen3-14B with an API base, ollama/llama3.1",
        )
        c = st.columns(3)
        api_base = c[0].text_input(
            "API base (optional)", lab.get("api_base") or "", placeholder="http://127.0.0.1:8000/v1"
        )
        key_env = c[1].text_input(
            "API key environment variable (the key itself is never stored)", lab.get("api_key_env") or ""
        )
        concurrency = c[2].number_input("Concurrent calls", 1, 256, int(lab.get("concurrency", 8)))
        st.markdown("**Reference rule**")
        c = st.columns(3)
        kind = c[0].selectbox(
            "Rule", list(RULES), index=list(RULES).index(rule.get("rule", "at_least")), format_func=RULE_NAMES.get
        )
        k = c[1].number_input("K", 1, 50, int(rule.get("k", 4)))
        n = c[2].number_input("N (readers needed)", 1, 50, int(rule.get("n", 6)))
        adaptive = _adaptive_fields(wb, kind)
        st.markdown("**Reading room**")
        min_empty = st.number_input(
            "Ask before saving a report with nothing ticked sooner than (seconds; 0 = never)",
            0.0,
            600.0,
            float((cfg.reading or {}).get("min_seconds_empty", 0)),
            step=1.0,
            help="reading.min_seconds_empty: Enter on a report with nothing ticked, sooner than this after it was "
            "shown, asks first (Enter again saves, Esc goes back).",
        )
        picker = st.checkbox(
            "Attribute picker in Annotate (side, severity, change ... of a ticked finding)",
            bool(cfg.annotate_attributes),
            help="annotate_attributes: readers may set the attributes of the labels they tick; off "
            "by default so presence-only reading stays as fast.",
        )
        endpoints = st.text_area(
            "Allowed endpoints (one prefix per line; a server on this machine by address and port, "
            "127.0.0.1:8080; governance: admins only)",
            "\n".join(cfg.allowed_endpoints),
            height=150,
        )
        submitted = st.form_submit_button("Save settings", type="primary")
    settings = {
        **lab,
        "model": model.strip() or RULES_MODEL,
        "api_base": api_base.strip() or None,
        "api_key_env": key_env.strip() or None,
        "concurrency": int(concurrency),
    }
    settings = {key: value for key, value in settings.items() if value is not None}
    allowed = [line.strip() for line in endpoints.splitlines() if line.strip()]
    if settings["model"].startswith(RULES_MODEL):
        st.info(
            components.md(
                f"{settings['model']} is a rule-based baseline, not an LLM. Report text stays on this machine."
            )
        )
    elif is_local_model(settings):
        st.info(components.md(f"Report text goes to {endpoint_label(settings)}, on this machine."))
    else:
        st.warning(
            components.md(
                f"Report text will be sent to {endpoint_label(settings)}. Make sure your governance allows it."
            )
        )
    if not endpoint_allowed(allowed, settings):
        st.error(
            components.md(
                f"{endpoint_label(settings)} is not among the allowed endpoints: runs will be refused until an admin adds it."
            )
        )
    if submitted:
        cfg.labeller = settings
        cfg.reference = {"rule": kind, "k": int(k), "n": int(n)} if kind in WITH_K else {"rule": kind, "n": int(n)}
        cfg.adaptive = adaptive if adaptive["enabled"] or cfg.adaptive else {}
        cfg.reading = {**(cfg.reading or {}), "min_seconds_empty": float(min_empty)} if min_empty or cfg.reading else {}
        cfg.annotate_attributes = bool(picker)
        components.do(wb, "saving the settings", _save, wb, allowed, done="Settings saved.")
    _accounts(wb)


def _adaptive_fields(wb, kind: str) -> dict:
    """Adaptive reading: on/off, the agreement sample's share and seed, the extra reader, the reading order."""
    now = wb.adaptive_settings()
    st.markdown("**Adaptive reading**")
    st.caption(
        "A report leaves the readers' lists once every label's reference can no longer change under the rule "
        "(the reference stays exactly the full panel's); an agreement sample keeps every reader, and the "
        "readers' agreement figures are computed on it."
    )
    c = st.columns([2, 1, 1])
    enabled = c[0].checkbox("Adaptive reading on", now.enabled)
    share = c[1].number_input("Agreement sample (share of reports)", 0.0, 1.0, float(now.agreement_share), step=0.05)
    seed = c[2].number_input("Sample seed", 0, 2**31 - 1, int(now.seed))
    c = st.columns([2, 2])
    extra = c[0].checkbox(
        "A tie goes to one extra reader before adjudication (majority rules)",
        now.extra_reader,
        help="Under 'at least K of N' one more reader can never break a tie (N + 1 readers need "
        "a larger share), and 'positive when at least K of N mark it' never ties, so this "
        "applies to majority rules only.",
        disabled=kind != "majority",
    )
    order = c[1].selectbox("Reading order", list(ORDERS), index=list(ORDERS).index(now.order), format_func=ORDERS.get)
    return {
        "enabled": bool(enabled),
        "agreement_share": float(share),
        "seed": int(seed),
        "extra_reader": bool(extra) and kind == "majority",
        "order": order,
    }


def _accounts(wb) -> None:
    """Accounts and roles: an admin adds an account, changes its role, resets its password (a new one, shown
    once) and disables or enables it, with the same rules as `workbench user ...`."""
    users = state.read(wb.team.users)
    if users.empty:
        return
    st.markdown("**Accounts**")
    st.dataframe(users[["id", "name", "role", "disabled"]], hide_index=True)
    _add_account(wb)
    c = st.columns([2, 1, 1, 1, 1])
    chosen = c[0].selectbox(
        "Account", users["id"].tolist(), index=None, key=state.widget_key("account"), placeholder="Choose an account"
    )
    if chosen is None:
        return
    row = users.set_index("id").loc[chosen]
    role = c[1].selectbox("Role", ROLES, index=ROLES.index(row["role"]), key=state.widget_key("account-role", chosen))
    if c[2].button("Change role", key=state.widget_key("account-set-role"), disabled=role == row["role"]):
        components.do(wb, "changing the role", wb.set_role, chosen, role, done=f"{chosen} is now {role}.")
    if c[3].button("Reset password", key=state.widget_key("account-reset")):
        _with_new_password(wb, "resetting the password", chosen, wb.set_password)
    disabled = bool(row["disabled"])
    label = "Enable account" if disabled else "Disable account"
    if c[4].button(label, key=state.widget_key("account-toggle")):
        components.do(
            wb,
            label.lower(),
            wb.set_disabled,
            chosen,
            not disabled,
            done=f"{chosen} is {'enabled' if disabled else 'disabled'}.",
        )


def _add_account(wb) -> None:
    """A new account with a role; its first password is made here and shown once."""
    with st.form(state.widget_key("account-add"), border=False), st.container(horizontal=True):
        user = st.text_input("New account (user id)", key=state.widget_key("account-new-id"))
        role = st.selectbox("Its role", ROLES, key=state.widget_key("account-new-role"))
        added = st.form_submit_button("Add account")
    if added:
        _with_new_password(wb, "adding the account", user.strip(), lambda u, pw: wb.add_user(u, role, pw))


def _with_new_password(wb, action: str, user: str, write) -> None:
    """Make a password, write it, and show it in this run only (never stored in clear, never shown again)."""
    password = secrets.token_urlsafe(15)  # 20 characters: passes the password rule
    if not components.do(wb, action, lambda: write(user, password) or True, rerun=False):  # True once written
        return
    st.warning(
        components.md(
            f"The password of {user}, shown once: give it to them now; they sign in with it and can change it "
            "with `workbench user passwd`. A reset makes a new one."
        )
    )
    st.code(password, language=None)


def _save(wb, allowed: list[str]) -> None:
    """Validate, record endpoint changes in the audit trail (governance), write workbench.yaml."""
    wb.rule()  # an impossible rule is refused before anything is written
    wb.check_sample_change()  # a new sample share or seed is refused once the drawn sample has readings
    # as stored: 127.0.0.1:8080 typed is http://127.0.0.1:8080 kept (not dropped below as untyped)
    allowed = [p if p in wb.config.allowed_endpoints else wb.allow_endpoint(p) for p in allowed]
    for prefix in [p for p in list(wb.config.allowed_endpoints) if p not in allowed]:
        wb.disallow_endpoint(prefix)
    wb.save_config()
