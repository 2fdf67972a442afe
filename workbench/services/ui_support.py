"""Use-cases of the reading room the other services do not offer: reports to read, a reader's
work list with server-side drafts (ticks survive navigation, reload and a lost connection),
admin-assigned work lists with an overlap target, and the reading pace.

Drafts and work lists have their own tables; a reading becomes complete only through
record_reading, so the reference and every metric see saved readings only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from workbench import bundle as bundle_mod
from workbench import scoring
from workbench.core import metrics
from workbench.core.text import compose_text
from workbench.errors import UserError
from workbench.services.adaptive import after_readings
from workbench.services.background import start_run_in_process
from workbench.services.base import Service, StudyContext
from workbench.services.freezing import StudyExtractionCache
from workbench.store import queries as q
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.adaptive import AdaptiveService
    from workbench.services.evaluation import EvaluationService
    from workbench.services.prompting import PromptsService
    from workbench.services.runs import RunsService
    from workbench.services.study import StudyService
    from workbench.services.triage import TriageService

COMPLETED, DRAFT, UNREAD = "completed", "draft", "unread"
MAX_COMMENT = 2000  # a comment is a remark beside a reading, not a report
PACE_GAP_S = 15 * 60  # a pause longer than this between two saves is a break, not reading time


def _checked_note(comment: str | None, unsure: bool | None):
    """The note to store ({comment, unsure}; None when empty), or False when the caller leaves it as it is."""
    if comment is None and unsure is None:
        return False
    comment = (comment or "").strip()
    if len(comment) > MAX_COMMENT:
        raise StudyError(f"the comment is {len(comment)} characters long; keep it under {MAX_COMMENT}")
    return {"comment": comment, "unsure": bool(unsure)} if comment or unsure else None


def reading_pace(saved_at, remaining: int) -> dict:
    """Median seconds per report from the gaps between consecutive saves (breaks left out), and the time left."""
    times = pd.to_datetime(pd.Series(list(saved_at)).dropna(), utc=True, format="ISO8601").sort_values()
    gaps = times.diff().dt.total_seconds().dropna()
    gaps = gaps[(gaps > 0) & (gaps <= PACE_GAP_S)].tail(50)
    if gaps.empty:
        return {"seconds_per_report": None, "reports_per_hour": None, "left_seconds": None, "based_on": 0}
    per = float(np.median(gaps))
    return {
        "seconds_per_report": per,
        "reports_per_hour": 3600.0 / per,
        "left_seconds": per * remaining,
        "based_on": int(len(gaps)),
    }


class UISupportService(Service):
    """Reports to read, a reader's own queue, readers, robustness with the study's cache."""

    def __init__(
        self,
        ctx: StudyContext,
        study: StudyService,
        runner: RunsService,
        prompts: PromptsService,
        evaluation: EvaluationService,
        triage: TriageService,
        adaptive: AdaptiveService,
    ) -> None:
        super().__init__(ctx)
        self.study = study
        self.runner = runner
        self.prompts = prompts
        self.evaluation = evaluation
        self.triage = triage
        self.adaptive = adaptive

    def start_run_detached(self, cohort: str, on_progress=None, cancel=None, **run_kwargs):
        """start_run in its own process (services/background.py): the app stays responsive."""
        self.require("run")
        return start_run_in_process(
            self.root, self.actor, on_progress=on_progress, cancel=cancel, cohort=cohort, **run_kwargs
        )

    def readers(self) -> list[str]:
        """Every reader id known to the study (for choosing a name in local mode)."""
        with self.session() as s:
            return q.list_readers(s)

    def report_text(self, report_id: str) -> dict:
        """One report's text as readers see it (the study's sections), without any labels."""
        with self.session() as s:
            report = q.get_report(s, report_id)
            if report is None:
                raise StudyError(f"no report {report_id!r}")
            return {
                "report_id": report_id,
                "findings": report.findings,
                "impression": report.impression,
                "text": compose_text(report.findings, report.impression, report.text, self.config.sections),
            }

    def reading_queue(self, reader: str, cohort: str) -> pd.DataFrame:
        """A cohort's reports in order with how many labels this reader has marked (only their own readings)."""
        if reader and reader != self.current_actor().user:
            self.require("see_unblinded")
        with self.session() as s:
            cohort_row = q.get_cohort(s, cohort)
            if cohort_row is None:
                raise StudyError(f"no cohort {cohort!r}")
            ids = q.report_ids(s, cohort_row.id)
            mine = q.readings_frame(s, reader=reader) if reader else pd.DataFrame(columns=["report_id", "label"])
        mine = mine[mine["label"].isin(self.vocab.asked_ids)]
        marked = mine.groupby("report_id").size()
        out = pd.DataFrame({"report_id": ids})
        out["marked"] = out["report_id"].map(marked).fillna(0).astype(int)
        out["complete"] = out["marked"] >= len(self.vocab.asked_ids)
        return out

    # ------------------------------------------------------------ reading room: drafts

    def _check_values(self, values: dict) -> dict[str, int]:
        """Label -> 0/1 for asked labels only (a clear error naming what is wrong)."""
        unknown = [k for k in values if k not in self.vocab.asked_ids]
        if unknown:
            raise StudyError(f"unknown or derived label(s) {unknown}")
        bad = {k: v for k, v in values.items() if v not in (0, 1, True, False)}
        if bad:
            raise StudyError(f"values must be 0 or 1, got {bad}")
        return {k: int(v) for k, v in values.items()}

    def reading_draft(self, reader: str, report_id: str) -> dict | None:
        """A reader's unsaved ticks on one report (label -> 0/1), or None."""
        self.study._check_own_reading(reader)
        with self.session() as s:
            return q.get_reading_draft(s, reader, report_id)

    def save_reading_draft(self, reader: str, report_id: str, values: dict) -> None:
        """Keep a reader's ticks server-side the moment they change (not a reading until submitted)."""
        self.study._check_own_reading(reader)
        values = self._check_values(values)
        with self.session(write=True) as s:
            if q.get_report(s, report_id) is None:
                raise StudyError(f"no report {report_id!r}")
            q.put_reading_draft(s, reader, report_id, values)

    def reading_draft_ids(self, reader: str) -> list[str]:
        """Reports on which this reader has unsaved ticks."""
        self.study._check_own_reading(reader)
        with self.session() as s:
            return q.reading_draft_ids(s, reader)

    def submit_reading(
        self,
        reader: str,
        report_id: str,
        values: dict,
        expected_versions: dict | None = None,
        comment: str | None = None,
        unsure: bool | None = None,
    ) -> dict:
        """Save a report's reading (every asked label: unticked = 0) with the reader's comment and unsure mark,
        drop its draft and log the save for undo, in one transaction (comment/unsure None: left as they are)."""
        self.study._check_own_reading(reader)
        values = self._check_values(values)
        note = _checked_note(comment, unsure)
        full = {lab: values.get(lab, 0) for lab in self.vocab.asked_ids}

        def saved(s, existing) -> None:
            """The note, the undo log and the draft, inside the reading's own transaction."""
            before = {lab: (int(existing.loc[lab, "value"]) if lab in existing.index else None) for lab in full}
            note_before = q.get_reading_note(s, reader, report_id)
            if note is not False and note != note_before:
                q.put_reading_note(s, reader, report_id, note)
                q.add_audit(s, self.actor.user, "note", "reading_note", f"{report_id}/{reader}", note_before, note)
            s.flush()
            after = q.readings_frame(s, report_ids_=[report_id], reader=reader).set_index("label")["version"]
            q.add_reading_save(
                s,
                reader,
                report_id,
                before,
                {lab: int(v) for lab, v in after.items()},
                note_before,
                q.get_reading_draft(s, reader, report_id),
            )
            q.delete_reading_draft(s, reader, report_id)

        return self.study.record_reading(reader, report_id, full, expected_versions=expected_versions, on_saved=saved)

    def reading_note(self, reader: str, report_id: str) -> dict | None:
        """A reader's own comment and unsure mark on one report ({comment, unsure}), or None."""
        self.study._check_own_reading(reader)
        with self.session() as s:
            return q.get_reading_note(s, reader, report_id)

    def reading_notes(self, cohort: str | None = None, reader: str | None = None) -> pd.DataFrame:
        """Readers' comments and unsure marks (report_id, reader, comment, unsure, updated_at): others' only unblinded."""
        if reader is None or reader != self.current_actor().user:
            self.require("see_unblinded")
        with self.session() as s:
            ids = q.report_ids(s, self.study.cohort_id(cohort)) if cohort else None
            return q.reading_notes_frame(s, ids, reader=reader).reset_index(drop=True)

    def undo_last_save(self, reader: str) -> dict:
        """Undo a reader's last save in one transaction: the values before it come back (a new reading goes,
        its draft returns), and the audit records the undo; refused when nothing is left to undo or the
        reading was changed since. Returns {report_id, restored, removed}."""
        self.study._check_own_reading(reader)
        with self.session(write=True) as s:
            save = q.last_reading_save(s, reader)
            if save is None:
                raise UserError(f"nothing to undo: {reader} has no saved reading left to undo")
            before, after = json.loads(save.before_json), json.loads(save.after_json)
            now_ = q.readings_frame(s, report_ids_=[save.report_id], reader=reader).set_index("label")
            moved = [lab for lab, v in after.items() if lab not in now_.index or int(now_.loc[lab, "version"]) != v]
            if moved or not q.mark_reading_save_undone(s, save.id):
                raise UserError(
                    f"cannot undo: the reading of {save.report_id} by {reader} was changed since that save "
                    f"({', '.join(moved) or 'undone already'}); nothing was undone"
                )
            restored = removed = 0
            for lab, value in before.items():
                reading = q.get_reading(s, save.report_id, lab, reader)
                if value is None:
                    removed += q.delete_reading(s, reading.id, after[lab])
                elif int(reading.value) != value:
                    restored += q.update_reading(s, reading.id, value, after[lab])
            current = {lab: int(now_.loc[lab, "value"]) for lab in after}
            q.add_audit(s, self.actor.user, "undo", "reading", f"{save.report_id}/{reader}", current, before)
            note_before = json.loads(save.note_before_json)
            if q.get_reading_note(s, reader, save.report_id) != note_before:
                q.add_audit(
                    s,
                    self.actor.user,
                    "undo",
                    "reading_note",
                    f"{save.report_id}/{reader}",
                    q.get_reading_note(s, reader, save.report_id),
                    note_before,
                )
                q.put_reading_note(s, reader, save.report_id, note_before)
            draft = json.loads(save.draft_before_json)
            if draft is None and all(v is None for v in before.values()):
                draft = current  # a first save undone: its ticks stay on screen as the draft they were
            if draft is not None:
                q.put_reading_draft(s, reader, save.report_id, draft)
            s.flush()
            versions = q.readings_frame(s, report_ids_=[save.report_id], reader=reader).set_index("label")["version"]
            q.restamp_last_reading_save(s, reader, save.report_id, {lab: int(v) for lab, v in versions.items()})
            after_readings(self, s, [(save.report_id, reader)])
        return {"report_id": save.report_id, "restored": restored, "removed": removed}

    def last_saved_report(self, reader: str) -> str | None:
        """The report of a reader's last save that undo would take back, or None."""
        self.study._check_own_reading(reader)
        with self.session() as s:
            save = q.last_reading_save(s, reader)
            return None if save is None else save.report_id

    def my_reading_list(self, reader: str, cohort: str, search: str = "") -> pd.DataFrame:
        """A reader's own saved readings and drafts on a cohort (report_id, state, ticked, unsure, comment, saved_at),
        in work-list order, filtered by report id or report text (case-insensitive); nobody else's values."""
        work = self.adaptive.work_list(reader, cohort)
        work = work[work["state"] != UNREAD]
        names = self.vocab.names()
        with self.session() as s:
            readings = q.readings_frame(s, report_ids_=work["report_id"], reader=reader)
            drafts = {rid: q.get_reading_draft(s, reader, rid) for rid in work.loc[work["state"] == DRAFT, "report_id"]}
            notes = q.reading_notes_frame(s, work["report_id"], reader=reader).set_index("report_id")
            needle = search.strip().lower()
            if needle:
                keep = [
                    rid for rid in work["report_id"] if needle in rid.lower() or needle in self._report_words(s, rid)
                ]
                work = work[work["report_id"].isin(keep)]
        ticked = readings[readings["value"].astype(int) == 1].groupby("report_id")["label"].agg(list).to_dict()
        for rid, values in drafts.items():
            ticked[rid] = [lab for lab, v in (values or {}).items() if v]
        out = pd.DataFrame(
            {
                "report_id": work["report_id"],
                "state": work["state"].map({COMPLETED: "saved", DRAFT: "draft"}).fillna("partly saved"),
                "ticked": [", ".join(names.get(lab, lab) for lab in ticked.get(rid, [])) for rid in work["report_id"]],
                "unsure": work["report_id"].isin(notes.index[notes["unsure"].astype(bool)]),
                "comment": work["report_id"].map(notes["comment"]).fillna(""),
                "saved_at": work["saved_at"],
            }
        )
        return out.reset_index(drop=True)

    def _report_words(self, s, report_id: str) -> str:
        """A report's text in lower case, for search."""
        report = q.get_report(s, report_id)
        return compose_text(report.findings, report.impression, report.text, self.config.sections).lower()

    # ------------------------------------------------------------ reading room: work lists

    def assign_work(self, cohort: str, readers: list[str], overlap: int) -> dict:
        """Give each report of a cohort to `overlap` readers, balancing the lists (admins only).

        Existing assignments are kept (a reader may have read them already); only missing places
        are filled, each by the listed reader with the fewest reports so far.
        """
        self.require("settings")
        readers = list(dict.fromkeys(r.strip() for r in readers if r and r.strip()))
        if not readers:
            raise StudyError("name at least one reader to assign reports to")
        if not 1 <= int(overlap) <= len(readers):
            raise StudyError(
                f"the overlap (readers per report) must be between 1 and {len(readers)} (the readers named), got {overlap}"
            )
        overlap = int(overlap)
        with self.session(write=True) as s:
            cohort_row = q.get_cohort(s, cohort)
            if cohort_row is None:
                raise StudyError(f"no cohort {cohort!r}")
            existing = q.assignments_frame(s, cohort_row.id)
            have = existing.groupby("report_id")["reader"].apply(set).to_dict()
            load = {r: int((existing["reader"] == r).sum()) for r in readers}
            new: list[tuple[str, str]] = []
            for report_id in q.report_ids(s, cohort_row.id):
                taken = have.get(report_id, set())
                for _ in range(max(0, overlap - len(taken))):
                    free = [r for r in readers if r not in taken]
                    if not free:
                        break
                    pick = min(free, key=lambda r: (load[r], readers.index(r)))
                    taken = taken | {pick}
                    load[pick] += 1
                    new.append((report_id, pick))
            q.ensure_readers(s, readers)
            q.add_assignments(s, cohort_row.id, new, self.actor.user)
            q.put_work_list(s, cohort_row.id, overlap, self.actor.user)
            q.add_audit(
                s,
                self.actor.user,
                "assign",
                "work_list",
                cohort,
                None,
                {"readers": readers, "overlap": overlap, "added": len(new)},
            )
        return {"added": len(new), "per_reader": load}

    def work_list_status(self, cohort: str) -> pd.DataFrame:
        """Per reader with a work list on the cohort: reports assigned and completed; empty without work lists."""
        with self.session() as s:
            cohort_row = q.get_cohort(s, cohort)
            if cohort_row is None:
                raise StudyError(f"no cohort {cohort!r}")
            settings = q.get_work_list(s, cohort_row.id)
            if settings is None:
                return pd.DataFrame(columns=["reader", "assigned", "completed", "overlap"])
            assigned = q.assignments_frame(s, cohort_row.id)
            counts = q.reading_counts(s, cohort_id=cohort_row.id)
        done = counts[counts["labels"] >= len(self.vocab.asked_ids)][["reader", "report_id"]]
        merged = assigned.merge(done.assign(completed=1), on=["reader", "report_id"], how="left")
        out = (
            merged.groupby("reader").agg(assigned=("report_id", "count"), completed=("completed", "sum")).reset_index()
        )
        out["completed"] = out["completed"].fillna(0).astype(int)
        out["overlap"] = settings.overlap
        return out

    # ------------------------------------------------------------ disagreements: order and highlights

    QUEUE_ORDERS = {
        "errors": "labels with the highest error rate first (then fewest positives), reports in cohort order",
        "broken": "cases the last prompt change broke first (against the run before this one), then by label error rate",
    }

    def previous_run(self, run_id: int) -> int | None:
        """The finished run before this one on the same cohort, or None."""
        run = self.runner.run_info(run_id)
        runs = self.runner.runs()
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
        queue = self.triage.disagreements(run_id, label, kind, category)
        queue["broken_by_last_change"] = False
        if order == "errors":
            return queue, self.QUEUE_ORDERS[order]
        previous = self.previous_run(run_id)
        if previous is None:
            return queue, "no earlier run on this cohort: " + self.QUEUE_ORDERS["errors"]
        cases = self.evaluation.compare_runs(previous, run_id)["cases"]
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

    # ------------------------------------------------------------ adjudication order

    def adjudication_worklist(self, cohort: str | None = None) -> pd.DataFrame:
        """Items waiting for a senior reader: flagged ones first, then ties, then too few readers; why each waits."""
        queue = self.study.adjudication_queue(cohort)
        tie = (queue["positives"] * 2 == queue["n_readers"]) & (queue["n_readers"] > 0)
        queue["why"] = np.where(
            queue["flagged"],
            "flagged: the reference may be wrong",
            np.where(tie, "tie", queue["reason"].replace("", "waiting")),
        )
        queue["rank"] = np.where(queue["flagged"], 0, np.where(tie, 1, 2))
        return queue.sort_values("rank", kind="stable").drop(columns="rank").reset_index(drop=True)

    # ------------------------------------------------------------ comparison, as the Compare tab shows it

    SIGNIFICANT = ("better", "worse")

    def compare_view(self, run_a: int, run_b: int, n_resamples: int = 1000, seed: int = 0) -> dict:
        """compare_runs plus a paired bootstrap interval of each label's change in F1, rows sorted by
        change (significant first, then the largest change), and what each macro figure counts."""
        cmp = self.evaluation.compare_runs(run_a, run_b)
        a, b = self.runner.run_info(run_a), self.runner.run_info(run_b)
        y_true, pred_a, _ = self.evaluation.evaluation_inputs(run_a, extra_commits=(b.prompt_commit,))
        _, pred_b, _ = self.evaluation.evaluation_inputs(run_b, extra_commits=(a.prompt_commit,))
        labels = list(cmp["table"].index)
        pred_b = pred_b.reindex(index=y_true.index)
        interval = metrics.bootstrap_delta_f1(
            y_true[labels], pred_a[labels], pred_b[labels], n_resamples=n_resamples, seed=seed
        )
        table = cmp["table"].join(interval)
        table["verdict_note"] = metrics.verdict_notes(table)  # now with the interval beside the test
        table["significant"] = table["verdict"].isin(self.SIGNIFICANT)
        table["changed"] = (table["b"] + table["c"] > 0) | (table["delta_f1"].fillna(0) != 0)
        table["size"] = table["delta_f1"].abs().fillna(table["delta_accuracy"].abs()).fillna(0)
        table = table.sort_values(["significant", "size"], ascending=[False, False], kind="stable").drop(columns="size")
        alone = {}
        for key, run_id in (("a", run_a), ("b", run_b)):
            ev = self.evaluation.evaluate_run(run_id, n_resamples=0)
            t_alone, _, _ = self.evaluation.evaluation_inputs(run_id)
            alone[key] = {"macro_f1": ev.averages["macro_f1"], "reports": len(t_alone)}
        leaked = len(
            self.evaluation._leaked_reports(a.prompt_commit, b.prompt_commit)
            & set(self.study.reference_matrix(self.study._cohort_name(a.cohort_id)).index)
        )
        counts = {"reports": len(y_true), "labels": len(labels), "leaked_either": leaked, "alone": alone}
        return {**cmp, "table": table, "counts": counts}

    def default_robustness_pairs(self) -> Path:
        """The shipped synthetic paraphrase / significant-change pairs."""
        return scoring.DEFAULT_PAIRS

    def robustness(self, bundle_path: Path, pairs=None, model: str | None = None) -> dict:
        """Robustness and discrimination of a bundle on text pairs, using the study's extraction cache."""
        b = bundle_mod.load_bundle(Path(bundle_path))
        return scoring.robustness(
            b,
            pairs,
            model=model,  # None: the shipped pairs that fit the bundle's vocabulary
            cache=StudyExtractionCache(self),
            allow_endpoints=list(self.config.allowed_endpoints),
        )
