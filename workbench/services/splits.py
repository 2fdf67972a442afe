"""Cohort roles and the development split: which reports tune prompts, which validate them, and the
test-cohort lock that keeps a test cohort out of every loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from workbench.core import splits
from workbench.services.base import Service, StudyContext
from workbench.services.optimising import COHORT_ROLES
from workbench.store import queries as q
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.study import StudyService


class SplitsService(Service):
    """Cohort roles, the tuning/validation split and the test-cohort lock."""

    def __init__(self, ctx: StudyContext, study: StudyService) -> None:
        super().__init__(ctx)
        self.study = study

    def cohort_role(self, cohort: str) -> str:
        """A cohort's role (development, validation, test or external)."""
        self.study.cohort_id(cohort)  # clear error for an unknown cohort
        with self.session() as s:
            return q.cohort_roles(s)[cohort]

    def set_cohort_role(self, cohort: str, role: str) -> None:
        """Give a cohort a role; a test cohort is locked from then on."""
        self.require("import")
        if role not in COHORT_ROLES:
            raise StudyError(f"cohort role must be one of {', '.join(COHORT_ROLES)}, got {role!r}")
        cid = self.study.cohort_id(cohort)
        with self.session() as s:
            old = q.cohort_roles(s)[cohort]
            if old == "test" and role != "test":
                looks = int((q.looks_frame(s)["cohort_id"] == cid).sum())
                raise StudyError(
                    f"{cohort!r} is a locked test cohort; its role cannot be changed (looked at {looks} times)"
                )
            if role != "development" and len(q.split_frame(s, cid)):
                raise StudyError(
                    f"{cohort!r} is split into tuning and validation parts; only a development cohort is split"
                )
            q.set_cohort_role(s, cid, role)
            q.add_audit(s, self.actor.user, "set role", "cohort", cohort, {"role": old}, {"role": role})

    def split_cohort(self, cohort: str, validation: float = 0.3, seed: int = 0, force: bool = False) -> pd.DataFrame:
        """Divide a development cohort into tuning and validation parts, stratified by label; recorded."""
        self.require("run")
        if self.cohort_role(cohort) != "development":
            raise StudyError(f"only a development cohort is split; {cohort!r} is a {self.cohort_role(cohort)} cohort")
        cid = self.study.cohort_id(cohort)
        existing = self.split_parts(cohort)
        if existing and not force:
            with self.session() as s:
                row = q.split_frame(s, cid).iloc[0]
            if int(row["seed"]) == seed and abs(float(row["validation_fraction"]) - validation) < 1e-9:
                return self.split_summary(cohort)
            raise StudyError(
                f"{cohort!r} is already split (seed {int(row['seed'])}, validation "
                f"{float(row['validation_fraction']):g}); re-splitting after tuning lets tuned-on reports "
                "into validation: pass --force to do it anyway (recorded in the audit)"
            )
        reference = self.study.reference_matrix(cohort)[self.vocab.asked_ids]
        assignment = splits.stratified_split(reference, validation, seed)
        with self.session() as s:
            q.put_split(s, cid, assignment, seed, validation, self.actor.user)
            counts = pd.Series(assignment).value_counts().to_dict()
            q.add_audit(
                s,
                self.actor.user,
                "split",
                "cohort",
                cohort,
                {"previous": len(existing)} if existing else None,
                {"seed": seed, "validation": validation, **{k: int(v) for k, v in counts.items()}},
            )
        return self.split_summary(cohort)

    def split_parts(self, cohort: str) -> dict[str, str]:
        """report id -> tuning/validation ({} when the cohort is not split)."""
        with self.session() as s:
            frame = q.split_frame(s, self.study.cohort_id(cohort))
        return dict(zip(frame["report_id"], frame["part"], strict=False))

    def split_summary(self, cohort: str) -> pd.DataFrame:
        """Per label: positives in tuning and in validation."""
        parts = self.split_parts(cohort)
        if not parts:
            raise StudyError(f"{cohort!r} is not split yet: workbench split {cohort} --validation 0.3 --seed 0")
        reference = self.study.reference_matrix(cohort)[self.vocab.asked_ids]
        return splits.split_summary(reference, parts)

    def tuning_reports(self, report_ids) -> set[str]:
        """The given reports that suggestions and curation may read: a development cohort's tuning part
        (or an unsplit development cohort), or an external cohort; never validation or test."""
        with self.session() as s:
            roles = q.report_cohort_roles(s, report_ids)
        dev = roles["role"] == "development"
        ok = (dev & (roles["part"].isna() | (roles["part"] == "tuning"))) | (roles["role"] == "external")
        return set(roles.loc[ok, "report_id"])

    def require_tuning_report(self, report_id: str) -> None:
        """Refuse to read a validation or test report for curation or suggestions."""
        with self.session() as s:
            known = len(q.report_cohort_roles(s, [report_id])) > 0
        if known and report_id not in self.tuning_reports([report_id]):  # an unknown id gets the caller's own error
            raise StudyError(
                f"{report_id} is in a validation or test set: it is only measured, never used to tune prompts"
            )

    def queue_reports(self, run) -> set[str] | None:
        """Reports the disagreement queue may show for a run (None: every report of its cohort)."""
        role = self.cohort_role(self.study.cohort_name(run.cohort_id))
        if role in ("test", "validation"):
            raise StudyError(
                f"run {run.id} is on a {role} cohort: its disagreements are never shown "
                "(they would leak into the prompts)"
            )
        parts = self.split_parts(self.study.cohort_name(run.cohort_id)) if role == "development" else {}
        return {rid for rid, part in parts.items() if part == "tuning"} if parts else None

    def check_test_lock(self, run, test_look: str | None = None) -> None:
        """Metrics of a test cohort only through a frozen bundle's counted look (test_look: that bundle's commit)."""
        if self.cohort_role(self.study.cohort_name(run.cohort_id)) != "test":
            return
        if test_look != run.prompt_commit:
            raise StudyError(
                f"run {run.id} is on the locked test cohort {self.study.cohort_name(run.cohort_id)!r}: its metrics are "
                "shown only for a frozen bundle, and every look is counted: workbench test-look BUNDLE --cohort NAME"
            )
