#!/usr/bin/env python3
"""Generate the workbench's synthetic demo data, deterministically.

Every report written by this script is SYNTHETIC: it is composed from sentence templates
written for this project. No patient data, and no text copied from any real report or dataset.

Outputs (all paths relative to this file's folder):

    demo/reports.csv        English cohort: id,findings,impression
    demo/readings.csv       six simulated readers, long format: report_id,label,reader,value
    demo/README.md          description + per-label counts (generated, do not edit by hand)
    demo-zh/reports.csv     small simplified-Chinese cohort, same layout
    demo-zh/readings.csv
    demo-zh/README.md
    robustness/pairs.csv    paraphrase / clinically-significant-change pairs
    robustness/README.md

The sentence tables are data beside this script: sentences/en.yaml and sentences/zh.yaml (templates per
concept and status, normal fillers) and sentences/robustness-pairs.yaml. Edit them there.

Run `python annotations/make_demo.py` (stdlib and PyYAML). The random generators are seeded with
fixed strings, nothing iterates over a set, and files are written with "\\n" line endings in
UTF-8, so a rerun rewrites every file byte-identically. `--check` regenerates in memory and
fails if any file on disk differs; `--quiet` suppresses the summary.

How the data are simulated
--------------------------
Each report is built from "concept instances" (a finding in a given status: present, hedged,
borderline, stable, improving, resolved). Every template states which labels it makes
positive *clearly* and which labels it makes *ambiguous* (with an intended value 1, 0 or
None = genuinely undecidable). Normal sentences ("No pleural effusion.") carry the labels they
negate. For every (report, label) item the script therefore knows one of four states:

    clear positive   readers mark 1, each flips with probability P_FLIP_MENTIONED
    clear negative   (negated in the text) readers mark 0, each flips with P_FLIP_MENTIONED
    not mentioned    readers mark 0, each flips with P_FLIP_ABSENT
    ambiguous        each reader marks 1 with a probability drawn per item around 0.4-0.6
                     (higher when the intended value is 1, lower when it is 0), shifted by a
                     small per-reader leniency, so readers genuinely split.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import random
import re
import sys
from collections import Counter
from pathlib import Path

import yaml

SEED = "workbench-demo-v1"
HERE = Path(__file__).resolve().parent

# --------------------------------------------------------------------------------------------
# Vocabulary (Ran Score 21, ids in the project's order)
# --------------------------------------------------------------------------------------------
LABELS = [
    ("atelectasis", "Atelectasis"),
    ("cardiomegaly", "Cardiomegaly"),
    ("consolidation", "Consolidation"),
    ("edema", "Edema"),
    ("enlarged_cardiomediastinum", "Enlarged Cardiomediastinum"),
    ("fracture", "Fracture"),
    ("lung_lesion", "Lung Lesion"),
    ("no_finding", "No Finding"),
    ("pleural_effusion", "Pleural Effusion"),
    ("pleural_other", "Pleural Other"),
    ("lung_opacity", "Lung Opacity"),
    ("pneumonia", "Pneumonia"),
    ("pneumothorax", "Pneumothorax"),
    ("support_devices", "Support Devices"),
    ("emphysema", "emphysema"),
    ("interstitial_lung_disease", "interstitial lung disease"),
    ("calcification", "calcification(lung and mediastinal)"),
    ("trachea_bronchus", "Trachea and bronchus"),
    ("cavity_cyst", "cavity and cyst"),
    ("mediastinal_other", "mediastinal other"),
    ("pulmonary_vascular_abnormal", "pulmonary vascular abnormal"),
]
LABEL_IDS = [i for i, _ in LABELS]
DISPLAY = dict(LABELS)
READ_LABELS = [i for i in LABEL_IDS if i != "no_finding"]  # the 20 labels readers mark
READERS = [f"reader-{c}" for c in "abcdef"]
MAJORITY = 4  # a label is positive when at least 4 of 6 readers mark it

# reader simulation parameters
P_FLIP_MENTIONED = 0.015  # clear sentences: each reader disagrees with probability 1.5%
P_FLIP_ABSENT = 0.003  # label never mentioned: stray positive 0.3%
AMB_P = {1: (0.50, 0.62), None: (0.42, 0.58), 0: (0.36, 0.48)}  # per-item P(reader marks 1)
READER_LENIENCY = {  # added to the ambiguous-item probability only
    "reader-a": 0.00,
    "reader-b": 0.05,
    "reader-c": -0.04,
    "reader-d": 0.02,
    "reader-e": -0.06,
    "reader-f": 0.03,
}

# findings section order
G_TECH, G_DEV, G_LUNG, G_PLEURA, G_HEART, G_BONE, G_OTHER = range(7)

# status -> polarity class (P: finding present, Z: finding gone, U: uncertain)
STATUS_CLASS = {
    "present": "P",
    "stable": "P",
    "improving": "P",
    "resolved": "Z",
    "hedged": "U",
    "borderline": "U",
}
TEMPORAL = ("stable", "improving", "resolved")

# --------------------------------------------------------------------------------------------
# Template library (sentences/en.yaml, sentences/zh.yaml), read into
#
# LIB[concept] = {"primary": label, "group": findings group, "rank": impression order,
#                 "variants": {status: (pos, amb, entries)}}
# pos: labels clearly positive; amb: {label: intended value (1, 0, None)}.
# entry: (findings sentence, impression sentence or None[, pos override, amb override[, negated labels]]).
# Placeholders: {side} {Side} {other} {lobe} {Lobe} {LOBE} {zone} {size} {Size} {rib} {rib2}
#               {cm} {mcm} {dist}
# --------------------------------------------------------------------------------------------
AT, CM, CO, ED = "atelectasis", "cardiomegaly", "consolidation", "edema"
ECM, FX, LL = "enlarged_cardiomediastinum", "fracture", "lung_lesion"
PE, PO, LO, PN = "pleural_effusion", "pleural_other", "lung_opacity", "pneumonia"
PTX, SD, EM = "pneumothorax", "support_devices", "emphysema"
ILD, CA, TB = "interstitial_lung_disease", "calcification", "trachea_bronchus"
CC, MO, PVA = "cavity_cyst", "mediastinal_other", "pulmonary_vascular_abnormal"


def _load_tables(name: str) -> dict:
    """A sentence table of sentences/ (YAML), read as written."""
    return yaml.safe_load((HERE / "sentences" / name).read_text(encoding="utf-8"))


def _library(tables: dict) -> dict:
    """LIB[concept] = {"primary", "group", "rank", "variants": {status: (pos, amb, entries)}} from YAML."""
    return {
        concept: {
            "primary": c["primary"],
            "group": GROUPS.index(c["group"]),
            "rank": c["rank"],
            "variants": {
                status: (v["positive"], v["ambiguous"], [tuple(e) for e in v["sentences"]])
                for status, v in c["variants"].items()
            },
        }
        for concept, c in tables["library"].items()
    }


def _fillers(tables: dict) -> list:
    """Normal ("filler") sentences as (text, group, negated labels, families)."""
    return [(f["text"], GROUPS.index(f["group"]), f["negates"], f["families"]) for f in tables["fillers"]]


GROUPS = ["technique", "device", "lung", "pleura", "heart", "bone", "other"]  # the order of G_TECH ... G_OTHER
_EN = _load_tables("en.yaml")
LIB = _library(_EN)

DEVICE_CONCEPTS = ["ett", "ngt", "picc", "cvc", "pacer", "sternotomy", "chest_tube", "clips", "trach"]
PRIMARY_CONCEPTS = {
    AT: ["atelectasis"],
    CM: ["cardiomegaly"],
    CO: ["consolidation"],
    ED: ["edema"],
    ECM: ["ecm"],
    FX: ["fracture"],
    LL: ["lesion"],
    PE: ["effusion"],
    PO: ["pleural_other"],
    LO: ["opacity"],
    PN: ["pneumonia"],
    PTX: ["pneumothorax"],
    SD: DEVICE_CONCEPTS,
    EM: ["emphysema"],
    ILD: ["ild"],
    CA: ["calcification"],
    TB: ["airway"],
    CC: ["cavity"],
    MO: ["mediastinal"],
    PVA: ["pva"],
}
# clinically plausible companions: concept -> [(concept, probability)]
COOCCUR = {
    "cardiomegaly": [("edema", 0.35), ("effusion", 0.35), ("pacer", 0.2), ("pva", 0.2), ("sternotomy", 0.15)],
    "edema": [("cardiomegaly", 0.55), ("effusion", 0.45), ("pva", 0.25)],
    "pneumonia": [("effusion", 0.3), ("atelectasis", 0.15)],
    "pneumothorax": [("chest_tube", 0.5), ("fracture", 0.25), ("subq", 0.3)],
    "fracture": [("pneumothorax", 0.15), ("subq", 0.2)],
    "effusion": [("atelectasis", 0.35), ("cardiomegaly", 0.25)],
    "sternotomy": [("atelectasis", 0.35), ("effusion", 0.35), ("chest_tube", 0.25)],
    "ett": [("ngt", 0.7), ("cvc", 0.45), ("atelectasis", 0.25), ("opacity", 0.15)],
    "emphysema": [("lesion", 0.2), ("airway", 0.15)],
    "ild": [("pva", 0.3)],
    "lesion": [("mediastinal", 0.25), ("effusion", 0.15)],
    "cavity": [("calcification", 0.2)],
    "mediastinal": [("lesion", 0.25)],
    "pva": [("cardiomegaly", 0.35)],
    "pleural_other": [("calcification", 0.3)],
    "consolidation": [("effusion", 0.3)],
    "atelectasis": [("effusion", 0.35)],
    "airway": [("emphysema", 0.3)],
    "ecm": [("fracture", 0.2)],
}
CONCEPT_WEIGHT = {"ett": 2.0, "cvc": 1.5, "picc": 1.5, "ngt": 1.5}  # relative frequency of devices
STATUS_WEIGHTS = {"present": 4.0, "hedged": 2.0, "borderline": 2.0, "stable": 1.5, "improving": 1.0, "resolved": 1.0}

FILLERS = _fillers(_EN)
IMPRESSION_FILLERS = _EN["impression_fillers"]  # fillers that read naturally in an impression-only report
TECHNIQUE = _EN["technique"]
COMPARISON = _EN["comparison"]
EXTRA_NEUTRAL = _EN["extra_neutral"]  # used to lengthen long reports; label-free
NORMAL_IMPRESSIONS = _EN["normal_impressions"]

# --------------------------------------------------------------------------------------------
# Chinese template library (same structure; findings joined without spaces)
# --------------------------------------------------------------------------------------------
_ZH = _load_tables("zh.yaml")
LIB_ZH = _library(_ZH)
PRIMARY_CONCEPTS_ZH = dict(PRIMARY_CONCEPTS)
PRIMARY_CONCEPTS_ZH[SD] = ["ett", "ngt", "cvc", "pacer", "sternotomy", "chest_tube"]
FILLERS_ZH = _fillers(_ZH)
COMPARISON_ZH = _ZH["comparison"]
TECHNIQUE_ZH = _ZH["technique"]
NORMAL_IMPRESSIONS_ZH = _ZH["normal_impressions"]

# --------------------------------------------------------------------------------------------
# Slots
# --------------------------------------------------------------------------------------------
LOBES_EN = {
    "right": [("right upper lobe", "RUL"), ("right middle lobe", "RML"), ("right lower lobe", "RLL")],
    "left": [("left upper lobe", "LUL"), ("left lower lobe", "LLL")],
}
ORDINALS = ["3rd", "4th", "5th", "6th", "7th", "8th", "9th", "10th", "11th"]
LOBES_ZH = {"右": ["右肺上叶", "右肺中叶", "右肺下叶"], "左": ["左肺上叶", "左肺下叶"]}


def cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def slots_en(rng: random.Random) -> dict:
    side = rng.choice(["left", "right"])
    lobe, abbr = rng.choice(LOBES_EN[side])
    size = rng.choice(["small", "small", "moderate", "large"])
    k = rng.randrange(len(ORDINALS) - 1)
    cm = rng.choice(["8 mm", "9 mm", "1.1 cm", "1.2 cm", "1.5 cm", "1.8 cm", "2.1 cm"])
    return {
        "side": side,
        "Side": cap(side),
        "other": "left" if side == "right" else "right",
        "lobe": lobe,
        "Lobe": cap(lobe),
        "LOBE": abbr,
        "zone": rng.choice(["upper", "mid", "lower"]),
        "size": size,
        "Size": cap(size),
        "rib": ORDINALS[k],
        "rib2": ORDINALS[k + 1],
        "cm": cm,
        "Cm": cap(cm),
        "mcm": rng.choice(["3.5 cm", "4.2 cm", "5 cm", "6.1 x 4.8 cm"]),
        "dist": rng.choice(["3 cm", "3.5 cm", "4 cm", "4.5 cm", "5 cm"]),
    }


def slots_zh(rng: random.Random) -> dict:
    side = rng.choice(["左", "右"])
    return {
        "side": side,
        "lobe": rng.choice(LOBES_ZH[side]),
        "zone": rng.choice(["上", "中", "下"]),
        "ctr": rng.choice(["0.55", "0.58", "0.62"]),
        "pct": rng.choice(["20%", "30%", "40%"]),
        "n": rng.choice(["4", "5", "6", "7", "8"]),
        "cm": rng.choice(["0.8cm", "1.2cm", "1.6cm"]),
        "mcm": rng.choice(["3.5cm×3.0cm", "4.2cm×3.8cm", "5.0cm×4.1cm"]),
        "dist": rng.choice(["3cm", "4cm", "5cm"]),
    }


# --------------------------------------------------------------------------------------------
# Report composition
# --------------------------------------------------------------------------------------------
class Lang:
    def __init__(self, code):
        zh = code == "zh"
        self.code = code
        self.lib = LIB_ZH if zh else LIB
        self.primary_concepts = PRIMARY_CONCEPTS_ZH if zh else PRIMARY_CONCEPTS
        self.fillers = FILLERS_ZH if zh else FILLERS
        self.comparison = COMPARISON_ZH if zh else COMPARISON
        self.technique = TECHNIQUE_ZH if zh else TECHNIQUE
        self.extra = [] if zh else EXTRA_NEUTRAL
        self.normal_imp = NORMAL_IMPRESSIONS_ZH if zh else NORMAL_IMPRESSIONS
        self.slots = slots_zh if zh else slots_en
        self.joiner = "" if zh else " "
        self.usage = Counter()  # (concept, status, entry index) -> times used
        self.concept_usage = Counter()
        self.status_usage = Counter()


def make_instance(lang: Lang, concept: str, status: str, rng: random.Random, idx=None, slots=None) -> dict:
    c = lang.lib[concept]
    pos, amb, entries = c["variants"][status]
    if idx is None:
        # spread usage over the library: pick among the least-used entries of this (concept, status)
        counts = [lang.usage[(concept, status, n)] for n in range(len(entries))]
        idx = rng.choice([n for n, u in enumerate(counts) if u == min(counts)])
    entry = entries[idx]
    f, i = entry[0], entry[1]
    if len(entry) > 2:
        pos, amb = entry[2], entry[3]
    neg = list(entry[4]) if len(entry) > 4 else []
    s = lang.slots(rng)
    if slots is not None:  # a companion finding shares its parent's side, lobe, etc.
        s = slots
    return {
        "slots": s,
        "concept": concept,
        "status": status,
        "key": (concept, status, idx),
        "group": c["group"],
        "rank": c["rank"],
        "primary": c["primary"],
        "pos": list(pos),
        "amb": dict(amb),
        "neg": neg,
        "f": cap(f.format(**s)),
        "i": cap(i.format(**s)) if i else None,
    }


def accept(lang: Lang, inst: dict) -> None:
    lang.usage[inst["key"]] += 1
    lang.status_usage[(inst["concept"], inst["status"])] += 1
    lang.concept_usage[inst["concept"]] += 1


def core_labels(inst: dict) -> list:
    return [x for x in inst["pos"] + list(inst["amb"]) if x not in (LO, SD)]


def compatible(inst: dict, existing: list) -> bool:
    for e in existing:
        if e["concept"] == inst["concept"]:
            return False
        if inst["primary"] is not None and inst["primary"] == e["primary"] and inst["primary"] != SD:
            return False
        if any(x in core_labels(e) for x in inst["neg"]) or any(x in core_labels(inst) for x in e["neg"]):
            return False
        overlap = [x for x in core_labels(inst) if x in core_labels(e)]
        if overlap and not (STATUS_CLASS[inst["status"]] == "P" and STATUS_CLASS[e["status"]] == "P"):
            return False
    return True


def pick_status(concept: str, lang: Lang, rng: random.Random, allow_present=True) -> str:
    variants = lang.lib[concept]["variants"]
    names = [s for s in STATUS_WEIGHTS if s in variants and (allow_present or s != "present")]
    if not names:
        return "present"
    if not allow_present:  # spread the non-present statuses evenly over their variants
        least = min(lang.status_usage[(concept, s)] for s in names)
        names = [s for s in names if lang.status_usage[(concept, s)] == least]
    weights = [STATUS_WEIGHTS[s] for s in names]
    return rng.choices(names, weights=weights)[0]


def sentence_count(text: str) -> int:
    """Sentences in a text: full stops, ignoring list numbers ("1. ") and decimals ("1.5 cm")."""
    if not text:
        return 0
    text = re.sub(r"(^|\s|。)\d+\. ?", r"\1", text)
    text = re.sub(r"(\d)\.(\d)", r"\1\2", text)
    return sum(text.count(ch) for ch in ".。")


def compose(
    lang: Lang, instances: list, rng: random.Random, *, long=False, empty_findings=False, normal=False
) -> tuple[str, str, dict]:
    """Build findings + impression text and the per-label state."""
    state = {lab: ("absent", None) for lab in READ_LABELS}

    def mark(lab, kind, truth=None):
        order = {"absent": 0, "neg": 1, "amb": 2, "pos": 3}
        cur = state[lab]
        if order[kind] > order[cur[0]]:
            state[lab] = (kind, truth)
        elif kind == "amb" and cur[0] == "amb":  # combine truths: 1 > None > 0
            rank = {1: 2, None: 1, 0: 0}
            if rank[truth] > rank[cur[1]]:
                state[lab] = ("amb", truth)

    for inst in instances:
        for lab in inst["pos"]:
            mark(lab, "pos")
        for lab, truth in inst["amb"].items():
            mark(lab, "amb", truth)
        for lab in inst["neg"]:
            mark(lab, "neg")
    involved = [lab for lab in READ_LABELS if state[lab][0] in ("pos", "amb")]
    involved += [lab for inst in instances for lab in inst["neg"]]

    # fillers that do not contradict the findings
    used_fam: list = []
    candidates = [f for f in lang.fillers if not any(x in involved for x in f[2])]
    rng.shuffle(candidates)
    n_concept_sent = sum(sentence_count(x["f"]) for x in instances)
    if long:
        target = rng.randint(15, 22)
    elif normal:
        target = rng.randint(3, 7)
    else:
        target = rng.randint(max(2, n_concept_sent + 1), max(4, min(8, n_concept_sent + 5)))
    findings_items = []  # (group, order, text)
    for k, inst in enumerate(instances):
        findings_items.append((inst["group"], k, inst["f"]))
    temporal = any(inst["status"] in TEMPORAL for inst in instances)
    pre = []
    if long or rng.random() < 0.35:
        pre.append(rng.choice(lang.technique))
    if temporal or (long and rng.random() < 0.6) or rng.random() < 0.15:
        pre.append(rng.choice(lang.comparison))

    # impression
    imp_inst = sorted([x for x in instances if x["i"]], key=lambda x: x["rank"])
    imp_sents = [x["i"] for x in imp_inst]
    if not imp_sents:
        # no finding worth an impression line; "Normal chest radiograph" would contradict findings
        imp_sents = [rng.choice(lang.normal_imp[:2] if instances else lang.normal_imp)]
    elif long and rng.random() < 0.5 and lang.code == "en" and not any("discussed" in t for t in imp_sents):
        imp_sents.append("Findings were communicated to the clinical team at the time of dictation.")

    if empty_findings:
        # impression-only report: put the descriptive sentences into the impression
        if normal:
            sents = [rng.choice(lang.normal_imp)]
        else:
            ordered = sorted(instances, key=lambda x: x["rank"])
            sents = [x["i"] or x["f"] for x in ordered]
        if sum(sentence_count(t) for t in sents) < 2 or rng.random() < 0.3:
            extra = [f for f in candidates if f[0] in IMPRESSION_FILLERS][:1]
            sents += [f[0] for f in extra]
            for f in extra:
                for lab in f[2]:
                    mark(lab, "neg")
        return "", lang.joiner.join(sents), state

    def total():
        return sum(sentence_count(t) for _, _, t in findings_items) + sum(sentence_count(t) for t in imp_sents)

    for f in candidates:
        if total() >= target:
            break
        if any(fam in used_fam for fam in f[3]):
            continue
        used_fam.extend(f[3])
        findings_items.append((f[1], 100 + len(findings_items), f[0]))
        for lab in f[2]:
            mark(lab, "neg")
    if long:
        extras = list(lang.extra)
        rng.shuffle(extras)
        while total() < 15 and extras:
            findings_items.append((G_OTHER, 200 + len(findings_items), extras.pop()))
    findings_items.sort(key=lambda t: (t[0], t[1]))
    findings = lang.joiner.join(pre + [t for _, _, t in findings_items])
    if lang.code == "en" and len(imp_sents) >= 3 and (long or rng.random() < 0.5):
        impression = " ".join(f"{n}. {s}" for n, s in enumerate(imp_sents, 1))
    elif lang.code == "zh" and len(imp_sents) >= 2:
        impression = "".join(f"{n}. {s}" for n, s in enumerate(imp_sents, 1))
    else:
        impression = lang.joiner.join(imp_sents)
    return findings, impression, state


def build_cohort(
    lang: Lang,
    n_reports: int,
    prefix: str,
    *,
    n_normal: int,
    n_normal_tricky: int,
    n_long: int,
    n_empty: int,
    present_quota: dict,
    seed: str,
):
    rng = random.Random(f"{seed}|{lang.code}|plan")
    n_abn = n_reports - n_normal
    # 1. slots (label, concept, status, entry index): `present_quota` findings simply present per
    #    label (concept and wording chosen later), plus one slot for every hedged, borderline and
    #    temporal template in the library, so that all the hard wording is used at least once.
    slots = []
    for lab in READ_LABELS:
        slots += [(lab, None, "present", None)] * present_quota.get(lab, 0)
    for concept, c in lang.lib.items():
        if c["primary"] is None:
            continue
        for status, (_pos, _amb, entries) in c["variants"].items():
            if status != "present":
                slots += [(c["primary"], concept, status, n) for n in range(len(entries))]
    rng.shuffle(slots)
    plans = [[] for _ in range(n_abn)]
    long_idx = list(range(n_long))  # first n_long abnormal reports are long
    empty_idx = list(range(n_long, n_long + n_empty - n_empty // 4))

    def try_put(k, slot):
        if any(s[0] == slot[0] and slot[0] != SD for s in plans[k]):
            return False
        plans[k].append(slot)
        return True

    queue = list(slots)
    for k in range(n_abn):
        if queue:
            plans[k].append(queue.pop())
    for k in long_idx:
        for _ in range(3):
            if queue:
                slot = queue.pop()
                if not try_put(k, slot):
                    queue.insert(0, slot)
    guard = 0
    while queue and guard < 10000:
        guard += 1
        slot = queue.pop()
        k = rng.randrange(n_abn)
        if k in empty_idx and len(plans[k]) >= 2:
            queue.insert(0, slot)
            continue
        if len(plans[k]) >= (6 if k in long_idx else 3) or not try_put(k, slot):
            queue.insert(0, slot)
    if queue:
        raise RuntimeError("could not place all label slots")

    reports = []
    carry: list = []
    for k in range(n_abn):
        r = random.Random(f"{seed}|{lang.code}|abn|{k}")
        instances = []
        todo = carry + plans[k]
        carry = []
        for lab, concept, status, idx in todo:
            for _attempt in range(1 if concept else 20):
                if concept is None:
                    options = lang.primary_concepts[lab]
                    load = {c: lang.concept_usage[c] / CONCEPT_WEIGHT.get(c, 1.0) for c in options}
                    least = min(load.values())
                    chosen = [c for c in options if load[c] == least][0]  # ties: list order
                else:
                    chosen = concept
                inst = make_instance(lang, chosen, status, r, idx)
                if compatible(inst, instances):
                    accept(lang, inst)
                    instances.append(inst)
                    break
            else:
                if concept is not None:  # a coverage slot that clashed here: try the next report
                    carry.append((lab, concept, status, idx))
        # companions
        cap_n = 6 if k in long_idx else 3
        for inst in list(instances):
            for comp, p in COOCCUR.get(inst["concept"], []):
                if len(instances) >= cap_n:
                    break
                if comp in lang.lib and r.random() < p * (1.5 if k in long_idx else 1.0):
                    cand = make_instance(lang, comp, "present", r, slots=inst["slots"])
                    if compatible(cand, instances):
                        accept(lang, cand)
                        instances.append(cand)
        f, i, state = compose(lang, instances, r, long=k in long_idx, empty_findings=k in empty_idx)
        reports.append(
            {
                "findings": f,
                "impression": i,
                "state": state,
                "instances": instances,
                "kind": "long" if k in long_idx else ("impression-only" if k in empty_idx else "abnormal"),
            }
        )
    resolvable = [c for c in lang.lib if "resolved" in lang.lib[c]["variants"]]
    for k in range(n_normal):
        r = random.Random(f"{seed}|{lang.code}|normal|{k}")
        instances = []
        if k < n_normal_tricky:
            instances.append(make_instance(lang, resolvable[k % len(resolvable)], "resolved", r))
            accept(lang, instances[-1])
        empty = k >= n_normal - n_empty // 4
        f, i, state = compose(lang, instances, r, normal=True, empty_findings=empty)
        reports.append(
            {
                "findings": f,
                "impression": i,
                "state": state,
                "instances": instances,
                "kind": "normal" + (" (resolved finding)" if instances else ""),
            }
        )
    order = random.Random(f"{seed}|{lang.code}|order")
    order.shuffle(reports)
    for n, rep in enumerate(reports, 1):
        rep["id"] = f"{prefix}-{n:03d}"
    return reports


def simulate_readings(reports: list, seed: str, cohort: str) -> list:
    """Return rows (report_id, label, reader, value)."""
    rows = []
    for rep in reports:
        rep["votes"] = {}
        for lab in READ_LABELS:
            kind, truth = rep["state"][lab]
            r = random.Random(f"{seed}|{cohort}|read|{rep['id']}|{lab}")
            if kind == "amb":
                lo, hi = AMB_P[truth]
                p_item = r.uniform(lo, hi)
            votes = []
            for reader in READERS:
                u = r.random()
                if kind == "pos":
                    v = int(u >= P_FLIP_MENTIONED)
                elif kind == "neg":
                    v = int(u < P_FLIP_MENTIONED)
                elif kind == "absent":
                    v = int(u < P_FLIP_ABSENT)
                else:
                    p = min(0.95, max(0.05, p_item + READER_LENIENCY[reader]))
                    v = int(u < p)
                votes.append(v)
                rows.append((rep["id"], lab, reader, v))
            rep["votes"][lab] = votes
    return rows


def cohort_stats(reports: list) -> dict:
    pos = Counter()
    ties = Counter()
    splits = Counter()
    amb_items = Counter()
    normal = 0
    for rep in reports:
        any_pos = False
        for lab in READ_LABELS:
            s = sum(rep["votes"][lab])
            splits[max(s, 6 - s)] += 1
            if s >= MAJORITY:
                pos[lab] += 1
                any_pos = True
            if s == 3:
                ties[lab] += 1
            if rep["state"][lab][0] == "amb":
                amb_items[lab] += 1
        if not any_pos:
            normal += 1
            pos["no_finding"] += 1
    return {"pos": pos, "ties": ties, "splits": splits, "amb": amb_items, "normal": normal, "n": len(reports)}


def stats_table(st: dict) -> str:
    lines = [
        "| label id | display name | positive (>= 4 of 6) | 3-3 ties | ambiguous items |",
        "|---|---|---:|---:|---:|",
    ]
    for lab in LABEL_IDS:
        if lab == "no_finding":
            lines.append(f"| {lab} | {DISPLAY[lab]} (derived) | {st['pos'][lab]} | - | - |")
        else:
            lines.append(f"| {lab} | {DISPLAY[lab]} | {st['pos'][lab]} | {st['ties'][lab]} | {st['amb'][lab]} |")
    lines.append(f"| **total** | | | **{sum(st['ties'].values())}** | {sum(st['amb'].values())} |")
    return "\n".join(lines)


def splits_line(st: dict) -> str:
    s = st["splits"]
    return f"6-0: {s[6]}, 5-1: {s[5]}, 4-2: {s[4]}, 3-3: {s[3]}"


# --------------------------------------------------------------------------------------------
# Robustness pairs (hand-written for the project; synthetic)
# --------------------------------------------------------------------------------------------
PAIRS = [
    (p["kind"], p["label"], p["a"], p["b"], p["note"])
    for p in yaml.safe_load((HERE / "sentences" / "robustness-pairs.yaml").read_text(encoding="utf-8"))
]


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------
def csv_text(header: list, rows: list) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def readme_demo(reports: list, st: dict) -> str:
    kinds = Counter(r["kind"] for r in reports)

    def span(kind_names):
        n = sorted(
            sentence_count(r["findings"]) + sentence_count(r["impression"]) for r in reports if r["kind"] in kind_names
        )
        return f"{n[0]}-{n[-1]} sentences (median {n[len(n) // 2]})"

    return f"""# Demo study: synthetic chest X-ray reports with six simulated readers

**Every report in this folder is synthetic.** The reports were written for the workbench demo by
the script `annotations/make_demo.py`, which composes them from sentence templates written for
this project. They are not patient data, they describe no real patient, and no text was copied
from any real report or public dataset. The readers are simulated too.

This file is generated by the script; do not edit it by hand.

## Files

- `reports.csv`: columns `id,findings,impression`; ids `demo-001` ... `demo-{st["n"]:03d}`
  ({st["n"]} reports). Findings come first in the usual order (technique/comparison, devices,
  lungs, pleura, heart and mediastinum, bones); `findings` is empty for the impression-only
  reports.
- `readings.csv`: long format, columns `report_id,label,reader,value`; one row per report, label
  and reader ({st["n"]} x 20 x 6 = {st["n"] * 120} rows). `label` is a Ran Score label id, `reader`
  is one of `reader-a` ... `reader-f`, `value` is 0 or 1. The 20 read labels are every Ran Score
  label except `no_finding`, which is derived (1 exactly when the other 20 are 0) and is never read.

## The reports

Composition ({st["n"]} reports):

| kind | reports | length (findings + impression) |
|---|---:|---|
| ordinary abnormal | {kinds["abnormal"]} | {span(["abnormal"])} |
| long abnormal | {kinds["long"]} | {span(["long"])} |
| impression only (empty findings) | {kinds["impression-only"]} | {span(["impression-only"])} |
| normal | {kinds["normal"]} | {span(["normal"])} |
| normal, mentioning a resolved finding or removed device | {kinds["normal (resolved finding)"]} | {span(["normal (resolved finding)"])} |

Each abnormal report is built from one to six findings, each drawn from a library of about 250
templates per finding and status (present, hedged, borderline, stable, improving, resolved); every
hedged, borderline and temporal template is used at least once. Findings come with plausible
companions on the same side (e.g. cardiomegaly with edema and effusions, an ETT
with an NG tube and a central line, a pneumothorax with a chest tube). The wording deliberately
covers what trips labellers: negation ("no pleural effusion", "without pneumothorax", "negative
for consolidation", "lungs are clear"), hedging ("cannot exclude pneumonia", "possible early
consolidation", "may represent atelectasis", "questionable nodule"), temporal wording ("resolved",
"stable", "improving", "interval removal of the chest tube", "no longer visible"), devices (ETT,
NG tube, PICC, central venous catheter, pacemaker/AICD, sternotomy wires, chest tube, surgical
clips, tracheostomy), laterality and lobes, abbreviations (PTX, CHF, ETT, NGT, RLL, LLL, CP angle,
ILD, COPD) and synonyms (costophrenic blunting, air-space disease, hyperinflation and bullae,
vascular congestion, cephalization, widened mediastinum, tortuous aorta, calcified granuloma,
healing fracture, bronchiectasis, tracheal deviation, cavitary lesion, cyst, hilar
lymphadenopathy, pleural plaques, honeycombing). Traps are included on purpose: subcutaneous
emphysema (not the emphysema label), "usual interstitial pneumonia" (fibrosis, not pneumonia),
calcified pleural plaques (Pleural Other, not calcification), cholecystectomy clips.

Labelling conventions used for the templates' intended labels: a finding described as present
(also small, mild, trace) is positive; negated is 0; resolved / no longer seen / removed is 0;
stable, unchanged, improving, persistent is 1 (still present); hedged pneumonia ("cannot exclude
pneumonia") is 1, other hedged findings are undecided; consolidation, pneumonia, edema and
atelectasis also make Lung Opacity positive; any device present makes Support Devices positive.
Where the project vocabulary (`vocab/ranscore-21.yaml`) is explicit the templates follow it:
calcified granulomas are calcification, not Lung Lesion; calcified pleural plaques are Pleural
Other, not calcification; tortuous aorta and hiatal hernia are mediastinal other; bronchial wall
thickening is Trachea and bronchus; vascular congestion is pulmonary vascular abnormal (edema
undecided unless stated). One deliberate overlap: cardiomegaly usually also makes Enlarged
Cardiomediastinum positive here (as the released Ran Score prompts, which define it mostly by
cardiomegaly terms), while the vocabulary's definition excludes an enlarged heart alone; a few
templates ("Cardiomegaly with a left ventricular configuration") leave it undecided.

The intended labels are not shipped: the reference is what the readers say.

## The readers and how ambiguity was simulated

Six readers, `reader-a` ... `reader-f`, read every report independently. For every (report,
label) the script knows from its templates whether the label is

- stated clearly (present or negated): each reader disagrees with probability {P_FLIP_MENTIONED:.1%};
- not mentioned at all: a stray positive with probability {P_FLIP_ABSENT:.1%};
- ambiguous: hedged wording (cannot exclude, possible, may represent, questionable), borderline
  phrases (borderline heart size, minimal blunting, mildly hyperexpanded, coronary calcification)
  and temporal wording (stable, unchanged, persistent, improving, resolved, interval removal).
  For such an item the script draws a probability that a reader marks it positive: between
  {AMB_P[1][0]:.2f} and {AMB_P[1][1]:.2f} when the intended value is 1 (stable/improving findings,
  hedged pneumonia), {AMB_P[None][0]:.2f}-{AMB_P[None][1]:.2f} when it is genuinely undecidable (other hedged
  findings, borderline phrases), {AMB_P[0][0]:.2f}-{AMB_P[0][1]:.2f} when it is 0 (resolved, removed). Each
  reader then has a small leniency offset ({", ".join(f"{k[-1]} {v:+.2f}" for k, v in READER_LENIENCY.items())})
  so readers differ a little in how they treat uncertainty.

The reference rule of the Ran Score paper (positive when at least 4 of 6 readers mark it,
negative when at least 4 of 6 do not) leaves 3-3 ties undecided: those go to adjudication.

## Counts (by the readers' votes)

Vote splits over all {st["n"] * 20} (report, label) items: {splits_line(st)}.
Reports with no label reaching 4 of 6 (No Finding by majority): {st["normal"]} of {st["n"]}
({st["normal"] / st["n"]:.0%}).

{stats_table(st)}

"positive" counts reports where at least 4 of 6 readers marked the label; "3-3 ties" counts items
that need adjudication; "ambiguous items" counts items the script simulated as ambiguous.

## Regenerating

    python annotations/make_demo.py          # rewrites every file, prints these counts
    python annotations/make_demo.py --check  # fails if a file on disk differs

The script uses only the Python standard library and fixed random seeds (`SEED = "{SEED}"`);
a rerun rewrites every file byte-identically.
"""


def readme_zh(reports: list, st: dict) -> str:
    return f"""# Demo study, Chinese cohort (synthetic)

**Every report in this folder is synthetic.** The {st["n"]} simplified-Chinese chest X-ray reports were
written for the workbench demo by `annotations/make_demo.py` from sentence templates written for this
project (phrasing such as 双肺纹理清晰, 未见胸腔积液, 心影增大, 右下肺斑片影, 不除外肺炎, 气管插管).
They are not patient data and no text was copied from any real report or dataset. This cohort
exists for cross-language validation: the same prompts, the same 20 read labels and the same six
simulated readers as the English demo (`../demo/`).

This file is generated by the script; do not edit it by hand.

## Files

- `reports.csv`: `id,findings,impression` (所见 / 印象), ids `zh-001` ... `zh-{st["n"]:03d}`.
- `readings.csv`: `report_id,label,reader,value`, readers `reader-a` ... `reader-f`, the 20 Ran
  Score labels except the derived `no_finding`; value 0 or 1.

Readers are simulated exactly as for the English cohort (see `../demo/README.md`): clear
sentences almost always agree, hedged / borderline / temporal wording (不除外, 可能, 可疑, 饱满,
稍钝, 较前好转, 已吸收, 同前, 陈旧性) makes readers split.

## Counts (by the readers' votes)

Vote splits over all {st["n"] * 20} items: {splits_line(st)}. Reports with no label reaching 4 of 6:
{st["normal"]} of {st["n"]}.

{stats_table(st)}

Regenerate with `python annotations/make_demo.py`.
"""


def readme_robustness(n_para: int, n_sig: int, sig_labels: list) -> str:
    return f"""# Robustness pairs (synthetic)

Written for this project by `annotations/make_demo.py` (the pairs are hand-written in the script);
synthetic sentences, not patient data. They test the two properties ReEvalMed describes: a
labeller should give the same labels to a harmless paraphrase (robustness) and different labels
to a clinically significant change (discrimination).

This file is generated by the script; do not edit it by hand.

## `pairs.csv`

Columns `pair_id,kind,label,text_a,text_b,note`.

- `kind = paraphrase` ({n_para} pairs, ids `para-NN`): harmless rephrasing (abbreviations,
  synonyms, negation forms, sentence order). Every one of the 20 read labels must get the same
  value for `text_a` and `text_b`; `label` is empty.
- `kind = significant` ({n_sig} pairs, ids `sig-NN`): one clinically significant change. `label` is
  the id of the Ran Score label whose value must differ between `text_a` and `text_b`. A change can
  legitimately move a dependent label as well (a consolidation also makes Lung Opacity positive);
  `note` says so when it does. Only the named label is required to change.

The significant pairs cover one label each:

{chr(10).join(f"- `{lab}`" for lab in sig_labels)}

The changes include negated vs present, a cause named for an opacity (atelectasis, pneumonia),
a device removed vs in place, subcutaneous vs pulmonary emphysema, and solid vs cavitary nodule.

Laterality swaps (left vs right effusion) are clinically significant but do not change any Ran
Score label, so they are not included as `significant` pairs.
"""


def generate() -> dict:
    files: dict = {}
    # English cohort
    en = Lang("en")
    present_quota = {lab: 8 for lab in READ_LABELS}
    for lab in (AT, CM, PE, LO, ED, PN, CO, PTX):
        present_quota[lab] = 12
    present_quota[SD] = 30
    reports = build_cohort(
        en, 180, "demo", n_normal=28, n_normal_tricky=7, n_long=14, n_empty=20, present_quota=present_quota, seed=SEED
    )
    rows = simulate_readings(reports, SEED, "demo")
    st = cohort_stats(reports)
    files["demo/reports.csv"] = csv_text(
        ["id", "findings", "impression"], [(r["id"], r["findings"], r["impression"]) for r in reports]
    )
    files["demo/readings.csv"] = csv_text(["report_id", "label", "reader", "value"], rows)
    files["demo/README.md"] = readme_demo(reports, st)

    # Chinese cohort
    zh = Lang("zh")
    reports_zh = build_cohort(
        zh,
        24,
        "zh",
        n_normal=5,
        n_normal_tricky=1,
        n_long=0,
        n_empty=0,
        present_quota={
            lab: (3 if lab == SD else 2 if lab in (AT, CM, PE, PN, LO, ED, CO, PTX, LL) else 1) for lab in READ_LABELS
        },
        seed=SEED,
    )
    rows_zh = simulate_readings(reports_zh, SEED, "demo-zh")
    st_zh = cohort_stats(reports_zh)
    files["demo-zh/reports.csv"] = csv_text(
        ["id", "findings", "impression"], [(r["id"], r["findings"], r["impression"]) for r in reports_zh]
    )
    files["demo-zh/readings.csv"] = csv_text(["report_id", "label", "reader", "value"], rows_zh)
    files["demo-zh/README.md"] = readme_zh(reports_zh, st_zh)

    # robustness pairs
    prow, n = [], Counter()
    for kind, lab, a, b, note in PAIRS:
        n[kind] += 1
        pid = f"{'para' if kind == 'paraphrase' else 'sig'}-{n[kind]:02d}"
        prow.append((pid, kind, lab, a, b, note))
    files["robustness/pairs.csv"] = csv_text(["pair_id", "kind", "label", "text_a", "text_b", "note"], prow)
    files["robustness/README.md"] = readme_robustness(
        n["paraphrase"], n["significant"], [p[1] for p in PAIRS if p[0] == "significant"]
    )
    return {"files": files, "stats": {"demo": st, "demo-zh": st_zh}, "reports": reports}


def check_requirements(st: dict) -> list:
    problems = []
    for lab in READ_LABELS:
        if st["pos"][lab] < 6:
            problems.append(f"{lab}: only {st['pos'][lab]} reports positive by 4-of-6 majority")
    if sum(st["ties"].values()) < 10:
        problems.append(f"only {sum(st['ties'].values())} 3-3 ties")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="do not write; fail if files on disk differ")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    out = generate()
    problems = check_requirements(out["stats"]["demo"])
    if problems:
        print("requirements not met:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    differ = []
    for rel, text in out["files"].items():
        path = HERE / rel
        data = text.encode("utf-8")
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                differ.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    if not args.quiet:
        for rel, text in out["files"].items():
            print(f"{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}  {rel}")
        for name, st in out["stats"].items():
            print(
                f"\n[{name}] {st['n']} reports; splits {splits_line(st)}; "
                f"no finding by majority {st['normal']}; 3-3 ties {sum(st['ties'].values())}"
            )
            for lab in LABEL_IDS:
                print(f"  {lab:30s} positive {st['pos'][lab]:4d}   ties {st['ties'][lab]:3d}")
    if differ:
        print("differs from generated output: " + ", ".join(differ), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
