"""How well a labelling run agrees with the reference, label by label, with honest uncertainty.

Every figure the workbench shows about a prompt version comes from here: per-label confusion
counts, accuracy / precision / recall / specificity / NPV with binomial intervals (Wilson by
default, Clopper-Pearson as the Ran Score paper prints), F1 and Cohen's kappa, micro and macro
averages, a report-level bootstrap of macro F1, and the paired comparison of two runs (exact
McNemar per label, Holm across labels, fixed and broken cases).

Conventions kept everywhere:

* Tables are reports x labels of 0/1; NaN means "not evaluable" (a reply that failed to parse,
  a reference item waiting for adjudication). A cell counts only when every table involved has
  a value there, and the number of cells left out is reported.
* A ratio whose denominator is 0 is *undefined*. Its value follows a `ZeroDivisionPolicy`, and
  a boolean ``<metric>_undefined`` column always says so, so a filled-in 0 or 1 is never silent.
* Everything is vectorised over the reports x labels matrix; no Python loop over cells or
  resamples.

The module is pure: numpy, pandas and scipy only, no I/O.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from workbench.errors import UserError

# scipy.special and scipy.stats are imported where used (_special()): `metrics` with the default
# 95% Wilson intervals needs neither, and importing scipy is a sizeable part of a cold start.
_NORMAL_CRIT = {0.05: 1.9599639845400545}  # -scipy.special.ndtri(alpha / 2), bit for bit (tested)


def _special():
    """scipy.special, imported on first use."""
    from scipy import special

    return special


def _normal_crit(alpha: float) -> float:
    """Two-sided standard normal critical value, -ndtri(alpha/2) (the usual alpha from the table)."""
    crit = _NORMAL_CRIT.get(alpha)
    return crit if crit is not None else float(-_special().ndtri(alpha / 2.0))


__all__ = [
    "ZeroDivisionPolicy",
    "proportion_ci",
    "proportion_ci_arrays",
    "kappa_from_counts",
    "label_metrics",
    "averages",
    "MacroFigure",
    "macro_figure",
    "f1_from_counts",
    "bootstrap_macro_f1",
    "bootstrap_label_f1",
    "mcnemar_exact",
    "mcnemar_exact_arrays",
    "holm",
    "compare_labels",
    "fixed_and_broken",
    "subset_accuracy",
]


class ZeroDivisionPolicy(StrEnum):
    """What a precision / recall / specificity / NPV / F1 is when its denominator is 0.

    The denominators: precision tp+fp (nothing predicted positive), recall tp+fn (nothing
    positive in the reference), specificity tn+fp, NPV tn+fn, F1 2tp+fp+fn (no positive on
    either side; as in scikit-learn, F1 = 2tp/(2tp+fp+fn), so it is 0, not undefined, when only
    one side has positives). Accuracy is undefined only when a label has no evaluable cell (n = 0).

    UNDEFINED  the value is NaN (default); averages leave the label out and count it.
    EXCLUDE    same numbers as UNDEFINED; names the intent "leave the label out of the mean".
    ZERO       the value is 0 (what Ran Score's released script does with zero_division=0).
    ONE        the value is 1 (nothing to find and nothing found counts as perfect).

    Under every policy the ``*_undefined`` flag is True for such a cell.
    """

    UNDEFINED = "undefined"
    ZERO = "zero"
    ONE = "one"
    EXCLUDE = "exclude"


_FILL = {
    ZeroDivisionPolicy.UNDEFINED: np.nan,
    ZeroDivisionPolicy.EXCLUDE: np.nan,
    ZeroDivisionPolicy.ZERO: 0.0,
    ZeroDivisionPolicy.ONE: 1.0,
}

_CI_METHODS = {"wilson": "wilson", "clopper-pearson": "beta", "beta": "beta"}


# ---------------------------------------------------------------------------------------------
# Binomial intervals
# ---------------------------------------------------------------------------------------------


def _ci_method(method: str) -> str:
    try:
        return _CI_METHODS[method.lower()]
    except (KeyError, AttributeError):
        raise UserError(f"unknown interval method {method!r}; use one of {sorted(_CI_METHODS)}") from None


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise UserError(f"alpha must be between 0 and 1, got {alpha}")


def proportion_ci_arrays(
    k: np.ndarray, n: np.ndarray, method: str = "wilson", alpha: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided binomial confidence intervals for k successes out of n, element-wise."""
    kind = _ci_method(method)
    _check_alpha(alpha)
    k, n = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float))
    if np.any((k < 0) | (k > n)):
        raise ValueError("need 0 <= k <= n for every proportion")
    with np.errstate(divide="ignore", invalid="ignore"):
        lo, hi = _wilson(k, n, alpha) if kind == "wilson" else _clopper_pearson(k, n, alpha)
    # No trials, no interval: NaN rather than a made-up [0, 1].
    empty = n == 0
    lo = np.where(empty, np.nan, lo)
    hi = np.where(empty, np.nan, hi)
    return lo, hi


def _wilson(k: np.ndarray, n: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    # Same operations in the same order as statsmodels, so results agree to the last bit.
    q = k / n
    crit = _normal_crit(alpha)  # = stats.norm.isf, bit for bit
    crit2 = crit**2
    denom = 1 + crit2 / n
    center = (q + crit2 / (2 * n)) / denom
    dist = crit * np.sqrt(q * (1.0 - q) / n + crit2 / (4.0 * n**2)) / denom
    return np.clip(center - dist, 0, 1), np.clip(center + dist, 0, 1)


def _clopper_pearson(k: np.ndarray, n: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    special = _special()
    lo = special.betaincinv(k, n - k + 1, alpha / 2.0)  # = stats.beta.ppf
    hi = special.betainccinv(k + 1, n - k, alpha / 2.0)  # = stats.beta.isf
    # The beta quantiles are NaN at the edges, where the exact bounds are 0 and 1.
    return np.where(k == 0, 0.0, lo), np.where(k == n, 1.0, hi)


def proportion_ci(k: int, n: int, method: str = "wilson", alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided binomial confidence interval for k of n: Wilson or Clopper-Pearson ("beta")."""
    lo, hi = proportion_ci_arrays(np.asarray(k), np.asarray(n), method, alpha)
    return float(lo), float(hi)


# ---------------------------------------------------------------------------------------------
# Inputs and counts
# ---------------------------------------------------------------------------------------------


def _policy(zero_division: str) -> ZeroDivisionPolicy:
    try:
        return ZeroDivisionPolicy(zero_division)
    except ValueError:
        options = [p.value for p in ZeroDivisionPolicy]
        raise UserError(f"unknown zero_division {zero_division!r}; use one of {options}") from None


def _matrix(frame: pd.DataFrame, name: str) -> np.ndarray:
    values = frame.to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isnan(values) & (values != 0) & (values != 1)
    if bad.any():
        example = values[bad][0]
        raise ValueError(f"{name} must hold 0, 1 or NaN; found {example!r} (map -1/uncertain first)")
    return values


def _aligned(first: pd.DataFrame, *others: pd.DataFrame, names: tuple[str, ...]) -> list[np.ndarray]:
    """Reorder the other tables like the first one and return all as float matrices."""
    if first.index.has_duplicates or first.columns.has_duplicates:
        raise ValueError(f"{names[0]} has duplicate report ids or label ids")
    frames = [first]
    for other, name in zip(others, names[1:], strict=False):
        same_rows = other.index.sort_values().equals(first.index.sort_values())
        same_cols = set(other.columns) == set(first.columns) and len(other.columns) == len(first.columns)
        if not (same_rows and same_cols):
            raise ValueError(f"{name} must have the same reports (index) and labels (columns) as {names[0]}")
        frames.append(other.reindex(index=first.index, columns=first.columns))
    return [_matrix(frame, name) for frame, name in zip(frames, names, strict=False)]


def _by_report_id(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in report-id order, so a seeded resample draws the same reports whatever the input order."""
    return frame.iloc[np.argsort(frame.index.astype(str).to_numpy(), kind="stable")]


def _confusion(t: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
    # NaN compares unequal to 0 and 1, so a cell missing on either side falls in no cell.
    return {
        "tp": ((t == 1) & (p == 1)).sum(axis=0),
        "fp": ((t == 0) & (p == 1)).sum(axis=0),
        "fn": ((t == 1) & (p == 0)).sum(axis=0),
        "tn": ((t == 0) & (p == 0)).sum(axis=0),
    }


def _ratio(num: np.ndarray, den: np.ndarray, policy: ZeroDivisionPolicy) -> tuple[np.ndarray, np.ndarray]:
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    undefined = den == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(undefined, _FILL[policy], num / np.where(undefined, 1.0, den))
    return value, undefined


def _f1(tp, fp, fn, policy: ZeroDivisionPolicy) -> tuple[np.ndarray, np.ndarray]:
    tp = np.asarray(tp, dtype=float)
    return _ratio(2 * tp, 2 * tp + fp + fn, policy)


# ---------------------------------------------------------------------------------------------
# Cohen's kappa from 2x2 counts
# ---------------------------------------------------------------------------------------------


def kappa_from_counts(
    tp, fp, fn, tn, names: tuple[str, str] = ("reference", "predictions")
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cohen's kappa, undefined flag and explanatory note from 2x2 counts (first rater = rows)."""
    tp, fp, fn, tn = (np.asarray(x, dtype=float) for x in (tp, fp, fn, tn))
    # Closed 2x2 form; its denominator is 0 exactly when chance agreement is 1.
    den = (tp + fp) * (fp + tn) + (tp + fn) * (fn + tn)
    undefined = den == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(undefined, np.nan, 2 * (tp * tn - fn * fp) / np.where(undefined, 1.0, den))
    return kappa, undefined, _kappa_notes(tp, fp, fn, tn, names)


def _kappa_notes(tp, fp, fn, tn, names) -> np.ndarray:
    first, second = names
    n = tp + fp + fn + tn
    first_pos, second_pos = tp + fn, tp + fp
    first_const = (first_pos == 0) | (first_pos == n)
    second_const = (second_pos == 0) | (second_pos == n)
    first_value = np.where(first_pos == n, "1", "0")
    second_value = np.where(second_pos == n, "1", "0")
    notes = np.select(
        [
            n == 0,
            first_const & second_const & (first_value == second_value),
            first_const & second_const,
            first_const,
            second_const,
        ],
        [
            "no evaluable items",
            f"{first} and {second} are all " + first_value + ": agreement is perfect but kappa is undefined",
            f"{first} is all " + first_value + f" and {second} is all " + second_value + ": kappa is 0 by construction",
            f"{first} is all " + first_value + ": kappa is 0 by construction; read accuracy instead",
            f"{second} is all " + second_value + ": kappa is 0 by construction; read accuracy instead",
        ],
        default="",
    )
    return notes.astype(object)


# ---------------------------------------------------------------------------------------------
# Per-label table and averages
# ---------------------------------------------------------------------------------------------


def _with_interval(out: dict, name: str, num, den, policy, method: str) -> None:
    value, undefined = _ratio(num, den, policy)
    lo, hi = proportion_ci_arrays(num, den, method)
    out[name], out[f"{name}_lo"], out[f"{name}_hi"] = value, lo, hi
    out[f"{name}_undefined"] = undefined


def label_metrics(
    y_true: pd.DataFrame, y_pred: pd.DataFrame, ci: str = "wilson", zero_division: str = "undefined"
) -> pd.DataFrame:
    """Per-label confusion counts, accuracy/P/R/specificity/NPV with intervals, F1 and kappa."""
    policy = _policy(zero_division)
    t, p = _aligned(y_true, y_pred, names=("y_true", "y_pred"))
    c = _confusion(t, p)
    tp, fp, fn, tn = c["tp"], c["fp"], c["fn"], c["tn"]
    n = tp + fp + fn + tn
    out: dict = {"n": n, "n_excluded": t.shape[0] - n, "tp": tp, "fp": fp, "fn": fn, "tn": tn}
    out["support"] = tp + fn
    out["prevalence"] = _ratio(tp + fn, n, ZeroDivisionPolicy.UNDEFINED)[0]
    _with_interval(out, "accuracy", tp + tn, n, policy, ci)
    _with_interval(out, "precision", tp, tp + fp, policy, ci)
    _with_interval(out, "recall", tp, tp + fn, policy, ci)
    _with_interval(out, "specificity", tn, tn + fp, policy, ci)
    _with_interval(out, "npv", tn, tn + fn, policy, ci)
    out["f1"], out["f1_undefined"] = _f1(tp, fp, fn, policy)
    out["kappa"], out["kappa_undefined"], out["kappa_note"] = kappa_from_counts(tp, fp, fn, tn)
    table = pd.DataFrame(out, index=pd.Index(y_true.columns, name="label"))
    table.attrs["zero_division"] = policy.value
    table.attrs["ci"] = ci
    return table


_MACRO_METRICS = ("accuracy", "precision", "recall", "f1")


def _per_label(tp, fp, fn, tn, policy) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {
        "accuracy": _ratio(tp + tn, tp + fp + fn + tn, policy),
        "precision": _ratio(tp, tp + fp, policy),
        "recall": _ratio(tp, tp + fn, policy),
        "f1": _f1(tp, fp, fn, policy),
    }


def _macro(value: np.ndarray, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    # Under undefined/exclude the filled value is NaN, so nanmean leaves those labels out;
    # under zero/one the fill is a number and every label counts.
    used = np.sum(~np.isnan(value), axis=axis)
    total = np.nansum(value, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(used > 0, total / np.maximum(used, 1), np.nan)
    return mean, used


@dataclass(frozen=True)
class MacroFigure:
    """A macro mean over labels and which labels it averages (the one macro rule: `macro_figure`)."""

    value: float
    averaged: tuple[str, ...]  # the labels whose values enter the mean
    left_out: tuple[str, ...]  # undefined labels the policy leaves out (undefined / exclude)
    filled: tuple[str, ...]  # undefined labels the policy counts as 0 or 1 (zero / one)
    policy: str
    paired: bool = False  # left out because undefined here or in a figure it is compared with (same labels)

    @property
    def n_labels(self) -> int:
        """Every label the figure is about, averaged or left out."""
        return len(self.averaged) + len(self.left_out)

    def describe(self) -> str:
        """Which labels the mean covers, in words (printed beside every macro figure)."""
        text = (
            f"mean over {len(self.averaged)} of {self.n_labels} labels"
            if self.left_out
            else f"mean over {len(self.averaged)} labels"
        )
        if self.left_out:
            why = (
                "no positive on either side here or in a figure compared"
                if self.paired
                else "no positive on either side"
            )
            text += f"; left out ({why}): {', '.join(self.left_out)}"
        if self.filled:
            text += (
                f"; {', '.join(self.filled)} (no positive on either side) count"
                f"{'s' * (len(self.filled) == 1)} as {_FILL[ZeroDivisionPolicy(self.policy)]:g}"
            )
        return f"{text} (zero_division: {self.policy})"


def macro_figure(values, undefined, zero_division: str, paired: bool = False) -> MacroFigure:
    """The one macro rule: the mean over labels of a per-label figure (a Series by label), each undefined
    label (the boolean Series `undefined`) filled or left out as the policy says, whatever the values
    were computed with. Every macro figure the workbench shows comes from here."""
    policy = _policy(zero_division)
    values = pd.Series(values, dtype=float)
    undefined = pd.Series(undefined, index=values.index).fillna(True).astype(bool) | values.isna()
    filled = values.where(~undefined, _FILL[policy])
    mean, _ = _macro(filled.to_numpy())
    kept = filled.notna()
    labels = [str(x) for x in values.index]
    return MacroFigure(
        float(mean),
        tuple(lab for lab, k in zip(labels, kept, strict=False) if k),
        tuple(lab for lab, k in zip(labels, kept, strict=False) if not k),
        tuple(lab for lab, u, k in zip(labels, undefined, kept, strict=False) if u and k),
        policy.value,
        paired,
    )


def paired_macro_figures(values_a, undefined_a, values_b, undefined_b, zero_division: str) -> tuple[MacroFigure, ...]:
    """Two macro figures (before and after, tuning and validation, run A and run B) over the same labels: a
    label undefined on either side is treated as undefined on both, so a policy that leaves it out leaves it
    out of both means and the difference compares like with like; labels only one side has are left out."""
    a, b = pd.Series(values_a, dtype=float), pd.Series(values_b, dtype=float)
    labels = [lab for lab in a.index if lab in b.index]
    ua, ub = (
        pd.Series(u, index=v.index).reindex(labels).fillna(True).astype(bool) | v.reindex(labels).isna()
        for u, v in ((undefined_a, a), (undefined_b, b))
    )
    paired = leaves_out(zero_division)
    if paired:  # the label is left out: of both means
        ua = ub = ua | ub
    return (
        macro_figure(a.reindex(labels), ua, zero_division, paired),
        macro_figure(b.reindex(labels), ub, zero_division, paired),
    )


def finite(value) -> float | None:
    """A figure as a float, None when undefined (NaN): JSON has no NaN."""
    value = float(value)
    return None if np.isnan(value) else value


def leaves_out(zero_division: str) -> bool:
    """Whether the policy leaves an undefined label out of a macro mean (rather than counting it as 0 or 1)."""
    return bool(np.isnan(_FILL[_policy(zero_division)]))


def undefined_labels(tables, zero_division: str) -> frozenset[str]:
    """Labels whose F1 is undefined in any of several label_metrics tables, when the policy leaves such a label
    out: leaving them out of every figure compared makes the figures average the same labels."""
    if not leaves_out(zero_division):
        return frozenset()
    return frozenset(lab for t in tables for lab in t.index[t["f1_undefined"].astype(bool) | t["f1"].isna()])


def f1_from_counts(table: pd.DataFrame, zero_division: str = "undefined") -> pd.Series:
    """Per-label F1 from a table of tp, fp, fn counts (as label_metrics computes it from the cells)."""
    tp, fp, fn = (table[c].to_numpy(dtype=float) for c in ("tp", "fp", "fn"))
    return pd.Series(_f1(tp, fp, fn, _policy(zero_division))[0], index=table.index, name="f1")


def averages(table: pd.DataFrame, zero_division: str = "undefined", ci: str = "wilson") -> dict:
    """Micro (pooled counts, with intervals) and macro (mean over labels) accuracy/P/R/F1.

    Micro intervals treat every report x label cell as independent, which is optimistic
    because cells of one report are correlated; `bootstrap_macro_f1` resamples whole reports.
    """
    policy = _policy(zero_division)
    tp, fp, fn, tn = (table[col].to_numpy(dtype=float) for col in ("tp", "fp", "fn", "tn"))
    out: dict = {"zero_division": policy.value, "ci": ci, "n_labels": int(len(table))}
    sums = {name: float(x.sum()) for name, x in zip(("tp", "fp", "fn", "tn"), (tp, fp, fn, tn), strict=False)}
    out["micro_n"] = int(sum(sums.values()))
    out.update({f"micro_{name}": int(v) for name, v in sums.items()})
    micro = _per_label(np.array(sums["tp"]), np.array(sums["fp"]), np.array(sums["fn"]), np.array(sums["tn"]), policy)
    dens = {"accuracy": out["micro_n"], "precision": sums["tp"] + sums["fp"], "recall": sums["tp"] + sums["fn"]}
    nums = {"accuracy": sums["tp"] + sums["tn"], "precision": sums["tp"], "recall": sums["tp"]}
    for name in _MACRO_METRICS:
        value, undefined = micro[name]
        out[f"micro_{name}"] = float(value)
        out[f"micro_{name}_undefined"] = bool(undefined)
        if name in dens:
            out[f"micro_{name}_lo"], out[f"micro_{name}_hi"] = proportion_ci(int(nums[name]), int(dens[name]), ci)
    for name, (value, undefined) in _per_label(tp, fp, fn, tn, policy).items():
        figure = macro_figure(
            pd.Series(value, index=table.index), pd.Series(undefined, index=table.index), policy.value
        )
        out[f"macro_{name}"] = figure.value
        out[f"macro_{name}_labels_used"] = len(figure.averaged)
        out[f"macro_{name}_labels_undefined"] = int(undefined.sum())
        if name == "f1":
            out["macro_f1_labels"] = figure.describe()
    return out


# ---------------------------------------------------------------------------------------------
# Bootstrap
# ---------------------------------------------------------------------------------------------

# Bounds the (resamples x reports) weight matrix held at once (about 16 MB as float64).
_BOOTSTRAP_CELLS = 2_000_000


def _resample_weights(rng: np.random.Generator, n_rows: int, n_resamples: int) -> np.ndarray:
    """How often each report is drawn in each resample, as a (n_resamples, n_rows) matrix."""
    idx = rng.integers(0, n_rows, size=(n_resamples, n_rows))
    flat = idx + (np.arange(n_resamples) * n_rows)[:, None]
    return np.bincount(flat.ravel(), minlength=n_resamples * n_rows).reshape(n_resamples, n_rows)


def _indicators(t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """One column per (count kind, label): TP, FP, FN indicators side by side."""
    return np.hstack([(t == 1) & (p == 1), (t == 0) & (p == 1), (t == 1) & (p == 0)]).astype(float)


def _resampled_counts(t: np.ndarray, p: np.ndarray, n_resamples: int, seed: int):
    """Yield (tp, fp, fn), each (resamples, labels), for chunks of seeded report resamples.

    A resample's counts are its report weights @ the indicators, so 1,000 resamples are a few
    matrix products instead of 1,000 x labels metric calls.
    """
    n_labels = t.shape[1]
    for counts in _resampled_sums(_indicators(t, p), n_resamples, seed):
        yield counts[:, :n_labels], counts[:, n_labels : 2 * n_labels], counts[:, 2 * n_labels :]


def _resampled_sums(indicators: np.ndarray, n_resamples: int, seed: int):
    """Yield (resamples, columns) sums of the indicator columns over seeded report resamples, in chunks."""
    n_rows = indicators.shape[0]
    rng = np.random.default_rng(seed)
    chunk = max(1, _BOOTSTRAP_CELLS // max(n_rows, 1))
    for start in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - start)
        yield _resample_weights(rng, n_rows, size) @ indicators if n_rows else np.zeros((size, indicators.shape[1]))


def _percentile_bounds(parts: list[np.ndarray], n_labels: int, alpha: float) -> np.ndarray | tuple[float, float]:
    """Per-column percentile interval of resampled values; undefined (NaN) resamples left out."""
    samples = np.vstack(parts) if parts else np.zeros((0, n_labels))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a label undefined in every resample gives NaN bounds
        return np.nanquantile(samples, [alpha / 2, 1 - alpha / 2], axis=0) if len(samples) else (np.nan, np.nan)


def bootstrap_macro_f1(
    y_true: pd.DataFrame,
    y_pred: pd.DataFrame,
    n_resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
    zero_division: str = "undefined",
    method: str = "percentile",
) -> dict:
    """Bootstrap interval of macro F1 resampling whole reports (rows, in report-id order), seeded.

    method "percentile" (default) or "bc" (bias-corrected percentile): under the zero-division
    policies "zero"/"one" macro F1 is biased in resamples (a rare label loses its only positive
    and scores 0), so a percentile interval can miss the estimate itself; BC re-centres it.
    """
    if method not in ("percentile", "bc"):
        raise ValueError("method must be 'percentile' or 'bc'")
    policy = _policy(zero_division)
    _check_alpha(alpha)
    if n_resamples < 1:
        raise ValueError("n_resamples must be at least 1")
    t, p = _aligned(_by_report_id(y_true), y_pred, names=("y_true", "y_pred"))
    n_rows, n_labels = t.shape
    full = _indicators(t, p).sum(axis=0)
    estimate = _macro(_f1(full[:n_labels], full[n_labels : 2 * n_labels], full[2 * n_labels :], policy)[0])[0]
    values = [
        _macro(_f1(tp, fp, fn, policy)[0], axis=1)[0] for tp, fp, fn in _resampled_counts(t, p, n_resamples, seed)
    ]
    samples = np.concatenate(values)
    finite = samples[~np.isnan(samples)]
    q_lo, q_hi = alpha / 2, 1 - alpha / 2
    if method == "bc" and finite.size:
        # share of resamples below the estimate (ties half), kept off 0 and 1 so z0 stays finite
        share = (np.sum(finite < estimate) + 0.5 * np.sum(finite == estimate)) / finite.size
        share = min(max(share, 1 / (finite.size + 1)), finite.size / (finite.size + 1))
        special = _special()
        z0 = special.ndtri(share)  # ndtri/ndtr are stats.norm.ppf/cdf
        q_lo = float(special.ndtr(2 * z0 + special.ndtri(alpha / 2)))
        q_hi = float(special.ndtr(2 * z0 + special.ndtri(1 - alpha / 2)))
    lo, hi = np.quantile(finite, [q_lo, q_hi]) if finite.size else (np.nan, np.nan)
    return {
        "method": method,
        "estimate": float(estimate),
        "lo": float(lo),
        "hi": float(hi),
        "n_resamples": int(n_resamples),
        "seed": seed,
        "alpha": alpha,
        "zero_division": policy.value,
        "n_reports": int(n_rows),
        "n_resamples_undefined": int(samples.size - finite.size),
    }


def bootstrap_label_f1(
    y_true: pd.DataFrame,
    y_pred: pd.DataFrame,
    n_resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Per-label percentile bootstrap interval of F1 (resampling reports), for forest plots.

    F1 is not a binomial proportion, so it has no Wilson interval; resamples in which a label's
    F1 is undefined (no positive on either side) are left out of that label's interval.
    """
    _check_alpha(alpha)
    t, p = _aligned(_by_report_id(y_true), y_pred, names=("y_true", "y_pred"))
    parts = [
        _f1(tp, fp, fn, ZeroDivisionPolicy.UNDEFINED)[0] for tp, fp, fn in _resampled_counts(t, p, n_resamples, seed)
    ]
    lo, hi = _percentile_bounds(parts, t.shape[1], alpha)
    return pd.DataFrame({"f1_lo": lo, "f1_hi": hi}, index=pd.Index(y_true.columns, name="label"))


# ---------------------------------------------------------------------------------------------
# Paired comparison of two runs
# ---------------------------------------------------------------------------------------------


def _check_discordant(b: np.ndarray, c: np.ndarray) -> None:
    if np.any((b < 0) | (c < 0)) or np.any((b != np.round(b)) | (c != np.round(c))):
        raise ValueError("discordant counts b and c must be non-negative integers")


def mcnemar_exact_arrays(b, c, mid_p: bool = False) -> np.ndarray:
    """Exact two-sided McNemar p-values element-wise (binomial test on the discordant pairs)."""
    from scipy import stats

    b, c = np.broadcast_arrays(np.asarray(b, dtype=float), np.asarray(c, dtype=float))
    _check_discordant(b, c)
    total, smaller = b + c, np.minimum(b, c)
    doubled_tail = 2 * stats.binom.cdf(smaller, total, 0.5)
    if mid_p:
        # Mid-p: half weight on the observed value in each tail, i.e. the unclipped doubled
        # tail minus P(X = observed); with b == c this is exactly 1 by symmetry.
        doubled_tail = doubled_tail - stats.binom.pmf(smaller, total, 0.5)
    # b + c == 0 gives cdf(0; 0) = 1: the two versions cannot be told apart, p = 1.
    return np.minimum(doubled_tail, 1.0)


def mcnemar_exact(b: int, c: int, mid_p: bool = False) -> float:
    """Exact two-sided McNemar p-value for b and c discordant pairs; b + c == 0 gives 1.0."""
    return float(mcnemar_exact_arrays(b, c, mid_p))


def holm(pvalues) -> np.ndarray:
    """Holm step-down adjusted p-values; NaN entries stay NaN and are not in the family."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    q = p[ok]
    order = np.argsort(q, kind="stable")
    m = q.size
    adjusted = np.minimum(np.maximum.accumulate((m - np.arange(m)) * q[order]), 1.0)
    result = np.empty(m)
    result[order] = adjusted
    out[ok] = result
    return out


# Paired reports considered at most when looking for the size with the wanted power.
_MAX_REPORTS = 10_000_000
POWER = 0.8


def mcnemar_power(n: int, p_broken: float, p_fixed: float, alpha: float, min_discordant: int = 0) -> float:
    """Power of the exact two-sided McNemar test (p < alpha) with n paired reports.

    Each report is discordant "broken" with probability p_broken and "fixed" with p_fixed; the
    number of discordant pairs D is binomial(n, p_broken + p_fixed) and, given D, the broken
    count binomial(D, p_broken / (p_broken + p_fixed)). Power sums, over D >= min_discordant
    (the verdict needs that many), P(D) times the chance that the smaller count falls in the
    exact test's rejection region. Computed exactly (no simulation), vectorised over D.
    """
    from scipy import stats

    psi = p_broken + p_fixed
    if n <= 0 or psi <= 0:
        return 0.0
    sd = np.sqrt(n * psi * (1 - psi))
    lo = max(int(n * psi - 9 * sd) - 1, min_discordant, 1)
    hi = min(int(n * psi + 9 * sd) + 2, n)
    if lo > hi:
        return 0.0
    d = np.arange(lo, hi + 1)
    # largest smaller count with exact p < alpha: cdf(k; D, 1/2) < alpha / 2
    k = stats.binom.ppf(alpha / 2, d, 0.5).astype(np.int64)
    k -= stats.binom.cdf(k, d, 0.5) >= alpha / 2
    q = p_broken / psi
    reject = np.where(k >= 0, stats.binom.cdf(k, d, q) + stats.binom.sf(d - k - 1, d, q), 0.0)
    return float(np.sum(stats.binom.pmf(d, n, psi) * reject))


def _connor_size(p_broken: float, p_fixed: float, alpha: float, power: float) -> float:
    """Connor's (1987) normal-approximation sample size for McNemar's test (a starting point)."""
    psi, delta = p_broken + p_fixed, p_fixed - p_broken
    special = _special()
    za, zb = -special.ndtri(alpha / 2), -special.ndtri(1 - power)  # = stats.norm.isf
    return (za * np.sqrt(psi) + zb * np.sqrt(psi - delta**2)) ** 2 / delta**2


def reports_for_power(
    p_broken: float, p_fixed: float, alpha: float, power: float = POWER, min_discordant: int = 0
) -> int | None:
    """Paired reports at which the exact McNemar test reaches `power` (None above _MAX_REPORTS).

    Starts from Connor's approximation, doubles until the exact power is reached, then bisects
    for the smallest such size (the exact power zig-zags slightly with n; bisection finds a
    crossing, which a test checks against simulation).
    """
    if p_broken == p_fixed:
        return None
    start = max(int(_connor_size(p_broken, p_fixed, alpha, power)), min_discordant, 1)
    lo, hi = max(start // 2, 1), start
    while mcnemar_power(hi, p_broken, p_fixed, alpha, min_discordant) < power:
        lo, hi = hi, hi * 2
        if hi > _MAX_REPORTS:
            return None
    if mcnemar_power(lo, p_broken, p_fixed, alpha, min_discordant) >= power:
        lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mcnemar_power(mid, p_broken, p_fixed, alpha, min_discordant) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def _reports_needed(b: int, c: int, n: int, alpha: float, min_discordant: int) -> tuple[float, str]:
    if b + c == 0:
        return np.nan, "no difference seen: the runs agree on every report"
    if b == c:
        return np.nan, "no difference seen: as many fixed as broken"
    total = reports_for_power(b / n, c / n, alpha, POWER, min_discordant)
    if total is None:
        return np.nan, f"more than {_MAX_REPORTS:,} reports would be needed"
    return float(max(total - n, 0)), ""


def compare_labels(
    y_true: pd.DataFrame,
    pred_a: pd.DataFrame,
    pred_b: pd.DataFrame,
    mid_p: bool = False,
    alpha: float = 0.05,
    min_discordant: int = 10,
    zero_division: str = "undefined",
) -> pd.DataFrame:
    """Per-label paired comparison of run A and run B against the reference (exact McNemar, Holm).

    Only cells evaluable in the reference and in both runs count. b = A right and B wrong
    (broken), c = A wrong and B right (fixed). The verdict uses the Holm-adjusted p-value across
    labels: "better"/"worse" when p_holm < alpha, "no significant change" otherwise, and
    "undecided" whenever 0 < b + c < min_discordant, too few changed cases to judge, and "no change"
    when b + c == 0 (the runs agree on every case of the label).

    reports_needed is a power figure: the additional paired reports (beyond n) at which the exact
    McNemar test would reach 80% power if the observed per-report rates of broken (b / n) and
    fixed (c / n) cases held, at alpha / m, the strictest Holm step over the m labels compared
    (so the verdict, which uses Holm, would be "better"/"worse" with at least that chance
    whatever the other labels do), counting only samples with at least min_discordant changed
    cases. 0 means the current size already has that power. It is NaN, with "no difference
    seen" in reports_note, when b + c == 0 or b == c. alpha_power holds the level used.
    """
    policy = _policy(zero_division)
    _check_alpha(alpha)
    t, a, b_ = _aligned(y_true, pred_a, pred_b, names=("y_true", "pred_a", "pred_b"))
    valid = ~(np.isnan(t) | np.isnan(a) | np.isnan(b_))
    right_a, right_b = valid & (a == t), valid & (b_ == t)
    n = valid.sum(axis=0)
    broken, fixed = (right_a & ~right_b).sum(axis=0), (~right_a & right_b).sum(axis=0)
    out: dict = {"n": n, "correct_a": right_a.sum(axis=0), "correct_b": right_b.sum(axis=0)}
    out["b"], out["c"] = broken, fixed
    out["accuracy_a"] = _ratio(out["correct_a"], n, ZeroDivisionPolicy.UNDEFINED)[0]
    out["accuracy_b"] = _ratio(out["correct_b"], n, ZeroDivisionPolicy.UNDEFINED)[0]
    out["delta_accuracy"] = out["accuracy_b"] - out["accuracy_a"]
    common = np.where(valid, t, np.nan)
    for name, pred in (("a", a), ("b", b_)):
        counts = _confusion(common, np.where(valid, pred, np.nan))
        out[f"f1_{name}"], out[f"f1_{name}_undefined"] = _f1(counts["tp"], counts["fp"], counts["fn"], policy)
    out["delta_f1"] = out["f1_b"] - out["f1_a"]
    out["p_value"] = mcnemar_exact_arrays(broken, fixed, mid_p)
    out["p_holm"] = holm(out["p_value"])
    out["verdict"] = _verdicts(broken, fixed, out["p_holm"], alpha, min_discordant)
    alpha_power = alpha / max(int(np.sum(~np.isnan(out["p_value"]))), 1)  # Holm's strictest step
    needed = [
        _reports_needed(int(x), int(y), int(m), alpha_power, min_discordant)
        for x, y, m in zip(broken, fixed, n, strict=False)
    ]
    out["reports_needed"] = np.array([value for value, _ in needed], dtype=float)
    out["reports_note"] = np.array([note for _, note in needed], dtype=object)
    table = pd.DataFrame(out, index=pd.Index(y_true.columns, name="label"))
    table.attrs.update(
        mid_p=mid_p,
        alpha=alpha,
        min_discordant=min_discordant,
        zero_division=policy.value,
        alpha_power=alpha_power,
        power=POWER,
    )
    table["verdict_note"] = verdict_notes(table)
    return table


def verdict_notes(table: pd.DataFrame) -> np.ndarray:
    """Per row, why an unadjusted figure and the Holm-adjusted verdict disagree ("" where they agree).

    Unadjusted: the McNemar p-value before Holm, and (when the table has delta_f1_lo / delta_f1_hi)
    the bootstrap interval of the change in F1. Reads alpha and min_discordant from table.attrs."""
    alpha, least = table.attrs.get("alpha", 0.05), table.attrs.get("min_discordant", 10)
    m = int(table["p_value"].notna().sum())
    has_interval = {"delta_f1_lo", "delta_f1_hi"} <= set(table.columns)
    notes = []
    for row in table.itertuples():
        called = row.verdict in ("better", "worse")
        changed = int(row.b + row.c)
        why_not = (
            f"only {changed} changed case(s), fewer than the {least} a verdict needs"
            if row.verdict == "undecided"
            else f"Holm-adjusted over {m} labels p = {p_text(row.p_holm)}, not below {alpha}"
        )
        excludes = has_interval and not pd.isna(row.delta_f1_lo) and (row.delta_f1_lo > 0 or row.delta_f1_hi < 0)
        if not called and excludes:
            notes.append(
                f"the 95% interval of the change in F1 [{row.delta_f1_lo:+.3f}, {row.delta_f1_hi:+.3f}] "
                f"excludes 0 (unadjusted) but the test does not decide: {why_not}"
            )
        elif not called and not pd.isna(row.p_value) and row.p_value < alpha and row.verdict != "no change":
            notes.append(f"p = {p_text(row.p_value)} before adjustment, but {why_not}")
        elif called and has_interval and not pd.isna(row.delta_f1_lo) and row.delta_f1_lo <= 0 <= row.delta_f1_hi:
            notes.append(
                f"McNemar counts right and wrong answers ({row.c} fixed, {row.b} broken); the change in F1 "
                f"[{row.delta_f1_lo:+.3f}, {row.delta_f1_hi:+.3f}] includes 0 (F1 weighs positives only)"
            )
        else:
            notes.append("")
    return np.array(notes, dtype=object)


def p_text(p: float) -> str:
    """A p-value as people read it: three decimals, "< 0.001" below that (never "0.000")."""
    return "< 0.001" if 0 <= p < 0.001 else f"{p:.3f}"


def _verdicts(b: np.ndarray, c: np.ndarray, p_holm: np.ndarray, alpha: float, min_discordant: int) -> np.ndarray:
    significant = p_holm < alpha
    # b + c == 0: the two runs agree on every case of the label; there is nothing to decide
    return np.select(
        [b + c == 0, b + c < min_discordant, significant & (c > b), significant & (b > c)],
        ["no change", "undecided", "better", "worse"],
        default="no significant change",
    ).astype(object)


def fixed_and_broken(y_true: pd.DataFrame, pred_a: pd.DataFrame, pred_b: pd.DataFrame) -> pd.DataFrame:
    """Long table of cells run B fixed (A wrong, B right) or broke (A right, B wrong), by label."""
    t, a, b = _aligned(y_true, pred_a, pred_b, names=("y_true", "pred_a", "pred_b"))
    valid = ~(np.isnan(t) | np.isnan(a) | np.isnan(b))
    right_a, right_b = valid & (a == t), valid & (b == t)
    changed = right_a != right_b
    # Transposed so rows come out grouped by label, in vocabulary order, then by report order.
    cols, rows = np.nonzero(changed.T)
    return pd.DataFrame(
        {
            "report": y_true.index.to_numpy()[rows],
            "label": y_true.columns.to_numpy()[cols],
            "change": np.where(right_b[rows, cols], "fixed", "broken").astype(object),
            "reference": t[rows, cols].astype(np.int64),
            "value_a": a[rows, cols].astype(np.int64),
            "value_b": b[rows, cols].astype(np.int64),
        }
    )


def subset_accuracy(y_true: pd.DataFrame, y_pred: pd.DataFrame, mask: pd.DataFrame, ci: str = "wilson") -> pd.DataFrame:
    """Per-label accuracy with interval over the cells where mask is True (e.g. unanimous votes)."""
    t, p = _aligned(y_true, y_pred, names=("y_true", "y_pred"))
    if not (mask.index.sort_values().equals(y_true.index.sort_values()) and set(mask.columns) == set(y_true.columns)):
        raise ValueError("mask must have the same reports (index) and labels (columns) as y_true")
    # A missing mask value means "not in the subset".
    keep = mask.reindex(index=y_true.index, columns=y_true.columns).to_numpy(dtype=float, na_value=0.0) != 0
    valid = keep & ~(np.isnan(t) | np.isnan(p))
    n = valid.sum(axis=0)
    correct = (valid & (t == p)).sum(axis=0)
    lo, hi = proportion_ci_arrays(correct, n, ci)
    return pd.DataFrame(
        {
            "n": n,
            "n_masked_out": (~keep).sum(axis=0),
            "correct": correct,
            "accuracy": _ratio(correct, n, ZeroDivisionPolicy.UNDEFINED)[0],
            "accuracy_lo": lo,
            "accuracy_hi": hi,
        },
        index=pd.Index(y_true.columns, name="label"),
    )


def bootstrap_delta_f1(
    y_true: pd.DataFrame,
    pred_a: pd.DataFrame,
    pred_b: pd.DataFrame,
    n_resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Paired percentile bootstrap interval of each label's change in F1 (B - A), resampling reports.

    Both runs are scored on the same resampled reports, so the interval is of the paired change;
    a cell missing in either run (failed call, waiting reference) counts in neither.
    """
    _check_alpha(alpha)
    t, a, b = _aligned(_by_report_id(y_true), pred_a, pred_b, names=("y_true", "pred_a", "pred_b"))
    missing = np.isnan(t) | np.isnan(a) | np.isnan(b)
    t, a, b = (np.where(missing, np.nan, m) for m in (t, a, b))
    k = t.shape[1]
    parts = []
    for counts in _resampled_sums(np.hstack([_indicators(t, a), _indicators(t, b)]), n_resamples, seed):
        f1_a = _f1(counts[:, :k], counts[:, k : 2 * k], counts[:, 2 * k : 3 * k], ZeroDivisionPolicy.UNDEFINED)[0]
        f1_b = _f1(
            counts[:, 3 * k : 4 * k], counts[:, 4 * k : 5 * k], counts[:, 5 * k :], ZeroDivisionPolicy.UNDEFINED
        )[0]
        parts.append(f1_b - f1_a)
    lo, hi = _percentile_bounds(parts, k, alpha)
    return pd.DataFrame({"delta_f1_lo": lo, "delta_f1_hi": hi}, index=pd.Index(y_true.columns, name="label"))
