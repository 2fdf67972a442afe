"""The offline rule-based labeller: prompt edits change its answers the way they would change a model's."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
import yaml

from workbench.core.prompts import DEFAULT_CUES, Example, LabelPrompt, PromptError, parse_prompt_set
from workbench.core.vocab import VocabularyError, parse_vocabulary
from workbench.labeller import rules
from workbench.labeller.endpoints import is_offline
from workbench.shipped import shipped_dir

# Fixed cue lists so that these tests do not move when the shipped defaults are tuned.
CUES = {
    "negation": (
        "no",
        "not",
        "without",
        "negative for",
        "free of",
        "absence of",
        "no evidence of",
        "no sign of",
        "rule out",
        "ruled out",
        "clear of",
        "removed",
        "resolution of",
    ),
    "hedge": (
        "cannot exclude",
        "cannot be excluded",
        "can not be excluded",
        "not excluded",
        "possible",
        "possibly",
        "may represent",
        "may be",
        "questionable",
        "suspicious for",
        "suggestive of",
        "concerning for",
        "likely",
        "probable",
        "versus",
        "vs",
        "differential",
        "could represent",
        "question of",
        "borderline",
    ),
    "resolved": ("resolved", "no longer", "interval resolution", "has cleared", "removed"),
    "stable": ("stable", "unchanged", "persistent", "again seen", "redemonstrated", "similar"),
    "improving": ("improving", "improved", "decreased", "smaller", "diminished"),
    "prior": ("prior", "previous", "history of", "status post", "chronic"),
    "scope_break": ("but", "however", "although", "though", "except", "which", "with interval", "otherwise"),
}
STARTER_TEMPORAL = {"resolved": "negative", "stable": "positive", "improving": "positive", "prior": "negative"}


def make_lp(
    label="effusion",
    look_for=("pleural effusion", "effusion"),
    do_not=(),
    hedged="negative",
    temporal=None,
    examples=(),
) -> LabelPrompt:
    """A LabelPrompt built in code (the shipped prompt files are edited independently)."""
    policy = dict(STARTER_TEMPORAL, **(temporal or {}))
    return LabelPrompt(
        label=label,
        task=f"Does the report describe {label}?",
        definition=f"{label}.",
        look_for=tuple(look_for),
        do_not_label_when=tuple(do_not),
        hedged=hedged,
        temporal=tuple((k, policy[k]) for k in ("resolved", "stable", "improving", "prior")),
        examples=tuple(examples),
    )


def value(report: str, lp: LabelPrompt, cues=CUES) -> int:
    return rules.label_one(report, lp, cues)["value"]


EFFUSION = make_lp()
PNEUMOTHORAX = make_lp("pneumothorax", ("pneumothorax",))
NODULE = make_lp("nodule", ("nodule",))


# ---------------------------------------------------------------- negation


@pytest.mark.parametrize(
    "report, expected",
    [
        ("Small left pleural effusion.", 1),
        ("No pleural effusion.", 0),
        ("There is no evidence of pleural effusion.", 0),
        ("There are no XXXX of a pleural effusion.", 0),
        ("The lungs are clear without effusion.", 0),
        ("Negative for pleural effusion.", 0),
        ("The costophrenic angles are free of effusion.", 0),
        ("Pleural effusion is not seen.", 0),
        ("A pleural effusion is not definitely seen.", 0),
        ("Pleural effusions are absent.", 0),
        ("Pleural effusion is excluded.", 0),
        ("No focal airspace opacity to suggest a pleural effusion.", 0),
        ("No pneumothorax. Small right pleural effusion.", 1),
        ("No pneumothorax; small right pleural effusion.", 1),
        ("No pneumothorax, but there is a small right pleural effusion.", 1),
        ("Heart size normal. However, a small effusion is present.", 1),
        ("No interval change in the small left pleural effusion.", 1),
        ("There is redemonstration without significant interval change of the left effusion.", 1),
        ("No pneumothorax, there is a small right effusion.", 1),
    ],
)
def test_negation(report, expected):
    assert value(report, EFFUSION) == expected


@pytest.mark.parametrize(
    "report, lp, expected",
    [
        ("No effusion or pneumothorax.", EFFUSION, 0),
        ("No effusion or pneumothorax.", PNEUMOTHORAX, 0),
        ("There is no consolidation, pleural effusion or pneumothorax.", EFFUSION, 0),
        ("There is no consolidation, pleural effusion or pneumothorax.", PNEUMOTHORAX, 0),
        ("No displaced rib fractures, pneumothorax, or pleural effusion identified.", EFFUSION, 0),
        ("No focal airspace disease, pleural effusion, or pneumothorax.", PNEUMOTHORAX, 0),
        ("No acute bony abnormality. Small apical pneumothorax.", PNEUMOTHORAX, 1),
    ],
)
def test_negation_lists(report, lp, expected):
    assert value(report, lp) == expected


# ---------------------------------------------------------------- hedge and temporal policy


@pytest.mark.parametrize(
    "report",
    [
        "Cannot exclude a small left pleural effusion.",
        "Small left pleural effusion cannot be excluded.",
        "Possible small left effusion.",
        "Blunting of the left costophrenic angle may represent a small effusion.",
        "Left basilar opacity, atelectasis versus effusion.",
        "Findings are suspicious for a loculated pleural effusion.",
    ],
)
def test_hedge_policy_flips_the_answer(report):
    assert value(report, make_lp(hedged="negative")) == 0
    assert value(report, make_lp(hedged="positive")) == 1


@pytest.mark.parametrize(
    "report, kind",
    [
        ("The left pleural effusion has resolved.", "resolved"),
        ("Interval resolution of the left pleural effusion.", "resolved"),
        ("The effusion is no longer seen.", "resolved"),
        ("Stable small left pleural effusion.", "stable"),
        ("Small left pleural effusion, unchanged from prior.", "stable"),
        ("Persistent small left effusion.", "stable"),
        ("Improving small left pleural effusion.", "improving"),
        ("The left pleural effusion has decreased in size.", "improving"),
        ("History of pleural effusion.", "prior"),
        ("Status post drainage of a pleural effusion.", "prior"),
    ],
)
def test_temporal_policy_flips_the_answer(report, kind):
    assert value(report, make_lp(temporal={kind: "positive"})) == 1
    assert value(report, make_lp(temporal={kind: "negative"})) == 0


@pytest.mark.parametrize(
    "report, kind",
    [
        ("Previously improving effusion has now resolved.", "resolved"),  # resolved beats improving
        ("Stable to slightly improved small effusion.", "improving"),  # improving beats stable
        ("Small effusion, unchanged from the prior exam.", "stable"),  # "prior exam" is the comparison
        ("Small effusion, stable compared to previous.", "stable"),
    ],
)
def test_temporal_precedence(report, kind):
    others = {k: "positive" for k in rules.TEMPORAL_PRECEDENCE if k != kind}
    assert value(report, make_lp(temporal={**others, kind: "negative"})) == 0
    only = {k: "negative" for k in rules.TEMPORAL_PRECEDENCE if k != kind}
    assert value(report, make_lp(temporal={**only, kind: "positive"})) == 1


def test_comparison_wording_is_not_a_prior_finding():
    assert value("Compared to prior, there is a new small left effusion.", make_lp()) == 1


def test_cue_inside_a_look_for_phrase_is_part_of_the_phrase():
    copd = make_lp("emphysema", ("emphysema", "chronic obstructive pulmonary disease"))
    assert value("Hyperinflated lungs consistent with chronic obstructive pulmonary disease.", copd) == 1
    assert (
        value(
            "Mild cardiomegaly with findings of chronic obstructive pulmonary disease.",
            make_lp("cardiomegaly", ("cardiomegaly",)),
        )
        == 0
    )  # prior applies to the clause


@pytest.mark.parametrize(
    "report, expected",
    [
        ("No pleural effusion or pneumothorax.", 0),
        ("Small left pleural effusion.", 1),
        ("Cannot exclude a small effusion.", 0),
        ("The effusion has resolved.", 0),
        ("Stable small effusion.", 1),
    ],
)
def test_shipped_default_cues(report, expected):
    assert value(report, EFFUSION, dict(DEFAULT_CUES)) == expected


def test_task_cue_override_changes_the_answer():
    report = "Small left pleural effusion, favored to be real."
    assert value(report, EFFUSION) == 1
    assert value(report, EFFUSION, dict(CUES, hedge=CUES["hedge"] + ("favored",))) == 0


# ---------------------------------------------------------------- exclusions and prompt edits


@pytest.mark.parametrize(
    "report, expected",
    [
        ("Small pericardial effusion.", 0),
        ("Small pericardial effusion and a small left pleural effusion.", 1),
        ("Small pericardial effusion. Small left pleural effusion.", 1),
        ("Moderate left pleural effusion.", 1),
    ],
)
def test_exclusion_overlapping_the_mention(report, expected):
    lp = make_lp(do_not=("the report only mentions a 'pericardial effusion'.",))
    assert value(report, lp) == expected


@pytest.mark.parametrize(
    "rule, expected",
    [
        ("the report only mentions a 'calcified granuloma'.", 0),
        ("the report mentions a ‘calcified granuloma’ (typographic quotes).", 0),
        ("the patient's nodule is a 'calcified granuloma' in the report.", 0),  # an apostrophe is not a quote
        ("the nodule is calcified (no quoted phrase: for the model only).", 1),
    ],
)
def test_exclusion_phrases_from_quoted_rules(rule, expected):
    lp = make_lp("nodule", ("nodule",), do_not=(rule,))
    assert value("Calcified granuloma and a 5 mm nodule in the right upper lobe.", lp) == expected


def test_exclusion_phrases_are_the_quoted_fragments():
    got = rules.exclusion_phrases(
        [
            "the report only mentions 'calcified granuloma' or 'granulomatous disease'.",
            "the patient's history says so.",
            "it is a 'Calcified granuloma'.",
        ]
    )
    assert got == ("calcified granuloma", "granulomatous disease")


def test_adding_a_look_for_phrase_turns_a_false_negative_into_a_true_positive():
    report = "Blunting of the costophrenic angles. Heart size is normal."
    assert value(report, EFFUSION) == 0
    edited = dataclasses.replace(EFFUSION, look_for=EFFUSION.look_for + ("blunting of the costophrenic angle",))
    got = rules.label_one(report, edited, CUES)
    assert got == {"value": 1, "evidence": "Blunting of the costophrenic angles"}


def test_a_short_positive_example_acts_as_a_look_for_phrase():
    report = "Blunting of the left costophrenic angle."
    example = Example(text="Blunting of the left costophrenic angle.", value=1, why="a small effusion")
    assert value(report, EFFUSION) == 0
    assert value(report, dataclasses.replace(EFFUSION, examples=(example,))) == 1
    assert value("No blunting of the left costophrenic angle.", dataclasses.replace(EFFUSION, examples=(example,))) == 0


def test_adding_a_value_0_example_suppresses_a_false_positive():
    fp = "Dense nodule in the right hilum consistent with a calcified lymph node."
    other = "New 8 mm nodule in the left upper lobe."
    assert value(fp, NODULE) == 1
    example = Example(
        text="nodule in the right hilum consistent with a calcified lymph node",
        value=0,
        why="a calcified node, not a lung nodule",
        source_report_id="r-17",
    )
    edited = dataclasses.replace(NODULE, examples=(example,))
    assert value(fp, edited) == 0
    assert value(other, edited) == 1


def test_a_long_positive_example_found_in_the_report_makes_it_positive():
    report = "Heart size normal.\nThere is increased opacity in the right base, which may be\nfluid in the fissure."
    example = Example(
        text="increased opacity in the right base, which may be fluid in the fissure",
        value=1,
        why="fluid in the fissure is pleural fluid",
    )
    assert value(report, EFFUSION) == 0
    got = rules.label_one(report, dataclasses.replace(EFFUSION, examples=(example,)), CUES)
    assert got["value"] == 1 and got["evidence"] in report


@pytest.mark.parametrize(
    "phrase, report, expected",
    [
        ("effusion", "Bilateral effusions.", 1),
        ("opacity", "Patchy opacities at both bases.", 1),
        ("atelectasis", "Bibasilar atelectases.", 1),
        ("pneumothorax", "Bilateral pneumothoraces.", 1),
        ("mass", "Massive cardiomegaly.", 0),
        ("hernia", "Large HIATAL HERNIA.", 1),
        ("hernia", "Herniation of the disc.", 0),
        ("opacity (RUL)", "New opacity (RUL) since yesterday.", 1),
        ("c.diff+ colitis", "Known c.diff+ colitis.", 1),
        ("c.diff+ colitis", "Known cxdiff colitis.", 0),
        ("pleural effusion", "Small left pleural\n  effusion.", 1),
    ],
)
def test_phrase_matching(phrase, report, expected):
    assert value(report, make_lp(look_for=(phrase,))) == expected


# ---------------------------------------------------------------- evidence and determinism


REPORTS = [
    "No acute cardiopulmonary abnormality.",
    "Small left pleural effusion. No pneumothorax.",
    "The lungs are hyperexpanded.There is a small right effusion, which is stable",
    "FINDINGS: Heart size normal; trace  bilateral pleural effusions.\nIMPRESSION: Possible small effusions.",
    "Cardiomegaly. XXXX XXXX. No effusion.",
    "Pleural effusion has resolved; the nodule is unchanged.",
    "",
]


@pytest.mark.parametrize("report", REPORTS)
@pytest.mark.parametrize("lp", [EFFUSION, NODULE, make_lp(hedged="positive")], ids=["effusion", "nodule", "hedged+"])
def test_evidence_is_a_verbatim_substring(report, lp):
    got = rules.label_one(report, lp, CUES)
    assert set(got) == {"value", "evidence"} and got["value"] in (0, 1)
    assert got["evidence"] in report
    assert got["evidence"] == got["evidence"].strip()
    if got["value"] == 1:
        assert got["evidence"]


def test_negative_answer_cites_the_clause_that_decided_it():
    assert rules.label_one("Heart normal. No pleural effusion.", EFFUSION, CUES) == {
        "value": 0,
        "evidence": "No pleural effusion",
    }
    assert rules.label_one("Heart normal.", EFFUSION, CUES) == {"value": 0, "evidence": ""}


def test_deterministic_across_calls_caches_and_equal_prompts():
    first = [rules.label_one(r, EFFUSION, CUES) for r in REPORTS]
    rules.clear_caches()
    again = [rules.label_one(r, make_lp(), {k: tuple(v) for k, v in CUES.items()}) for r in REPORTS]
    assert first == again


def test_edited_prompt_is_recompiled():
    report = "Small left pleural effusion."
    assert value(report, EFFUSION) == 1
    assert value(report, dataclasses.replace(EFFUSION, do_not_label_when=("it says 'left pleural effusion'.",))) == 0
    assert value(report, EFFUSION) == 1


def test_explain_lists_every_mention_with_its_outcome():
    got = rules.explain("No effusion. Possible small effusion. Stable effusion.", EFFUSION, CUES)
    assert [d["outcome"] for d in got] == ["negated", "hedged", "positive"]
    assert [d["clause"] for d in got] == ["No effusion", "Possible small effusion", "Stable effusion"]


# ---------------------------------------------------------------- engine interface


@pytest.fixture
def llm_types():
    """CallRequest and CallResult of the engine interface (workbench.labeller.llm)."""
    from workbench.labeller.llm import CallRequest, CallResult

    return CallRequest, CallResult


@dataclasses.dataclass
class Cfg:
    model: str = rules.RULES_MODEL


def requests_for(CallRequest, reports, prompts, mode):
    """Requests as the services layer builds them: rendered messages plus what the engine reads."""
    out = []
    for i, report in enumerate(reports):
        groups = [prompts] if mode == "joint" else [[lp] for lp in prompts]
        for group in groups:
            messages = [
                {"role": "system", "content": "You label reports."},
                {"role": "user", "content": f"Labels {[lp.label for lp in group]}\nReport:\n{report}"},
            ]
            out.append(
                CallRequest(
                    f"k{i}-{len(out)}",
                    messages,
                    {
                        "report": report,
                        "mode": mode,
                        "prompts": group,
                        "cues": CUES,
                        "labels": [lp.label for lp in group],
                    },
                )
            )
    return out


def test_the_rules_model_is_offline():
    assert is_offline(rules.RULES_MODEL)  # the one answer (labeller/endpoints.py); the rest is in test_house.py


def test_complete_all_per_label_calls_on_result_once_per_request(llm_types):
    CallRequest, _ = llm_types
    reqs = requests_for(CallRequest, REPORTS[:4], [EFFUSION, NODULE], "per_label")
    seen = []
    rules.complete_all(reqs, Cfg(), lambda req, res: seen.append((req, res)))
    assert [req.key for req, _ in seen] == [r.key for r in reqs]
    for req, res in seen:
        assert res.key == req.key and res.error is None and res.error_kind is None
        assert res.cost == 0.0 and res.attempts == 1
        assert res.prompt_tokens == sum(len(m["content"]) for m in req.messages) // 4
        assert res.completion_tokens == len(res.text) // 4
        reply = json.loads(res.text)
        assert reply == rules.label_one(req.meta["report"], req.meta["prompts"][0], CUES)


def test_complete_all_joint_answers_every_label(llm_types):
    CallRequest, _ = llm_types
    prompts = [EFFUSION, NODULE, PNEUMOTHORAX, make_lp("cardiomegaly", ("cardiomegaly",))]
    reqs = requests_for(CallRequest, REPORTS, prompts, "joint")
    seen = []
    rules.complete_all(reqs, Cfg(), lambda req, res: seen.append(res))
    assert len(seen) == len(REPORTS)
    for req, res in zip(reqs, seen, strict=False):
        labels = json.loads(res.text)["labels"]
        assert list(labels) == [lp.label for lp in prompts]
        for lp in prompts:
            assert labels[lp.label] == rules.label_one(req.meta["report"], lp, CUES)
    assert json.loads(seen[1].text)["labels"]["effusion"] == {"value": 1, "evidence": "Small left pleural effusion"}


def test_complete_all_honours_cancel(llm_types):
    CallRequest, _ = llm_types
    reqs = requests_for(CallRequest, REPORTS, [EFFUSION], "per_label")
    cancel = threading.Event()
    seen = []

    def on_result(req, res):
        seen.append(req.key)
        if len(seen) == 2:
            cancel.set()

    rules.complete_all(reqs, Cfg(), on_result, cancel)
    assert seen == [reqs[0].key, reqs[1].key]
    seen.clear()
    rules.complete_all(reqs, Cfg(), on_result, cancel)
    assert seen == []


@pytest.mark.parametrize(
    "meta, error",
    [
        ({"mode": "per_label", "prompts": [EFFUSION], "cues": CUES}, KeyError),
        ({"report": "x", "mode": "per_label", "prompts": [EFFUSION, NODULE], "cues": CUES}, ValueError),
        ({"report": "x", "mode": "both", "prompts": [EFFUSION], "cues": CUES}, ValueError),
    ],
)
def test_malformed_requests_are_programmer_errors(llm_types, meta, error):
    CallRequest, _ = llm_types
    with pytest.raises(error):
        rules.complete_all([CallRequest("k", [], meta)], Cfg(), lambda req, res: None)


def test_unknown_offline_model_is_refused(llm_types):
    with pytest.raises(ValueError, match="workbench/other"):
        rules.complete_all([], Cfg(model="workbench/other"), lambda req, res: None)


# ---------------------------------------------------------------- the shipped starter prompts


def test_starter_chestxray14_prompts_label_synthetic_sentences():
    folder, vocab_file = shipped_dir("prompts") / "chestxray14", shipped_dir("vocab") / "chestxray14.yaml"
    if not (folder / "_task.yaml").exists() or not vocab_file.exists():
        pytest.skip("prompts/chestxray14 or vocab/chestxray14.yaml not there")
    try:
        vocab = parse_vocabulary(yaml.safe_load(vocab_file.read_text()), str(vocab_file))
        files = {p.name: yaml.safe_load(p.read_text()) for p in folder.glob("*.yaml")}
        ps = parse_prompt_set(files, vocab.asked_ids)
    except (PromptError, VocabularyError, yaml.YAMLError) as exc:
        pytest.skip(f"starter prompt set does not parse yet: {exc}")
    cues = ps.task.cue_lists()
    report = (
        "Heart size is enlarged, with cardiomegaly. Small right pleural effusion. No pneumothorax. "
        "Right upper lobe consolidation."
    )
    got = {lab: rules.label_one(report, ps.label(lab), cues)["value"] for lab in vocab.asked_ids}
    assert got["cardiomegaly"] == 1 and got["effusion"] == 1 and got["consolidation"] == 1
    assert got["pneumothorax"] == 0 and got["hernia"] == 0 and got["mass"] == 0
    assert rules.label_one("No pleural effusion or pneumothorax.", ps.label("effusion"), cues)["value"] == 0


@pytest.mark.parametrize(
    "report, expected",
    [
        ("There is no focal consolidation, pleural effusion or\n    pneumothorax.", 0),  # hard-wrapped sentence
        ("FINDINGS:\nNo pneumothorax.\nIMPRESSION:\nSmall pneumothorax", 1),
        ("No pleural effusion\nPneumothorax on the right", 1),  # a line of its own
        ("1. No effusion\n2. Small apical pneumothorax", 1),
    ],
)
def test_line_breaks(report, expected):
    assert value(report, PNEUMOTHORAX) == expected


def test_section_headers_are_not_evidence():
    report = "FINDINGS: Small left pleural effusion.\nIMPRESSION: Effusion."
    assert rules.label_one(report, EFFUSION, CUES) == {"value": 1, "evidence": "Small left pleural effusion"}


def test_scope_break_with_interval_separates_a_temporal_cue_from_the_finding_before_it():
    """A cue-list consequence: "with interval" as a scope break hides "X with interval resolution"."""
    assert value("Interval resolution of the left effusion.", EFFUSION) == 0
    assert value("Left effusion with interval resolution.", EFFUSION) == 1
    breaks = tuple(c for c in CUES["scope_break"] if c != "with interval")
    assert value("Left effusion with interval resolution.", EFFUSION, dict(CUES, scope_break=breaks)) == 0
