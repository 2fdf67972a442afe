"""Storage of label sets: mined candidates and their reviewers' votes (each function takes its session).

A label set is named (one per cohort mined, by default); mining it again replaces its candidates only
while nobody has voted, so a review under way is never lost to a re-run.
"""

from __future__ import annotations

import json

from sqlalchemy import delete
from sqlmodel import Session, select

from workbench.store.queries import add_audit, now
from workbench.store.tables import LabelSetCandidate, LabelSetVote, Meta

RULE_KEY = "labelset_rule:"


def candidate_rows(session: Session, labelset: str) -> list[LabelSetCandidate]:
    """A label set's candidates in rank order."""
    stmt = select(LabelSetCandidate).where(LabelSetCandidate.labelset == labelset).order_by(LabelSetCandidate.rank)
    return list(session.exec(stmt))


def labelset_names(session: Session) -> list[str]:
    """Names of the study's label sets."""
    return sorted(set(session.exec(select(LabelSetCandidate.labelset))))


def get_candidate(session: Session, labelset: str, key: str) -> LabelSetCandidate | None:
    """One candidate, or None."""
    stmt = select(LabelSetCandidate).where(LabelSetCandidate.labelset == labelset, LabelSetCandidate.key == key)
    return session.exec(stmt).first()


def replace_candidates(session: Session, labelset: str, rows: list[dict], actor: str) -> None:
    """Store freshly mined candidates in place of the old ones (the caller checked that nobody voted)."""
    session.execute(delete(LabelSetCandidate).where(LabelSetCandidate.labelset == labelset))
    at = now()
    for rank, row in enumerate(rows, 1):
        session.add(
            LabelSetCandidate(
                labelset=labelset,
                key=row["key"],
                rank=rank,
                name=row["name"],
                definition=row["definition"],
                look_for_json=json.dumps(row["look_for"]),
                evidence_json=json.dumps(row, ensure_ascii=False),
                created_at=at,
            )
        )
    add_audit(session, actor, "mine", "labelset", labelset, None, {"candidates": len(rows)})


def add_candidate(session: Session, labelset: str, row: dict, rank: int) -> None:
    """Store one new candidate (a split)."""
    session.add(
        LabelSetCandidate(
            labelset=labelset,
            key=row["key"],
            rank=rank,
            name=row["name"],
            definition=row["definition"],
            look_for_json=json.dumps(row["look_for"]),
            evidence_json=json.dumps(row, ensure_ascii=False),
            created_at=now(),
        )
    )


def vote_rows(session: Session, labelset: str) -> list[LabelSetVote]:
    """Every current vote of a label set."""
    return list(session.exec(select(LabelSetVote).where(LabelSetVote.labelset == labelset)))


def put_vote(session: Session, labelset: str, key: str, reviewer: str, action: str, argument: str) -> None:
    """Record (or change) one reviewer's vote, and audit it with the vote it replaced."""
    stmt = select(LabelSetVote).where(
        LabelSetVote.labelset == labelset, LabelSetVote.key == key, LabelSetVote.reviewer == reviewer
    )
    row = session.exec(stmt).first()
    old = None if row is None else {"action": row.action, "argument": row.argument}
    if row is None:
        row = LabelSetVote(
            labelset=labelset, key=key, reviewer=reviewer, action=action, argument=argument, updated_at=""
        )
    row.action, row.argument, row.updated_at = action, argument, now()
    session.add(row)
    add_audit(
        session,
        reviewer,
        "vote",
        "labelset_candidate",
        f"{labelset}/{key}",
        old,
        {"action": action, "argument": argument},
    )


def get_rule(session: Session, labelset: str) -> dict | None:
    """A label set's approval rule as stored, or None."""
    row = session.get(Meta, RULE_KEY + labelset)
    return json.loads(row.value) if row else None


def put_rule(session: Session, labelset: str, rule: dict, actor: str) -> None:
    """Set a label set's approval rule (audited)."""
    old = get_rule(session, labelset)
    row = session.get(Meta, RULE_KEY + labelset) or Meta(key=RULE_KEY + labelset, value="")
    row.value = json.dumps(rule)
    session.add(row)
    add_audit(session, actor, "set_rule", "labelset", labelset, old, rule)
