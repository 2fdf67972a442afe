"""Few-shot curation from disagreements (source report id, motivating note, reference value,
one-class warning, leakage left out of evaluation, no duplicates) and the policy table with its
conflicts on the shipped ranscore-21 starter set.

Real SQLite studies (`small_study`), real Git, the offline labeller; no mocks.
"""

from __future__ import annotations

import dataclasses

import pytest

from workbench.core.prompts import TEMPORAL_KEYS
from workbench.services import Actor, PermissionDenied
from workbench.store import queries as q
from workbench.study import StudyError

ANN = Actor("ann", "prompt_engineer", name="Ann Smith", email="ann@example.org")
LEAKAGE = "reports used as few-shot examples (leakage)"


@pytest.fixture
def ann(small_study):
    return small_study.as_actor(ANN)


@pytest.fixture
def run_id(ann):
    return ann.start_run("dev").run_id


# ---------------------------------------------------------------- few-shot curation


def test_disagreement_becomes_an_example_with_source_note_and_reference_value(ann, run_id):
    # s3 "Right lower lobe consolidation, cannot exclude pneumonia": the reference says
    # consolidation 1, the starter labeller says 0 (a disagreement)
    dis = ann.disagreements(run_id)
    assert ((dis["report_id"] == "s3") & (dis["label"] == "consolidation")).any()
    note_id = ann.add_note(
        "s3",
        "consolidation",
        "negation missed",
        "changes management",
        "consolidation before a comma was missed",
        run_id=run_id,
    )
    lp, warnings = ann.add_example_from_case("s3", "consolidation", "consolidation is described", run_id=run_id)
    assert len(lp.examples) == 1
    ex = lp.examples[0]
    assert ex.source_report_id == "s3"
    assert ex.value == 1  # the reference value
    assert ex.why == "consolidation is described"
    assert ex.note == "negation missed (changes management): consolidation before a comma was missed"
    assert "Right lower lobe consolidation" in ex.text
    assert warnings == []  # a single example is not "all one class"
    assert note_id in ann.notes(label="consolidation")["id"].tolist()
    # it is a draft of this user, not yet a version
    draft, base, exists = ann.draft("consolidation")
    assert exists and base == ann.prompt_commit() and draft.examples == lp.examples
    assert ann.label_prompt("consolidation").examples == ()
    # another user's draft is separate
    bob = ann.as_actor(Actor("bob", "prompt_engineer"))
    assert bob.draft("consolidation")[2] is False


def test_why_defaults_to_the_note_and_value_can_be_given(ann, run_id):
    ann.add_note(
        "s3", "lung_opacity", "synonym or abbreviation", "does not change management", "consolidation is an opacity"
    )
    lp, _ = ann.add_example_from_case("s3", "lung_opacity", "", run_id=run_id)
    assert lp.examples[-1].why == "synonym or abbreviation (does not change management): consolidation is an opacity"
    assert lp.examples[-1].note == lp.examples[-1].why and lp.examples[-1].value == 1
    # s1 has no note: the why is the given text and the value can be set explicitly
    lp, _ = ann.add_example_from_case("s1", "lung_opacity", "normal report", value=0)
    assert (lp.examples[-1].value, lp.examples[-1].note, lp.examples[-1].source_report_id) == (0, None, "s1")


def test_value_defaults_to_reference_and_waiting_items_are_refused(ann, run_id):
    # s3/pneumonia is a 3-3 tie in the fixture readings: waiting for adjudication
    queue = ann.adjudication_queue()
    assert ((queue["report_id"] == "s3") & (queue["label"] == "pneumonia")).any()
    with pytest.raises(StudyError, match="no reference value yet"):
        ann.add_example_from_case("s3", "pneumonia", "hedged", run_id=run_id)
    assert ann.draft("pneumonia")[2] is False  # nothing was drafted
    # once adjudicated, the adjudicated value is the default
    ann.as_actor(Actor("sam", "adjudicator")).adjudicate("s3", "pneumonia", 0, "only hedged; not diagnosed")
    lp, _ = ann.add_example_from_case("s3", "pneumonia", "hedged only", run_id=run_id)
    assert lp.examples[-1].value == 0 and lp.examples[-1].source_report_id == "s3"
    # the model was wrong to be positive: the example is the deciding clause, not the whole report
    assert lp.examples[-1].text == "Right lower lobe consolidation, cannot exclude pneumonia"


def test_examples_all_one_class_warns(ann, run_id):
    # lung_opacity is positive in the reference for s3 and s8
    lp, warnings = ann.add_example_from_case("s3", "lung_opacity", "consolidation is an opacity", run_id=run_id)
    assert warnings == []
    lp, warnings = ann.add_example_from_case("s8", "lung_opacity", "reticular opacities", run_id=run_id)
    assert [ex.value for ex in lp.examples] == [1, 1]
    assert warnings == ["Lung Opacity: all 2 few-shot examples are positive; add a counter-example"]
    lp, warnings = ann.add_example_from_case("s1", "lung_opacity", "normal report", run_id=run_id)
    assert [ex.value for ex in lp.examples] == [1, 1, 0] and warnings == []


def test_adding_the_same_case_twice_is_refused(ann, run_id):
    ann.add_example_from_case("s3", "consolidation", "present", run_id=run_id)
    with pytest.raises(StudyError, match="s3 is already an example of consolidation"):
        ann.add_example_from_case("s3", "consolidation", "present again", run_id=run_id)
    assert len(ann.draft("consolidation")[0].examples) == 1
    # after saving, the case is in the version itself: still refused
    ann.commit_drafts(["consolidation"], "Example from s3")
    with pytest.raises(StudyError, match="already an example"):
        ann.add_example_from_case("s3", "consolidation", "present again")


def test_adding_the_same_case_twice_with_and_without_the_run_is_refused(ann, run_id):
    ann.as_actor(Actor("sam", "adjudicator")).adjudicate("s3", "pneumonia", 0, "only hedged")
    run2 = ann.start_run("dev").run_id  # s3/pneumonia is now a false positive with evidence
    ann.add_example_from_case("s3", "pneumonia", "hedged only", run_id=run2)
    with pytest.raises(StudyError, match="already an example"):
        ann.add_example_from_case("s3", "pneumonia", "hedged only")
    assert sum(ex.source_report_id == "s3" for ex in ann.draft("pneumonia")[0].examples) == 1


def test_committed_example_is_left_out_of_evaluation(ann, run_id):
    before = ann.evaluate_run(run_id)
    assert before.excluded[LEAKAGE] == 0
    ann.add_example_from_case("s3", "consolidation", "present", run_id=run_id)
    ann.add_example_from_case("s8", "lung_opacity", "reticular opacities", run_id=run_id)
    commit = ann.commit_drafts(["consolidation", "lung_opacity"], "Examples from the first review")
    assert ann.prompt_set(commit).example_report_ids() == {"s3", "s8"}
    run2 = ann.start_run("dev").run_id
    after = ann.evaluate_run(run2)
    assert after.excluded[LEAKAGE] == 2
    assert int(after.table.loc["atelectasis", "n"]) == int(before.table.loc["atelectasis", "n"]) - 2
    assert int(after.table.loc["consolidation", "support"]) == 0  # s3 was its only positive
    # the old version's run is unaffected by a later version's examples
    assert ann.evaluate_run(run_id).excluded[LEAKAGE] == 0


def test_example_record_falls_back_to_git_and_is_not_blinded(ann, run_id, small_study):
    """Runs from before the example record (or any missing row) read Git once; a reader who
    evaluates first must not record their blinded copy for everyone."""
    from sqlalchemy import delete

    from workbench.store.tables import PromptVersionExamples

    ann.add_example_from_case("s3", "consolidation", "present", run_id=run_id)
    ann.commit_drafts(["consolidation"], "Example from s3")
    run2 = ann.start_run("dev").run_id
    commit = ann.run_info(run2).prompt_commit
    with ann.session() as s:
        s.execute(delete(PromptVersionExamples))  # as in a study older than the record
    reader = small_study.as_actor(Actor("r1", "reader"))  # r1 has not finished s3
    assert reader.prompt_set(commit).example_report_ids() == set()  # the reader's copy is blinded
    assert reader.evaluation._version_examples(commit) == {"s3"}
    with ann.session() as s:
        assert q.version_examples(s, commit) == {"s3"}
    assert ann.evaluate_run(run2).excluded[LEAKAGE] == 1


@pytest.mark.parametrize("role", ["reader", "adjudicator"])
def test_only_prompt_editors_curate_examples(small_study, role):
    wb = small_study.as_actor(Actor("rita", role))
    with pytest.raises(PermissionDenied):
        wb.add_example_from_case("s3", "consolidation", "present", value=1)


def test_unknown_report_or_label_is_a_clear_error(ann):
    with pytest.raises(StudyError, match="no report 'zz9'"):
        ann.add_example_from_case("zz9", "consolidation", "x", value=1)
    with pytest.raises(StudyError, match="no prompt for label 'no_finding'"):
        ann.add_example_from_case("s1", "no_finding", "x", value=1)  # derived: never asked


# ---------------------------------------------------------------- policy table


def test_policy_table_has_every_labels_hedge_and_temporal_policy(small_study):
    table = small_study.policy_table()
    assert sorted(table["label"]) == sorted(small_study.vocab.asked_ids) and len(table) == 20
    assert "no_finding" not in set(table["label"])  # derived, no prompt
    for col in ("hedged",) + TEMPORAL_KEYS:
        assert set(table[col]) <= {"positive", "negative"}, col
    row = table.set_index("label")
    assert row.loc["pneumonia", "hedged"] == "positive"
    assert row.loc["consolidation", "hedged"] == "negative"
    assert row.loc["pleural_effusion", "name"] == "Pleural Effusion"
    assert (row.loc["pleural_effusion", "resolved"], row.loc["pleural_effusion", "stable"]) == ("negative", "positive")
    assert row.loc["pneumonia", "examples"] == 1 and row.loc["pneumonia", "positive_examples"] == 1
    assert row.loc["emphysema", "exclusions"] == 1
    ps = small_study.prompt_set()
    for label, lp in ps.labels.items():
        assert row.loc[label, "hedged"] == lp.hedged
        assert all(row.loc[label, k] == v for k, v in lp.temporal)
        assert row.loc[label, "look_for"] == len(lp.look_for)


def test_the_policy_table_shows_this_users_drafts_as_the_findings_do(study):
    ann = study.as_actor(ANN)
    committed = ann.prompt_commit()
    lp, base, _ = ann.draft("cardiomegaly")
    assert lp.hedged == "negative"
    ann.save_draft(dataclasses.replace(lp, hedged="positive"), base)
    table = ann.policy_table().set_index("label")
    assert table.loc["cardiomegaly", "hedged"] == "positive" and bool(table.loc["cardiomegaly", "draft"])
    assert not table.drop(index="cardiomegaly")["draft"].any()
    assert any("Cardiomegaly: positive" in f.message and "(in your draft)" in f.message for f in ann.policy_conflicts())
    # a committed version shows what was committed, and another user sees no draft of ann's
    assert ann.policy_table(committed).set_index("label").loc["cardiomegaly", "hedged"] == "negative"
    bob = study.as_actor(Actor("bob", "prompt_engineer"))
    assert bob.policy_table().set_index("label").loc["cardiomegaly", "hedged"] == "negative"
    assert not bob.policy_table()["draft"].any()


def hedge_findings(wb, ref=None):
    return [f for f in wb.policy_conflicts(ref) if f.kind == "hedge policy differs"]


def test_starter_set_flags_cannot_exclude_pneumonia_versus_consolidation(study):
    findings = hedge_findings(study)
    flagged = [f for f in findings if "pneumonia" in f.labels and "consolidation" in f.labels]
    assert len(flagged) == 1
    assert "cannot exclude" in flagged[0].message
    assert "Pneumonia: positive" in flagged[0].message and "Consolidation: negative" in flagged[0].message


def test_aligning_consolidation_and_lung_opacity_removes_the_finding(study):
    ann = study.as_actor(ANN)
    seed = ann.prompt_commit()
    co, lo = ann.label_prompt("consolidation"), ann.label_prompt("lung_opacity")
    commit = ann.save_prompts(
        [dataclasses.replace(co, hedged="positive"), dataclasses.replace(lo, hedged="positive")],
        "Cannot exclude counts as positive for consolidation and opacity too",
        seed,
    )
    assert not [f for f in hedge_findings(ann) if "pneumonia" in f.labels]
    table = ann.policy_table().set_index("label")
    assert table.loc[["pneumonia", "consolidation", "lung_opacity"], "hedged"].tolist() == ["positive"] * 3
    # the old version still shows it (policy of any version)
    assert [f for f in hedge_findings(ann, seed) if "pneumonia" in f.labels]
    assert ann.policy_table(seed).set_index("label").loc["consolidation", "hedged"] == "negative"
    # lung opacity is also related to atelectasis: the new difference there is flagged, not hidden
    assert [f for f in hedge_findings(ann, commit) if set(f.labels) == {"atelectasis", "lung_opacity"}]


def test_consolidation_alone_is_not_enough(study):
    ann = study.as_actor(ANN)
    co = ann.label_prompt("consolidation")
    ann.save_prompts([dataclasses.replace(co, hedged="positive")], "Consolidation hedge positive", ann.prompt_commit())
    flagged = [f for f in hedge_findings(ann) if "pneumonia" in f.labels]
    assert len(flagged) == 1 and "Lung Opacity: negative" in flagged[0].message


# ---------------------------------------------------------------- the shared task file


def test_a_hand_edit_of_the_task_file_is_saved_and_audited_so_verify_holds(ann):
    """docs/attributes.md tells engineers to edit the cue lists by hand: `prompts save` must take that edit
    (a commit made with git has no audit event, and `audit --verify` then fails)."""
    task = ann.paths.prompts / "_task.yaml"
    task.write_text(task.read_text(encoding="utf-8") + "# cue lists edited by hand\n", encoding="utf-8")
    status = ann.prompt_status().set_index("label")
    assert status.loc["_task", "file"] == "edited" and status.loc["_task", "problem"] == ""
    commit, saved = ann.save_labels(None, "cue lists by hand")
    assert saved == ["_task"]
    assert ann.prompt_files(commit)["_task.yaml"].endswith("# cue lists edited by hand\n")
    events = ann.audit_log(entity="prompt", key="_task")
    assert events.iloc[0]["action"] == "save" and commit in events.iloc[0]["new"]
    assert ann.verify_audit().ok


def test_a_broken_or_deleted_task_file_is_named_and_nothing_is_committed(ann):
    task = ann.paths.prompts / "_task.yaml"
    head = ann.prompt_commit()
    original = task.read_text(encoding="utf-8")
    task.write_text(original + "per_label_template: 3\n", encoding="utf-8")
    assert "per_label_template" in ann.prompt_status().set_index("label").loc["_task", "problem"]
    with pytest.raises(Exception, match="per_label_template"):
        ann.save_labels(["_task"], "broken template")
    task.unlink()
    assert "restore it" in ann.prompt_status().set_index("label").loc["_task", "problem"]
    with pytest.raises(StudyError, match="was deleted"):
        ann.save_labels(["_task"], "deleted")
    assert ann.prompt_commit() == head
