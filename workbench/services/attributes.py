"""Finding attributes of a study: the readers' reference, the labeller's values and their agreement.

The reference of an attribute exists only where the presence reference is positive (a finding nobody
sees has no side); it is the majority of the readers who ticked the label, ties settled by an
adjudication. Scoring is on matched findings (labeller and reference both positive): see
workbench/core/attributes.py for the rules and docs/attributes.md for the figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from workbench.core import attributes as core
from workbench.core.vocab import VocabularyError
from workbench.services.base import Service, StudyContext
from workbench.services.results import AttributeMetrics
from workbench.store import queries as q
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.evaluation import EvaluationService
    from workbench.services.runs import RunsService
    from workbench.services.study import StudyService

ROW_COLUMNS = ["report_id", "label", "attribute", "value", "reference", "evidence"]


class AttributesService(Service):
    """Attribute reference, per-row listing, accuracy on matched findings, and readers' attribute values."""

    def __init__(
        self, ctx: StudyContext, study: StudyService, runs: RunsService, evaluation: EvaluationService
    ) -> None:
        super().__init__(ctx)
        self.study = study
        self.runs = runs
        self.evaluation = evaluation

    def reference_attributes(self, cohort: str) -> pd.DataFrame:
        """Per (report, label, attribute) of a cohort: reference value (None while a tie waits), votes, tie."""
        out = core.reference_attributes(*self._attribute_votes(cohort))
        return self.study.blind_rows(out)

    def _attribute_votes(self, cohort: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """(readings, readers' attribute values, adjudicated values) of a cohort, as the core functions take them."""
        with self.session() as s:
            cid = self.study.cohort_id(cohort)
            values = q.reading_attributes_frame(s, cid)
            adjudicated = q.reading_attributes_frame(s, cid, adjudicated=True)
            # no reader gave an attribute: no reference to compute, and the cohort's readings (378,000 rows at
            # 3,000 reports) are not read for nothing (every note's save checked its item this way)
            readings = q.readings_frame(s, cohort_id=cid) if len(values) else q.readings_frame(s, report_ids_=[])
        return readings, values, adjudicated.drop(columns=["reader"])

    def attribute_ties(self, cohort: str | None = None) -> pd.DataFrame:
        """Attribute ties waiting for an adjudicator (every cohort without one): report_id, label, attribute,
        votes ("left 1, right 1"), tied, readers. Only findings whose presence reference is positive are
        listed: a finding the vote has not confirmed has no attribute reference to settle yet."""
        names = [cohort] if cohort else self.study.cohorts()["name"].tolist()
        frames = []
        for name in names:
            ties = core.attribute_ties(*self._attribute_votes(name))
            if ties.empty:
                continue
            presence = self.study.reference(name)
            positive = set(
                zip(
                    presence.loc[presence["value"] == 1, "report_id"],
                    presence.loc[presence["value"] == 1, "label"],
                    strict=False,
                )
            )
            frames.append(ties[[key in positive for key in zip(ties["report_id"], ties["label"], strict=False)]])
        if not frames:
            return pd.DataFrame(columns=core.TIE_COLUMNS)
        return self.study.blind_rows(pd.concat(frames, ignore_index=True))

    def attribute_inputs(self, run_id: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """(labeller presence, reference presence, labeller attributes, reference attributes) of a run."""
        y_true, y_pred, _ = self.evaluation.evaluation_inputs(run_id)
        run = self.runs.run_info(run_id)
        pred_attrs = self.runs.prediction_attributes(run_id)
        pred_attrs = pred_attrs[pred_attrs["status"] == "ok"]
        ref_attrs = self.reference_attributes(self.study.cohort_name(run.cohort_id)).rename(
            columns={"reference": "value"}
        )
        return y_pred, y_true, pred_attrs, ref_attrs

    def attribute_rows(self, run_id: int, label: str | None = None) -> pd.DataFrame:
        """One row per (report, label, attribute) of every finding the labeller found: its value, the
        reference value when the reference is positive and has one, and the labeller's evidence."""
        specs = self._attribute_specs(label)
        y_pred, y_true, pred_attrs, ref_attrs = self.attribute_inputs(run_id)
        evidence = self.runs.predictions(run_id).set_index(["report_id", "label"])["evidence"].to_dict()
        pv, rv = core.lookup(pred_attrs), core.lookup(ref_attrs)
        rows = []
        for lab, spec in specs.items():
            if lab not in y_pred.columns:
                continue
            positive = y_pred.index[(y_pred[lab] == 1).to_numpy()]
            ref_positive = set(y_true.index[(y_true[lab] == 1).to_numpy()])
            for rid in positive:
                for name, _ in spec:
                    reference = rv.get((rid, lab, name)) if rid in ref_positive else None
                    rows.append((rid, lab, name, pv.get((rid, lab, name)), reference, evidence.get((rid, lab), "")))
        return pd.DataFrame(rows, columns=ROW_COLUMNS)

    def attribute_failures(self, run_id: int, label: str | None = None) -> pd.DataFrame:
        """Findings of a run whose attributes object failed to parse: report_id, label, detail (the reason)."""
        specs = self._attribute_specs(label)
        stored = self.runs.prediction_attributes(run_id)
        bad = stored[(stored["status"] == core.ATTRIBUTE_PARSE_ERROR) & stored["label"].isin(set(specs))]
        return bad[["report_id", "label", "detail"]].reset_index(drop=True)

    def attribute_metrics(self, run_id: int, label: str | None = None) -> AttributeMetrics:
        """Accuracy and coverage per (label, attribute) on matched findings with Wilson intervals, the
        confusion of values, and the count of attribute parse failures."""
        specs = self._attribute_specs(label)
        y_pred, y_true, pred_attrs, ref_attrs = self.attribute_inputs(run_id)
        matched = core.matched_rows(y_pred, y_true, pred_attrs, ref_attrs, specs)
        failures = self.runs.prediction_attributes(run_id, label)
        return AttributeMetrics(
            table=core.attribute_accuracy(matched),
            confusion=core.confusion(matched),
            mismatches=core.mismatches(matched),
            rule=core.ACCURACY_RULE,
            parse_failures=int((failures["status"] == core.ATTRIBUTE_PARSE_ERROR).sum()),
        )

    def _attribute_specs(self, label: str | None) -> dict:
        """label -> attribute spec, of one label (checked) or of all; a clear error when there is none."""
        specs = self.vocab.attribute_specs()
        if label is None:
            if not specs:
                raise StudyError(
                    f"vocabulary {self.vocab.id!r} declares no attributes; add `attributes: [side, ...]` "
                    "to its labels (see docs/attributes.md)"
                )
            return specs
        found = self.vocab.resolve(label)
        if found is None:
            raise StudyError(f"unknown label {label!r}; labels: {', '.join(self.vocab.asked_ids)}")
        if found not in specs:
            raise StudyError(
                f"label {found!r} has no attributes in vocabulary {self.vocab.id!r}; labels with "
                f"attributes: {', '.join(specs) or 'none'}"
            )
        return {found: specs[found]}

    def adjudicate_attribute(self, report_id: str, label: str, attribute: str, value: str, reason: str = "") -> None:
        """Settle a tied attribute vote (the adjudicator's value counts only where readers tie)."""
        self.require("adjudicate")
        value, reason = str(value).strip().lower(), reason.strip()
        try:
            self.vocab.check_attribute(label, attribute, value)
        except VocabularyError as exc:
            raise StudyError(str(exc)) from exc
        self._require_attribute_tie(report_id, label, attribute)
        actor = self.current_actor()
        frame = pd.DataFrame([(report_id, label, actor.user, attribute, value)], columns=q.READING_ATTRIBUTE_COLUMNS)
        with self.session(write=True) as s:
            q.put_reading_attributes(s, frame, adjudicated=True)
            q.add_audit(
                s,
                actor.user,
                "adjudicate",
                "reading attribute",
                f"{report_id}/{label}/{attribute}",
                None,
                {"value": value, "reason": reason},
            )

    def _require_attribute_tie(self, report_id: str, label: str, attribute: str) -> None:
        """Refuse an attribute adjudication where the readers do not tie (it would never count)."""
        with self.session() as s:
            report = q.get_report(s, report_id)
            if report is None:
                raise StudyError(f"no report {report_id!r}")
            cohort_id = report.cohort_id
        ref = core.reference_attributes(*self._attribute_votes(self.study.cohort_name(cohort_id)))
        row = ref[(ref["report_id"] == report_id) & (ref["label"] == label) & (ref["attribute"] == attribute)]
        where = f"{report_id} / {label} / {attribute}"
        if row.empty:
            raise StudyError(
                f"no tie waits on {where}: no reader who ticked it gave a {attribute} "
                "(adjudication settles ties only; `workbench attribute-ties` lists them)"
            )
        if not bool(row["tie"].iloc[0]):
            raise StudyError(
                f"no tie waits on {where}: the readers' majority is {row['reference'].iloc[0]} "
                "(adjudication settles ties only; `workbench attribute-ties` lists them)"
            )
