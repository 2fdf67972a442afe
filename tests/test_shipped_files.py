"""The vocabularies and starter prompt sets we ship load, render, and say what the domain requires."""

from __future__ import annotations

import copy
import csv
import re
from pathlib import Path

import pytest
import yaml

from workbench.core.prompts import (
    POLICY_VALUES,
    TASK_FILE,
    PromptError,
    content_hash,
    parse_prompt_set,
    render_joint_call,
    render_label_call,
)
from workbench.core.vocab import ID_PATTERN, VocabularyError, parse_vocabulary
from workbench.shipped import shipped_dir

ROOT = Path(__file__).resolve().parents[1]
VOCAB_DIR = shipped_dir("vocab")
PROMPT_DIR = shipped_dir("prompts")
DATASETS = ROOT.parent / "shared" / "datasets"
SETS = ("ranscore-21", "chexpert-14", "chestxray14")

SAMPLE_REPORT = (
    "FINDINGS: Endotracheal tube tip 4 cm above the carina. The heart is enlarged. Small left pleural "
    "effusion with adjacent atelectasis. Cannot exclude pneumonia in the left lower lobe. "
    "No pneumothorax. IMPRESSION: Cardiomegaly and small left effusion."
)

# As the released Ran Score code writes them (DOMAIN.md), in that order.
RANSCORE_NAMES = [
    "Atelectasis",
    "Cardiomegaly",
    "Consolidation",
    "Edema",
    "Enlarged Cardiomediastinum",
    "Fracture",
    "Lung Lesion",
    "No Finding",
    "Pleural Effusion",
    "Pleural Other",
    "Lung Opacity",
    "Pneumonia",
    "Pneumothorax",
    "Support Devices",
    "emphysema",
    "interstitial lung disease",
    "calcification(lung and mediastinal)",
    "Trachea and bronchus",
    "cavity and cyst",
    "mediastinal other",
    "pulmonary vascular abnormal",
]
RANSCORE_IDS = [
    "atelectasis",
    "cardiomegaly",
    "consolidation",
    "edema",
    "enlarged_cardiomediastinum",
    "fracture",
    "lung_lesion",
    "no_finding",
    "pleural_effusion",
    "pleural_other",
    "lung_opacity",
    "pneumonia",
    "pneumothorax",
    "support_devices",
    "emphysema",
    "interstitial_lung_disease",
    "calcification",
    "trachea_bronchus",
    "cavity_cyst",
    "mediastinal_other",
    "pulmonary_vascular_abnormal",
]
CHEXPERT_IDS = [
    "no_finding",
    "enlarged_cardiomediastinum",
    "cardiomegaly",
    "lung_opacity",
    "lung_lesion",
    "edema",
    "consolidation",
    "pneumonia",
    "atelectasis",
    "pneumothorax",
    "pleural_effusion",
    "pleural_other",
    "fracture",
    "support_devices",
]
CHEXPERT_NAMES = [
    "No Finding",
    "Enlarged Cardiomediastinum",
    "Cardiomegaly",
    "Lung Opacity",
    "Lung Lesion",
    "Edema",
    "Consolidation",
    "Pneumonia",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
    "Pleural Other",
    "Fracture",
    "Support Devices",
]
# The OpenI gold standard's labels14.csv header, without "filename" and "normal".
CHESTXRAY14_NAMES = [
    "Atelectasis",
    "Cardiomegaly",
    "Effusion",
    "Infiltration",
    "Mass",
    "Nodule",
    "Pneumonia",
    "Pneumothorax",
    "Consolidation",
    "Edema",
    "Emphysema",
    "Fibrosis",
    "Pleural_Thickening",
    "Hernia",
]
CHESTXRAY14_IDS = [
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
STARTER_TEMPORAL = {"resolved": "negative", "stable": "positive", "improving": "positive", "prior": "negative"}
# Synonyms and abbreviations a clinician's first iteration should add; the starters must lack them.
NOT_IN_STARTERS = [
    "blunting",
    "costophrenic",
    "hyperinflation",
    "hyperexpan",
    "air-space",
    "airspace",
    "air space",
    "ptx",
    "ett",
    "ngt",
    "chf",
    "picc",
    "heart failure",
]


def load_vocab(name: str):
    """Parse a shipped vocabulary file."""
    path = VOCAB_DIR / f"{name}.yaml"
    return parse_vocabulary(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))


def load_prompt_files(name: str) -> dict[str, object]:
    """A shipped prompt folder as {filename: parsed YAML}."""
    return {p.name: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted((PROMPT_DIR / name).glob("*.yaml"))}


def load_set(name: str):
    """Vocabulary and prompt set of one shipped set."""
    vocab = load_vocab(name)
    return vocab, parse_prompt_set(load_prompt_files(name), vocab.asked_ids)


# ---------------------------------------------------------------- vocabularies


@pytest.mark.parametrize("name", SETS)
def test_vocabulary_loads_with_complete_labels(name):
    vocab = load_vocab(name)
    assert vocab.id == name
    for lab in vocab.labels:
        assert ID_PATTERN.match(lab.id), lab.id
        assert lab.category.strip() and lab.definition.strip()
        sentences = re.findall(r"[.!?](?:\s|$)", lab.definition)
        assert 1 <= len(sentences) <= 3, f"{lab.id}: definition should be 1-3 sentences"


@pytest.mark.parametrize("name", SETS)
def test_every_asked_label_has_look_for_hints_for_readers(name):
    """What a reader looks for in a report, beside each chip of Annotate (a derived label is never asked)."""
    vocab = load_vocab(name)
    for lab in vocab.labels:
        if lab.id in vocab.asked_ids:
            assert 2 <= len(lab.look_for) <= 6 and all(p.strip() == p and p for p in lab.look_for), lab.id
        else:
            assert lab.look_for == (), lab.id


def test_look_for_is_optional_and_kept_in_order():
    data = _good_vocab()
    data["labels"][0]["look_for"] = ["pleural effusion", "blunted costophrenic angle"]
    vocab = parse_vocabulary(data, "tiny.yaml")
    assert vocab.label("effusion").look_for == ("pleural effusion", "blunted costophrenic angle")
    assert vocab.label("devices").look_for == ()


def test_ranscore_names_ids_and_order():
    vocab = load_vocab("ranscore-21")
    assert [lab.name for lab in vocab.labels] == RANSCORE_NAMES
    assert vocab.ids == RANSCORE_IDS
    assert len(vocab.asked_ids) == 20


def test_ranscore_no_finding_is_cancelled_by_anything_including_devices():
    vocab = load_vocab("ranscore-21")
    nf = vocab.label("no_finding")
    assert nf.derived == "none_of_others"
    assert nf.ignore_for_derived == ()
    assert vocab.derived_ids == ["no_finding"]


def test_chexpert_names_ids_and_no_finding_ignores_devices():
    vocab = load_vocab("chexpert-14")
    assert vocab.ids == CHEXPERT_IDS
    assert [lab.name for lab in vocab.labels] == CHEXPERT_NAMES
    nf = vocab.label("No Finding")
    assert nf.derived == "none_of_others"
    assert nf.ignore_for_derived == ("support_devices",)
    assert vocab.derived_ids == ["no_finding"]


def test_chestxray14_names_match_openi_header_and_nothing_is_derived():
    vocab = load_vocab("chestxray14")
    assert [lab.name for lab in vocab.labels] == CHESTXRAY14_NAMES
    assert vocab.ids == CHESTXRAY14_IDS
    assert vocab.derived_ids == []


@pytest.mark.dataset
def test_chestxray14_names_match_the_real_labels14_csv():
    path = DATASETS / "openi" / "labels14.csv"
    if not path.exists():
        pytest.skip(f"{path} not present (shared datasets live beside the project)")
    with path.open(newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert [h for h in header if h not in ("filename", "normal")] == [
        lab.name for lab in load_vocab("chestxray14").labels
    ]


def _good_vocab() -> dict:
    return {
        "id": "tiny",
        "name": "Tiny",
        "labels": [
            {"id": "effusion", "name": "Effusion", "category": "pleura", "definition": "Fluid."},
            {"id": "devices", "name": "Devices", "category": "devices", "definition": "Tubes."},
            {
                "id": "no_finding",
                "name": "No Finding",
                "category": "global",
                "definition": "Nothing.",
                "derived": "none_of_others",
                "ignore_for_derived": ["devices"],
            },
        ],
    }


def _set(path: list, value):
    def edit(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _delete(path: list):
    def edit(d):
        target = d
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return edit


VOCAB_ERRORS = [
    ("unknown top-level key", _set(["labelz"], []), ["labelz"]),
    ("missing labels", _delete(["labels"]), ["'labels'"]),
    ("empty labels", _set(["labels"], []), ["'labels'"]),
    ("unknown label key", _set(["labels", 0, "defintion"], "x"), ["labels[0]", "defintion"]),
    ("missing definition", _delete(["labels", 1, "definition"]), ["labels[1]", "'definition'"]),
    ("empty category", _set(["labels", 0, "category"], ""), ["labels[0]", "'category'"]),
    ("id not snake_case", _set(["labels", 0, "id"], "Pleural-Effusion"), ["labels[0]", "Pleural-Effusion"]),
    ("unknown derived rule", _set(["labels", 2, "derived"], "all_of_others"), ["labels[2]", "all_of_others"]),
    (
        "ignore list not a list",
        _set(["labels", 2, "ignore_for_derived"], "devices"),
        ["labels[2]", "ignore_for_derived"],
    ),
    ("ignore names unknown label", _set(["labels", 2, "ignore_for_derived"], ["tubes"]), ["no_finding", "tubes"]),
    ("look_for not a list", _set(["labels", 0, "look_for"], "fluid"), ["labels[0]", "look_for"]),
    ("look_for with an empty phrase", _set(["labels", 0, "look_for"], ["fluid", " "]), ["labels[0]", "look_for"]),
    ("duplicate id", _set(["labels", 0, "id"], "devices"), ["devices"]),
    ("name clashes with another id", _set(["labels", 1, "name"], "effusion"), ["devices", "effusion"]),
]


def test_good_vocab_fixture_is_valid():
    assert parse_vocabulary(_good_vocab(), "tiny.yaml").derived_ids == ["no_finding"]


KNOWN_VOCAB_BUGS: dict[str, str] = {}


@pytest.mark.parametrize(
    "case,edit,expected",
    [
        pytest.param(
            *c,
            id=c[0],
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_VOCAB_BUGS[c[0]])] if c[0] in KNOWN_VOCAB_BUGS else [],
        )
        for c in VOCAB_ERRORS
    ],
)
def test_vocab_errors_name_file_and_key(case, edit, expected):
    data = _good_vocab()
    edit(data)
    with pytest.raises(VocabularyError) as err:
        parse_vocabulary(data, "tiny.yaml")
    message = str(err.value)
    assert "tiny.yaml" in message
    for fragment in expected:
        assert fragment in message, (case, message)


def test_vocab_top_level_must_be_a_mapping():
    with pytest.raises(VocabularyError, match="tiny.yaml"):
        parse_vocabulary(["not", "a", "mapping"], "tiny.yaml")


# ---------------------------------------------------------------- prompt sets


@pytest.mark.parametrize("name", SETS)
def test_prompt_set_has_one_file_per_asked_label(name):
    vocab, ps = load_set(name)
    files = sorted(p.name for p in (PROMPT_DIR / name).glob("*.yaml"))
    assert files == sorted([TASK_FILE] + [f"{i}.yaml" for i in vocab.asked_ids])
    assert list(ps.labels) == vocab.asked_ids
    assert ps.task.mode == "per_label"
    for derived in vocab.derived_ids:
        assert not (PROMPT_DIR / name / f"{derived}.yaml").exists()


@pytest.mark.parametrize("name", SETS)
def test_every_label_renders_a_per_label_call(name):
    vocab, ps = load_set(name)
    names = vocab.names()
    for label_id in vocab.asked_ids:
        messages = render_label_call(ps, label_id, names[label_id], SAMPLE_REPORT)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert "JSON" in messages[0]["content"]
        user = messages[1]["content"]
        lp = ps.label(label_id)
        assert SAMPLE_REPORT in user
        assert lp.task in user
        assert f"Definition of {names[label_id]}: {lp.definition}" in user
        assert '"value": 0 or 1' in user and '"evidence"' in user
        assert not re.search(r"\{(task|guidance|examples|report|label_name|output_format)\}", user)
        assert messages == render_label_call(ps, label_id, names[label_id], SAMPLE_REPORT)


@pytest.mark.parametrize("name", SETS)
def test_joint_call_names_every_label(name):
    vocab, ps = load_set(name)
    names = {i: vocab.names()[i] for i in vocab.asked_ids}
    messages = render_joint_call(ps, names, SAMPLE_REPORT)
    user = messages[1]["content"]
    assert SAMPLE_REPORT in user
    assert ", ".join(vocab.asked_ids) in user
    assert '"labels"' in user
    for label_id, label_name in names.items():
        assert f"## {label_id} ({label_name})" in user
    assert content_hash(messages) == content_hash(render_joint_call(ps, names, SAMPLE_REPORT))


@pytest.mark.parametrize("name", SETS)
def test_starter_prompts_are_plain_iteration_one(name):
    _, ps = load_set(name)
    for label_id, lp in ps.labels.items():
        assert lp.task.startswith("Does this chest X-ray report describe ") and lp.task.endswith("?"), label_id
        assert 2 <= len(lp.look_for) <= 5, label_id
        assert len(lp.do_not_label_when) <= 1, label_id
        assert len(lp.examples) <= 1, label_id
        assert lp.temporal_policy() == STARTER_TEMPORAL, label_id
        assert lp.hedged in POLICY_VALUES
        for phrase in lp.look_for:
            for synonym in NOT_IN_STARTERS:
                assert not re.search(rf"\b{re.escape(synonym)}\b", phrase, re.I), (label_id, phrase)


@pytest.mark.parametrize("name", SETS)
def test_exclusion_rules_quote_the_phrase_for_the_offline_labeller(name):
    _, ps = load_set(name)
    for label_id, lp in ps.labels.items():
        for rule in lp.do_not_label_when:
            assert rule.count("'") % 2 == 0, (label_id, rule)
            quoted = re.findall(r"'([^']+)'", rule)
            assert quoted, (label_id, rule)
            # the excluded phrase must contain a look-for phrase, or the exclusion can never apply
            assert any(p.lower() in q.lower() for q in quoted for p in lp.look_for), (label_id, rule)


@pytest.mark.parametrize("name", SETS)
def test_hedge_policy_differs_between_pneumonia_and_consolidation(name):
    """Deliberate starter inconsistency (as in published prompts) for the policy table to flag."""
    _, ps = load_set(name)
    assert ps.label("pneumonia").hedged == "positive"
    assert ps.label("consolidation").hedged == "negative"
    others = [i for i in ps.labels if i != "pneumonia"]
    assert all(ps.label(i).hedged == "negative" for i in others)


@pytest.mark.parametrize("name", SETS)
def test_positive_examples_quote_text_that_signals_the_label(name):
    _, ps = load_set(name)
    for label_id, lp in ps.labels.items():
        for ex in lp.examples:
            if ex.value == 1:
                assert any(p.lower() in ex.text.lower() for p in lp.look_for), (label_id, ex.text)


# ---------------------------------------------------------------- prompt validation errors


def _edit_label(label_id: str, edit):
    def apply(files: dict) -> None:
        edit(files[f"{label_id}.yaml"])

    return apply


def _edit_task(edit):
    def apply(files: dict) -> None:
        edit(files[TASK_FILE])

    return apply


def _add_file(filename: str, label: str):
    def apply(files: dict) -> None:
        data = copy.deepcopy(files["atelectasis.yaml"])
        data["label"] = label
        files[filename] = data

    return apply


def _drop_file(filename: str):
    def apply(files: dict) -> None:
        del files[filename]

    return apply


PROMPT_ERRORS = [
    (
        "unknown label key",
        _edit_label("pleural_effusion", _set(["look_fro"], ["x"])),
        ["pleural_effusion.yaml", "look_fro"],
    ),
    ("missing field", _edit_label("pneumothorax", _delete(["hedged"])), ["pneumothorax.yaml", "'hedged'"]),
    (
        "missing temporal key",
        _edit_label("edema", _delete(["temporal", "stable"])),
        ["edema.yaml", "temporal", "'stable'"],
    ),
    (
        "bad hedged policy",
        _edit_label("pneumonia", _set(["hedged"], "uncertain")),
        ["pneumonia.yaml", "hedged", "uncertain"],
    ),
    (
        "bad temporal policy",
        _edit_label("fracture", _set(["temporal", "prior"], "yes")),
        ["fracture.yaml", "temporal.prior"],
    ),
    (
        "look_for not a list",
        _edit_label("cardiomegaly", _set(["look_for"], "cardiomegaly")),
        ["cardiomegaly.yaml", "look_for"],
    ),
    (
        "bad example value",
        _edit_label("pleural_effusion", _set(["examples", 0, "value"], 2)),
        ["pleural_effusion.yaml", "examples[0].value"],
    ),
    (
        "boolean example value",
        _edit_label("pleural_effusion", _set(["examples", 0, "value"], True)),
        ["pleural_effusion.yaml", "examples[0].value"],
    ),
    (
        "example missing why",
        _edit_label("pleural_effusion", _delete(["examples", 0, "why"])),
        ["pleural_effusion.yaml", "examples[0]", "'why'"],
    ),
    (
        "unknown placeholder",
        _edit_task(_set(["per_label_template"], "{task}\n{patient_name}\n{report}")),
        [TASK_FILE, "per_label_template", "patient_name"],
    ),
    (
        "per-label placeholder in joint template",
        _edit_task(_set(["joint_template"], "{label_name}: {report}")),
        [TASK_FILE, "joint_template", "label_name"],
    ),
    (
        "template without report",
        _edit_task(_set(["per_label_template"], "{task} {guidance}")),
        [TASK_FILE, "per_label_template", "{report}"],
    ),
    (
        "unbalanced brace",
        _edit_task(_set(["joint_template"], '{report} {"labels": ...}')),
        [TASK_FILE, "joint_template"],
    ),
    ("bad mode", _edit_task(_set(["mode"], "batch")), [TASK_FILE, "mode", "batch"]),
    ("unknown task key", _edit_task(_set(["temperature"], 0)), [TASK_FILE, "temperature"]),
    ("unknown cue list", _edit_task(_set(["cues"], {"negations": ["no"]})), [TASK_FILE, "cues", "negations"]),
    ("label not in vocabulary", _add_file("nodule.yaml", "nodule"), ["nodule.yaml", "nodule", "not in the vocabulary"]),
    ("derived label has a prompt", _add_file("no_finding.yaml", "no_finding"), ["no_finding.yaml", "no_finding"]),
    ("file named after another label", _add_file("edema2.yaml", "edema"), ["edema2.yaml", "edema.yaml"]),
    ("missing label file", _drop_file("support_devices.yaml"), ["support_devices"]),
    ("missing task file", _drop_file(TASK_FILE), [TASK_FILE]),
]


@pytest.mark.parametrize("case,edit,expected", PROMPT_ERRORS, ids=[c[0] for c in PROMPT_ERRORS])
def test_prompt_errors_name_file_and_key(case, edit, expected):
    vocab = load_vocab("ranscore-21")
    files = copy.deepcopy(load_prompt_files("ranscore-21"))
    edit(files)
    with pytest.raises(PromptError) as err:
        parse_prompt_set(files, vocab.asked_ids)
    message = str(err.value)
    for fragment in expected:
        assert fragment in message, (case, message)


def test_the_suite_schedule_names_only_test_files_that_exist():
    """conftest's LONGEST_FILES orders the run; a renamed file would silently fall back to the end."""
    from conftest import LONGEST_FILES, ROOT

    assert [name for name in LONGEST_FILES if not (ROOT / name).is_file()] == []
    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES)


def test_the_demo_files_are_what_make_demo_generates_from_its_sentence_tables():
    """annotations/make_demo.py --check regenerates every demo file from annotations/sentences/ in memory."""
    import subprocess
    import sys

    script = shipped_dir("annotations") / "make_demo.py"
    result = subprocess.run([sys.executable, str(script), "--check", "--quiet"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (script.parent / "sentences" / "en.yaml").exists()
