"""Assisted optimisation: splits, the locked test cohort, the two proposers, evaluation before showing,
optimise rounds, and that nothing tuned ever reads a validation or test report.

The fixture study is small and written so the right proposals are known: missed "cardiac silhouette
is enlarged" (a look-for phrase), "breast mass" counted as a lung mass (an exclusion), hedged
pneumonia the reference counts (a policy flip backed by notes), "airspace disease" quoted in notes.
Validation and test reports carry words no tuning report has ("quokka", "wombat"): they must never
reach a proposal, a model's request, the disagreement queue or a few-shot example.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
from conftest import copy_study

from workbench.core import proposals, splits
from workbench.services import init_study
from workbench.study import StudyError

LABELS14 = [
    "atelectasis",
    "cardiomegaly",
    "effusion",
    "infiltration",
    "mass",
    "nodule",
    "pneumonia",
    "pneumothorax",
    "consolidation",
    "edema",
    "emphysema",
    "fibrosis",
    "pleural_thickening",
    "hernia",
]
KINDS = [  # (count, text, positive labels)
    (12, "The cardiac silhouette is enlarged. Lungs are clear.", {"cardiomegaly"}),
    (12, "The cardiac silhouette is normal. Mediastinal lymph nodes are enlarged.", set()),
    (10, "Left breast mass. Lungs are clear.", set()),
    (4, "Right upper lobe mass.", {"mass"}),
    (8, "Findings may represent mild pulmonary edema.", {"edema"}),
    (4, "No pulmonary edema.", set()),
    (8, "Right lower lobe airspace disease.", {"consolidation"}),
    (10, "No acute cardiopulmonary abnormality.", set()),
]
SECRET_VALIDATION, SECRET_TEST = "quokka", "wombat"


def _plan() -> tuple[list[tuple[str, str]], pd.DataFrame]:
    """Report ids with their text, and the reference matrix."""
    rows, ref = [], {}
    n = 0
    for count, text, positives in KINDS:
        for _ in range(count):
            n += 1
            rid = f"d{n:03d}"
            rows.append((rid, text))
            ref[rid] = {lab: int(lab in positives) for lab in LABELS14}
    return rows, pd.DataFrame.from_dict(ref, orient="index")[LABELS14]


def split_study(tmp_path, rows, ref: pd.DataFrame, test_rows, test_ref: pd.DataFrame):
    """A chestxray14 study with cohort dev (split 70/30, seed 0) and a test cohort, one gold reader each."""
    wb = init_study(tmp_path / "study", vocab="chestxray14", rule={"rule": "majority", "n": 1})
    for name, cohort_rows, cohort_ref in (("dev", rows, ref), ("test", test_rows, test_ref)):
        reports, readings = _write(tmp_path, name, cohort_rows, cohort_ref)
        wb.import_reports(reports, name)
        wb.import_readings(readings)
    wb.set_cohort_role("test", "test")
    wb.split_cohort("dev", validation=0.3, seed=0)
    return wb


def _write(tmp_path, name: str, rows, ref: pd.DataFrame) -> tuple:
    """Reports and single-reader readings as CSV files."""
    reports, readings = tmp_path / f"{name}_reports.csv", tmp_path / f"{name}_readings.csv"
    with reports.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "findings", "impression"])
        w.writerows([(rid, text, "") for rid, text in rows])
    with readings.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["report_id", "label", "reader", "value"])
        w.writerows([(rid, lab, "gold", int(ref.loc[rid, lab])) for rid, _ in rows for lab in LABELS14])
    return reports, readings


@pytest.fixture(scope="module")
def opt_template(tmp_path_factory):
    """The fixture study, built once for this file (tests write to it, so each gets a copy)."""
    base = tmp_path_factory.mktemp("opt-template")
    rows, ref = _plan()
    parts = splits.stratified_split(ref, 0.3, 0)
    rows = [
        (rid, f"{text} {SECRET_VALIDATION.capitalize()} sign." if parts[rid] == "validation" else text)
        for rid, text in rows
    ]
    test_rows = [(f"t{i}", f"The cardiac silhouette is enlarged. {SECRET_TEST.capitalize()} sign.") for i in range(6)]
    test_ref = pd.DataFrame(
        {lab: [int(lab == "cardiomegaly")] * 6 for lab in LABELS14}, index=[r for r, _ in test_rows]
    )
    wb = split_study(base, rows, ref, test_rows, test_ref)
    first_run = wb.start_run("dev").run_id
    wb.engine.dispose()
    return base / "study", parts, first_run


@pytest.fixture
def opt_study(opt_template, tmp_path):
    """A chestxray14 study: dev (split 70/30, seed 0; validation texts carry a secret word), a test cohort, one run."""
    folder, parts, first_run = opt_template
    wb = copy_study(folder, tmp_path / "study")
    wb.expected_parts = parts
    wb.first_run = first_run
    return wb


# ---------------------------------------------------------------- splits


def test_split_is_stratified_reproducible_and_disjoint():
    rng = np.random.default_rng(5)
    ref = pd.DataFrame(
        (rng.random((300, 6)) < [0.02, 0.05, 0.1, 0.2, 0.4, 0.01]).astype(int),
        index=[f"r{i}" for i in range(300)],
        columns=list("abcdef"),
    )
    first = splits.stratified_split(ref, 0.3, seed=0)
    assert set(first) == set(ref.index) and set(first.values()) == {"tuning", "validation"}
    assert splits.stratified_split(ref.sample(frac=1, random_state=1), 0.3, seed=0) == first  # order does not matter
    assert splits.stratified_split(ref, 0.3, seed=1) != first
    summary = splits.split_summary(ref, first)
    for row in summary.itertuples():
        total = row.tuning_positives + row.validation_positives
        if total >= 2:
            assert row.tuning_positives >= 1 and row.validation_positives >= 1, row
        assert abs(row.validation_positives - 0.3 * total) <= 1, row  # each label's positives split as asked
    assert abs(summary.attrs["reports"]["validation"] - 90) <= 1


def test_split_refuses_bad_fraction():
    with pytest.raises(ValueError, match="between 0 and 1"):
        splits.stratified_split(pd.DataFrame({"a": [1, 0]}, index=["x", "y"]), 1.0)


def test_split_recorded_and_reproducible_in_the_study(opt_study):
    wb = opt_study
    assert wb.split_parts("dev") == wb.expected_parts  # same as the pure function with the same seed
    assert wb.split_cohort("dev", 0.3, 0) is not None  # same settings: nothing changes
    with pytest.raises(StudyError, match="already split"):
        wb.split_cohort("dev", 0.5, 3)
    with wb.session() as s:
        from workbench.store import queries as q

        assert len(q.split_frame(s)) == 68  # one row per report: no report in two parts
        assert (q.list_audit(s, entity="cohort")["action"] == "split").sum() == 1
    with pytest.raises(StudyError, match="only a development cohort"):
        wb.split_cohort("test")


def test_metrics_history_side_by_side_with_gap(opt_study):
    wb = opt_study
    parts = wb.evaluate_parts(wb.first_run, n_resamples=200)
    assert parts["tuning"].reports + parts["validation"].reports == 68
    assert {"f1", "f1_lo", "f1_hi"} <= set(parts["validation"].table.columns)
    hist = wb.history_by_part("dev")
    row = hist.iloc[0]
    assert row["gap"] == pytest.approx(row["tuning_macro_f1"] - row["validation_macro_f1"])


# ---------------------------------------------------------------- the locked test cohort


def test_test_cohort_metrics_only_for_frozen_bundles_and_every_look_counted(opt_study):
    wb = opt_study
    run = wb.start_run("test")
    with pytest.raises(StudyError, match="locked test cohort"):
        wb.evaluate_run(run.run_id)
    with pytest.raises(StudyError, match="locked test cohort"):
        wb.iteration_history("test")
    with pytest.raises(StudyError, match="no frozen bundle"):
        wb.test_look("v-missing", "test")
    wb.freeze("v1")
    first = wb.test_look("v1", "test")
    assert first["looks"] == 1 and first["message"] == "test looked at 1 time"
    assert first["macro_f1_lo"] is not None and first["per_label"][1]["label"] == "cardiomegaly"
    second = wb.as_actor(wb.actor.__class__(user="dr-b", role="admin")).test_look("v1", "test")
    assert second["looks"] == 2 and second["message"] == "test looked at 2 times"
    looks = wb.test_looks("v1")
    assert looks["actor"].tolist() == ["local", "dr-b"] and looks["bundle_sha"].nunique() == 1
    assert int(wb.bundles().set_index("name").loc["v1", "test_looks"]) == 2
    with wb.session() as s:
        from workbench.store import queries as q

        assert (q.list_audit(s, entity="test cohort")["action"] == "look").sum() == 2
    sidecar = wb.paths.bundles / "v1.test.yaml"
    assert "looks: 2" in sidecar.read_text()
    with pytest.raises(StudyError, match="locked test cohort"):  # still locked after the looks
        wb.evaluate_run(run.run_id)
    with pytest.raises(StudyError, match="locked test cohort"):  # the look is an argument: another commit's is refused
        wb.evaluation.evaluate_run(run.run_id, test_look="0" * 40)
    with pytest.raises(StudyError, match="cannot be changed"):
        wb.set_cohort_role("test", "development")


def test_no_validation_or_test_report_reaches_queue_or_examples(opt_study):
    wb = opt_study
    validation = [r for r, p in wb.expected_parts.items() if p == "validation"]
    queue = wb.disagreements(wb.first_run)
    assert len(queue) and set(queue["report_id"]).isdisjoint(validation)
    assert not queue["report_id"].str.startswith("t").any()
    with pytest.raises(StudyError, match="validation or test"):
        wb.add_example_from_case(validation[0], "cardiomegaly", "why")
    with pytest.raises(StudyError, match="validation or test"):
        wb.add_example_from_case("t0", "cardiomegaly", "why")
    test_run = wb.start_run("test").run_id
    with pytest.raises(StudyError, match="never shown"):
        wb.disagreements(test_run)
    tuning_fn = queue[queue["type"] == "FN"]["report_id"].iloc[0]
    lp, _ = wb.add_example_from_case(tuning_fn, queue[queue["type"] == "FN"]["label"].iloc[0], "a case")
    assert lp.examples[-1].source_report_id == tuning_fn


# ---------------------------------------------------------------- the structured edit


LP = proposals.apply_edit.__globals__["parse_label_prompt"](
    {
        "label": "cardiomegaly",
        "task": "Is the heart enlarged?",
        "definition": "Enlarged heart.",
        "look_for": ["cardiomegaly"],
        "do_not_label_when": [],
        "hedged": "negative",
        "temporal": {"resolved": "negative", "stable": "positive", "improving": "positive", "prior": "negative"},
        "examples": [],
    },
    "test",
)


@pytest.mark.parametrize(
    "reply, status, detail",
    [
        ('{"edit": {"look_for": ["cardiomegaly", "heart is large"]}, "rationale": "missed wording"}', "ok", ""),
        ('```json\n{"edit": {"hedged": "positive"}, "rationale": "notes say so"}\n```', "ok", ""),
        ("edit:\n  temporal:\n    stable: negative\nrationale: stable means old\n", "ok", ""),
        ('{"edit": {"look_for": "heart is large"}}', "malformed", "list of non-empty strings"),
        ('{"edit": {"colour": "blue"}}', "malformed", "unknown field 'colour'"),
        ('{"edit": {"hedged": "maybe"}}', "malformed", "'positive' or 'negative'"),
        ('{"edit": {"temporal": {"later": "positive"}}}', "malformed", "unknown key 'later'"),
        ('{"edit": {}, "rationale": "fine as is"}', "empty", "no change"),
        ('{"edit": {"look_for": ["cardiomegaly"]}}', "empty", "same as the current prompt"),
        ('{"edits": {}}', "malformed", "unknown key 'edits'"),
        ('{"value": , "evidence": "see report",,', "malformed", "not a JSON or YAML mapping"),
        ("I'm sorry, but I can't help with interpreting medical reports.", "refusal", "declined"),
        ("", "empty", "no text"),
        (
            '{"edit": {"examples": [{"text": "Big heart.", "value": 1, "why": "x", "source_report_id": "v9"}]}}',
            "malformed",
            "not one of the tuning cases",
        ),
        (
            '{"edit": {"examples": [{"text": "Big heart.", "value": 2, "why": "x", "source_report_id": "d1"}]}}',
            "malformed",
            "must be 0 or 1",
        ),
    ],
)
def test_reply_parsed_strictly(reply, status, detail):
    result = proposals.parse_reply(reply, LP, {"d1"}, "model")
    assert result.status == status, result.detail
    assert detail in result.detail
    assert (result.edit is not None) == (status == "ok")
    if result.edit is not None:
        proposals.apply_edit(LP, result.edit.fields)  # what is offered always applies


# ---------------------------------------------------------------- the offline proposer (known answers)


def _suggested(wb, label):
    result = wb.suggest(label, wb.first_run, proposer="offline")
    assert result.status == "ok", result
    return result


def test_offline_proposer_finds_missed_phrase_and_generalises(opt_study):
    result = _suggested(opt_study, "cardiomegaly")
    added = result.edit["fields"]["look_for"]
    assert "silhouette is enlarged" in added and "enlarged" not in added  # "enlarged" alone adds false positives
    ev = result.evaluation
    assert ev["parts"]["tuning"]["fixed"] >= 7 and ev["parts"]["tuning"]["broken"] == 0
    val = ev["parts"]["validation"]
    assert val["fixed"] >= 3 and val["broken"] == 0 and val["f1_after"] > val["f1_before"]
    assert result.offered and result.proposal_status == "offered"
    assert "\n+- silhouette is enlarged\n" in result.diff


def test_offline_proposer_excludes_false_positive_cue(opt_study):
    result = _suggested(opt_study, "mass")
    rules = result.edit["fields"]["do_not_label_when"]
    assert any("'breast" in r for r in rules)
    assert result.evaluation["parts"]["validation"]["broken"] == 0


def test_offline_proposer_policy_flip_and_quoted_notes_cite_the_notes(opt_study):
    wb = opt_study
    tuning = [r for r, p in wb.expected_parts.items() if p == "tuning"]
    edema = [r for r in tuning if "may represent" in wb.case(wb.first_run, r, "edema").text]
    cons = [r for r in tuning if "airspace disease" in wb.case(wb.first_run, r, "consolidation").text]
    hedge_note = wb.add_note(
        edema[0],
        "edema",
        "hedging/uncertainty",
        "does not change management",
        "the reference counts 'may represent' as present",
        run_id=wb.first_run,
    )
    quote_note = wb.add_note(
        cons[0],
        "consolidation",
        "synonym or abbreviation",
        "changes management",
        "'airspace disease' is consolidation",
        run_id=wb.first_run,
    )
    wrong = wb.add_note(
        cons[1], "consolidation", "reference label wrong", "unsure", "'lobe' only", reference_wrong=True
    )
    hedged = _suggested(wb, "edema")
    assert hedged.edit["fields"]["hedged"] == "positive" and hedge_note in hedged.edit["note_ids"]
    consolidation = _suggested(wb, "consolidation")
    assert "airspace disease" in consolidation.edit["fields"]["look_for"]
    assert quote_note in consolidation.edit["note_ids"] and wrong not in consolidation.edit["note_ids"]
    # accepting makes a draft, not a commit; the saved version's message names the notes
    before = wb.prompt_commit()
    lp = wb.accept_proposal(consolidation.proposal)
    assert wb.prompt_commit() == before and wb.draft("consolidation")[2] and "airspace disease" in lp.look_for
    commit = wb.commit_drafts(["consolidation"], "Consolidation synonyms")
    message = wb.prompt_history("consolidation").set_index("commit").loc[commit, "message"]
    assert f"#{quote_note}" in message and f"proposal #{consolidation.proposal}" in message
    assert wb.proposal(consolidation.proposal).status == "saved"


def test_proposal_that_makes_validation_worse_is_not_offered(opt_study):
    wb = opt_study
    mass = wb.label_prompt("mass")  # right on every report with a lung mass; "clear" adds false positives
    worse = mass.__class__(**{**mass.__dict__, "look_for": mass.look_for + ("clear",)})
    ev = wb.evaluate_edit(wb.first_run, worse)
    assert not ev.offered and "worse" in ev.why
    assert ev.parts["validation"]["broken"] > 0 and ev.parts["validation"]["broken_cases"]
    # evaluation goes through the call cache: a second evaluation makes no new call
    again = wb.evaluate_edit(wb.first_run, worse)
    assert again.calls["made"] == 0 and again.calls["reused"] == ev.calls["calls"]


def test_not_offered_proposal_cannot_be_accepted(opt_study):
    wb = opt_study
    from workbench.store import queries as q

    with wb.session() as s:
        pid = q.add_proposal(
            s,
            label="cardiomegaly",
            author="local",
            source="offline",
            status="not offered",
            base_commit=wb.prompt_commit(),
            run_id=wb.first_run,
            edit_json='{"fields": {}}',
        ).id
    with pytest.raises(StudyError, match="not offered"):
        wb.accept_proposal(pid)


def test_suggestions_never_read_validation_or_test_text(opt_study):
    wb = opt_study
    report = wb.optimise(rounds=2, proposer="offline")
    assert report.final_prompts
    for label in report.final_prompts:
        dumped = json.dumps(report.final_prompts[label]).lower()
        assert SECRET_VALIDATION not in dumped and SECRET_TEST not in dumped
    for pid in wb.proposals()["id"]:
        assert SECRET_VALIDATION not in json.dumps(wb.proposal(int(pid)).edit).lower()
    tuning = {r for r, p in wb.expected_parts.items() if p == "tuning"}
    run = wb.run_info(wb.first_run)
    for label in wb.vocab.asked_ids:  # the material every proposer starts from
        cases, notes = wb.optimising._tuning_material(run, label)
        assert set(cases["report_id"]) <= tuning and set(notes["report_id"]) <= tuning
        assert not cases["text"].str.lower().str.contains(f"{SECRET_VALIDATION}|{SECRET_TEST}").any()


# ---------------------------------------------------------------- optimise


def test_optimise_rounds_report_and_drafts(opt_study):
    wb = opt_study
    head = wb.prompt_commit()
    report = wb.optimise(labels=["cardiomegaly", "mass", "edema"], rounds=3, proposer="offline")
    assert wb.prompt_commit() == head  # nothing saved by itself
    assert set(report.drafts) == {"cardiomegaly", "mass", "edema"}
    assert all(wb.draft(lab)[2] for lab in report.drafts)
    first = report.rounds[0]
    assert {c["label"] for c in first["changes"]} == {"cardiomegaly", "mass", "edema"}
    assert report.end["validation"]["macro_f1"] > report.start["validation"]["macro_f1"]
    assert report.end["validation"]["lo"] <= report.end["validation"]["macro_f1"] <= report.end["validation"]["hi"]
    assert {m["label"] for m in first["validation_mcnemar"]} == {"cardiomegaly", "mass", "edema"}
    assert all(m["broken"] == 0 for m in first["validation_mcnemar"])
    assert len(report.rounds) < 3  # the second round found nothing more and stopped
    commit = wb.commit_drafts(report.drafts, "Optimised")
    message = wb.prompt_history().set_index("commit").loc[commit, "message"]
    assert f"optimise (report #{report.id})" in message

    stored = wb.optimisation_reports()
    assert stored.iloc[0]["report"].id == report.id
    from workbench.services.optimising import report_markdown

    md = report_markdown(report)
    assert "## Round 1" in md and "McNemar on validation" in md and "Left as drafts" in md
    assert report_markdown(stored.iloc[0]["report"]) == md  # read back as a record, the page's text as the CLI's


def test_an_older_stored_optimise_report_reads_back_with_its_missing_fields_empty():
    """A report stored before screening, the macro policy and the proposer were recorded still renders."""
    from workbench.services.optimising import report_markdown
    from workbench.services.results import OptimiseReport

    part = {"macro_f1": 0.5, "lo": 0.4, "hi": 0.6}
    macro = {"tuning": part, "validation": part, "gap": 0.0}
    stored = {"run": 3, "base_commit": "abcdef0123", "rounds": [], "calls": {"made": 0, "reused": 0}}
    report = OptimiseReport.from_stored(7, {**stored, "start": macro, "end": macro})
    assert (report.id, report.screen, report.zero_division, report.drafts) == (7, {}, "zero", [])
    md = report_markdown(report)
    assert md.startswith("# Optimisation report #7 (run 3, version abcdef01)") and "zero_division: zero" in md


# ---------------------------------------------------------------- the model proposer over real HTTP


@pytest.fixture
def llm_study(opt_study, fake_llm_server):
    """The fixture study with the fake OpenAI-compatible server as the proposer's model."""
    opt_study.server = fake_llm_server
    return opt_study


def _llm_suggest(wb, label="cardiomegaly"):
    return wb.suggest(label, wb.first_run, proposer="llm", model="openai/fake", api_base=wb.server.url)


def test_model_proposer_good_edit_evaluated_and_offered(llm_study):
    wb, server = llm_study, llm_study.server
    server.behaviour = "reply"
    server.reply = json.dumps(
        {
            "edit": {"look_for": ["cardiomegaly", "enlarged heart", "heart is enlarged", "silhouette is enlarged"]},
            "rationale": "missed wording",
        }
    )
    result = _llm_suggest(wb)
    assert result.status == "ok" and result.offered, result
    assert result.edit["source"] == "model proposer (openai/fake)"
    assert result.evaluation["parts"]["validation"]["fixed"] >= 3
    assert server.count == 1
    body = json.dumps(server.bodies[0]).lower()
    assert "silhouette is enlarged" in body  # the failing cases were shown
    assert SECRET_VALIDATION not in body and SECRET_TEST not in body  # and only tuning ones
    again = _llm_suggest(wb)  # the same call is answered from the call cache
    assert server.count == 1 and again.edit["fields"] == result.edit["fields"]
    with wb.session() as s:
        from workbench.store import queries as q

        audit = q.list_audit(s, entity="prompt")
    assert (audit["action"] == "propose").sum() == 2


def test_model_proposer_is_shown_attribute_disagreements_and_their_notes(llm_study):
    """A matched finding whose side differs (presence right) reaches the model proposer with its note;
    validation reports never do."""
    wb, server = llm_study, llm_study.server
    run = wb.first_run
    tuning = [r for r, part in wb.expected_parts.items() if part == "tuning"]
    validation = [r for r, part in wb.expected_parts.items() if part == "validation"]
    rows = wb.attribute_rows(run, "mass")  # "Right upper lobe mass.": the labeller says right
    ids = sorted(set(rows.loc[rows["value"] == "right", "report_id"]))
    in_tuning, in_validation = [r for r in ids if r in tuning][0], [r for r in ids if r in validation][0]
    for rid in (in_tuning, in_validation):
        wb.record_reading_attributes("gold", rid, "mass", {"side": "left"})
    wb.add_note(in_tuning, "mass", "laterality/location", "does not change management", "the reader's side", run_id=run)
    server.behaviour = "reply"
    server.reply = json.dumps(
        {"edit": {"definition": "A mass; give its side as the report states it."}, "rationale": "side"}
    )
    result = _llm_suggest(wb, "mass")
    assert result.status == "ok", result
    body = json.dumps(server.bodies[0])
    assert f"Case {in_tuning}: attribute differs (side: labeller right, reference left)" in body
    assert "the reader's side" in body and in_validation not in body and SECRET_VALIDATION not in body.lower()


@pytest.mark.parametrize("behaviour, status", [("malformed", "malformed"), ("refusal", "refusal")])
def test_model_proposer_malformed_or_refusal_reported_never_applied(llm_study, behaviour, status):
    wb, server = llm_study, llm_study.server
    server.behaviour = behaviour
    result = _llm_suggest(wb)
    assert result.status == status and result.edit is None and result.proposal_status == status
    assert not wb.draft("cardiomegaly")[2]
    with pytest.raises(StudyError, match=status):
        wb.accept_proposal(result.proposal)
    server.behaviour = "reply"  # not cached: asking again makes a new call
    server.reply = json.dumps({"edit": {"hedged": "positive"}, "rationale": "x"})
    assert _llm_suggest(wb).status == "ok" and server.count == 2


def test_model_proposer_endpoint_must_be_allowed(opt_study):
    with pytest.raises(StudyError, match="may not be sent"):
        opt_study.suggest(
            "cardiomegaly",
            opt_study.first_run,
            proposer="llm",
            model="openai/fake",
            api_base="http://10.255.255.1:9/v1",
        )


def test_suggest_needs_a_split(tmp_path):
    from conftest import DATA

    wb = init_study(tmp_path / "s", vocab="ranscore-21", rule={"rule": "at_least", "k": 4, "n": 6})
    wb.import_reports(DATA / "reports_small.csv", "dev")
    wb.import_readings(DATA / "readings_small.csv")
    run = wb.start_run("dev").run_id
    with pytest.raises(StudyError, match="split 'dev'"):
        wb.suggest("cardiomegaly", run, proposer="offline")


def test_offline_proposer_recurring_sentence_becomes_a_positive_example():
    """No short phrase separates the missed wording from normal reports; the whole recurring sentence does."""
    from workbench.core.prompts import DEFAULT_CUES
    from workbench.labeller import rules

    texts = (
        ["Heart size is mildly increased. Lungs are clear."] * 3
        + ["Heart size is normal."] * 3
        + ["Mildly increased interstitial markings."] * 3
        + ["Cardiomegaly."] * 2
    )
    reference = np.array([1] * 3 + [0] * 6 + [1] * 2)

    def label_fn(lp, batch):
        return np.array([rules.label_one(t, lp, DEFAULT_CUES)["value"] for t in batch])

    ids = [f"r{i}" for i in range(len(texts))]
    prediction = label_fn(LP, texts)
    assert prediction.tolist() == [0] * 9 + [1] * 2
    cases = pd.DataFrame(
        {
            "report_id": ids,
            "text": texts,
            "reference": reference,
            "prediction": prediction,
            "evidence": [""] * 9 + ["Cardiomegaly"] * 2,
        }
    )
    candidates = proposals.mine_candidates(
        LP,
        cases,
        [t for t, v in zip(texts, reference, strict=False) if v],
        [t for t, v in zip(texts, reference, strict=False) if not v],
    )
    assert not [c for c in candidates if c.kind == "look_for"]  # every short phrase is as common without it
    result = proposals.offline_propose(LP, proposals.Tuning(ids, texts, reference, prediction), label_fn, candidates)
    assert result.status == "ok", result.detail
    example = result.edit.fields["examples"][0]
    assert example == {
        "text": "Heart size is mildly increased",
        "value": 1,
        "source_report_id": "r0",
        "why": "a recurring wording of the finding (3 missed tuning reports)",
    }
    assert proposals.f1_of(reference, label_fn(proposals.apply_edit(LP, result.edit.fields), texts)) == 1.0


# ---------------------------------------------------------------- the commands


def test_cli_split_suggest_accept_optimise_and_test_look(opt_study):
    from click.testing import CliRunner

    from workbench.cli import main

    wb = opt_study

    def cli(*args):
        result = CliRunner().invoke(main, [*args, "--study", str(wb.root)])
        assert result.exit_code == 0, result.output
        return result.output

    assert "already split" in CliRunner().invoke(main, ["split", "dev", "--seed", "4", "--study", str(wb.root)]).output
    assert "tuning and" in cli("split", "dev")  # the same split again: its summary
    out = cli("split-metrics", str(wb.first_run))
    assert "validation_f1" in out and "gap (tuning - validation)" in out
    assert "gap" in cli("split-history", "dev")
    out = cli("suggest", "cardiomegaly", "--run", str(wb.first_run), "--proposer", "offline")
    assert "+ look-for: silhouette is enlarged" in out and "validation: F1" in out and "workbench accept" in out
    pid = wb.proposals("cardiomegaly")["id"].iloc[0]
    assert "is now your draft of cardiomegaly" in cli("accept", str(pid))
    shown = json.loads(cli("suggest", "mass", "--run", str(wb.first_run), "--proposer", "offline", "--format", "json"))
    assert list(shown) == [
        *("label", "status", "detail", "run", "edit", "evaluation", "offered", "diff"),
        *("proposal", "proposal_status", "noise"),
    ]
    assert shown["status"] == "ok" and "values" not in shown["evaluation"] and "evidence" not in shown["evaluation"]
    out = cli("suggest", "all", "--run", str(wb.first_run), "--proposer", "offline")
    assert all(f"for {lab} (run" in out for lab in ("cardiomegaly", "mass", "edema", "consolidation"))
    wb.discard_draft("cardiomegaly")
    report = wb.root / "report.md"
    out = cli(
        "optimise", "--labels", "cardiomegaly,mass", "--rounds", "2", "--proposer", "offline", "--out", str(report)
    )
    assert "## Round 1" in out and report.read_text().startswith("# Optimisation report")
    saved = wb.commit_drafts(["cardiomegaly", "mass"], "optimised")
    second = wb.start_run("dev", prompt_ref=saved).run_id
    out = cli("split-compare", str(wb.first_run), str(second))
    assert "validation verdict" in out and "validation: macro F1" in out
    cli("cohort-role", "test", "test")
    wb.freeze("v2", saved)
    assert "test looked at 1 time" in cli("test-look", "v2", "--cohort", "test")
    assert "v2" in cli("test-looks")


def test_optimise_never_overwrites_a_persons_draft_and_discard_forgets_the_proposal(opt_study):
    import dataclasses

    wb = opt_study
    mine = dataclasses.replace(wb.label_prompt("cardiomegaly"), definition="My own careful wording.")
    wb.save_draft(mine, wb.prompt_commit())
    report = wb.optimise(labels=["cardiomegaly", "mass"], rounds=1, proposer="offline")
    assert report.not_drafted == ["cardiomegaly"] and report.drafts == ["mass"]
    assert wb.draft("cardiomegaly")[0].definition == "My own careful wording."
    wb.discard_draft("mass")
    assert wb.proposals("mass", status="accepted").empty and len(wb.proposals("mass", status="discarded")) == 1
    commit = wb.commit_drafts(["cardiomegaly"], "Only my wording")
    assert "Proposed revisions" not in wb.prompt_history().set_index("commit").loc[commit, "message"]


def test_proposal_evaluated_by_a_model_labeller_over_http_through_the_cache(opt_study, fake_llm_server):
    """The run's labeller is a model: the proposal's calls go to it over HTTP once, then come from the cache."""
    from fake_llm_server import last_user_text, report_part

    from workbench.services.optimising import PROPOSER_SYSTEM

    wb, server = opt_study, fake_llm_server
    proposal = {"edit": {"look_for": ["cardiomegaly", "silhouette is enlarged"]}, "rationale": "missed wording"}

    def answer(messages):
        if messages[0]["content"] == PROPOSER_SYSTEM:
            return json.dumps(proposal)
        user = last_user_text(messages)
        report = report_part(user)
        follows = '"silhouette is enlarged"' in user.replace(report, "")  # a model that reads its look-for list
        return json.dumps({"value": int(follows and "silhouette is enlarged" in report.lower()), "evidence": ""})

    server.answer_fn = answer
    settings = {"model": "openai/fake", "api_base": server.url, "concurrency": 4, "max_retries": 0}
    run = wb.start_run("dev", labels=["cardiomegaly"], **settings)
    texts = len({wb.report_text(r).text for r in wb.predictions(run.run_id)["report_id"].unique()})
    assert run.status == "finished" and server.count == texts  # one call per distinct report text
    result = wb.suggest("cardiomegaly", run.run_id, proposer="llm", model="openai/fake", api_base=server.url)
    assert result.status == "ok" and result.offered, result
    calls = result.evaluation["calls"]
    assert calls["calls"] == 68 and calls["made"] == texts and server.count == texts + 1 + texts
    val = result.evaluation["parts"]["validation"]
    assert val["f1_before"] == 0.0 and val["f1_after"] == 1.0 and val["broken"] == 0
    again = wb.suggest("cardiomegaly", run.run_id, proposer="llm", model="openai/fake", api_base=server.url)
    assert again.evaluation["calls"]["made"] == 0 and server.count == texts + 1 + texts  # nothing new over HTTP
