"""Triage of a run's disagreements: the queue, one case, and the error notes radiologists write on them."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from workbench.core import attributes as core
from workbench.core.parsing import Answer
from workbench.core.prompts import render_joint_call, render_label_call
from workbench.core.text import compose_text
from workbench.errors import NotFound, UserError
from workbench.services.base import Service, StudyContext
from workbench.services.results import Case
from workbench.store import queries as q
from workbench.study import SIGNIFICANCE, StudyError

SHOWN_ANSWER = [c for c in Answer.COLUMNS if c != "value"]  # a queue row shows the value as `prediction`

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.attributes import AttributesService
    from workbench.services.evaluation import EvaluationService
    from workbench.services.model_path import ModelPathService
    from workbench.services.prompting import PromptsService
    from workbench.services.runs import RunsService
    from workbench.services.splits import SplitsService
    from workbench.services.study import StudyService


class TriageService(Service):
    """A run's disagreements with the reference (presence and attributes) in the app's orders, cases and error notes."""

    def __init__(
        self,
        ctx: StudyContext,
        study: StudyService,
        splits: SplitsService,
        runs: RunsService,
        costs: ModelPathService,
        attributes: AttributesService,
        evaluation: EvaluationService,
        prompts: PromptsService,
    ) -> None:
        super().__init__(ctx)
        self.study = study
        self.splits = splits
        self.runs = runs
        self.costs = costs
        self.attributes = attributes
        self.evaluation = evaluation
        self.prompts = prompts

    def disagreements(
        self,
        run_id: int,
        label: str | None = None,
        kind: str | None = None,
        category: str | None = None,
        with_attributes: bool = True,
    ) -> pd.DataFrame:
        """The queue: every (report, label) where the labeller and the reference differ (or the call failed);
        with_attributes=False leaves out the matched findings whose attributes differ."""
        run = self.runs.run_info(run_id)
        cohort = self.study.cohort_name(run.cohort_id)
        ref_table = self.study.reference(cohort)
        preds = self.runs.predictions(run_id)
        shown = self.splits.queue_reports(
            run
        )  # only the tuning part: validation and test reports never reach the queue
        preds = preds if shown is None else preds[preds["report_id"].isin(shown)]
        if label:  # one label's queue (its error rate and support are its own): 1/21 of the rows to merge
            one = label = self.study.label_id(label)  # a typo is refused, never an empty queue
            preds, ref_table = preds[preds["label"] == one], ref_table[ref_table["label"] == one]
        merged = preds.merge(
            ref_table[["report_id", "label", "value", "positives", "n_readers", "status"]],
            on=["report_id", "label"],
            how="inner",
            suffixes=("", "_ref"),
        )
        merged = merged.rename(
            columns={"value": "prediction", "value_ref": "reference", "status_ref": "reference_status"}
        )
        failed = merged["prediction"].isna()
        settled = merged["reference"].notna()
        differs = settled & ~failed & (merged["prediction"] != merged["reference"])
        out = merged[differs | failed].copy()
        out["type"] = np.where(out["prediction"].isna(), "failed", np.where(out["prediction"] == 1, "FP", "FN"))
        out["votes"] = out["positives"].astype(int).astype(str) + " of " + out["n_readers"].astype(int).astype(str)
        out = self._attach_notes(out)
        # label error rate and support over the settled, answered cells (no full evaluation needed)
        scored = merged[settled & ~failed]
        error_rate = (scored["prediction"] != scored["reference"]).groupby(scored["label"]).mean().to_dict()
        support = (scored["reference"] == 1).groupby(scored["label"]).sum().to_dict()
        out["label_error_rate"] = out["label"].map(error_rate)
        out["label_support"] = out["label"].map(support)
        out = out.sort_values(
            ["label_error_rate", "label_support", "label", "report_id"], ascending=[False, True, True, True]
        )
        out = self.study.blind_rows(out)  # a reader: only reports they have finished
        out["attribute"], out["attribute_category"] = "", ""
        if with_attributes and kind in (None, "attribute") and self.vocab.attribute_specs():
            extra = self._attribute_disagreements(run_id, merged, label, shown, error_rate, support)
            if len(extra):
                out = pd.concat([out, extra], ignore_index=True)
        if label:
            out = out[out["label"] == label]
        if kind:
            out = out[out["type"] == kind]
        if category:
            out = out[
                out["categories"].str.contains(category, regex=False)
                | out["attribute_category"].map(lambda cats: category in str(cats).split(", "))
            ]
        cols = [
            "report_id",
            "label",
            "type",
            "reference",
            "prediction",
            "votes",
            "reference_status",
            *SHOWN_ANSWER,
            "notes",
            "categories",
            "label_error_rate",
            "label_support",
            "attribute",
            "attribute_category",
        ]
        return out[cols].reset_index(drop=True)

    def _attribute_disagreements(
        self, run_id: int, merged: pd.DataFrame, label: str | None, shown, error_rate: dict, support: dict
    ) -> pd.DataFrame:
        """Queue rows of matched findings whose attribute differs from the reference's, type "attribute", with
        their error category (laterality/location, severity, comparison) for the radiologist's note."""
        specs = self.vocab.attribute_specs()
        if label:
            one = self.vocab.resolve(label) or label
            specs = {k: v for k, v in specs.items() if k == one}
        columns = [
            "report_id",
            "label",
            "type",
            "reference",
            "prediction",
            "votes",
            "reference_status",
            *SHOWN_ANSWER,
            "label_error_rate",
            "label_support",
            "attribute",
            "attribute_category",
            "notes",
            "categories",
        ]
        if self.attributes.reference_attributes(self.study.cohort_name(self.runs.run_info(run_id).cohort_id)).empty:
            return pd.DataFrame(
                columns=columns
            )  # no reader gave an attribute: nothing to compare (and no matrices built)
        y_pred, y_true, pred_attrs, ref_attrs = self.attributes.attribute_inputs(run_id)
        wrong = core.mismatches(core.matched_rows(y_pred, y_true, pred_attrs, ref_attrs, specs))
        if shown is not None:
            wrong = wrong[wrong["report_id"].isin(shown)]
        wrong = self.study.blind_rows(wrong)
        base = merged.set_index(["report_id", "label"])
        rows = []
        # one case per finding: its differing attributes are listed together (the queue is keyed by report and label)
        for (report_id, lab), group in wrong.groupby(["report_id", "label"], sort=False):
            cell = base.loc[(report_id, lab)] if (report_id, lab) in base.index else None
            rows.append(
                {
                    "report_id": report_id,
                    "label": lab,
                    "type": "attribute",
                    "reference": 1,
                    "prediction": 1,
                    "votes": "" if cell is None else f"{int(cell['positives'])} of {int(cell['n_readers'])}",
                    "reference_status": "" if cell is None else cell["reference_status"],
                    "evidence": "" if cell is None else cell["evidence"],
                    "evidence_found": None if cell is None else cell["evidence_found"],
                    "status": "ok",
                    "detail": "; ".join(
                        f"{r.attribute}: labeller {r.value}, reference {r.reference}"
                        for r in group.itertuples(index=False)
                    ),
                    "label_error_rate": error_rate.get(lab),
                    "label_support": support.get(lab),
                    "attribute": ", ".join(group["attribute"]),
                    "attribute_category": ", ".join(dict.fromkeys(group["category"])),
                }
            )
        frame = pd.DataFrame(rows, columns=columns[:-2])
        return self._attach_notes(frame) if len(frame) else frame.assign(notes=0, categories="")

    def _attach_notes(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Count of notes and their categories per (report, label), across runs."""
        with self.session() as s:
            notes = q.notes_frame(s)
        if notes.empty:
            frame["notes"] = 0
            frame["categories"] = ""
            return frame
        agg = (
            notes.groupby(["report_id", "label"])
            .agg(notes=("id", "count"), categories=("category", lambda x: ", ".join(sorted(set(x)))))
            .reset_index()
        )
        frame = frame.merge(agg, on=["report_id", "label"], how="left")
        frame["notes"] = frame["notes"].fillna(0).astype(int)
        frame["categories"] = frame["categories"].fillna("")
        return frame

    def case(self, run_id: int, report_id: str, label: str) -> Case:
        """Everything about one disagreement: text, votes, answer, evidence, notes, the prompt sent."""
        if not self.study.can_see_report(report_id):
            from workbench.services.study import PermissionDenied

            raise PermissionDenied("submit your own reading of this report first (blinded until then)")

        run = self.runs.run_info(run_id)
        label = self.study.label_id(label)
        with self.session() as s:
            report = q.get_report(s, report_id)
            if report is None:
                raise StudyError(f"no report {report_id!r}")
            votes = q.readings_frame(s, report_ids_=[report_id])
            notes = q.notes_frame(s, label=label, report_id=report_id)
            pred = q.predictions_frame(s, run_id, report_id=report_id, label=label)
        shown = self.splits.queue_reports(run)  # validation and test text never reaches the person tuning prompts
        if shown is not None and report_id not in shown:
            raise StudyError(
                f"report {report_id!r} is not in the tuning part of its cohort: validation cases are "
                "shown by id only, so the prompts are not tuned to them"
            )
        text = compose_text(report.findings, report.impression, report.text, run.sections.split(","))
        messages = []
        if label in self.vocab.asked_ids:
            ps = self.prompts.prompt_set(run.prompt_commit)
            names = self.vocab.names()
            if run.mode == "joint":
                messages = render_joint_call(ps, {lab: names[lab] for lab in json.loads(run.labels_json)}, text)
            else:
                messages = render_label_call(ps, label, names[label], text)
        reference: int | None = None
        reference_status: str | None = None
        if label in self.vocab.asked_ids:
            item = self.study.item_reference(report_id, label)
            if item is not None:
                reference, reference_status = item.value, item.status
        else:  # a derived label: from the whole report's reference
            column = self.study.reference_matrix(self.study.cohort_name(run.cohort_id))[label]
            value = column.get(report_id)
            if value is not None:
                reference, reference_status = None if pd.isna(value) else int(value), "derived"
        return Case(
            report_id=report_id,
            label=label,
            text=text,
            findings=report.findings,
            impression=report.impression,
            votes=votes[votes["label"] == label][["reader", "value"]],
            reference=reference,
            reference_status=reference_status,
            prediction=pred.iloc[0].to_dict() if len(pred) else None,
            notes=notes,
            messages=messages,
            call=self.costs.call_fact(pred.iloc[0]["call_key"]) if len(pred) else None,
        )

    def add_note(
        self,
        report_id: str,
        label: str,
        category: str,
        significance: str,
        text: str = "",
        reference_wrong: bool = False,
        run_id: int | None = None,
    ) -> int:
        """Attach an error note to (report, label); "the reference is wrong" opens an adjudication item."""
        self.require("note")
        label_id = self.study.label_id(label)
        if category not in self.config.error_categories:
            raise StudyError(
                f"unknown error category {category!r}; categories: {', '.join(self.config.error_categories)} "
                "(a study can add its own in workbench.yaml: error_categories)"
            )
        if significance not in SIGNIFICANCE:
            raise StudyError(f"clinical significance must be one of: {', '.join(SIGNIFICANCE)}")
        if not self.study.can_see_report(report_id):
            from workbench.services.study import PermissionDenied

            raise PermissionDenied("submit your own reading of this report first (blinded until then)")
        with self.session() as s:
            if q.get_report(s, report_id) is None:
                raise NotFound(f"no report {report_id!r}")
        self.splits.require_tuning_report(report_id)  # a validation or test report is only measured, never annotated
        if run_id is not None:  # a note names the run whose disagreement it explains
            self._require_disagreement(run_id, report_id, label_id)
        with self.session() as s:
            note = q.add_note(
                s,
                report_id=report_id,
                label=label_id,
                run_id=run_id,
                author=self.actor.user,
                category=category,
                significance=significance,
                text=text.strip(),
                reference_wrong=bool(reference_wrong),
            )
            note_id = q.stored_id(note)  # flushed by add_note
            if reference_wrong:
                q.add_flag(s, report_id, label_id, self.actor.user, text.strip() or category, note_id)
            q.add_audit(
                s,
                self.actor.user,
                "add",
                "note",
                f"{report_id}/{label_id}",
                None,
                {
                    "id": note_id,
                    "category": category,
                    "significance": significance,
                    "text": text.strip(),
                    "reference_wrong": bool(reference_wrong),
                    "run": run_id,
                },
            )
            return note_id

    def _require_disagreement(self, run_id: int, report_id: str, label: str) -> None:
        """A note belongs to a disagreement of the run it names: refuse one on an item the run got right."""
        if self._presence_disagreement(run_id, report_id, label):
            return  # the attribute rows need not be computed
        if label in self.vocab.attribute_specs() and report_id in set(
            self.disagreements(run_id, label=label, kind="attribute")["report_id"]
        ):
            return
        raise UserError(
            f"{report_id}/{label} is not a disagreement of run {run_id} (the labeller agrees with the "
            f"reference there): notes go on disagreements; see `workbench disagreements {run_id} --label {label}`"
        )

    def _presence_disagreement(self, run_id: int, report_id: str, label: str) -> bool:
        """The queue's rule for one asked item (a failed call, or a settled reference the answer differs from),
        read for that item alone: the whole cohort's reference cost a note's save 0.2 s at 3,000 reports."""
        with self.session() as s:
            pred = q.predictions_frame(s, run_id, report_id=report_id, label=label)
        if pred.empty or label not in self.vocab.asked_ids:  # derived labels have no reference row in the queue
            return False
        reference = self.study.item_reference(report_id, label)
        if reference is None:  # nobody has read it: not in the queue, even as a failed call
            return False
        value = pred["value"].iloc[0]
        return bool(pd.isna(value) or (reference.value is not None and int(value) != reference.value))

    def notes(self, label: str | None = None, report_id: str | None = None) -> pd.DataFrame:
        """Error notes (oldest first); a reader sees those on reports they have finished."""
        with self.session() as s:
            notes = q.notes_frame(s, label=self.study.label_id(label) if label else None, report_id=report_id)
        return self.study.blind_rows(notes)

    def note_counts(self, run_id: int | None = None) -> pd.DataFrame:
        """Counts of notes by label and category (for one run's disagreements, or all)."""
        notes = self.notes()
        if run_id is not None:
            queue = self.disagreements(run_id)
            keys = set(zip(queue["report_id"], queue["label"], strict=False))
            notes = notes[[k in keys for k in zip(notes["report_id"], notes["label"], strict=False)]]
        if notes.empty:
            return pd.DataFrame(columns=["label"])
        return pd.crosstab(notes["label"], notes["category"]).reset_index()

    # ------------------------------------------------------------ the queue in the app's order, and what to look for

    QUEUE_ORDERS = {
        "errors": "labels with the highest error rate first (then fewest positives), reports in cohort order",
        "broken": "cases the last prompt change broke first (against the run before this one), then by label error rate",
    }

    def previous_run(self, run_id: int) -> int | None:
        """The finished run before this one on the same cohort, or None."""
        run = self.runs.run_info(run_id)
        runs = self.runs.runs()
        done = runs[
            runs["status"].isin(["finished", "incomplete"])
            & (runs["cohort_id"] == run.cohort_id)
            & (runs["id"] < run_id)
        ]
        return int(done["id"].max()) if len(done) else None

    def disagreement_queue(
        self,
        run_id: int,
        label: str | None = None,
        kind: str | None = None,
        category: str | None = None,
        order: str = "errors",
    ) -> tuple[pd.DataFrame, str]:
        """The disagreement queue in the chosen order, with a sentence saying which order is used."""
        if order not in self.QUEUE_ORDERS:
            raise StudyError(f"order must be one of {', '.join(self.QUEUE_ORDERS)}, got {order!r}")
        queue = self.disagreements(run_id, label, kind, category)
        queue["broken_by_last_change"] = False
        if order == "errors":
            return queue, self.QUEUE_ORDERS[order]
        previous = self.previous_run(run_id)
        if previous is None:
            return queue, "no earlier run on this cohort: " + self.QUEUE_ORDERS["errors"]
        cases = self.evaluation.compare_runs(previous, run_id).cases
        broken = set(zip(*(cases.loc[cases["change"] == "broken", c] for c in ("report", "label")), strict=False))
        queue["broken_by_last_change"] = [k in broken for k in zip(queue["report_id"], queue["label"], strict=False)]
        queue = queue.sort_values("broken_by_last_change", ascending=False, kind="stable").reset_index(drop=True)
        return queue, self.QUEUE_ORDERS[
            order
        ] + f" (run {previous} -> {run_id}: {int(queue['broken_by_last_change'].sum())} broken)"

    def with_fresh_notes(self, queue: pd.DataFrame, category: str | None = None) -> pd.DataFrame:
        """A queue with its note counts and categories read now (one query), then filtered by category."""
        with self.session() as s:
            notes = q.notes_frame(s)
        out = queue.copy()
        if notes.empty:
            out["notes"], out["categories"] = 0, ""
        else:  # look the (small) note table up by key: a merge over a 10,000-row queue costs more
            agg = notes.groupby(["report_id", "label"]).agg(
                notes=("id", "count"), categories=("category", lambda x: ", ".join(sorted(set(x))))
            )
            keys = pd.MultiIndex.from_arrays([out["report_id"].to_numpy(), out["label"].to_numpy()])
            out["notes"] = agg["notes"].reindex(keys).fillna(0).astype(int).to_numpy()
            out["categories"] = agg["categories"].reindex(keys).fillna("").to_numpy()
        if category:
            out = out[out["categories"].str.contains(category, regex=False)]
        return out.reset_index(drop=True)

    def label_phrases(self, label: str, prompt_ref: str | None = None) -> list[str]:
        """What to look for in a report for a label: its prompt's look-for phrases and its name."""
        names = self.vocab.names()
        label = self.study.label_id(label)
        phrases = [names.get(label, label)]
        words = re.findall(r"[A-Za-z]+", phrases[0])
        if len(words) > 1:  # a close synonym: the name's main word ("Pleural Effusion" -> "effusion")
            head = max(words, key=len)
            if len(head) >= 5:
                phrases.append(head[:-1] if head.endswith("s") else head)
        if label in self.vocab.asked_ids:
            phrases += list(self.prompts.label_prompt(label, prompt_ref).look_for)
        return list(dict.fromkeys(p.strip() for p in phrases if p and p.strip()))
