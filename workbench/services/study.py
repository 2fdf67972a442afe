"""Study use-cases: opening a study, imports, readings, the reference, adjudication, agreement.

A Workbench is opened on a study folder (app-factory style: tests build one per temporary
study). Methods combine pure core logic with storage, the prompt repo and the labeller; each
write is one transaction, so a rejected import or a failed save leaves nothing half-written.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from workbench import importers
from workbench.core import reference as ref
from workbench.core.names import HIDDEN, check_cohort_name, first_hidden, unknown_message
from workbench.core.prompts import TASK_FILE, PromptSet, parse_prompt_set
from workbench.core.text import compose_text, text_hash  # noqa: F401  (re-exported for callers)
from workbench.core.vocab import Vocabulary
from workbench.core.yaml_text import load_yaml
from workbench.errors import UserError, WorkbenchError
from workbench.services import memo
from workbench.services.base import Service, StudyContext
from workbench.services.results import Agreement, ItemReference
from workbench.store import db, prompt_repo
from workbench.store import queries as q
from workbench.study import (
    PROMPTS_DIR,
    VOCAB_FILE,
    StudyConfig,
    StudyError,
    StudyPaths,
    UnknownName,
    find_vocabulary_file,
    load_vocabulary_file,
    permission_warnings,
    refuse_password_in_url,
    save_config,
)

ROLES = ("reader", "adjudicator", "prompt_engineer", "admin")


class PermissionDenied(WorkbenchError, PermissionError):
    """The signed-in user's role does not allow this action."""


class ConflictError(WorkbenchError, RuntimeError):
    """Someone else changed the same thing first; the message says what to redo."""


class ReasonContradicts(StudyError):
    """An adjudication's reason names the other value; saved only when the adjudicator confirms it."""


@dataclass(frozen=True)
class Actor:
    """Who is acting: a user id and role (local single-user mode: 'local' as admin)."""

    user: str = "local"
    role: str = "admin"
    name: str = ""
    email: str = ""
    # True for a signed-in account: its role is re-read from the database on every guarded call
    account: bool = field(default=False, compare=False)
    # the browser session it acts in (its token's digest; "" outside a browser): checked on every guarded call,
    # so a sign-out in one tab stops every other tab and browser using that session at its next action
    session: str = field(default="", compare=False, repr=False)

    def identity(self) -> tuple[str, str]:
        """(name, email) for Git commits."""
        return (self.name or self.user, self.email or f"{self.user}@workbench.local")


# what each role may do; admin may do everything
PERMISSIONS = {
    "read": {"reader", "adjudicator", "prompt_engineer", "admin"},
    "annotate": {"reader", "adjudicator", "admin"},
    "adjudicate": {"adjudicator", "admin"},
    "note": {"reader", "adjudicator", "prompt_engineer", "admin"},
    "see_unblinded": {"adjudicator", "prompt_engineer", "admin"},
    "edit_prompts": {"prompt_engineer", "admin"},
    "run": {"prompt_engineer", "admin"},
    "import": {"admin", "prompt_engineer"},
    "freeze": {"admin"},
    "manage_users": {"admin"},
    "settings": {"admin"},
}


@dataclass
class ImportSummary:
    """What an import did, for the CLI and the app to print."""

    source: str
    added: int = 0
    unchanged: int = 0
    details: dict = field(default_factory=dict)

    def message(self) -> str:
        """One line for a person."""
        if self.added == 0 and self.unchanged and not self.details.get("attribute values"):
            return f"{self.source}: nothing new; all {self.unchanged} rows were already imported"
        extra = "".join(f", {k}: {v}" for k, v in self.details.items())
        return f"{self.source}: added {self.added}, already present {self.unchanged}{extra}"


def init_study(
    root: Path,
    vocab: str = "ranscore-21",
    db_url: str | None = None,
    rule: dict | None = None,
    name: str | None = None,
    prompt_set: str | None = None,
):
    """Create a study folder: config, vocabulary copy, seeded prompt repo, database."""
    root = Path(root).resolve()
    if db_url:
        refuse_password_in_url(db_url, "--db")
    if (root / "workbench.yaml").exists():
        raise StudyError(f"{root} is already a study (workbench.yaml exists)")
    vocab_path = find_vocabulary_file(vocab)
    vocabulary = load_vocabulary_file(vocab_path)
    seed_dir = (
        Path(prompt_set) if prompt_set and Path(prompt_set).is_dir() else PROMPTS_DIR / (prompt_set or vocabulary.id)
    )
    if seed_dir.is_dir():
        seed_files = {p.name: p.read_text(encoding="utf-8") for p in sorted(seed_dir.glob("*.yaml"))}
    elif prompt_set is None:  # an own vocabulary (an adopted label set): starters from definitions and look-for
        seed_files = _starter_prompts(vocabulary)
    else:
        raise StudyError(f"no starter prompt set {seed_dir.name!r} in {PROMPTS_DIR}; pass --prompts NAME")
    validate_prompt_files(seed_files, vocabulary)
    if not root.exists():
        root.mkdir(parents=True, mode=0o700)
        root.chmod(0o700)  # whatever the umask: the folder holds the database and the reports' text
    shutil.copyfile(vocab_path, root / VOCAB_FILE)
    cfg = StudyConfig(name=name or root.name)
    if db_url:
        cfg.database = db_url
    if rule:
        cfg.reference = rule
    save_config(root, cfg)
    paths = StudyPaths(root)
    prompt_repo.init_repo(paths.prompts, seed_files, f"Seed prompt set {seed_dir.name} (starter, iteration 1)")
    from workbench.services import Workbench

    wb = Workbench(root)
    wb.migrate()
    return wb


def _starter_prompts(vocab: Vocabulary) -> dict[str, str]:
    """A starter prompt per asked label, written from its definition and look-for phrases, with the shipped
    task file (its cue lists and attribute cues are not specific to any vocabulary)."""
    from workbench.core.labelset import starter_prompt, trim_attribute_cues

    task = load_yaml((PROMPTS_DIR / "chexpert-14" / TASK_FILE).read_text(encoding="utf-8"))
    carried = {a for lab in vocab.labels for a in lab.attributes}
    files = {TASK_FILE: yaml.safe_dump(trim_attribute_cues(task, carried), sort_keys=False, allow_unicode=True)}
    for lab in vocab.labels:
        if not lab.derived:
            data = {"id": lab.id, "name": lab.name, "definition": lab.definition, "look_for": list(lab.look_for)}
            files[f"{lab.id}.yaml"] = yaml.safe_dump(starter_prompt(data), sort_keys=False, allow_unicode=True)
    return files


def validate_prompt_files(files: dict[str, str], vocab: Vocabulary) -> PromptSet:
    """Parse prompt YAML texts into a PromptSet (errors name file and key)."""
    parsed = {}
    for name, text in files.items():
        try:
            parsed[name] = load_yaml(text)
        except yaml.YAMLError as exc:
            raise StudyError(f"{name}: not valid YAML ({exc})") from exc
    return parse_prompt_set(parsed, vocab.asked_ids, vocab.derived_ids, attributes=vocab.attribute_specs())


class StudyService(Service):
    """A study opened for use; the CLI, the app and the tests all go through it."""

    def __init__(self, ctx: StudyContext) -> None:
        super().__init__(ctx)

    # ------------------------------------------------------------ plumbing

    def permission_warnings(self) -> list[str]:
        """What lets other users of this machine read the study's folder or database (said, never changed)."""
        return permission_warnings(self.root, db.sqlite_file(self.url))

    def migrate(self) -> list[str]:
        """Bring the database schema up to date; a workbench.yaml edited by hand is recorded in the audit trail."""
        applied = db.migrate(self.engine)
        self._record_settings_drift()
        return applied

    def _settings_snapshot(self) -> dict:
        """The study settings as audited (the database URL has its own event: `migrate-db`)."""
        data = self.config.to_dict()
        data.pop("database", None)
        return data

    def _record_settings_drift(self) -> None:
        """Settings changed outside the workbench (workbench.yaml edited): one audit event naming the keys."""
        try:
            self._record_settings_drift_now()
        except Exception as exc:
            if not db.is_read_only_error(exc):
                raise
            # a read-only database cannot record it now: the next writable open does (reads go on)

    def _record_settings_drift_now(self) -> None:
        """The transaction of _record_settings_drift."""
        snapshot = self._settings_snapshot()
        with self.session() as s:
            stored = q.get_meta(s, "settings")
            old = json.loads(stored) if stored else None
            if old == snapshot:
                return
            if old is not None:
                changed = sorted(k for k in snapshot if old.get(k) != snapshot[k])
                q.add_audit(
                    s,
                    "(workbench.yaml edited outside the workbench)",
                    "change",
                    "settings",
                    ",".join(changed),
                    {k: old.get(k) for k in changed},
                    {k: snapshot[k] for k in changed},
                )
            q.set_meta(s, "settings", json.dumps(snapshot, sort_keys=True, default=str))

    # ------------------------------------------------------------ blinding (every read that reveals votes,
    # the reference or the labeller's output goes through these: the CLI, the app and scripts alike)

    def blind_scope(self) -> set[str] | None:
        """None when the actor may see everything; for a reader, the reports they have finished reading."""
        actor = self.current_actor()
        if actor.role != "reader":
            return None
        return self._completed_reports(actor.user)

    def blind_rows(self, frame: pd.DataFrame, column: str = "report_id") -> pd.DataFrame:
        """Only the rows of reports the actor may see (all of them unless a reader)."""
        scope = self.blind_scope()
        if scope is None:
            return frame
        return frame[frame[column].isin(scope)].reset_index(drop=True)

    def _require_seen(self, report_id: str) -> None:
        """Refuse a reader what concerns a report they have not finished reading."""
        scope = self.blind_scope()
        if scope is not None and report_id not in scope:
            raise PermissionDenied("submit your own reading of this report first (blinded until then)")

    def save_config(self, action: str = "change", entity: str = "settings", key: str | None = None) -> None:
        """Write the study settings; every change is an audit event (who, which keys, old -> new)."""
        self.require("settings")
        with self.session(write=True) as s:
            stored = q.get_meta(s, "settings")
            old = json.loads(stored) if stored else {}
            new = self._settings_snapshot()
            changed = sorted(k for k in new if old.get(k) != new[k])
            if changed:
                q.add_audit(
                    s,
                    self.actor.user,
                    action,
                    entity,
                    key or ",".join(changed),
                    {k: old.get(k) for k in changed},
                    {k: new[k] for k in changed},
                )
                q.set_meta(s, "settings", json.dumps(new, sort_keys=True, default=str))
            save_config(self.root, self.config)  # inside the transaction: a failed write records nothing

    def cohort_id(self, name: str) -> int:
        """A cohort's id; a clear error listing the cohorts (and the closest name) when it does not exist."""
        with self.session() as s:
            cohort = q.get_cohort(s, name)
            if cohort is None:
                names = q.list_cohorts(s)["name"].tolist()
                raise UnknownName(unknown_message("cohort", name, names, "" if names else "import reports first"))
            return q.stored_id(cohort)

    def label_id(self, label: str) -> str:
        """A label id or display name resolved to its id; an unknown one is refused, naming the closest labels."""
        found = self.vocab.resolve(label)
        if found is None:
            raise UnknownName(unknown_message("label", label, self.vocab.ids, word="unknown"))
        return found

    def cohorts(self) -> pd.DataFrame:
        """Cohorts with report counts."""
        with self.session() as s:
            return q.list_cohorts(s)

    # ------------------------------------------------------------ imports

    def import_reports(self, path: Path, cohort: str, language: str = "en") -> ImportSummary:
        """Import a reports file into a cohort; all or nothing, idempotent."""
        self.require("import")
        frame = importers.read_reports(path)
        return self._store_reports(frame, cohort, language, Path(path).name)

    def _store_reports(self, frame: pd.DataFrame, cohort: str, language: str, source: str) -> ImportSummary:
        """Write validated reports; identical re-imports add nothing, changed texts are refused."""
        frame = frame.copy()
        if "language" not in frame or (frame["language"] == "").all():
            frame["language"] = language
        frame["text_hash"] = [
            text_hash("\x1f".join(t)) for t in zip(frame["findings"], frame["impression"], frame["text"], strict=False)
        ]
        _refuse_hidden_ids(frame["report_id"], source)
        with self.session() as s:
            if q.get_cohort(s, cohort) is None:
                check_cohort_name(cohort)  # a new cohort; one that exists keeps the name it has
            cohort_row, _ = q.get_or_create_cohort(s, cohort, language)
            cohort_id = q.stored_id(cohort_row)
            existing = q.report_hashes(s)
            known = frame["report_id"].map(lambda r: existing.get(r))
            problems: list[importers.Problem] = []
            elsewhere: dict[int, list[str]] = {}  # cohort id -> ids of reports already in it
            for pos, (rid, hit, h) in enumerate(zip(frame["report_id"], known, frame["text_hash"], strict=False)):
                if hit is None:
                    continue
                if hit[1] != cohort_id:
                    elsewhere.setdefault(hit[1], []).append(rid)
                elif hit[0] != h:
                    problems.append(
                        importers.Problem(
                            pos + 2,
                            "id",
                            f"report {rid!r} is already imported with a different text; give the new text a new id",
                        )
                    )
            problems += _other_cohort_problems(s, elsewhere, cohort)
            if problems:
                raise importers.ImportProblems(source, problems)
            new = frame[known.isna()]
            start = q.max_report_seq(s, cohort_id) + 1
            added = q.insert_reports(s, cohort_id, new, start)
            if added:
                q.add_audit(s, self.actor.user, "import", "reports", cohort, None, {"file": source, "added": added})
        return ImportSummary(source, added=added, unchanged=len(frame) - added, details={"cohort": cohort})

    def import_openi(self, reports_path: Path, labels_path: Path, cohort: str) -> ImportSummary:
        """Import OpenI reports and its gold standard as the reader 'openi-gold'."""
        self.require("import")
        reports, readings = importers.read_openi(reports_path, labels_path)
        unknown = sorted(set(readings["label"]) - set(self.vocab.ids))
        if unknown:
            raise StudyError(
                f"the OpenI gold standard uses labels {unknown[:5]} that this study's vocabulary "
                f"({self.vocab.id}) lacks; create the study with --vocab chestxray14"
            )
        if "empty" in reports:
            reports = reports.drop(columns=["empty"])
        gold_attributes = importers.read_openi_attributes(reports_path, self.vocab)
        summary = self._store_reports(reports, cohort, "en", Path(reports_path).name)
        gold = self._store_readings(readings, Path(labels_path).name, kind="gold")
        summary.details["readings added"] = gold.added
        summary.details["readings already present"] = gold.unchanged
        summary.details["attribute values (MeSH)"] = self._store_reading_attributes(
            gold_attributes, Path(reports_path).name
        )
        return summary

    def import_readings(
        self, path: Path, fmt: str = "long", uncertain_as: str | None = None, blank_as: str = "skip"
    ) -> ImportSummary:
        """Import readings (long or wide format); all or nothing, idempotent."""
        self.require("import")
        with self.session() as s:
            known = set(q.report_hashes(s))
        if fmt == "long":
            frame = importers.read_readings_long(path, self.vocab, uncertain_as, known)
        elif fmt == "wide":
            frame = importers.read_readings_wide(path, self.vocab, uncertain_as, known, blank_as=blank_as)
        else:
            raise UserError(f"format must be 'long' or 'wide', got {fmt!r}")
        attributes = importers.read_reading_attributes(
            path, self.vocab, fmt, frame
        )  # refused before anything is written
        summary = self._store_readings(frame, Path(path).name)
        if not attributes.empty:
            summary.details["attribute values"] = self._store_reading_attributes(attributes, Path(path).name)
        return summary

    def _store_reading_attributes(self, frame: pd.DataFrame, source: str) -> int:
        """Write readers' attribute values (a re-import replaces a reader's value); returns how many were new
        or changed (the same file again writes nothing)."""
        if frame.empty:
            return 0
        keys = ["report_id", "label", "reader", "attribute"]
        with self.session(write=True) as s:
            old = q.reading_attributes_frame(s)
            merged = frame.merge(old, on=keys, how="left", suffixes=("", "_old"))
            changed = frame[(merged["value_old"] != merged["value"]).to_numpy()]
            if changed.empty:
                return 0
            stored = q.put_reading_attributes(s, changed)
            q.add_audit(s, self.actor.user, "import", "reading attributes", source, None, {"values": stored})
        return stored

    def _store_readings(self, frame: pd.DataFrame, source: str, kind: str = "human") -> ImportSummary:
        """Write validated readings; an existing different value is refused (use annotate to change)."""
        with self.session() as s:
            existing = q.readings_frame(s, report_ids_=None)
            merged = frame.merge(
                existing[["report_id", "label", "reader", "value"]],
                how="left",
                on=["report_id", "label", "reader"],
                suffixes=("", "_old"),
            )
            clash = merged["value_old"].notna() & (merged["value_old"] != merged["value"])
            if clash.any():
                rows = merged[clash]
                problems = [
                    importers.Problem(
                        int(r.row) if "row" in rows else None,
                        "value",
                        f"reader {r.reader!r} already gave {r.report_id!r}/{r.label!r} the value {int(r.value_old)}; "
                        "change a stored reading in the app (its history is kept), not by re-import",
                    )
                    for r in rows.itertuples(index=False)
                ]
                raise importers.ImportProblems(source, problems)
            new = merged[merged["value_old"].isna()]
            q.ensure_readers(s, new["reader"].unique(), kind=kind)
            added = q.insert_readings(s, new)
            if added:
                q.add_audit(s, self.actor.user, "import", "readings", source, None, {"added": added})
                from workbench.services.adaptive import after_readings

                after_readings(self, s, list(zip(new["report_id"], new["reader"], strict=False)))
        return ImportSummary(source, added=added, unchanged=len(frame) - added)

    # ------------------------------------------------------------ reference and adjudication

    @memo.per_request
    def reference(self, cohort: str | None = None, readings: pd.DataFrame | None = None) -> pd.DataFrame:
        """Per (report, label) of the asked labels: votes, value and status (decided/adjudicated/waiting)."""
        from workbench.services import memo

        cid = self.cohort_id(cohort) if cohort else None
        with self.session() as s:
            counts = memo.vote_counts(self.engine, s) if readings is None else pd.DataFrame()
            if readings is None and cid is not None:
                counts = counts[counts["report_id"].isin(q.report_ids(s, cid))]
            adj = q.adjudications_frame(s, cid)
            flags = q.flags_frame(s, cid)
        panel = self._adaptive_panel()
        if readings is not None:  # the readings given, not the stored vote counts
            readings = readings[readings["label"].isin(self.vocab.asked_ids)]
            return self.blind_rows(ref.compute_reference(readings, self.rule(), adj, flags, panel=panel))
        counts = counts[counts["label"].isin(self.vocab.asked_ids)]
        return self.blind_rows(ref.reference_from_counts(counts, self.rule(), adj, flags, panel=panel))

    def _adaptive_panel(self) -> int | None:
        """With adaptive reading on, the full panel whose vote an item read by fewer readers takes (else None)."""
        from workbench.core.adaptive import AdaptiveSettings, panel_size

        return panel_size(self.rule()) if AdaptiveSettings.from_config(self.config.adaptive).enabled else None

    def item_reference(self, report_id: str, label: str) -> ItemReference | None:
        """The reference of one (report, label): value (None while waiting), status, votes."""
        self._require_seen(report_id)
        with self.session() as s:
            counts = q.vote_counts(s, report_id=report_id)
            adj = q.adjudications_frame(s)
            flags = q.flags_frame(s)
        counts = counts[counts["label"] == label]
        if counts.empty:
            return None
        adj = adj[(adj["report_id"] == report_id) & (adj["label"] == label)]
        flags = flags[(flags["report_id"] == report_id) & (flags["label"] == label)]
        row = ref.reference_from_counts(counts, self.rule(), adj, flags, panel=self._adaptive_panel()).iloc[0]
        return ItemReference(
            value=None if pd.isna(row["value"]) else int(row["value"]),
            status=row["status"],
            positives=int(row["positives"]),
            n_readers=int(row["n_readers"]),
        )

    @memo.per_request
    def reference_matrix(self, cohort: str, reference: pd.DataFrame | None = None) -> pd.DataFrame:
        """Reports x labels reference values (NaN = waiting), derived labels included."""
        from workbench.core.vocab import derive_frame

        with self.session() as s:
            ids = q.report_ids(s, self.cohort_id(cohort))
        scope = self.blind_scope()
        if scope is not None:
            ids = [i for i in ids if i in scope]
        reference = self.reference(cohort) if reference is None else reference
        matrix = ref.reference_matrix(reference, ids, self.vocab.asked_ids)
        return derive_frame(self.vocab, matrix)[self.vocab.ids]

    def reference_summary(self, cohort: str | None = None) -> pd.DataFrame:
        """Per label: decided, adjudicated, waiting, positive."""
        return ref.status_summary(self.reference(cohort), self.vocab.asked_ids)

    def adjudication_queue(self, cohort: str | None = None) -> pd.DataFrame:
        """Items waiting for a senior reader: ties, too few readers, flagged ones."""
        table = self.reference(cohort)
        return table[table["status"] == ref.WAITING].reset_index(drop=True)

    def adjudicate(self, report_id: str, label: str, value: int, reason: str, confirmed: bool = False) -> None:
        """Set an item's reference value with a reason (history kept); a reason that says the other value
        ('absent' with 1) is refused unless confirmed."""
        self.require("adjudicate")
        if label not in self.vocab.asked_ids:
            raise StudyError(f"unknown or derived label {label!r}")
        if value not in (0, 1):
            raise StudyError(f"value must be 0 or 1, got {value!r}")
        if not reason.strip():
            raise StudyError("an adjudication needs a reason")
        clash = ref.reason_contradiction(value, reason)
        if clash and not confirmed:
            raise ReasonContradicts(f"not saved: {clash}; change the value or the reason, or confirm it as it is")
        with self.session(write=True) as s:  # read then write: take SQLite's write lock first, and wait for it
            if q.get_report(s, report_id) is None:
                raise StudyError(f"no report {report_id!r}")
            adj = q.add_adjudication(s, report_id, label, value, self.actor.user, reason.strip())
            q.add_audit(
                s,
                self.actor.user,
                "adjudicate",
                "adjudication",
                f"{report_id}/{label}",
                None,
                {"value": value, "reason": reason.strip(), "id": adj.id},
            )

    def adjudication_history(self, report_id: str, label: str) -> pd.DataFrame:
        """Every adjudication of one item, oldest first."""
        self._require_seen(report_id)
        with self.session() as s:
            adj = q.adjudications_frame(s)
        return adj[(adj["report_id"] == report_id) & (adj["label"] == label)].reset_index(drop=True)

    def item_votes(self, report_id: str) -> pd.DataFrame:
        """Every reader's vote on one report (for adjudicators: unblinded)."""
        self.require("see_unblinded")
        with self.session() as s:
            return q.readings_frame(s, report_ids_=[report_id])

    # ------------------------------------------------------------ agreement

    def agreement(self, cohort: str | None = None) -> Agreement:
        """Fleiss kappa per label, pairwise Cohen, each reader against the reference."""
        from workbench.core import agreement

        with self.session() as s:
            cid = self.cohort_id(cohort) if cohort else None
            readings = q.readings_frame(s, cohort_id=cid)
        readings = self.blind_rows(
            readings[readings["label"].isin(self.vocab.asked_ids)][["report_id", "label", "reader", "value"]]
        )
        reference = self.reference(cohort, readings=readings)[["report_id", "label", "value"]]
        from workbench.services.adaptive import agreement_readings

        readings = agreement_readings(self, readings)  # adaptive reading: the full-overlap sample only
        return Agreement(
            fleiss=agreement.fleiss_kappa_table(readings),
            pairwise=agreement.pairwise_cohen(readings),
            reader_vs_reference=agreement.reader_vs_reference(readings, reference),
        )

    def _completed_reports(self, reader: str) -> set[str]:
        """Reports a reader has marked every asked label of."""
        with self.session() as s:
            mine = q.readings_frame(s, reader=reader)
        counts = mine.groupby("report_id").size()
        return set(counts[counts >= len(self.vocab.asked_ids)].index)

    def can_see_report(self, report_id: str) -> bool:
        """Blinding: a reader sees others' labels and the labeller's output only after their own."""
        scope = self.blind_scope()
        return scope is None or report_id in scope

    def cohort_name(self, cohort_id: int) -> str:
        """Cohort name from id."""
        cohorts = self.cohorts().set_index("id")
        return str(cohorts.loc[cohort_id, "name"])

    # ------------------------------------------------------------ adjudication order

    def adjudication_worklist(self, cohort: str | None = None) -> pd.DataFrame:
        """Items waiting for a senior reader: flagged ones first, then ties, then too few readers; why each waits."""
        queue = self.adjudication_queue(cohort)
        tie = (queue["positives"] * 2 == queue["n_readers"]) & (queue["n_readers"] > 0)
        queue["why"] = np.where(
            queue["flagged"],
            "flagged: the reference may be wrong",
            np.where(tie, "tie", queue["reason"].replace("", "waiting")),
        )
        queue["rank"] = np.where(queue["flagged"], 0, np.where(tie, 1, 2))
        return queue.sort_values("rank", kind="stable").drop(columns="rank").reset_index(drop=True)


__all__ = ["Actor", "init_study", "ImportSummary", "PermissionDenied", "ConflictError", "TASK_FILE"]


def _other_cohort_problems(session, elsewhere: dict[int, list[str]], cohort: str) -> list:
    """One problem per other cohort holding some of the ids: its name, how many, the first few."""
    names = dict(zip(*[q.list_cohorts(session)[c] for c in ("id", "name")], strict=False)) if elsewhere else {}
    problems = []
    for cohort_id, ids in elsewhere.items():
        sample = ", ".join(repr(i) for i in ids[:3]) + (", ..." if len(ids) > 3 else "")
        problems.append(
            importers.Problem(
                None,
                "id",
                f"{len(ids)} report id(s) already belong to cohort "
                f"{names.get(cohort_id, cohort_id)!r} ({sample}); a report "
                f"belongs to one cohort: nothing was imported into {cohort!r}",
            )
        )
    return problems


def _refuse_hidden_ids(ids: pd.Series, source: str) -> None:
    """Report ids from any caller: nothing that could make one id look like another (the importers say it per row)."""
    hidden = ids.astype(str).str.contains(HIDDEN)
    if hidden.any():
        rid = ids[hidden].iloc[0]
        raise importers.ImportProblems(
            source,
            [
                importers.Problem(
                    None,
                    "report_id",
                    f"report id {rid.encode('unicode_escape').decode('ascii')!r} contains {first_hidden(rid)}; "
                    "ids are plain text",
                )
            ],
        )
