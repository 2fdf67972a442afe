"""A generated study of realistic size for benchmarks: 3,000 reports x 6 readers x 21 labels."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from workbench.shipped import shipped_dir

PHRASES = [
    "pleural effusion",
    "cardiomegaly",
    "consolidation",
    "pulmonary edema",
    "atelectasis",
    "pneumothorax",
    "rib fracture",
    "lung nodule",
    "emphysema",
    "interstitial fibrosis",
    "calcified granuloma",
    "endotracheal tube",
    "pleural thickening",
    "opacity",
    "pneumonia",
    "bronchiectasis",
    "cavity",
    "hilar adenopathy",
    "vascular congestion",
    "widened mediastinum",
    "mass",
]


def vocabulary_21() -> dict:
    """The Ran Score label set with every label asked (so 6 x 21 readings per report)."""
    data = yaml.safe_load((shipped_dir("vocab") / "ranscore-21.yaml").read_text())
    data["id"] = "bench-21"
    for lab in data["labels"]:
        lab.pop("derived", None)
        lab.pop("ignore_for_derived", None)
    return data


def write_study_inputs(folder: Path, n_reports: int = 3000, n_readers: int = 6, seed: int = 0) -> dict:
    """Write vocabulary, prompt set, reports and long readings files; return their paths."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary_21()
    (folder / "vocab.yaml").write_text(yaml.safe_dump(vocab, sort_keys=False))
    prompts = folder / "prompts"
    if prompts.exists():
        shutil.rmtree(prompts)
    shutil.copytree(shipped_dir("prompts") / "ranscore-21", prompts)
    nf = yaml.safe_load((prompts / "atelectasis.yaml").read_text())
    nf.update(
        label="no_finding",
        task="Does the report describe no abnormality at all?",
        definition="No abnormal finding.",
        look_for=["no acute cardiopulmonary"],
        examples=[],
        do_not_label_when=[],
    )
    (prompts / "no_finding.yaml").write_text(yaml.safe_dump(nf, sort_keys=False))
    ids = [lab["id"] for lab in vocab["labels"]]
    truth = rng.random((n_reports, len(ids))) < 0.12
    texts = []
    for i in range(n_reports):
        parts = [("Small " if j % 2 else "Mild ") + PHRASES[j] + "." for j in np.flatnonzero(truth[i])]
        parts += ["No " + PHRASES[j] + "." for j in rng.choice(len(ids), 3, replace=False) if not truth[i, j]]
        texts.append(" ".join(parts) or "No acute cardiopulmonary process.")
    report_ids = [f"b{i:05d}" for i in range(n_reports)]
    pd.DataFrame({"id": report_ids, "findings": texts, "impression": "See findings."}).to_csv(
        folder / "reports.csv", index=False
    )
    flips = rng.random((n_reports, n_readers, len(ids))) < 0.05
    values = truth[:, None, :] ^ flips
    r, k, j = np.meshgrid(np.arange(n_reports), np.arange(n_readers), np.arange(len(ids)), indexing="ij")
    readings = pd.DataFrame(
        {
            "report_id": np.asarray(report_ids)[r.ravel()],
            "label": np.asarray(ids)[j.ravel()],
            "reader": np.asarray([f"reader-{c}" for c in "abcdefgh"[:n_readers]])[k.ravel()],
            "value": values.ravel().astype(int),
        }
    )
    readings.to_csv(folder / "readings.csv", index=False)
    return {
        "vocab": folder / "vocab.yaml",
        "prompts": prompts,
        "reports": folder / "reports.csv",
        "readings": folder / "readings.csv",
        "n_readings": len(readings),
    }
