"""Adaptive reading: readers' work lists stop offering a report once its reference cannot change.

The setting lives in workbench.yaml (`adaptive:`), is changed by admins (Settings page or
`workbench adaptive`) and audited like every setting. Per report the study keeps where reading
stands (open, readers, cap) in `reportprogress`, refreshed in the same transaction as every saved
or imported reading and rebuilt whole when the rule or the escalation setting changes; readers are
given reports through claims (`readingclaim`), one reader at a time outside the agreement sample,
so two readers asking at once never both get the read that would decide a report. What a reader
sees depends on other readers' values only through a report leaving their list (core/adaptive.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from workbench.core import adaptive as core
from workbench.core import reference as ref
from workbench.core.splits import stratified_split
from workbench.services.base import Service, StudyContext
from workbench.services.reading import check_own_reading
from workbench.services.results import AdaptiveStatus, AgreementSample
from workbench.store import queries as q
from workbench.study import StudyError

if TYPE_CHECKING:  # collaborators' types, for readers and type checkers only
    from workbench.services.study import StudyService

CLAIM_TTL_S = 30 * 60  # a report given to a reader is theirs this long; after it, it may go to someone else
COMPLETED, DRAFT, UNREAD = "completed", "draft", "unread"


def _signature(wb, session, cohort_id: int, reports: int | None = None) -> str:
    """What a cohort's progress rows depend on besides the readings: rule, escalation, asked labels, and
    how many reports it has (reports imported later need rows too; `reports` when already counted)."""
    settings = wb.adaptive_settings()
    if reports is None:
        reports = q.count_cohort_reports(session, cohort_id)
    return json.dumps(
        {
            "rule": wb.config.reference,
            "extra_reader": settings.extra_reader,
            "labels": list(wb.vocab.asked_ids),
            "reports": reports,
            "sample": [settings.agreement_share, settings.seed],
        },
        sort_keys=True,
    )


def _progress_key(cohort_id: int) -> str:
    return f"adaptive_progress:{cohort_id}"


def _status_frame(wb, session, cohort_id: int, report_ids: list[str], counts: pd.DataFrame) -> pd.DataFrame:
    """core.report_status for some reports of a cohort."""
    settings = wb.adaptive_settings()
    sample = q.agreement_sample_ids(session, cohort_id, report_ids if len(report_ids) <= 500 else None)
    return core.report_status(
        counts, wb.rule(), list(wb.vocab.asked_ids), sample, settings.extra_reader, report_ids=report_ids
    )


def _sample_info(session, cohort_id: int) -> dict | None:
    """The drawn agreement sample's record (reports, of, share, seed, run), None before it is drawn."""
    info = q.get_meta(session, f"adaptive_sample:{cohort_id}")
    return json.loads(info) if info else None


def _sample_differs(info: dict, settings: core.AdaptiveSettings) -> bool:
    """Whether the settings ask for another share or seed than the sample was drawn with."""
    return (float(info["share"]), int(info["seed"])) != (float(settings.agreement_share), int(settings.seed))


def after_readings(wb, session, pairs: list[tuple[str, str]]) -> None:
    """Keep adaptive progress in step with readings just written (same transaction): their reports'
    rows and the readers' claims, for cohorts whose progress is kept under the current settings."""
    if not pairs:
        return
    reports = list(dict.fromkeys(r for r, _ in pairs))
    cohorts = q.report_cohorts(session, reports)
    for cohort_id in sorted(set(cohorts.values())):
        if q.get_meta(session, _progress_key(cohort_id)) != _signature(wb, session, cohort_id):
            continue  # not kept (adaptive reading never served it) or stale: the next request rebuilds it
        q.lock_adaptive(session, cohort_id)
        mine = [r for r in reports if cohorts[r] == cohort_id]
        counts = q.vote_counts_of(session, mine)
        q.put_report_progress(session, cohort_id, _status_frame(wb, session, cohort_id, mine, counts))
        q.put_claims(session, cohort_id, [(r, d) for r, d in pairs if cohorts.get(r) == cohort_id], done=True)


class AdaptiveService(Service):
    """The adaptive-reading setting, the agreement sample, next report, work lists and progress figures."""

    def __init__(self, ctx: StudyContext, study: StudyService) -> None:
        super().__init__(ctx)
        self.study = study

    # ------------------------------------------------------------ the setting

    def set_adaptive(self, **changes) -> core.AdaptiveSettings:
        """Change adaptive reading (admins only; an audit event like every setting): enabled, agreement_share,
        seed, extra_reader, order."""
        self.require("settings")
        try:
            settings = core.AdaptiveSettings.from_config({**self.adaptive_settings().to_config(), **changes})
        except (TypeError, ValueError) as exc:
            raise StudyError(f"adaptive reading: {exc}") from exc
        self.check_sample_change(settings)
        self.config.adaptive = settings.to_config()
        self.study.save_config("change", "settings", "adaptive")
        return settings

    def check_sample_change(self, settings: core.AdaptiveSettings | None = None) -> None:
        """Refuse a new agreement-sample share or seed once a cohort's drawn sample has readings (redrawing it
        would break the full overlap already given); an unread sample is simply drawn again."""
        settings = settings or self.adaptive_settings()
        with self.session() as s:
            cohorts = q.list_cohorts(s)
            for cohort_id, name in zip(cohorts["id"], cohorts["name"], strict=False):
                info = _sample_info(s, cohort_id)
                if info is None or not _sample_differs(info, settings) or not q.count_sample_readings(s, cohort_id):
                    continue
                raise StudyError(
                    f"adaptive reading: the agreement sample of cohort {name!r} (share {info['share']:.0%}, seed "
                    f"{info['seed']}) already has readings, and a new share or seed would break its full overlap: "
                    f"keep share {info['share']:.0%}, seed {info['seed']} (a new cohort gets a new sample)"
                )

    def after_readings(self, session, pairs: list[tuple[str, str]]) -> None:
        """Keep adaptive progress in step with (report, reader) readings just written in `session` (after_readings)."""
        after_readings(self, session, pairs)

    # ------------------------------------------------------------ sample and progress

    def _adaptive_sync(self, s, cohort_id: int, facts: dict | None = None) -> None:
        """Draw the cohort's agreement sample when it has none, and (re)build its progress rows when stale
        (facts: q.adaptive_facts read in this transaction, which saves the hot path three queries)."""
        facts = facts or q.adaptive_facts(s, cohort_id, "")
        drawn = json.loads(facts["sample"]) if facts["sample"] else None
        if (
            drawn is not None
            and _sample_differs(drawn, self.adaptive_settings())
            and not q.count_sample_readings(s, cohort_id)
        ):
            q.delete_agreement_sample(s, cohort_id)  # nobody has read it yet: draw it again with the new share or seed
            drawn = None
        if drawn is None:
            self._draw_sample(s, cohort_id)
        signature = _signature(self, s, cohort_id, facts["reports"])
        if facts["progress"] == signature:
            return
        ids = q.report_ids(s, cohort_id)
        counts = q.vote_counts(s, cohort_id=cohort_id)
        q.put_report_progress(s, cohort_id, _status_frame(self, s, cohort_id, ids, counts), replace=True)
        q.put_claims(s, cohort_id, q.reader_pairs(s, cohort_id), done=True)
        q.set_meta(s, _progress_key(cohort_id), signature)

    def _draw_sample(self, s, cohort_id: int) -> None:
        """The agreement sample: a share of the cohort, stratified by the latest finished run's predictions
        (core/splits.py), reproducible by seed; recorded with the run it used and in the audit trail."""
        settings = self.adaptive_settings()
        ids = q.report_ids(s, cohort_id)
        runs = q.list_runs(s, cohort_id)
        finished = runs[runs["status"] == "finished"]
        run_id = int(finished["id"].max()) if len(finished) else None
        matrix = pd.DataFrame(index=pd.Index(ids, name="report_id"))
        if run_id is not None:
            preds = q.predictions_frame(s, run_id)
            matrix = preds.pivot_table(index="report_id", columns="label", values="value", aggfunc="first").reindex(ids)
        share = settings.agreement_share
        if share <= 0 or not ids:
            chosen = []
        elif share >= 1:
            chosen = ids
        else:
            parts = stratified_split(matrix, share, seed=settings.seed)
            chosen = [r for r in ids if parts[r] == "validation"]
        q.put_agreement_sample(s, cohort_id, chosen, settings.seed, share, run_id, self.actor.user)
        info = {"reports": len(chosen), "of": len(ids), "share": share, "seed": settings.seed, "run": run_id}
        q.set_meta(s, f"adaptive_sample:{cohort_id}", json.dumps(info, sort_keys=True))
        q.add_audit(s, self.actor.user, "draw", "agreement_sample", str(cohort_id), None, info)

    def agreement_sample(self, cohort: str) -> AgreementSample:
        """The cohort's agreement sample: reports, of, share, seed, run (None before it is drawn)."""
        cohort_id = self.study.cohort_id(cohort)
        with self.session() as s:
            info = q.get_meta(s, f"adaptive_sample:{cohort_id}")
        return AgreementSample(**json.loads(info)) if info else AgreementSample()

    def agreement_scope(self, cohort: str | None = None) -> str:
        """What agreement figures are computed on: under adaptive reading the agreement sample (n, share); else ''."""
        return agreement_scope_text(self, cohort)

    def agreement_sample_reports(self, cohort: str) -> list[str]:
        """The report ids of a cohort's agreement sample (membership says nothing about any value)."""
        cohort_id = self.study.cohort_id(cohort)
        with self.session() as s:
            return sorted(q.agreement_sample_ids(s, cohort_id))

    # ------------------------------------------------------------ next report and work lists

    def _candidates(self, s, cohort_id: int, reader: str) -> pd.DataFrame:
        """The cohort's reports as this reader's candidates, limited to their assignments when it has work lists."""
        frame = q.adaptive_candidates(s, cohort_id, reader, q.db_stamp(s))
        if q.get_work_list(s, cohort_id) is not None:
            mine = set(q.assignments_frame(s, cohort_id, reader=reader)["report_id"])
            frame = frame[frame["report_id"].isin(mine)]
        return frame

    def _pick(self, frame: pd.DataFrame, stamp: str) -> str | None:
        """The reader's own live claim on an open report, else the first offered report in reading order."""
        mine = frame["mine"].to_numpy() & ~frame["done"].to_numpy()
        if mine.any():  # rare: a report given to them and not saved yet
            own = frame[mine & frame["open"].to_numpy()]
            own = own[
                ((own["expires_at"] > stamp) | (own["in_flight"] == 0))
                & (own["readers"] + own["in_flight"] < own["cap"])
            ]
            if len(own):
                return str(own.sort_values("seq")["report_id"].iloc[0])
        ordered = core.reading_order(core.offered(frame), self.adaptive_settings().order)
        return str(ordered["report_id"].iloc[0]) if len(ordered) else None

    def next_report(self, reader: str, cohort: str) -> str | None:
        """The report this reader should read next, given to them (claimed) in one transaction; None when
        their list is done. Without adaptive reading: their first report not saved yet."""
        check_own_reading(self.ctx, reader)
        if not self.adaptive_settings().enabled:
            work = self._full_work_list(reader, cohort, drafts=False)
            pending = work.loc[work["state"] != COMPLETED, "report_id"]
            return str(pending.iloc[0]) if len(pending) else None
        return self._claim(reader, cohort, None)

    def open_report(self, reader: str, cohort: str, report_id: str) -> bool:
        """Claim a report the reader opened themselves (the Annotate page's arrows, a link) as next_report claims
        the one it gives, so that while they hold it nobody else is given it outside the agreement sample. False
        when it is not theirs to take: read by them, no longer needed, held by another reader, or adaptive
        reading off."""
        check_own_reading(self.ctx, reader)
        if not self.adaptive_settings().enabled:
            return False
        return self._claim(reader, cohort, report_id) == report_id

    def _claim(self, reader: str, cohort: str, report_id: str | None) -> str | None:
        """Give the reader a report in one transaction: their own live claim or the first offered one (report_id:
        that report only, when _pick's rules would give it)."""
        with self.session(write=True) as s:
            cohort_id = self._cohort_in(s, cohort)
            q.lock_adaptive(s, cohort_id)
            facts = q.adaptive_facts(s, cohort_id, reader)  # after the lock: what the claim below relies on
            self._adaptive_sync(s, cohort_id, facts)
            stamp = q.db_stamp(s)  # claims live by the database's clock (readers' machines disagree)
            if not facts["work_list"]:  # _pick's rules, found by the database (the hot path)
                found = q.own_claim(s, cohort_id, reader, stamp, report_id) if facts["open_claim"] else None
                found = found or q.first_offered(s, cohort_id, reader, stamp, self.adaptive_settings().order, report_id)
            else:  # assignments: the same rules over the whole candidates frame
                frame = self._candidates(s, cohort_id, reader)
                if report_id is not None:
                    frame = frame[frame["report_id"] == report_id]
                found = self._pick(frame, stamp)
            if found is not None:
                q.put_claims(s, cohort_id, [(found, reader)], done=False, expires_at=q.db_stamp(s, CLAIM_TTL_S))
        return found

    def _cohort_in(self, s, cohort: str) -> int:
        """A cohort's id inside an open transaction (cohort_id() opens its own)."""
        cohort_id = q.cohort_id_named(s, cohort)
        if cohort_id is None:
            raise StudyError(f"no cohort {cohort!r}")
        return cohort_id

    def work_list(self, reader: str, cohort: str, drafts: bool = True) -> pd.DataFrame:
        """The reader's work list. With adaptive reading: their saved reports, then drafts and the report
        given to them, then the reports still offered in reading order (a report nobody needs any more is
        simply not offered); without it, as before."""
        if not self.adaptive_settings().enabled:
            return self._full_work_list(reader, cohort, drafts=drafts)
        check_own_reading(self.ctx, reader)
        cohort_id = self.study.cohort_id(cohort)
        with self.session(write=True) as s:
            self._adaptive_sync(s, cohort_id)
            frame = self._candidates(s, cohort_id, reader)
            counts = q.reader_report_counts(s, reader, cohort_id).set_index("report_id")
            draft_ids = set(q.reading_draft_ids(s, reader))
            stamp = q.db_stamp(s)
        labels = counts["labels"].reindex(frame["report_id"]).fillna(0).to_numpy()
        complete = labels >= len(self.vocab.asked_ids)
        started = (
            frame["report_id"].isin(draft_ids).to_numpy()
            | (frame["mine"] & ~frame["done"] & ((frame["expires_at"] > stamp) | frame["open"])).to_numpy()
        )
        started |= (labels > 0) & ~complete
        done_rows = frame[complete].assign(saved_at=lambda f: f["report_id"].map(counts["saved_at"]))
        done_rows = done_rows.sort_values(["saved_at", "seq"], kind="stable")
        going = frame[started & ~complete].sort_values("seq", kind="stable")
        offered = core.reading_order(core.offered(frame), self.adaptive_settings().order)
        ids = [
            *done_rows["report_id"],
            *going["report_id"],
            *[r for r in offered["report_id"] if r not in set(going["report_id"])],
        ]
        out = pd.DataFrame({"report_id": ids})
        out["labels_saved"] = out["report_id"].map(counts["labels"]).fillna(0).astype(int)
        out["saved_at"] = out["report_id"].map(counts["saved_at"])
        out["state"] = np.where(out["labels_saved"] >= len(self.vocab.asked_ids), COMPLETED, UNREAD)
        if drafts:
            out.loc[out["report_id"].isin(draft_ids), "state"] = DRAFT
        return out

    def reading_order_text(self) -> str:
        """The sentence the app shows above a reader's list."""
        settings = self.adaptive_settings()
        if not settings.enabled:
            return "Your list is in the cohort's order; every report is read by every reader on it."
        return (
            "Adaptive reading: a report leaves your list once its reference can no longer change. "
            f"Order: {core.ORDERS[settings.order]}. A report you open is kept for you for "
            f"{CLAIM_TTL_S // 60} minutes (nobody else is given it meanwhile); after that it may go to another reader."
        )

    # ------------------------------------------------------------ figures

    def adaptive_status(self, cohort: str) -> AdaptiveStatus:
        """Reads done, reads saved (and their share of a full panel), items decided, undecided and waiting;
        for a reader, over the reports they have finished reading only (blinded)."""
        cohort_id = self.study.cohort_id(cohort)
        settings = self.adaptive_settings()
        with self.session(write=settings.enabled) as s:
            if settings.enabled:
                self._adaptive_sync(s, cohort_id)
            progress = q.report_progress(s, cohort_id) if settings.enabled else None
            ids = q.report_ids(s, cohort_id)
            if progress is None:  # without adaptive reading no report leaves the lists: only reads done count
                per = q.reading_counts(s, cohort_id=cohort_id).groupby("report_id")["reader"].nunique()
                progress = pd.DataFrame(
                    {
                        "report_id": ids,
                        "open": True,
                        "tie": False,
                        "readers": per.reindex(ids).fillna(0).astype(int).to_numpy(),
                        "cap": core.panel_size(self.rule()),
                    }
                )
        scope = self.study.blind_scope()
        if scope is not None:
            progress = progress[progress["report_id"].isin(scope)]
            ids = [i for i in ids if i in scope]
        table = self.study.reference(cohort)
        final = table["status"].eq(ref.ADJUDICATED) | table["value"].notna() | table["reason"].eq("no decisive vote")
        reads = core.reads_summary(progress, core.panel_size(self.rule()), len(ids))
        n_items = len(ids) * len(self.vocab.asked_ids)
        decided = int((table["value"].notna()).sum())
        waiting = int((table["status"].eq(ref.WAITING) & final).sum()) + int(
            table["flagged"].sum() if "flagged" in table else 0
        )
        return AdaptiveStatus(
            enabled=settings.enabled,
            **reads,
            reports=len(ids),
            reports_open=int(progress["open"].sum()),
            items=n_items,
            decided=decided,
            waiting=waiting,
            undecided=max(n_items - decided - waiting, 0),
        )

    def _full_work_list(self, reader: str, cohort: str, drafts: bool = True) -> pd.DataFrame:
        """The reader's reports in a stable order: their assigned ones (when the cohort has work lists)
        or every report, with state completed / draft / unread, labels saved and when."""
        check_own_reading(self.ctx, reader)
        with self.session() as s:
            cohort_row = q.get_cohort(s, cohort)
            if cohort_row is None:
                raise StudyError(f"no cohort {cohort!r}")
            cid = q.stored_id(cohort_row)
            if q.get_work_list(s, cid) is not None:
                ids = q.assignments_frame(s, cid, reader=reader)["report_id"].tolist()
            else:
                ids = q.report_ids(s, cid)
            counts = q.reader_report_counts(s, reader, cid).set_index("report_id")
            draft_ids = set(q.reading_draft_ids(s, reader)) if drafts else set()
        out = pd.DataFrame({"report_id": ids})
        out["labels_saved"] = out["report_id"].map(counts["labels"]).fillna(0).astype(int)
        out["saved_at"] = out["report_id"].map(counts["saved_at"])
        complete = out["labels_saved"] >= len(self.vocab.asked_ids)
        out["state"] = np.where(complete, COMPLETED, UNREAD)
        out.loc[out["report_id"].isin(draft_ids), "state"] = DRAFT
        return out


def agreement_readings(wb, readings: pd.DataFrame) -> pd.DataFrame:
    """With adaptive reading on, only the readings of agreement-sample reports (full overlap): Fleiss kappa,
    the human ceiling and reader-vs-reader figures need every reader on every item they count."""
    if not wb.adaptive_settings().enabled:
        return readings
    with wb.session() as s:
        ids = q.agreement_sample_ids(s)
    return readings[readings["report_id"].isin(ids)]


def agreement_scope_text(wb, cohort: str | None = None) -> str:
    """What the agreement figures are computed on (empty without adaptive reading)."""
    if not wb.adaptive_settings().enabled:
        return ""
    with wb.session() as s:
        cohorts = q.list_cohorts(s)
        if cohort:
            cohorts = cohorts[cohorts["name"] == cohort]
        infos = [json.loads(v) for v in (q.get_meta(s, f"adaptive_sample:{c}") for c in cohorts["id"]) if v]
    n = sum(i["reports"] for i in infos)
    total = sum(i["of"] for i in infos)
    shares = ", ".join(sorted({f"{i['share']:.0%}" for i in infos})) or "not drawn yet"
    return (
        f"adaptive reading is on: computed on the agreement sample only (full overlap), n = {n} reports "
        f"of {total} (sample share {shares})"
    )
