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

Run `python annotations/make_demo.py` (stdlib only). The random generators are seeded with
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
# English template library
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


def _c(primary, group, rank, **variants):
    return {"primary": primary, "group": group, "rank": rank, "variants": variants}


LIB = {
    "atelectasis": _c(AT, G_LUNG, 9,
        present=([AT, LO], {}, [
            ("Linear opacity at the {side} lung base consistent with subsegmental atelectasis.",
             "{Side} basilar subsegmental atelectasis."),
            ("Bibasilar atelectasis.", "Bibasilar atelectasis."),
            ("Plate-like atelectasis in the {side} mid lung zone.", None),
            ("Streaky {side} basilar opacities compatible with atelectasis.", "{Side} basilar atelectasis."),
            ("Volume loss in the {lobe} with associated atelectasis.", "{LOBE} atelectasis."),
            ("There is partial collapse of the {lobe}.", "Partial {lobe} collapse."),
            ("Discoid atelectasis at the {side} base.", None),
            ("Low lung volumes with bibasilar atelectasis.", "Low lung volumes with bibasilar atelectasis."),
            ("Complete collapse of the {lobe} with displacement of the fissure.",
             "{Lobe} collapse; mucus plugging is a consideration and bronchoscopy may be helpful."),
            ("{LOBE} atelectasis.", "{LOBE} atelectasis."),
        ]),
        hedged=([LO], {AT: None}, [
            ("Patchy opacity at the {side} base may represent atelectasis.",
             "{Side} basilar opacity, which may represent atelectasis."),
            ("Hazy {side} basilar opacity, possibly atelectasis.", "Possible {side} basilar atelectasis."),
            ("Retrocardiac opacity, possibly atelectasis.", "Retrocardiac opacity may represent atelectasis."),
        ]),
        stable=([], {AT: 1, LO: 1}, [
            ("Stable {side} basilar atelectasis.", "Unchanged {side} basilar atelectasis."),
            ("Persistent linear atelectasis in the {lobe}, unchanged from prior.", None),
            ("Bibasilar atelectasis is unchanged.", "Stable bibasilar atelectasis."),
        ]),
        improving=([], {AT: 1, LO: 1}, [
            ("Improving aeration of the {lobe} with residual atelectasis.", "Improving {LOBE} atelectasis."),
            ("Decreased {side} basilar atelectasis.", "Improving {side} basilar atelectasis."),
        ]),
        resolved=([], {AT: 0, LO: 0}, [
            ("Previously seen {side} basilar atelectasis has resolved.", "Resolved {side} basilar atelectasis."),
            ("The {lobe} is now well aerated; the prior atelectasis is no longer visible.", None),
        ]),
    ),
    "cardiomegaly": _c(CM, G_HEART, 8,
        present=([CM, ECM], {}, [
            ("The heart is enlarged.", "Cardiomegaly."),
            ("Moderate cardiomegaly.", "Moderate cardiomegaly."),
            ("The cardiac silhouette is enlarged.", "Cardiomegaly."),
            ("Mild enlargement of the cardiac silhouette.", "Mild cardiomegaly."),
            ("Marked cardiomegaly, with the heart occupying more than half of the thoracic width.",
             "Marked cardiomegaly."),
            ("Enlarged cardiomediastinal silhouette, predominantly due to cardiomegaly.", "Cardiomegaly."),
            ("Cardiomegaly with a left ventricular configuration.", "Cardiomegaly.", [CM], {ECM: None}),
            ("The heart is mildly enlarged; the mediastinum is not widened.", "Mild cardiomegaly.", [CM], {}, [ECM]),
        ]),
        borderline=([], {CM: None, ECM: None}, [
            ("Borderline heart size.", "Borderline cardiomegaly."),
            ("The heart size is at the upper limits of normal.", None),
            ("Heart size is borderline enlarged, accentuated by the AP technique.",
             "Borderline heart size, likely accentuated by technique."),
        ]),
        stable=([], {CM: 1, ECM: 1}, [
            ("Stable cardiomegaly.", "Stable cardiomegaly."),
            ("The cardiac silhouette remains enlarged, unchanged from prior.", "Unchanged cardiomegaly."),
            ("Persistent moderate cardiomegaly.", None),
        ]),
    ),
    "ecm": _c(ECM, G_HEART, 6,
        present=([ECM], {}, [
            ("The mediastinum is widened.",
             "Widened mediastinum; CT is recommended if there is concern for aortic injury."),
            ("Widened superior mediastinum.", "Widened mediastinum."),
            ("The cardiomediastinal silhouette is enlarged.", "Enlarged cardiomediastinal silhouette."),
            ("Mediastinal widening, new since the prior study.", "New mediastinal widening."),
            ("Enlarged cardiomediastinal silhouette, which may partly reflect the portable technique.",
             "Enlarged cardiomediastinal silhouette."),
        ]),
        borderline=([], {ECM: None}, [
            ("The mediastinum appears slightly widened, likely due to AP technique and rotation.", None),
            ("Prominence of the superior mediastinal contour, possibly vascular.",
             "Prominent mediastinal contour, possibly vascular."),
        ]),
        stable=([], {ECM: 1}, [
            ("Stable widening of the mediastinum.", "Stable mediastinal widening."),
        ]),
    ),
    "consolidation": _c(CO, G_LUNG, 2,
        present=([CO, LO], {}, [
            ("Focal consolidation in the {lobe}.", "{Lobe} consolidation."),
            ("Dense {lobe} consolidation with air bronchograms.", "{LOBE} consolidation."),
            ("There is airspace consolidation at the {side} base.", "{Side} basilar consolidation."),
            ("Patchy consolidation in the {lobe}.", "Patchy {LOBE} consolidation."),
            ("Consolidation of the {lobe} obscuring the adjacent hemidiaphragm.", "{Lobe} consolidation."),
        ]),
        hedged=([], {CO: None, LO: None}, [
            ("Possible early consolidation at the {side} base.", "Possible early {side} basilar consolidation."),
            ("Questionable subtle consolidation in the {lobe}.", "Questionable {LOBE} consolidation."),
            ("Consolidation in the {lobe} cannot be excluded.", "Cannot exclude {LOBE} consolidation."),
            ("Ill-defined {side} basilar opacity, possibly early consolidation.",
             "{Side} basilar opacity, possibly early consolidation.", [LO], {CO: None}),
        ]),
        stable=([], {CO: 1, LO: 1}, [
            ("Persistent {lobe} consolidation.", "Persistent {LOBE} consolidation."),
            ("Unchanged consolidation in the {lobe}.", "Unchanged {LOBE} consolidation."),
        ]),
        improving=([], {CO: 1, LO: 1}, [
            ("Improving consolidation in the {lobe}.", "Improving {LOBE} consolidation."),
        ]),
        resolved=([], {CO: 0, LO: 0}, [
            ("Interval resolution of the previously seen {lobe} consolidation.", "Resolved {LOBE} consolidation."),
        ]),
    ),
    "pneumonia": _c(PN, G_LUNG, 1,
        present=([PN, CO, LO], {}, [
            ("{Lobe} consolidation consistent with pneumonia.", "{Lobe} pneumonia."),
            ("Dense consolidation in the {lobe}, compatible with pneumonia in the appropriate clinical setting.",
             "{LOBE} pneumonia."),
            ("Patchy air-space disease in the {lobe}, concerning for pneumonia.",
             "Findings concerning for {LOBE} pneumonia.", [PN, LO], {}),
            ("Multifocal patchy opacities in both lungs, compatible with multifocal pneumonia.",
             "Multifocal pneumonia.", [PN, LO], {}),
            ("New {side} basilar opacity consistent with pneumonia.", "{Side} lower lobe pneumonia.", [PN, LO], {}),
            ("Retrocardiac air-space disease compatible with left lower lobe pneumonia.",
             "LLL pneumonia.", [PN, LO], {}),
            ("Patchy opacity in the {lobe}, consistent with aspiration pneumonia.",
             "Aspiration pneumonia, {LOBE}.", [PN, LO], {}),
        ]),
        hedged=([LO], {PN: 1}, [
            ("{Side} basilar opacity; pneumonia cannot be excluded.", "{Side} basilar opacity, cannot exclude pneumonia."),
            ("Patchy opacity in the {lobe}, which may represent atelectasis or pneumonia.",
             "{LOBE} opacity: atelectasis versus pneumonia.", [LO], {PN: 1, AT: None}),
            ("Subtle {side} basilar opacity, possibly early pneumonia.", "Possible early {side} lower lobe pneumonia."),
            ("No definite focal consolidation.",
             "Cannot exclude early pneumonia in the appropriate clinical setting.", [], {PN: 1}, [CO]),
            ("Questionable subtle opacity at the {side} base.",
             "Questionable {side} basilar opacity; early pneumonia cannot be excluded.", [], {PN: 1, LO: None}),
        ]),
        improving=([], {PN: 1, LO: 1}, [
            ("Improving {lobe} pneumonia with decreasing air-space opacity.", "Improving {LOBE} pneumonia."),
            ("Partially cleared {lobe} opacity in this patient with known pneumonia.",
             "Improving but persistent {LOBE} pneumonia."),
        ]),
        resolved=([], {PN: 0, LO: 0}, [
            ("Previously seen {lobe} pneumonia is no longer visible.", "Resolution of {LOBE} pneumonia."),
            ("The {side} basilar opacity seen previously has cleared.",
             "Interval resolution of {side} lower lobe pneumonia."),
        ]),
    ),
    "edema": _c(ED, G_LUNG, 3,
        present=([ED, LO], {}, [
            ("Mild interstitial edema.", "Mild interstitial pulmonary edema."),
            ("Diffuse bilateral perihilar haziness consistent with pulmonary edema.", "Pulmonary edema."),
            ("Moderate pulmonary edema with Kerley B lines.", "Moderate pulmonary edema."),
            ("Findings consistent with CHF, with interstitial edema.", "CHF with interstitial edema."),
            ("Alveolar edema in both lungs, worse than on the prior study.", "Worsening alveolar pulmonary edema."),
            ("Peribronchial cuffing and indistinct pulmonary vessels consistent with mild edema.",
             "Mild pulmonary edema.", [ED, LO], {TB: None, PVA: None}),
        ]),
        hedged=([], {ED: None, LO: None}, [
            ("Possible mild interstitial edema.", "Possible mild interstitial edema."),
            ("Slightly indistinct pulmonary vasculature, which may represent early edema.",
             "Cannot exclude mild pulmonary edema.", [], {ED: None, PVA: None}),
        ]),
        stable=([], {ED: 1, LO: 1}, [
            ("Persistent mild pulmonary edema.", "Persistent mild pulmonary edema."),
        ]),
        improving=([], {ED: 1, LO: 1}, [
            ("Improving pulmonary edema.", "Improving pulmonary edema."),
            ("Decreased interstitial edema compared with the prior study.", "Improving interstitial edema."),
        ]),
        resolved=([], {ED: 0, LO: 0}, [
            ("Interval resolution of pulmonary edema.", "Resolved pulmonary edema."),
            ("The pulmonary edema seen on the prior study has cleared.", None),
        ]),
    ),
    "effusion": _c(PE, G_PLEURA, 4,
        present=([PE], {}, [
            ("Small {side} pleural effusion.", "Small {side} pleural effusion."),
            ("{Size} {side} pleural effusion with adjacent compressive atelectasis.",
             "{Size} {side} pleural effusion.", [PE, AT, LO], {}),
            ("Blunting of the {side} costophrenic angle consistent with a small effusion.",
             "Small {side} pleural effusion."),
            ("Bilateral pleural effusions, {side} greater than {other}.", "Bilateral pleural effusions."),
            ("Trace {side} pleural effusion.", None),
            ("{Side} CP angle blunting, consistent with a small effusion.", "Small {side} effusion."),
            ("Layering {side} pleural effusion on this semi-upright view.", "{Side} pleural effusion."),
            ("Meniscus at the {side} base, compatible with a {size} pleural effusion.",
             "{Size} {side} pleural effusion."),
            ("Large {side} pleural effusion with near-complete opacification of the {side} hemithorax.",
             "Large {side} pleural effusion.", [PE, LO], {}),
        ]),
        borderline=([], {PE: None}, [
            ("Minimal blunting of the {side} costophrenic angle.", None),
            ("Minimal blunting of the {side} CP angle, which may reflect a trace effusion or pleural thickening.",
             "Trace {side} effusion versus pleural thickening.", [], {PE: None, PO: None}),
            ("Possible small {side} pleural effusion.", "Possible small {side} pleural effusion."),
        ]),
        stable=([], {PE: 1}, [
            ("Stable small {side} pleural effusion.", "Stable small {side} pleural effusion."),
            ("{Size} {side} pleural effusion, unchanged.", "Unchanged {size} {side} effusion."),
        ]),
        improving=([], {PE: 1}, [
            ("Decreasing {side} pleural effusion.", "Improving {side} pleural effusion."),
            ("Improving {side} effusion, now small.", "Improving {side} effusion."),
        ]),
        resolved=([], {PE: 0}, [
            ("Resolved {side} pleural effusion.", "Resolved {side} effusion."),
            ("The previously seen {side} pleural effusion is no longer visible.", None),
            ("Interval resolution of the {side} effusion; the costophrenic angles are now sharp.",
             "Resolved {side} pleural effusion."),
        ]),
    ),
    "pleural_other": _c(PO, G_PLEURA, 11,
        present=([PO], {}, [
            ("{Side} apical pleural thickening.", None),
            ("Bilateral calcified pleural plaques, consistent with prior asbestos exposure.",
             "Calcified pleural plaques, consistent with prior asbestos exposure."),
            ("Pleural plaques along both hemidiaphragms.", "Bilateral pleural plaques."),
            ("Smooth pleural thickening along the {side} lateral chest wall.", "{Side} pleural thickening."),
            ("Loculated {side} pleural fluid with pleural thickening, suggestive of empyema.",
             "Findings suggestive of {side} empyema.", [PO, PE], {}),
            ("Focal pleural scarring at the {side} apex.", None),
        ]),
        hedged=([], {PO: None}, [
            ("Possible {side} apical pleural thickening.", None),
        ]),
        stable=([], {PO: 1}, [
            ("Blunting of the {side} costophrenic angle from chronic pleural thickening, unchanged.",
             "Unchanged {side} pleural thickening.", [], {PO: 1, PE: None}),
            ("Stable bilateral pleural plaques.", "Stable pleural plaques."),
        ]),
    ),
    "pneumothorax": _c(PTX, G_PLEURA, 0,
        present=([PTX], {}, [
            ("Small {side} apical pneumothorax.", "Small {side} apical pneumothorax."),
            ("{Side} PTX measuring approximately 2 cm at the apex.", "{Side} pneumothorax."),
            ("Tiny {side} apical PTX.", "Tiny {side} PTX."),
            ("Moderate {side} pneumothorax with a visible pleural line along the lateral chest wall.",
             "Moderate {side} pneumothorax. Findings were discussed with the referring team."),
            ("Large {side} pneumothorax with shift of the mediastinum to the {other}, concerning for tension.",
             "Large {side} pneumothorax, concerning for tension physiology."),
        ]),
        hedged=([], {PTX: None}, [
            ("Questionable small {side} apical pneumothorax; a skin fold is also possible.",
             "Possible tiny {side} apical pneumothorax versus skin fold."),
            ("A tiny {side} apical pneumothorax cannot be excluded.", None),
        ]),
        improving=([], {PTX: 1}, [
            ("Decreasing small {side} pneumothorax.", "Decreasing small {side} PTX."),
        ]),
        stable=([], {PTX: 1}, [
            ("Stable tiny {side} apical pneumothorax.", "Stable tiny {side} PTX."),
        ]),
        resolved=([], {PTX: 0}, [
            ("Previously seen {side} pneumothorax has resolved.", "Resolved {side} pneumothorax."),
            ("No residual {side} PTX following chest tube removal.", "Resolved {side} PTX.", [], {PTX: 0, SD: 0}),
        ]),
    ),
    "fracture": _c(FX, G_BONE, 6,
        present=([FX], {}, [
            ("Acute fracture of the {side} {rib} rib.", "Acute {side} {rib} rib fracture."),
            ("Healing fracture of the {side} posterior {rib} rib.", None),
            ("Displaced fracture of the {side} clavicle.", "{Side} clavicle fracture."),
            ("Mildly displaced fractures of the {side} {rib} and {rib2} ribs.", "{Side} rib fractures."),
            ("Compression deformity of a mid thoracic vertebral body, new since the prior study.",
             "New mid thoracic compression fracture."),
            ("Healing {side} rib fractures with callus formation.", "Healing {side} rib fractures."),
            ("Nondisplaced fracture of the {side} lateral {rib} rib.", "Nondisplaced {side} {rib} rib fracture."),
        ]),
        hedged=([], {FX: None}, [
            ("Questionable nondisplaced fracture of the {side} {rib} rib.",
             "Possible {side} {rib} rib fracture; dedicated rib views could be obtained if clinically indicated."),
            ("Subtle cortical irregularity of the {side} {rib} rib, which may represent a nondisplaced fracture.",
             None),
        ]),
        stable=([], {FX: 1}, [
            ("Old healed {side} rib fractures.", None),
            ("Unchanged chronic compression deformity of a lower thoracic vertebral body.", None),
        ]),
    ),
    "lesion": _c(LL, G_LUNG, 5,
        present=([LL], {}, [
            ("{Cm} nodule in the {lobe}.", "{Cm} {lobe} nodule; CT is recommended for further evaluation."),
            ("{Lobe} mass measuring approximately {mcm}.", "{Lobe} mass, concerning for malignancy."),
            ("Spiculated nodule in the {lobe}.", "Spiculated {LOBE} nodule, suspicious for malignancy; recommend chest CT."),
            ("Multiple bilateral pulmonary nodules, compatible with metastatic disease.",
             "Multiple pulmonary nodules, likely metastases."),
            ("Rounded opacity in the {lobe} measuring {cm}, suspicious for a nodule.", "{LOBE} nodule.",
             [LL], {LO: None}),
        ]),
        hedged=([], {LL: None}, [
            ("Questionable nodule projecting over the {side} {zone} lung zone, possibly a nipple shadow.",
             "Questionable {side} nodule, possibly a nipple shadow; repeat with nipple markers is suggested."),
            ("Possible {side} {zone} lung nodule versus overlapping vascular shadows.", None),
        ]),
        stable=([], {LL: 1}, [
            ("Stable {cm} nodule in the {lobe}.", "Stable {LOBE} nodule."),
            ("Unchanged {lobe} mass.", "Unchanged {LOBE} mass."),
        ]),
    ),
    "opacity": _c(LO, G_LUNG, 4,
        present=([LO], {}, [
            ("Patchy opacity in the {lobe}.", "Patchy {LOBE} opacity."),
            ("Hazy opacity in the {side} {zone} lung zone.", "{Side} {zone} lung opacity."),
            ("Air-space disease at the {side} base.", "{Side} basilar air-space disease."),
            ("Ill-defined opacity in the {lobe}, nonspecific.",
             "Nonspecific {LOBE} opacity; follow-up radiograph is recommended."),
            ("Bilateral patchy air-space opacities.",
             "Bilateral air-space opacities; differential includes infection and edema.", [LO], {PN: None, ED: None}),
            ("Increased opacity at the {side} base, partly obscuring the hemidiaphragm.", "{Side} basilar opacity."),
        ]),
        stable=([], {LO: 1}, [
            ("Persistent {side} basilar opacity.", "Persistent {side} basilar opacity."),
        ]),
        resolved=([], {LO: 0}, [
            ("The previously noted {side} basilar opacity is no longer visible.", None),
        ]),
    ),
    # --- devices (primary: support_devices) ---
    "ett": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("Endotracheal tube terminates {dist} above the carina.", "ETT in satisfactory position."),
            ("ETT tip is {dist} above the carina.", "Endotracheal tube in appropriate position."),
            ("The endotracheal tube is in standard position.", None),
            ("ETT terminates at the level of the clavicular heads.", None),
            ("The endotracheal tube tip is low, approximately 1 cm above the carina.",
             "Low-lying ETT; recommend withdrawal by 2 cm."),
        ]),
        resolved=([], {SD: 0}, [
            ("Interval removal of the endotracheal tube.", "Interval extubation."),
            ("The ETT has been removed.", None),
        ]),
    ),
    "ngt": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("Enteric tube courses below the diaphragm with the tip in the stomach.", None),
            ("NGT tip in the stomach.", "NG tube in the stomach."),
            ("Nasogastric tube terminates in the gastric body.", None),
            ("The NG tube is coiled in the esophagus.", "Malpositioned NG tube coiled in the esophagus; recommend repositioning."),
            ("Feeding tube tip projects over the expected location of the duodenum.", None),
        ]),
        resolved=([], {SD: 0}, [
            ("The previously seen NG tube has been removed.", None),
        ]),
    ),
    "picc": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("{Side} PICC terminates in the lower SVC.", None),
            ("{Side} upper extremity PICC with tip at the cavoatrial junction.", "{Side} PICC tip at the cavoatrial junction."),
            ("A {side}-sided peripherally inserted central catheter terminates in the mid SVC.", None),
            ("Interval placement of a {side} PICC with tip in the SVC.", "New {side} PICC in good position."),
        ]),
        resolved=([], {SD: 0}, [
            ("Interval removal of the {side} PICC.", None),
        ]),
    ),
    "cvc": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("Right internal jugular central venous catheter with tip at the cavoatrial junction.", None),
            ("{Side} subclavian central venous catheter terminates in the SVC.", "{Side} subclavian line in good position."),
            ("Central venous catheter via the {side} internal jugular vein, tip in the upper right atrium.",
             "{Side} IJ CVC tip in the upper right atrium; consider withdrawal by 2 cm."),
            ("{Side} chest port with catheter tip in the SVC.", None),
        ]),
    ),
    "pacer": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("Left chest wall dual-lead pacemaker with leads in the right atrium and right ventricle.", None),
            ("{Side}-sided pacemaker with intact leads.", None),
            ("Left chest wall AICD with lead terminating in the right ventricle.", None),
        ]),
    ),
    "sternotomy": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("Median sternotomy wires are intact.", None),
            ("Postoperative changes of median sternotomy and CABG.", "Postsurgical changes of CABG."),
            ("Sternotomy wires and mediastinal surgical clips from prior CABG.", None),
            ("Prosthetic aortic valve and median sternotomy wires.", None),
        ]),
    ),
    "chest_tube": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("{Side} chest tube in place with tip at the apex.", "{Side} chest tube in place."),
            ("{Side}-sided pigtail pleural catheter at the base.", None),
            ("{Side} basilar chest tube, unchanged in position.", None),
        ]),
        resolved=([], {SD: 0}, [
            ("Interval removal of the {side} chest tube.", "Interval removal of the {side} chest tube."),
        ]),
    ),
    "clips": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("Surgical clips in the {side} axilla.", None),
            ("Surgical clips in the {side} hilum from prior lobectomy.", None),
            ("Surgical clips in the right upper quadrant from prior cholecystectomy.", None, [], {SD: None}),
        ]),
    ),
    "trach": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("Tracheostomy tube in place.", "Tracheostomy tube in standard position."),
        ]),
    ),
    # --- the seven added Ran Score labels ---
    "emphysema": _c(EM, G_LUNG, 10,
        present=([EM], {}, [
            ("Hyperinflated lungs with flattened hemidiaphragms, consistent with emphysema.", "Emphysema."),
            ("Hyperinflation consistent with COPD.", "COPD."),
            ("Emphysematous changes with bullae in the upper lobes.", "Bullous emphysema."),
            ("Large bulla in the {side} upper lobe.", "{Side} upper lobe bulla."),
            ("Centrilobular emphysema, most pronounced in the upper lobes.", "Emphysema."),
            ("Severe emphysema with increased retrosternal airspace.", "Severe emphysema."),
        ]),
        borderline=([], {EM: None}, [
            ("The lungs are mildly hyperexpanded.", None),
            ("Mild hyperinflation, which may reflect COPD or a good inspiratory effort.", "Possible COPD."),
        ]),
        stable=([], {EM: 1}, [
            ("Stable emphysematous changes.", "Chronic emphysema, unchanged."),
        ]),
    ),
    "subq": _c(None, G_BONE, 7,  # trap: subcutaneous emphysema is NOT the emphysema label
        present=([], {}, [
            ("Subcutaneous emphysema along the {side} lateral chest wall.", "{Side} chest wall subcutaneous emphysema."),
            ("Small amount of subcutaneous emphysema in the {side} lower neck.", None),
        ]),
    ),
    "ild": _c(ILD, G_LUNG, 10,
        present=([ILD], {}, [
            ("Diffuse reticular opacities consistent with interstitial lung disease.", "Interstitial lung disease.",
             [ILD, LO], {}),
            ("Bibasilar reticular opacities with honeycombing, consistent with pulmonary fibrosis.",
             "Basilar-predominant pulmonary fibrosis.", [ILD, LO], {}),
            ("Honeycombing at the lung bases.", "Findings compatible with usual interstitial pneumonia pattern fibrosis.",
             [ILD], {LO: None}),
            ("Coarse interstitial markings with peripheral fibrosis.", "Pulmonary fibrosis.", [ILD], {LO: None}),
            ("Known ILD with bibasilar fibrotic changes.", "ILD.", [ILD], {LO: None}),
        ]),
        borderline=([], {ILD: None}, [
            ("Coarsened interstitial markings, possibly chronic.", None),
            ("Mildly prominent interstitial markings, which may represent chronic interstitial change or atypical infection.",
             "Prominent interstitial markings, nonspecific.", [], {ILD: None, PN: None, LO: None}),
        ]),
        stable=([], {ILD: 1}, [
            ("Stable chronic interstitial lung disease.", "Unchanged ILD."),
            ("Unchanged bibasilar fibrosis.", None),
        ]),
    ),
    "calcification": _c(CA, G_HEART, 11,
        present=([CA], {}, [
            ("Calcified granuloma in the {lobe}.", None),
            ("Calcified mediastinal lymph nodes.", None),
            ("Atherosclerotic calcification of the aortic arch.", None),
            ("Aortic knob calcification.", None),
            ("Calcified {side} hilar lymph nodes, consistent with prior granulomatous disease.",
             "Sequelae of prior granulomatous disease."),
            ("Scattered calcified granulomas in both lungs.", "Healed granulomatous disease."),
        ]),
        borderline=([], {CA: None}, [
            ("Coronary artery calcifications.", None),
            ("Small dense nodule in the {lobe}, possibly a calcified granuloma.", None, [], {CA: None, LL: None}),
        ]),
    ),
    "airway": _c(TB, G_LUNG, 10,
        present=([TB], {}, [
            ("Bronchiectasis in both lower lobes.", "Bibasilar bronchiectasis."),
            ("Tracheal deviation to the {side}.", "Tracheal deviation to the {side}; correlate for a thyroid or mediastinal mass."),
            ("Cylindrical bronchiectasis in the {lobe}.", "{LOBE} bronchiectasis."),
            ("The trachea is narrowed at the thoracic inlet.", "Tracheal narrowing at the thoracic inlet."),
            ("Tram-track opacities at the bases consistent with bronchiectasis.", "Bronchiectasis.", [TB], {LO: None}),
            ("The trachea is deviated to the {side} by a large goiter.", "Tracheal deviation, likely due to goiter."),
            ("Bronchial wall thickening in the lower lobes.", "Bronchial wall thickening, which may reflect bronchitis."),
        ]),
        hedged=([], {TB: None}, [
            ("Possible mild bronchial wall thickening.", None),
            ("Questionable mild tracheal deviation, possibly due to rotation.", None),
        ]),
        stable=([], {TB: 1}, [
            ("Stable bronchiectasis.", None),
        ]),
    ),
    "cavity": _c(CC, G_LUNG, 5,
        present=([CC], {}, [
            ("Cavitary lesion in the {lobe} with an air-fluid level.",
             "Cavitary {LOBE} lesion; differential includes abscess, tuberculosis, and necrotic neoplasm.",
             [CC], {LL: None}),
            ("Thick-walled cavity in the {lobe}.", "{LOBE} cavity."),
            ("Thin-walled cyst in the {lobe}.", None),
            ("Multiple thin-walled cysts in both lungs.", "Multiple pulmonary cysts."),
            ("Cavitating mass in the {lobe}.", "Cavitating {LOBE} mass, suspicious for squamous cell carcinoma.",
             [CC, LL], {}),
        ]),
        hedged=([], {CC: None}, [
            ("Central lucency within a {lobe} nodule, possibly early cavitation.",
             "{LOBE} nodule with possible cavitation.", [LL], {CC: None}),
            ("Pneumatocele versus bulla in the {lobe}.", None, [], {CC: None, EM: None}),
        ]),
        stable=([], {CC: 1}, [
            ("Stable thin-walled cavity in the {lobe}.", "Stable {LOBE} cavity."),
        ]),
    ),
    "mediastinal": _c(MO, G_HEART, 7,
        present=([MO], {}, [
            ("{Side} hilar lymphadenopathy.", "{Side} hilar lymphadenopathy."),
            ("Bilateral hilar lymphadenopathy.", "Bilateral hilar lymphadenopathy; sarcoidosis is a consideration."),
            ("Anterior mediastinal mass.", "Anterior mediastinal mass; CT is recommended.", [MO], {ECM: None}),
            ("Large hiatal hernia.", "Hiatal hernia."),
            ("Retrocardiac hiatal hernia.", None),
            ("Right paratracheal soft tissue fullness suggesting lymphadenopathy.", "Right paratracheal lymphadenopathy."),
            ("Tortuous thoracic aorta.", None),
        ]),
        hedged=([], {MO: None}, [
            ("Prominent {side} hilum, possibly vascular versus adenopathy.", "Prominent {side} hilum; consider CT.",
             [], {MO: None, PVA: None}),
            ("Questionable small hiatal hernia.", None),
        ]),
        stable=([], {MO: 1}, [
            ("Stable mediastinal lymphadenopathy.", "Stable mediastinal lymphadenopathy."),
        ]),
    ),
    "pva": _c(PVA, G_HEART, 7,
        present=([PVA], {}, [
            ("Enlarged central pulmonary arteries, suggesting pulmonary hypertension.",
             "Enlarged pulmonary arteries suggestive of pulmonary hypertension."),
            ("Pulmonary artery enlargement.", "Pulmonary artery enlargement."),
            ("Cephalization of the pulmonary vasculature.", "Pulmonary venous hypertension.", [PVA], {ED: None}),
            ("Pulmonary vascular congestion.", "Pulmonary vascular congestion.", [PVA], {ED: None}),
            ("Mild vascular congestion without frank edema.", "Mild vascular congestion.", [PVA], {}, [ED]),
            ("Prominent main pulmonary artery segment consistent with known pulmonary hypertension.",
             "Known pulmonary hypertension."),
        ]),
        hedged=([], {PVA: None}, [
            ("The pulmonary vasculature is perhaps slightly prominent.", None),
            ("Possible mild vascular congestion.", "Possible mild vascular congestion.", [], {PVA: None, ED: None}),
        ]),
        improving=([], {PVA: 1}, [
            ("Improving pulmonary vascular congestion.", "Improving vascular congestion.", [], {PVA: 1, ED: None}),
        ]),
    ),
}

DEVICE_CONCEPTS = ["ett", "ngt", "picc", "cvc", "pacer", "sternotomy", "chest_tube", "clips", "trach"]
PRIMARY_CONCEPTS = {
    AT: ["atelectasis"], CM: ["cardiomegaly"], CO: ["consolidation"], ED: ["edema"], ECM: ["ecm"],
    FX: ["fracture"], LL: ["lesion"], PE: ["effusion"], PO: ["pleural_other"], LO: ["opacity"],
    PN: ["pneumonia"], PTX: ["pneumothorax"], SD: DEVICE_CONCEPTS, EM: ["emphysema"], ILD: ["ild"],
    CA: ["calcification"], TB: ["airway"], CC: ["cavity"], MO: ["mediastinal"], PVA: ["pva"],
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

# Normal ("filler") sentences: (text, group, negated labels, families)
FILLERS = [
    ("The lungs are clear.", G_LUNG, [LO, CO, PN, ED, AT, LL, ILD, CC, EM], ["lungs"]),
    ("Lungs are clear bilaterally.", G_LUNG, [LO, CO, PN, ED, AT, LL, ILD, CC, EM], ["lungs"]),
    ("No focal consolidation.", G_LUNG, [CO, PN, LO], ["consol"]),
    ("Negative for consolidation.", G_LUNG, [CO, PN, LO], ["consol"]),
    ("No focal airspace opacity.", G_LUNG, [LO, CO, PN], ["consol"]),
    ("No evidence of pneumonia.", G_LUNG, [PN, CO, LO], ["pna"]),
    ("There is no pulmonary edema.", G_LUNG, [ED, LO], ["edema"]),
    ("No suspicious pulmonary nodules or masses.", G_LUNG, [LL, CC], ["nodule"]),
    ("The lungs are well expanded.", G_LUNG, [AT, EM, PTX, PE, CO, PN], ["volumes"]),
    ("Pulmonary vasculature is within normal limits.", G_LUNG, [PVA, ED], ["vasc"]),
    ("No evidence of interstitial lung disease.", G_LUNG, [ILD], ["ild"]),
    ("No pleural effusion or pneumothorax.", G_PLEURA, [PE, PTX], ["eff", "ptx"]),
    ("No pleural effusion.", G_PLEURA, [PE], ["eff"]),
    ("There is no pneumothorax.", G_PLEURA, [PTX], ["ptx"]),
    ("No PTX.", G_PLEURA, [PTX], ["ptx"]),
    ("The costophrenic angles are sharp, without pneumothorax.", G_PLEURA, [PE, PTX], ["eff", "ptx"]),
    ("Costophrenic angles are clear.", G_PLEURA, [PE], ["eff"]),
    ("No pleural abnormality.", G_PLEURA, [PE, PTX, PO], ["eff", "ptx", "pleura"]),
    ("Heart size is normal.", G_HEART, [CM, ECM], ["heart"]),
    ("The cardiomediastinal silhouette is within normal limits.", G_HEART, [CM, ECM, MO], ["heart", "medi"]),
    ("Normal cardiac and mediastinal contours.", G_HEART, [CM, ECM, MO], ["heart", "medi"]),
    ("The heart is not enlarged.", G_HEART, [CM], ["heart"]),
    ("No mediastinal widening.", G_HEART, [ECM], ["medi"]),
    ("Trachea is midline.", G_HEART, [TB], ["trachea"]),
    ("Hilar contours are normal.", G_HEART, [MO, PVA], ["hila"]),
    ("No acute osseous abnormality.", G_BONE, [FX], ["bone"]),
    ("No displaced rib fracture.", G_BONE, [FX], ["bone"]),
    ("Osseous structures are intact.", G_BONE, [FX], ["bone"]),
    ("Visualized osseous structures are unremarkable.", G_BONE, [FX], ["bone"]),
    ("Mild degenerative changes of the thoracic spine.", G_BONE, [], ["spine"]),
    ("The visualized upper abdomen is unremarkable.", G_OTHER, [], ["abdomen"]),
    ("No free air beneath the diaphragm.", G_OTHER, [], ["freeair"]),
    ("Soft tissues are unremarkable.", G_OTHER, [], ["soft"]),
]
IMPRESSION_FILLERS = [  # fillers that read naturally in an impression-only report
    "No pleural effusion or pneumothorax.", "No pleural effusion.", "There is no pneumothorax.",
    "No focal consolidation.", "No evidence of pneumonia.", "There is no pulmonary edema.",
    "The lungs are clear.",
]
TECHNIQUE = [
    "PA and lateral views of the chest.",
    "Single portable AP view of the chest.",
    "Frontal and lateral views of the chest were obtained.",
    "Semi-upright portable radiograph of the chest.",
]
COMPARISON = [
    "Comparison is made with the prior radiograph.",
    "Comparison: chest radiograph from the previous day.",
    "Compared with the prior study.",
    "Comparison: prior chest radiographs.",
]
EXTRA_NEUTRAL = [  # used to lengthen long reports; label-free
    "The patient is slightly rotated.",
    "Lung volumes are low.",
    "Mild dextroscoliosis of the thoracic spine.",
]
NORMAL_IMPRESSIONS = [
    "No acute cardiopulmonary process.",
    "No acute cardiopulmonary abnormality.",
    "Normal chest radiograph.",
    "No radiographic evidence of acute cardiopulmonary disease.",
    "No acute intrathoracic abnormality.",
]

# --------------------------------------------------------------------------------------------
# Chinese template library (same structure; findings joined without spaces)
# --------------------------------------------------------------------------------------------
LIB_ZH = {
    "atelectasis": _c(AT, G_LUNG, 9,
        present=([AT, LO], {}, [
            ("{side}下肺见条索状密度增高影，考虑盘状肺不张。", "{side}下肺盘状肺不张。"),
            ("{lobe}体积缩小，密度增高，呈肺不张改变。", "{lobe}肺不张。"),
        ]),
        hedged=([LO], {AT: None}, [
            ("{side}下肺见斑片状模糊影。", "{side}下肺斑片影，肺不张可能。"),
        ]),
    ),
    "cardiomegaly": _c(CM, G_HEART, 8,
        present=([CM, ECM], {}, [
            ("心影增大，心胸比约{ctr}。", "心影增大。"),
            ("心影向两侧扩大，以左心室增大为主。", "心脏增大。"),
        ]),
        borderline=([], {CM: None, ECM: None}, [
            ("心影饱满。", None),
        ]),
        stable=([], {CM: 1, ECM: 1}, [
            ("心影增大，较前片无明显变化。", "心影增大，同前。"),
        ]),
    ),
    "ecm": _c(ECM, G_HEART, 6,
        present=([ECM], {}, [
            ("上纵隔影增宽。", "上纵隔增宽，建议CT检查。"),
        ]),
    ),
    "consolidation": _c(CO, G_LUNG, 2,
        present=([CO, LO], {}, [
            ("{lobe}见大片实变影，密度均匀。", "{lobe}实变。"),
        ]),
        hedged=([], {CO: None, LO: None}, [
            ("{side}下肺野透亮度稍减低，不除外早期实变。", "{side}下肺可疑实变。"),
        ]),
    ),
    "pneumonia": _c(PN, G_LUNG, 1,
        present=([PN, CO, LO], {}, [
            ("{lobe}见大片实变影，其内可见支气管充气征。", "{lobe}实变，考虑肺炎。"),
            ("{lobe}见斑片状模糊影，边界不清。", "{lobe}炎症。", [PN, LO], {}),
            ("双肺多发斑片状渗出影。", "双肺多发渗出，考虑感染性病变。", [PN, LO], {}),
        ]),
        hedged=([LO], {PN: 1}, [
            ("{side}下肺见斑片状模糊影。", "{side}下肺斑片影，不除外肺炎。"),
        ]),
        improving=([], {PN: 1, LO: 1}, [
            ("{lobe}斑片影较前明显吸收。", "{lobe}肺炎较前好转。"),
        ]),
        resolved=([], {PN: 0, LO: 0}, [
            ("原{lobe}斑片影已基本吸收。", "{lobe}肺炎已吸收。"),
        ]),
    ),
    "edema": _c(ED, G_LUNG, 3,
        present=([ED, LO], {}, [
            ("双肺门影增大模糊，双肺见以肺门为中心的蝶翼状渗出影。", "肺水肿。"),
            ("双肺纹理增多模糊，可见Kerley B线。", "间质性肺水肿。"),
        ]),
        improving=([], {ED: 1, LO: 1}, [
            ("双肺渗出影较前减少。", "肺水肿较前好转。"),
        ]),
    ),
    "effusion": _c(PE, G_PLEURA, 4,
        present=([PE], {}, [
            ("{side}侧胸腔少量积液。", "{side}侧少量胸腔积液。"),
            ("{side}侧肋膈角变钝，考虑少量胸腔积液。", "{side}侧少量胸腔积液。"),
            ("双侧胸腔积液，{side}侧为著。", "双侧胸腔积液。"),
        ]),
        borderline=([], {PE: None}, [
            ("{side}侧肋膈角稍钝。", None),
        ]),
        stable=([], {PE: 1}, [
            ("{side}侧胸腔积液，较前无明显变化。", "{side}侧胸腔积液，同前。"),
        ]),
        resolved=([], {PE: 0}, [
            ("原{side}侧胸腔积液已吸收，肋膈角锐利。", "{side}侧胸腔积液已吸收。"),
        ]),
    ),
    "pleural_other": _c(PO, G_PLEURA, 11,
        present=([PO], {}, [
            ("{side}侧胸膜增厚、粘连。", "{side}侧胸膜增厚粘连。"),
            ("{side}侧胸膜见钙化斑块。", "{side}侧胸膜钙化。"),
        ]),
    ),
    "pneumothorax": _c(PTX, G_PLEURA, 0,
        present=([PTX], {}, [
            ("{side}侧气胸，肺组织压缩约{pct}。", "{side}侧气胸。"),
            ("{side}肺尖见少量无肺纹理透亮区，可见脏层胸膜线。", "{side}侧少量气胸。"),
        ]),
        resolved=([], {PTX: 0}, [
            ("原{side}侧气胸已吸收。", "{side}侧气胸已吸收。"),
        ]),
    ),
    "fracture": _c(FX, G_BONE, 6,
        present=([FX], {}, [
            ("{side}侧第{n}肋骨骨质不连续，断端稍错位。", "{side}侧第{n}肋骨骨折。"),
            ("{side}侧锁骨中段骨折。", "{side}侧锁骨骨折。"),
        ]),
        stable=([], {FX: 1}, [
            ("{side}侧第{n}肋骨陈旧性骨折。", None),
        ]),
    ),
    "lesion": _c(LL, G_LUNG, 5,
        present=([LL], {}, [
            ("{lobe}见一结节影，大小约{cm}，边缘毛糙。", "{lobe}结节，建议CT进一步检查。"),
            ("{lobe}见团块影，大小约{mcm}，可见分叶。", "{lobe}占位性病变，建议进一步检查。"),
        ]),
        hedged=([], {LL: None}, [
            ("{side}{zone}肺野可疑小结节影。", "{side}{zone}肺野可疑结节，建议复查。"),
        ]),
    ),
    "opacity": _c(LO, G_LUNG, 4,
        present=([LO], {}, [
            ("{lobe}见斑片状模糊影。", "{lobe}斑片影，建议治疗后复查。"),
            ("{side}{zone}肺野见片状密度增高影。", "{side}{zone}肺野片状影。"),
        ]),
    ),
    "ett": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("气管插管末端位于隆突上方约{dist}。", "气管插管位置可。"),
        ]),
    ),
    "ngt": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("胃管走行于食管内，末端位于胃内。", None),
        ]),
    ),
    "cvc": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("{side}侧锁骨下中心静脉导管，末端位于上腔静脉。", None),
            ("{side}侧PICC置管，末端位于上腔静脉下段。", None),
        ]),
    ),
    "pacer": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("左侧胸壁见心脏起搏器影，导线末端位于右心室。", "心脏起搏器植入术后。"),
        ]),
    ),
    "sternotomy": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("胸骨术后改变，可见胸骨固定钢丝。", "胸骨正中切开术后改变。"),
        ]),
    ),
    "chest_tube": _c(SD, G_DEV, 12,
        present=([SD], {}, [
            ("{side}侧胸腔引流管置入中。", "{side}侧胸腔闭式引流术后。"),
        ]),
        resolved=([], {SD: 0}, [
            ("{side}侧胸腔引流管已拔除。", None),
        ]),
    ),
    "emphysema": _c(EM, G_LUNG, 10,
        present=([EM], {}, [
            ("双肺透亮度增高，膈肌低平，提示肺气肿。", "肺气肿。"),
            ("{side}上肺见肺大疱影。", "{side}上肺肺大疱。"),
        ]),
    ),
    "subq": _c(None, G_BONE, 7,
        present=([], {}, [
            ("{side}侧胸壁软组织内见积气影。", "{side}侧胸壁皮下气肿。"),
        ]),
    ),
    "ild": _c(ILD, G_LUNG, 10,
        present=([ILD], {LO: None}, [
            ("双下肺见网格状影，考虑间质性病变。", "双下肺间质性改变。"),
            ("双肺弥漫网格影及蜂窝状改变，以下肺胸膜下为著。", "肺间质纤维化。"),
        ]),
    ),
    "calcification": _c(CA, G_HEART, 11,
        present=([CA], {}, [
            ("主动脉结钙化。", None),
            ("{lobe}见小钙化灶。", None),
            ("纵隔内见钙化淋巴结影。", None),
        ]),
    ),
    "airway": _c(TB, G_LUNG, 10,
        present=([TB], {}, [
            ("气管受压向{side}侧偏移。", "气管向{side}侧移位，建议查甲状腺。"),
            ("双下肺纹理增多、紊乱，可见轨道征，考虑支气管扩张。", "双下肺支气管扩张。"),
        ]),
    ),
    "cavity": _c(CC, G_LUNG, 5,
        present=([CC, LL], {}, [
            ("{lobe}见厚壁空洞影，内见气液平面。", "{lobe}空洞性病变。"),
            ("{lobe}见薄壁囊状透亮影。", "{lobe}肺囊肿。", [CC], {}),
        ]),
    ),
    "mediastinal": _c(MO, G_HEART, 7,
        present=([MO], {}, [
            ("{side}肺门增大，考虑淋巴结肿大。", "{side}肺门淋巴结肿大。"),
            ("前纵隔见软组织肿块影。", "前纵隔占位，建议CT检查。", [MO], {ECM: None}),
            ("主动脉迂曲。", None),
        ]),
    ),
    "pva": _c(PVA, G_HEART, 7,
        present=([PVA], {}, [
            ("肺动脉段突出，右下肺动脉增粗，提示肺动脉高压。", "肺动脉高压征象。"),
            ("双肺门影增浓，上肺静脉扩张，考虑肺淤血。", "肺淤血。", [PVA], {ED: None}),
        ]),
    ),
}
PRIMARY_CONCEPTS_ZH = dict(PRIMARY_CONCEPTS)
PRIMARY_CONCEPTS_ZH[SD] = ["ett", "ngt", "cvc", "pacer", "sternotomy", "chest_tube"]
FILLERS_ZH = [
    ("双肺纹理清晰，走行自然。", G_LUNG, [LO, CO, PN, ED, ILD], ["markings"]),
    ("双肺野未见明确实变影。", G_LUNG, [CO, PN, LO], ["consol"]),
    ("双肺未见明显渗出及占位性病变。", G_LUNG, [LO, PN, LL, ED, CC], ["lungs"]),
    ("肺门影不大。", G_HEART, [MO, PVA], ["hila"]),
    ("双侧膈面光整，肋膈角锐利。", G_PLEURA, [PE], ["eff"]),
    ("未见胸腔积液及气胸征象。", G_PLEURA, [PE, PTX], ["eff", "ptx"]),
    ("未见气胸。", G_PLEURA, [PTX], ["ptx"]),
    ("心影大小、形态未见异常。", G_HEART, [CM, ECM], ["heart"]),
    ("纵隔居中，未见增宽。", G_HEART, [ECM, MO], ["medi"]),
    ("气管居中。", G_HEART, [TB], ["trachea"]),
    ("所见骨质未见明显异常。", G_BONE, [FX], ["bone"]),
    ("胸廓对称，骨质结构完整。", G_BONE, [FX], ["bone"]),
]
COMPARISON_ZH = ["与前片比较。", "与前次胸片对比。"]
TECHNIQUE_ZH = ["床旁胸部正位片。", "胸部正位片。"]
NORMAL_IMPRESSIONS_ZH = ["双肺未见明显活动性病变。", "心肺未见明显急性病变。", "心肺膈未见明显异常。", "胸部正位片未见明显异常。",
                         "心、肺、膈未见异常。"]

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
        "side": side, "Side": cap(side), "other": "left" if side == "right" else "right",
        "lobe": lobe, "Lobe": cap(lobe), "LOBE": abbr,
        "zone": rng.choice(["upper", "mid", "lower"]),
        "size": size, "Size": cap(size),
        "rib": ORDINALS[k], "rib2": ORDINALS[k + 1],
        "cm": cm, "Cm": cap(cm),
        "mcm": rng.choice(["3.5 cm", "4.2 cm", "5 cm", "6.1 x 4.8 cm"]),
        "dist": rng.choice(["3 cm", "3.5 cm", "4 cm", "4.5 cm", "5 cm"]),
    }


def slots_zh(rng: random.Random) -> dict:
    side = rng.choice(["左", "右"])
    return {
        "side": side, "lobe": rng.choice(LOBES_ZH[side]), "zone": rng.choice(["上", "中", "下"]),
        "ctr": rng.choice(["0.55", "0.58", "0.62"]), "pct": rng.choice(["20%", "30%", "40%"]),
        "n": rng.choice(["4", "5", "6", "7", "8"]), "cm": rng.choice(["0.8cm", "1.2cm", "1.6cm"]),
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
    return {"slots": s,
        "concept": concept, "status": status, "key": (concept, status, idx), "group": c["group"], "rank": c["rank"],
        "primary": c["primary"], "pos": list(pos), "amb": dict(amb), "neg": neg,
        "f": cap(f.format(**s)), "i": cap(i.format(**s)) if i else None,
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


def compose(lang: Lang, instances: list, rng: random.Random, *, long=False, empty_findings=False,
            normal=False) -> tuple[str, str, dict]:
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
        return (sum(sentence_count(t) for _, _, t in findings_items)
                + sum(sentence_count(t) for t in imp_sents))

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


def build_cohort(lang: Lang, n_reports: int, prefix: str, *, n_normal: int, n_normal_tricky: int,
                 n_long: int, n_empty: int, present_quota: dict, seed: str):
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
        reports.append({"findings": f, "impression": i, "state": state, "instances": instances,
                        "kind": "long" if k in long_idx else ("impression-only" if k in empty_idx else "abnormal")})
    resolvable = [c for c in lang.lib if "resolved" in lang.lib[c]["variants"]]
    for k in range(n_normal):
        r = random.Random(f"{seed}|{lang.code}|normal|{k}")
        instances = []
        if k < n_normal_tricky:
            instances.append(make_instance(lang, resolvable[k % len(resolvable)], "resolved", r))
            accept(lang, instances[-1])
        empty = k >= n_normal - n_empty // 4
        f, i, state = compose(lang, instances, r, normal=True, empty_findings=empty)
        reports.append({"findings": f, "impression": i, "state": state, "instances": instances,
                        "kind": "normal" + (" (resolved finding)" if instances else "")})
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
    lines = ["| label id | display name | positive (>= 4 of 6) | 3-3 ties | ambiguous items |",
             "|---|---|---:|---:|---:|"]
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
    # paraphrase: every label must stay the same
    ("paraphrase", "", "No pleural effusion or pneumothorax.",
     "There is no evidence of pleural effusion or pneumothorax.", "negation reworded; all labels 0"),
    ("paraphrase", "", "The heart is enlarged.", "Cardiomegaly is present.", "synonym for cardiomegaly"),
    ("paraphrase", "", "Right lower lobe consolidation consistent with pneumonia.",
     "RLL consolidation, compatible with pneumonia.", "lobe abbreviation (RLL)"),
    ("paraphrase", "", "Endotracheal tube terminates 4 cm above the carina.",
     "ETT tip is 4 cm above the carina.", "device abbreviation (ETT)"),
    ("paraphrase", "", "The lungs are clear.", "No focal airspace opacity is seen in either lung.",
     "normal lungs, two wordings; all labels 0"),
    ("paraphrase", "", "Small left pleural effusion.",
     "Blunting of the left costophrenic angle consistent with a small effusion.",
     "effusion synonym (costophrenic angle blunting)"),
    ("paraphrase", "", "Hyperinflated lungs with flattened hemidiaphragms, consistent with emphysema.",
     "Emphysema, with hyperinflation and flattening of both hemidiaphragms.", "emphysema, sentence order"),
    ("paraphrase", "", "Mild pulmonary edema.", "Mild interstitial edema is present in both lungs.",
     "edema reworded"),
    ("paraphrase", "", "Left PICC terminates in the SVC.",
     "Left-sided peripherally inserted central catheter with its tip in the superior vena cava.",
     "device abbreviations expanded (PICC, SVC)"),
    ("paraphrase", "", "Healing fracture of the right 6th rib.",
     "Right sixth rib fracture with callus formation, consistent with healing.", "fracture reworded"),
    ("paraphrase", "", "Mild cardiomegaly. Small right pleural effusion.",
     "Small right pleural effusion. The heart is mildly enlarged.", "sentence order swapped"),
    ("paraphrase", "", "Bibasilar atelectasis.", "Atelectasis at both lung bases.", "atelectasis reworded"),
    ("paraphrase", "", "No pneumothorax.", "The study is negative for pneumothorax.",
     "negation form ('negative for'); all labels 0"),
    ("paraphrase", "", "Bibasilar reticular opacities with honeycombing, consistent with pulmonary fibrosis.",
     "Pulmonary fibrosis with honeycombing and reticular opacities at both lung bases.",
     "ILD synonyms, order changed"),
    ("paraphrase", "", "Bilateral hilar lymphadenopathy.", "Enlarged lymph nodes in both hila.",
     "mediastinal other reworded"),
    ("paraphrase", "", "Enlarged central pulmonary arteries, suggesting pulmonary hypertension.",
     "The central pulmonary arteries are enlarged, which suggests pulmonary arterial hypertension.",
     "pulmonary vascular reworded"),
    ("paraphrase", "", "Thin-walled cyst in the left lower lobe.", "A thin-walled cyst is seen in the LLL.",
     "lobe abbreviation (LLL)"),
    ("paraphrase", "", "Bilateral pleural plaques.", "Pleural plaques are present on both sides.",
     "pleural other reworded"),
    ("paraphrase", "", "Tracheal deviation to the right.", "The trachea is deviated to the right.",
     "trachea reworded"),
    ("paraphrase", "", "Heart size is normal. No acute cardiopulmonary process.",
     "Normal cardiac silhouette. No acute cardiopulmonary abnormality.", "normal study reworded; all labels 0"),
    # significant: the labelled finding must change
    ("significant", AT, "Right basilar opacity.", "Right basilar opacity consistent with atelectasis.",
     "cause named: atelectasis added"),
    ("significant", CM, "Heart size is normal.", "The heart is mildly enlarged.",
     "normal vs enlarged heart; enlarged_cardiomediastinum may change too"),
    ("significant", CO, "No focal consolidation.", "Focal consolidation in the left lower lobe.",
     "negated vs present; lung_opacity changes too"),
    ("significant", ED, "Pulmonary vascular congestion without edema.",
     "Pulmonary vascular congestion with interstitial edema.", "edema added; lung_opacity changes too"),
    ("significant", ECM, "Normal mediastinal contours.", "The mediastinum is widened.", "widened mediastinum"),
    ("significant", FX, "No acute rib fracture.", "Acute fracture of the left 7th rib.", "negated vs present"),
    ("significant", LL, "No suspicious pulmonary nodule.", "A 1.5 cm nodule in the right upper lobe.",
     "negated vs present"),
    ("significant", PE, "No pleural effusion.", "Small left pleural effusion.", "negated vs present"),
    ("significant", PO, "No pleural abnormality.", "Left apical pleural thickening.", "pleural thickening added"),
    ("significant", LO, "The lungs are clear.", "Hazy opacity in the left mid lung zone.", "opacity added"),
    ("significant", PN, "Patchy right lower lobe opacity.",
     "Patchy right lower lobe opacity consistent with pneumonia.", "infectious cause named"),
    ("significant", PTX, "No pneumothorax.", "Small right apical pneumothorax.", "negated vs present"),
    ("significant", SD, "The endotracheal tube has been removed.",
     "Endotracheal tube terminates 4 cm above the carina.", "device removed vs in place (temporal wording)"),
    ("significant", EM, "Subcutaneous emphysema along the left chest wall.",
     "Centrilobular emphysema in both upper lobes.", "subcutaneous air is not the emphysema label"),
    ("significant", ILD, "Normal interstitial markings.", "Basal honeycombing consistent with pulmonary fibrosis.",
     "fibrosis added"),
    ("significant", CA, "Noncalcified nodule in the left lower lobe.", "Calcified nodule in the left lower lobe.",
     "calcification added (lung_lesion may change too: calcified nodules count as benign)"),
    ("significant", TB, "The trachea is midline.", "The trachea is deviated to the right.",
     "midline vs deviated trachea"),
    ("significant", CC, "Solid nodule in the right upper lobe.", "Cavitary nodule in the right upper lobe.",
     "cavitation added"),
    ("significant", MO, "No hilar lymphadenopathy.", "Bilateral hilar lymphadenopathy.", "negated vs present"),
    ("significant", PVA, "Normal caliber of the central pulmonary arteries.",
     "Enlarged central pulmonary arteries, suggesting pulmonary hypertension.", "enlarged pulmonary arteries"),
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
        n = sorted(sentence_count(r["findings"]) + sentence_count(r["impression"])
                   for r in reports if r["kind"] in kind_names)
        return f"{n[0]}-{n[-1]} sentences (median {n[len(n) // 2]})"

    return f"""# Demo study: synthetic chest X-ray reports with six simulated readers

**Every report in this folder is synthetic.** The reports were written for the workbench demo by
the script `annotations/make_demo.py`, which composes them from sentence templates written for
this project. They are not patient data, they describe no real patient, and no text was copied
from any real report or public dataset. The readers are simulated too.

This file is generated by the script; do not edit it by hand.

## Files

- `reports.csv`: columns `id,findings,impression`; ids `demo-001` ... `demo-{st['n']:03d}`
  ({st['n']} reports). Findings come first in the usual order (technique/comparison, devices,
  lungs, pleura, heart and mediastinum, bones); `findings` is empty for the impression-only
  reports.
- `readings.csv`: long format, columns `report_id,label,reader,value`; one row per report, label
  and reader ({st['n']} x 20 x 6 = {st['n'] * 120} rows). `label` is a Ran Score label id, `reader`
  is one of `reader-a` ... `reader-f`, `value` is 0 or 1. The 20 read labels are every Ran Score
  label except `no_finding`, which is derived (1 exactly when the other 20 are 0) and is never read.

## The reports

Composition ({st['n']} reports):

| kind | reports | length (findings + impression) |
|---|---:|---|
| ordinary abnormal | {kinds['abnormal']} | {span(['abnormal'])} |
| long abnormal | {kinds['long']} | {span(['long'])} |
| impression only (empty findings) | {kinds['impression-only']} | {span(['impression-only'])} |
| normal | {kinds['normal']} | {span(['normal'])} |
| normal, mentioning a resolved finding or removed device | {kinds['normal (resolved finding)']} | {span(['normal (resolved finding)'])} |

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
  reader then has a small leniency offset ({', '.join(f'{k[-1]} {v:+.2f}' for k, v in READER_LENIENCY.items())})
  so readers differ a little in how they treat uncertainty.

The reference rule of the Ran Score paper (positive when at least 4 of 6 readers mark it,
negative when at least 4 of 6 do not) leaves 3-3 ties undecided: those go to adjudication.

## Counts (by the readers' votes)

Vote splits over all {st['n'] * 20} (report, label) items: {splits_line(st)}.
Reports with no label reaching 4 of 6 (No Finding by majority): {st['normal']} of {st['n']}
({st['normal'] / st['n']:.0%}).

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

**Every report in this folder is synthetic.** The {st['n']} simplified-Chinese chest X-ray reports were
written for the workbench demo by `annotations/make_demo.py` from sentence templates written for this
project (phrasing such as 双肺纹理清晰, 未见胸腔积液, 心影增大, 右下肺斑片影, 不除外肺炎, 气管插管).
They are not patient data and no text was copied from any real report or dataset. This cohort
exists for cross-language validation: the same prompts, the same 20 read labels and the same six
simulated readers as the English demo (`../demo/`).

This file is generated by the script; do not edit it by hand.

## Files

- `reports.csv`: `id,findings,impression` (所见 / 印象), ids `zh-001` ... `zh-{st['n']:03d}`.
- `readings.csv`: `report_id,label,reader,value`, readers `reader-a` ... `reader-f`, the 20 Ran
  Score labels except the derived `no_finding`; value 0 or 1.

Readers are simulated exactly as for the English cohort (see `../demo/README.md`): clear
sentences almost always agree, hedged / borderline / temporal wording (不除外, 可能, 可疑, 饱满,
稍钝, 较前好转, 已吸收, 同前, 陈旧性) makes readers split.

## Counts (by the readers' votes)

Vote splits over all {st['n'] * 20} items: {splits_line(st)}. Reports with no label reaching 4 of 6:
{st['normal']} of {st['n']}.

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
    reports = build_cohort(en, 180, "demo", n_normal=28, n_normal_tricky=7, n_long=14, n_empty=20,
                           present_quota=present_quota, seed=SEED)
    rows = simulate_readings(reports, SEED, "demo")
    st = cohort_stats(reports)
    files["demo/reports.csv"] = csv_text(["id", "findings", "impression"],
                                         [(r["id"], r["findings"], r["impression"]) for r in reports])
    files["demo/readings.csv"] = csv_text(["report_id", "label", "reader", "value"], rows)
    files["demo/README.md"] = readme_demo(reports, st)

    # Chinese cohort
    zh = Lang("zh")
    reports_zh = build_cohort(zh, 24, "zh", n_normal=5, n_normal_tricky=1, n_long=0, n_empty=0,
                              present_quota={lab: (3 if lab == SD else 2 if lab in (AT, CM, PE, PN, LO, ED, CO, PTX, LL)
                                                   else 1) for lab in READ_LABELS},
                              seed=SEED)
    rows_zh = simulate_readings(reports_zh, SEED, "demo-zh")
    st_zh = cohort_stats(reports_zh)
    files["demo-zh/reports.csv"] = csv_text(["id", "findings", "impression"],
                                            [(r["id"], r["findings"], r["impression"]) for r in reports_zh])
    files["demo-zh/readings.csv"] = csv_text(["report_id", "label", "reader", "value"], rows_zh)
    files["demo-zh/README.md"] = readme_zh(reports_zh, st_zh)

    # robustness pairs
    prow, n = [], Counter()
    for kind, lab, a, b, note in PAIRS:
        n[kind] += 1
        pid = f"{'para' if kind == 'paraphrase' else 'sig'}-{n[kind]:02d}"
        prow.append((pid, kind, lab, a, b, note))
    files["robustness/pairs.csv"] = csv_text(["pair_id", "kind", "label", "text_a", "text_b", "note"], prow)
    files["robustness/README.md"] = readme_robustness(n["paraphrase"], n["significant"],
                                                      [p[1] for p in PAIRS if p[0] == "significant"])
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
            print(f"\n[{name}] {st['n']} reports; splits {splits_line(st)}; "
                  f"no finding by majority {st['normal']}; 3-3 ties {sum(st['ties'].values())}")
            for lab in LABEL_IDS:
                print(f"  {lab:30s} positive {st['pos'][lab]:4d}   ties {st['ties'][lab]:3d}")
    if differ:
        print("differs from generated output: " + ", ".join(differ), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
