"""Browser sessions under `auth: local`: a hashed token that expires and is revoked on sign-out,
disable and role change (the cookie that lets F5 keep a user signed in)."""

import pytest

from workbench.services import PermissionDenied


@pytest.fixture
def team(small_study):
    """The small study with an admin and a reader."""
    small_study.add_user("boss", "admin", "correct horse 1")
    boss = small_study.as_actor(small_study.actor_for("boss"))
    boss.add_user("reader-1", "reader", "password-123")
    return boss


def signed_in(wb, user):
    return wb.as_actor(wb.actor_for(user))


def test_a_session_token_resumes_its_account_and_only_its_hash_is_stored(team):
    from workbench.services.team import token_digest
    from workbench.store import queries as q

    token = signed_in(team, "reader-1").start_web_session()
    actor = team.resume_web_session(token)
    assert (actor.user, actor.role, actor.account) == ("reader-1", "reader", True)
    with team.session() as s:
        row = q.get_web_session(s, token_digest(token))
    assert row.token_hash == token_digest(token) and token not in repr(row.model_dump())


@pytest.mark.parametrize("token", ["", "wbs_not-a-token", None])
def test_unknown_tokens_are_refused(team, token):
    with pytest.raises(PermissionDenied, match="sign in again"):
        team.resume_web_session(token)


def test_an_expired_session_is_refused(team):
    token = signed_in(team, "reader-1").start_web_session(hours=-0.01)
    with pytest.raises(PermissionDenied, match="sign in again"):
        team.resume_web_session(token)


def test_sign_out_revokes_that_session_only(team):
    reader = signed_in(team, "reader-1")
    first, second = reader.start_web_session(), reader.start_web_session()
    team.end_web_session(first)
    with pytest.raises(PermissionDenied):
        team.resume_web_session(first)
    assert team.resume_web_session(second).user == "reader-1"


def test_disable_revokes_every_session_and_enabling_does_not_bring_them_back(team):
    token = signed_in(team, "reader-1").start_web_session()
    team.set_disabled("reader-1")
    with pytest.raises(PermissionDenied):
        team.resume_web_session(token)
    team.set_disabled("reader-1", False)
    with pytest.raises(PermissionDenied):
        team.resume_web_session(token)


def test_a_role_change_revokes_the_sessions_and_a_no_change_does_not(team):
    token = signed_in(team, "reader-1").start_web_session()
    team.set_role("reader-1", "reader")
    assert team.resume_web_session(token).role == "reader"
    team.set_role("reader-1", "adjudicator")
    with pytest.raises(PermissionDenied):
        team.resume_web_session(token)
    assert team.resume_web_session(signed_in(team, "reader-1").start_web_session()).role == "adjudicator"


def test_only_accounts_have_browser_sessions(small_study):
    with pytest.raises(PermissionDenied):
        small_study.start_web_session()


def test_a_password_change_revokes_every_browser_session_own_or_reset(team):
    """Changing your own password (with the current one) or an admin's reset ends the account's browser sessions."""
    reader = signed_in(team, "reader-1")
    first, second = reader.start_web_session(), reader.start_web_session()
    reader.set_password("reader-1", "password-456", current="password-123")
    for token in (first, second):
        with pytest.raises(PermissionDenied, match="sign in again"):
            team.resume_web_session(token)
    third = reader.start_web_session()
    team.set_password("reader-1", "password-789")  # the admin resets it
    with pytest.raises(PermissionDenied, match="sign in again"):
        team.resume_web_session(third)
    assert team.resume_web_session(signed_in(team, "reader-1").start_web_session()).user == "reader-1"


def test_sign_in_failed_sign_in_lock_out_and_sign_out_are_audited_with_the_address_never_the_password(team):
    from workbench.services.team import FREE_FAILURES

    secret = "not-the-password-9"
    for _ in range(FREE_FAILURES):  # the last one locks the id
        with pytest.raises(PermissionDenied):
            team.authenticate("reader-1", secret, "10.1.2.3")
    with pytest.raises(PermissionDenied, match="too many"):
        team.authenticate("reader-1", "password-123", "10.1.2.3")
    team.authenticate("boss", "correct horse 1", "10.9.9.9")
    token = signed_in(team, "boss").start_web_session(address="10.9.9.9")
    team.end_web_session(token, "10.9.9.9")
    team.end_web_session(token, "10.9.9.9")  # the same cookie again: one sign-out
    log = team.audit_log(entity="session")
    events = list(zip(log["action"], log["entity_key"], strict=True))[::-1]  # oldest first
    assert events == [
        *[("sign_in_failed", "reader-1")] * FREE_FAILURES,
        ("lock_out", "reader-1"),
        ("sign_in_failed", "reader-1"),
        ("sign_in", "boss"),
        ("sign_out", "boss"),
    ]
    text = log.to_json()
    assert secret not in text and "password-123" not in text and "correct horse" not in text
    assert "10.1.2.3" in text and "10.9.9.9" in text and "locked out" in text


def test_an_actor_of_a_browser_session_stops_acting_when_that_session_ends(team):
    reader = signed_in(team, "reader-1")
    token = reader.start_web_session()
    in_tab = team.as_actor(team.resume_web_session(token))  # what every tab of that browser acts as
    assert in_tab.current_actor().user == "reader-1" and in_tab.current_actor().session
    team.end_web_session(token)  # signed out in another tab
    with pytest.raises(PermissionDenied, match="session has ended"):
        in_tab.current_actor()
    with pytest.raises(PermissionDenied, match="session has ended"):
        in_tab.require("annotate")
    assert reader.current_actor().user == "reader-1", "an actor outside a browser session is unaffected"
