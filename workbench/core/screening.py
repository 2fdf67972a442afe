"""Frugal optimisation: screen a proposal on a small stratified part of the tuning reports before it
is labelled in full.

The screen holds every tuning report the label currently gets wrong (the only ones a change can fix)
and a seeded sample of the ones it gets right, stratified by the reference value (the only ones a
change can break). Broken cases found in the sample are scaled up to the whole of the agreements,
so the screen estimates the net change on the full tuning part at a fraction of its calls.

The screen is asked in two steps: the disagreements first (only they can be fixed), then the agreements
(only they can be broken). When the proposal could not pass even with no agreement broken (too few fixed
for chance, or an F1 that cannot rise), the agreements are not asked: the same verdict, fewer calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.core import metrics

MIN_AGREEMENTS = 100  # sampled agreements at least (fewer when there are fewer)
AGREEMENTS_PER_DISAGREEMENT = 2
# exact McNemar on the screen (fixed vs estimated broken): a larger p is a gain chance could give. 0.125 lets
# through 4 fixed with none broken, not 3 or fewer; on OpenI 0.1 (5 fixed) kept 0.013 less validation gain
SCREEN_P = 0.125


@dataclass(frozen=True)
class Screen:
    """Which tuning reports a screen labels, and how many agreements each sampled one stands for."""

    disagreements: tuple[str, ...]
    agreements: tuple[str, ...]
    weights: dict  # sampled agreement id -> agreements of its stratum / sampled of its stratum
    population: tuple[str, ...] = ()  # every tuning report sampled from: the label's F1 is estimated over them

    @property
    def ids(self) -> list[str]:
        """Every report the screen labels."""
        return [*self.disagreements, *self.agreements]


@dataclass(frozen=True)
class ScreenVerdict:
    """The outcome of one screen: counts, the estimate for the full tuning part, and pass or not."""

    reports: int
    fixed: int
    broken: int
    broken_estimate: float
    net_estimate: float
    noise_allowance: float
    p_value: float
    passed: bool
    f1_before: float = float("nan")  # the label's F1 on all of tuning, and as estimated after the change
    f1_after: float = float("nan")
    stopped: bool = False  # the agreements were not asked: even with none broken it could not pass

    def why(self) -> str:
        """One line a person reads."""
        if self.stopped:
            head = (
                f"screen on the {self.reports} tuning disagreements: fixed {self.fixed}, McNemar p = "
                f"{self.p_value:.3f} even with no agreement broken, F1 on tuning {_f(self.f1_before)} -> "
                f"{_f(self.f1_after)} at best"
            )
        else:
            head = (
                f"screen on {self.reports} tuning reports: fixed {self.fixed}, broken {self.broken} "
                f"(about {self.broken_estimate:.1f} on all of tuning), net about {self.net_estimate:+.1f}, "
                f"McNemar p = {self.p_value:.3f}, F1 on tuning {_f(self.f1_before)} -> about {_f(self.f1_after)}"
            )
        if self.noise_allowance:
            head += f", noise alone about {self.noise_allowance:.1f}"
        if self.passed:
            return head + "; passed: validation asked in full"
        if self.stopped:
            return head + "; screened out before the agreements were asked: validation not asked"
        return head + "; screened out: validation not asked"

    def to_dict(self) -> dict:
        """Plain figures for the stored report."""
        return {
            "reports": self.reports,
            "fixed": self.fixed,
            "broken": self.broken,
            "broken_estimate": round(self.broken_estimate, 2),
            "net_estimate": round(self.net_estimate, 2),
            "noise_allowance": round(self.noise_allowance, 2),
            "p_value": self.p_value,
            "passed": self.passed,
            "f1_before": _num(self.f1_before),
            "f1_after": _num(self.f1_after),
            "stopped": self.stopped,
        }


def screen_sample(reference: pd.Series, prediction: pd.Series, seed: int = 0) -> Screen:
    """Every disagreement, plus a seeded sample of agreements stratified by reference value."""
    wrong = reference != prediction
    disagreements = tuple(reference.index[wrong])
    agree = reference[~wrong]
    want = min(len(agree), max(MIN_AGREEMENTS, AGREEMENTS_PER_DISAGREEMENT * len(disagreements)))
    rng = np.random.default_rng(seed)
    picked: list[str] = []
    weights: dict = {}
    for value in sorted(agree.unique()):
        stratum = list(agree.index[agree == value])
        share = max(1, round(want * len(stratum) / len(agree))) if want else 0
        take = [stratum[i] for i in sorted(rng.choice(len(stratum), size=min(share, len(stratum)), replace=False))]
        picked += take
        weights.update({r: len(stratum) / len(take) for r in take})
    return Screen(disagreements, tuple(picked), weights, tuple(reference.index))


def screen_verdict(
    screen: Screen,
    reference: pd.Series,
    before: pd.Series,
    after: pd.Series,
    noise_rate: float = 0.0,
    zero_division: str = "undefined",
    asked: list[str] | None = None,
) -> ScreenVerdict:
    """Fixed and broken on the screen, broken scaled up to all agreements; passed when the estimated net
    gain beats what noise alone would change on the screen, chance is unlikely to give it (p <= SCREEN_P) and
    the label's F1 on all of tuning (estimated, under the study's zero-division policy) rises: a change that
    cannot raise it is not worth asking validation for (a label with no reference positive has F1 0 or
    undefined whatever the prompt says, unless the policy counts nothing found as perfect: "one").

    asked: the reports answered so far (first step: the disagreements); the verdict is then the best case, as
    if no agreement were broken, and stopped says the rest need not be asked when even that does not pass."""
    ids = screen.ids
    ref, b, a = reference.reindex(ids), before.reindex(ids), after.reindex(ids)
    fixed_mask = (b != ref) & (a == ref)
    broken_mask = (b == ref) & (a != ref) & a.notna()
    fixed, broken = int(fixed_mask.sum()), int(broken_mask.sum())
    weight = pd.Series([screen.weights.get(r, 1.0) for r in ids], index=ids, dtype=float)
    broken_estimate = float(weight[broken_mask].sum())
    net = fixed - broken_estimate
    allowance = noise_rate * len(ids)
    p = float(metrics.mcnemar_exact(int(round(broken_estimate)), fixed))
    f1_before, f1_after = _f1_estimate(screen, reference, before, fixed_mask, broken_mask, weight, zero_division)
    rises = bool(f1_after > f1_before)  # NaN on either side: no rise
    passed = bool(net > allowance and p <= SCREEN_P and rises)
    return ScreenVerdict(
        len(ids) if asked is None else len(asked),
        fixed,
        broken,
        broken_estimate,
        net,
        allowance,
        p,
        passed=passed,
        f1_before=f1_before,
        f1_after=f1_after,
        stopped=asked is not None and not passed,
    )


def _f1_estimate(
    screen: Screen, reference, before, fixed_mask, broken_mask, weight, zero_division: str
) -> tuple[float, float]:
    """The label's F1 on all of tuning before (counted) and after (its cells moved by the screen's fixed cases and
    its broken ones scaled up to all agreements)."""
    population = list(screen.population) or screen.ids
    ref, b = reference.reindex(population), before.reindex(population)
    cells = {
        "tp": float(((ref == 1) & (b == 1)).sum()),
        "fp": float(((ref == 0) & (b == 1)).sum()),
        "fn": float(((ref == 1) & (b == 0)).sum()),
    }
    sref = reference.reindex(screen.ids)
    fixed_pos, fixed_neg = float((fixed_mask & (sref == 1)).sum()), float((fixed_mask & (sref == 0)).sum())
    broken_pos = float(weight[broken_mask & (sref == 1)].sum())  # a found finding missed: tp -> fn
    broken_neg = float(weight[broken_mask & (sref == 0)].sum())  # a right "no" turned "yes": tn -> fp
    moved = {
        "tp": cells["tp"] + fixed_pos - broken_pos,
        "fp": cells["fp"] - fixed_neg + broken_neg,
        "fn": cells["fn"] - fixed_pos + broken_pos,
    }
    table = pd.DataFrame([cells, moved])
    f1 = metrics.f1_from_counts(table, zero_division)
    return float(f1.iloc[0]), float(f1.iloc[1])


def fixable(screen: Screen, reference: pd.Series, before: pd.Series) -> list[str]:
    """The screen's reports a change can fix (wrong under the answers before): what its first step asks."""
    ids = screen.ids
    wrong = reference.reindex(ids) != before.reindex(ids)
    return [r for r, w in zip(ids, wrong, strict=True) if w]


def _num(value: float) -> float | None:
    """A figure for JSON (None for NaN)."""
    return None if np.isnan(value) else round(float(value), 4)


def _f(value: float) -> str:
    """A figure for a person ("n/a" when undefined)."""
    return "n/a" if np.isnan(value) else f"{value:.3f}"
