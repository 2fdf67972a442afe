"""The study database's tables, in one module so the schema reads in one place.

Every table a user's data lives in; migrations in db.py move a study from one schema version to
the next. Timestamps are UTC ISO strings (portable between SQLite and PostgreSQL, sortable).
"""

from __future__ import annotations

from sqlalchemy import Column, Index, String, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


class Meta(SQLModel, table=True):
    """Key/value facts about the database itself (schema version)."""

    key: str = Field(primary_key=True, max_length=64)
    value: str = Field(sa_column=Column(Text, nullable=False))


class Cohort(SQLModel, table=True):
    """A named set of reports (development, test, external)."""

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=200)
    language: str = Field(default="en", max_length=16)
    created_at: str = Field(max_length=40)
    role: str = Field(default="development", sa_column=Column(String(20), nullable=False, server_default="development"))


class Report(SQLModel, table=True):
    """One chest X-ray report; sections kept apart so the study chooses what the labeller reads."""

    id: str = Field(primary_key=True, max_length=200)
    cohort_id: int = Field(foreign_key="cohort.id", index=True)
    seq: int = Field(default=0)
    text: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    findings: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    impression: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    language: str = Field(default="en", max_length=16)
    text_hash: str = Field(max_length=64)
    created_at: str = Field(max_length=40)


class Reader(SQLModel, table=True):
    """A radiologist or other annotator (or an imported gold standard)."""

    id: str = Field(primary_key=True, max_length=100)
    kind: str = Field(default="human", max_length=20)
    created_at: str = Field(max_length=40)


class Reading(SQLModel, table=True):
    """One reader's 0/1 for one (report, label); version counts changes for optimistic locking."""

    __table_args__ = (UniqueConstraint("report_id", "label", "reader_id", name="uq_reading"),)
    id: int | None = Field(default=None, primary_key=True)
    report_id: str = Field(foreign_key="report.id", max_length=200)
    label: str = Field(max_length=100, index=True)
    reader_id: str = Field(foreign_key="reader.id", max_length=100, index=True)
    value: int
    version: int = Field(default=1)
    created_at: str = Field(max_length=40)
    updated_at: str = Field(max_length=40, index=True)  # what changed since a look (services/memo.py)


class Adjudication(SQLModel, table=True):
    """A senior reader's decision on an item; every decision is kept, the latest one counts."""

    __table_args__ = (Index("ix_adjudication_item", "report_id", "label"),)
    id: int | None = Field(default=None, primary_key=True)
    report_id: str = Field(foreign_key="report.id", max_length=200)
    label: str = Field(max_length=100)
    value: int
    adjudicator: str = Field(max_length=100)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    created_at: str = Field(max_length=40)


class Flag(SQLModel, table=True):
    """An item sent to adjudication although its vote was decisive ("the reference is wrong")."""

    __table_args__ = (Index("ix_flag_item", "report_id", "label"),)
    id: int | None = Field(default=None, primary_key=True)
    report_id: str = Field(foreign_key="report.id", max_length=200)
    label: str = Field(max_length=100)
    opened_by: str = Field(max_length=100)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    note_id: int | None = Field(default=None)
    created_at: str = Field(max_length=40)


class Run(SQLModel, table=True):
    """Prompt version x model x parameters x cohort -> predictions, with its counts."""

    id: int | None = Field(default=None, primary_key=True)
    cohort_id: int = Field(foreign_key="cohort.id", index=True)
    prompt_commit: str = Field(max_length=64)
    prompt_ref: str = Field(default="", max_length=200)
    model: str = Field(max_length=300)
    params_json: str = Field(sa_column=Column(Text, nullable=False))
    mode: str = Field(max_length=20)
    labels_json: str = Field(sa_column=Column(Text, nullable=False))
    sections: str = Field(default="findings,impression", max_length=100)
    endpoint: str = Field(default="", max_length=300)
    status: str = Field(default="running", max_length=20)
    created_by: str = Field(default="", max_length=100)
    started_at: str = Field(max_length=40)
    finished_at: str | None = Field(default=None, max_length=40)
    calls_total: int = 0
    calls_made: int = 0
    calls_reused: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    note: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    lease_holder: str | None = Field(default=None, max_length=200)  # the one executor of this run (host:pid:token)
    lease_expires_at: float | None = None  # epoch seconds; after it another executor may take the run over


class RunScoring(SQLModel, table=True):
    """The reference a run was first scored against: when, and its per-label counts then (so a later
    adjudication or re-reading shows as "the reference changed since run N" with the figures that moved)."""

    run_id: int = Field(foreign_key="run.id", primary_key=True)
    scored_at: str = Field(max_length=40)
    counts_json: str = Field(sa_column=Column(Text, nullable=False))  # {label: [tp, fp, fn, tn]}


class Prediction(SQLModel, table=True):
    """The labeller's answer for one (run, report, label); a failure keeps value None and says why."""

    __table_args__ = (UniqueConstraint("run_id", "report_id", "label", name="uq_prediction"),)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")  # indexed as uq_prediction's first column
    report_id: str = Field(foreign_key="report.id", max_length=200)
    label: str = Field(max_length=100)
    value: int | None = None
    evidence: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    evidence_found: bool | None = None
    status: str = Field(max_length=20)
    detail: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    call_key: str = Field(max_length=64)  # not indexed: nothing searches by it, and every answer would pay


class CallCache(SQLModel, table=True):
    """A model's raw answer, keyed by the hash of (messages, model, parameters)."""

    key: str = Field(primary_key=True, max_length=64)
    model: str = Field(max_length=300)
    response: str = Field(sa_column=Column(Text, nullable=False))
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    created_at: str = Field(max_length=40)


class ErrorNote(SQLModel, table=True):
    """A radiologist's note on a disagreement; attached to (report, label) so it outlives the run."""

    __table_args__ = (Index("ix_note_item", "report_id", "label"),)
    id: int | None = Field(default=None, primary_key=True)
    report_id: str = Field(foreign_key="report.id", max_length=200)
    label: str = Field(max_length=100)
    run_id: int | None = Field(default=None, foreign_key="run.id")
    author: str = Field(max_length=100)
    category: str = Field(max_length=100)
    significance: str = Field(max_length=40)
    text: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    reference_wrong: bool = False
    created_at: str = Field(max_length=40)


class Extraction(SQLModel, table=True):
    """Labels a frozen bundle gave one report text (scoring cache: same bundle + text -> same labels)."""

    key: str = Field(primary_key=True, max_length=64)
    bundle_sha: str = Field(max_length=64, index=True)
    text_hash: str = Field(max_length=64)
    labels_json: str = Field(sa_column=Column(Text, nullable=False))
    created_at: str = Field(max_length=40)


class PromptDraft(SQLModel, table=True):
    """A label's prompt being edited: its YAML and the version the edit started from."""

    __table_args__ = (UniqueConstraint("label", "author", name="uq_draft"),)
    id: int | None = Field(default=None, primary_key=True)
    label: str = Field(max_length=100)
    author: str = Field(max_length=100)
    base_commit: str = Field(max_length=64)
    content: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: str = Field(max_length=40)


class User(SQLModel, table=True):
    """A person who signs in; role decides what the services layer lets them do."""

    id: str = Field(primary_key=True, max_length=100)
    name: str = Field(default="", max_length=200)
    email: str = Field(default="", max_length=200)
    role: str = Field(max_length=40)
    password_hash: str = Field(default="", max_length=300)
    created_at: str = Field(max_length=40)
    disabled: bool = False


class AuditEvent(SQLModel, table=True):
    """Append-only record of every change to user data: who, when, old -> new."""

    id: int | None = Field(default=None, primary_key=True)
    at: str = Field(max_length=40, index=True)
    actor: str = Field(max_length=100)
    action: str = Field(max_length=60)
    entity: str = Field(max_length=60)
    entity_key: str = Field(max_length=300, index=True)
    old_json: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    new_json: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    # tamper evidence: each event's hash covers its content and the previous event's hash
    prev_hash: str = Field(default="", max_length=64)
    hash: str = Field(default="", max_length=64)


class LoginFailure(SQLModel, table=True):
    """Failed sign-ins per user id (known or not): the back-off holds across processes and servers."""

    user_id: str = Field(primary_key=True, max_length=300)
    failures: int = 0
    locked_until: str = Field(default="", max_length=40)
    last_at: str = Field(default="", max_length=40)


class UserToken(SQLModel, table=True):
    """A command-line token of one user; only its sha256 is stored."""

    id: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(foreign_key="user.id", max_length=100, index=True)
    token_hash: str = Field(max_length=64, unique=True)
    created_at: str = Field(max_length=40)
    # UTC ISO time after which the token is refused; "" on tokens made before expiry existed
    # (they expire DEFAULT_TOKEN_DAYS after created_at)
    expires_at: str = Field(default="", sa_column=Column(String(40), nullable=False, server_default=""))


class WebSession(SQLModel, table=True):
    """A signed-in browser (auth: local): only the cookie token's sha256 is stored; it expires, and sign-out,
    `user disable` and a role change revoke it."""

    id: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(foreign_key="user.id", max_length=100, index=True)
    token_hash: str = Field(max_length=64, unique=True)
    created_at: str = Field(max_length=40)
    expires_at: str = Field(max_length=40)
    revoked_at: str = Field(default="", max_length=40)


class SplitMember(SQLModel, table=True):
    """Which part (tuning or validation) of its development cohort a report belongs to."""

    report_id: str = Field(primary_key=True, foreign_key="report.id", max_length=200)
    cohort_id: int = Field(foreign_key="cohort.id", index=True)
    part: str = Field(max_length=20)
    seed: int = 0
    validation_fraction: float = 0.3
    created_by: str = Field(default="", max_length=100)
    created_at: str = Field(max_length=40)


class CohortLook(SQLModel, table=True):
    """One look at a locked test cohort's metrics: who, when, through which frozen bundle."""

    id: int | None = Field(default=None, primary_key=True)
    cohort_id: int = Field(foreign_key="cohort.id", index=True)
    bundle: str = Field(max_length=200, index=True)
    bundle_sha: str = Field(max_length=64)
    run_id: int | None = Field(default=None, foreign_key="run.id")
    actor: str = Field(max_length=100)
    at: str = Field(max_length=40)


class Proposal(SQLModel, table=True):
    """A proposed revision of one label's prompt, with its evaluation and what became of it."""

    id: int | None = Field(default=None, primary_key=True)
    label: str = Field(max_length=100, index=True)
    author: str = Field(max_length=100)
    source: str = Field(max_length=300)
    status: str = Field(max_length=20)
    base_commit: str = Field(max_length=64)
    run_id: int | None = Field(default=None, foreign_key="run.id")
    edit_json: str = Field(sa_column=Column(Text, nullable=False))
    evaluation_json: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    note_ids_json: str = Field(default="[]", sa_column=Column(Text, nullable=False, default="[]"))
    commit: str = Field(default="", max_length=64)
    created_at: str = Field(max_length=40)
    updated_at: str = Field(max_length=40)


class Optimisation(SQLModel, table=True):
    """The report of one `optimise` job: per round, what changed and how tuning and validation moved."""

    id: int | None = Field(default=None, primary_key=True)
    created_by: str = Field(max_length=100)
    created_at: str = Field(max_length=40)
    run_id: int = Field(foreign_key="run.id")
    report_json: str = Field(sa_column=Column(Text, nullable=False))


# ---------------------------------------------------------------- reading room (drafts and work lists)


class ReadingDraft(SQLModel, table=True):
    """A reader's ticks on a report not saved yet: kept the moment they change, so nothing is lost."""

    __table_args__ = (UniqueConstraint("reader_id", "report_id", name="uq_reading_draft"),)
    id: int | None = Field(default=None, primary_key=True)
    reader_id: str = Field(max_length=100, index=True)
    report_id: str = Field(foreign_key="report.id", max_length=200)
    values_json: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: str = Field(max_length=40)


class ReadingNote(SQLModel, table=True):
    """A reader's per-report comment and "unsure" mark, saved with their reading (none stored when empty)."""

    __table_args__ = (UniqueConstraint("reader_id", "report_id", name="uq_reading_note"),)
    id: int | None = Field(default=None, primary_key=True)
    reader_id: str = Field(max_length=100, index=True)
    report_id: str = Field(foreign_key="report.id", max_length=200)
    comment: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    unsure: bool = False
    updated_at: str = Field(max_length=40)


class ReadingSave(SQLModel, table=True):
    """One save of a report's reading as undo needs it: the values before, the versions after, the draft it replaced."""

    id: int | None = Field(default=None, primary_key=True)
    reader_id: str = Field(max_length=100, index=True)
    report_id: str = Field(foreign_key="report.id", max_length=200)
    at: str = Field(max_length=40)
    before_json: str = Field(sa_column=Column(Text, nullable=False))  # label -> value before (None: no reading)
    after_json: str = Field(sa_column=Column(Text, nullable=False))  # label -> version after the save
    note_before_json: str = Field(default="null", sa_column=Column(Text, nullable=False, default="null"))
    draft_before_json: str = Field(default="null", sa_column=Column(Text, nullable=False, default="null"))
    undone_at: str = Field(default="", max_length=40)


class AppliedPress(SQLModel, table=True):
    """A keyboard form's trigger (Enter, an arrow) applied once: its browser page, form and sequence number, and the
    answer given. A resend of the same press (after a reconnect, by another script thread or server process) finds it
    here and is answered, not applied again. Rows older than a day are pruned: a page resends within seconds."""

    __table_args__ = (UniqueConstraint("page", "form", "seq", name="uq_applied_press"),)
    id: int | None = Field(default=None, primary_key=True)
    page: str = Field(max_length=100)
    form: str = Field(max_length=100)
    seq: int
    actor: str = Field(max_length=100)
    at: str = Field(max_length=40, index=True)
    done: bool = False  # False while it is being applied (or when that was interrupted)
    error: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))  # the answer; "" = stored


class WorkList(SQLModel, table=True):
    """A cohort's work lists: how many readers each report should get (Prodigy's feed_overlap)."""

    cohort_id: int = Field(foreign_key="cohort.id", primary_key=True)
    overlap: int
    created_by: str = Field(max_length=100)
    updated_at: str = Field(max_length=40)


class WorkAssignment(SQLModel, table=True):
    """One report on one reader's work list."""

    __table_args__ = (
        UniqueConstraint("report_id", "reader_id", name="uq_work_assignment"),
        Index("ix_work_assignment_reader", "cohort_id", "reader_id"),
    )
    id: int | None = Field(default=None, primary_key=True)
    cohort_id: int = Field(foreign_key="cohort.id")
    report_id: str = Field(foreign_key="report.id", max_length=200)
    reader_id: str = Field(max_length=100)
    assigned_by: str = Field(max_length=100)
    created_at: str = Field(max_length=40)


class PromptVersionExamples(SQLModel, table=True):
    """Which reports a prompt version uses as few-shot examples (a commit never changes, so this is
    read from Git once; evaluation then needs no Git at all)."""

    prompt_commit: str = Field(primary_key=True, max_length=64)
    report_ids: str = Field(sa_column=Column(Text, nullable=False))  # JSON list, sorted


# ---------------------------------------------------------------- finding attributes (side, severity, change ...)


class PredictionAttribute(SQLModel, table=True):
    """One attribute value the labeller gave a positive (run, report, label); kept beside Prediction so the
    hot table stays as it is. A malformed `attributes` object is one row with attribute "" and status
    attribute_parse_error (the presence answer still counts)."""

    __table_args__ = (UniqueConstraint("run_id", "report_id", "label", "attribute", name="uq_prediction_attribute"),)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")  # indexed as the unique constraint's first column
    report_id: str = Field(foreign_key="report.id", max_length=200)
    label: str = Field(max_length=100)
    attribute: str = Field(max_length=100)
    value: str | None = Field(default=None, max_length=100)
    status: str = Field(default="ok", max_length=40)
    detail: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))


class ReadingAttribute(SQLModel, table=True):
    """One reader's value of one attribute of a label they ticked; adjudicated rows settle a tied vote."""

    __table_args__ = (
        UniqueConstraint("report_id", "label", "reader_id", "attribute", "adjudicated", name="uq_reading_attribute"),
        Index("ix_reading_attribute_item", "report_id", "label"),
    )
    id: int | None = Field(default=None, primary_key=True)
    report_id: str = Field(foreign_key="report.id", max_length=200)
    label: str = Field(max_length=100)
    reader_id: str = Field(max_length=100)
    attribute: str = Field(max_length=100)
    value: str = Field(max_length=100)
    adjudicated: bool = False
    updated_at: str = Field(max_length=40)


class CallFact(SQLModel, table=True):
    """What one model call cost and how it ended (latency, tokens, cost, finish reason, the model that
    answered, its thinking), written by the run that made it. Keyed by call key: a run that reuses the
    answer from the cache shows the facts of the run that paid for it."""

    __table_args__ = (Index("ix_callfact_run", "run_id"),)
    call_key: str = Field(primary_key=True, max_length=64)
    run_id: int | None = Field(default=None, foreign_key="run.id")
    labels: str = Field(max_length=4000)  # comma-joined label ids the call asked
    latency_s: float = 0.0
    attempts: int = 1
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    cost: float | None = None
    finish_reason: str | None = Field(default=None, max_length=40)
    reported_model: str | None = Field(default=None, max_length=300)
    reasoning: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: str = Field(max_length=40)
    reply: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # a failed call's raw reply
    peer: str | None = Field(default=None, max_length=60)  # the address:port its connection went to
    # (a success's is in the call cache; failures are never cached, and the case view shows what came back)


class NoiseRepeat(SQLModel, table=True):
    """One repeated answer of a noise measurement: a run's (report, label) asked again, bypassing the
    cache; kept apart from the run's predictions."""

    __table_args__ = (Index("ix_noise_run", "run_id", "measurement"),)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    measurement: int  # one `workbench noise` execution (1, 2, ... per run)
    report_id: str = Field(max_length=200)
    label: str = Field(max_length=100)
    repeat: int
    seed: int | None = None
    original: int | None = None  # the run's answer
    value: int | None = None  # the repeat's answer (None: it failed)
    status: str = Field(max_length=40)
    created_at: str = Field(max_length=40)


# ---------------------------------------------------------------- adaptive reading (services/adaptive.py)


class AgreementSample(SQLModel, table=True):
    """A report of a cohort's agreement sample: it keeps full overlap under adaptive reading (drawn once)."""

    report_id: str = Field(foreign_key="report.id", primary_key=True, max_length=200)
    cohort_id: int = Field(foreign_key="cohort.id", index=True)
    seed: int
    share: float
    run_id: int | None = Field(default=None)  # the run whose predictions stratified the draw
    drawn_by: str = Field(max_length=100)
    drawn_at: str = Field(max_length=40)


class ReportProgress(SQLModel, table=True):
    """Where adaptive reading stands on a report (kept with every reading saved, rebuilt when the rule changes)."""

    __table_args__ = (Index("ix_report_progress_cohort", "cohort_id", "open"),)
    report_id: str = Field(foreign_key="report.id", primary_key=True, max_length=200)
    cohort_id: int = Field(foreign_key="cohort.id")
    open: bool  # still offered: some label can still change, or the sample's full overlap is not reached
    tie: bool  # some label is tied at the panel (escalation)
    readers: int
    cap: int  # the most readers it may get (the panel, one more when escalated)
    updated_at: str = Field(max_length=40)


class ReadingClaim(SQLModel, table=True):
    """A report given to a reader: in flight until the reading is saved (done) or the claim expires."""

    __table_args__ = (
        UniqueConstraint("report_id", "reader_id", name="uq_reading_claim"),
        Index("ix_reading_claim_cohort", "cohort_id", "done"),
    )
    id: int | None = Field(default=None, primary_key=True)
    cohort_id: int = Field(foreign_key="cohort.id")
    report_id: str = Field(foreign_key="report.id", max_length=200)
    reader_id: str = Field(max_length=100)
    done: bool = False
    claimed_at: str = Field(max_length=40)
    expires_at: str = Field(max_length=40)


class BatchJob(SQLModel, table=True):
    """A provider batch job (workbench/labeller/batch.py), recorded before it is polled so a restart picks it up
    instead of uploading again. scope: "run:<id>" for a run, "calls:<sha of its call keys>" otherwise."""

    id: int | None = Field(default=None, primary_key=True)
    scope: str = Field(index=True, max_length=200)
    run_id: int | None = Field(default=None, foreign_key="run.id", index=True)
    batch_id: str = Field(index=True, unique=True, max_length=200)
    input_file_id: str = Field(max_length=200)
    output_file_id: str | None = Field(default=None, max_length=200)
    error_file_id: str | None = Field(default=None, max_length=200)
    status: str = Field(max_length=40)  # the provider's status; "collected" once every answer is stored
    model: str = Field(max_length=300)
    api_base: str = Field(max_length=1000)
    requests: int = 0
    keys_sha: str = Field(max_length=64)
    created_at: str = Field(max_length=40)
    updated_at: str = Field(max_length=40)


class LabelSetCandidate(SQLModel, table=True):
    """A candidate label mined from a cohort (workbench/core/labelset.py), with its evidence, as reviewed."""

    __table_args__ = (UniqueConstraint("labelset", "key", name="uq_labelset_candidate"),)
    id: int | None = Field(default=None, primary_key=True)
    labelset: str = Field(max_length=200, index=True)
    key: str = Field(max_length=300)
    rank: int = 0
    name: str = Field(max_length=300)
    definition: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    look_for_json: str = Field(default="[]", sa_column=Column(Text, nullable=False, default="[]"))
    evidence_json: str = Field(sa_column=Column(Text, nullable=False))  # forms, counts, examples, attributes
    settled_json: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))  # an adjudicator's
    created_at: str = Field(max_length=40)


class LabelSetVote(SQLModel, table=True):
    """One reviewer's current vote on one candidate (approve, reject, merge into, rename); history is audited."""

    __table_args__ = (UniqueConstraint("labelset", "key", "reviewer", name="uq_labelset_vote"),)
    id: int | None = Field(default=None, primary_key=True)
    labelset: str = Field(max_length=200, index=True)
    key: str = Field(max_length=300)
    reviewer: str = Field(max_length=100)
    action: str = Field(max_length=20)
    argument: str = Field(default="", max_length=300)
    updated_at: str = Field(max_length=40)
