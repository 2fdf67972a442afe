"""Trust, second round (issue 20): what a full disk, a kill, a symlink, a control character, a huge
vocabulary, a partial run, an old token or a spoofed id could do to a study, each refused or undone.

Real SQLite, real Git, real files (a real small tmpfs for the full disk when this process may mount
one); faults are injected by replacing one step of freeze with a function that raises.
"""

from __future__ import annotations

import contextlib
import json
import re
from datetime import UTC

import pytest
from click.testing import CliRunner
from conftest import DATA
from test_tamper import local_auth  # noqa: F401  (fixture: boss and rdr on auth: local)

from workbench.cli import main
from workbench.core.vocab import VocabularyError, parse_vocabulary
from workbench.errors import StorageFault, UserError
from workbench.importers import ImportProblems
from workbench.services import PermissionDenied
from workbench.store.prompt_repo import PromptRepoError
from workbench.study import StudyError

MAX_LABELS = 1000  # the stated limit (workbench.core.vocab.MAX_LABELS)


def cli(args, env=None, input=None):
    """Run the CLI with a clean identity environment."""
    base = {"WORKBENCH_USER": None, "WORKBENCH_TOKEN": None}
    return CliRunner().invoke(main, args, env={**base, **(env or {})}, input=input)


def vocabulary(n: int) -> dict:
    """A vocabulary of n distinct labels as parsed YAML."""
    return {
        "id": "big",
        "name": "Big",
        "labels": [
            {"id": f"l{i}", "name": f"Label {i}", "category": "finding", "definition": "a finding"} for i in range(n)
        ],
    }


# ---------------------------------------------------------------- item 6: vocabulary size and parse time


def test_a_vocabulary_over_the_limit_is_refused_before_its_labels_are_parsed():
    with pytest.raises(VocabularyError, match=rf"{MAX_LABELS + 1:,} labels; a vocabulary holds at most {MAX_LABELS:,}"):
        parse_vocabulary(vocabulary(MAX_LABELS + 1), "big.yaml")
    assert len(parse_vocabulary(vocabulary(MAX_LABELS), "big.yaml").ids) == MAX_LABELS


def test_init_with_100000_labels_is_refused_at_once(tmp_path):
    path = tmp_path / "big.yaml"
    items = "".join(
        f"  - id: l{i}\n    name: Label {i}\n    category: finding\n    definition: a finding\n" for i in range(100_000)
    )
    path.write_text(f"id: big\nname: Big\nlabels:\n{items}", encoding="utf-8")
    result = cli(["init", str(tmp_path / "study"), "--vocab", str(path)])
    assert result.exit_code == 2, result.output
    assert (
        "more than 1,000 labels; a vocabulary holds at most 1,000" in result.output and "Traceback" not in result.output
    )
    assert not (tmp_path / "study" / "workbench.db").exists()


def test_a_duplicate_id_among_many_labels_is_still_named():
    data = vocabulary(MAX_LABELS)
    data["labels"][-1]["id"] = "l7"
    with pytest.raises(VocabularyError, match="label id 'l7' is used more than once"):
        parse_vocabulary(data, "big.yaml")


# ---------------------------------------------------------------- item 7: optimise after a partial run


@pytest.fixture
def partial_run(small_study):
    """small_study split into tuning/validation, with a finished run of two labels only."""
    small_study.split_cohort("dev", 0.3)
    run = small_study.start_run("dev", labels=["edema", "pneumonia"])
    return small_study, run


def test_optimise_after_a_partial_run_names_the_missing_labels_and_the_command(partial_run):
    wb, run = partial_run
    with pytest.raises(UserError) as err:
        wb.optimise(rounds=1)
    text = str(err.value)
    assert f"run {run.run_id} labelled 2 of {len(wb.vocab.asked_ids)} asked labels" in text
    assert "atelectasis" in text and "edema" not in text.split("needs:")[1].split(";")[0]
    assert (
        f"workbench run --cohort dev --prompt {wb.prompt_commit()[:8]}" in text and "--labels edema,pneumonia" in text
    )
    assert wb.optimise(labels=["edema"], rounds=1).labels == ["edema"]  # what it covers still works


def test_suggest_and_the_cli_say_the_same_instead_of_a_key_error(partial_run):
    wb, run = partial_run
    with pytest.raises(UserError, match=r"lacks 1 that suggest needs: atelectasis; label them first"):
        wb.suggest("atelectasis")
    result = cli(["optimise", "--rounds", "1", "--study", str(wb.root)])
    assert result.exit_code == 2 and result.output.startswith(f"error: run {run.run_id} labelled 2 of"), result.output
    assert "not in index" not in result.output


# ---------------------------------------------------------------- item 5: control characters in report text


def write(path, text: str):
    """Write a file (bytes as given: NUL and all) and return its path."""
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x0b"])
def test_a_control_character_in_report_text_is_refused_naming_row_and_column(study, tmp_path, char):
    path = write(
        tmp_path / "reports.csv",
        f"id,findings,impression\na1,Clear lungs.,Normal.\na2,Small eff{char}usion.,Effusion.\n",
    )
    with pytest.raises(ImportProblems) as err:
        study.import_reports(path, "dev")
    assert f"reports.csv row 3, column 'findings': report text contains U+{ord(char):04X}" in str(err.value)
    assert "at character 10" in str(err.value)
    assert study.cohorts().empty  # nothing stored


def test_tab_newline_and_crlf_stay_accepted(study, tmp_path):
    path = write(tmp_path / "reports.csv", 'id,findings,impression\r\na1,"Heart:\tnormal.\r\nLungs clear.",Normal.\r\n')
    assert study.import_reports(path, "dev").added == 1


def test_the_same_check_on_jsonl_openi_and_the_cli(study, tmp_path):
    jsonl = write(
        tmp_path / "reports.jsonl",
        json.dumps({"id": "j1", "text": "ok"}) + "\n" + json.dumps({"id": "j2", "text": "nul\u0000here"}) + "\n",
    )
    with pytest.raises(
        ImportProblems, match=r"reports.jsonl row 2, column 'text': report text contains U\+0000 \(NUL\)"
    ):
        study.import_reports(jsonl, "dev")
    reports = (
        (DATA / "importers" / "openi_reports.csv")
        .read_text()
        .replace("Mildly enlarged heart.", "Mildly\x00 enlarged heart.")
    )
    with pytest.raises(
        ImportProblems, match=r"openi_reports.csv row 3, column 'findings': report text contains U\+0000"
    ):
        from workbench.importers import read_openi

        read_openi(write(tmp_path / "openi_reports.csv", reports), DATA / "importers" / "openi_labels14.csv")
    result = cli(["import", "reports", str(jsonl), "--cohort", "dev", "--study", str(study.root)])
    assert result.exit_code == 2 and "row 2, column 'text': report text contains U+0000 (NUL)" in result.output


def test_readings_refuse_control_characters_in_their_ids(small_study, tmp_path):
    path = write(tmp_path / "readings.csv", "report_id,label,reader,value\ns1,edema,reader\x00x,1\n")
    with pytest.raises(
        ImportProblems,
        match=r"row 2, column 'reader': reader contains a control character or one that hides or reorders text \(U\+0000 \(NUL\) at character 7\)",
    ):
        small_study.import_readings(path)


def test_migrate_db_names_the_report_with_a_nul_and_leaves_the_target_empty(small_study, tmp_path):
    from sqlalchemy import text

    with small_study.engine.begin() as conn:  # an old study: stored before the importers refused it
        conn.execute(text("UPDATE report SET findings = 'Heart' || char(0) || 'normal' WHERE id = 's3'"))
    target = tmp_path / "target.db"
    with pytest.raises(
        StudyError,
        match=r"NUL character\(s\) in the study's text, which PostgreSQL cannot store: "
        r"report s3, column findings; nothing was copied",
    ):
        small_study.migrate_database(f"sqlite:///{target}")
    assert not target.exists() or target.stat().st_size == 0
    assert small_study.config.database in (None, "") or "target" not in str(small_study.config.database)


# ---------------------------------------------------------------- item 11: report ids and cohort names


@pytest.mark.parametrize("rid", ["s\u202e9gpj", "s\u200b1", "s\ufeff1", "s\u2066x\u2069", "s\u00ad1", "s\u20281"])
def test_report_ids_refuse_invisible_and_direction_characters(study, tmp_path, rid):
    path = write(tmp_path / "reports.csv", f"id,findings,impression\nok1,Clear.,Normal.\n{rid},Clear.,Normal.\n")
    with pytest.raises(ImportProblems) as err:
        study.import_reports(path, "dev")
    assert (
        f"row 3, column 'id': report id contains a control character or one that hides or reorders text (U+{ord(rid[1]):04X}"
        in str(err.value)
    )
    assert study.cohorts().empty


def test_the_hidden_character_set_covers_every_control_and_format_character():
    import unicodedata

    from workbench.core.names import HIDDEN

    planes = [*range(0x20000), *range(0xE0000, 0xE1000)]  # the only planes holding such characters (Unicode 15)
    missing = [
        hex(c) for c in planes if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp") and not HIDDEN.match(chr(c))
    ]
    assert missing == []
    assert not HIDDEN.search("s1 Ünïcode-ids_ok.7 日本")


@pytest.mark.parametrize(
    "name,why",
    [
        ("dev\nrm", "U+000A"),
        ("dev\x00", "U+0000"),
        ("te\u202ets", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
        ("d\u200bev", "U+200B (ZERO WIDTH SPACE)"),
        ("x" * 5000, "5,000 characters long; at most 100"),
        ("  ", "blank"),
    ],
)
def test_cohort_names_are_checked_in_the_services_and_the_cli(study, tmp_path, name, why):
    path = write(tmp_path / "reports.csv", "id,findings,impression\na1,Clear.,Normal.\n")
    with pytest.raises(UserError, match=re.escape(why)):
        study.import_reports(path, name)
    assert study.cohorts().empty
    result = cli(["import", "reports", str(path), "--cohort", name, "--study", str(study.root)])
    assert result.exit_code == 2 and why in result.output and "Traceback" not in result.output
    assert study.cohorts().empty


def test_a_plain_cohort_name_of_100_characters_is_fine(study, tmp_path):
    path = write(tmp_path / "reports.csv", "id,findings,impression\na1,Clear.,Normal.\n")
    assert study.import_reports(path, "c" * 100).added == 1


# ---------------------------------------------------------------- item 4: only regular files in prompts/


def test_prompts_save_refuses_a_symlink_naming_it_and_commits_nothing(small_study, tmp_path):
    wb = small_study
    folder = wb.paths.prompts
    outside = tmp_path / "edema-elsewhere.yaml"
    outside.write_text((folder / "edema.yaml").read_text().replace("edema", "edema", 1) + "\n# edited\n")
    (folder / "edema.yaml").unlink()
    (folder / "edema.yaml").symlink_to(outside)
    head = wb.prompt_commit()
    result = cli(["prompts", "save", "edema", "-m", "via a link", "--study", str(wb.root)])
    assert result.exit_code == 2, result.output
    assert f"edema.yaml is a symbolic link (to {outside})" in result.output and "Nothing was saved" in result.output
    assert wb.prompt_commit() == head
    status = cli(["prompts", "status", "--study", str(wb.root)])
    assert status.exit_code == 2 and "edema.yaml is a symbolic link" in status.output


def test_a_named_pipe_in_the_prompt_folder_is_refused(small_study):
    import os

    os.mkfifo(small_study.paths.prompts / "fracture.yaml.tmp")
    with pytest.raises(PromptRepoError, match=r"fracture.yaml.tmp is not a regular file"):
        small_study.working_edit("edema")


def test_a_link_committed_before_the_check_is_named_when_the_version_is_read(small_study):
    import git

    folder = small_study.paths.prompts
    (folder / "edema.yaml").unlink()
    (folder / "edema.yaml").symlink_to(folder / "pneumonia.yaml")
    repo = git.Repo(folder)
    try:
        repo.index.add(["edema.yaml"])
        commit = repo.index.commit("a link, committed with git").hexsha
    finally:
        repo.close()
    with pytest.raises(PromptRepoError, match=rf"edema.yaml is a symbolic link in prompt version {commit[:8]}"):
        small_study.prompt_set(commit)


# ---------------------------------------------------------------- item 2: freezing is all or nothing


class Killed(BaseException):
    """A simulated kill: not an Exception, so only a `finally`/BaseException handler sees it."""


def freeze_state(wb, name="v1") -> dict:
    """What a freeze of `name` left: the tag, the files in bundles/, the freeze events."""
    from workbench.store import prompt_repo

    events = wb.audit_log(entity="bundle", key=name)
    return {
        "tag": name in prompt_repo.tags(wb.paths.prompts),
        "files": sorted(p.name for p in wb.paths.bundles.glob(f"{name}.*")) if wb.paths.bundles.exists() else [],
        "events": int((events["action"] == "freeze").sum()) if len(events) else 0,
    }


NOTHING = {"tag": False, "files": [], "events": 0}


def _raise_before(exc):
    """A replacement step that fails before doing anything."""

    def step(*args, **kwargs):
        raise exc

    return step


def _raise_after(real, exc):
    """A replacement step that does its work, then fails (a kill just after it)."""

    def step(*args, **kwargs):
        real(*args, **kwargs)
        raise exc

    return step


def _faults():
    """(where, module, attribute, replacement builder) for a fault between each step of freeze."""
    import errno

    from workbench import bundle as bundle_mod
    from workbench.store import prompt_repo, queries

    full = OSError(errno.ENOSPC, "No space left on device")
    return [
        ("tag refused", prompt_repo, "create_tag", lambda real: _raise_before(full)),
        ("killed after the tag", prompt_repo, "create_tag", lambda real: _raise_after(real, Killed())),
        ("disk full after the tag", prompt_repo, "create_tag", lambda real: _raise_after(real, full)),
        ("killed after the JSON, before the YAML", bundle_mod, "_write_readable", lambda real: _raise_before(Killed())),
        ("disk full writing the YAML", bundle_mod, "_write_readable", lambda real: _raise_before(full)),
        ("killed after both files", bundle_mod, "write_bundle", lambda real: _raise_after(real, Killed())),
        ("killed before the audit event", queries, "add_audit", lambda real: _raise_before(Killed())),
        ("database refuses the audit commit", queries, "add_audit", lambda real: _raise_after(real, full)),
    ]


@pytest.mark.parametrize("where", [f[0] for f in _faults()])
def test_a_fault_between_any_two_steps_leaves_nothing_and_the_name_free(small_study, monkeypatch, where):
    wb = small_study
    wb.start_run("dev")
    _, module, attr, build = next(f for f in _faults() if f[0] == where)
    real = getattr(module, attr)
    with monkeypatch.context() as m:
        m.setattr(module, attr, build(real))
        with pytest.raises((Killed, StudyError, StorageFault)) as err:
            wb.freeze("v1")
    if err.type in (StudyError, StorageFault):
        message = str(err.value)
        assert "\n" not in message and message.startswith("freeze of 'v1' failed: the disk is full; nothing was kept")
        assert "the name is still free" in message
    assert freeze_state(wb) == NOTHING
    info = wb.freeze("v1")  # the name was not burnt
    assert freeze_state(wb) == {"tag": True, "files": ["v1.json", "v1.yaml"], "events": 1}
    assert wb.check_bundle(info.json)[1]["ok"]


@pytest.mark.parametrize("point", ["after the tag", "after the bundle files"])
def test_a_real_kill_mid_freeze_is_undone_by_the_next_freeze(small_study, point):
    import os
    import subprocess
    import sys

    wb = small_study
    wb.start_run("dev")
    patch = (
        "from workbench.store import prompt_repo as m; real = m.create_tag; name = 'create_tag'"
        if point == "after the tag"
        else "from workbench import bundle as m; real = m._write_readable; name = '_write_readable'"
    )
    code = (
        f"import os, signal, sys\n{patch}\n"
        "def step(*a, **k):\n    real(*a, **k)\n    os.kill(os.getpid(), signal.SIGKILL)\n"
        "setattr(m, name, step)\nfrom workbench.services import Workbench\nWorkbench(sys.argv[1]).freeze('v1')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(wb.root)], env=os.environ.copy(), capture_output=True, timeout=300
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    left = freeze_state(wb)
    assert left["tag"] and left["events"] == 0  # what a kill leaves, before the next freeze
    info = wb.freeze("v1")
    assert freeze_state(wb) == {"tag": True, "files": ["v1.json", "v1.yaml"], "events": 1}
    assert all(check["ok"] for check in wb.check_bundle(info.json))


def test_a_tag_made_by_hand_still_blocks_the_name(small_study):
    from workbench.store import prompt_repo

    wb = small_study
    wb.start_run("dev")
    prompt_repo.create_tag(wb.paths.prompts, "v1", wb.prompt_commit(), "release v1", ("me", "me@example.org"))
    with pytest.raises(StudyError, match="already frozen"):
        wb.freeze("v1")
    assert prompt_repo.tags(wb.paths.prompts)["v1"] == wb.prompt_commit()


@pytest.fixture
def full_disk(study_templates, tmp_path):
    """The small study on a real 24 MB tmpfs (skipped where this process may not mount one); yields
    (workbench, fill) where fill(free_bytes) fills the disk up to that much free space."""
    import shutil
    import subprocess

    from conftest import copy_study

    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip() or made.returncode})")
    try:
        wb = copy_study(study_templates["small"], mount / "study")
        wb.start_run("dev")
        filler = mount / "filler"

        def fill(free: int) -> None:
            filler.unlink(missing_ok=True)
            room = shutil.disk_usage(mount).free - free
            try:
                with open(filler, "wb") as out:
                    while room > 0:
                        out.write(b"\0" * min(room, 1 << 20))
                        room -= 1 << 20
            except OSError:
                pass  # full: that is the point

        yield wb, fill
    finally:
        with contextlib.suppress(NameError):
            wb.engine.dispose()
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_freeze_on_a_full_disk_leaves_nothing_and_says_so_in_one_line(full_disk):
    wb, fill = full_disk
    outcomes = []
    for free in (0, 4096, 16384, 65536):  # a different step runs out of space each time
        fill(free)
        result = cli(["freeze", "--name", "v1", "--study", str(wb.root)])
        outcomes.append(result.exit_code)
        if result.exit_code == 0:
            break
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "disk is full" in lines[0], result.output
        fill(10**9)  # room to look at what was left (fill nothing)
        assert freeze_state(wb) == NOTHING, (free, result.output)
    fill(10**9)
    assert 0 not in outcomes[:1]  # with no space at all it must fail
    if outcomes[-1] != 0:
        result = cli(["freeze", "--name", "v1", "--study", str(wb.root)])
        assert result.exit_code == 0, result.output
    assert freeze_state(wb) == {"tag": True, "files": ["v1.json", "v1.yaml"], "events": 1}


# ---------------------------------------------------------------- item 9: tokens expire and are revoked; passwords


@pytest.fixture
def accounts(local_auth):
    """A local-auth study with an admin (boss) and a reader (rdr) holding a fresh token."""
    wb = local_auth
    token = wb.as_actor(wb.authenticate("rdr", "reader-pass-0001")).create_token("rdr")
    boss = wb.as_actor(wb.authenticate("boss", "boss-pass-0001"))
    return wb, boss, token


def _token_rows(wb, user_id="rdr"):
    from sqlalchemy import text

    with wb.engine.connect() as conn:
        return conn.execute(
            text("SELECT created_at, expires_at FROM usertoken WHERE user_id = :u"), {"u": user_id}
        ).all()


def test_a_token_expires_after_90_days_by_default_and_is_then_refused(accounts):
    from datetime import datetime, timedelta

    from sqlalchemy import text

    wb, _, token = accounts
    ((created, expires),) = _token_rows(wb)
    days = (datetime.fromisoformat(expires) - datetime.now(UTC)).total_seconds() / 86400
    assert 89.9 < days <= 90
    assert wb.authenticate_token("rdr", token).user == "rdr"
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    with wb.engine.begin() as conn:
        conn.execute(text("UPDATE usertoken SET expires_at = :p"), {"p": past})
    with pytest.raises(
        PermissionDenied, match=r"this token of rdr expired on \d{4}-\d\d-\d\d; sign in with your password"
    ):
        wb.authenticate_token("rdr", token)


def test_a_token_from_before_expiry_existed_expires_90_days_after_it_was_made(accounts):
    from datetime import datetime, timedelta

    from sqlalchemy import text

    wb, _, token = accounts
    old = (datetime.now(UTC) - timedelta(days=91)).isoformat()
    with wb.engine.begin() as conn:
        conn.execute(text("UPDATE usertoken SET expires_at = '', created_at = :c"), {"c": old})
    with pytest.raises(PermissionDenied, match="expired"):
        wb.authenticate_token("rdr", token)


def test_the_expiry_is_set_at_creation_within_limits(accounts):
    from datetime import datetime

    wb, _, _ = accounts
    rdr = wb.as_actor(wb.authenticate("rdr", "reader-pass-0001"))
    rdr.revoke_tokens("rdr")
    rdr.create_token("rdr", days=7)
    ((_, expires),) = _token_rows(wb)
    assert 6.9 < (datetime.fromisoformat(expires) - datetime.now(UTC)).total_seconds() / 86400 <= 7
    with pytest.raises(StudyError, match="1 to 365 days"):
        rdr.create_token("rdr", days=400)
    result = cli(
        ["user", "token", "rdr", "--days", "0", "--study", str(wb.root)],
        env={"WORKBENCH_USER": "rdr"},
        input="reader-pass-0001\n",
    )
    assert result.exit_code == 2 and "--days" in result.output


def test_disable_then_enable_does_not_revive_an_old_token(accounts):
    wb, boss, token = accounts
    boss.set_disabled("rdr", True)
    boss.set_disabled("rdr", False)
    with pytest.raises(PermissionDenied, match="wrong token"):
        wb.authenticate_token("rdr", token)
    assert wb.authenticate("rdr", "reader-pass-0001").user == "rdr"  # the password still works
    assert "disabled" in json.loads(wb.audit_log(entity="token").iloc[0]["new"])["why"]


def test_a_role_change_revokes_tokens_and_a_same_role_set_does_not(accounts):
    wb, boss, token = accounts
    boss.set_role("rdr", "reader")  # no change: nothing revoked
    assert wb.authenticate_token("rdr", token).role == "reader"
    boss.set_role("rdr", "adjudicator")
    with pytest.raises(PermissionDenied, match="wrong token"):
        wb.authenticate_token("rdr", token)


def test_a_password_change_revokes_tokens_and_needs_the_current_password_for_your_own(accounts):
    wb, boss, token = accounts
    rdr = wb.as_actor(wb.authenticate("rdr", "reader-pass-0001"))
    with pytest.raises(PermissionDenied, match="current password"):
        rdr.set_password("rdr", "a-new-password-01")
    with pytest.raises(PermissionDenied, match="wrong password"):
        rdr.set_password("rdr", "a-new-password-01", current="not-my-password")
    assert wb.authenticate_token("rdr", token).user == "rdr"  # refused changes revoke nothing
    rdr.set_password("rdr", "a-new-password-01", current="reader-pass-0001")
    with pytest.raises(PermissionDenied, match="wrong token"):
        wb.authenticate_token("rdr", token)
    with pytest.raises(PermissionDenied, match="wrong password"):
        wb.authenticate("rdr", "reader-pass-0001")
    assert wb.authenticate("rdr", "a-new-password-01").user == "rdr"
    boss.set_password("rdr", "reset-by-admin-01")  # an admin resets without the old one
    assert wb.authenticate("rdr", "reset-by-admin-01").user == "rdr"
    with pytest.raises(PermissionDenied):
        rdr.set_password("boss", "taken-over-0001", current="reset-by-admin-01")  # not someone else's


def test_revoke_credentials_is_the_one_store_function(accounts):
    from workbench.store import queries as q

    wb, _, token = accounts
    with wb.session() as s:
        assert q.revoke_credentials(s, "rdr") == 1
    with pytest.raises(PermissionDenied):
        wb.authenticate_token("rdr", token)


def test_cli_passwd_with_hidden_prompts_then_the_old_token_is_refused(accounts):
    wb, _, token = accounts
    study = ["--study", str(wb.root)]
    result = cli(
        ["user", "passwd", "rdr", *study],
        env={"WORKBENCH_USER": "rdr", "WORKBENCH_TOKEN": token},
        input="reader-pass-0001\nfresh-password-01\nfresh-password-01\n",
    )
    assert result.exit_code == 0, result.output
    assert "fresh-password-01" not in result.output and "tokens are revoked" in result.output
    again = cli(["reference", *study], env={"WORKBENCH_USER": "rdr", "WORKBENCH_TOKEN": token})
    assert again.exit_code == 2 and "wrong token" in again.output
    stdin = cli(
        ["user", "passwd", "rdr", "--password-stdin", *study],
        env={"WORKBENCH_USER": "rdr"},
        input="fresh-password-01\nfresh-password-01\nthird-password-01\n",
    )
    assert stdin.exit_code == 0, stdin.output
    assert wb.authenticate("rdr", "third-password-01").user == "rdr"


def test_a_password_value_option_is_refused_with_the_way_to_do_it(accounts):
    wb, _, _ = accounts
    study = ["--study", str(wb.root)]
    result = cli(
        ["user", "add", "eve", "--role", "reader", "--password", "eve-password-001", *study],
        env={"WORKBENCH_USER": "boss"},
        input="boss-pass-0001\n",
    )
    assert result.exit_code == 2 and "--password VALUE is no longer accepted" in result.output
    assert "--password-stdin" in result.output and "eve" not in set(wb.users()["id"])
    ok = cli(
        ["user", "add", "eve", "--role", "reader", "--password-stdin", *study],
        env={"WORKBENCH_USER": "boss"},
        input="boss-pass-0001\neve-password-001\n",
    )
    assert ok.exit_code == 0, ok.output
    assert wb.authenticate("eve", "eve-password-001").user == "eve"
    typed = cli(
        ["user", "add", "fay", "--role", "reader", *study],
        env={"WORKBENCH_USER": "boss"},
        input="boss-pass-0001\nfay-password-001\nfay-password-001\n",
    )
    assert typed.exit_code == 0 and "fay-password-001" not in typed.output
