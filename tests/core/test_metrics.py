"""Metrics checked against statsmodels, scipy and scikit-learn on fixed data, edges included."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score, f1_score, precision_score, recall_score
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from workbench.core import metrics
from workbench.core.metrics import ZeroDivisionPolicy

# ---------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------


def _frame(values, labels=None) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    labels = labels or [f"l{j}" for j in range(values.shape[1])]
    return pd.DataFrame(values, index=[f"r{i}" for i in range(values.shape[0])], columns=labels)


@pytest.fixture
def noisy():
    """Seeded reference and prediction (with NaN cells on both sides), 200 reports x 5 labels."""
    rng = np.random.default_rng(42)
    truth = (rng.random((200, 5)) < [0.05, 0.2, 0.5, 0.8, 0.3]).astype(float)
    pred = np.where(rng.random(truth.shape) < 0.15, 1 - truth, truth)
    truth[rng.random(truth.shape) < 0.03] = np.nan
    pred[rng.random(truth.shape) < 0.05] = np.nan
    return _frame(truth), _frame(pred)


def _valid(t: pd.Series, p: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    keep = t.notna() & p.notna()
    return t[keep].to_numpy(int), p[keep].to_numpy(int)


# ---------------------------------------------------------------------------------------------
# proportion intervals
# ---------------------------------------------------------------------------------------------

CI_CASES = [(0, 1), (1, 1), (0, 10), (10, 10), (1, 10), (5, 7), (296, 300), (0, 300), (300, 300), (150, 300), (3, 3000)]


@pytest.mark.parametrize("k, n", CI_CASES)
@pytest.mark.parametrize("method, sm_method", [("wilson", "wilson"), ("clopper-pearson", "beta"), ("beta", "beta")])
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_proportion_ci_equals_statsmodels(k, n, method, sm_method, alpha):
    lo, hi = metrics.proportion_ci(k, n, method=method, alpha=alpha)
    want_lo, want_hi = proportion_confint(k, n, alpha=alpha, method=sm_method)
    assert lo == pytest.approx(want_lo, abs=1e-12)
    assert hi == pytest.approx(want_hi, abs=1e-12)


@pytest.mark.parametrize("method, sm_method", [("wilson", "wilson"), ("clopper-pearson", "beta")])
def test_proportion_ci_arrays_equal_statsmodels(method, sm_method):
    k = np.array([c[0] for c in CI_CASES])
    n = np.array([c[1] for c in CI_CASES])
    lo, hi = metrics.proportion_ci_arrays(k, n, method)
    want_lo, want_hi = proportion_confint(k, n, method=sm_method)
    np.testing.assert_allclose(lo, want_lo, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hi, want_hi, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["wilson", "clopper-pearson"])
def test_proportion_ci_empty_is_nan(method):
    assert all(math.isnan(x) for x in metrics.proportion_ci(0, 0, method))
    lo, hi = metrics.proportion_ci_arrays(np.array([0, 3]), np.array([0, 4]), method)
    assert np.isnan(lo[0]) and np.isnan(hi[0]) and not np.isnan(lo[1])


def test_proportion_ci_edges_are_exact_bounds():
    assert metrics.proportion_ci(0, 20, "clopper-pearson")[0] == 0.0
    assert metrics.proportion_ci(20, 20, "clopper-pearson")[1] == 1.0


@pytest.mark.parametrize("method, expected", [("clopper-pearson", (0.966, 0.996)), ("wilson", (0.966, 0.995))])
def test_ran_score_table2_interval(method, expected):
    # The paper prints 296/300 -> 0.987 [0.966, 0.996] (Clopper-Pearson).
    lo, hi = metrics.proportion_ci(296, 300, method)
    assert round(296 / 300, 3) == 0.987
    assert (round(lo, 3), round(hi, 3)) == expected


@pytest.mark.parametrize("k, n, method", [(5, 4, "wilson"), (-1, 4, "wilson"), (1, 4, "normal")])
def test_proportion_ci_rejects_bad_input(k, n, method):
    with pytest.raises(ValueError):
        metrics.proportion_ci(k, n, method)


# ---------------------------------------------------------------------------------------------
# label_metrics
# ---------------------------------------------------------------------------------------------


def test_label_metrics_matches_sklearn(noisy):
    y_true, y_pred = noisy
    table = metrics.label_metrics(y_true, y_pred)
    assert list(table.index) == list(y_true.columns)
    for label in y_true.columns:
        t, p = _valid(y_true[label], y_pred[label])
        row = table.loc[label]
        assert row["n"] == len(t)
        assert row["n_excluded"] == len(y_true) - len(t)
        assert (row["tp"], row["fp"], row["fn"], row["tn"]) == (
            ((t == 1) & (p == 1)).sum(),
            ((t == 0) & (p == 1)).sum(),
            ((t == 1) & (p == 0)).sum(),
            ((t == 0) & (p == 0)).sum(),
        )
        assert row["support"] == t.sum()
        assert row["accuracy"] == pytest.approx((t == p).mean(), abs=1e-12)
        assert row["precision"] == pytest.approx(precision_score(t, p, zero_division=np.nan), abs=1e-12)
        assert row["recall"] == pytest.approx(recall_score(t, p, zero_division=np.nan), abs=1e-12)
        assert row["specificity"] == pytest.approx(recall_score(1 - t, 1 - p), abs=1e-12)
        assert row["npv"] == pytest.approx(precision_score(1 - t, 1 - p), abs=1e-12)
        assert row["f1"] == pytest.approx(f1_score(t, p), abs=1e-12)
        assert row["kappa"] == pytest.approx(cohen_kappa_score(t, p), abs=1e-12)


def test_label_metrics_intervals_are_binomial_on_counts(noisy):
    y_true, y_pred = noisy
    table = metrics.label_metrics(y_true, y_pred, ci="clopper-pearson")
    pairs = {
        "accuracy": (table.tp + table.tn, table.n),
        "precision": (table.tp, table.tp + table.fp),
        "recall": (table.tp, table.tp + table.fn),
        "specificity": (table.tn, table.tn + table.fp),
        "npv": (table.tn, table.tn + table.fn),
    }
    for name, (k, n) in pairs.items():
        lo, hi = proportion_confint(k.to_numpy(), n.to_numpy(), method="beta")
        np.testing.assert_allclose(table[f"{name}_lo"], lo, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(table[f"{name}_hi"], hi, atol=1e-12, err_msg=name)


def test_label_metrics_aligns_reordered_prediction(noisy):
    y_true, y_pred = noisy
    shuffled = y_pred.sample(frac=1, random_state=0)[list(reversed(y_pred.columns))]
    pd.testing.assert_frame_equal(metrics.label_metrics(y_true, shuffled), metrics.label_metrics(y_true, y_pred))


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p.rename(columns={"l0": "other"}),
        lambda p: p.iloc[:-1],
        lambda p: p.replace(1.0, 2.0),
        lambda p: p.replace(0.0, -1.0),
    ],
    ids=["other-label", "missing-report", "value-2", "uncertain--1"],
)
def test_label_metrics_rejects_mismatched_or_bad_values(noisy, change):
    y_true, y_pred = noisy
    with pytest.raises(ValueError):
        metrics.label_metrics(y_true, change(y_pred))


# An all-negative label (no positives on either side) and a label whose predictions are all
# NaN (no evaluable cell), next to an ordinary label.
EDGE_TRUE = _frame([[0, 1, 0], [0, 0, 1], [0, 1, 1], [0, 0, 0]], ["none", "ok", "unparsed"])
EDGE_PRED = _frame([[0, 1, np.nan], [0, 1, np.nan], [0, 1, np.nan], [0, 0, np.nan]], ["none", "ok", "unparsed"])


@pytest.mark.parametrize("policy, fill", [("undefined", np.nan), ("exclude", np.nan), ("zero", 0.0), ("one", 1.0)])
def test_zero_division_policy_fills_and_always_flags(policy, fill):
    table = metrics.label_metrics(EDGE_TRUE, EDGE_PRED, zero_division=policy)
    none = table.loc["none"]
    for name in ("precision", "recall", "f1"):
        assert bool(none[f"{name}_undefined"]) is True
        assert (np.isnan(none[name]) and np.isnan(fill)) or none[name] == fill
    # Specificity and NPV are defined for an all-negative label.
    assert none["specificity"] == 1.0 and not none["specificity_undefined"]
    assert table.loc["ok", "f1"] == pytest.approx(0.8) and not table.loc["ok", "f1_undefined"]


def test_no_evaluable_cells_gives_nan_intervals_and_counts_exclusions():
    table = metrics.label_metrics(EDGE_TRUE, EDGE_PRED, zero_division="zero")
    row = table.loc["unparsed"]
    assert row["n"] == 0 and row["n_excluded"] == 4
    assert bool(row["accuracy_undefined"]) and row["accuracy"] == 0.0
    assert np.isnan(row["accuracy_lo"]) and np.isnan(row["accuracy_hi"])
    assert row["kappa_note"] == "no evaluable items"


def test_f1_is_zero_not_undefined_when_only_one_side_has_positives():
    table = metrics.label_metrics(_frame([[1], [0], [0]]), _frame([[0], [0], [0]]))
    assert table.iloc[0]["f1"] == 0.0 and not table.iloc[0]["f1_undefined"]
    assert table.iloc[0]["precision_undefined"] and not table.iloc[0]["recall_undefined"]


@pytest.mark.parametrize(
    "truth, pred, kappa, undefined, note_part",
    [
        ([0, 0, 0, 0], [0, 0, 0, 0], np.nan, True, "agreement is perfect but kappa is undefined"),
        ([1, 1, 1, 1], [1, 1, 1, 1], np.nan, True, "are all 1"),
        ([0, 0, 0, 0], [0, 1, 0, 0], 0.0, False, "reference is all 0: kappa is 0 by construction"),
        ([0, 1, 0, 1], [1, 1, 1, 1], 0.0, False, "predictions is all 1"),
        ([0, 1, 0, 1], [0, 1, 0, 1], 1.0, False, ""),
    ],
)
def test_kappa_degenerate_cases_are_explained(truth, pred, kappa, undefined, note_part):
    row = metrics.label_metrics(_frame(np.c_[truth]), _frame(np.c_[pred])).iloc[0]
    assert bool(row["kappa_undefined"]) is undefined
    assert (np.isnan(kappa) and np.isnan(row["kappa"])) or row["kappa"] == pytest.approx(kappa)
    assert note_part in row["kappa_note"]
    if note_part == "":
        assert row["kappa_note"] == ""


def test_kappa_from_counts_matches_sklearn_on_grid():
    rng = np.random.default_rng(3)
    for _ in range(30):
        t = rng.integers(0, 2, 40)
        p = np.where(rng.random(40) < 0.3, 1 - t, t)
        tp, fp = ((t == 1) & (p == 1)).sum(), ((t == 0) & (p == 1)).sum()
        fn, tn = ((t == 1) & (p == 0)).sum(), ((t == 0) & (p == 0)).sum()
        kappa, undefined, _ = metrics.kappa_from_counts(tp, fp, fn, tn)
        assert float(kappa) == pytest.approx(cohen_kappa_score(t, p), abs=1e-12) and not undefined


# ---------------------------------------------------------------------------------------------
# averages
# ---------------------------------------------------------------------------------------------


def test_micro_averages_pool_counts(noisy):
    y_true, y_pred = noisy
    out = metrics.averages(metrics.label_metrics(y_true, y_pred))
    keep = (y_true.notna() & y_pred.notna()).to_numpy().ravel()
    t, p = y_true.to_numpy().ravel()[keep].astype(int), y_pred.to_numpy().ravel()[keep].astype(int)
    assert out["micro_n"] == keep.sum()
    assert out["micro_accuracy"] == pytest.approx((t == p).mean(), abs=1e-12)
    assert out["micro_precision"] == pytest.approx(precision_score(t, p), abs=1e-12)
    assert out["micro_recall"] == pytest.approx(recall_score(t, p), abs=1e-12)
    assert out["micro_f1"] == pytest.approx(f1_score(t, p), abs=1e-12)
    lo, hi = proportion_confint((t == p).sum(), len(t), method="wilson")
    assert (out["micro_accuracy_lo"], out["micro_accuracy_hi"]) == pytest.approx((lo, hi), abs=1e-12)


@pytest.fixture
def complete_with_empty_label():
    """No NaN; label l2 has no positives on either side; l3's predictions are all 0."""
    rng = np.random.default_rng(7)
    truth = (rng.random((60, 4)) < 0.3).astype(float)
    pred = np.where(rng.random(truth.shape) < 0.2, 1 - truth, truth)
    truth[:, 2] = pred[:, 2] = 0
    pred[:, 3] = 0
    return _frame(truth), _frame(pred)


@pytest.mark.parametrize("policy, sk_zero", [("zero", 0.0), ("one", 1.0)])
def test_macro_counts_undefined_labels_as_policy_value(complete_with_empty_label, policy, sk_zero):
    y_true, y_pred = complete_with_empty_label
    out = metrics.averages(metrics.label_metrics(y_true, y_pred), zero_division=policy)
    t, p = y_true.to_numpy(int), y_pred.to_numpy(int)
    for name, scorer in (("f1", f1_score), ("precision", precision_score), ("recall", recall_score)):
        want = scorer(t, p, average="macro", zero_division=sk_zero)
        assert out[f"macro_{name}"] == pytest.approx(want, abs=1e-12), name
    assert out["macro_f1_labels_used"] == 4 and out["macro_f1_labels_undefined"] == 1


@pytest.mark.parametrize("policy", ["undefined", "exclude"])
def test_macro_leaves_undefined_labels_out(complete_with_empty_label, policy):
    y_true, y_pred = complete_with_empty_label
    # Build the table under another policy: averages must apply its own.
    out = metrics.averages(metrics.label_metrics(y_true, y_pred, zero_division="zero"), zero_division=policy)
    t, p = y_true.to_numpy(int), y_pred.to_numpy(int)
    keep = [0, 1, 3]
    assert out["macro_f1"] == pytest.approx(f1_score(t[:, keep], p[:, keep], average="macro"), abs=1e-12)
    assert (out["macro_f1_labels_used"], out["macro_f1_labels_undefined"]) == (3, 1)
    # Precision is undefined for l2 and l3 (nothing predicted positive).
    assert (out["macro_precision_labels_used"], out["macro_precision_labels_undefined"]) == (2, 2)


def test_unknown_policy_raises(noisy):
    with pytest.raises(ValueError):
        metrics.label_metrics(*noisy, zero_division="warn")
    assert ZeroDivisionPolicy("zero") == "zero"


# ---------------------------------------------------------------------------------------------
# bootstrap
# ---------------------------------------------------------------------------------------------


def test_bootstrap_is_reproducible_with_seed(noisy):
    first = metrics.bootstrap_macro_f1(*noisy, n_resamples=300, seed=11)
    again = metrics.bootstrap_macro_f1(*noisy, n_resamples=300, seed=11)
    other = metrics.bootstrap_macro_f1(*noisy, n_resamples=300, seed=12)
    assert first == again
    assert (first["lo"], first["hi"]) != (other["lo"], other["hi"])
    assert first["estimate"] == other["estimate"]
    assert (first["n_resamples"], first["seed"]) == (300, 11)


def test_bootstrap_matches_a_naive_loop_with_the_same_draws(noisy):
    y_true, y_pred = noisy
    got = metrics.bootstrap_macro_f1(y_true, y_pred, n_resamples=60, seed=5, zero_division="zero")
    y_true, y_pred = y_true.sort_index(), y_pred.sort_index()  # resamples are drawn in report-id order
    idx = np.random.default_rng(5).integers(0, len(y_true), size=(60, len(y_true)))
    t, p = y_true.to_numpy(), y_pred.to_numpy()
    scores = []
    for rows in idx:
        per_label = []
        for j in range(t.shape[1]):
            tt, pp = t[rows, j], p[rows, j]
            keep = ~np.isnan(tt) & ~np.isnan(pp)
            per_label.append(f1_score(tt[keep].astype(int), pp[keep].astype(int), zero_division=0.0))
        scores.append(np.mean(per_label))
    lo, hi = np.quantile(scores, [0.025, 0.975])
    assert (got["lo"], got["hi"]) == pytest.approx((lo, hi), abs=1e-12)


def test_bootstrap_interval_does_not_depend_on_the_order_of_the_reports(noisy):
    """Same data in another row order, same seed: the same interval (issue 13, item 10)."""
    y_true, y_pred = noisy
    order = np.random.default_rng(1).permutation(len(y_true))
    first = metrics.bootstrap_macro_f1(y_true, y_pred, n_resamples=200, seed=3)
    shuffled = metrics.bootstrap_macro_f1(y_true.iloc[order], y_pred.iloc[order], n_resamples=200, seed=3)
    assert (shuffled["lo"], shuffled["hi"]) == (first["lo"], first["hi"])
    per_label = metrics.bootstrap_label_f1(y_true, y_pred, n_resamples=200, seed=3)
    pd.testing.assert_frame_equal(
        metrics.bootstrap_label_f1(y_true.iloc[order], y_pred.iloc[order], n_resamples=200, seed=3), per_label
    )
    other = y_pred.iloc[::-1].copy()  # a second run: reversed rows, some answers flipped
    other.iloc[::7] = 1 - other.iloc[::7]
    delta = metrics.bootstrap_delta_f1(y_true, y_pred, other, n_resamples=200, seed=3)
    pd.testing.assert_frame_equal(
        metrics.bootstrap_delta_f1(y_true.iloc[order], y_pred, other, n_resamples=200, seed=3), delta
    )


def test_bootstrap_estimate_equals_macro_f1_and_sits_in_interval(complete_with_empty_label):
    y_true, y_pred = complete_with_empty_label
    for policy in ("undefined", "zero", "one"):
        got = metrics.bootstrap_macro_f1(y_true, y_pred, n_resamples=200, zero_division=policy)
        want = metrics.averages(metrics.label_metrics(y_true, y_pred), zero_division=policy)["macro_f1"]
        assert got["estimate"] == pytest.approx(want, abs=1e-12)
        assert got["lo"] <= got["estimate"] <= got["hi"]


# ---------------------------------------------------------------------------------------------
# McNemar and Holm
# ---------------------------------------------------------------------------------------------

GRID = [(b, c) for b in range(0, 16) for c in range(0, 16)] + [(100, 130), (0, 40), (250, 251), (7, 60)]


@pytest.mark.parametrize("b, c", GRID)
def test_mcnemar_exact_equals_statsmodels(b, c):
    want = mcnemar([[10, b], [c, 10]], exact=True).pvalue
    assert metrics.mcnemar_exact(b, c) == pytest.approx(want, abs=1e-12)


def test_mcnemar_arrays_equal_scalar():
    b = np.array([g[0] for g in GRID])
    c = np.array([g[1] for g in GRID])
    want = [metrics.mcnemar_exact(x, y) for x, y in GRID]
    np.testing.assert_allclose(metrics.mcnemar_exact_arrays(b, c), want, atol=0)


@pytest.mark.parametrize("b, c", [(3, 12), (12, 3), (0, 5), (1, 9), (20, 35)])
def test_mcnemar_mid_p_by_hand(b, c):
    n, k = b + c, min(b, c)
    want = 2 * stats.binom.cdf(k, n, 0.5) - stats.binom.pmf(k, n, 0.5)
    got = metrics.mcnemar_exact(b, c, mid_p=True)
    assert got == pytest.approx(want, abs=1e-12)
    assert got < metrics.mcnemar_exact(b, c)


@pytest.mark.parametrize("b, c", [(0, 0), (4, 4), (9, 9)])
def test_mcnemar_no_imbalance_gives_one(b, c):
    assert metrics.mcnemar_exact(b, c) == 1.0
    assert metrics.mcnemar_exact(b, c, mid_p=True) == pytest.approx(1.0, abs=1e-12)


def test_mcnemar_rejects_negative_or_fractional():
    with pytest.raises(ValueError):
        metrics.mcnemar_exact(-1, 3)
    with pytest.raises(ValueError):
        metrics.mcnemar_exact(1.5, 3)


HOLM_CASES = [
    [0.01, 0.04, 0.03, 0.005],
    [0.5, 0.5, 0.01, 0.01, 1.0],
    [1.0, 1.0, 1.0],
    [0.001],
    list(np.random.default_rng(0).random(21) ** 3),
]


@pytest.mark.parametrize("pvalues", HOLM_CASES)
def test_holm_equals_multipletests(pvalues):
    want = multipletests(pvalues, method="holm")[1]
    np.testing.assert_allclose(metrics.holm(pvalues), want, atol=1e-15)


def test_holm_leaves_nan_out_of_the_family():
    got = metrics.holm([0.01, np.nan, 0.04])
    assert np.isnan(got[1])
    np.testing.assert_allclose(got[[0, 2]], multipletests([0.01, 0.04], method="holm")[1])


# ---------------------------------------------------------------------------------------------
# compare_labels and fixed_and_broken
# ---------------------------------------------------------------------------------------------


def _paired(n: int, plan: dict[str, tuple[int, int]], seed: int = 0):
    """Reference and runs A, B with exactly b broken and c fixed cells per label."""
    rng = np.random.default_rng(seed)
    truth = (rng.random((n, len(plan))) < 0.4).astype(float)
    a, b_run = truth.copy(), truth.copy()
    for j, (broken, fixed) in enumerate(plan.values()):
        rows = rng.permutation(n)
        a[rows[broken : broken + fixed], j] = 1 - truth[rows[broken : broken + fixed], j]
        b_run[rows[:broken], j] = 1 - truth[rows[:broken], j]
    labels = list(plan)
    return _frame(truth, labels), _frame(a, labels), _frame(b_run, labels)


PLAN = {"fixed": (0, 14), "broke": (13, 1), "same": (0, 0), "few": (2, 6), "even": (6, 6)}


@pytest.fixture
def paired():
    return _paired(120, PLAN)


def test_compare_labels_counts_tests_and_verdicts(paired):
    y_true, a, b = paired
    table = metrics.compare_labels(y_true, a, b)
    assert list(table["b"]) == [p[0] for p in PLAN.values()]
    assert list(table["c"]) == [p[1] for p in PLAN.values()]
    want_p = [mcnemar([[0, x], [y, 0]], exact=True).pvalue for x, y in PLAN.values()]
    np.testing.assert_allclose(table["p_value"], want_p, atol=1e-12)
    np.testing.assert_allclose(table["p_holm"], multipletests(want_p, method="holm")[1], atol=1e-12)
    assert table["verdict"].to_dict() == {
        "fixed": "better",
        "broke": "worse",
        "same": "no change",
        "few": "undecided",
        "even": "no significant change",
    }
    np.testing.assert_allclose(table["delta_accuracy"], (table["c"] - table["b"]) / 120)


def test_compare_labels_f1_and_accuracy_match_sklearn(paired):
    y_true, a, b = paired
    table = metrics.compare_labels(y_true, a, b)
    for label in y_true.columns:
        assert table.loc[label, "f1_a"] == pytest.approx(f1_score(y_true[label], a[label]), abs=1e-12)
        assert table.loc[label, "f1_b"] == pytest.approx(f1_score(y_true[label], b[label]), abs=1e-12)
        assert table.loc[label, "accuracy_b"] == pytest.approx((y_true[label] == b[label]).mean())


def test_compare_labels_uses_only_cells_evaluable_everywhere(paired):
    y_true, a, b = paired
    a, b = a.copy(), b.copy()
    a.iloc[:5, 0] = np.nan
    b.iloc[3:9, 0] = np.nan
    assert metrics.compare_labels(y_true, a, b).iloc[0]["n"] == 120 - 9


def _simulated_power(n, p_broken, p_fixed, alpha, min_discordant, sims=4000, seed=0):
    """Share of simulated studies of n paired reports whose exact McNemar p < alpha (statsmodels' test)."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, [p_broken, p_fixed, 1 - p_broken - p_fixed], size=sims)
    b, c = counts[:, 0], counts[:, 1]
    pairs = {
        pair: mcnemar([[0, pair[0]], [pair[1], 0]], exact=True).pvalue
        for pair in set(zip(b.tolist(), c.tolist(), strict=False))
    }
    p = np.array([pairs[pair] for pair in zip(b.tolist(), c.tolist(), strict=False)])
    return float(np.mean((p < alpha) & (b + c >= min_discordant)))


@pytest.mark.parametrize("b,c,n", [(2, 6, 120), (5, 12, 300), (10, 30, 300), (3, 90, 300), (40, 55, 300)])
def test_reports_needed_gives_80_percent_power_in_simulation(b, c, n):
    """At n + reports_needed, simulated studies reach significance under Holm's alpha / m about 80% of the time."""
    m = 21
    alpha = 0.05 / m
    total = metrics.reports_for_power(b / n, c / n, alpha, 0.8, min_discordant=10)
    assert (
        metrics.mcnemar_power(total, b / n, c / n, alpha, 10)
        >= 0.8
        > metrics.mcnemar_power(total - 1, b / n, c / n, alpha, 10) - 0.01
    )
    simulated = _simulated_power(total, b / n, c / n, alpha, 10)
    assert simulated == pytest.approx(0.8, abs=0.03), (total, simulated)
    # the old figure (just significant at the observed split, unadjusted alpha) had about half that power
    assert _simulated_power(max(math.ceil(total * 0.4), 1), b / n, c / n, alpha, 10, sims=1000) < 0.7


def test_exact_power_agrees_with_connor_for_large_samples():
    """For many discordant pairs the exact test needs a little more than Connor's (1987) normal approximation."""
    p10, p01, alpha = 0.05, 0.08, 0.05
    za, zb = stats.norm.isf(alpha / 2), stats.norm.isf(0.2)
    psi, delta = p10 + p01, p01 - p10
    connor = (za * math.sqrt(psi) + zb * math.sqrt(psi - delta**2)) ** 2 / delta**2
    exact = metrics.reports_for_power(p10, p01, alpha)
    assert connor <= exact <= connor * 1.06  # 1,185 vs 1,131.4: the exact test is a little conservative


def test_reports_needed_uses_holm_alpha_and_counts_only_further_reports(paired):
    y_true, a, b = paired
    table = metrics.compare_labels(y_true, a, b)
    m = len(table)
    assert table.attrs["alpha_power"] == pytest.approx(0.05 / m)
    row = table.loc["few"]  # b = 2, c = 6 of 120 reports
    total = metrics.reports_for_power(2 / 120, 6 / 120, 0.05 / m, 0.8, min_discordant=10)
    assert row["reports_needed"] == total - 120 and row["reports_note"] == ""


def test_reports_needed_undefined_without_imbalance(paired):
    table = metrics.compare_labels(*paired)
    assert np.isnan(table.loc["same", "reports_needed"]) and "no difference seen" in table.loc["same", "reports_note"]
    assert np.isnan(table.loc["even", "reports_needed"])
    assert "no difference seen" in table.loc["even", "reports_note"]
    assert table.loc["fixed", "reports_needed"] == 0


def test_mid_p_option_changes_p_values(paired):
    exact = metrics.compare_labels(*paired)
    mid = metrics.compare_labels(*paired, mid_p=True)
    assert (mid.loc["few", "p_value"]) < exact.loc["few", "p_value"]
    assert mid.loc["few", "p_value"] == pytest.approx(metrics.mcnemar_exact(2, 6, mid_p=True))


def test_fixed_and_broken_lists_every_discordant_cell(paired):
    y_true, a, b = paired
    rows = metrics.fixed_and_broken(y_true, a, b)
    table = metrics.compare_labels(y_true, a, b)
    counts = rows.groupby(["label", "change"]).size().unstack(fill_value=0)
    for label in y_true.columns:
        got = counts.loc[label] if label in counts.index else pd.Series({"fixed": 0, "broken": 0})
        assert got.get("fixed", 0) == table.loc[label, "c"]
        assert got.get("broken", 0) == table.loc[label, "b"]
    assert list(rows.columns) == ["report", "label", "change", "reference", "value_a", "value_b"]
    fixed = rows[rows["change"] == "fixed"]
    assert (fixed["value_b"] == fixed["reference"]).all() and (fixed["value_a"] != fixed["reference"]).all()
    broken = rows[rows["change"] == "broken"]
    assert (broken["value_a"] == broken["reference"]).all() and (broken["value_b"] != broken["reference"]).all()
    one = rows.iloc[0]
    assert y_true.loc[one["report"], one["label"]] == one["reference"]


# ---------------------------------------------------------------------------------------------
# subset_accuracy
# ---------------------------------------------------------------------------------------------


def test_subset_accuracy_restricts_to_mask(noisy):
    y_true, y_pred = noisy
    rows = np.arange(len(y_true))[:, None] + np.arange(y_true.shape[1])
    mask = pd.DataFrame(rows % 3 == 0, index=y_true.index, columns=y_true.columns)
    table = metrics.subset_accuracy(y_true, y_pred, mask)
    for label in y_true.columns:
        keep = mask[label] & y_true[label].notna() & y_pred[label].notna()
        correct = int((y_true[label][keep] == y_pred[label][keep]).sum())
        assert table.loc[label, "n"] == keep.sum() and table.loc[label, "correct"] == correct
        lo, hi = proportion_confint(correct, int(keep.sum()), method="wilson")
        assert (table.loc[label, "accuracy_lo"], table.loc[label, "accuracy_hi"]) == pytest.approx((lo, hi), abs=1e-12)
    empty = metrics.subset_accuracy(y_true, y_pred, mask & False)
    assert (empty["n"] == 0).all() and empty["accuracy"].isna().all()


def test_bootstrap_label_f1_matches_a_plain_loop_and_brackets_the_estimate():
    """Per-label F1 intervals equal an sklearn loop over the same resampled reports."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(3)
    t = pd.DataFrame(rng.integers(0, 2, (80, 3)), columns=["a", "b", "c"]).astype(float)
    p = t.where(rng.random((80, 3)) > 0.2, 1 - t)
    got = metrics.bootstrap_label_f1(t, p, n_resamples=200, seed=5)
    t, p = t.rename(index=str).sort_index(), p.rename(index=str).sort_index()  # drawn in report-id order
    draws = np.random.default_rng(5).integers(0, 80, size=(200, 80))
    for label in t.columns:
        values = [f1_score(t[label].to_numpy()[d], p[label].to_numpy()[d]) for d in draws]
        lo, hi = np.quantile(values, [0.025, 0.975])
        assert got.loc[label, "f1_lo"] == pytest.approx(lo)
        assert got.loc[label, "f1_hi"] == pytest.approx(hi)
        est = f1_score(t[label], p[label])
        assert got.loc[label, "f1_lo"] <= est <= got.loc[label, "f1_hi"]


def test_bootstrap_delta_f1_matches_a_paired_sklearn_loop():
    """The change-in-F1 interval equals an sklearn loop scoring both runs on the same resampled reports."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(4)
    t = pd.DataFrame(rng.integers(0, 2, (90, 3)), columns=["a", "b", "c"]).astype(float)
    pa = t.where(rng.random((90, 3)) > 0.3, 1 - t)
    pb = t.where(rng.random((90, 3)) > 0.1, 1 - t)
    got = metrics.bootstrap_delta_f1(t, pa, pb, n_resamples=200, seed=7)
    draws = np.random.default_rng(7).integers(0, 90, size=(200, 90))
    t, pa, pb = (f.rename(index=str).sort_index() for f in (t, pa, pb))  # drawn in report-id order
    for label in t.columns:
        y, a, b = (f[label].to_numpy() for f in (t, pa, pb))
        deltas = [f1_score(y[d], b[d]) - f1_score(y[d], a[d]) for d in draws]
        lo, hi = np.quantile(deltas, [0.025, 0.975])
        assert (got.loc[label, "delta_f1_lo"], got.loc[label, "delta_f1_hi"]) == pytest.approx((lo, hi))
    assert (got["delta_f1_lo"] > 0).any(), "run B is clearly better on some label"


def test_tabled_normal_critical_values_are_scipys_bit_for_bit():
    """The critical values kept as constants (so `metrics` need not import scipy) are ndtri's exactly."""
    from scipy import special

    for alpha, crit in metrics._NORMAL_CRIT.items():
        assert crit == -special.ndtri(alpha / 2.0)
    assert metrics._normal_crit(0.1) == -special.ndtri(0.05)  # an untabled alpha still goes to scipy
