"""The results pages and the CLI read, as frozen dataclasses: their fields are the contract, read as attributes
(`case.text`, `cmp.table`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.core.metrics import MacroFigure


@dataclass(frozen=True, eq=False)
class Record:
    """A frozen result whose fields become a plain dict for JSON output."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (values as they are)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def strict(obj: Any) -> Any:
    """obj with every float that is not finite (a failed call's NaN latency) as None: strict JSON has no NaN."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def json_default(obj: Any) -> Any:
    """json.dumps fallback: results as their fields, numpy scalars as numbers (NaN as null), sets and tuples as
    lists, anything else as its text."""
    import numpy as np

    if isinstance(obj, Record):
        return obj.to_dict()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return None if np.isnan(obj) else float(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


@dataclass(frozen=True)
class CallFacts:
    """One recorded model call (the case view): latency, tokens, cost, finish reason, the model that answered, its
    thinking, and the run that made it (another run's when this one reused the answer from the cache)."""

    call_key: str
    run_id: int | None
    labels: str  # comma-joined label ids the call asked
    latency_s: float
    attempts: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: float | None  # NaN (or None) when the provider did not say
    cost: float | None  # NaN (or None) for a model without a price
    finish_reason: str | None
    reported_model: str | None
    reasoning: str | None  # the model's thinking, kept out of parsing
    peer: str | None = None  # the address the call connected to (issue 34 item 11; None before it was recorded)


@dataclass(frozen=True, eq=False)
class Case(Record):
    """One (report, label) of a run: the report, readers' votes, the reference, the labeller's answer and its call."""

    report_id: str
    label: str
    text: str
    findings: str
    impression: str
    votes: pd.DataFrame  # reader, value
    reference: int | None
    reference_status: str | None
    prediction: dict | None  # the stored prediction row: value, evidence, status, call_key ...
    notes: pd.DataFrame
    messages: list  # the request's chat messages, as sent
    call: CallFacts | None


@dataclass(frozen=True, eq=False)
class Comparison(Record):
    """Two runs on the same reports: per-label changes with the paired test, fixed/broken cases and both macros."""

    run_a: int
    run_b: int
    table: pd.DataFrame  # per label: a, b (discordant counts), metrics of both runs, deltas, verdict
    cases: pd.DataFrame  # fixed and broken (report, label) cases
    excluded: dict  # what was left out of the comparison and how many
    macro_f1_a: float
    macro_f1_b: float
    macro_a: MacroFigure  # value and the labels it averages
    macro_b: MacroFigure
    zero_division: str


@dataclass(frozen=True, eq=False)
class CompareView(Comparison):
    """A comparison as the Compare tab shows it: the table with each change's paired interval, sorted (significant
    first, then by size), and what the macro figures count."""

    counts: dict  # reports, labels, leaked_either; alone: each run's own macro F1 and reports


@dataclass(frozen=True)
class PromptDiff:
    """How one label's prompt differs between two versions (or a draft and its base): unified text and fields."""

    label: str
    unified: str  # a unified diff of the YAML files ("" when they are the same)
    fields: dict  # changed, added, removed per field (or created / deleted): policy.diff_label_prompts


@dataclass(frozen=True)
class ItemReference:
    """The reference of one (report, label): its value (None while waiting), status, positive votes and readers."""

    value: int | None
    status: str
    positives: int
    n_readers: int


@dataclass(frozen=True)
class AdaptiveStatus:
    """Adaptive reading of a cohort at a glance (for a reader, over the reports they finished): reads done and
    saved, and the (report, label) items decided, undecided and waiting."""

    enabled: bool
    reads_done: int
    reads_saved: int  # closed reports' unread panel places
    full_panel: int  # reads a full panel of every report would take
    saved_share: float  # reads_saved / full_panel (NaN without reports)
    reports: int
    reports_open: int  # reports still offered to readers
    items: int
    decided: int
    waiting: int  # for adjudication: no decisive vote, or flagged
    undecided: int


@dataclass(frozen=True, eq=False)
class Agreement:
    """Readers' agreement on a cohort: Fleiss kappa per label, pairwise Cohen, each reader against the reference."""

    fleiss: pd.DataFrame
    pairwise: pd.DataFrame
    reader_vs_reference: pd.DataFrame

    def tables(self) -> dict[str, pd.DataFrame]:
        """The three tables by name, in the order they are printed (and named in JSON and CSV output)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class AgreementSample:
    """A cohort's agreement sample (the reports kept at full overlap): every field None before it is drawn."""

    reports: int | None = None  # reports in the sample
    of: int | None = None  # reports in the cohort when it was drawn
    share: float | None = None
    seed: int | None = None
    run: int | None = None  # the run whose answers stratified the draw (None: drawn without one)


@dataclass(frozen=True, eq=False)
class AttributeMetrics:
    """Attribute accuracy of a run on matched findings (labeller and reference both positive)."""

    table: pd.DataFrame  # per (label, attribute): accuracy with its Wilson interval, coverage
    confusion: pd.DataFrame  # the confusion of values
    mismatches: pd.DataFrame  # the matched findings whose values differ
    rule: str  # what counts as correct, in words
    parse_failures: int  # attribute values that could not be parsed (recorded, never guessed)


@dataclass(frozen=True)
class CaseRef:
    """A case sent from one page to another: run, report and label, and the comparison it came from."""

    run_id: int
    report_id: str
    label: str
    compare: tuple[int, int] | None = None


@dataclass(frozen=True, eq=False)
class EditEvaluation(Record):
    """One revised label prompt labelled on tuning and validation through the call cache, against the run."""

    label: str
    calls: dict  # made, reused, failures, cost, seconds
    parts: dict  # part -> f1_before, f1_after, delta_f1, fixed, broken, p_value, verdict
    offered: bool  # validation does not get worse
    why: str
    values: dict  # report_id -> the revised prompt's answer (the reports asked)
    evidence: dict  # report_id -> its evidence
    carried: tuple = ()  # tuning reports not asked (frugal optimise): the answer before stands in for theirs


@dataclass(frozen=True, eq=False)
class PartMetrics(Record):
    """One part of a split cohort (tuning or validation) under a run: per-label metrics with intervals, and macro
    F1 with its bootstrap interval (None when not resampled)."""

    reports: int
    table: pd.DataFrame  # per label: support, f1, f1_lo, f1_hi ... (metrics.label_metrics)
    macro_f1: float
    macro_f1_lo: float | None
    macro_f1_hi: float | None
    averages: dict[str, Any]  # metrics.averages
    macro_labels: str  # which labels macro F1 averages


@dataclass(frozen=True, eq=False)
class PartComparison(Record):
    """Two runs on one part of a split cohort: per-label F1 change with McNemar (Holm within the part) and both
    macro F1 figures over the same labels."""

    table: pd.DataFrame  # per label: f1_a, f1_b, delta_f1, b, c, p_value, verdict ... (metrics.compare_labels)
    macro_f1_a: float | None
    macro_f1_b: float | None
    macro_labels: str


@dataclass(frozen=True, eq=False)
class Suggestion(Record):
    """A proposed revision of one label as the engineer is shown it: the edit, its evaluation on tuning and
    validation (per-report answers left out, as the stored proposal keeps it) and whether it is offered; or why
    there is none (status, detail, and a model's unusable reply)."""

    label: str
    status: str  # ok, or why no edit is offered: inconsistent, empty, malformed, call_error ...
    detail: str
    run: int
    reply: str = ""  # a model proposer's reply that gave no usable edit
    edit: dict[str, Any] | None = None  # Edit.to_dict(), for an ok or inconsistent proposal
    evaluation: dict[str, Any] | None = None  # EditEvaluation.to_dict() of an ok one, without values and evidence
    offered: bool = False  # validation does not get worse
    diff: str = ""  # the label's YAML before -> proposed
    proposal: int = 0  # the stored proposal's id
    proposal_status: str = ""  # offered, not offered, or the status

    def to_dict(self) -> dict[str, Any]:
        """The fields, without those a suggestion of its kind has not got (the JSON `suggest` always wrote)."""
        absent = {"reply": not self.reply, "edit": self.edit is None}
        absent |= dict.fromkeys(("evaluation", "offered", "diff"), self.evaluation is None)
        return {k: v for k, v in super().to_dict().items() if not absent.get(k)}


@dataclass(frozen=True, eq=False)
class DraftsEvaluation(Record):
    """evaluate-drafts: per draft its evaluation on tuning and validation beside the run of the committed version,
    and macro F1 per part before and after (nothing committed)."""

    run: int
    base_commit: str  # the run's version
    head: str  # the latest version (a run of it compares with the latest)
    labels: list[dict[str, Any]]  # per draft: label, parts (as EditEvaluation's), offered, why, diff
    calls: dict[str, int]  # made, reused
    zero_division: str
    before: dict[str, Any]  # macro F1 per part (tuning, validation, gap) of the committed version
    after: dict[str, Any]  # and with the drafts


@dataclass(frozen=True, eq=False)
class StoredProposal(Record):
    """One stored proposal: its edit and its evaluation (per-report answers left out), who made it and where it
    stands (offered, not offered, accepted, saved ...)."""

    id: int
    label: str
    author: str
    source: str
    status: str
    base_commit: str
    run: int | None
    edit: dict[str, Any]  # Edit.to_dict(): label, fields, rationale, source, note_ids, changes
    evaluation: dict[str, Any]  # EditEvaluation.to_dict() without values and evidence; a model's reply
    note_ids: list[int]
    commit: str | None  # the version that saved it


@dataclass(frozen=True, eq=False)
class OptimiseReport(Record):
    """What `optimise` did: per round the changes kept and rejected, macro F1 per part before and after, calls."""

    id: int
    run: int
    base_commit: str
    labels: list[str]
    proposer: str
    rounds: list[dict[str, Any]]  # per round: changes, rejected, metrics, validation_mcnemar, carried
    calls: dict[str, float]  # made, reused, cost, proposer
    screen: dict[str, Any]  # on, screened, screened_out, calls, full_calls, full_by_part, deferred, left_calls
    zero_division: str
    start: dict[str, Any]  # macro F1 per part before (tuning, validation, gap)
    end: dict[str, Any]  # and after
    seconds: float
    drafts: list[str]  # labels left as drafts for a person to save
    not_drafted: list[str]  # changed labels that already had a person's draft
    final_prompts: dict[str, dict[str, Any]]

    @classmethod
    def from_stored(cls, report_id: int, stored: dict[str, Any]) -> OptimiseReport:
        """A report as stored (its JSON, without its id); an older one lacks the newer fields, given as empty."""
        return cls(
            id=report_id,
            run=stored["run"],
            base_commit=stored["base_commit"],
            labels=stored.get("labels", []),
            proposer=stored.get("proposer", ""),
            rounds=stored.get("rounds", []),
            calls=stored.get("calls", {}),
            screen=stored.get("screen") or {},
            zero_division=stored.get("zero_division", "zero"),
            start=stored["start"],
            end=stored["end"],
            seconds=stored.get("seconds", 0.0),
            drafts=stored.get("drafts", []),
            not_drafted=stored.get("not_drafted", []),
            final_prompts=stored.get("final_prompts", {}),
        )


@dataclass(frozen=True)
class FrozenBundle:
    """What freezing a prompt version wrote: its name, sha256, the JSON and YAML files, the commit and the run."""

    name: str
    sha256: str
    json: Path
    yaml: Path
    commit: str
    run: int
    notes: tuple[str, ...] = ()  # what the person freezing should know (a stale lock removed, report text inside)


# ------------------------------------------------------------ a reader's reading (services/reading.py): records only


@dataclass(frozen=True)
class ReportText:
    """One report's text as readers see it (the study's sections), without any labels."""

    report_id: str
    findings: str | None
    impression: str | None
    text: str


@dataclass(frozen=True)
class SavedReading:
    """What one save of a reader's reading of a report did: labels added, changed and left as they were."""

    added: int = 0
    changed: int = 0
    unchanged: int = 0


@dataclass(frozen=True)
class PressClaim:
    """Whether a keyboard press is new here: "new" (apply it), "done" (answered before: error is that answer, None
    when it was stored) or "pending" (being applied elsewhere, or interrupted seconds_ago)."""

    state: str
    error: str | None = None
    seconds_ago: float = 0.0


@dataclass(frozen=True)
class ReadingNote:
    """A reader's comment and unsure mark on one report."""

    comment: str
    unsure: bool


@dataclass(frozen=True)
class DraftReading:
    """A reader's unsaved reading of one report, read at once: its ticks, and the comment and unsure mark and the
    attribute values kept with them (None when the draft keeps none)."""

    ticks: dict[str, int]
    note: ReadingNote | None
    attributes: dict[str, dict[str, str]] | None


@dataclass(frozen=True)
class UndoneSave:
    """What undoing a reader's last save did: the report, labels whose value came back, new readings removed."""

    report_id: str
    restored: int
    removed: int


@dataclass(frozen=True)
class WorkAssigned:
    """What assigning work lists did: report places added, and each listed reader's reports now."""

    added: int
    per_reader: dict[str, int]
