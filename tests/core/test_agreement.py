"""Reader agreement checked against statsmodels and scikit-learn, degenerate cases included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import fleiss_kappa
from statsmodels.stats.proportion import proportion_confint

from workbench.core import agreement


def _long(values: np.ndarray, labels=None, readers=None) -> pd.DataFrame:
    """reports x labels x readers array (NaN = not read) -> long readings, NaN rows dropped."""
    n_reports, n_labels, n_readers = values.shape
    labels = labels or [f"label_{j}" for j in range(n_labels)]
    readers = readers or [f"reader_{k}" for k in range(n_readers)]
    report, label, reader = np.meshgrid(np.arange(n_reports), np.arange(n_labels), np.arange(n_readers), indexing="ij")
    frame = pd.DataFrame(
        {
            "report_id": [f"r{i:03d}" for i in report.ravel()],
            "label": np.array(labels)[label.ravel()],
            "reader": np.array(readers)[reader.ravel()],
            "value": values.ravel(),
        }
    )
    return frame[frame["value"].notna()].reset_index(drop=True)


def _sm_fleiss(values_2d: np.ndarray) -> float:
    """statsmodels' Fleiss kappa for an items x readers 0/1 matrix."""
    positives = values_2d.sum(axis=1)
    return fleiss_kappa(np.c_[values_2d.shape[1] - positives, positives])


@pytest.fixture
def six_readers() -> np.ndarray:
    """80 reports x 4 labels x 6 readers, readers agreeing with a latent truth 85% of the time."""
    rng = np.random.default_rng(0)
    truth = rng.random((80, 4)) < [0.1, 0.3, 0.5, 0.7]
    agree = rng.random((80, 4, 6)) < 0.85
    return np.where(agree, truth[..., None], ~truth[..., None]).astype(float)


# ---------------------------------------------------------------------------------------------
# Fleiss
# ---------------------------------------------------------------------------------------------


def test_fleiss_equals_statsmodels(six_readers):
    table = agreement.fleiss_kappa_table(_long(six_readers))
    assert list(table.index) == [f"label_{j}" for j in range(4)]
    for j in range(4):
        row = table.iloc[j]
        assert row["fleiss_kappa"] == pytest.approx(_sm_fleiss(six_readers[:, j, :]), abs=1e-12)
        assert (row["n_items"], row["n_items_dropped"], row["n_readers"]) == (80, 0, 6)
        assert row["note"] == ""


@pytest.mark.parametrize("n_readers", [2, 3, 4])
def test_fleiss_equals_statsmodels_for_few_readers(six_readers, n_readers):
    values = six_readers[:, :, :n_readers]
    table = agreement.fleiss_kappa_table(_long(values))
    expected = [_sm_fleiss(values[:, j, :]) for j in range(4)]
    np.testing.assert_allclose(table["fleiss_kappa"], expected, atol=1e-12)


def test_fleiss_with_unequal_reader_counts_uses_modal_items(six_readers):
    values = six_readers[:, :1, :].copy()
    values[:7, 0, 5] = np.nan  # seven items read by 5 readers only
    values[7:9, 0, 1:] = np.nan  # two items read by one reader
    positives = np.nansum(values[:, 0, :], axis=1)
    counts = np.sum(~np.isnan(values[:, 0, :]), axis=1)
    with pytest.raises(AssertionError):  # the failure the module guards against
        fleiss_kappa(np.c_[counts - positives, positives])
    row = agreement.fleiss_kappa_table(_long(values)).iloc[0]
    assert row["fleiss_kappa"] == pytest.approx(_sm_fleiss(values[9:, 0, :]), abs=1e-12)
    assert (row["n_items"], row["n_items_dropped"]) == (71, 9)
    assert (row["n_readers"], row["n_readers_min"], row["n_readers_max"]) == (6, 1, 6)
    assert "9 of 80 items dropped" in row["note"] and "6" in row["note"]


def test_fleiss_modal_reader_count_ties_go_to_more_readers():
    values = np.random.default_rng(4).integers(0, 2, (10, 1, 3)).astype(float)
    values[:5, 0, 2] = np.nan  # five items with 2 readers, five with 3
    row = agreement.fleiss_kappa_table(_long(values)).iloc[0]
    assert (row["n_readers"], row["n_items"], row["n_items_dropped"]) == (3, 5, 5)
    assert row["fleiss_kappa"] == pytest.approx(_sm_fleiss(values[5:, 0, :]), abs=1e-12)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_fleiss_all_one_category_is_explained(value):
    values = np.full((10, 1, 6), value)
    row = agreement.fleiss_kappa_table(_long(values)).iloc[0]
    assert np.isnan(row["fleiss_kappa"]) and bool(row["kappa_undefined"])
    with np.errstate(invalid="ignore"):
        assert np.isnan(_sm_fleiss(values[:, 0, :]))  # statsmodels' unexplained NaN
    assert row["note"] == f"all readings are {int(value)}; agreement is perfect but kappa is undefined"
    assert row["observed_agreement"] == 1.0


def test_fleiss_single_reader_is_explained():
    values = np.random.default_rng(1).integers(0, 2, (10, 2, 1)).astype(float)
    table = agreement.fleiss_kappa_table(_long(values))
    assert table["fleiss_kappa"].isna().all()
    assert table["note"].str.contains("fewer than 2 readers").all()
    assert (table["n_items"] == 0).all() and (table["n_items_dropped"] == 10).all()


# ---------------------------------------------------------------------------------------------
# pairwise Cohen
# ---------------------------------------------------------------------------------------------


def test_pairwise_cohen_equals_sklearn(six_readers):
    values = six_readers[:, :, :3].copy()
    values[:10, 1, 0] = np.nan  # reader_0 skipped 10 items of label_1
    table = agreement.pairwise_cohen(_long(values))
    assert len(table) == 4 * 3
    for row in table.itertuples():
        j, i, k = int(row.label[-1]), int(row.reader_a[-1]), int(row.reader_b[-1])
        a, b = values[:, j, i], values[:, j, k]
        keep = ~np.isnan(a) & ~np.isnan(b)
        assert row.n_items == keep.sum()
        assert row.kappa == pytest.approx(cohen_kappa_score(a[keep], b[keep]), abs=1e-12)
    assert table[table.label == "label_1"].query("reader_a == 'reader_0'")["n_items"].eq(70).all()


def test_pairwise_cohen_constant_readers_are_explained():
    values = np.zeros((12, 1, 3))
    values[:, 0, 2] = [0, 1] * 6  # reader_2 varies, reader_0 and reader_1 always say 0
    table = agreement.pairwise_cohen(_long(values)).set_index(["reader_a", "reader_b"])
    both = table.loc[("reader_0", "reader_1")]
    assert np.isnan(both["kappa"]) and both["kappa_undefined"]
    assert "agreement is perfect but kappa is undefined" in both["note"]
    one = table.loc[("reader_0", "reader_2")]
    assert one["kappa"] == 0.0 and "reader_0 is all 0" in one["note"]


def test_pairwise_cohen_names_pairs_in_sorted_reader_order():
    readings = _long(np.zeros((4, 1, 2)), readers=["zoe", "adam"])
    row = agreement.pairwise_cohen(readings).iloc[0]
    assert (row["reader_a"], row["reader_b"]) == ("adam", "zoe")


def test_pairwise_cohen_disjoint_readers():
    values = np.full((6, 1, 2), np.nan)
    values[:3, 0, 0] = [0, 1, 1]
    values[3:, 0, 1] = [1, 0, 0]
    row = agreement.pairwise_cohen(_long(values)).iloc[0]
    assert row["n_items"] == 0 and np.isnan(row["kappa"]) and row["note"] == "no items read by both"


# ---------------------------------------------------------------------------------------------
# reader against reference, vote split
# ---------------------------------------------------------------------------------------------


def _majority_reference(readings: pd.DataFrame) -> pd.DataFrame:
    votes = agreement.vote_split(readings)
    reference = votes.assign(value=np.where(votes["positives"] >= 4, 1.0, 0.0))
    reference.loc[votes["positives"] == 3, "value"] = np.nan
    return reference[["report_id", "label", "value"]]


def test_reader_vs_reference_matches_sklearn_and_statsmodels(six_readers):
    readings = _long(six_readers)
    reference = _majority_reference(readings)
    table = agreement.reader_vs_reference(readings, reference)
    assert len(table) == 6 * 4
    merged = readings.merge(reference, on=["report_id", "label"], suffixes=("", "_ref")).dropna(subset=["value_ref"])
    for row in table.itertuples():
        part = merged[(merged.reader == row.reader) & (merged.label == row.label)]
        correct = int((part.value == part.value_ref).sum())
        assert (row.n, row.correct) == (len(part), correct)
        lo, hi = proportion_confint(correct, len(part), method="wilson")
        assert (row.accuracy_lo, row.accuracy_hi) == pytest.approx((lo, hi), abs=1e-12)
        assert row.kappa == pytest.approx(cohen_kappa_score(part.value_ref, part.value), abs=1e-12)
    assert table["n"].max() < 80  # undecided 3-3 items are left out


def test_reader_vs_reference_without_decided_items():
    values = np.ones((4, 1, 2))
    readings = _long(values)
    reference = pd.DataFrame({"report_id": ["r000", "r001"], "label": "label_0", "value": [np.nan, np.nan]})
    table = agreement.reader_vs_reference(readings, reference)
    assert (table["n"] == 0).all() and table["accuracy"].isna().all()
    assert table["note"].str.contains("no decided reference").all()


def test_vote_split_counts_and_unanimity():
    values = np.array([[[1, 1, 1]], [[0, 0, 0]], [[1, 0, 1]], [[1, np.nan, 1]]], dtype=float)
    split = agreement.vote_split(_long(values)).set_index("report_id")
    assert split["positives"].to_dict() == {"r000": 3, "r001": 0, "r002": 2, "r003": 2}
    assert split["n_readers"].to_dict() == {"r000": 3, "r001": 3, "r002": 3, "r003": 2}
    assert split["unanimous"].to_dict() == {"r000": True, "r001": True, "r002": False, "r003": True}


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("func", [agreement.fleiss_kappa_table, agreement.pairwise_cohen, agreement.vote_split])
def test_duplicate_readings_raise(func):
    readings = _long(np.zeros((3, 1, 2)))
    with pytest.raises(ValueError, match="more than one value"):
        func(pd.concat([readings, readings.iloc[:1]]))


@pytest.mark.parametrize(
    "change",
    [lambda r: r.assign(value=r["value"] + 1), lambda r: r.assign(value="yes"), lambda r: r.drop(columns="reader")],
    ids=["value-2", "text", "no-reader-column"],
)
def test_bad_readings_raise(change):
    with pytest.raises(ValueError):
        agreement.fleiss_kappa_table(change(_long(np.ones((3, 1, 2)))))


def test_duplicate_reference_raises():
    readings = _long(np.ones((2, 1, 2)))
    reference = pd.DataFrame({"report_id": ["r000", "r000"], "label": "label_0", "value": [1.0, 0.0]})
    with pytest.raises(ValueError, match="more than one value"):
        agreement.reader_vs_reference(readings, reference)
