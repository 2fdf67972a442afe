"""The app re-reads the signed-in user's role on every request: a demotion or a disabled account
applies to an open session at its next rerun (the role in session state is never trusted)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from workbench.ui import state


def app_script(study_path: str, start: str) -> None:
    """The app opened on one page."""
    from workbench.ui import app

    app.main(study=study_path, start=start)


def text_of(at: AppTest) -> str:
    return "\n".join(str(e.value) for e in list(at.caption) + list(at.markdown) + list(at.error) + list(at.title))


def test_demoted_then_disabled_user_changes_at_the_next_rerun(small_study):
    wb = small_study
    wb.add_user("boss", "admin", "boss-pass-0001")
    wb.add_user("eng", "prompt_engineer", "eng-pass-00001")
    path = wb.root / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    at = AppTest.from_function(app_script, args=(str(wb.root), "runs"), default_timeout=60)
    at.session_state[state.ACTOR] = wb.authenticate("eng", "eng-pass-00001")  # signed in as a prompt engineer
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Runs" and "Acting as **eng** (prompt_engineer)" in text_of(at)
    wb.set_role("eng", "reader")  # an admin demotes eng while the session is open
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Acting as **eng** (reader)" in text_of(at) and at.title[0].value != "Runs"
    wb.set_disabled("eng")
    at.run()
    assert at.title[0].value == "Sign in" and "disabled" in text_of(at)
    assert state.ACTOR not in at.session_state  # signed out


def test_an_admin_disables_an_account_in_settings(small_study):
    wb = small_study
    wb.add_user("boss", "admin", "boss-pass-0001")
    wb.add_user("rdr", "reader", "reader-pass-0001")
    at = AppTest.from_function(app_script, args=(str(wb.root), "settings"), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.selectbox(key=state.widget_key("account")).select("rdr").run()
    [b for b in at.button if b.label == "Disable account"][0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert bool(wb.users().set_index("id").loc["rdr", "disabled"])
    assert "disable" in set(wb.audit_log(entity="user")["action"])
