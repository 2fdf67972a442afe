"""Adaptive reading: stop giving a report to readers once its reference can no longer change.

Under `at_least K of N`, `positive_at_least K of N` or a majority rule the reference of an item is the vote of the full panel
of N readers. After some of them have read it, the full panel's vote is a function of how many of
the remaining readers will mark it positive, which is somewhere between 0 and all of them. When
every one of those possibilities gives the same outcome (the same value, or the same "no decisive
vote"), the outcome is final: no reading still to come can change it, so the remaining reads are
saved and the reference computed from the readings so far *is* the full panel's. A report leaves
the work lists once every asked label is final; an agreement sample keeps full overlap so the
readers' agreement stays estimable. Pure: numpy and pandas, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.core.reference import ReferenceRule, vote

ORDERS = {
    "finish": "reports nearest a decision first (most readers so far), then the agreement sample, then unread ones",
    "cohort": "the cohort's own order (the order before adaptive reading)",
}
# groups of the "finish" order: started reports first, then the agreement sample, then unread ones
STARTED, SAMPLE, UNREAD = 0, 1, 2


@dataclass(frozen=True)
class AdaptiveSettings:
    """The study's `adaptive:` settings: on/off, agreement sample share and seed, escalation, order."""

    enabled: bool = False
    agreement_share: float = 0.2
    seed: int = 0
    extra_reader: bool = False
    order: str = "finish"

    KEYS = ("enabled", "agreement_share", "seed", "extra_reader", "order")

    def __post_init__(self) -> None:
        if not 0 <= self.agreement_share <= 1:
            raise ValueError(f"agreement_share must be between 0 and 1, got {self.agreement_share}")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {self.order!r}")

    @classmethod
    def from_config(cls, data: dict | None) -> AdaptiveSettings:
        """Build from workbench.yaml's `adaptive` mapping (missing: off); unknown keys are refused."""
        data = dict(data or {})
        unknown = sorted(set(data) - set(cls.KEYS))
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} (allowed: {', '.join(cls.KEYS)})")
        return cls(
            enabled=bool(data.get("enabled", False)),
            agreement_share=float(data.get("agreement_share", 0.2)),
            seed=int(data.get("seed", 0)),
            extra_reader=bool(data.get("extra_reader", False)),
            order=str(data.get("order", "finish")),
        )

    def to_config(self) -> dict:
        """Plain data for workbench.yaml."""
        return {k: getattr(self, k) for k in self.KEYS}


def panel_size(rule: ReferenceRule) -> int:
    """The full panel: N readers per report (the rule's N)."""
    return int(rule.n)


def settled_vote(positives, n, rule: ReferenceRule, panel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, reason, final): the full panel's vote where no remaining reader can change it.

    With n < panel readers so far, the panel's vote is vote(positives + e, panel) for some e in
    0..panel - n. The outcome is final when every e gives the same value and reason; the value is
    then that outcome (NaN with "no decisive vote" for a tie). Otherwise value is NaN, reason "too
    few readers" and final False. Items with n >= panel (everyone read, or more readers than the
    panel) keep the plain vote and are final.
    """
    positives = np.asarray(positives, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    remaining = np.maximum(panel - n, 0)
    first_value, first_reason = vote(positives, np.where(n < panel, panel, n), rule)
    final = np.ones(positives.shape, dtype=bool)
    for extra in range(1, int(remaining.max(initial=0)) + 1):
        more = remaining >= extra
        value, reason = vote(positives + extra, np.full(positives.shape, panel), rule)
        same = ((value == first_value) | (np.isnan(value) & np.isnan(first_value))) & (reason == first_reason)
        final &= ~more | same
    plain_value, plain_reason = vote(positives, n, rule)
    out_value = np.where(n >= panel, plain_value, np.where(final, first_value, np.nan))
    out_reason = np.where(n >= panel, plain_reason, np.where(final, first_reason, "too few readers"))
    return out_value, out_reason, final


def report_status(
    counts: pd.DataFrame,
    rule: ReferenceRule,
    labels: list[str],
    sample: set[str],
    extra_reader: bool = False,
    report_ids: list[str] | None = None,
) -> pd.DataFrame:
    """Per report (of report_ids, else those in counts: report_id, label, positives, n_readers): open,
    tie, readers (the most readers of any label), cap.

    A report is open while any asked label is not final, while it is in the agreement sample and
    fewer than the panel have read it, or (extra_reader, majority rules) while a label is tied at the
    panel and one more reader has not read it yet. cap is the most readers the report may get.
    """
    panel = panel_size(rule)
    counts = counts[counts["label"].isin(labels)]
    n = counts["n_readers"].to_numpy(dtype=np.int64)
    value, _, final = settled_vote(counts["positives"].to_numpy(), n, rule, panel)
    tie = final & np.isnan(value)  # no decisive vote, whatever the readers still to come say
    # numpy, not groupby: this runs for one report inside every saved reading
    code, ids = pd.factorize(counts["report_id"])
    if report_ids is not None:  # reports nobody has read yet: open, no readers
        ids = pd.Index(report_ids)
        code = ids.get_indexer(counts["report_id"])
        keep = code >= 0
        code, n, final, tie = code[keep], n[keep], final[keep], tie[keep]
    size = len(ids)
    finals = np.bincount(code, weights=final, minlength=size)
    any_tie = np.bincount(code, weights=tie, minlength=size) > 0
    readers = np.zeros(size, dtype=np.int64)
    np.maximum.at(readers, code, n)
    all_final = finals >= len(labels)
    in_sample = np.isin(np.asarray(ids, dtype=object), list(sample)) if sample else np.zeros(size, dtype=bool)
    # one more reader can break a tie only under a majority rule: under at_least K of N, N + 1 readers
    # need ceil(K (N + 1) / N) > K votes on a side, which one more reading never gives a side short of K;
    # positive_at_least never ties (short of K positives is negative)
    escalate = extra_reader & (rule.kind == "majority") & any_tie
    cap = np.where(escalate, panel + 1, panel)
    is_open = (~all_final | (in_sample & (readers < panel)) | (escalate & (readers < panel + 1))) & (readers < cap)
    out = pd.DataFrame(
        {"report_id": np.asarray(ids, dtype=object), "open": is_open, "tie": any_tie, "readers": readers, "cap": cap}
    )
    return out[["report_id", "open", "tie", "readers", "cap"]]


def offered(candidates: pd.DataFrame) -> pd.DataFrame:
    """The reports a reader may be given next, from the per-report candidates frame.

    candidates: report_id, seq, open, readers, cap, sample, mine (the reader has read or claimed it),
    in_flight (other readers' live claims). A report outside the agreement sample is given to one
    reader at a time (no read in flight that a decision could make useless); a sample report to as
    many as its cap allows. Nothing here looks at reading values.
    """
    c = candidates
    readers, in_flight = c["readers"].to_numpy(), c["in_flight"].to_numpy()
    room = readers + in_flight < c["cap"].to_numpy()
    single = c["sample"].to_numpy() | (in_flight == 0)
    return c[c["open"].to_numpy() & ~c["mine"].to_numpy() & room & single]


def reading_order(frame: pd.DataFrame, order: str = "finish") -> pd.DataFrame:
    """Offered reports in reading order: finish (started first, most readers first, then the agreement
    sample, then unread) or cohort (report order)."""
    seq = frame["seq"].to_numpy()
    if order == "cohort":
        return frame.iloc[np.argsort(seq, kind="stable")]
    readers = frame["readers"].to_numpy()
    group = np.where(frame["sample"].to_numpy(), SAMPLE, np.where(readers > 0, STARTED, UNREAD))
    return frame.iloc[np.lexsort((seq, -readers, group))]


def reads_summary(status: pd.DataFrame, panel: int, n_reports: int) -> dict:
    """Reads done, reads saved (closed reports' unread panel places) and the share of a full panel."""
    readers = status["readers"].to_numpy() if len(status) else np.zeros(0, dtype=int)
    closed = ~status["open"].to_numpy() if len(status) else np.zeros(0, dtype=bool)
    done = int(readers.sum())
    saved = int(np.maximum(panel - readers[closed], 0).sum())
    full = int(panel * n_reports)
    return {
        "reads_done": done,
        "reads_saved": saved,
        "full_panel": full,
        "saved_share": saved / full if full else float("nan"),
    }
