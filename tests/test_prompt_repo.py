"""The study's prompt repository: revisions as commits with their author, history, diffs, any
version, revert, refused saves (conflict, empty message, nothing to save, invalid prompt, role),
no global Git identity needed, and the project's own repository left alone.

Real temporary Git repositories (GitPython) and real SQLite studies; no mocks.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import git
import pytest
import yaml
from conftest import ROOT

from workbench.core.prompts import PromptError
from workbench.services import Actor, ConflictError, PermissionDenied, init_study
from workbench.store import prompt_repo
from workbench.store.prompt_repo import PromptRepoError
from workbench.study import StudyError

ANN = Actor("ann", "prompt_engineer", name="Ann Smith", email="ann@example.org")
BOB = Actor("bob", "prompt_engineer", name="Bob Jones", email="bob@example.org")


def _project_git(*args: str) -> str:
    """Run git in the project's own repository (read-only commands only)."""
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def _project_state() -> dict:
    """What a stray write to the project's repository would change.

    Other engineers edit source, docs and tests while this file runs, so status lines for .py
    and .md files and for tests/ and bench/ are left out. Everything these tests could pollute
    by mistake (prompt YAML, vocabularies, bundles, databases, commits, tags, the repo's config)
    is compared.
    """

    def concurrent_edit(line: str) -> bool:
        path = line[3:].split(" -> ")[-1].strip().strip('"')
        return path.endswith((".py", ".md")) or path.startswith(("tests/", "bench/"))

    status = [
        line
        for line in _project_git("status", "--porcelain=v1", "--untracked-files=all").splitlines()
        if not concurrent_edit(line)
    ]
    return {
        "head": _project_git("rev-parse", "HEAD").strip(),
        "branch": _project_git("rev-parse", "--abbrev-ref", "HEAD").strip(),
        "status": sorted(status),
        "tags": _project_git("tag", "--list").split(),
        # git says where the config is: in a worktree .git is a file and the config is the main checkout's
        "config": (ROOT / _project_git("rev-parse", "--git-path", "config").strip()).read_text(encoding="utf-8"),
    }


PROJECT_BEFORE = _project_state()  # recorded when this file is collected, checked by its last test


@pytest.fixture
def ann(study):
    return study.as_actor(ANN)


@pytest.fixture
def bob(study):
    return study.as_actor(BOB)


def edited(lp, **changes):
    """A copy of a label prompt with some fields changed."""
    return dataclasses.replace(lp, **changes)


def head(wb) -> git.Commit:
    """The prompt repo's HEAD commit (opened and closed here)."""
    repo = git.Repo(wb.paths.prompts)
    try:
        return repo.head.commit
    finally:
        repo.close()


# ---------------------------------------------------------------- saving revisions


def test_save_several_labels_is_one_commit_with_author_and_message(ann):
    seed = ann.prompt_commit()
    pn = ann.label_prompt("pneumonia")
    co = ann.label_prompt("consolidation")
    commit = ann.save_prompts(
        [edited(pn, look_for=pn.look_for + ("airspace infection",)), edited(co, hedged="positive")],
        "Pneumonia: add a synonym; consolidation: hedged counts as positive",
        seed,
    )
    c = head(ann)
    assert c.hexsha == commit != seed
    assert (c.author.name, c.author.email) == ("Ann Smith", "ann@example.org")
    assert (c.committer.name, c.committer.email) == ("Ann Smith", "ann@example.org")
    assert c.message.strip() == "Pneumonia: add a synonym; consolidation: hedged counts as positive"
    assert sorted(c.stats.files) == ["consolidation.yaml", "pneumonia.yaml"]
    assert [p.hexsha for p in c.parents] == [seed]
    assert "airspace infection" in ann.label_prompt("pneumonia").look_for
    assert ann.label_prompt("consolidation").hedged == "positive"
    assert ann.label_prompt("consolidation", seed).hedged == "negative"


def test_history_per_label_and_for_the_whole_set(ann, bob):
    seed = ann.prompt_commit()
    pn = ann.label_prompt("pneumonia")
    c1 = ann.save_prompts([edited(pn, definition="Infection of the lung parenchyma.")], "Sharper definition", seed)
    co = bob.label_prompt("consolidation")
    c2 = bob.save_prompts([edited(co, look_for=co.look_for + ("airspace disease",))], "Consolidation synonym", c1)

    whole = ann.prompt_history()
    assert whole["commit"].tolist() == [c2, c1, seed]  # newest first
    assert whole["author"].tolist()[:2] == ["Bob Jones", "Ann Smith"]
    assert whole["message"].tolist()[:2] == ["Consolidation synonym", "Sharper definition"]
    assert whole["labels"].tolist()[:2] == ["consolidation", "pneumonia"]
    assert whole["labels"].iloc[2].count(",") == 19  # the seed commit holds all 20 label files

    only_pn = ann.prompt_history("pneumonia")
    assert only_pn["commit"].tolist() == [c1, seed]
    assert ann.prompt_history("Consolidation")["commit"].tolist() == [c2, seed]  # display name resolves
    assert ann.prompt_history("atelectasis")["commit"].tolist() == [seed]

    versions = prompt_repo.history(ann.paths.prompts, "pneumonia.yaml")
    assert [v.commit for v in versions] == [c1, seed]
    assert versions[0].email == "ann@example.org" and versions[0].files == ("pneumonia.yaml",)
    assert ann.previous_version("pneumonia") == seed
    assert ann.previous_version("atelectasis") is None


def test_read_any_version(ann):
    seed = ann.prompt_commit()
    pn = ann.label_prompt("pneumonia")
    c1 = ann.save_prompts([edited(pn, hedged="negative")], "Hedged pneumonia is negative", seed)
    c2 = ann.save_prompts([edited(pn, hedged="negative", notes="decided with the radiologists")], "Note why", c1)
    assert ann.label_prompt("pneumonia", seed).hedged == "positive"
    assert ann.label_prompt("pneumonia", c1[:8]).hedged == "negative"  # short sha
    assert ann.label_prompt("pneumonia", c1).notes != "decided with the radiologists"
    assert ann.label_prompt("pneumonia", c2).notes == "decided with the radiologists"
    assert ann.label_prompt("pneumonia").notes == "decided with the radiologists"
    text = prompt_repo.read_file(ann.paths.prompts, "pneumonia.yaml", seed)
    assert yaml.safe_load(text)["hedged"] == "positive"
    assert prompt_repo.read_file(ann.paths.prompts, "no_such_label.yaml", seed) is None
    assert set(ann.prompt_files(seed)) == set(ann.prompt_files(c2))
    assert ann.prompt_files(seed)["atelectasis.yaml"] == ann.prompt_files(c2)["atelectasis.yaml"]
    with pytest.raises(PromptRepoError, match="unknown prompt version 'nosuchref'"):
        ann.prompt_set("nosuchref")


def test_diff_or_revert_against_an_unknown_version_is_a_clear_error(ann):
    with pytest.raises(ValueError, match="unknown prompt version 'nosuchref'"):
        ann.prompt_diff("pneumonia", "nosuchref")
    with pytest.raises(ValueError, match="unknown prompt version 'nosuchref'"):
        ann.revert_label("pneumonia", "nosuchref")


def test_diff_between_two_versions_as_text_and_fields(ann):
    seed = ann.prompt_commit()
    pn = ann.label_prompt("pneumonia")
    new_example = dataclasses.replace(pn.examples[0], text="Possible early pneumonia.", value=1, why="hedged")
    c1 = ann.save_prompts(
        [
            edited(
                pn,
                look_for=("pneumonia", "bronchopneumonia"),  # 'infectious process' removed, one added
                do_not_label_when=("the report only mentions 'aspiration' without an infiltrate.",),
                examples=pn.examples + (new_example,),
                hedged="negative",
            )
        ],
        "Tighten pneumonia",
        seed,
    )

    diff = ann.prompt_diff("pneumonia", seed, c1)
    assert diff.label == "pneumonia"
    assert diff.unified.startswith(f"--- pneumonia.yaml@{seed[:8]}\n+++ pneumonia.yaml@{c1[:8]}")
    added = [line for line in diff.unified.splitlines() if line.startswith("+") and not line.startswith("+++")]
    removed = [line for line in diff.unified.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert any("bronchopneumonia" in line for line in added)
    assert any("infectious process" in line for line in removed)
    assert any("hedged: negative" in line for line in added) and any("hedged: positive" in line for line in removed)

    fields = diff.fields
    assert fields["added"]["look_for"] == ["bronchopneumonia"]
    assert fields["removed"]["look_for"] == ["infectious process"]
    assert fields["added"]["do_not_label_when"] == ["the report only mentions 'aspiration' without an infiltrate."]
    assert fields["added"]["examples"] == ["[1] Possible early pneumonia."]
    assert "examples" not in fields["removed"]
    assert fields["changed"]["hedged"] == ("positive", "negative")

    back = ann.prompt_diff("pneumonia", c1, seed)  # either direction
    assert back.fields["removed"]["look_for"] == ["bronchopneumonia"]
    assert back.fields["added"]["look_for"] == ["infectious process"]

    latest = ann.prompt_diff("pneumonia", seed)  # ref_b defaults to the latest version
    assert latest.fields == fields and latest.unified.splitlines()[1] == "+++ pneumonia.yaml@HEAD"

    untouched = ann.prompt_diff("atelectasis", seed, c1)
    assert untouched.unified == ""
    assert untouched.fields == {"changed": {}, "added": {}, "removed": {}}


def test_revert_a_label_to_an_earlier_version_as_a_new_commit(ann):
    seed = ann.prompt_commit()
    pn, co = ann.label_prompt("pneumonia"), ann.label_prompt("consolidation")
    c1 = ann.save_prompts([edited(pn, hedged="negative"), edited(co, hedged="positive")], "Swap hedges", seed)
    c2 = ann.revert_label("pneumonia", seed)
    assert c2 not in (seed, c1)
    c = head(ann)
    assert c.hexsha == c2 and [p.hexsha for p in c.parents] == [c1]  # a new commit, history kept
    assert c.message.strip() == f"Revert pneumonia to {seed[:8]}"
    assert list(c.stats.files) == ["pneumonia.yaml"]
    assert ann.label_prompt("pneumonia") == ann.label_prompt("pneumonia", seed)
    assert ann.label_prompt("consolidation").hedged == "positive"  # the other label keeps its change
    assert ann.prompt_history("pneumonia")["commit"].tolist() == [c2, c1, seed]
    c3 = ann.revert_label("consolidation", seed, "Back to the starter policy")
    assert head(ann).message.strip() == "Back to the starter policy" and c3 != c2
    with pytest.raises(StudyError, match="nothing to save"):
        ann.revert_label("consolidation", seed)  # already the same as that version


# ---------------------------------------------------------------- concurrent edits


def test_conflicting_save_is_refused_and_nothing_is_lost(ann, bob):
    base = ann.prompt_commit()
    pn = ann.label_prompt("pneumonia", base)
    ann_edit = edited(pn, look_for=pn.look_for + ("bronchopneumonia",))
    ann.save_draft(ann_edit, base)  # Ann starts editing from the seed ...

    bob_commit = bob.save_prompts([edited(pn, definition="Infection of the lung (Bob).")], "Bob's pneumonia", base)

    with pytest.raises(ConflictError) as err:  # ... and tries to save after Bob
        ann.commit_drafts(["pneumonia"], "Ann's pneumonia")
    message = str(err.value)
    assert "pneumonia.yaml changed since version" in message and base[:8] in message
    assert "Bob Jones" in message and "Nothing was saved" in message
    with pytest.raises(ConflictError):  # a direct save from the old base too
        ann.save_prompts([ann_edit], "Ann's pneumonia", base)

    # nothing lost: Bob's change is the latest version, Ann's draft is still there
    assert ann.prompt_commit() == bob_commit
    assert ann.label_prompt("pneumonia").definition == "Infection of the lung (Bob)."
    draft, draft_base, exists = ann.draft("pneumonia")
    assert exists and draft_base == base and "bronchopneumonia" in draft.look_for
    assert len(ann.drafts()) == 1

    # Ann re-applies her edit on the latest version and saves: both changes are kept
    latest = ann.label_prompt("pneumonia")
    merged = ann.save_prompts(
        [edited(latest, look_for=latest.look_for + ("bronchopneumonia",))], "Ann's pneumonia", bob_commit
    )
    final = ann.label_prompt("pneumonia", merged)
    assert final.definition == "Infection of the lung (Bob)." and "bronchopneumonia" in final.look_for
    assert len(ann.drafts()) == 0  # saving the label closes the draft


def test_conflict_message_names_who_changed_that_label(ann, bob, study):
    base = ann.prompt_commit()
    pn, at = ann.label_prompt("pneumonia"), ann.label_prompt("atelectasis")
    c1 = bob.save_prompts([edited(pn, hedged="negative")], "Bob: pneumonia hedge", base)
    carol = study.as_actor(Actor("carol", "prompt_engineer", name="Carol White", email="carol@example.org"))
    carol.save_prompts([edited(at, notes="Carol's note")], "Carol: atelectasis note", c1)
    with pytest.raises(ConflictError) as err:
        ann.save_prompts([edited(pn, notes="Ann's note")], "Ann: pneumonia note", base)
    assert "Bob Jones" in str(err.value) and "Carol White" not in str(err.value)


def test_saving_a_different_label_from_an_older_base_succeeds(ann, bob):
    base = ann.prompt_commit()
    pn, co = ann.label_prompt("pneumonia"), ann.label_prompt("consolidation")
    bob_commit = bob.save_prompts([edited(pn, hedged="negative")], "Bob: pneumonia hedge", base)
    ann_commit = ann.save_prompts([edited(co, hedged="positive")], "Ann: consolidation hedge", base)
    assert [p.hexsha for p in head(ann).parents] == [bob_commit]
    assert ann.label_prompt("pneumonia", ann_commit).hedged == "negative"  # Bob's change kept
    assert ann.label_prompt("consolidation", ann_commit).hedged == "positive"


def test_commit_drafts_checks_each_draft_against_its_own_base(ann, bob):
    c0 = ann.prompt_commit()
    pn = ann.label_prompt("pneumonia")
    ann.save_draft(edited(pn, notes="Ann on pneumonia"), c0)  # an older draft
    co = bob.label_prompt("consolidation")
    c1 = bob.save_prompts([edited(co, hedged="positive")], "Bob: consolidation hedge", c0)
    latest_co = ann.label_prompt("consolidation")  # Ann starts from Bob's version
    ann.save_draft(edited(latest_co, notes="Ann on consolidation"), c1)
    commit = ann.commit_drafts(["pneumonia", "consolidation"], "Ann: both labels")
    saved = ann.label_prompt("consolidation", commit)
    assert saved.hedged == "positive" and saved.notes == "Ann on consolidation"  # Bob's change kept, Ann's added


def test_commit_drafts_saves_every_named_draft_as_one_version(ann):
    base = ann.prompt_commit()
    for label in ("pneumonia", "consolidation"):
        lp = ann.label_prompt(label)
        ann.save_draft(edited(lp, notes=f"reviewed {label}"), base)
    assert sorted(ann.drafts()["label"]) == ["consolidation", "pneumonia"]
    commit = ann.commit_drafts(["pneumonia", "consolidation"], "Review notes")
    assert sorted(head(ann).stats.files) == ["consolidation.yaml", "pneumonia.yaml"] and head(ann).hexsha == commit
    assert ann.label_prompt("consolidation").notes == "reviewed consolidation"
    assert ann.drafts().empty
    with pytest.raises(StudyError, match="no draft"):
        ann.commit_drafts(["pneumonia"], "again")


# ---------------------------------------------------------------- refused saves


def test_empty_message_is_refused(ann):
    base = ann.prompt_commit()
    pn = ann.label_prompt("pneumonia")
    for message in ("", "   \n"):
        with pytest.raises(StudyError, match="needs a message"):
            ann.save_prompts([edited(pn, hedged="negative")], message, base)
    assert ann.prompt_commit() == base and len(ann.prompt_history()) == 1


def test_saving_identical_content_is_refused(ann):
    base = ann.prompt_commit()
    pn = ann.label_prompt("pneumonia")
    c1 = ann.save_prompts([edited(pn, hedged="negative")], "Hedged pneumonia is negative", base)
    with pytest.raises(StudyError, match="nothing to save"):
        ann.save_prompts([ann.label_prompt("pneumonia")], "No change", c1)
    assert ann.prompt_commit() == c1 and len(ann.prompt_history()) == 2


def test_saving_identical_content_of_a_starter_label_is_refused(ann):
    base = ann.prompt_commit()
    with pytest.raises(StudyError, match="nothing to save"):
        ann.save_prompts([ann.label_prompt("pneumonia")], "No change", base)
    assert ann.prompt_commit() == base


def test_invalid_prompt_is_refused_naming_file_and_key_and_nothing_is_committed(ann):
    base = ann.prompt_commit()
    repo_dir = ann.paths.prompts
    files_before = {p.name: p.read_bytes() for p in repo_dir.glob("*.yaml")}
    pn, co = ann.label_prompt("pneumonia"), ann.label_prompt("consolidation")
    with pytest.raises(PromptError) as err:
        ann.save_prompts([edited(co, notes="fine"), edited(pn, hedged="maybe")], "Hedge maybe", base)
    assert "pneumonia.yaml" in str(err.value) and "hedged" in str(err.value) and "'maybe'" in str(err.value)
    bad_temporal = edited(
        pn,
        temporal=(("resolved", "negative"), ("stable", "sometimes"), ("improving", "positive"), ("prior", "negative")),
    )
    with pytest.raises(PromptError, match=r"pneumonia\.yaml: temporal\.stable"):
        ann.save_prompts([bad_temporal], "Temporal sometimes", base)
    with pytest.raises(PromptError, match=r"pneumonia\.yaml.*hedged"):
        ann.save_draft(edited(pn, hedged="maybe"), base)  # a draft is validated too
    # nothing committed, nothing written, nothing left as a draft
    assert ann.prompt_commit() == base and len(ann.prompt_history()) == 1
    assert {p.name: p.read_bytes() for p in repo_dir.glob("*.yaml")} == files_before
    repo = git.Repo(repo_dir)
    try:
        assert not repo.is_dirty(untracked_files=True)
    finally:
        repo.close()
    assert ann.drafts().empty


@pytest.mark.parametrize("role", ["reader", "adjudicator"])
def test_readers_and_adjudicators_cannot_save_prompts(study, role):
    wb = study.as_actor(Actor("rita", role, name="Rita Reader", email="rita@example.org"))
    base = wb.prompt_commit()
    pn = wb.label_prompt("pneumonia")  # reading is allowed
    with pytest.raises(PermissionDenied, match="edit prompts"):
        wb.save_prompts([edited(pn, hedged="negative")], "Not allowed", base)
    with pytest.raises(PermissionDenied):
        wb.save_draft(edited(pn, hedged="negative"), base)
    with pytest.raises(PermissionDenied):
        wb.revert_label("pneumonia", base)
    assert study.prompt_commit() == base


# ---------------------------------------------------------------- the repository itself


def test_prompt_repo_functions_on_a_bare_temporary_repository(tmp_path):
    path = tmp_path / "prompts"
    seed = prompt_repo.init_repo(path, {"a.yaml": "x: 1\n", "b.yaml": "y: 1\n"}, "seed", ("Seeder", "seed@example.org"))
    assert prompt_repo.resolve(path) == seed and prompt_repo.read_files(path) == {
        "a.yaml": "x: 1\n",
        "b.yaml": "y: 1\n",
    }
    c1 = prompt_repo.commit_files(path, {"a.yaml": "x: 2\n"}, "a two", ("Ann Smith", "ann@example.org"), base=seed)
    # b changed by someone working from c1; a save of a from the seed is still fine, b from the seed is not
    c2 = prompt_repo.commit_files(path, {"b.yaml": "y: 2\n"}, "b two", ("Bob Jones", "bob@example.org"), base=c1)
    c3 = prompt_repo.commit_files(path, {"a.yaml": "x: 3\n"}, "a three", ("Ann Smith", "ann@example.org"), base=c1)
    with pytest.raises(PromptRepoError, match=r"b\.yaml changed since version"):
        prompt_repo.commit_files(path, {"b.yaml": "y: 9\n"}, "b nine", ("Ann Smith", "ann@example.org"), base=seed)
    assert prompt_repo.read_file(path, "b.yaml") == "y: 2\n"
    assert (path / "b.yaml").read_text() == "y: 2\n"  # the refused content was not left in the working tree
    with pytest.raises(PromptRepoError, match="unknown base version"):
        prompt_repo.commit_files(
            path, {"a.yaml": "x: 4\n"}, "a four", ("Ann Smith", "ann@example.org"), base="nosuchbase"
        )
    assert [v.commit for v in prompt_repo.history(path)] == [c3, c2, c1, seed]
    assert [v.commit for v in prompt_repo.history(path, "a.yaml")] == [c3, c1, seed]
    assert [v.author for v in prompt_repo.history(path, "b.yaml")] == ["Bob Jones", "Seeder"]
    assert (
        prompt_repo.read_file(path, "a.yaml", c1) == "x: 2\n"
        and prompt_repo.read_file(path, "a.yaml", seed) == "x: 1\n"
    )
    assert prompt_repo.ordinal(path, seed) == 1 and prompt_repo.ordinal(path, c3) == 4
    with pytest.raises(PromptRepoError, match="unknown prompt version"):
        prompt_repo.resolve(path, "v9")
    with pytest.raises(PromptRepoError, match="not a prompt repository"):
        prompt_repo.history(tmp_path)


def test_save_from_an_unknown_full_sha_base_is_a_clear_error(tmp_path):
    path = tmp_path / "prompts"
    prompt_repo.init_repo(path, {"a.yaml": "x: 1\n"}, "seed")
    with pytest.raises(PromptRepoError, match="unknown base version"):
        prompt_repo.commit_files(path, {"a.yaml": "x: 2\n"}, "a two", ("Ann Smith", "ann@example.org"), base="0" * 40)
    assert prompt_repo.read_file(path, "a.yaml") == "x: 1\n"


def test_repo_is_opened_per_operation_and_closed(study):
    """Many operations in one long-running process must not accumulate open files."""

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    path = study.paths.prompts
    seed = study.prompt_commit()
    for _ in range(3):  # warm up imports and caches
        (
            prompt_repo.history(path),
            prompt_repo.read_files(path, seed),
            prompt_repo.read_file(path, "pneumonia.yaml", seed),
        )
    before = open_fds()
    for _ in range(40):
        prompt_repo.history(path)
        prompt_repo.read_files(path, seed)
        prompt_repo.read_file(path, "pneumonia.yaml", seed)
        prompt_repo.resolve(path, seed[:8])
        prompt_repo.tags(path)
    assert open_fds() - before <= 3


def test_works_with_no_global_git_identity(tmp_path, monkeypatch):
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    # git itself really has no identity here
    probe = subprocess.run(["git", "config", "--global", "user.name"], capture_output=True, text=True)
    assert probe.returncode != 0 and probe.stdout == ""

    wb = init_study(tmp_path / "s", vocab="ranscore-21")
    ann = wb.as_actor(ANN)
    pn = ann.label_prompt("pneumonia")
    commit = ann.save_prompts([edited(pn, hedged="negative")], "Works without a global identity", ann.prompt_commit())
    c = head(ann)
    assert c.hexsha == commit and c.author.email == "ann@example.org"
    ann.revert_label("pneumonia", c.parents[0].hexsha)
    # annotated tags need a tagger identity: freezing works too
    wb.import_reports(ROOT / "tests" / "data" / "reports_small.csv", "dev")
    wb.start_run("dev")
    info = wb.freeze("no-identity-v1")
    repo = git.Repo(wb.paths.prompts)
    try:
        tag = repo.tags["no-identity-v1"]
        assert tag.tag is not None and tag.commit.hexsha == info.commit
        # and the study repo really is its own repository
        assert Path(repo.working_tree_dir).resolve() == wb.paths.prompts.resolve() != ROOT
    finally:
        repo.close()


TEST_EMAILS = (
    "ann@example.org",
    "bob@example.org",
    "carol@example.org",
    "rita@example.org",
    "seed@example.org",
    "workbench@localhost",
    "local@workbench.local",
)


def test_zz_project_repository_is_untouched():
    """Runs last in this file: the project's HEAD, status, tags and config are what they were."""
    after = _project_state()
    if after["head"] != PROJECT_BEFORE["head"]:
        # the team may commit while this file runs: allow only their own commits on top
        subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", PROJECT_BEFORE["head"], after["head"]], check=True
        )
        authors = _project_git("log", "--format=%ae", f"{PROJECT_BEFORE['head']}..{after['head']}").split()
        assert not set(authors) & set(TEST_EMAILS), authors
    assert after["branch"] == PROJECT_BEFORE["branch"]
    assert after["tags"] == PROJECT_BEFORE["tags"]
    assert after["config"] == PROJECT_BEFORE["config"]
    assert after["status"] == PROJECT_BEFORE["status"]
    log = _project_git("log", "--all", "--format=%ae", "-n", "500").split()
    assert not set(log) & set(TEST_EMAILS)
