"""Stratified tuning/validation splits of a development cohort, reproducible by seed.

A prompt tuned and measured on the same reports looks better than it is (each accepted change was
chosen because it helped on those very reports). Splitting the development cohort into a tuning
part (what the engineer and the proposers may read) and a validation part (only ever measured)
gives an honest figure. The split is stratified so that every label's positives are spread over
both parts: a rare label with all its positives in one part could not be tuned or checked.

The method is iterative stratification (Sechidis et al., 2011): the label with the fewest
positives still unplaced goes first, each of its reports to the part that most lacks that label's
positives; reports with no positive label fill the parts to their target sizes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.errors import UserError

PARTS = ("tuning", "validation")


def stratified_split(reference: pd.DataFrame, validation: float, seed: int = 0) -> dict[str, str]:
    """report id -> "tuning" or "validation"; reference is reports x labels 0/1 (NaN = unknown).

    The same reference, fraction and seed always give the same split (report order does not matter).
    """
    if not 0 < validation < 1:
        raise UserError(f"the validation fraction must be between 0 and 1 (exclusive), got {validation}")
    if reference.index.has_duplicates:
        raise ValueError("reference has a report id twice")
    ref = reference.sort_index()
    ids = [str(i) for i in ref.index]
    positives = ref.to_numpy(dtype=float) == 1
    rng = np.random.default_rng(seed)
    share = np.array([1 - validation, validation])
    need_label = share[:, None] * positives.sum(axis=0)[None, :]  # parts x labels still wanted
    need_total = share * len(ids)
    part = np.full(len(ids), -1)
    unplaced = positives.copy()
    while unplaced.any():
        counts = unplaced.sum(axis=0)
        label = int(np.argmin(np.where(counts > 0, counts, np.iinfo(np.int64).max)))
        rows = np.flatnonzero(unplaced[:, label])
        for row in rng.permutation(rows):
            k = _choose(need_label[:, label], need_total, rng)
            part[row] = k
            need_label[k] -= positives[row]
            need_total[k] -= 1
            unplaced[row] = False
    rest = rng.permutation(np.flatnonzero(part < 0))
    for row in rest:
        part[row] = _choose(need_total, need_total, rng)
        need_total[part[row]] -= 1
    return {rid: PARTS[k] for rid, k in zip(ids, part, strict=False)}


def _choose(need: np.ndarray, need_total: np.ndarray, rng: np.random.Generator) -> int:
    """The part that most lacks what is being placed; ties to the part furthest from its size, then at random."""
    best = np.flatnonzero(need == need.max())
    if len(best) > 1:
        totals = need_total[best]
        best = best[totals == totals.max()]
    return int(best[0] if len(best) == 1 else rng.choice(best))


def split_summary(reference: pd.DataFrame, assignment: dict[str, str]) -> pd.DataFrame:
    """Per label: positives in each part and the share in validation (plus an "all labels" row of reports)."""
    parts = pd.Series(assignment).reindex(reference.index)
    rows = []
    for label in reference.columns:
        pos = reference[label] == 1
        row = {"label": label}
        for p in PARTS:
            row[f"{p}_positives"] = int((pos & (parts == p)).sum())
        total = row["tuning_positives"] + row["validation_positives"]
        row["validation_share"] = row["validation_positives"] / total if total else float("nan")
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["reports"] = {p: int((parts == p).sum()) for p in PARTS}
    return out
