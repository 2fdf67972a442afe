"""A reader's reading, end to end: the reports to read, server-side drafts (ticks survive navigation,
reload and a lost connection), saving a report's reading with its comment and unsure mark, undo, the
reader's own readings and attribute values, admin-assigned work lists with an overlap target, and the
reading pace.

A save is one transaction: the readings, the note, the undo log, the dropped draft and the adaptive
progress (AdaptiveService.after_readings) are written together or not at all. Drafts and work lists have
their own tables; a reading becomes complete only when saved, so the reference and every metric see saved
readings only.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from workbench.core.text import compose_text
from workbench.core.vocab import VocabularyError
from workbench.errors import UserError
from workbench.services.base import Service, StudyContext
from workbench.services.results import (
    DraftReading,
    PressClaim,
    ReadingNote,
    ReportText,
    SavedReading,
    UndoneSave,
    WorkAssigned,
)
from workbench.services.study import ConflictError, PermissionDenied
from workbench.store import db
from workbench.store import queries as q
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.adaptive import AdaptiveService
    from workbench.services.study import StudyService

COMPLETED, DRAFT, UNREAD = "completed", "draft", "unread"
MAX_COMMENT = 2000  # a comment is a remark beside a reading, not a report
LOOK = "report_look"  # audit entity: a reader saw the reference, the labeller's answer or the votes of a report
NOTE_IN_DRAFT = "_note"  # a draft's comment and unsure mark, kept beside its ticks (undo brings the whole reading back)
ATTRIBUTES_IN_DRAFT = "_attributes"  # a draft's attribute values of its ticked findings: label -> {attribute: value}
DRAFT_EXTRAS = (NOTE_IN_DRAFT, ATTRIBUTES_IN_DRAFT)  # a draft's keys that are not labels
PACE_GAP_S = 15 * 60  # a pause longer than this between two saves is a break, not reading time
PRESS_KEPT_S = 24 * 3600  # keyboard presses remembered this long (a page resends an unanswered one within seconds)


def _seconds_between(earlier: str, later: str) -> float:
    """Seconds from one ISO timestamp to another."""
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


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


def _draft_ticks(draft: dict) -> dict[str, int]:
    """A stored draft's ticks alone (label -> 0/1), without its note and attributes."""
    return {k: v for k, v in draft.items() if k not in DRAFT_EXTRAS}


def _reading_id(s, report_id: str, label: str, reader: str) -> int:
    """The id of a reader's stored reading of one label; ConflictError when another save removed it meanwhile."""
    reading = q.get_reading(s, report_id, label, reader)
    if reading is None:
        raise ConflictError(f"{report_id}/{label} was removed by another save meanwhile; reload (nothing was changed)")
    return q.stored_id(reading)


def check_own_reading(ctx: StudyContext, reader: str) -> None:
    """Only readers themselves (or an admin/adjudicator acting for a local name) touch a reader's drafts."""
    ctx.require("annotate")
    if not reader or not str(reader).strip():
        raise StudyError("choose a reader name first")
    if ctx.actor.role == "reader" and reader != ctx.actor.user:
        raise PermissionDenied(f"{ctx.actor.user} may only read as themself, not as {reader!r}")


class ReadingService(Service):
    """A reader's reading: reports to read, drafts, saves, notes, undo, own readings and attributes, work lists."""

    def __init__(self, ctx: StudyContext, study: StudyService, adaptive: AdaptiveService) -> None:
        super().__init__(ctx)
        self.study = study
        self.adaptive = adaptive

    def readers(self) -> list[str]:
        """Every reader id known to the study (for choosing a name in local mode)."""
        with self.session() as s:
            return q.list_readers(s)

    def report_text(self, report_id: str) -> ReportText:
        """One report's text as readers see it (the study's sections), without any labels."""
        with self.session() as s:
            report = q.get_report(s, report_id)
            if report is None:
                raise StudyError(f"no report {report_id!r}")
            return ReportText(
                report_id,
                report.findings,
                report.impression,
                compose_text(report.findings, report.impression, report.text, self.config.sections),
            )

    def reading_queue(self, reader: str, cohort: str) -> pd.DataFrame:
        """A cohort's reports in order with how many labels this reader has marked (only their own readings)."""
        if reader and reader != self.current_actor().user:
            self.require("see_unblinded")
        with self.session() as s:
            cohort_row = q.get_cohort(s, cohort)
            if cohort_row is None:
                raise StudyError(f"no cohort {cohort!r}")
            ids = q.report_ids(s, q.stored_id(cohort_row))
            mine = q.readings_frame(s, reader=reader) if reader else pd.DataFrame(columns=["report_id", "label"])
        mine = mine[mine["label"].isin(self.vocab.asked_ids)]
        marked = mine.groupby("report_id").size()
        out = pd.DataFrame({"report_id": ids})
        out["marked"] = out["report_id"].map(marked).fillna(0).astype(int)
        out["complete"] = out["marked"] >= len(self.vocab.asked_ids)
        return out

    # ------------------------------------------------------------ saving a reading

    def record_reading(
        self,
        reader: str,
        report_id: str,
        values: dict[str, int],
        expected_versions: dict[str, int] | None = None,
    ) -> SavedReading:
        """Record one reader's labels for one report (the annotate form); returns what changed.

        expected_versions maps label -> the reading version the form showed; if another save
        changed it meanwhile the whole save is refused (ConflictError) and nothing is written.
        """
        self._check_writer(reader, values)
        with self._first_save_guard(reader, report_id), self.session(write=True) as s:
            changed, _ = self._write_readings(s, reader, report_id, values, expected_versions or {})
            self._after_save(s, reader, report_id, changed)
        return SavedReading(**changed)

    def _check_writer(self, reader: str, values: dict[str, int]) -> None:
        """Refuse a save by someone other than the reader, or of labels and values readers do not mark."""
        self.require("annotate")
        actor = self.current_actor()
        # only the reader themself writes their readings (an adjudicator adjudicates instead); the one
        # exception is the local operator of a single-user study (auth: none), who names the reader
        if reader != actor.user and (actor.account or actor.role != "admin"):
            raise PermissionDenied(
                f"{actor.user} may only record their own readings, not {reader!r}'s"
                + ("; adjudicate the item instead" if actor.role == "adjudicator" else "")
            )
        unknown = [k for k in values if k not in self.vocab.asked_ids]
        if unknown:
            raise StudyError(f"unknown or derived label(s) {unknown}; readers mark: {', '.join(self.vocab.asked_ids)}")
        bad = {k: v for k, v in values.items() if v not in (0, 1)}
        if bad:
            raise StudyError(f"values must be 0 or 1, got {bad}")

    @contextmanager
    def _first_save_guard(self, reader: str, report_id: str):
        """A unique-constraint failure of a save is a concurrent first save of the same report that landed first."""
        try:
            yield
        except Exception as exc:
            if not db.is_integrity_error(exc):
                raise
            raise ConflictError(
                f"{report_id}: another save of the same report by {reader} landed first; "
                "reload and save again (nothing was saved)"
            ) from exc

    def _write_readings(
        self, s, reader: str, report_id: str, values: dict[str, int], expected_versions: dict
    ) -> tuple[dict, pd.DataFrame]:
        """Write one reader's values of one report in the open transaction: (what changed, the rows before)."""
        changed = {"added": 0, "changed": 0, "unchanged": 0}
        if q.get_report(s, report_id) is None:
            raise StudyError(f"no report {report_id!r}")
        q.ensure_readers(s, [reader])
        existing = q.readings_frame(s, report_ids_=[report_id], reader=reader).set_index("label")
        self._refuse_after_look(s, reader, report_id, existing, values)
        new_rows = []
        for label, value in values.items():
            if label not in existing.index:
                if expected_versions.get(label):
                    raise ConflictError(f"{label}: expected an existing reading; reload the report")
                new_rows.append({"report_id": report_id, "label": label, "reader": reader, "value": value})
                changed["added"] += 1
                continue
            row = existing.loc[label]
            old_value, version = int(row["value"]), int(row["version"])
            if label in expected_versions and expected_versions[label] != version:
                raise ConflictError(
                    f"{report_id}/{label} was changed by another save since you opened it; reload and save again (nothing was saved)"
                )
            if old_value == value:
                changed["unchanged"] += 1
                continue
            if not q.update_reading(s, _reading_id(s, report_id, label, reader), value, version):
                raise ConflictError(
                    f"{report_id}/{label} was changed by another save just now; reload and save again (nothing was saved)"
                )
            q.add_audit(
                s,
                self.actor.user,
                "change",
                "reading",
                f"{report_id}/{label}/{reader}",
                {"value": old_value},
                {"value": value},
            )
            changed["changed"] += 1
        if new_rows:
            q.insert_readings(s, pd.DataFrame(new_rows))
            q.add_audit(
                s,
                self.actor.user,
                "add",
                "reading",
                f"{report_id}/{reader}",
                None,
                {r["label"]: r["value"] for r in new_rows},
            )
        return changed, existing

    def record_look(self, report_id: str) -> None:
        """The acting user has seen the reference, the labeller's answer or other readers' votes on a report
        (Disagreements): recorded once, in the audit, so that their own reading of it stays independent."""
        actor = self.current_actor()
        key = f"{report_id}/{actor.user}"
        with self.session() as s:
            if not q.list_audit(s, entity=LOOK, key=key, limit=1).empty:
                return
        with self.session(write=True) as s:
            q.add_audit(s, actor.user, "look", LOOK, key, None, {"seen": "reference, labeller answer, readers' votes"})

    def _refuse_after_look(self, s, reader: str, report_id: str, existing: pd.DataFrame, values: dict) -> None:
        """A change to a reading whose reader has since seen the reference or others' votes is refused: the
        reference is made of independent readings, and a reading changed after a look is no longer one."""
        changes = {
            lab: v for lab, v in values.items() if lab in existing.index and int(existing.loc[lab, "value"]) != v
        }
        if not changes:
            return
        look = q.list_audit(s, entity=LOOK, key=f"{report_id}/{reader}", limit=1)
        if look.empty:
            return
        raise UserError(
            f"your reading of {report_id} stays as saved: you have seen its reference, the labeller's answer and "
            f"the readers' votes (Disagreements, {str(look['at'].iloc[0])[:16].replace('T', ' ')} UTC), so a change "
            "now would not be independent. Write a note on Disagreements, or flag the item for adjudication, instead"
        )

    def _after_save(self, s, reader: str, report_id: str, changed: dict) -> None:
        """Adaptive progress follows a save that wrote something, in the save's own transaction."""
        if changed["added"] or changed["changed"]:
            self.adaptive.after_readings(s, [(report_id, reader)])

    def reader_progress(self, cohort: str | None = None) -> pd.DataFrame:
        """Per reader: reports read completely, partially, and the cohort size."""
        from workbench.services import memo

        cid = self.study.cohort_id(cohort) if cohort else None
        with self.session() as s:
            per = memo.reading_counts(self.engine, s)
            if cid is not None:
                per = per[per["report_id"].isin(q.report_ids(s, cid))]
            total = (
                int(q.list_cohorts(s).set_index("name")["reports"].get(cohort, 0))
                if cohort
                else len(q.report_hashes(s))
            )
        n_labels = len(self.vocab.asked_ids)
        out = per.groupby("reader").agg(
            reports_started=("report_id", "count"), reports_complete=("labels", lambda x: int((x >= n_labels).sum()))
        )
        out["reports_in_scope"] = total
        return out.reset_index()

    def my_readings(self, reader: str, report_id: str) -> pd.DataFrame:
        """A reader's own readings of one report (label, value, version); others' only with unblinded access."""
        if reader != self.current_actor().user:
            self.require("see_unblinded")
        with self.session() as s:
            return q.readings_frame(s, report_ids_=[report_id], reader=reader)[["label", "value", "version"]]

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

    def draft_reading(self, reader: str, report_id: str) -> DraftReading | None:
        """A reader's draft of one report in one read (ticks, kept note, kept attribute values), or None."""
        check_own_reading(self.ctx, reader)
        with self.session() as s:
            draft = q.get_reading_draft(s, reader, report_id)
        if draft is None:
            return None
        note, kept = draft.get(NOTE_IN_DRAFT), draft.get(ATTRIBUTES_IN_DRAFT)
        return DraftReading(
            ticks=_draft_ticks(draft),
            note=ReadingNote(note["comment"], bool(note["unsure"])) if note else None,
            attributes=None if kept is None else {lab: dict(values) for lab, values in kept.items()},
        )

    def reading_draft(self, reader: str, report_id: str) -> dict[str, int] | None:
        """A reader's unsaved ticks on one report (label -> 0/1), or None."""
        draft = self.draft_reading(reader, report_id)
        return None if draft is None else draft.ticks

    def reading_draft_attributes(self, reader: str, report_id: str) -> dict[str, dict[str, str]] | None:
        """The attribute values kept with a reader's draft (label -> {attribute: value}), or None when it keeps none."""
        draft = self.draft_reading(reader, report_id)
        return None if draft is None else draft.attributes

    def reading_draft_note(self, reader: str, report_id: str) -> ReadingNote | None:
        """The comment and unsure mark kept with a reader's draft, or None when it keeps none."""
        draft = self.draft_reading(reader, report_id)
        return None if draft is None else draft.note

    def save_reading_draft(
        self,
        reader: str,
        report_id: str,
        values: dict,
        comment: str | None = None,
        unsure: bool | None = None,
        attributes: dict[str, dict[str, str | None]] | None = None,
    ) -> None:
        """Keep a reader's ticks (and, when given, comment and unsure mark, and the attribute values of the ticked
        findings) server-side the moment they change (not a reading until submitted)."""
        check_own_reading(self.ctx, reader)
        values = self._check_values(values)
        note = _checked_note(comment, unsure)
        kept = None if attributes is None else self._draft_attributes(values, attributes)
        if note is not False:
            values = {**values, NOTE_IN_DRAFT: note or {"comment": "", "unsure": False}}
        if kept is not None:
            values = {**values, ATTRIBUTES_IN_DRAFT: kept}
        with self.session(write=True) as s:
            if q.get_report(s, report_id) is None:
                raise StudyError(f"no report {report_id!r}")
            q.put_reading_draft(s, reader, report_id, values)

    def _draft_attributes(
        self, ticks: dict[str, int], attributes: dict[str, dict[str, str | None]]
    ) -> dict[str, dict[str, str]]:
        """Attribute values for a draft, checked as a saved reading's are: a known attribute and value of a label
        the draft ticks (a clear error otherwise); empty values dropped."""
        kept: dict[str, dict[str, str]] = {}
        for label, picked in attributes.items():
            if not ticks.get(label):
                raise StudyError(f"attributes of {label!r} in a draft that does not tick it: tick it first")
            for name, value in picked.items():
                value = None if value in (None, "") else str(value).strip().lower()
                try:
                    self.vocab.check_attribute(label, name, value)
                except VocabularyError as exc:
                    raise StudyError(str(exc)) from exc
                if value is not None:
                    kept.setdefault(label, {})[name] = value
        return kept

    def claim_press(self, page: str, form: str, seq: int) -> PressClaim:
        """Claim one keyboard press (a browser page's form and its sequence number) before applying it: a resend
        of a press already claimed (a reconnect, another script thread or server process) is answered, not
        applied again. Presses older than a day are forgotten here."""
        with self.session(write=True) as s:  # the database's clock: server processes on other machines compare it
            at = q.db_stamp(s)
            q.prune_presses(s, q.db_stamp(s, -PRESS_KEPT_S))
            earlier = q.claim_press(s, page, form, seq, self.ctx.actor.user, at)
        if earlier is None:
            return PressClaim("new")
        if earlier.done:
            return PressClaim("done", earlier.error or None)
        return PressClaim("pending", None, _seconds_between(earlier.at, at))

    def finish_press(self, page: str, form: str, seq: int, error: str | None) -> None:
        """Record the answer to a press claimed with claim_press (None: applied)."""
        with self.session(write=True) as s:
            q.finish_press(s, page, form, seq, error or "")

    def reading_draft_ids(self, reader: str) -> list[str]:
        """Reports on which this reader has unsaved ticks."""
        check_own_reading(self.ctx, reader)
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
    ) -> SavedReading:
        """Save a report's reading (every asked label: unticked = 0) with the reader's comment and unsure mark,
        drop its draft and log the save for undo, in one transaction (comment/unsure None: left as they are)."""
        check_own_reading(self.ctx, reader)
        values = self._check_values(values)
        note = _checked_note(comment, unsure)
        full = {lab: values.get(lab, 0) for lab in self.vocab.asked_ids}
        self._check_writer(reader, full)
        with self._first_save_guard(reader, report_id), self.session(write=True) as s:
            changed, existing = self._write_readings(s, reader, report_id, full, expected_versions or {})
            self._log_save(s, reader, report_id, full, existing, note)
            self._after_save(s, reader, report_id, changed)
        return SavedReading(**changed)

    def _log_save(self, s, reader: str, report_id: str, full: dict, existing: pd.DataFrame, note) -> None:
        """The note, the undo log and the dropped draft of a submitted reading, inside its own transaction."""
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

    def reading_note(self, reader: str, report_id: str) -> ReadingNote | None:
        """A reader's own comment and unsure mark on one report ({comment, unsure}), or None."""
        check_own_reading(self.ctx, reader)
        with self.session() as s:
            note = q.get_reading_note(s, reader, report_id)
        return None if note is None else ReadingNote(note["comment"], bool(note["unsure"]))

    def reading_notes(self, cohort: str | None = None, reader: str | None = None) -> pd.DataFrame:
        """Readers' comments and unsure marks (report_id, reader, comment, unsure, updated_at): others' only unblinded."""
        if reader is None or reader != self.current_actor().user:
            self.require("see_unblinded")
        with self.session() as s:
            ids = q.report_ids(s, self.study.cohort_id(cohort)) if cohort else None
            return q.reading_notes_frame(s, ids, reader=reader).reset_index(drop=True)

    def undo_last_save(self, reader: str) -> UndoneSave:
        """Undo a reader's last save in one transaction: the values before it come back (a new reading goes,
        its draft returns), and the audit records the undo; refused when nothing is left to undo or the
        reading was changed since. Returns what it did (UndoneSave)."""
        check_own_reading(self.ctx, reader)
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
                reading_id = _reading_id(s, save.report_id, lab, reader)
                if value is None:
                    removed += q.delete_reading(s, reading_id, after[lab])
                elif int(now_.loc[lab, "value"]) != value:
                    restored += q.update_reading(s, reading_id, value, after[lab])
            current = {lab: int(now_.loc[lab, "value"]) for lab in after}
            q.add_audit(s, self.actor.user, "undo", "reading", f"{save.report_id}/{reader}", current, before)
            note_before = json.loads(save.note_before_json)
            undone_note = q.get_reading_note(s, reader, save.report_id)  # the note as the save left it
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
            if draft is not None:  # with the comment and unsure mark saved at Enter: the whole reading comes back
                draft = {**draft, NOTE_IN_DRAFT: undone_note or {"comment": "", "unsure": False}}
                q.put_reading_draft(s, reader, save.report_id, draft)
            s.flush()
            versions = q.readings_frame(s, report_ids_=[save.report_id], reader=reader).set_index("label")["version"]
            q.restamp_last_reading_save(s, reader, save.report_id, {lab: int(v) for lab, v in versions.items()})
            self.adaptive.after_readings(s, [(save.report_id, reader)])
        return UndoneSave(save.report_id, restored, removed)

    def last_saved_report(self, reader: str) -> str | None:
        """The report of a reader's last save that undo would take back, or None."""
        check_own_reading(self.ctx, reader)
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
            ticked[rid] = [lab for lab, v in _draft_ticks(values or {}).items() if v]
        out = pd.DataFrame(
            {
                "report_id": work["report_id"],
                "state": work["state"].map({COMPLETED: "saved", DRAFT: "draft"}).fillna("partly saved"),
                "ticked": [", ".join(names.get(lab, lab) for lab in ticked.get(rid, [])) for rid in work["report_id"]],
                "unsure": work["report_id"].isin(notes.index[notes["unsure"].astype(bool)]),
                "comment": work["report_id"].map(notes["comment"]).astype(object).fillna(""),
                "saved_at": work["saved_at"],
            }
        )
        return out.reset_index(drop=True)

    def _report_words(self, s, report_id: str) -> str:
        """A report's text in lower case, for search."""
        report = q.get_report(s, report_id)
        if report is None:  # an id from a frame of this study's reports: only a report removed meanwhile
            return ""
        return compose_text(report.findings, report.impression, report.text, self.config.sections).lower()

    # ------------------------------------------------------------ readers' attribute values

    def reader_attributes(self, reader: str, report_id: str) -> dict[str, dict[str, str]]:
        """One reader's stored attribute values of one report: label -> {attribute: value}."""
        with self.session() as s:
            rows = q.reading_attributes_frame(s, report_id=report_id, reader=reader)
        out: dict[str, dict[str, str]] = {}
        for lab, name, value in zip(rows["label"], rows["attribute"], rows["value"], strict=False):
            out.setdefault(lab, {})[name] = value
        return out

    def record_reading_attributes(self, reader: str, report_id: str, label: str, values: dict[str, str | None]) -> int:
        """Set one reader's attributes of a label they ticked (None or "" clears one); returns how many are kept."""
        self.require("annotate")
        actor = self.current_actor()
        if reader != actor.user and (actor.account or actor.role != "admin"):
            raise PermissionDenied(f"{actor.user} may only record their own attributes, not {reader!r}'s")
        kept = {k: str(v).strip().lower() for k, v in values.items() if v not in (None, "")}
        try:
            for name in values:
                self.vocab.check_attribute(label, name, kept.get(name))
        except VocabularyError as exc:
            raise StudyError(str(exc)) from exc
        with self.session(write=True) as s:
            reading = q.get_reading(s, report_id, label, reader)
            if reading is None or reading.value != 1:
                raise StudyError(
                    f"{reader} has not ticked {label!r} on report {report_id!r}: tick it first, then set its attributes"
                )
            old = q.reading_attributes_frame(s)
            old = old[(old["report_id"] == report_id) & (old["label"] == label) & (old["reader"] == reader)]
            q.delete_reading_attributes(s, report_id, label, reader)
            frame = pd.DataFrame(
                [(report_id, label, reader, k, v) for k, v in kept.items()], columns=q.READING_ATTRIBUTE_COLUMNS
            )
            q.put_reading_attributes(s, frame)
            q.add_audit(
                s,
                actor.user,
                "set",
                "reading attributes",
                f"{report_id}/{label}/{reader}",
                dict(zip(old["attribute"], old["value"], strict=False)) or None,
                kept or None,
            )
        return len(kept)

    # ------------------------------------------------------------ reading room: work lists

    def assign_work(self, cohort: str, readers: list[str], overlap: int) -> WorkAssigned:
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
            existing = q.assignments_frame(s, q.stored_id(cohort_row))
            have = existing.groupby("report_id")["reader"].apply(set).to_dict()
            load = {r: int((existing["reader"] == r).sum()) for r in readers}
            new: list[tuple[str, str]] = []
            for report_id in q.report_ids(s, q.stored_id(cohort_row)):
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
            q.add_assignments(s, q.stored_id(cohort_row), new, self.actor.user)
            q.put_work_list(s, q.stored_id(cohort_row), overlap, self.actor.user)
            q.add_audit(
                s,
                self.actor.user,
                "assign",
                "work_list",
                cohort,
                None,
                {"readers": readers, "overlap": overlap, "added": len(new)},
            )
        return WorkAssigned(len(new), load)

    def work_list_status(self, cohort: str) -> pd.DataFrame:
        """Per reader with a work list on the cohort: reports assigned and completed; empty without work lists."""
        with self.session() as s:
            cohort_row = q.get_cohort(s, cohort)
            if cohort_row is None:
                raise StudyError(f"no cohort {cohort!r}")
            settings = q.get_work_list(s, q.stored_id(cohort_row))
            if settings is None:
                return pd.DataFrame(columns=["reader", "assigned", "completed", "overlap"])
            assigned = q.assignments_frame(s, q.stored_id(cohort_row))
            counts = q.reading_counts(s, cohort_id=q.stored_id(cohort_row))
        done = counts[counts["labels"] >= len(self.vocab.asked_ids)][["reader", "report_id"]]
        merged = assigned.merge(done.assign(completed=1), on=["reader", "report_id"], how="left")
        out = (
            merged.groupby("reader").agg(assigned=("report_id", "count"), completed=("completed", "sum")).reset_index()
        )
        out["completed"] = out["completed"].fillna(0).astype(int)
        out["overlap"] = settings.overlap
        return out
