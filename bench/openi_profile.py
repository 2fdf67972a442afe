"""A prevalence profile measured from OpenI: which Ran Score findings each real report has.

OpenI's `labels14.csv` (the NegBio gold standard) covers 14 ChestX-ray14 labels, and it is itself
derived from the manual MeSH coding of the reports by NLM indexers (README of the datasets): a label
is 1 when its MeSH heading is coded. This module reads the same coding (the `MeSH` column of
`reports.csv`, terms such as "Pleural Effusion/right/small" or "Calcified Granuloma/lung") and maps
it onto the 20 findings of the Ran Score vocabulary (vocab/ranscore-21.yaml; No Finding is derived
from them), so every report gets a 0/1 truth for each finding with OpenI's own prevalences and
co-occurrence (how many reports have no finding at all). The method is checked against
labels14.csv: for the labels that are one MeSH heading in both (atelectasis, pneumonia,
consolidation, edema...) it reproduces the gold standard (check_against_labels14).

The mapping follows the vocabulary's definitions; where a MeSH heading is vague the CheXpert
labeler's phrase lists (../shared/datasets/chexpert-labeler) decided it: "scar" is Lung Opacity,
"pleural scar" Pleural Other. Headings that name none of the 20 findings (normal, low lung volumes,
hyperinflation, degenerative spine, bronchovascular markings, technical quality...) leave a report
with no finding, as Ran Score's No Finding would. Judgement calls are listed in the docs
(docs/adaptive-reading.md, Figures).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

# Ran Score finding -> MeSH terms: "Heading" (any qualifier) or "Heading/first qualifier"
MESH = {
    "atelectasis": ["Pulmonary Atelectasis"],
    "cardiomegaly": ["Cardiomegaly", "Cardiac Shadow/enlarged"],  # "an enlarged cardiac silhouette" (vocabulary)
    "consolidation": ["Consolidation"],
    "edema": ["Pulmonary Edema"],
    "enlarged_cardiomediastinum": ["Mediastinum/prominent"],
    "fracture": ["Fractures, Bone"],
    "lung_lesion": ["Nodule", "Mass"],
    "pleural_effusion": ["Pleural Effusion", "Hydropneumothorax"],
    "pleural_other": ["Thickening/pleura", "Cicatrix/pleura", "Pleura"],
    "lung_opacity": [
        "Opacity/lung",
        "Opacity/pulmonary alveoli",
        "Opacity/retrocardiac",
        "Density/lung",
        "Airspace Disease",
        "Infiltrate",
        "Cicatrix/lung",
    ],
    "pneumonia": ["Pneumonia"],
    "pneumothorax": ["Pneumothorax", "Hydropneumothorax"],
    "support_devices": [
        "Catheters, Indwelling",
        "Implanted Medical Device",
        "Medical Device",
        "Tube, Inserted",
        "Stents",
        "Sutures",
        "Spinal Fusion",
        "Surgical Instruments",
    ],
    "emphysema": ["Emphysema", "Pulmonary Emphysema", "Bullous Emphysema"],
    "interstitial_lung_disease": ["Pulmonary Fibrosis", "Fibrosis", "Lung Diseases, Interstitial"],
    "calcification": ["Calcified Granuloma", "Granuloma", "Granulomatous Disease", "Calcinosis", "Atherosclerosis"],
    "trachea_bronchus": [
        "Trachea",
        "Trachea, Carina",
        "Bronchiectasis",
        "Bronchitis",
        "Bronchiolitis",
        "Thickening/bronchovascular",
        "Thickening/bronchi",
        "Shift/trachea",
    ],
    "cavity_cyst": ["Cysts", "Cavitation"],
    "mediastinal_other": [
        "Hernia, Hiatal",
        "Aorta/tortuous",
        "Aorta/enlarged",
        "Aorta/prominent",
        "Aorta, Thoracic/tortuous",
        "Aorta, Thoracic/enlarged",
        "Aorta, Thoracic/prominent",
        "Aortic Aneurysm",
        "Mediastinum/lymph nodes",
        "Lymph Nodes",
        "Lung/hilum",
    ],
    "pulmonary_vascular_abnormal": [
        "Pulmonary Congestion",
        "Pulmonary Artery",
        "Hypertension, Pulmonary",
        "Lung/blood vessels",
    ],
}
# qualifiers that take a heading out of its finding (the vocabulary's exclusions)
EXCEPT = {
    "Surgical Instruments": {"abdomen", "breast"},  # cholecystectomy and breast clips are no support device
    "Calcinosis": {"abdomen", "ribs", "spine", "mitral valve"},  # calcification(lung and mediastinal) only
}
# the demo's convention (annotations/demo/README.md): these findings also make Lung Opacity positive
OPACITY_FROM = ("atelectasis", "consolidation", "edema", "pneumonia")
# labels14.csv column -> the finding it is (Mass and Nodule are both Lung Lesion; Infiltration and
# Pleural_Thickening are one heading among several of theirs; Hernia is hiatal hernia, in mediastinal other)
LABELS14 = {
    "Atelectasis": "atelectasis",
    "Cardiomegaly": "cardiomegaly",
    "Effusion": "pleural_effusion",
    "Pneumonia": "pneumonia",
    "Pneumothorax": "pneumothorax",
    "Consolidation": "consolidation",
    "Edema": "edema",
    "Emphysema": "emphysema",
    "Fibrosis": "interstitial_lung_disease",
}


def dataset_dir() -> Path | None:
    """The OpenI folder (WORKBENCH_DATASETS, else ../shared/datasets beside the repository), None when absent."""
    bases = [os.environ.get("WORKBENCH_DATASETS"), ROOT.parent / "shared" / "datasets", "/work/shared/datasets"]
    for base in filter(None, bases):
        folder = Path(base) / "openi"
        if (folder / "reports.csv").exists() and (folder / "labels14.csv").exists():
            return folder
    return None


def _findings(mesh: str) -> set[str]:
    """The Ran Score findings one MeSH cell names."""
    found = set()
    for term in str(mesh or "").split(";"):
        parts = [p.strip() for p in term.split("/")]
        heading, qualifier = parts[0], (parts[1].lower() if len(parts) > 1 else "")
        if qualifier in EXCEPT.get(heading, ()):
            continue
        found |= {label for label, terms in _TERMS.items() if heading in terms or (heading, qualifier) in terms}
    if found & set(OPACITY_FROM):
        found.add("lung_opacity")
    return found


# MESH as sets: a heading alone, or (heading, lower-case qualifier)
_TERMS = {
    label: {t if "/" not in t else (t.split("/")[0], t.split("/")[1].lower()) for t in terms}
    for label, terms in MESH.items()
}


def truth(folder: Path, labels: list[str]) -> pd.DataFrame:
    """Per OpenI report (index CXR<uid>): 0/1 for each of the given Ran Score findings."""
    reports = pd.read_csv(folder / "reports.csv")
    rows = [[int(lab in found) for lab in labels] for found in map(_findings, reports["MeSH"].fillna(""))]
    return pd.DataFrame(rows, columns=labels, index="CXR" + reports["uid"].astype(str))


def report_texts(folder: Path) -> pd.DataFrame:
    """OpenI's reports as a reports file (id CXR<uid>, findings, impression), those with any text."""
    reports = pd.read_csv(folder / "reports.csv")
    out = pd.DataFrame(
        {
            "id": "CXR" + reports["uid"].astype(str),
            "findings": reports["findings"].fillna(""),
            "impression": reports["impression"].fillna(""),
        }
    )
    return out[(out["findings"].str.strip() != "") | (out["impression"].str.strip() != "")]


def labels14_figures(folder: Path) -> dict:
    """The gold standard's own figures: per-label prevalence, the share of reports with no positive label, and
    `any`: the share of reports positive for any of some columns."""
    gold = pd.read_csv(folder / "labels14.csv")
    cols = [c for c in gold.columns if c not in ("filename", "normal")]
    return {
        "prevalence": gold[cols].mean(),
        "none": float((gold[cols].sum(axis=1) == 0).mean()),
        "any": lambda names: float((gold[names].sum(axis=1) > 0).mean()),
        "normal": float(gold["normal"].mean()),
        "reports": len(gold),
    }


def check_against_labels14(folder: Path, table: pd.DataFrame) -> pd.Series:
    """Per labels14 label with one finding of its own: the share of reports where the MeSH mapping agrees."""
    gold = pd.read_csv(folder / "labels14.csv").set_index("filename").reindex(table.index)
    agree = {col: float((gold[col].to_numpy() == table[lab].to_numpy()).mean()) for col, lab in LABELS14.items()}
    lesion = ((gold["Mass"] + gold["Nodule"]) > 0).astype(int)
    agree["Mass or Nodule"] = float((lesion.to_numpy() == table["lung_lesion"].to_numpy()).mean())
    return pd.Series(agree)


def sample_rows(table: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """n reports of the table drawn without replacement (seeded): OpenI's mix of findings at the bench's size."""
    rng = np.random.default_rng(seed)
    return table.iloc[np.sort(rng.choice(len(table), size=min(n, len(table)), replace=False))]
