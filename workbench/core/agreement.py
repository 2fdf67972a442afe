"""How far the radiologists agree with each other and with the reference they produce.

The reference is only as trustworthy as the readings behind it, and a labeller cannot be
expected to beat the readers on labels where the readers themselves disagree. This module
turns long-format readings (report_id, label, reader, value 0/1) into: Fleiss' kappa per label,
Cohen's kappa per reader pair, each reader's accuracy against the reference, and the vote split
per item (unanimous or not, used to report labeller accuracy on clear versus contested items).

Degenerate cases (one category only, fewer than two readers, unequal numbers of readers per
item) give NaN with a plain-language ``note``, never a crash or an unexplained NaN.

Readings are coded once into integer arrays (pandas.factorize) and every statistic is a
bincount over those codes, so 3,000 reports x 21 labels x 6 readers take a fraction of a second.
The module is pure: numpy and pandas only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from workbench.core.metrics import kappa_from_counts, proportion_ci_arrays

__all__ = ["fleiss_kappa_table", "pairwise_cohen", "reader_vs_reference", "vote_split"]

READING_COLUMNS = ("report_id", "label", "reader", "value")


@dataclass(frozen=True)
class _Coded:
    """Readings as integer codes; an item is one (label, report) pair, coded label-major."""

    labels: pd.Index
    reports: pd.Index
    readers: pd.Index
    label: np.ndarray
    report: np.ndarray
    reader: np.ndarray
    value: np.ndarray

    @property
    def n_items(self) -> int:
        return len(self.labels) * len(self.reports)

    @property
    def item(self) -> np.ndarray:
        return self.label * len(self.reports) + self.report


def _values(series: pd.Series, name: str, allow_nan: bool) -> np.ndarray:
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    missing = np.isnan(values) & series.notna().to_numpy()
    bad = (~np.isnan(values) & (values != 0) & (values != 1)) | missing
    if not allow_nan:
        bad |= np.isnan(values)
    if bad.any():
        raise ValueError(f"{name} values must be 0 or 1{' or NaN' if allow_nan else ''}")
    return values


def _code(readings: pd.DataFrame) -> _Coded:
    """Validate readings and code them; rows with a missing value (not read) are dropped."""
    missing = [col for col in READING_COLUMNS if col not in readings.columns]
    if missing:
        raise ValueError(f"readings need columns {list(READING_COLUMNS)}; missing {missing}")
    values = _values(readings["value"], "reading", allow_nan=True)
    keep = ~np.isnan(values)
    # Labels and reports keep their first-seen order (vocabulary order); readers are sorted so
    # reader pairs are named the same way whatever the row order.
    # Factorising the Series (not .to_numpy()) keeps pandas' fast string path.
    frame = readings if keep.all() else readings.loc[keep]
    label, labels = pd.factorize(frame["label"])
    report, reports = pd.factorize(frame["report_id"])
    reader, readers = pd.factorize(frame["reader"], sort=True)
    coded = _Coded(pd.Index(labels), pd.Index(reports), pd.Index(readers), label, report, reader, values[keep])
    if _has_duplicates(coded.item * max(len(readers), 1) + reader):
        raise ValueError("readings hold more than one value for some (report_id, label, reader)")
    return coded


def _has_duplicates(keys: np.ndarray) -> bool:
    """Whether any non-negative integer key repeats (bincount when dense, else a sort)."""
    if keys.size == 0:
        return False
    if keys.max() < 4 * keys.size + 1_000_000:
        return bool(np.bincount(keys).max() > 1)
    ordered = np.sort(keys)
    return bool(np.any(ordered[1:] == ordered[:-1]))


def _per_item(coded: _Coded) -> tuple[np.ndarray, np.ndarray]:
    """Positive readings and number of readers for every possible item (0 where unread)."""
    positives = np.bincount(coded.item, weights=coded.value, minlength=coded.n_items)
    readers = np.bincount(coded.item, minlength=coded.n_items)
    return positives, readers


def _label_of_item(coded: _Coded) -> np.ndarray:
    return np.repeat(np.arange(len(coded.labels)), len(coded.reports))


# ---------------------------------------------------------------------------------------------
# Fleiss' kappa
# ---------------------------------------------------------------------------------------------


def _modal_readers(label_of: np.ndarray, readers: np.ndarray, n_labels: int) -> np.ndarray:
    """Most common number of readers among items read by at least two, per label (ties: larger)."""
    width = int(readers.max(initial=0)) + 1
    ok = readers >= 2
    table = np.bincount(label_of[ok] * width + readers[ok], minlength=n_labels * width).reshape(n_labels, width)
    modal = width - 1 - np.argmax(table[:, ::-1], axis=1)
    return np.where(table.sum(axis=1) > 0, modal, 0)


def fleiss_kappa_table(readings: pd.DataFrame) -> pd.DataFrame:
    """Fleiss' kappa per label over items with the modal number of readers, with a note.

    Fleiss' kappa needs the same number of readers on every item (statsmodels asserts it).
    Rather than a generalised form, which has several incompatible variants, only the items
    read by the label's most common number of readers (>= 2; ties go to the larger number)
    are used, so the value equals statsmodels' fleiss_kappa on exactly those items; the note
    says how many items were dropped. When every used reading is the same category the chance
    agreement is 1 and kappa is undefined (NaN) although agreement is perfect: the note says so.
    """
    coded = _code(readings)
    n_labels = len(coded.labels)
    positives, readers = _per_item(coded)
    label_of = _label_of_item(coded)
    read = readers > 0
    modal = _modal_readers(label_of, readers, n_labels)
    m = modal[label_of].astype(float)
    used = read & (readers == modal[label_of]) & (m >= 2)
    n_used = np.bincount(label_of[used], minlength=n_labels)
    n_read = np.bincount(label_of[read], minlength=n_labels)
    # Per-item agreement P_i = sum_j n_ij (n_ij - 1) / (m (m - 1)) over the two categories.
    neg = readers - positives
    with np.errstate(divide="ignore", invalid="ignore"):
        p_item = (positives**2 + neg**2 - m) / (m * (m - 1))
    p_mean = _label_mean(p_item, used, label_of, n_labels, n_used)
    pos_rate = _label_mean(positives / np.where(m > 0, m, 1), used, label_of, n_labels, n_used)
    p_exp = pos_rate**2 + (1 - pos_rate) ** 2
    undefined = ~(n_used > 0) | (p_exp == 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(undefined, np.nan, (p_mean - p_exp) / np.where(undefined, 1.0, 1 - p_exp))
    min_readers, max_readers = _reader_range(label_of[read], readers[read], n_labels)
    notes = _fleiss_notes(n_used, n_read, modal, pos_rate, max_readers)
    return pd.DataFrame(
        {
            "fleiss_kappa": kappa,
            "kappa_undefined": undefined,
            "observed_agreement": p_mean,
            "positive_rate": pos_rate,
            "n_items": n_used,
            "n_items_dropped": n_read - n_used,
            "n_readers": modal,
            "n_readers_min": min_readers,
            "n_readers_max": max_readers,
            "note": notes,
        },
        index=pd.Index(coded.labels, name="label"),
    )


def _label_mean(x: np.ndarray, used: np.ndarray, label_of: np.ndarray, n_labels: int, counts: np.ndarray) -> np.ndarray:
    total = np.bincount(label_of[used], weights=x[used], minlength=n_labels)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counts > 0, total / np.maximum(counts, 1), np.nan)


def _reader_range(label_of: np.ndarray, readers: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    low = np.full(n_labels, np.iinfo(np.int64).max)
    high = np.zeros(n_labels, dtype=np.int64)
    np.minimum.at(low, label_of, readers)
    np.maximum.at(high, label_of, readers)
    return np.where(high > 0, low, 0), high


def _fleiss_notes(n_used, n_read, modal, pos_rate, max_readers) -> np.ndarray:
    notes = []
    for used, read, m, rate, top in zip(n_used, n_read, modal, pos_rate, max_readers, strict=False):
        parts = []
        if read == 0:
            parts.append("no readings")
        elif used == 0:
            parts.append(f"fewer than 2 readers on every item (at most {top}): kappa needs at least 2")
        elif rate in (0.0, 1.0):
            parts.append(f"all readings are {int(rate)}; agreement is perfect but kappa is undefined")
        if used and read > used:
            parts.append(
                f"{read - used} of {read} items dropped: they had a number of readers other than "
                f"the usual {m} (Fleiss' kappa needs the same number on every item)"
            )
        notes.append("; ".join(parts))
    return np.array(notes, dtype=object)


# ---------------------------------------------------------------------------------------------
# Cohen's kappa: reader pairs and readers against the reference
# ---------------------------------------------------------------------------------------------


def _dense(coded: _Coded) -> np.ndarray:
    """Items x readers matrix of values, NaN where the reader did not read the item."""
    grid = np.full((coded.n_items, len(coded.readers)), np.nan)
    grid[coded.item, coded.reader] = coded.value
    return grid


def _counts_by(group: np.ndarray, first: np.ndarray, second: np.ndarray, size: int) -> tuple[np.ndarray, ...]:
    """2x2 counts (tp, fp, fn, tn) per group, first = rows; NaN on either side is skipped."""
    cells = (
        (first == 1) & (second == 1),
        (first == 0) & (second == 1),
        (first == 1) & (second == 0),
        (first == 0) & (second == 0),
    )
    return tuple(np.bincount(group[cell], minlength=size) for cell in cells)


def pairwise_cohen(readings: pd.DataFrame) -> pd.DataFrame:
    """Cohen's kappa per label and reader pair over the items both read, with a note."""
    coded = _code(readings)
    grid = _dense(coded)
    label_of = _label_of_item(coded)
    n_labels = len(coded.labels)
    frames = []
    for i, j in combinations(range(len(coded.readers)), 2):
        names = (str(coded.readers[i]), str(coded.readers[j]))
        tp, fp, fn, tn = _counts_by(label_of, grid[:, i], grid[:, j], n_labels)
        kappa, undefined, notes = kappa_from_counts(tp, fp, fn, tn, names=names)
        n = tp + fp + fn + tn
        frames.append(
            pd.DataFrame(
                {
                    "label": coded.labels,
                    "reader_a": coded.readers[i],
                    "reader_b": coded.readers[j],
                    "kappa": kappa,
                    "kappa_undefined": undefined,
                    "n_items": n,
                    "agreement": np.where(n > 0, (tp + tn) / np.maximum(n, 1), np.nan),
                    "note": np.where(n == 0, "no items read by both", notes),
                }
            )
        )
    if not frames:
        return pd.DataFrame(
            columns=["label", "reader_a", "reader_b", "kappa", "kappa_undefined", "n_items", "agreement", "note"]
        )
    # Label-major order, pairs in reader order within a label.
    table = pd.concat(frames, ignore_index=True)
    order = np.argsort(np.tile(np.arange(n_labels), len(frames)), kind="stable")
    return table.iloc[order].reset_index(drop=True)


def _reference_per_item(coded: _Coded, reference: pd.DataFrame) -> np.ndarray:
    """Reference value for every coded item, NaN where undecided or absent."""
    missing = [col for col in ("report_id", "label", "value") if col not in reference.columns]
    if missing:
        raise ValueError(f"reference needs columns report_id, label, value; missing {missing}")
    values = _values(reference["value"], "reference", allow_nan=True)
    label = coded.labels.get_indexer(reference["label"].to_numpy())
    report = coded.reports.get_indexer(reference["report_id"].to_numpy())
    known = (label >= 0) & (report >= 0)
    item = label[known] * len(coded.reports) + report[known]
    if _has_duplicates(item):
        raise ValueError("reference holds more than one value for some (report_id, label)")
    per_item = np.full(coded.n_items, np.nan)
    per_item[item] = values[known]
    return per_item


def reader_vs_reference(readings: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Each reader's accuracy (Wilson interval) and Cohen's kappa against the reference, per label.

    Only items with a decided reference (value not NaN) count. The reader's own reading is part
    of the majority that made the reference, so these figures are biased upwards.
    """
    coded = _code(readings)
    ref = _reference_per_item(coded, reference)[coded.item]
    n_labels, n_readers = len(coded.labels), len(coded.readers)
    group = coded.reader * n_labels + coded.label
    tp, fp, fn, tn = _counts_by(group, ref, coded.value, n_labels * n_readers)
    n = tp + fp + fn + tn
    correct = tp + tn
    lo, hi = proportion_ci_arrays(correct, n, "wilson")
    kappa, undefined, notes = kappa_from_counts(tp, fp, fn, tn, names=("reference", "reader"))
    return pd.DataFrame(
        {
            "reader": np.repeat(coded.readers.to_numpy(), n_labels),
            "label": np.tile(coded.labels.to_numpy(), n_readers),
            "n": n,
            "correct": correct,
            "accuracy": np.where(n > 0, correct / np.maximum(n, 1), np.nan),
            "accuracy_lo": lo,
            "accuracy_hi": hi,
            "kappa": kappa,
            "kappa_undefined": undefined,
            "note": np.where(n == 0, "no decided reference items read by this reader", notes),
        }
    )


# ---------------------------------------------------------------------------------------------
# Vote split
# ---------------------------------------------------------------------------------------------


def vote_split(readings: pd.DataFrame) -> pd.DataFrame:
    """Per (report_id, label): positive readings, number of readers, and whether unanimous.

    Pivot it to a reports x labels mask for `metrics.subset_accuracy`:
    ``vote_split(r).pivot(index="report_id", columns="label", values="unanimous")``.
    """
    coded = _code(readings)
    positives, readers = _per_item(coded)
    read = np.flatnonzero(readers > 0)
    n_reports = len(coded.reports)
    pos, count = positives[read].astype(np.int64), readers[read]
    return pd.DataFrame(
        {
            "report_id": coded.reports.to_numpy()[read % n_reports],
            "label": coded.labels.to_numpy()[read // n_reports],
            "positives": pos,
            "n_readers": count,
            "unanimous": (pos == 0) | (pos == count),
        }
    )
