"""Adaptive reading's guarantee: stopping early gives exactly the full panel's reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.core import adaptive
from workbench.core.reference import ReferenceRule, reference_from_counts, vote


@st.composite
def rules(draw) -> ReferenceRule:
    """at_least or positive_at_least K of N (any 1 <= K <= N), or majority of N, N up to 8."""
    n = draw(st.integers(1, 8))
    kind = draw(st.sampled_from(["at_least", "positive_at_least", "majority"]))
    if kind == "majority":
        return ReferenceRule("majority", n=n)
    return ReferenceRule(kind, k=draw(st.integers(1, n)), n=n)


def _counts(values: np.ndarray, read: np.ndarray, labels: list[str]) -> pd.DataFrame:
    """Vote counts (report_id, label, positives, n_readers) of the readings a reports x readers mask selects."""
    rows = []
    for i in range(values.shape[0]):
        who = np.flatnonzero(read[i])
        if len(who) == 0:
            continue
        for j, label in enumerate(labels):
            rows.append((f"r{i}", label, int(values[i, j, who].sum()), len(who)))
    return pd.DataFrame(rows, columns=["report_id", "label", "positives", "n_readers"])


def _replay(values, order, rule, labels, sample, extra_reader=False):
    """Every report read by its readers in the given order until adaptive reading closes it (all reports
    step by step together); the reports x readers mask of what was read."""
    n_reports, _, n_readers = values.shape
    read = np.zeros((n_reports, n_readers), dtype=bool)
    ids = [f"r{i}" for i in range(n_reports)]
    for step in range(max(len(o) for o in order)):
        status = adaptive.report_status(
            _counts(values, read, labels), rule, labels, sample, extra_reader, report_ids=ids
        )
        still = status["open"].to_numpy()
        if not still.any():
            break
        for i in np.flatnonzero(still):
            if step < len(order[i]):
                read[i, order[i][step]] = True
    return read


@st.composite
def panels(draw):
    """A rule, a study of reports x labels x readers with random values (a pool of N to N + 2 readers, plus one
    reader more for escalation), each report's reading order over the pool, and an agreement sample."""
    rule = draw(rules())
    n_reports = draw(st.integers(1, 6))
    n_labels = draw(st.integers(1, 4))
    pool = draw(st.integers(rule.n, rule.n + 2))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    prevalence = rng.uniform(0, 1, size=n_labels)
    values = (rng.uniform(size=(n_reports, n_labels, pool + 1)) < prevalence[None, :, None]).astype(int)
    order = [rng.permutation(pool) for _ in range(n_reports)]
    sample = {f"r{i}" for i in range(n_reports) if rng.uniform() < 0.3}
    return rule, values, order, [f"l{j}" for j in range(n_labels)], sample


def _reference(counts, rule, panel=None):
    table = reference_from_counts(counts, rule, panel=panel)
    return table.set_index(["report_id", "label"])[["value", "status", "reason"]]


@settings(max_examples=120, deadline=None)
@given(panels())
def test_the_adaptive_reference_equals_the_full_panel_reference_on_every_item(case):
    """With more readers than the panel, a report's full panel is the first N readers its order brings; adaptive
    reading reads a prefix of them and gives their reference."""
    rule, values, order, labels, sample = case
    values = values[:, :, : len(order[0])]
    read = _replay(values, order, rule, labels, sample)
    panel = np.zeros(read.shape, dtype=bool)
    for i, o in enumerate(order):
        panel[i, o[: rule.n]] = True
    assert not (read & ~panel).any()  # never more than the panel, never a reader outside it
    full = _reference(_counts(values, panel, labels), rule)
    early = _reference(_counts(values, read, labels), rule, panel=rule.n)
    assert early.reindex(full.index).equals(full)
    # the agreement sample keeps full overlap
    for i in range(values.shape[0]):
        if f"r{i}" in sample:
            assert (read[i] == panel[i]).all()


@settings(max_examples=50, deadline=None)
@given(panels())
def test_with_the_extra_reader_a_tie_at_the_panel_gets_one_more_reader_and_nothing_else_changes(case):
    rule, values, order, labels, sample = case
    values = values[:, :, : rule.n + 1]
    order = [[k for k in o if k < rule.n] + [rule.n] for o in order]  # the panel in its order, then reader N+1
    read = _replay(values, order, rule, labels, sample, extra_reader=True)
    panel_read = np.ones((values.shape[0], rule.n + 1), dtype=bool)
    panel_read[:, rule.n] = False
    full = _reference(_counts(values, panel_read, labels), rule)
    tied = full["status"].eq("waiting").groupby(level=0).any()
    expected = panel_read.copy()
    for i in range(values.shape[0]):  # only a majority rule can use the extra reader (see report_status)
        expected[i, rule.n] = rule.kind == "majority" and bool(tied.get(f"r{i}", False))
    escalated = _reference(_counts(values, expected, labels), rule)
    early = _reference(_counts(values, read, labels), rule, panel=rule.n)
    assert early.reindex(escalated.index).equals(escalated)
    assert (read[:, rule.n] == expected[:, rule.n]).all()


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), st.data())
def test_settled_vote_agrees_with_vote_under_at_least_when_the_panel_is_n(n, data):
    k = data.draw(st.integers(1, n))
    rule = ReferenceRule("at_least", k=k, n=n)
    readers = np.arange(0, n + 1).repeat(n + 1)
    positives = np.tile(np.arange(0, n + 1), n + 1)
    ok = positives <= readers
    value, reason, _ = adaptive.settled_vote(positives[ok], readers[ok], rule, n)
    plain_value, plain_reason = vote(positives[ok], readers[ok], rule)
    assert np.array_equal(value, plain_value, equal_nan=True)
    assert (reason == plain_reason).all()


def test_four_of_six_examples():
    rule = ReferenceRule("at_least", k=4, n=6)
    # 3 negatives of 3: still undecided (three positives to come would tie); 4 negatives of 4: final 0;
    # 4 positives of 4: final 1; 3-3 of 6: final, waiting for adjudication
    value, reason, final = adaptive.settled_vote([0, 0, 4, 3], [3, 4, 4, 6], rule, 6)
    assert final.tolist() == [False, True, True, True]
    assert np.array_equal(value, [np.nan, 0, 1, np.nan], equal_nan=True)
    assert reason.tolist() == ["too few readers", "", "", "no decisive vote"]


def test_the_papers_rule_settles_a_label_negative_after_n_minus_k_plus_one_unticked():
    rule = ReferenceRule("positive_at_least", k=4, n=6)
    # 3 unticked of 3: final negative (the 4 of 6 rule cannot be reached); 2 of 2: not yet; 4 ticked: positive;
    # 3-3 of 6: negative, never a tie
    value, reason, final = adaptive.settled_vote([0, 0, 4, 3, 1], [3, 2, 4, 6, 4], rule, 6)
    assert final.tolist() == [True, False, True, True, True]
    assert np.array_equal(value, [0, np.nan, 1, 0, 0], equal_nan=True)
    assert reason.tolist() == ["", "too few readers", "", "", ""]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), st.data())
def test_settled_vote_agrees_with_vote_under_positive_at_least_and_never_ties(n, data):
    rule = ReferenceRule("positive_at_least", k=data.draw(st.integers(1, n)), n=n)
    readers = np.arange(0, n + 1).repeat(n + 1)
    positives = np.tile(np.arange(0, n + 1), n + 1)
    ok = positives <= readers
    value, reason, _ = adaptive.settled_vote(positives[ok], readers[ok], rule, n)
    plain_value, plain_reason = vote(positives[ok], readers[ok], rule)
    assert np.array_equal(value, plain_value, equal_nan=True) and (reason == plain_reason).all()
    assert "no decisive vote" not in set(reason)


def test_majority_decides_before_the_panel_is_complete():
    rule = ReferenceRule("majority", n=3)
    value, _, final = adaptive.settled_vote([2, 0, 1], [2, 2, 2], rule, 3)
    assert final.tolist() == [True, True, False]
    assert np.array_equal(value, [1, 0, np.nan], equal_nan=True)


def test_offered_reports_one_reader_at_a_time_outside_the_sample_and_value_free_order():
    c = pd.DataFrame(
        {
            "report_id": list("abcde"),
            "seq": [0, 1, 2, 3, 4],
            "open": [True, True, True, False, True],
            "readers": [0, 2, 1, 3, 5],
            "cap": [6, 6, 6, 6, 6],
            "sample": [False, False, True, False, False],
            "mine": [False, False, False, False, False],
            "in_flight": [0, 0, 1, 0, 1],
        }
    )
    offered = adaptive.offered(c)
    assert offered["report_id"].tolist() == ["a", "b", "c"]  # d is closed; e has a read in flight; c is in the sample
    assert adaptive.reading_order(offered)["report_id"].tolist() == ["b", "c", "a"]
    assert adaptive.reading_order(offered, "cohort")["report_id"].tolist() == ["a", "b", "c"]


def test_settings_refuse_what_they_do_not_know():
    with pytest.raises(ValueError, match="unknown key 'enable'"):
        adaptive.AdaptiveSettings.from_config({"enable": True})
    with pytest.raises(ValueError, match="agreement_share"):
        adaptive.AdaptiveSettings.from_config({"agreement_share": 1.5})
    assert adaptive.AdaptiveSettings.from_config(None).enabled is False
