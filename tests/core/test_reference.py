"""The reference rule and adjudication precedence as truth tables."""

import numpy as np
import pandas as pd
import pytest

from workbench.core.reference import ReferenceRule, compute_reference, status_summary, vote

NAN = float("nan")

# (rule, positives, readers, expected value, expected reason)
VOTES = [
    (ReferenceRule("at_least", 4, 6), 6, 6, 1.0, ""),
    (ReferenceRule("at_least", 4, 6), 4, 6, 1.0, ""),
    (ReferenceRule("at_least", 4, 6), 3, 6, NAN, "no decisive vote"),  # 3-3 tie
    (ReferenceRule("at_least", 4, 6), 2, 6, 0.0, ""),
    (ReferenceRule("at_least", 4, 6), 0, 6, 0.0, ""),
    # fewer than N readers: decided once the readers still to come cannot change the outcome
    (ReferenceRule("at_least", 4, 6), 5, 5, 1.0, ""),
    (ReferenceRule("at_least", 4, 6), 4, 5, 1.0, ""),
    (ReferenceRule("at_least", 4, 6), 4, 4, 1.0, ""),
    (ReferenceRule("at_least", 4, 6), 1, 5, 0.0, ""),  # 4 negatives; 1 + 1 < 4
    (ReferenceRule("at_least", 4, 6), 2, 5, NAN, "too few readers"),  # 3-2: 3-3 or 2-4 to come
    (ReferenceRule("at_least", 4, 6), 3, 5, NAN, "too few readers"),
    (ReferenceRule("at_least", 4, 6), 0, 3, NAN, "too few readers"),
    (ReferenceRule("at_least", 5, 6), 3, 5, NAN, "no decisive vote"),  # neither side can reach 5
    # more than N readers: the same share, ceil(K * n / N) of n; ties and smaller shares wait
    (ReferenceRule("at_least", 4, 6), 5, 7, 1.0, ""),
    (ReferenceRule("at_least", 4, 6), 3, 7, NAN, "no decisive vote"),  # 4 of 7 negative < 5 of 7
    (ReferenceRule("at_least", 4, 6), 2, 7, 0.0, ""),
    (ReferenceRule("at_least", 4, 6), 4, 8, NAN, "no decisive vote"),  # a 4-4 tie
    (ReferenceRule("at_least", 4, 6), 4, 10, NAN, "no decisive vote"),  # a 4-6 split: 6 of 10 < 7 of 10
    (ReferenceRule("at_least", 4, 6), 7, 10, 1.0, ""),
    (ReferenceRule("at_least", 4, 6), 3, 10, 0.0, ""),
    (ReferenceRule("at_least", 6, 6), 6, 7, NAN, "no decisive vote"),  # unanimity stays unanimity
    (ReferenceRule("at_least", 6, 6), 7, 7, 1.0, ""),
    (ReferenceRule("at_least", 1, 1), 1, 1, 1.0, ""),
    (ReferenceRule("at_least", 1, 1), 0, 1, 0.0, ""),
    (ReferenceRule("majority", 2, 3), 2, 3, 1.0, ""),
    (ReferenceRule("majority", 2, 3), 1, 3, 0.0, ""),
    (ReferenceRule("majority", 2, 2), 1, 2, NAN, "no decisive vote"),
    (ReferenceRule("majority", 2, 3), 1, 2, NAN, "too few readers"),
    (ReferenceRule("majority", 1, 1), 1, 1, 1.0, ""),
]


@pytest.mark.parametrize("rule,pos,n,value,reason", VOTES)
def test_vote_truth_table(rule, pos, n, value, reason):
    got, why = vote(np.array([pos]), np.array([n]), rule)
    if np.isnan(value):
        assert np.isnan(got[0])
    else:
        assert got[0] == value
    assert why[0] == reason


def test_more_readers_than_n_never_decide_a_minority():
    """vote([4, 4], [8, 10], 4 of 6) decided both positive before (issue 13, item 9)."""
    value, reason = vote(np.array([4, 4]), np.array([8, 10]), ReferenceRule("at_least", 4, 6))
    assert np.isnan(value).all() and list(reason) == ["no decisive vote"] * 2


@pytest.mark.parametrize("kind,k,n", [("at_least", 0, 6), ("at_least", 7, 6), ("nope", 1, 1), ("majority", 1, 0)])
def test_bad_rules_are_refused(kind, k, n):
    with pytest.raises(ValueError):
        ReferenceRule(kind, k, n)


def _readings(pos, n=6, report="r1", label="a"):
    return pd.DataFrame(
        {
            "report_id": [report] * n,
            "label": [label] * n,
            "reader": [f"x{i}" for i in range(n)],
            "value": [1] * pos + [0] * (n - pos),
        }
    )


def _events(rows):
    return pd.DataFrame(rows, columns=["report_id", "label", "value", "seq"]) if rows else None


# (positives, adjudications [(value, seq)], flags [seq], expected value, status)
PRECEDENCE = [
    (5, [], [], 1.0, "decided"),
    (3, [], [], NAN, "waiting"),
    (3, [(0, "t1")], [], 0.0, "adjudicated"),
    (5, [(0, "t1")], [], 0.0, "adjudicated"),  # adjudication overrides a decisive vote
    (3, [(0, "t1"), (1, "t2")], [], 1.0, "adjudicated"),  # the latest adjudication counts
    (5, [], ["t1"], NAN, "waiting"),  # flagged: the reference may be wrong
    (5, [(0, "t0")], ["t1"], NAN, "waiting"),  # an adjudication older than the flag does not settle it
    (5, [(0, "t2")], ["t1"], 0.0, "adjudicated"),  # a newer adjudication does
]


@pytest.mark.parametrize("pos,adjs,flags,value,status", PRECEDENCE)
def test_adjudication_precedence(pos, adjs, flags, value, status):
    adj = _events([("r1", "a", v, s) for v, s in adjs])
    flg = pd.DataFrame([("r1", "a", s) for s in flags], columns=["report_id", "label", "seq"]) if flags else None
    out = compute_reference(_readings(pos), ReferenceRule("at_least", 4, 6), adj, flg)
    row = out.iloc[0]
    assert row["status"] == status
    if np.isnan(value):
        assert np.isnan(row["value"])
    else:
        assert row["value"] == value
    assert row["vote"] == (1.0 if pos >= 4 else (0.0 if pos <= 2 else row["vote"])) or np.isnan(row["vote"])


def test_status_summary_counts_per_label():
    readings = pd.concat(
        [_readings(6, report="r1"), _readings(3, report="r2"), _readings(0, report="r3"), _readings(3, report="r4")]
    )
    adj = _events([("r4", "a", 1, "t1")])
    out = compute_reference(readings, ReferenceRule("at_least", 4, 6), adj, None)
    summary = status_summary(out, ["a", "b"])
    assert summary.loc["a"].to_dict() == {"decided": 2, "adjudicated": 1, "waiting": 1, "positive": 2}
    assert summary.loc["b"].sum() == 0


# The paper's rule (Ran Score): positive when at least K of N mark it, otherwise negative; never a tie.
# (positives, readers, expected value, expected reason) under positive_at_least 4 of 6
PAPER_VOTES = [
    (4, 6, 1.0, ""),
    (3, 6, 0.0, ""),  # 3-3 is negative, not a tie
    (0, 6, 0.0, ""),
    (0, 3, 0.0, ""),  # three unticked: no later reader can make it positive
    (1, 4, 0.0, ""),  # 1 + 2 to come < 4
    (0, 2, NAN, "too few readers"),  # four readers to come could still mark it
    (2, 4, NAN, "too few readers"),
    (4, 4, 1.0, ""),
    (3, 3, NAN, "too few readers"),
    # more than N readers: the same share as at_least, ceil(K * n / N) of n to be positive
    (5, 7, 1.0, ""),
    (4, 7, 0.0, ""),
    (4, 8, 0.0, ""),  # 4-4: negative (6 of 8 needed), not a tie
    (6, 8, 1.0, ""),
]


@pytest.mark.parametrize("pos,n,value,reason", PAPER_VOTES)
def test_positive_at_least_truth_table(pos, n, value, reason):
    got, why = vote(np.array([pos]), np.array([n]), ReferenceRule("positive_at_least", 4, 6))
    assert (np.isnan(got[0]) if np.isnan(value) else got[0] == value) and why[0] == reason


def test_positive_at_least_never_ties_and_reads_like_the_paper():
    rule = ReferenceRule.from_config({"rule": "positive_at_least", "k": 4, "n": 6})
    assert (rule.kind, rule.k, rule.n) == ("positive_at_least", 4, 6)
    readers = np.arange(0, 13).repeat(13)
    positives = np.tile(np.arange(0, 13), 13)
    ok = (positives <= readers) & (readers >= 6)
    _, reason = vote(positives[ok], readers[ok], rule)
    assert (reason == "").all()  # with the panel read (or more), always decided
    assert rule.describe().startswith("positive when at least 4 of 6 readers mark it, otherwise negative")
    with pytest.raises(ValueError, match="1 <= K <= N"):
        ReferenceRule("positive_at_least", 7, 6)
    # the existing rule is unchanged and stays the default
    assert ReferenceRule.from_config({}).kind == "at_least"
