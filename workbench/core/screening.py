"""Frugal optimisation: screen a proposal on a small stratified part of the tuning reports before it
is labelled in full.

The screen holds every tuning report the label currently gets wrong (the only ones a change can fix)
and a seeded sample of the ones it gets right, stratified by the reference value (the only ones a
change can break). Broken cases found in the sample are scaled up to the whole of the agreements,
so the screen estimates the net change on the full tuning part at a fraction of its calls.
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

    def why(self) -> str:
        """One line a person reads."""
        head = (
            f"screen on {self.reports} tuning reports: fixed {self.fixed}, broken {self.broken} "
            f"(about {self.broken_estimate:.1f} on all of tuning), net about {self.net_estimate:+.1f}, "
            f"McNemar p = {self.p_value:.3f}"
        )
        if self.noise_allowance:
            head += f", noise alone about {self.noise_allowance:.1f}"
        return head + ("; passed: validation asked in full" if self.passed else "; screened out: validation not asked")

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
    return Screen(disagreements, tuple(picked), weights)


def screen_verdict(
    screen: Screen, reference: pd.Series, before: pd.Series, after: pd.Series, noise_rate: float = 0.0
) -> ScreenVerdict:
    """Fixed and broken on the screen, broken scaled up to all agreements; passed when the estimated net
    gain beats what noise alone would change on the screen and chance is unlikely to give it (p <= SCREEN_P)."""
    ids = screen.ids
    ref, b, a = reference.reindex(ids), before.reindex(ids), after.reindex(ids)
    fixed_mask = (b != ref) & (a == ref)
    broken_mask = (b == ref) & (a != ref) & a.notna()
    fixed, broken = int(fixed_mask.sum()), int(broken_mask.sum())
    broken_estimate = float(sum(screen.weights.get(r, 1.0) for r in broken_mask.index[broken_mask]))
    net = fixed - broken_estimate
    allowance = noise_rate * len(ids)
    p = float(metrics.mcnemar_exact(int(round(broken_estimate)), fixed))
    return ScreenVerdict(
        len(ids), fixed, broken, broken_estimate, net, allowance, p, passed=bool(net > allowance and p <= SCREEN_P)
    )
