"""Roles and blinding in the services (not the UI): what a reader may see before and after their own
reading, who writes a reading, roles re-read on every call, disabled accounts, sign-in hardening.

Real SQLite, real Git, real argon2; no mocks. The guard test enumerates every service read that
reveals votes, the reference or the labeller's output and checks none of it leaks to a reader who
has not finished the report.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from conftest import copy_study, fast_password_hashing

from workbench.services import PermissionDenied, Workbench
from workbench.services import team as team_mod
from workbench.study import StudyError

READER_PW = "reader-pass-0001"


@pytest.fixture(scope="module")
def team_template(study_templates, tmp_path_factory):
    """The small study with accounts, a finished run, a few-shot example from s3 and an error note on s3,
    built once for the module."""
    with fast_password_hashing():
        wb = copy_study(study_templates["small"], tmp_path_factory.mktemp("access") / "study")
        built = _build_team(wb)
    wb.engine.dispose()
    return built


@pytest.fixture
def team(team_template, tmp_path):
    """A private copy of the team study, with the ids of its two runs."""
    root, run_a, run_b = team_template
    return copy_study(root, tmp_path / "study"), run_a, run_b


def _build_team(wb):
    wb.add_user("boss", "admin", "boss-pass-0001")
    wb.add_user("rdr", "reader", READER_PW)
    wb.add_user("adj", "adjudicator", "adj-pass-00001")
    wb.add_user("eng", "prompt_engineer", "eng-pass-00001")
    eng = wb.as_actor(wb.actor_for("eng"))
    lp, _ = eng.add_example_from_case("s3", "consolidation", "lobar consolidation", value=1)
    eng.commit_drafts(["consolidation"], "example from s3")
    run_a = wb.start_run("dev")
    run_b = wb.start_run("dev", labels=["consolidation", "edema"])
    wb.add_note("s3", "consolidation", "other", "unsure", "seen on s3")
    return wb.root, run_a.run_id, run_b.run_id


def as_user(wb, user):
    return wb.as_actor(wb.actor_for(user))


def read_all(wb, report_id: str) -> None:
    """The acting reader marks every label of a report."""
    wb.record_reading(wb.actor.user, report_id, {lab: 0 for lab in wb.vocab.asked_ids})


# every service read that can reveal votes, the reference or the labeller's output, as
# (name, call) -> whatever it returns; report s3 must not appear in it for a reader who has not read s3
REVEALING = {
    "reference": lambda wb, a, b: wb.reference("dev"),
    "reference_matrix": lambda wb, a, b: wb.reference_matrix("dev"),
    "reference_summary": lambda wb, a, b: wb.reference_summary("dev"),
    "adjudication_queue": lambda wb, a, b: wb.adjudication_queue("dev"),
    "item_reference": lambda wb, a, b: wb.item_reference("s3", "consolidation"),
    "adjudication_history": lambda wb, a, b: wb.adjudication_history("s3", "edema"),
    "item_votes": lambda wb, a, b: wb.item_votes("s3"),
    "my_readings of another reader": lambda wb, a, b: wb.my_readings("reader-a", "s3"),
    "reading_queue of another reader": lambda wb, a, b: wb.reading_queue("reader-a", "dev"),
    "predictions": lambda wb, a, b: wb.predictions(a),
    "prediction_matrix": lambda wb, a, b: wb.prediction_matrix(a),
    "evaluation_inputs": lambda wb, a, b: wb.evaluation_inputs(a)[:2],
    "evaluate_run": lambda wb, a, b: wb.evaluate_run(a, n_resamples=0).table,
    "compare_runs cases": lambda wb, a, b: wb.compare_runs(a, b).cases,
    "disagreements": lambda wb, a, b: wb.disagreements(a),
    "case": lambda wb, a, b: wb.case(a, "s3", "consolidation"),
    "agreement": lambda wb, a, b: wb.agreement("dev"),
    "human_ceiling": lambda wb, a, b: wb.human_ceiling(a),
    "notes": lambda wb, a, b: wb.notes(),
    "few-shot examples (prompt_set)": lambda wb, a, b: wb.prompt_set().label("consolidation").examples,
    "few-shot examples (label_prompt)": lambda wb, a, b: wb.label_prompt("consolidation").examples,
    "prompt_files": lambda wb, a, b: wb.prompt_files(),
    "prompt_diff": lambda wb, a, b: wb.prompt_diff("consolidation", "HEAD~1"),
    "audit_log": lambda wb, a, b: wb.audit_log(),
}


def mentions(value, needle: str) -> bool:
    """Does a service result contain the report id anywhere (frames, dicts, dataclasses, text)?"""
    if isinstance(value, pd.DataFrame):
        return mentions(value.reset_index().to_csv(), needle) if not value.empty else False
    if isinstance(value, pd.Series):
        return mentions(value.to_frame(), needle)
    if isinstance(value, dict):
        return any(mentions(k, needle) or mentions(v, needle) for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return any(mentions(v, needle) for v in value)
    if dataclasses.is_dataclass(value):
        return mentions(dataclasses.asdict(value), needle)
    return needle in str(value) if value is not None else False


def fingerprint(value) -> str:
    """A comparable text form of a service result."""
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return value.to_csv()
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{fingerprint(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(fingerprint(v) for v in value) + "]"
    if dataclasses.is_dataclass(value):
        return fingerprint(dataclasses.asdict(value))
    return repr(value)


def perturb(wb, run_ids, reports) -> None:
    """Change everything about some reports: new votes, adjudications, notes, flipped labeller answers."""
    from sqlalchemy import text

    for rid in reports:
        wb.record_reading("reader-x", rid, {lab: 1 for lab in wb.vocab.asked_ids})
        wb.adjudicate(rid, "edema", 1, "perturbed")
        wb.add_note(rid, "edema", "other", "unsure", "perturbed")
    marks = ", ".join(f"'{r}'" for r in reports)
    with wb.engine.begin() as conn:  # one run only, so fixed and broken cases change too
        conn.execute(
            text(
                f"UPDATE prediction SET value = 1 - value WHERE value IS NOT NULL AND run_id = {max(run_ids)} "
                f"AND report_id IN ({marks})"
            )
        )


def outcome(call):
    """A call's result, or the kind of refusal."""
    try:
        return fingerprint(call())
    except PermissionDenied:
        return "refused"
    except StudyError as exc:  # e.g. nothing left to compare
        return f"error: {exc}"


@pytest.mark.parametrize("name", list(REVEALING))
def test_guard_no_service_read_reveals_an_unread_report_to_a_reader(team, name):
    """Nothing about a report the reader has not finished reaches them: its id never shows, and
    changing everything about the unread reports changes nothing the reader gets."""
    wb, run_a, run_b = team
    reader = as_user(wb, "rdr")
    read_all(reader, "s1")  # finished s1 only; s3 (example, note, disagreements) stays blinded
    unread = [f"s{i}" for i in range(2, 9)]
    before = outcome(lambda: REVEALING[name](reader, run_a, run_b))
    for rid in unread:
        assert rid not in before, f"{name} shows report {rid} to a reader who has not read it"
    perturb(wb, [run_a, run_b], unread)
    after = outcome(lambda: REVEALING[name](reader, run_a, run_b))
    assert after == before, f"{name}: what a reader gets depends on reports they have not read"


@pytest.mark.parametrize(
    "name",
    [
        "reference",
        "predictions",
        "compare_runs cases",
        "few-shot examples (prompt_set)",
        "item_reference",
        "notes",
        "disagreements",
    ],
)
def test_after_reading_the_reader_sees_that_report(team, name):
    wb, run_a, run_b = team
    reader = as_user(wb, "rdr")
    read_all(reader, "s3")
    result = REVEALING[name](reader, run_a, run_b)
    if name == "item_reference":
        assert result.n_readers >= 6
    elif name == "compare_runs cases":
        assert isinstance(result, pd.DataFrame)  # computed on the reports the reader has read
    else:
        assert mentions(result, "s3"), f"{name} should show s3 once the reader has read it"


def test_the_other_roles_see_everything(team):
    wb, run_a, run_b = team
    for user in ("adj", "eng", "boss"):
        actor = as_user(wb, user)
        assert mentions(actor.reference("dev"), "s3") and mentions(actor.predictions(run_a), "s3")
        assert actor.prompt_set().label("consolidation").examples
    assert len(as_user(wb, "eng").reference("dev")) == 8 * 20


def test_reader_evaluation_says_what_blinding_left_out(team):
    wb, run_a, _ = team
    reader = as_user(wb, "rdr")
    read_all(reader, "s1")
    _, _, excluded = reader.evaluation_inputs(run_a)
    assert excluded["reports you have not finished reading (blinded)"] == 7


def test_cli_compare_as_a_reader_shows_no_unread_report(team, monkeypatch):
    from click.testing import CliRunner

    from workbench.cli import main

    wb, run_a, run_b = team
    monkeypatch.setenv("WORKBENCH_STUDY", str(wb.root))
    monkeypatch.setenv("WORKBENCH_USER", "rdr")  # auth none: the account's role applies to the script
    result = CliRunner().invoke(main, ["compare", str(run_a), str(run_b)])
    assert result.exit_code == 0, result.output
    assert "macro F1" in result.output and "reports you have not finished reading (blinded): 8" in result.output
    assert "s3" not in result.output and "s5" not in result.output


def test_a_reader_cannot_read_another_readers_readings(team):
    wb, _, _ = team
    reader = as_user(wb, "rdr")
    read_all(reader, "s3")  # even after finishing the report: other readers' own rows stay theirs
    with pytest.raises(PermissionDenied):
        reader.my_readings("reader-a", "s3")
    assert len(reader.my_readings("rdr", "s3")) == len(wb.vocab.asked_ids)


# ---------------------------------------------------------------- who writes a reading (item 9)


def test_an_adjudicator_cannot_change_another_readers_vote(team):
    wb, _, _ = team
    before = wb.my_readings("reader-b", "s3")
    adj = as_user(wb, "adj")
    with pytest.raises(PermissionDenied, match="only record their own readings.*adjudicate"):
        adj.record_reading("reader-b", "s3", {"consolidation": 0})
    for user in ("eng", "boss", "rdr"):
        with pytest.raises(PermissionDenied):
            as_user(wb, user).record_reading("reader-b", "s3", {"consolidation": 0})
    pd.testing.assert_frame_equal(wb.my_readings("reader-b", "s3"), before)
    as_user(wb, "adj").record_reading("adj", "s3", {"consolidation": 1})  # their own: fine


# ---------------------------------------------------------------- roles re-read, disabled accounts (item 10)


def test_a_demoted_user_loses_the_role_at_once(team):
    wb, _, _ = team
    eng = as_user(wb, "eng")  # an app session or a long-lived script holding the old Actor
    eng.require("run")
    wb.set_role("eng", "reader")
    with pytest.raises(PermissionDenied, match=r"eng \(reader\) may not run"):
        eng.start_run("dev", labels=["edema"])
    assert eng.blind_scope() is not None  # blinded like any reader
    assert not eng.prompt_set().label("consolidation").examples


def test_a_disabled_user_can_do_nothing(team):
    wb, run_a, _ = team
    eng = as_user(wb, "eng")
    token_holder = as_user(wb, "rdr")
    token = token_holder.create_token("rdr")
    wb.set_disabled("eng")
    wb.set_disabled("rdr")
    for call in (
        lambda: eng.runs(),
        lambda: eng.report_text("s1"),
        lambda: eng.reference("dev"),
        lambda: eng.cohorts(),
        lambda: eng.start_run("dev", labels=["edema"]),
    ):
        with pytest.raises(PermissionDenied, match="disabled"):
            call()
    with pytest.raises(PermissionDenied):
        wb.authenticate("eng", "eng-pass-00001")
    with pytest.raises(PermissionDenied):
        wb.authenticate_token("rdr", token)
    with pytest.raises(PermissionDenied, match="disabled"):
        wb.actor_for("eng")
    assert set(wb.users().set_index("id")["disabled"].items()) >= {("eng", True), ("rdr", True), ("boss", False)}
    wb.set_disabled("eng", False)
    assert not eng.runs().empty


def test_only_admins_disable_and_the_last_admin_stays(team):
    wb, _, _ = team
    with pytest.raises(PermissionDenied):
        as_user(wb, "eng").set_disabled("rdr")
    with pytest.raises(StudyError, match="last enabled admin"):
        wb.set_disabled("boss")
    log = wb.audit_log(entity="user")
    wb.set_disabled("rdr")
    assert "disable" in set(wb.audit_log(entity="user")["action"]) and len(wb.audit_log(entity="user")) == len(log) + 1


# ---------------------------------------------------------------- sign-in (item 11)


def test_unknown_users_are_checked_against_a_dummy_hash(team, monkeypatch):
    """The failure for an unknown user does the same argon2 work as a wrong password (no enumeration)."""
    from argon2 import PasswordHasher

    wb, _, _ = team
    calls = []
    real = PasswordHasher.verify

    def counting(self, hash_, password):  # counts, then does the real verification
        calls.append(hash_[:9])
        return real(self, hash_, password)

    monkeypatch.setattr(PasswordHasher, "verify", counting)
    for user in ("nobody-at-all", "rdr"):
        with pytest.raises(PermissionDenied, match="^unknown user or wrong password$"):
            wb.authenticate(user, "not-the-password-1")
    assert calls == ["$argon2id", "$argon2id"]


def test_repeated_failures_lock_the_id_in_the_database(team):
    wb, _, _ = team
    for _ in range(team_mod.FREE_FAILURES):
        with pytest.raises(PermissionDenied, match="wrong password"):
            wb.authenticate("rdr", "wrong-password-xx")
    # locked now, even with the right password and from another process (a fresh Workbench, same database)
    other = Workbench(wb.root)
    with pytest.raises(PermissionDenied, match=r"too many failed sign-ins for rdr; try again in \d+ s"):
        other.authenticate("rdr", READER_PW)
    # unknown ids lock the same way (the lock does not tell which ids exist)
    for _ in range(team_mod.FREE_FAILURES):
        with pytest.raises(PermissionDenied):
            wb.authenticate("ghost", "whatever-password")
    with pytest.raises(PermissionDenied, match="too many failed sign-ins for ghost"):
        wb.authenticate("ghost", "whatever-password")
    # once the lock has passed, the right password works and resets the count
    with other.session() as s:
        from workbench.store import queries as q

        row = q.get_login_failure(s, "rdr")
        row.locked_until = "2000-01-01T00:00:00+00:00"
        s.add(row)
    assert other.authenticate("rdr", READER_PW).role == "reader"
    with other.session() as s:
        assert q.get_login_failure(s, "rdr") is None


@pytest.mark.parametrize(
    "password,message",
    [
        ("short-pw", "at least 12"),
        ("            ", "only spaces"),
        ("password1234", "first ones an attacker tries"),
        ("PASSWORD1234", "first ones an attacker tries"),
        ("new-user-0001", "first ones an attacker tries"),
    ],
)
def test_password_rule(team, password, message):
    wb, _, _ = team
    with pytest.raises(StudyError, match=message):
        wb.add_user("new-user-0001", "reader", password)


def test_tokens_store_only_a_hash_and_belong_to_their_owner(team):
    wb, _, _ = team
    with pytest.raises(PermissionDenied, match="made by its owner"):
        wb.as_actor(wb.actor_for("boss")).create_token("rdr")  # an admin cannot mint a reader's identity
    rdr = wb.authenticate("rdr", READER_PW)
    token = wb.as_actor(rdr).create_token("rdr")
    assert token.startswith("wbt_") and len(token) > 40
    from sqlalchemy import text

    with wb.session() as s:
        stored = [r[0] for r in s.execute(text("SELECT token_hash FROM usertoken"))]
    assert stored == [team_mod.token_digest(token)] and token not in stored
    assert wb.authenticate_token("rdr", token).user == "rdr"
    with pytest.raises(PermissionDenied, match="wrong token"):
        wb.authenticate_token("boss", token)
    assert wb.revoke_tokens("rdr") == 1
    with pytest.raises(PermissionDenied):
        wb.authenticate_token("rdr", token)
