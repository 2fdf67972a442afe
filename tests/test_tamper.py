"""Tamper evidence and the command line's identity: the chained audit trail (plain SQL UPDATE and
DELETE are caught), settings changes as audit events, bundles hashed over their exact content,
Ed25519 team signatures, `verify --study`, and CLI credentials when a study signs users in.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from conftest import with_sign_in
from sqlalchemy import text

from workbench import bundle as bundle_mod
from workbench.cli import main
from workbench.services import Workbench
from workbench.store.queries import AuditCheck


def cli(args, env=None, input=None):
    """Run the CLI with a clean identity environment."""
    base = {"WORKBENCH_USER": None, "WORKBENCH_TOKEN": None}
    return CliRunner().invoke(main, args, env={**base, **(env or {})}, input=input)


@pytest.fixture
def trail(small_study):
    """A study with a dozen audit events of different kinds."""
    wb = small_study
    wb.add_user("boss", "admin", "boss-pass-0001")
    wb.record_reading("reader-z", "s1", {"edema": 1})
    wb.record_reading("reader-z", "s1", {"edema": 0}, {"edema": 1})
    wb.adjudicate("s3", "pneumonia", 1, "hedge counts")
    wb.add_note("s3", "pneumonia", "hedging/uncertainty", "does not change management", "cannot exclude")
    return wb


# ---------------------------------------------------------------- the chain (item 15)


def test_an_intact_trail_verifies(trail):
    assert trail.verify_audit().ok
    result = cli(["audit", "--verify", "--study", str(trail.root)])
    assert result.exit_code == 0 and "every link of the hash chain intact" in result.output


def ids(wb):
    with wb.session() as s:
        return [r[0] for r in s.execute(text("SELECT id FROM auditevent ORDER BY id"))]


def test_a_plain_sql_update_is_caught_at_that_event(trail):
    target = ids(trail)[2]
    with trail.engine.begin() as conn:
        conn.execute(text("UPDATE auditevent SET new_json = '{\"value\": 1}' WHERE id = :i"), {"i": target})
    result = cli(["audit", "--verify", "--study", str(trail.root)])
    assert result.exit_code == 1
    assert f"event {target} was changed after it was recorded" in result.output
    assert trail.verify_audit().broken_at == target


def test_a_plain_sql_delete_in_the_middle_is_caught_at_the_next_event(trail):
    events = ids(trail)
    with trail.engine.begin() as conn:
        conn.execute(text("DELETE FROM auditevent WHERE id = :i"), {"i": events[3]})
    result = trail.verify_audit()
    assert not result.ok and result.broken_at == events[4]
    assert "deleted or changed" in result.reason


def test_deleting_the_newest_events_is_caught(trail):
    events = ids(trail)
    with trail.engine.begin() as conn:
        conn.execute(text("DELETE FROM auditevent WHERE id >= :i"), {"i": events[-2]})
    result = trail.verify_audit()
    assert not result.ok and "deleted from the end" in result.reason


def test_an_update_that_rehashes_one_event_breaks_the_next_link(trail):
    from workbench.store.queries import audit_event_hash

    events = ids(trail)
    target = events[2]
    with trail.engine.begin() as conn:
        row = conn.execute(
            text(
                "SELECT id, at, actor, action, entity, entity_key, old_json, new_json, prev_hash "
                "FROM auditevent WHERE id = :i"
            ),
            {"i": target},
        ).one()
        forged = (row[0], row[1], "someone-else", *row[3:8])
        conn.execute(
            text("UPDATE auditevent SET actor = 'someone-else', hash = :h WHERE id = :i"),
            {"h": audit_event_hash(forged, row[8]), "i": target},
        )
    assert trail.verify_audit().broken_at == events[3]


def test_concurrent_writers_keep_one_chain(trail):
    """Eight threads adding events at once: no fork in the chain."""
    import threading

    barrier = threading.Barrier(8)

    def write(i):
        wb = Workbench(trail.root, engine=trail.engine)
        barrier.wait()
        for k in range(5):
            wb.record_reading(f"reader-t{i}", f"s{k + 1}", {"edema": 1})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert trail.verify_audit() == AuditCheck(ok=True, events=len(ids(trail)), broken_at=None, reason="")


def test_an_old_trail_is_sealed_by_the_migration(small_study):
    """Events recorded before the chain existed get chained on upgrade (and verify from then on)."""
    from workbench.store import db

    wb = small_study
    with wb.engine.begin() as conn:
        conn.execute(text("UPDATE auditevent SET prev_hash = '', hash = ''"))
        conn.execute(text("DELETE FROM meta WHERE key = 'audit_head'"))
        conn.execute(text("UPDATE meta SET value = '1' WHERE key = 'schema_version'"))
    assert not wb.verify_audit().ok
    applied = db.migrate(wb.engine)
    assert any(step.startswith("20:") for step in applied)
    assert wb.verify_audit().ok


# ---------------------------------------------------------------- settings changes are events


def test_every_settings_change_is_an_audit_event(trail):
    wb = trail
    before = len(wb.audit_log(entity="settings"))
    wb.config.reference = {"rule": "at_least", "k": 3, "n": 5}
    wb.save_config()
    wb.config.labeller = {"model": "openai/qwen", "api_base": "http://127.0.0.1:8000/v1", "concurrency": 4}
    wb.save_config()
    wb.allow_endpoint("https://api.example.com")
    settings = wb.audit_log(entity="settings")
    assert len(settings) == before + 2
    changed = settings.iloc[1]  # newest first: the reference rule came first
    assert changed["entity_key"] == "reference" and '"k": 4' in changed["old"] and '"k": 3' in changed["new"]
    assert settings.iloc[0]["entity_key"] == "labeller" and "openai/qwen" in settings.iloc[0]["new"]
    endpoint = wb.audit_log(entity="endpoint").iloc[0]
    assert endpoint["entity_key"] == "https://api.example.com" and "api.example.com" in endpoint["new"]
    assert wb.verify_audit().ok


def test_a_hand_edited_workbench_yaml_is_recorded_on_the_next_open(trail):
    path = trail.root / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    reopened = Workbench(trail.root)
    reopened.migrate()
    event = reopened.audit_log(entity="settings").iloc[0]
    assert event["entity_key"] == "auth" and "outside the workbench" in event["actor"]
    assert json.loads(event["old"]) == {"auth": "none"} and json.loads(event["new"]) == {"auth": "local"}
    reopened.migrate()
    assert len(reopened.audit_log(entity="settings")) == 1  # recorded once


# ---------------------------------------------------------------- CLI credentials (item 12)


@pytest.fixture
def local_auth(small_study):
    wb = small_study
    with_sign_in(wb)
    return wb


def test_workbench_user_alone_no_longer_acts_as_an_account(local_auth):
    study = ["--study", str(local_auth.root)]
    result = cli(
        ["user", "add", "mallory", "--role", "admin", "--password-stdin", *study],
        env={"WORKBENCH_USER": "boss"},
        input="wrong-password-1\nmallory-pass-01\n",
    )
    assert result.exit_code == 2 and "unknown user or wrong password" in result.output
    result = cli(["user", "add", "mallory", "--role", "admin", "--password-stdin", *study], input="mallory-pass-01\n")
    assert result.exit_code == 2 and "set WORKBENCH_USER" in result.output
    assert "mallory" not in set(local_auth.users()["id"])


def test_password_prompt_then_attributed(local_auth):
    study = ["--study", str(local_auth.root)]
    result = cli(
        ["adjudicate", "s3", "pneumonia", "1", "--reason", "seen", *study],
        env={"WORKBENCH_USER": "boss"},
        input="boss-pass-0001\n",
    )
    assert result.exit_code == 0, result.output
    assert local_auth.audit_log(entity="adjudication").iloc[0]["actor"] == "boss"


def test_token_made_by_its_owner_works_and_is_refused_for_others(local_auth):
    study = ["--study", str(local_auth.root)]
    made = cli(["user", "token", "rdr", *study], env={"WORKBENCH_USER": "rdr"}, input="reader-pass-0001\n")
    assert made.exit_code == 0, made.output
    token = [line for line in made.output.splitlines() if line.startswith("wbt_")][0]
    ok = cli(["reference", *study], env={"WORKBENCH_USER": "rdr", "WORKBENCH_TOKEN": token})
    assert ok.exit_code == 0, ok.output
    denied = cli(
        ["adjudicate", "s3", "pneumonia", "1", "--reason", "x", *study],
        env={"WORKBENCH_USER": "rdr", "WORKBENCH_TOKEN": token},
    )
    assert denied.exit_code == 2 and "rdr (reader) may not adjudicate" in denied.output
    stolen = cli(["reference", *study], env={"WORKBENCH_USER": "boss", "WORKBENCH_TOKEN": token})
    assert stolen.exit_code == 2 and "wrong token" in stolen.output


def test_cli_disable_takes_effect_for_tokens(local_auth):
    study = ["--study", str(local_auth.root)]
    token = local_auth.as_actor(local_auth.authenticate("rdr", "reader-pass-0001")).create_token("rdr")
    boss = {"WORKBENCH_USER": "boss"}
    assert cli(["user", "disable", "rdr", *study], env=boss, input="boss-pass-0001\n").exit_code == 0
    result = cli(["reference", *study], env={"WORKBENCH_USER": "rdr", "WORKBENCH_TOKEN": token})
    assert result.exit_code == 2
    listed = cli(["user", "list", *study], env=boss, input="boss-pass-0001\n")
    assert re.search(r"rdr\s+reader\s.*\byes\b", listed.output), listed.output  # shown as disabled


def test_auth_none_stays_the_local_admin(small_study):
    result = cli(["adjudicate", "s3", "pneumonia", "1", "--reason", "x", "--study", str(small_study.root)])
    assert result.exit_code == 0
    assert small_study.audit_log(entity="adjudication").iloc[0]["actor"] == "local"


# ---------------------------------------------------------------- bundles (items 16 and 20)


@pytest.fixture
def frozen(small_study):
    small_study.start_run("dev")
    info = small_study.freeze("v1")
    return small_study, info


def test_a_seventh_decimal_edit_is_detected(frozen):
    _, info = frozen
    data = json.loads(info.json.read_text(encoding="utf-8"))
    value = data["bundle"]["metrics"]["macro_f1"]
    data["bundle"]["metrics"]["macro_f1"] = value + 3e-7  # rounds to the same 6 places
    assert round(data["bundle"]["metrics"]["macro_f1"], 6) == round(value, 6)
    info.json.write_text(json.dumps(data), encoding="utf-8")
    ok, recorded, actual = bundle_mod.verify_bundle(info.json)
    assert not ok and recorded != actual


def rehash(path, edit):
    """Edit a bundle and write a fresh, matching sha256 (what anyone can do)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data["bundle"])
    path.write_bytes(bundle_mod.bundle_bytes(data["bundle"]))


def test_verify_study_catches_an_edited_and_rehashed_bundle(frozen, tmp_path):
    wb, info = frozen
    good = cli(["verify", str(info.json), "--study", str(wb.root)])
    assert good.exit_code == 0, good.output
    assert good.output.count("ok:") == 5
    forged = tmp_path / "v1.json"
    forged.write_bytes(info.json.read_bytes())
    rehash(forged, lambda b: b["prompts"]["labels"]["pneumonia"].update(definition="Anything."))
    assert cli(["verify", str(forged)]).exit_code == 0  # its own sha256 matches: integrity only
    result = cli(["verify", str(forged), "--study", str(wb.root)])
    assert result.exit_code == 1
    assert "MISMATCH: tag" in result.output and "MISMATCH: audit:" in result.output


def test_signing_proves_who_froze_it(frozen, tmp_path):
    wb, info = frozen
    keys = tmp_path / "keys"
    made = cli(["bundle", "keygen", "--out", str(keys / "team.key")])
    assert made.exit_code == 0, made.output
    assert (keys / "team.key").stat().st_mode & 0o077 == 0  # private key: owner only
    other = cli(["bundle", "keygen", "--out", str(keys / "other.key")])
    assert other.exit_code == 0
    wb.start_run("dev")
    study = ["--study", str(wb.root)]
    frozen2 = cli(["freeze", "--name", "v2", "--sign", str(keys / "team.key"), *study])
    assert frozen2.exit_code == 0, frozen2.output
    assert "signed with key" in frozen2.output
    path = wb.paths.bundles / "v2.json"
    assert cli(["verify", str(path), "--public-key", str(keys / "team.key.pub")]).exit_code == 0
    wrong = cli(["verify", str(path), "--public-key", str(keys / "other.key.pub")])
    assert wrong.exit_code == 1 and "not by the given key" in wrong.output
    # edited and re-hashed, keeping the old signature: the hash passes, the signature does not
    whole = json.loads(path.read_text(encoding="utf-8"))
    content = whole["bundle"]
    content["metrics"]["macro_f1"] = 0.999
    path.write_bytes(bundle_mod.bundle_bytes(content, whole["signature"]))
    forged = cli(["verify", str(path), "--public-key", str(keys / "team.key.pub")])
    assert forged.exit_code == 1 and "does not match the content" in forged.output
    unsigned = cli(["verify", str(info.json), "--public-key", str(keys / "team.key.pub")])
    assert unsigned.exit_code == 1 and "not signed" in unsigned.output
    # a signed bundle still loads and scores like any other
    assert bundle_mod.load_bundle(info.json).name == "v1"


def test_sign_refuses_a_modified_bundle(frozen, tmp_path):
    _, info = frozen
    bundle_mod.generate_key(tmp_path / "k")
    text_ = info.json.read_text(encoding="utf-8").replace("Infection of the lung.", "Infection of the lunG.")
    info.json.write_text(text_, encoding="utf-8")
    result = cli(["bundle", "sign", str(info.json), "--key", str(tmp_path / "k")])
    assert result.exit_code == 2 and "refusing to sign a modified bundle" in result.output


@pytest.mark.parametrize("name", ["a..b", "x.lock", "trail."])
def test_git_rejected_names_are_a_clear_error(small_study, name):
    small_study.start_run("dev")
    result = cli(["freeze", "--name", name, "--study", str(small_study.root)])
    assert result.exit_code == 2 and result.output.startswith("error: bundle name") and "Traceback" not in result.output
    assert "GitCommandError" not in result.output


def test_the_first_admin_of_a_local_auth_study_is_added_without_credentials(study):
    path = study.root / "workbench.yaml"
    path.write_text(path.read_text().replace("auth: none", "auth: local"))
    first = cli(
        ["user", "add", "boss", "--role", "admin", "--password-stdin", "--study", str(study.root)],
        input="boss-pass-0001\n",
    )
    assert first.exit_code == 0, first.output
    second = cli(
        ["user", "add", "eve", "--role", "admin", "--password-stdin", "--study", str(study.root)],
        input="eve-pass-00001\n",
    )
    assert second.exit_code == 2 and "set WORKBENCH_USER" in second.output
