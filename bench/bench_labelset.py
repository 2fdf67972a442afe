"""Benchmark of the offline label-set miner on the OpenI reports (their findings and impression).

Prints the seconds (wall and CPU) and peak memory of mining 3,080 reports offline (target: 3,000 reports
in <= 10 s and <= 500 MB); the recall of OpenI's own coding (the `Problems` column: findings coded by
OpenI's indexers, not by us) among the top 40 candidates, over the coded findings with prevalence >= 1%
(anatomy-only headings, "normal", "No Indexing" and the image-quality code aside), reading each
candidate's name and its 10 most frequent forms with the matching rule printed below; the additions
against chexpert-14; and the share of affirmed mentions the top 40 cover.
Run alone: ``python bench/bench_labelset.py [--data FOLDER] [--top 40]``.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import resource
import sys
import time
import tracemalloc
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S, TARGET_MB, TARGET_RECALL = 10.0, 500.0, 0.80
# OpenI headings that name a place or a structure, not a finding, and codes that are no finding
ANATOMY_ONLY = {
    "lung",
    "thoracic vertebrae",
    "spine",
    "aorta",
    "aorta, thoracic",
    "diaphragm",
    "costophrenic angle",
    "cardiac shadow",
    "mediastinum",
    "heart",
    "pulmonary artery",
    "lumbar vertebrae",
    "shoulder",
}
NOT_FINDINGS = {"normal", "no indexing", "technical quality of image unsatisfactory"}
# The matching rule: a coded heading is recovered when a candidate's name or one of its 10 most frequent
# forms contains a word starting with one of these stems. The stems are the heading's own words, plus the
# words radiologists write for the MeSH headings whose names are not report language (Cicatrix is written
# "scar", Calcinosis "calcified"/"calcification", Surgical Instruments "clips"/"sutures"/"wires").
MATCHING_RULE = {
    "Opacity": ["opaci"],
    "Cardiomegaly": ["cardiomegaly", "enlarged heart", "enlarged cardiac", "cardiac enlargement"],
    "Pulmonary Atelectasis": ["atelecta"],
    "Calcinosis": ["calcif"],
    "Calcified Granuloma": ["granulom"],
    "Cicatrix": ["scar"],
    "Markings": ["marking"],
    "Atherosclerosis": ["atheroscl"],
    "Catheters, Indwelling": ["catheter", "picc", "port", "central line"],
    "Density": ["densit"],
    "Granulomatous Disease": ["granulom"],
    "Airspace Disease": ["airspace"],
    "Deformity": ["deform"],
    "Nodule": ["nodul"],
    "Scoliosis": ["scolio"],
    "Surgical Instruments": ["clip", "suture", "staple", "wire"],
    "Pleural Effusion": ["effusion"],
    "Fractures, Bone": ["fractur"],
    "Pulmonary Congestion": ["congest"],
    "Implanted Medical Device": ["pacemaker", "device", "defibrillator", "stimulator"],
    "Osteophyte": ["osteophyt"],
    "Spondylosis": ["spondylo", "degenerative"],
    "Emphysema": ["emphysem"],
    "Infiltrate": ["infiltrat"],
    "Granuloma": ["granulom"],
    "Thickening": ["thicken"],
    "Hernia, Hiatal": ["hernia"],
    "Pneumonia": ["pneumonia"],
    "Pulmonary Disease, Chronic Obstructive": ["copd", "obstructive"],
    "Pulmonary Edema": ["edema", "oedema"],
}


def data_folder(given: str | None) -> pathlib.Path:
    """The OpenI folder: --data, else ../shared/datasets/openi beside the checkout or its parent."""
    options = [pathlib.Path(given)] if given else [p / "shared" / "datasets" / "openi" for p in ROOT.parents[:3]]
    for folder in options:
        if (folder / "reports.csv").exists():
            return folder
    sys.exit(f"OpenI reports.csv not found in {', '.join(map(str, options))}")


def coded_findings(problems: list[str], min_share: float) -> dict[str, int]:
    """Coded headings with their report counts, prevalence >= min_share, anatomy and non-findings aside."""
    counts: Counter = Counter()
    for cell in problems:
        counts.update({t.strip() for t in str(cell or "").split(";") if t.strip()})
    n = len(problems)
    return {
        t: c
        for t, c in counts.most_common()
        if c >= min_share * n and t.lower() not in ANATOMY_ONLY and t.lower() not in NOT_FINDINGS
    }


def matches(heading: str, candidate) -> bool:
    """The matching rule for one heading and one candidate (name and 10 most frequent forms)."""
    stems = MATCHING_RULE.get(heading, [heading.lower()])
    words = [candidate.name] + [t for t, _ in candidate.forms[:10]]
    return any(re.search(rf"(?<![a-z]){re.escape(s)}", w) for s in stems for w in words)


def main() -> None:
    """Mine, measure and print."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=None)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    import pandas as pd
    import yaml

    from workbench.core import labelset as ls
    from workbench.core.prompts import parse_task
    from workbench.core.vocab import parse_vocabulary
    from workbench.labeller import mining

    frame = pd.read_csv(data_folder(args.data) / "reports.csv").fillna("")
    reports = [(str(r.uid), f"{r.findings}\n{r.impression}".strip()) for r in frame.itertuples()]
    task = parse_task(yaml.safe_load((ROOT / "prompts" / "chexpert-14" / "_task.yaml").read_text()))
    mining.Miner(task)  # imports (scikit-learn's stop words) are not mining
    wall, cpu = time.perf_counter(), time.process_time()
    candidates = mining.mine(reports, task, min_reports=2)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tracemalloc.start()  # a second pass for memory: tracing slows Python down
    mining.mine(reports, task, min_reports=2)
    traced = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"mined {len(reports)} reports offline: {wall:.2f} s wall, {cpu:.2f} s CPU (target <= {TARGET_S:.0f} s)")
    print(f"peak memory: {traced:.0f} MB traced in mining, {rss:.0f} MB process RSS (target <= {TARGET_MB:.0f} MB)")
    print(f"{len(candidates)} candidates with >= 2 affirmed reports")

    top = candidates[: args.top]
    print(f"\ntop {args.top} candidates (affirmed / negated / uncertain reports; first forms):")
    for i, c in enumerate(top, 1):
        forms = ", ".join(t for t, _ in c.forms[:4])
        print(
            f"{i:3d}. {c.name:32.32s} {c.affirmed_reports:4d} {c.negated_reports:5d} {c.uncertain_reports:4d}  {forms}"
        )

    coded = coded_findings(frame["Problems"].tolist(), 0.01)
    print(f"\nmatching rule: a coded heading is recovered when a top-{args.top} candidate's name or one of its 10")
    print("most frequent forms has a word starting with one of the heading's stems:")
    hits = 0
    for heading, n in coded.items():
        found = [i for i, c in enumerate(top, 1) if matches(heading, c)]
        hits += bool(found)
        where = f"#{found[0]} {top[found[0] - 1].name}" if found else "MISSED"
        print(f"  {heading:40.40s} {n:4d} reports  stems {MATCHING_RULE.get(heading)}  -> {where}")
    recall = hits / len(coded)
    print(f"recall of OpenI's coding (prevalence >= 1%, {len(coded)} headings) among the top {args.top}: ", end="")
    print(f"{hits}/{len(coded)} = {recall:.0%} (target >= {TARGET_RECALL:.0%})")

    vocab = parse_vocabulary(yaml.safe_load((ROOT / "vocab" / "chexpert-14.yaml").read_text()))
    labels = [
        ls.LabelWords(
            lab.id, lab.name, tuple(lab.look_for) + mining.prompt_look_for(ROOT / "prompts" / "chexpert-14", lab.id)
        )
        for lab in vocab.labels
        if not lab.derived
    ]
    lex = mining.lexicon(task)
    cmp = ls.compare(top, labels, lex, vocabulary="chexpert-14")
    print(f"\nagainst chexpert-14 (top {args.top}): {len(cmp.additions)} additions")
    for c in cmp.additions:
        print(f"  + {c.name} ({c.affirmed_reports} reports)")
    print(f"unsupported labels: {', '.join(cmp.unsupported) or 'none'}")
    share = ls.top_share(candidates, args.top)
    print(f"share of affirmed mentions covered by the top {args.top}: {share:.0%}")


if __name__ == "__main__":
    main()
