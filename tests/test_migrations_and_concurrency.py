"""Schema migrations from the first day, prompt-dictionary import, two engineers saving at once."""

import dataclasses
import json
import threading

import pytest
from sqlalchemy import inspect, text

from workbench.services import ConflictError, Workbench
from workbench.store import db, prompt_repo


def test_an_old_study_opens_after_a_schema_change(study, monkeypatch):
    """A study at version 1 gets tomorrow's step applied on open; its data stays."""
    with study.session() as s:
        s.execute(text("INSERT INTO cohort (name, language, created_at) VALUES ('old', 'en', 'x')"))

    def add_column(conn):
        conn.execute(text("ALTER TABLE cohort ADD COLUMN description TEXT"))

    tomorrow = db.SCHEMA_VERSION + 1
    monkeypatch.setattr(db, "MIGRATIONS", db.MIGRATIONS + [(tomorrow, "cohort description", add_column)])
    monkeypatch.setattr(db, "SCHEMA_VERSION", tomorrow)
    reopened = Workbench(study.root)
    assert reopened.migrate() == [f"{tomorrow}: cohort description"]
    assert db.schema_version(reopened.engine) == tomorrow
    assert "description" in {c["name"] for c in inspect(reopened.engine).get_columns("cohort")}
    assert list(reopened.cohorts()["name"]) == ["old"]
    assert reopened.migrate() == []  # idempotent


def test_a_newer_database_is_refused_with_a_clear_message(study, monkeypatch):
    monkeypatch.setattr(db, "SCHEMA_VERSION", 0)
    with pytest.raises(RuntimeError, match="newer than this workbench"):
        db.migrate(study.engine)


def test_import_prompt_dictionary(study, tmp_path):
    guidance = {lab.name: f"Guidance for {lab.name}." for lab in study.vocab.labels if not lab.derived}
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(guidance))
    commit = study.import_prompt_dictionary(path, "Import the released prompts")
    ps = study.prompt_set(commit)
    assert ps.label("pleural_effusion").definition == "Guidance for Pleural Effusion."
    assert len(prompt_repo.history(study.paths.prompts)) == 2


def test_two_engineers_saving_the_same_label_at_once(study):
    """One save lands; the other is refused with a message naming the label; nothing is lost."""
    base = study.prompt_commit()
    lp = study.label_prompt("edema")
    edits = [dataclasses.replace(lp, definition=f"Edit {i}.") for i in range(2)]
    results, barrier = [], threading.Barrier(2)

    def save(edit):
        barrier.wait()
        try:
            results.append(study.save_prompts([edit], f"save {edit.definition}", base))
        except ConflictError as exc:
            results.append(exc)

    threads = [threading.Thread(target=save, args=(e,)) for e in edits]
    [t.start() for t in threads]
    [t.join() for t in threads]
    errors = [r for r in results if isinstance(r, ConflictError)]
    assert len(errors) == 1 and "edema.yaml" in str(errors[0]) and "Nothing was saved" in str(errors[0])
    landed = study.label_prompt("edema").definition
    assert landed in ("Edit 0.", "Edit 1.")
    assert len(prompt_repo.history(study.paths.prompts)) == 2  # the seed and exactly one save
