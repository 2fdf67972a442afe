"""A label's prompt must agree with itself (issue 30, item 1), and the model proposer's calls and unusable replies
(issue 29, item 4; issue 33).

Pure checks of core/policy.py on the three contradictions the offline proposer used to commit on OpenI (hedge
exclusions beside "hedged counts as positive", an example the new hedge policy contradicts, corpus habits as
look-for phrases), the rule for look-for phrases (table-driven), the starter prompts of every vocabulary (no false
alarm), and the offline proposer; then in a study: `prompts policy` on drafts and versions, `accept` and `optimise`
refusing a proposal that would contradict itself, and the model proposer's malformed reply shown and stored, through
the fake OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from test_optimising import opt_study, opt_template  # noqa: F401  (fixtures)

from workbench.cli import main
from workbench.core import policy, proposals
from workbench.core.prompts import DEFAULT_CUES, Example, LabelPrompt, parse_label_prompt
from workbench.services.optimising import report_markdown
from workbench.store import queries as q
from workbench.study import StudyError, find_vocabulary_file, load_vocabulary_file

ROOT = Path(__file__).resolve().parents[1]
VOCAB = load_vocabulary_file(find_vocabulary_file("chestxray14"))


def starter(label: str, vocab: str = "chestxray14") -> LabelPrompt:
    """A starter prompt as shipped."""
    path = ROOT / "prompts" / vocab / f"{label}.yaml"
    return parse_label_prompt(yaml.safe_load(path.read_text()), path.name)


def kinds(lp: LabelPrompt) -> set[str]:
    """Kinds of contradiction found in one label's prompt."""
    return {f.kind for f in policy.label_contradictions(lp, lp.label, DEFAULT_CUES, VOCAB)}


# ---------------------------------------------------------------- the three contradictions of the issue


def test_hedge_exclusions_beside_hedged_positive_are_flagged():
    lp = dataclasses.replace(
        starter("atelectasis"),
        hedged="positive",
        do_not_label_when=("the report only mentions 'possible'", "the report only mentions 'may represent'"),
    )
    found = policy.label_contradictions(lp, "Atelectasis", DEFAULT_CUES, VOCAB)
    assert [f.kind for f in found] == ["exclusion contradicts hedge policy"] * 2
    assert "'possible'" in found[0].message and "counts as positive" in found[0].message
    assert not kinds(dataclasses.replace(lp, hedged="negative"))  # excluding what does not count is consistent


def test_an_example_the_hedge_policy_contradicts_is_flagged_and_aligned():
    lp = dataclasses.replace(
        starter("pneumonia"), hedged="negative"
    )  # its only example: "Cannot exclude pneumonia." -> 1
    assert kinds(lp) == {"example contradicts hedge policy"}
    assert not kinds(starter("pneumonia"))  # as shipped (hedged positive) it agrees
    aligned = policy.align_examples(lp)
    assert [(e.text, e.value) for e in aligned.examples] == [("Cannot exclude pneumonia.", 0)]
    assert "negative" in aligned.examples[0].why and not kinds(aligned)
    from_report = dataclasses.replace(lp, examples=(Example("Possible pneumonia.", 1, "reference", "r1"),))
    assert policy.align_examples(from_report).examples == ()  # its report's reference said 1: dropped, not rewritten


def test_an_example_the_temporal_policy_contradicts_is_flagged():
    lp = dataclasses.replace(starter("effusion"), examples=(Example("The pleural effusion has resolved.", 1, "x"),))
    assert kinds(lp) == {"example contradicts temporal policy"}  # resolved -> negative in the starter


def test_corpus_habits_as_look_for_phrases_are_flagged():
    lp = dataclasses.replace(
        starter("cardiomegaly"), look_for=starter("cardiomegaly").look_for + ("quality limited", "congestive heart")
    )
    found = [f for f in policy.label_contradictions(lp, "Cardiomegaly", DEFAULT_CUES, VOCAB)]
    assert [f.kind for f in found] == ["look-for names no finding"] * 2
    assert "image-quality wording" in found[0].message and "heart is anatomy" in found[1].message


@pytest.mark.parametrize(
    "label, phrase, why",
    [
        ("cardiomegaly", "heart is mildly enlarged", ""),
        ("cardiomegaly", "cardiac enlargement", ""),
        ("cardiomegaly", "quality limited", "image-quality wording"),
        ("cardiomegaly", "portable", "image-quality wording"),
        ("cardiomegaly", "congestive heart", "no word naming Cardiomegaly"),
        ("cardiomegaly", "cardiac silhouette", "are anatomy"),
        ("cardiomegaly", "effusion", "names another label (Effusion)"),
        ("atelectasis", "terminating", "procedure or device wording"),
        ("atelectasis", "surgical", "procedure or device wording"),
        ("atelectasis", "subsegmental atelectasis", ""),
        ("atelectasis", "linear opacities", ""),
        ("atelectasis", "pleural effusion", "a phrase of another label (Effusion)"),
        ("pneumonia", "consolidation", "names another label (Consolidation)"),
        ("effusion", "effusions", ""),
        ("effusion", "blunting of the costophrenic", ""),
        ("effusion", "costophrenic angle", "costophrenic is anatomy"),
        ("consolidation", "airspace consolidation", ""),
    ],
)
def test_a_look_for_phrase_must_name_the_labels_own_finding(label, phrase, why):
    got = policy.look_for_refusal(phrase, starter(label), VOCAB)
    assert (why in got and got) if why else got == ""


def test_a_teams_own_definition_lets_its_synonym_in():
    nodule = starter("nodule")
    assert policy.look_for_refusal("granuloma", nodule, VOCAB)
    widened = dataclasses.replace(nodule, definition=nodule.definition + " Includes calcified granulomas.")
    assert policy.look_for_refusal("granuloma", widened, VOCAB) == ""


@pytest.mark.parametrize("vocab", ["chestxray14", "chexpert-14", "ranscore-21"])
def test_starter_prompts_contradict_nothing(vocab):
    voc = load_vocabulary_file(find_vocabulary_file(vocab))
    found = [
        f
        for path in sorted((ROOT / "prompts" / vocab).glob("[!_]*.yaml"))
        for lp in [parse_label_prompt(yaml.safe_load(path.read_text()), path.name)]
        for f in policy.label_contradictions(lp, lp.label, DEFAULT_CUES, voc)
    ]
    assert found == []


# ---------------------------------------------------------------- the offline proposer


def _tuning(n_fixed: int = 6):
    """Cardiomegaly tuning cases: n_fixed missed reports saying "quality limited", and clean agreements."""
    texts = ["Quality limited exam. Lungs clear."] * n_fixed + ["Lungs clear."] * 10 + ["Cardiomegaly."] * 4
    reference = np.array([1] * n_fixed + [0] * 10 + [1] * 4)
    ids = [f"r{i}" for i in range(len(texts))]
    prediction = np.array([0] * (n_fixed + 10) + [1] * 4)
    return proposals.Tuning(ids, texts, reference, prediction)


def _label_fn(prompt, texts):
    return np.array([int(any(p in t.lower() for p in prompt.look_for)) for t in texts], dtype=int)


def test_the_offline_proposer_never_proposes_a_corpus_habit():
    lp = starter("cardiomegaly")
    habit = proposals.Candidate(
        "look_for", "quality limited", dataclasses.replace(lp, look_for=lp.look_for + ("quality limited",))
    )
    tuning = _tuning()
    without_vocab = proposals.offline_propose(lp, tuning, _label_fn, [dataclasses.replace(habit)])
    assert without_vocab.status == "ok"  # it fixes 6 tuning cases: only the rule stops it
    result = proposals.offline_propose(lp, tuning, _label_fn, [habit], vocab=VOCAB)
    assert result.status == "empty"


def test_a_hedge_flip_candidate_brings_its_examples_along():
    lp = starter("pneumonia")
    flip = [c for c in proposals.mine_candidates(lp, _empty_cases(), [], [], cues=DEFAULT_CUES) if c.kind == "hedged"]
    assert flip[0].prompt.hedged == "negative"
    assert [(e.text, e.value) for e in flip[0].prompt.examples] == [("Cannot exclude pneumonia.", 0)]
    assert not kinds(flip[0].prompt)


def _empty_cases():
    import pandas as pd

    return pd.DataFrame(columns=["report_id", "text", "reference", "prediction", "evidence"])


# ---------------------------------------------------------------- in a study


def _contradicting(wb):
    """Drafts with the issue's three contradictions (atelectasis, pneumonia, cardiomegaly)."""
    base = wb.prompt_commit()
    atel = wb.label_prompt("atelectasis")
    wb.save_draft(
        dataclasses.replace(
            atel,
            hedged="positive",
            do_not_label_when=("the report only mentions 'possible'", "the report only mentions 'may represent'"),
        ),
        base,
    )
    wb.save_draft(dataclasses.replace(wb.label_prompt("pneumonia"), hedged="negative"), base)
    cardio = wb.label_prompt("cardiomegaly")
    wb.save_draft(dataclasses.replace(cardio, look_for=cardio.look_for + ("quality limited", "congestive heart")), base)


def _policy_output(wb, *ref) -> str:
    result = CliRunner().invoke(main, ["prompts", "policy", *ref, "--study", str(wb.root)])
    assert result.exit_code == 0, result.output
    return result.output


def test_prompts_policy_flags_the_contradictions_of_drafts_and_of_a_saved_version(opt_study):  # noqa: F811
    wb = opt_study
    assert "0 finding(s)" not in _policy_output(wb)  # the starter's deliberate pneumonia/consolidation difference
    _contradicting(wb)
    out = " ".join(_policy_output(wb).split())
    for needle in (
        "[exclusion contradicts hedge policy] Atelectasis",
        "[example contradicts hedge policy] Pneumonia",
        "look-for 'quality limited' is image-quality wording",
        "look-for 'congestive heart' has no word naming Cardiomegaly",
    ):
        assert needle in out, out
    assert "(in your draft)" in out
    commit = wb.commit_drafts(["atelectasis", "pneumonia", "cardiomegaly"], "three contradictions")
    saved = " ".join(_policy_output(wb, "--prompt", commit).split())
    assert (
        saved.count("contradicts hedge policy") == 3 and "quality limited" in saved and "(in your draft)" not in saved
    )


def _fake_model(wb, server, reply: str):
    server.behaviour = "reply"
    server.reply = reply
    return {"proposer": "llm", "model": "openai/fake", "api_base": server.url}


def test_a_proposal_that_would_contradict_itself_is_not_offered_and_cannot_be_accepted(opt_study, fake_llm_server):  # noqa: F811
    wb = opt_study
    edit = {"edit": {"look_for": ["cardiomegaly", "portable"]}, "rationale": "portable films show it"}
    ask = _fake_model(wb, fake_llm_server, json.dumps(edit))
    result = wb.suggest("cardiomegaly", wb.first_run, ask["proposer"], ask["model"], ask["api_base"])
    assert result.proposal_status == "inconsistent" and "'portable' is image-quality wording" in result.detail
    assert result.evaluation is None and fake_llm_server.count == 1  # not labelled: no call beyond the proposer's
    with pytest.raises(StudyError, match="inconsistent"):
        wb.accept_proposal(result.proposal)
    # a proposal stored as offered (before this check existed) is refused at accept, saying why
    with wb.session() as s:
        row = q.add_proposal(
            s,
            label="cardiomegaly",
            author=wb.actor.user,
            source="model proposer (openai/fake)",
            status="offered",
            base_commit=wb.run_info(wb.first_run).prompt_commit,
            run_id=wb.first_run,
            edit_json=json.dumps({"fields": edit["edit"], "note_ids": []}),
            evaluation_json="{}",
            note_ids_json="[]",
        )
    with pytest.raises(StudyError, match="contradict itself.*'portable' is image-quality"):
        wb.accept_proposal(row.id)
    assert not wb.draft("cardiomegaly")[2]


def test_optimise_refuses_an_inconsistent_proposal_before_any_labelling_call(opt_study, fake_llm_server):  # noqa: F811
    wb = opt_study
    edit = {"edit": {"look_for": ["cardiomegaly", "portable"]}, "rationale": "x"}
    report = wb.optimise(labels=["cardiomegaly"], rounds=1, **_fake_model(wb, fake_llm_server, json.dumps(edit)))
    rejected = report.rounds[0]["rejected"]
    assert [r["status"] for r in rejected] == ["inconsistent"] and "portable" in rejected[0]["detail"], rejected
    assert report.calls["made"] == 0 and report.drafts == []
    assert "would make the prompt contradict itself" in report_markdown(report)


def test_the_model_proposers_malformed_reply_is_shown_and_stored(opt_study, fake_llm_server):  # noqa: F811
    wb = opt_study
    ask = _fake_model(wb, fake_llm_server, "Sure! Here is my idea: add 'enlarged' to the list.")
    report = wb.optimise(labels=["cardiomegaly"], rounds=1, **ask)
    text = report_markdown(report)
    assert "no proposal (malformed" in text and 'the proposer replied: "Sure! Here is my idea' in text, text
    stored = wb.optimisation_reports().iloc[0]["report"].rounds[0]["rejected"][0]
    assert stored["reply"].startswith("Sure! Here is my idea")
    # the call is recorded like a run's: its facts, and the raw reply kept with them (not cached)
    with wb.session() as s:
        facts = q.call_facts(s, _all_keys(s))
        replies = q.call_replies(s, facts["call_key"])
    assert len(facts) == 1 and facts.iloc[0]["labels"] == "cardiomegaly" and facts.iloc[0]["prompt_tokens"] > 0
    assert list(replies.values()) == ["Sure! Here is my idea: add 'enlarged' to the list."]
    result = wb.suggest("cardiomegaly", wb.first_run, ask["proposer"], ask["model"], ask["api_base"])
    assert result.reply.startswith("Sure!") and wb.proposal(result.proposal).evaluation["reply"]
    assert fake_llm_server.count == 2  # a malformed reply is never cached: asked again


def _all_keys(session) -> list[str]:
    """Every call key with recorded facts."""
    from sqlalchemy import text

    return [r[0] for r in session.execute(text("SELECT call_key FROM callfact")).all()]
