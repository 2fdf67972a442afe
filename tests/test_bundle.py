"""Freezing a prompt version into a bundle: needs a finished dev run, annotated tag, canonical
JSON + YAML with a sha256, everything needed to score anywhere, byte-identical for the same inputs,
`workbench verify`, names never moved or reused, admins only.

Real SQLite studies, real Git, the offline labeller; no mocks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import git
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import DATA

from workbench import bundle as bundle_mod
from workbench.cli import main
from workbench.core.parsing import PARSER_VERSION
from workbench.core.prompts import dump_label_prompt, dump_task
from workbench.services import Actor, PermissionDenied, init_study
from workbench.study import StudyError

FROZEN_AT = "2026-03-01T12:00:00+00:00"


def canonical_bytes(obj) -> bytes:
    """The canonical form, written out here independently of the package."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@pytest.fixture
def frozen(small_study):
    """small_study with a finished dev run of the seed version, frozen as v1."""
    run = small_study.start_run("dev")
    info = small_study.freeze("v1", frozen_at=FROZEN_AT)
    return small_study, run, info


def tag_of(wb, name):
    repo = git.Repo(wb.paths.prompts)
    try:
        t = repo.tags[name]
        return t.commit.hexsha, (t.tag.message if t.tag is not None else None), t.tag is not None
    finally:
        repo.close()


# ---------------------------------------------------------------- preconditions


def test_freeze_needs_a_finished_run_of_that_version_on_the_dev_cohort(small_study):
    with pytest.raises(
        StudyError, match=r"no finished run of prompt version [0-9a-f]{8} on cohort 'dev': run it first"
    ):
        small_study.freeze("v1")
    seed = small_study.prompt_commit()
    small_study.start_run("dev")
    lp = small_study.label_prompt("pneumonia")
    v2 = small_study.save_prompts([dataclasses.replace(lp, hedged="negative")], "v2", seed)
    with pytest.raises(StudyError, match=f"no finished run of prompt version {v2[:8]}"):
        small_study.freeze("v2")  # the run was of the seed, not of v2
    assert not (small_study.paths.bundles / "v2.json").exists()
    repo = git.Repo(small_study.paths.prompts)
    try:
        assert [t.name for t in repo.tags] == []  # a refused freeze tags nothing
    finally:
        repo.close()
    info = small_study.freeze("v1", seed[:8], frozen_at=FROZEN_AT)  # an older version that has its run
    assert info.commit == seed


def test_freeze_refuses_a_run_that_does_not_cover_every_asked_label_and_names_the_missing(small_study):
    wb = small_study
    wb.start_run("dev", labels=["edema"])  # 1 of 20 asked labels
    with pytest.raises(StudyError, match=r"does not cover every asked label: 19 of 20 missing \(atelectasis, ") as err:
        wb.freeze("v1")
    missing = str(err.value).split("missing (")[1].split(")")[0].split(", ")
    assert set(missing) == set(wb.vocab.asked_ids) - {"edema"}
    assert not (wb.paths.bundles / "v1.json").exists()
    full = wb.start_run("dev")
    wb.start_run("dev", labels=["edema"])  # a newer partial run does not hide the full one
    assert wb.freeze("v1", frozen_at=FROZEN_AT).run == full.run_id


def test_freeze_without_the_dev_cohort_is_a_clear_error(study):
    with pytest.raises(StudyError, match="cohort 'dev'"):
        study.freeze("v1")  # a fresh study: no reports imported, no run


def test_only_admins_freeze(small_study):
    small_study.start_run("dev")
    for role in ("prompt_engineer", "adjudicator", "reader"):
        with pytest.raises(PermissionDenied, match="freeze"):
            small_study.as_actor(Actor("pat", role)).freeze("v1")
    assert not small_study.paths.bundles.exists() or not list(small_study.paths.bundles.iterdir())
    info = small_study.as_actor(Actor("ada", "admin", name="Ada Admin", email="ada@example.org")).freeze("v1")
    content, _ = bundle_mod.read_bundle_file(info.json)
    assert content["frozen_by"] == "ada"


def test_bad_names_are_refused(small_study):
    small_study.start_run("dev")
    for name in ("", "has space", "../escape", "-dash-first", "x" * 101):
        with pytest.raises(StudyError, match="must be letters, digits"):
            small_study.freeze(name)
    # names Git refuses as tags are refused up front with a clear reason, nothing written
    for name, reason in (("a..b", "'..'"), ("x.lock", "'.lock'"), ("trail.", "end with '.'")):
        with pytest.raises(StudyError, match=reason):
            small_study.freeze(name)
    assert not small_study.paths.bundles.exists() or not list(small_study.paths.bundles.iterdir())


# ---------------------------------------------------------------- the tag and the files


def test_freeze_makes_an_annotated_tag_and_canonical_json_plus_yaml(frozen):
    wb, run, info = frozen
    assert info.json == wb.paths.bundles / "v1.json" and info.yaml == wb.paths.bundles / "v1.yaml"
    commit, message, annotated = tag_of(wb, "v1")
    assert annotated and commit == info.commit == wb.prompt_commit()
    assert message.strip() == f"Frozen bundle v1 by local\n\nsha256 {info.sha256}"
    assert info.run == run.run_id

    data = info.json.read_bytes()
    assert data.endswith(b"\n") and not data.endswith(b"\n\n")
    assert canonical_bytes(json.loads(data)) == data[:-1]  # canonical: re-dumping gives the same bytes
    whole = json.loads(data)
    assert set(whole) == {"bundle", "sha256"}
    assert whole["sha256"] == info.sha256 == hashlib.sha256(canonical_bytes(whole["bundle"])).hexdigest()

    readable = yaml.safe_load(info.yaml.read_text(encoding="utf-8"))
    assert readable["sha256"] == info.sha256
    assert readable["name"] == "v1" and readable["prompt_commit"] == info.commit
    assert readable["prompts"] == whole["bundle"]["prompts"]
    assert readable["metrics"] == whole["bundle"]["metrics"]
    # the history shows which version is frozen
    assert wb.prompt_history().set_index("commit").loc[info.commit, "frozen as"] == "v1"


def test_bundle_holds_everything_needed_to_score_anywhere(frozen):
    wb, run, info = frozen
    content, _ = bundle_mod.read_bundle_file(info.json)
    assert content["format"] == "workbench-bundle/1" and content["name"] == "v1"
    # vocabulary
    vocab = content["vocabulary"]
    assert vocab["id"] == "ranscore-21" and len(vocab["labels"]) == 21
    assert [lab["name"] for lab in vocab["labels"]][:3] == ["Atelectasis", "Cardiomegaly", "Consolidation"]
    assert {lab["id"]: lab.get("derived") for lab in vocab["labels"]}["no_finding"] == "none_of_others"
    # every label's prompt, the task template and mode, exactly as in the frozen version
    ps = wb.prompt_set(info.commit)
    assert content["prompts"]["labels"] == {k: dump_label_prompt(v) for k, v in ps.labels.items()}
    assert len(content["prompts"]["labels"]) == 20
    assert content["prompts"]["task"] == dump_task(ps.task)
    assert "{report}" in content["prompts"]["task"]["per_label_template"]
    assert content["mode"] == "per_label"
    # model, parameters and parser
    assert content["model"]["model"] == "workbench/rules"
    assert content["model"]["temperature"] == 0.0 and content["model"]["seed"] == 0
    assert "max_tokens" in content["model"] and "concurrency" not in content["model"]
    assert content["parser_version"] == PARSER_VERSION
    assert content["prompt_commit"] == info.commit and len(info.commit) == 40
    assert content["sections"] == ["findings", "impression"]
    # who and when
    assert content["frozen_by"] == "local" and content["frozen_at"] == FROZEN_AT
    # development-cohort metrics with intervals
    m = content["metrics"]
    ev = wb.evaluate_run(run.run_id)
    assert m["cohort"] == "dev" and m["run"] == run.run_id and m["ci"] == "wilson"
    assert m["macro_f1"] == round(ev.averages["macro_f1"], 6)
    assert m["micro_f1"] == round(ev.averages["micro_f1"], 6)
    assert m["excluded"]["items waiting for adjudication"] == 2  # the two ties in the fixture readings
    boot = m["macro_f1_bootstrap"]
    assert boot["lo"] <= m["macro_f1"] <= boot["hi"] and boot["n_resamples"] == 1000 and boot["seed"] == 0
    per_label = {row["label"]: row for row in m["per_label"]}
    assert len(per_label) == 21
    for row in per_label.values():
        assert row["accuracy_lo"] <= row["accuracy"] <= row["accuracy_hi"]
    assert per_label["cardiomegaly"]["support"] == 2 and per_label["cardiomegaly"]["n"] == 8
    assert (
        per_label["edema"]["f1"] is None and per_label["edema"]["f1_undefined"] is True
    )  # no positive: undefined, not 0


def test_load_bundle_gives_back_the_frozen_prompt_set(frozen):
    wb, _, info = frozen
    b = bundle_mod.load_bundle(info.json)
    assert b.sha256 == info.sha256 and b.name == "v1"
    assert b.prompts == wb.prompt_set(info.commit)
    assert b.vocab.ids == wb.vocab.ids and b.vocab.asked_ids == wb.vocab.asked_ids
    assert b.model["model"] == "workbench/rules" and b.sections == ["findings", "impression"]
    listed = wb.bundles()
    assert listed["name"].tolist() == ["v1"] and bool(listed["verified"].iloc[0])


# ---------------------------------------------------------------- determinism


def test_build_content_and_bundle_bytes_are_byte_identical_for_the_same_inputs(small_study):
    ps = small_study.prompt_set()
    kwargs = dict(
        name="same",
        vocab=small_study.vocab,
        prompts=ps,
        model={"model": "workbench/rules", "temperature": 0.0},
        parser_version=PARSER_VERSION,
        prompt_commit="a" * 40,
        metrics={"macro_f1": np.float64(0.1234567891), "per_label": [{"f1": float("nan")}], "n": np.int64(3)},
        frozen_by="ann",
        frozen_at=FROZEN_AT,
        sections=["findings", "impression"],
    )
    first = bundle_mod.build_content(**kwargs)
    second = bundle_mod.build_content(**kwargs)
    assert bundle_mod.bundle_bytes(first) == bundle_mod.bundle_bytes(second)
    assert bundle_mod.content_sha256(first) == bundle_mod.content_sha256(second)
    # key order does not matter; floats are rounded, NaN becomes null, numpy scalars plain numbers
    reordered = dict(reversed(list(first.items())))
    assert bundle_mod.bundle_bytes(reordered) == bundle_mod.bundle_bytes(first)
    loaded = json.loads(bundle_mod.bundle_bytes(first))["bundle"]
    assert loaded["metrics"] == {"macro_f1": 0.123457, "per_label": [{"f1": None}], "n": 3}
    # any change of an input changes the hash
    other = bundle_mod.build_content(**{**kwargs, "frozen_by": "bob"})
    assert bundle_mod.content_sha256(other) != bundle_mod.content_sha256(first)
    with pytest.raises(bundle_mod.BundleError, match="must be letters"):
        bundle_mod.build_content(**{**kwargs, "name": "no/slash"})


def test_non_ascii_prompt_text_is_kept_as_utf8_and_stays_canonical(small_study):
    ps = small_study.prompt_set()
    pn = dataclasses.replace(ps.label("pneumonia"), definition="Infection pulmonaire (≥ 4 of 6 readers) — café, 肺炎")
    content = bundle_mod.build_content(
        name="utf8",
        vocab=small_study.vocab,
        prompts=ps.with_label(pn),
        model={"model": "workbench/rules"},
        parser_version=PARSER_VERSION,
        prompt_commit="b" * 40,
        metrics={},
        frozen_by="ann",
        frozen_at=FROZEN_AT,
        sections=["findings"],
    )
    data = bundle_mod.bundle_bytes(content)
    assert "— café, 肺炎".encode() in data and b"\\u" not in data
    assert canonical_bytes(json.loads(data)) == data[:-1]
    path, _, sha = bundle_mod.write_bundle(small_study.root / "out", content)
    assert path.read_bytes() == data and bundle_mod.verify_bundle(path) == (True, sha, sha)
    assert bundle_mod.load_bundle(path).prompts.label("pneumonia").definition.endswith("肺炎")
    with pytest.raises(bundle_mod.BundleError, match="never reused"):
        bundle_mod.write_bundle(small_study.root / "out", content)


def test_two_identically_built_studies_freeze_to_identical_bytes(tmp_path, monkeypatch):
    # the prompt commit's sha depends on the commit time: pin it so that the inputs are the same
    monkeypatch.setenv("GIT_AUTHOR_DATE", "1767323045 +0000")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "1767323045 +0000")
    outputs = []
    for folder in ("first", "second"):
        wb = init_study(tmp_path / folder, vocab="ranscore-21", rule={"rule": "at_least", "k": 4, "n": 6}, name="same")
        wb.import_reports(DATA / "reports_small.csv", "dev")
        wb.import_readings(DATA / "readings_small.csv")
        wb.start_run("dev")
        info = wb.freeze("v1", frozen_at=FROZEN_AT)
        outputs.append((info.json.read_bytes(), info.yaml.read_bytes(), info.sha256))
    assert outputs[0] == outputs[1]


# ---------------------------------------------------------------- verify


def test_verify_passes_on_a_fresh_bundle_and_fails_after_one_character_is_edited(frozen, tmp_path):
    _, _, info = frozen
    runner = CliRunner()
    ok = runner.invoke(main, ["verify", str(info.json)])
    assert ok.exit_code == 0, ok.output
    assert f"sha256 {info.sha256}" in ok.output

    text = info.json.read_text(encoding="utf-8")
    assert text.count("Infection of the lung.") == 1
    edited = tmp_path / "edited.json"
    edited.write_text(text.replace("Infection of the lung.", "Infection of the lunG."), encoding="utf-8")
    assert len(edited.read_bytes()) == len(info.json.read_bytes())  # exactly one character differs
    bad = runner.invoke(main, ["verify", str(edited)])
    assert bad.exit_code == 1
    assert f"recorded sha256 {info.sha256}" in bad.output and "MODIFIED" in bad.output
    with pytest.raises(bundle_mod.BundleError, match="does not match"):
        bundle_mod.load_bundle(edited)
    # editing the recorded hash instead is caught the same way
    forged = tmp_path / "forged.json"
    forged.write_text(text.replace(info.sha256, "0" * 64), encoding="utf-8")
    assert runner.invoke(main, ["verify", str(forged)]).exit_code == 1
    # and the original still verifies
    assert runner.invoke(main, ["verify", str(info.json)]).exit_code == 0
    # a file that is not a bundle is a clear error, not a traceback
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}', encoding="utf-8")
    res = runner.invoke(main, ["verify", str(other)])
    assert res.exit_code == 2 and "not a workbench bundle" in res.output


# ---------------------------------------------------------------- names are never moved or reused


def test_a_frozen_name_cannot_be_reused_or_moved(frozen):
    wb, _, info = frozen
    original = info.json.read_bytes()
    with pytest.raises(StudyError, match="already frozen"):
        wb.freeze("v1", frozen_at=FROZEN_AT)
    # a new version with its own run: still cannot take the name (the tag would move)
    lp = wb.label_prompt("pneumonia")
    v2 = wb.save_prompts([dataclasses.replace(lp, hedged="negative")], "v2", info.commit)
    wb.start_run("dev")
    with pytest.raises(StudyError, match="already frozen"):
        wb.freeze("v1", v2)
    assert tag_of(wb, "v1")[0] == info.commit and info.json.read_bytes() == original
    # the JSON file deleted, the tag remains: the name is still taken
    info.json.unlink()
    info.yaml.unlink()
    with pytest.raises(StudyError, match="already frozen"):
        wb.freeze("v1", v2)
    assert tag_of(wb, "v1")[0] == info.commit and not info.json.exists()
    # another name is fine
    assert wb.freeze("v2", v2).commit == v2


def test_a_bundle_file_without_a_tag_also_blocks_the_name(frozen):
    wb, _, info = frozen
    repo = git.Repo(wb.paths.prompts)
    try:
        repo.delete_tag(repo.tags["v1"])
    finally:
        repo.close()
    with pytest.raises(StudyError, match="already frozen"):
        wb.freeze("v1")
