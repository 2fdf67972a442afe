"""The reference standard: readers' votes under the study's rule, with adjudication on top.

A (report, label) is decided when enough readers agree: under `at_least` K of N either way (a 3-3
tie under 4 of 6 waits for a senior reader), under `positive_at_least` positive when at least K of N
mark it and negative otherwise (the Ran Score paper's wording; never a tie); too few readers wait. An adjudication always
overrides the vote; an item flagged as "the reference is wrong" waits again until an
adjudication newer than the flag exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.errors import UserError

RULES = ("at_least", "positive_at_least", "majority")
# how the app and the CLI name each rule kind (K and N are the rule's numbers)
RULE_NAMES = {
    "at_least": "at least K of N agree (either way; otherwise adjudication)",
    "positive_at_least": "positive when at least K of N mark it, otherwise negative",
    "majority": "majority of at least N",
}
WITH_K = ("at_least", "positive_at_least")  # the kinds that take K

# item status values
DECIDED = "decided"
ADJUDICATED = "adjudicated"
WAITING = "waiting"


@dataclass(frozen=True)
class ReferenceRule:
    """`at_least K of N` (both sides need K votes, N readers needed), `positive_at_least K of N` (positive
    with K votes, otherwise negative) or `majority` (of >= N readers)."""

    kind: str = "at_least"
    k: int = 4
    n: int = 6

    def __post_init__(self) -> None:
        if self.kind not in RULES:
            raise UserError(f"reference rule must be one of {RULES}, got {self.kind!r}")
        if self.n < 1 or (self.kind in WITH_K and not 1 <= self.k <= self.n):
            raise UserError(f"reference rule needs 1 <= K <= N, got K={self.k} N={self.n}")

    def describe(self) -> str:
        """Human wording of the rule."""
        if self.kind == "majority":
            return f"majority of at least {self.n} reader(s); ties wait for adjudication"
        if self.kind == "positive_at_least":
            return (
                f"positive when at least {self.k} of {self.n} readers mark it, otherwise negative (with more "
                "readers, the same share of all of them); never a tie"
            )
        return (
            f"at least {self.k} of {self.n} readers agree (with more readers, the same share of all of them); "
            "otherwise adjudication"
        )

    @classmethod
    def from_config(cls, data: dict) -> ReferenceRule:
        """Build from the study config's `reference` mapping."""
        kind = data.get("rule", "at_least")
        n = int(data.get("n", 1 if kind == "majority" else 6))
        k = int(data.get("k", n // 2 + 1))
        return cls(kind=kind, k=k, n=n)


def vote(positives: np.ndarray, n: np.ndarray, rule: ReferenceRule) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised vote: (value with NaN where undecided, reason code array).

    at_least K of N: with n = N readers a side needs K votes. With more than N readers a side
    needs the same share, ceil(K * n / N) of n votes (4 of 6 -> 5 of 7, 7 of 10), so extra
    readers never turn a minority into a decision; anything short of that waits for
    adjudication. With fewer than N readers an item is decided as soon as the readers still to
    come cannot change the outcome (5 of 6 read, 5 positive, K = 4), and marked "no decisive
    vote" as soon as neither side can still reach K. The positive side is checked first, as
    with n = N (it matters only for K <= N / 2). positive_at_least K of N: positive with K votes
    of N (with more readers the same ceil(K * n / N) of n), otherwise negative, never a tie; with
    fewer than N readers negative as soon as the readers still to come cannot bring the positives
    to K (N - K + 1 unticked), positive as soon as K have marked it. majority: more than half of at
    least N readers.
    """
    positives = np.asarray(positives).astype(np.int64)
    n = np.asarray(n).astype(np.int64)
    negatives = n - positives
    value = np.full(positives.shape, np.nan)
    too_few = n < rule.n
    if rule.kind == "positive_at_least":
        needed = np.where(n > rule.n, -(-rule.k * n // rule.n), rule.k)
        still_to_come = np.maximum(rule.n - n, 0)
        value[positives >= needed] = 1.0
        value[positives + still_to_come < needed] = 0.0
        too_few = too_few & np.isnan(value)
    elif rule.kind == "at_least":
        needed = np.where(n > rule.n, -(-rule.k * n // rule.n), rule.k)
        still_to_come = np.maximum(rule.n - n, 0)
        value[positives >= needed] = 1.0
        value[(negatives >= needed) & (positives + still_to_come < needed)] = 0.0
        undecidable = (positives + still_to_come < needed) & (negatives + still_to_come < needed)
        too_few = too_few & np.isnan(value) & ~undecidable
    else:
        value[positives * 2 > n] = 1.0
        value[negatives * 2 > n] = 0.0
        value[too_few] = np.nan
    reason = np.where(too_few, "too few readers", np.where(np.isnan(value), "no decisive vote", ""))
    return value, reason


def compute_reference(
    readings: pd.DataFrame,
    rule: ReferenceRule,
    adjudications: pd.DataFrame | None = None,
    flags: pd.DataFrame | None = None,
    panel: int | None = None,
) -> pd.DataFrame:
    """Per (report_id, label): positives, n_readers, vote, value, status, reason.

    readings: report_id, label, reader, value. adjudications: report_id, label, value, id (latest
    id wins). flags: report_id, label, id (a flag waits until an adjudication with a larger
    created_at/id exists; both are compared by `seq`, a common ordering column when present).
    """
    grouped = readings.groupby(["report_id", "label"], sort=True, observed=True)["value"].agg(["sum", "count"])
    counts = grouped.rename(columns={"sum": "positives", "count": "n_readers"}).reset_index()
    return reference_from_counts(counts, rule, adjudications, flags, panel)


def reference_from_counts(
    counts: pd.DataFrame,
    rule: ReferenceRule,
    adjudications: pd.DataFrame | None = None,
    flags: pd.DataFrame | None = None,
    panel: int | None = None,
) -> pd.DataFrame:
    """compute_reference from per-item vote counts (report_id, label, positives, n_readers),
    which a database can aggregate far faster than shipping every reading.

    panel (adaptive reading): an item read by fewer than `panel` readers takes the full panel's
    vote once no remaining reader can change it (core/adaptive.py)."""
    out = counts.sort_values(["report_id", "label"]).reset_index(drop=True)
    out["positives"] = out["positives"].astype(int)
    out["n_readers"] = out["n_readers"].astype(int)
    if panel is None:
        vote_value, reason = vote(out["positives"].to_numpy(), out["n_readers"].to_numpy(), rule)
    else:
        from workbench.core.adaptive import settled_vote

        vote_value, reason, _ = settled_vote(out["positives"].to_numpy(), out["n_readers"].to_numpy(), rule, panel)
    out["vote"] = vote_value
    out["value"] = vote_value
    out["reason"] = reason
    out["status"] = np.where(np.isnan(vote_value), WAITING, DECIDED)
    out = _apply_flags_and_adjudications(out, adjudications, flags)
    return out


def _latest(frame: pd.DataFrame | None, cols: list[str]) -> pd.DataFrame | None:
    """The latest row (by seq) per (report_id, label)."""
    if frame is None or frame.empty:
        return None
    frame = frame.sort_values("seq")
    return frame.drop_duplicates(["report_id", "label"], keep="last")[["report_id", "label", *cols]]


def _apply_flags_and_adjudications(
    out: pd.DataFrame, adj: pd.DataFrame | None, flags: pd.DataFrame | None
) -> pd.DataFrame:
    """Flags reopen an item; an adjudication newer than any flag overrides the vote."""
    latest_adj = _latest(adj, ["value", "seq"])
    if latest_adj is not None:
        latest_adj = latest_adj.assign(value=latest_adj["value"].astype(float))
    latest_flag = _latest(flags, ["seq"])
    if latest_flag is not None:
        out = out.merge(latest_flag.rename(columns={"seq": "flag_seq"}), on=["report_id", "label"], how="left")
    else:
        out["flag_seq"] = np.nan
    if latest_adj is not None:
        renamed = latest_adj.rename(columns={"value": "adj_value", "seq": "adj_seq"})
        out = out.merge(renamed, on=["report_id", "label"], how="left")
    else:
        out["adj_value"] = np.nan
        out["adj_seq"] = np.nan
    # seq values are sortable strings (ISO timestamps); compare as text with "" for missing
    flag_seq = out["flag_seq"].astype(object).where(out["flag_seq"].notna(), "").astype(str)
    adj_seq = out["adj_seq"].astype(object).where(out["adj_seq"].notna(), "").astype(str)
    flagged = (flag_seq != "") & ~(adj_seq > flag_seq)
    adjudicated = out["adj_value"].notna() & ~flagged
    out.loc[flagged, "value"] = np.nan
    out.loc[flagged, "status"] = WAITING
    out.loc[flagged, "reason"] = "flagged: reference may be wrong"
    out.loc[adjudicated, "value"] = out.loc[adjudicated, "adj_value"]
    out.loc[adjudicated, "status"] = ADJUDICATED
    out.loc[adjudicated, "reason"] = "adjudicated"
    out["flagged"] = flagged
    return out.drop(columns=["flag_seq", "adj_seq", "adj_value"])


def reference_matrix(reference: pd.DataFrame, report_ids: list[str], label_ids: list[str]) -> pd.DataFrame:
    """Reports x labels table of reference values (NaN = no reference yet)."""
    wide = reference.pivot(index="report_id", columns="label", values="value")
    return wide.reindex(index=report_ids, columns=label_ids).astype(float)


def status_summary(reference: pd.DataFrame, label_ids: list[str]) -> pd.DataFrame:
    """Per label: decided, adjudicated, waiting counts (and positives among the settled)."""
    if reference.empty:
        return pd.DataFrame(0, index=label_ids, columns=[DECIDED, ADJUDICATED, WAITING, "positive"])
    counts = pd.crosstab(reference["label"], reference["status"]).reindex(index=label_ids, fill_value=0)
    for col in (DECIDED, ADJUDICATED, WAITING):
        if col not in counts:
            counts[col] = 0
    counts["positive"] = (
        reference.assign(pos=reference["value"] == 1)
        .groupby("label")["pos"]
        .sum()
        .reindex(label_ids)
        .fillna(0)
        .astype(int)
    )
    return counts[[DECIDED, ADJUDICATED, WAITING, "positive"]].fillna(0).astype(int)


# words in an adjudication reason that name a value; "not present" and "absent" outrank "present"
_SAYS_ABSENT = re.compile(r"\b(absent|negative|not present|ruled out)\b", re.IGNORECASE)
_SAYS_PRESENT = re.compile(r"\b(present|positive)\b", re.IGNORECASE)


def reason_contradiction(value: int, reason: str) -> str | None:
    """What an adjudication reason says against its value ('absent' with 1, 'present' with 0), or None.

    Only a reason that names one side is questioned: one naming both ('present per policy, absent on
    review') or neither is taken as written."""
    text = str(reason or "")
    absent = _SAYS_ABSENT.search(text)
    present = _SAYS_PRESENT.search(_SAYS_ABSENT.sub(" ", text))  # "not present" counts as absent only
    if bool(absent) == bool(present):
        return None
    if absent and value == 1:
        return f"the reason says {absent.group(0)!r} but the value is 1 (present)"
    if present and value == 0:
        return f"the reason says {present.group(0)!r} but the value is 0 (absent)"
    return None
