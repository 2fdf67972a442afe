"""The label set from the corpus (issue 31): mining, normalising, grouping, comparison, review, adoption.

Small fixtures with known answers; real SQLite, real Git, real HTTP to the local fake model server.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import yaml
from click.testing import CliRunner

from workbench.cli import main
from workbench.core import labelset as ls
from workbench.core.prompts import parse_task
from workbench.labeller import mining
from workbench.study import PROMPTS_DIR, StudyError

TASK = parse_task(yaml.safe_load((PROMPTS_DIR / "chexpert-14" / "_task.yaml").read_text()))

CORPUS = [
    ("r1", "Small left pleural effusion. No pneumothorax."),
    ("r2", "Moderate right pleural effusions. No pneumothorax."),
    ("r3", "Effusion, pleural, bilateral. No pneumothorax."),
    ("r4", "There is a large pleural effusion on the right. No pneumothorax is seen."),
    ("r5", "Chronic obstructive pulmonary disease (COPD). Calcified granuloma in the left upper lobe."),
    ("r6", "Changes of COPD. Calcified granulomas. No pneumothorax."),
    ("r7", "COPD. The heart is mildly enlarged. No pleural effusion or pneumothorax."),
    ("r8", "The heart is normal in size. Possible pneumonia in the right lower lobe. Lungs are clear."),
]


def by_name(candidates):
    """The candidate holding each surface form."""
    return {t: c for c in candidates for t, _ in c.forms}


def test_a_finding_only_ever_negated_is_no_candidate():
    cands = mining.mine(CORPUS, TASK, min_reports=1)
    assert all("pneumothorax" not in t for c in cands for t, _ in c.forms)  # negated in 6 reports, never affirmed
    negated_only = mining.Miner(TASK).mentions("x", "No pneumothorax. No pleural effusion.")
    assert {m.assertion for m in negated_only} == {ls.NEGATED}
    assert mining.mine([("x", "No pneumothorax. No pleural effusion.")], TASK, min_reports=1) == []


def test_plural_inverted_and_abbreviated_forms_land_in_one_candidate():
    cands = mining.mine(CORPUS, TASK, min_reports=1)
    forms = by_name(cands)
    effusion = forms["pleural effusion"]
    assert effusion.affirmed_reports == 4  # r1 singular, r2 plural, r3 inverted, r4 with "there is"
    assert [t for t, _ in effusion.forms] == ["pleural effusion"]  # "Effusion, pleural" reads in plain order
    assert "r3" in [e["report_id"] for e in effusion.examples]
    assert forms["copd"] is forms["chronic obstructive pulmonary disease"]  # the abbreviation joins its full form
    assert forms["calcified granuloma"].affirmed_reports == 2  # r5 singular, r6 plural


def test_only_a_word_written_in_capitals_is_taken_for_an_abbreviation():
    corpus = [
        ("a1", "Obstructive lung disease."),
        ("a2", "Obstructive lung disease again."),
        ("a3", "Old. Nothing acute."),  # "old" spells the initials of "obstructive lung disease"; it is a word
        ("a4", "Findings are old."),
        ("a5", "OLD, unchanged."),
    ]
    miner = mining.Miner(TASK)
    assert [m.capitals for m in miner.mentions("a5", "OLD, unchanged.")] == [True]
    assert [m.capitals for m in miner.mentions("a3", "Old. Nothing acute.")] == [False]
    forms = by_name(mining.mine(corpus, TASK, min_reports=1))
    assert forms["old"] is not forms["obstructive lung disease"], "lower-case 'old' in 2 of 3 mentions: a word"
    # the same form in capitals is an abbreviation, as is any form when the source gives no case (None)
    capitals = [ls.Mention(f"b{i}", "", "old", ls.AFFIRMED, capitals=True) for i in range(2)]
    spelled = [ls.Mention(f"c{i}", "", "obstructive lung disease", ls.AFFIRMED, capitals=False) for i in range(2)]
    lex = mining.Miner(TASK).lex
    assert ls.abbreviations(
        Counter(m.text for m in capitals + spelled), lex, capitals=ls.written_in_capitals(capitals + spelled)
    ) == {"old": "obstructive lung disease"}
    unknown = [ls.Mention(m.report_id, "", m.text, ls.AFFIRMED) for m in capitals + spelled]
    assert ls.written_in_capitals(unknown) is None


def test_a_part_of_a_thing_is_named_by_the_thing_and_a_general_noun_alone_names_no_finding():
    corpus = [
        ("p1", "Catheter tip in the superior vena cava."),
        ("p2", "The tip of the central venous catheter is in the right atrium."),
        ("p3", "Right IJ catheter. Change from the prior study."),
        ("p4", "The distal tip projects over the stomach."),
    ]
    cands = mining.mine(corpus, TASK, min_reports=1)
    forms = by_name(cands)
    assert not [t for t in forms if t.split()[-1] in ("tip", "change")], list(forms)
    catheter = forms["catheter"]
    assert catheter.affirmed_reports == 3 and forms["central venous catheter"] is catheter  # p1, p2, p3; not p4


def test_side_severity_and_change_words_are_attributes_not_findings():
    cands = mining.mine(CORPUS, TASK, min_reports=1)
    effusion = by_name(cands)["pleural effusion"]
    assert not [c for c in cands if c.name in ("small", "left", "moderate", "right", "large", "bilateral")]
    assert effusion.attributes["side"] == {"left": 1, "right": 2, "bilateral": 1}
    assert effusion.attributes["severity"] == {"mild": 1, "moderate": 1, "severe": 1}
    heart = by_name(cands)["enlarged heart"]  # "the heart is mildly enlarged": subject and predicate, severity mild
    assert heart.affirmed_reports == 1 and heart.attributes == {"severity": {"mild": 1}}


def test_hedged_and_normal_statements_are_not_affirmed():
    cands = mining.mine(CORPUS, TASK, min_reports=1)
    pneumonia = by_name(cands).get("pneumonia")
    assert pneumonia is None  # only hedged: uncertain, never affirmed
    every = mining.Miner(TASK).mentions("r8", CORPUS[7][1])
    assert {m.text: m.assertion for m in every}["pneumonia"] == ls.UNCERTAIN
    heart = by_name(cands)["enlarged heart"]  # r7 affirms it; r8's "the heart is normal in size" does not
    assert (heart.affirmed_reports, heart.negated_reports) == (1, 1)
    assert not [c for c in cands if "lung" in c.name]  # "lungs are clear"


def test_a_structure_called_normal_by_its_predicate_is_no_finding():
    """ "The trachea is midline", "the airways are patent", "the lungs are well expanded": normal statements that
    ranked among the top 20 of OpenI; before a noun such a word may name a finding ("midline sternotomy")."""
    corpus = [
        (f"n{i}", "The trachea is midline. The airways are patent. The lungs are well expanded. No effusion.")
        for i in range(3)
    ] + [("s1", "Midline sternotomy wires. The trachea is midline.")]
    cands = mining.mine(corpus, TASK, min_reports=1)
    names = [c.name for c in cands]
    assert not [n for n in names if "trachea" in n or "airway" in n or "lung" in n], names
    assert any("sternotomy" in n for n in names), names


def test_candidates_carry_counts_examples_definition_and_look_for():
    cands = mining.mine(CORPUS, TASK, min_reports=1)
    effusion = by_name(cands)["pleural effusion"]
    assert cands[0] is effusion  # ranked by affirmed reports
    assert effusion.negated_reports == 1  # r7
    assert [e["report_id"] for e in effusion.examples][:4] == ["r1", "r2", "r3", "r4"]
    assert all(e["assertion"] == ls.AFFIRMED for e in effusion.examples[:4])
    assert effusion.look_for[0] == "pleural effusion" and "pleural effusion" in effusion.definition
    data = effusion.to_json()
    assert data["forms"][0] == {"text": "pleural effusion", "count": data["forms"][0]["count"]}


def test_mining_is_deterministic():
    a = [c.to_json() for c in mining.mine(CORPUS[::-1] + CORPUS, TASK, min_reports=1)]
    b = [c.to_json() for c in mining.mine(CORPUS[::-1] + CORPUS, TASK, min_reports=1)]
    assert a == b


@pytest.mark.parametrize(
    ("word", "singular"),
    [
        ("opacities", "opacity"),
        ("effusions", "effusion"),
        ("atelectasis", "atelectasis"),
        ("pneumothoraces", "pneumothorax"),
        ("apices", "apex"),
        ("devices", "device"),
        ("calcifications", "calcification"),
        ("bronchi", "bronchus"),
        ("processes", "process"),
        ("emphysematous", "emphysematous"),
    ],
)
def test_singular(word, singular):
    assert ls.singular(word) == singular


def test_comparison_with_a_vocabulary():
    cands = mining.mine(CORPUS, TASK, min_reports=1)
    lex = mining.lexicon(TASK)
    labels = [
        ls.LabelWords("pleural_effusion", "Pleural Effusion", ("pleural effusion",)),
        ls.LabelWords("pneumothorax", "Pneumothorax", ("pneumothorax",)),
        ls.LabelWords("cardiomegaly", "Cardiomegaly", ("cardiomegaly", "enlarged heart")),
        ls.LabelWords("copd", "COPD", ("copd",)),
    ]
    cmp = ls.compare(cands, labels, lex, "tiny", min_form=1)
    assert cmp.unsupported == ["pneumothorax"]  # the corpus never affirms it
    assert {c.name for c in cmp.additions} == {"calcified granuloma"}
    assert cmp.missing_forms == {"copd": [("chronic obstructive pulmonary disease", 1)]}  # its look-for lacks it


def test_review_rule_unanimous_and_k_of_n():
    rule = ls.ReviewRule(("ann", "bob"))
    assert ls.outcome({"ann": ("approve", "")}, rule) == ls.Outcome(ls.OPEN, None, ("bob",))
    assert ls.outcome({"ann": ("approve", ""), "bob": ("reject", "")}, rule).waiting_on == ("ann", "bob")  # a tie
    assert ls.outcome({"ann": ("reject", ""), "bob": ("reject", "")}, rule).decision == ("reject", "")
    two_of_three = ls.ReviewRule(("ann", "bob", "cy"), "k_of_n", 2)
    assert ls.outcome({"ann": ("approve", ""), "cy": ("approve", "")}, two_of_three).status == ls.SETTLED
    assert ls.outcome({"eve": ("approve", ""), "ann": ("approve", "")}, two_of_three).status == ls.OPEN
    with pytest.raises(ValueError, match="k must be 1..3"):
        ls.ReviewRule(("ann", "bob", "cy"), "k_of_n", 4)


# ---------------------------------------------------------------- the study: storage, review, adoption


@pytest.fixture
def mined(study, tmp_path):
    """A ranscore-21 study with the CORPUS cohort mined into label set 'corpus'."""
    path = tmp_path / "corpus.csv"
    path.write_text("id,findings,impression\n" + "".join(f'{i},"{t}",\n' for i, t in CORPUS))
    study.import_reports(path, "corpus")
    study.labelset.mine_labelset("corpus", min_reports=1)
    return study


def keys(wb, name="corpus"):
    """Candidate name -> key."""
    return {c["name"]: c["key"] for c in wb.labelset.labelset_candidates(name)}


def test_merge_rename_and_reject_by_two_reviewers_under_the_unanimous_rule(mined, tmp_path):
    from workbench.services import Actor

    wb = mined
    wb.labelset.set_review_rule("corpus", ["ann", "bob"])
    k = keys(wb)
    ann = wb.as_actor(Actor("ann", "reader"))
    bob = wb.as_actor(Actor("bob", "reader"))
    ann.labelset.vote_candidate("corpus", k["copd"], "rename", "Chronic obstructive pulmonary disease")
    out = bob.labelset.vote_candidate("corpus", k["copd"], "rename", "COPD")
    assert out.status == ls.OPEN and set(out.waiting_on) == {"ann", "bob"}  # they disagree on the name
    bob.labelset.vote_candidate("corpus", k["copd"], "rename", "Chronic obstructive pulmonary disease")
    for who in (ann, bob):
        who.labelset.vote_candidate("corpus", k["enlarged heart"], "merge", k["pleural effusion"])
        who.labelset.vote_candidate("corpus", k["calcified granuloma"], "reject")
    ann.labelset.vote_candidate("corpus", k["pleural effusion"], "approve")
    status = {c["name"]: c for c in wb.labelset.labelset_candidates("corpus")}
    assert status["copd"]["decision"] == ("rename", "Chronic obstructive pulmonary disease")
    assert status["enlarged heart"]["decision"] == ("merge", k["pleural effusion"])
    assert status["calcified granuloma"]["decision"] == ("reject", "")
    assert status["pleural effusion"]["status"] == ls.OPEN and status["pleural effusion"]["waiting_on"] == ["bob"]
    with pytest.raises(StudyError, match="still open"):
        wb.labelset.export_labelset("corpus", tmp_path / "labels.yaml")
    from workbench.services.study import PermissionDenied

    with pytest.raises(PermissionDenied):
        ann.labelset.settle_candidate("corpus", k["pleural effusion"], "approve", reason="obvious")
    with pytest.raises(PermissionDenied, match="only vote as themself"):
        ann.labelset.vote_candidate("corpus", k["pleural effusion"], "approve", reviewer="bob")
    with wb.session() as s:
        from sqlmodel import select

        from workbench.store.tables import AuditEvent

        actions = [
            (e.actor, e.action) for e in s.exec(select(AuditEvent).where(AuditEvent.entity == "labelset_candidate"))
        ]
    assert actions.count(("ann", "vote")) == 4 and actions.count(("bob", "vote")) == 4


def test_votes_are_blinded_until_the_reviewer_has_voted(mined):
    from workbench.services import Actor

    wb = mined
    wb.labelset.set_review_rule("corpus", ["ann", "bob"])
    key = keys(wb)["pleural effusion"]
    ann = wb.as_actor(Actor("ann", "reader"))
    bob = wb.as_actor(Actor("bob", "reader"))
    ann.labelset.vote_candidate("corpus", key, "approve")
    assert bob.labelset.candidate_votes("corpus", key) == {}  # bob has not voted: ann's vote is hidden
    listed = {c["key"]: c for c in bob.labelset.labelset_candidates("corpus")}[key]
    assert listed["waiting_on"] == [] and listed["decision"] is None  # nor hinted at by the listing
    assert wb.labelset.labelset_candidates("corpus")[0]["waiting_on"] == ["bob"]  # the admin sees who has not agreed
    bob.labelset.vote_candidate("corpus", key, "reject")
    assert bob.labelset.candidate_votes("corpus", key) == {"ann": ("approve", ""), "bob": ("reject", "")}
    assert wb.labelset.candidate_votes("corpus", key)  # the admin sees them


def approve_all(wb, name="corpus", drop=()):
    """Both reviewers approve every candidate except those in drop (rejected)."""
    from workbench.services import Actor

    wb.labelset.set_review_rule(name, ["ann", "bob"])
    for who in ("ann", "bob"):
        r = wb.as_actor(Actor(who, "reader"))
        for c in wb.labelset.labelset_candidates(name):
            r.labelset.vote_candidate(name, c["key"], "reject" if c["name"] in drop else "approve")


def test_adoption_commits_the_vocabulary_and_keeps_old_readings(mined, tmp_path):
    wb = mined
    wb.record_reading("reader_a", "r1", {"pneumothorax": 1})
    run_id = wb.start_run("corpus", labels=["pneumothorax"]).run_id  # a run of a label the set will drop
    with wb.session() as s:
        from sqlmodel import select

        from workbench.store.tables import Reading

        before = len(list(s.exec(select(Reading))))
    assert before == 1
    approve_all(wb, drop=("calcified granuloma",))
    change = wb.labelset.adopt_labelset("corpus")
    assert "pneumothorax" in change.dropped and "pleural_effusion" not in change.added  # same name: same id kept
    assert "copd" in change.added
    from workbench.services import Workbench

    again = Workbench(wb.root)
    assert "copd" in again.vocab.ids and "pneumothorax" not in again.vocab.ids
    assert "calcified_granuloma" not in again.vocab.ids
    assert again.prompts.prompt_set().label("copd").look_for  # a starter prompt from its look-for phrases
    from workbench.store import prompt_repo

    assert "pleural effusion" in prompt_repo.read_file(again.paths.prompts, "vocabulary.yml")
    assert prompt_repo.read_file(again.paths.prompts, "pneumothorax.yaml") is None  # not in this version
    assert prompt_repo.read_file(again.paths.prompts, "pneumothorax.yaml", "HEAD~1") is not None  # kept before it
    with again.session() as s:
        from workbench.store.tables import Prediction

        assert len(list(s.exec(select(Reading)))) == before  # the dropped label's reading is still there
        kept = list(s.exec(select(Prediction).where(Prediction.run_id == run_id)))
        assert len(kept) == len(CORPUS) and {p.label for p in kept} == {"pneumothorax"}  # and its run's answers


def test_init_accepts_an_exported_label_set(mined, tmp_path):
    approve_all(mined)
    out = tmp_path / "mined-vocab.yaml"
    result = CliRunner().invoke(
        main, ["labelset", "export", "--labelset", "corpus", "--out", str(out), "--study", str(mined.root)]
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["init", str(tmp_path / "new"), "--vocab", str(out)])
    assert result.exit_code == 0, result.output
    from workbench.services import Workbench

    new = Workbench(tmp_path / "new")
    assert "pleural_effusion" in new.vocab.ids
    assert new.prompts.prompt_set().label("pleural_effusion").look_for[0] == "pleural effusion"


def test_cli_mine_json_and_against(mined):
    result = CliRunner().invoke(
        main,
        [
            "labelset",
            "mine",
            "--cohort",
            "corpus",
            "--min-reports",
            "1",
            "--labelset",
            "again",
            "--format",
            "json",
            "--study",
            str(mined.root),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data[0]["name"] == "pleural effusion" and data[0]["affirmed_reports"] == 4
    assert data[0]["forms"][0]["count"] >= data[0]["forms"][-1]["count"]
    result = CliRunner().invoke(
        main,
        [
            "labelset",
            "mine",
            "--cohort",
            "corpus",
            "--min-reports",
            "1",
            "--labelset",
            "third",
            "--against",
            "chexpert-14",
            "--study",
            str(mined.root),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "against chexpert-14:" in result.output and "+ copd" in result.output
    assert "pneumothorax" in result.output.split("unsupported:")[1].splitlines()[0]


def test_cli_review_commands_and_bad_input(mined):
    def run(*args):
        return CliRunner().invoke(main, ["labelset", *args, "--labelset", "corpus", "--study", str(mined.root)])

    k = keys(mined)
    assert run("rule", "--reviewers", "ann,bob", "--rule", "k_of_n", "--k", "3").exit_code == 2  # k > n
    assert run("rule", "--reviewers", "ann,bob").exit_code == 0
    bad = run("vote", k["copd"], "merge", "no-such-key", "--reviewer", "ann")
    assert bad.exit_code == 2 and "merge target 'no-such-key'" in bad.output
    ok = run("vote", k["copd"], "approve", "--reviewer", "ann")
    assert ok.exit_code == 0 and "waiting on bob" in ok.output
    assert "hidden until you vote" not in run("show", k["copd"]).output  # the admin sees the votes
    listed = run("list", "--open")
    assert listed.exit_code == 0 and "bob" in listed.output
    settled = run("settle", k["copd"], "approve", "--reason", "clearly a finding")
    assert settled.exit_code == 0 and "settled by adjudication" in settled.output
    assert run("edit", k["copd"], "--look-for", " ; ").exit_code == 2
    wrong = run("split", k["pleural effusion"], "--forms", "effusion pleural", "--name", "Inverted effusion")
    assert wrong.exit_code == 2 and "forms not in 'effusion': effusion pleural" in wrong.output
    split = run("split", k["copd"], "--forms", "chronic obstructive pulmonary disease", "--name", "Spelled out")
    assert split.exit_code == 0, split.output
    rows = {c["name"]: c for c in mined.labelset.labelset_candidates("corpus")}
    assert [f["text"] for f in rows["Spelled out"]["forms"]] == ["chronic obstructive pulmonary disease"]
    assert [f["text"] for f in rows["copd"]["forms"]] == ["copd"] and rows["Spelled out"]["status"] == "open"


# ---------------------------------------------------------------- the model engine, through real HTTP


def sentence_findings(messages) -> str:
    """The fake model's extraction: each sentence of the report is one finding, negated when it starts with No."""
    from fake_llm_server import last_user_text

    found = []
    text = re.sub(r"\b[A-Z]{3,}:\s*", "", last_user_text(messages))  # section headers ("FINDINGS:") are no finding
    for sentence in text.replace("\n", " ").split("."):
        words = sentence.strip()
        if not words or words.startswith("[["):
            continue
        negated = words.lower().startswith("no ")
        found.append({"text": words[3:] if negated else words, "assertion": "negated" if negated else "affirmed"})
    return json.dumps({"findings": found})


MODEL_CORPUS = [
    ("m1", "Small left pleural effusion. No pneumothorax."),
    ("m2", "Pleural effusions. No pneumothorax."),
    ("m3", "Cardiomegaly. Pleural effusion."),
    ("m4", "[[behaviour:malformed]] Cardiomegaly."),
    ("m5", "[[behaviour:refusal]] Pleural effusion."),
]


@pytest.fixture
def model_study(study, tmp_path):
    """A study with the MODEL_CORPUS cohort."""
    path = tmp_path / "m.csv"
    path.write_text("id,findings,impression\n" + "".join(f'{i},"{t}",\n' for i, t in MODEL_CORPUS))
    study.import_reports(path, "m")
    return study


def test_the_model_engine_through_real_http_good_malformed_and_refused_replies(model_study, fake_llm_server):
    wb, server = model_study, fake_llm_server
    server.answer_fn = sentence_findings
    remote = {"model": "openai/fake", "api_base": server.url, "max_retries": 1, "timeout_s": 20}
    est = wb.labelset.estimate_mining("m", **remote)
    assert est.to_make == len(MODEL_CORPUS) and server.count == 0  # an estimate makes no call
    result = wb.labelset.mine_labelset("m", engine="model", min_reports=1, **remote)
    assert server.count == len(MODEL_CORPUS)  # one extraction call per report
    assert result.calls["made"] == 5 and result.calls["failed"] == 2  # malformed and refused: failures, never []
    assert set(result.calls["failure_kinds"]) == {"parse_error"}
    names = {c.name: c for c in result.candidates}
    assert set(names) == {"pleural effusion", "cardiomegaly"}, [c.to_json() for c in result.candidates]
    assert names["pleural effusion"].affirmed_reports == 3  # m1 (left, small), m2 (plural), m3
    assert names["pleural effusion"].attributes == {"severity": {"mild": 1}, "side": {"left": 1}}
    assert names["cardiomegaly"].affirmed_reports == 1  # m3 only: m4's reply was malformed
    assert "pneumothorax" not in names  # negated only
    again = wb.labelset.mine_labelset("m", engine="model", min_reports=1, labelset="m2", **remote)
    assert again.calls["reused"] == 3 and again.calls["made"] == 2  # the cache answers; failures are asked again
    assert [c.to_json() for c in again.candidates] == [c.to_json() for c in result.candidates]
    wb.config.allowed_endpoints = ["workbench/rules"]  # an admin withdrew the local server
    with pytest.raises(StudyError, match="may not be sent"):
        wb.labelset.mine_labelset("m", engine="model", labelset="m3", **remote)
    assert server.count == 7


def test_the_model_engine_needs_a_model(model_study):
    with pytest.raises(StudyError, match="needs a model"):
        model_study.labelset.mine_labelset("m", engine="model")
    with pytest.raises(StudyError, match="unknown engine"):
        model_study.labelset.mine_labelset("m", engine="magic")


def test_parse_entities_names_what_is_wrong():
    assert ls.parse_entities('```json\n{"findings": [{"text": "effusion", "assertion": "Affirmed"}]}\n```') == [
        ("effusion", "affirmed")
    ]
    for reply, message in [
        ("not json", "not JSON"),
        ('{"found": []}', 'no "findings" list'),
        ('{"findings": [{"text": ""}]}', "finding 1 has no text"),
        ('{"findings": [{"text": "x", "assertion": "maybe"}]}', "'maybe' is not one of"),
    ]:
        with pytest.raises(ValueError, match=message):
            ls.parse_entities(reply)
