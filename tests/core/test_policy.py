"""Pure policy logic: field-level diffs of a label's prompt, warnings inside a label, few-shot
examples from cases, the policy table and conflicts between related labels. Table-driven."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.core import policy
from workbench.core.prompts import DEFAULT_CUES, Example, LabelPrompt, PromptSet, TaskSpec

TEMPORAL = (("resolved", "negative"), ("stable", "positive"), ("improving", "positive"), ("prior", "negative"))
TASK = TaskSpec(
    mode="per_label",
    system="s",
    per_label_template="{report}",
    joint_template="{report}",
    output_format="o",
    joint_output_format="j",
)


def lp(label="pneumonia", **kw) -> LabelPrompt:
    base = dict(
        label=label,
        task=f"Does the report describe {label}?",
        definition="d",
        look_for=("pneumonia",),
        do_not_label_when=(),
        hedged="negative",
        temporal=TEMPORAL,
        examples=(),
    )
    base.update(kw)
    return LabelPrompt(**base)


def ex(text, value, why="w", **kw) -> Example:
    return Example(text=text, value=value, why=why, **kw)


BASE = lp(
    look_for=("pneumonia", "infectious process"),
    do_not_label_when=("the report only mentions 'aspiration'.",),
    examples=(ex("Cannot exclude pneumonia.", 1),),
)


# ---------------------------------------------------------------- diff_label_prompts


@pytest.mark.parametrize(
    "new, expected",
    [
        (BASE, {"changed": {}, "added": {}, "removed": {}}),
        (
            dataclasses.replace(BASE, look_for=("pneumonia", "infectious process", "bronchopneumonia")),
            {"changed": {}, "added": {"look_for": ["bronchopneumonia"]}, "removed": {}},
        ),
        (
            dataclasses.replace(BASE, look_for=("pneumonia",)),
            {"changed": {}, "added": {}, "removed": {"look_for": ["infectious process"]}},
        ),
        (
            dataclasses.replace(BASE, look_for=("pneumonia", "airspace infection")),
            {
                "changed": {},
                "added": {"look_for": ["airspace infection"]},
                "removed": {"look_for": ["infectious process"]},
            },
        ),
        (
            dataclasses.replace(BASE, do_not_label_when=()),
            {"changed": {}, "added": {}, "removed": {"do_not_label_when": ["the report only mentions 'aspiration'."]}},
        ),
        (
            dataclasses.replace(BASE, do_not_label_when=BASE.do_not_label_when + ("it is only suspected.",)),
            {"changed": {}, "added": {"do_not_label_when": ["it is only suspected."]}, "removed": {}},
        ),
        (
            dataclasses.replace(BASE, examples=BASE.examples + (ex("No pneumonia.", 0),)),
            {"changed": {}, "added": {"examples": ["[0] No pneumonia."]}, "removed": {}},
        ),
        # the answer of an example changed: the old one is removed, the new one added
        (
            dataclasses.replace(BASE, examples=(ex("Cannot exclude pneumonia.", 0),)),
            {
                "changed": {},
                "added": {"examples": ["[0] Cannot exclude pneumonia."]},
                "removed": {"examples": ["[1] Cannot exclude pneumonia."]},
            },
        ),
        (
            dataclasses.replace(BASE, hedged="positive"),
            {"changed": {"hedged": ("negative", "positive")}, "added": {}, "removed": {}},
        ),
        (
            dataclasses.replace(
                BASE,
                temporal=(
                    ("resolved", "negative"),
                    ("stable", "negative"),
                    ("improving", "positive"),
                    ("prior", "negative"),
                ),
            ),
            {"changed": {"temporal.stable": ("positive", "negative")}, "added": {}, "removed": {}},
        ),
        (
            dataclasses.replace(BASE, definition="Infection of the lung.", notes="why"),
            {
                "changed": {"definition": ("d", "Infection of the lung."), "notes": ("", "why")},
                "added": {},
                "removed": {},
            },
        ),
        (
            dataclasses.replace(BASE, task="Is there pneumonia?"),
            {
                "changed": {"task": ("Does the report describe pneumonia?", "Is there pneumonia?")},
                "added": {},
                "removed": {},
            },
        ),
        # order alone is not a change of phrases
        (
            dataclasses.replace(BASE, look_for=("infectious process", "pneumonia")),
            {"changed": {}, "added": {}, "removed": {}},
        ),
    ],
)
def test_diff_label_prompts(new, expected):
    diff = policy.diff_label_prompts(BASE, new)
    assert diff == expected
    assert policy.diff_is_empty(diff) == (expected == {"changed": {}, "added": {}, "removed": {}})


@pytest.mark.parametrize(
    "old, new, expected",
    [
        (None, BASE, {"created": True}),
        (BASE, None, {"deleted": True}),
    ],
)
def test_diff_created_or_deleted(old, new, expected):
    diff = policy.diff_label_prompts(old, new)
    assert diff == expected and not policy.diff_is_empty(diff)


def test_diff_sees_a_changed_example_explanation():
    new = dataclasses.replace(BASE, examples=(ex("Cannot exclude pneumonia.", 1, why="the radiologists count it"),))
    assert new != BASE
    assert not policy.diff_is_empty(policy.diff_label_prompts(BASE, new))


# ---------------------------------------------------------------- label_warnings


@pytest.mark.parametrize(
    "prompt, kinds, fragment",
    [
        (BASE, [], None),
        (
            lp(
                look_for=("effusion", "Pericardial Effusion"),
                do_not_label_when=("the report only mentions a 'pericardial effusion'.",),
            ),
            ["look-for phrase also excluded"],
            "Pericardial Effusion is both a look-for phrase and an exclusion",
        ),
        # an unquoted rule is for the model only: no clash can be detected
        (lp(look_for=("effusion",), do_not_label_when=("the report only mentions effusion.",)), [], None),
        (lp(examples=(ex("a", 1), ex("b", 1))), ["examples all one class"], "all 2 few-shot examples are positive"),
        (
            lp(examples=(ex("a", 0), ex("b", 0), ex("c", 0))),
            ["examples all one class"],
            "all 3 few-shot examples are negative",
        ),
        (lp(examples=(ex("a", 1),)), [], None),  # one example is not "all one class"
        (lp(examples=(ex("a", 1), ex("b", 0))), [], None),
        (
            lp(examples=(ex("No pneumonia.", 0), ex("  no PNEUMONIA. ", 1))),
            ["contradictory examples"],
            "appears as both 0 and 1",
        ),
        (lp(examples=(ex("same", 1), ex("same", 1))), ["examples all one class"], None),  # repeated, not contradictory
    ],
)
def test_label_warnings(prompt, kinds, fragment):
    found = policy.label_warnings(prompt, "Pneumonia")
    assert [f.kind for f in found] == kinds
    assert all(f.labels == (prompt.label,) for f in found)
    if fragment:
        assert any(fragment in f.message for f in found)
        assert all(f.message.startswith("Pneumonia: ") for f in found)


# ---------------------------------------------------------------- example_from_case

REPORT = "FINDINGS: Right lower lobe consolidation, cannot exclude pneumonia.\nIMPRESSION: Possible pneumonia."


@pytest.mark.parametrize(
    "evidence, why, text, why_out",
    [
        ("", "hedged", REPORT, "hedged"),
        (
            "Right lower lobe consolidation, cannot exclude pneumonia",
            "hedged",
            "Right lower lobe consolidation, cannot exclude pneumonia",
            "hedged",
        ),
        ("Possible pneumonia.", "  ", "Possible pneumonia.", "taken from a reviewed disagreement"),
        ("an invented quote", "x", REPORT, "x"),  # evidence not in the report: the report is kept
    ],
)
def test_example_from_case(evidence, why, text, why_out):
    example = policy.example_from_case(REPORT, 0, why, "s3", "negation missed (unsure)", evidence)
    assert example == Example(text=text, value=0, why=why_out, source_report_id="s3", note="negation missed (unsure)")


def test_example_from_case_truncates_long_reports_at_a_word():
    report = " ".join(["word"] * 300)  # 1499 characters
    example = policy.example_from_case(report, True, "long", None, None, max_chars=100)
    assert example.text.endswith(" ...") and len(example.text) <= 104
    assert example.text[:-4] == " ".join(["word"] * 20)
    assert example.value == 1 and isinstance(example.value, int)
    assert example.source_report_id is None and example.note is None


# ---------------------------------------------------------------- table and conflicts


def prompt_set(**labels: LabelPrompt) -> PromptSet:
    return PromptSet(task=TASK, labels=labels)


NAMES = {
    "pneumonia": "Pneumonia",
    "consolidation": "Consolidation",
    "lung_opacity": "Lung Opacity",
    "atelectasis": "Atelectasis",
    "pleural_effusion": "Pleural Effusion",
    "pleural_other": "Pleural Other",
}


@pytest.mark.parametrize(
    "labels, expected",
    [
        (
            {"pneumonia": lp("pneumonia", hedged="positive"), "consolidation": lp("consolidation")},
            [("hedge policy differs", ("pneumonia", "consolidation"))],
        ),
        (
            {"pneumonia": lp("pneumonia", hedged="positive"), "consolidation": lp("consolidation", hedged="positive")},
            [],
        ),
        # unrelated labels may differ
        ({"pneumonia": lp("pneumonia", hedged="positive"), "pleural_effusion": lp("pleural_effusion")}, []),
        (
            {
                "pleural_effusion": lp("pleural_effusion"),
                "pleural_other": lp(
                    "pleural_other",
                    temporal=(
                        ("resolved", "negative"),
                        ("stable", "negative"),
                        ("improving", "positive"),
                        ("prior", "negative"),
                    ),
                ),
            },
            [("temporal policy differs (stable)", ("pleural_effusion", "pleural_other"))],
        ),
        # lung opacity belongs to two groups
        (
            {
                "pneumonia": lp("pneumonia"),
                "lung_opacity": lp("lung_opacity", hedged="positive"),
                "atelectasis": lp("atelectasis"),
            },
            [
                ("hedge policy differs", ("pneumonia", "lung_opacity")),
                ("hedge policy differs", ("atelectasis", "lung_opacity")),
            ],
        ),
        # a label alone in its group has nothing to differ from
        ({"pneumonia": lp("pneumonia", hedged="positive")}, []),
    ],
)
def test_policy_conflicts_between_related_labels(labels, expected):
    found = policy.policy_conflicts(prompt_set(**labels), NAMES)
    assert [(f.kind, f.labels) for f in found] == expected


def test_policy_conflicts_include_warnings_inside_labels_and_name_labels():
    ps = prompt_set(
        pneumonia=lp("pneumonia", hedged="positive", examples=(ex("a", 1), ex("b", 1))),
        consolidation=lp("consolidation"),
    )
    found = policy.policy_conflicts(ps, NAMES)
    assert [f.kind for f in found] == ["hedge policy differs", "examples all one class"]
    assert found[0].message.endswith("(Pneumonia: positive, Consolidation: negative)")
    # without names the ids are used
    assert policy.policy_conflicts(ps)[0].message.endswith("(pneumonia: positive, consolidation: negative)")


def test_policy_table_rows():
    ps = prompt_set(pneumonia=BASE, consolidation=lp("consolidation", hedged="positive", examples=(ex("a", 0),)))
    table = policy.policy_table(ps, NAMES)
    assert table.columns.tolist() == [
        "label",
        "name",
        "hedged",
        "resolved",
        "stable",
        "improving",
        "prior",
        "look_for",
        "exclusions",
        "examples",
        "positive_examples",
    ]
    assert table.to_dict("records") == [
        {
            "label": "pneumonia",
            "name": "Pneumonia",
            "hedged": "negative",
            "resolved": "negative",
            "stable": "positive",
            "improving": "positive",
            "prior": "negative",
            "look_for": 2,
            "exclusions": 1,
            "examples": 1,
            "positive_examples": 1,
        },
        {
            "label": "consolidation",
            "name": "Consolidation",
            "hedged": "positive",
            "resolved": "negative",
            "stable": "positive",
            "improving": "positive",
            "prior": "negative",
            "look_for": 1,
            "exclusions": 0,
            "examples": 1,
            "positive_examples": 0,
        },
    ]
    assert "cannot exclude" in DEFAULT_CUES["hedge"]  # the wording the hedge policy is about
