"""Use-cases of the workbench: the one API the CLI and the Streamlit app call.

`Workbench` is opened on a study folder (app-factory style: each test builds one on a temporary
study). It composes one plain service per area on a shared `StudyContext` (services/base.py); each
service takes the services it uses in its constructor, so the order below is the layering:

- `study` (StudyService, study.py)
- `splits` (SplitsService, splits.py): uses study
- `prompts` (PromptsService, prompting.py): the prompt set's versions, edits and drafts; uses study, splits
- `runs` (RunsService, runs.py): uses study, prompts
- `adaptive` (AdaptiveService, adaptive.py): uses study
- `reading` (ReadingService, reading.py): a reader's reading end to end; uses study, adaptive
- `team` (TeamService, team.py): uses study
- `costs` (ModelPathService, model_path.py): what a model costs and how it answers; uses study, runs, prompts
- `evaluation` (EvaluationService, evaluation.py): uses study, splits, runs, prompts
- `attributes` (AttributesService, attributes.py): uses study, runs, evaluation
- `freeze` (FreezeService, freezing.py): uses study, splits, runs, evaluation, prompts
- `triage` (TriageService, triage.py): uses study, splits, runs, costs, attributes, evaluation, prompts
- `optimising` (OptimisingService, optimising.py): uses study, splits, runs, costs, prompts, evaluation, triage
- `labelset` (LabelSetService, labelset.py): the label set mined from a cohort and its review; uses study, runs, prompts

Call a service directly (`wb.runs.start_run("dev")`, `wb.evaluation.evaluate_run(1)`) or through
the flat names (`wb.start_run`), which are the same bound methods, typed as the service's method so an
IDE and a type checker follow them: each one below names its owner. `wb.runs()` (the run table) and `wb.freeze(name)` call the service of that name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from workbench.core.text import compose_text, text_hash
from workbench.services.adaptive import AdaptiveService
from workbench.services.attributes import AttributesService
from workbench.services.base import Service, StudyContext
from workbench.services.evaluation import Evaluation, EvaluationService
from workbench.services.freezing import FreezeService
from workbench.services.labelset import LabelSetService
from workbench.services.model_path import ModelPathService
from workbench.services.optimising import OptimisingService
from workbench.services.prompting import PromptsService
from workbench.services.reading import ReadingService
from workbench.services.runs import RunsService, RunSummary
from workbench.services.splits import SplitsService
from workbench.services.study import (
    PERMISSIONS,
    ROLES,
    Actor,
    ConflictError,
    ImportSummary,
    PermissionDenied,
    ReasonContradicts,
    StudyService,
    init_study,
)
from workbench.services.team import TeamService
from workbench.services.triage import TriageService

P = ParamSpec("P")
R = TypeVar("R")


class _Forward(Generic[P, R]):
    """A facade name that is the named service's method of the same name, typed as that method (an IDE and
    a type checker follow `wb.start_run` to RunsService.start_run and check its arguments)."""

    def __init__(self, method: Callable[Concatenate[Any, P], R], service: str) -> None:
        self.method = method
        self.service = service

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.method.__name__:
            raise TypeError(f"facade name {name!r} forwards to {self.method.__qualname__}: give it the method's name")
        self.name = name

    @overload
    def __get__(self, wb: None, owner: type | None = None) -> _Forward[P, R]: ...

    @overload
    def __get__(self, wb: Workbench, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(self, wb: Workbench | None, owner: type | None = None) -> _Forward[P, R] | Callable[P, R]:
        if wb is None:
            return self
        return getattr(getattr(wb, self.service), self.name)


def _forward(method: Callable[Concatenate[Any, P], R], service: str) -> _Forward[P, R]:
    """The facade name of `service`'s `method` (e.g. `start_run = _forward(RunsService.start_run, "runs")`)."""
    return _Forward(method, service)


class Workbench:
    """A study opened for use by one actor: the services of one study context."""

    def __init__(self, root, actor: Actor | None = None, engine=None) -> None:
        self.ctx = ctx = StudyContext(root, actor or Actor(), engine)
        self.study = StudyService(ctx)
        self.splits = SplitsService(ctx, self.study)
        self.prompts = PromptsService(ctx, self.study, self.splits)
        self.runs = RunsService(ctx, self.study, self.prompts)
        self.adaptive = AdaptiveService(ctx, self.study)
        self.reading = ReadingService(ctx, self.study, self.adaptive)
        self.team = TeamService(ctx, self.study)
        self.costs = ModelPathService(ctx, self.study, self.runs, self.prompts)
        self.evaluation = EvaluationService(ctx, self.study, self.splits, self.runs, self.prompts)
        self.attributes = AttributesService(ctx, self.study, self.runs, self.evaluation)
        self.freeze = FreezeService(ctx, self.study, self.splits, self.runs, self.evaluation, self.prompts)
        self.triage = TriageService(
            ctx, self.study, self.splits, self.runs, self.costs, self.attributes, self.evaluation, self.prompts
        )
        self.labelset = LabelSetService(ctx, self.study, self.runs, self.prompts)
        self.optimising = OptimisingService(
            ctx, self.study, self.splits, self.runs, self.costs, self.prompts, self.evaluation, self.triage
        )

    def as_actor(self, actor: Actor) -> Workbench:
        """The same study (sharing its engine) acting as another user; settings are read again."""
        other = Workbench(self.root, actor=actor, engine=self.engine)
        other.ctx.ui_revision = self.ctx.ui_revision
        return other

    # the context's parts
    root = property(lambda self: self.ctx.root)
    paths = property(lambda self: self.ctx.paths)
    config = property(lambda self: self.ctx.config)
    vocab = property(lambda self: self.ctx.vocab)
    url = property(lambda self: self.ctx.url)
    engine = property(lambda self: self.ctx.engine)
    actor = property(lambda self: self.ctx.actor)
    session = property(lambda self: self.ctx.session)
    current_actor = property(lambda self: self.ctx.current_actor)
    require = property(lambda self: self.ctx.require)
    rule = property(lambda self: self.ctx.rule)
    adaptive_settings = property(lambda self: self.ctx.adaptive_settings)

    @property
    def ui_revision(self):
        """The app's write counter of this study (ui/state.py), shared by the per-actor copies."""
        return self.ctx.ui_revision

    @ui_revision.setter
    def ui_revision(self, value) -> None:
        self.ctx.ui_revision = value

    # study
    permission_warnings = _forward(StudyService.permission_warnings, "study")
    migrate = _forward(StudyService.migrate, "study")
    blind_scope = _forward(StudyService.blind_scope, "study")
    save_config = _forward(StudyService.save_config, "study")
    cohort_id = _forward(StudyService.cohort_id, "study")
    label_id = _forward(StudyService.label_id, "study")
    cohorts = _forward(StudyService.cohorts, "study")
    import_reports = _forward(StudyService.import_reports, "study")
    import_openi = _forward(StudyService.import_openi, "study")
    import_readings = _forward(StudyService.import_readings, "study")
    reference = _forward(StudyService.reference, "study")
    item_reference = _forward(StudyService.item_reference, "study")
    reference_matrix = _forward(StudyService.reference_matrix, "study")
    reference_summary = _forward(StudyService.reference_summary, "study")
    adjudication_queue = _forward(StudyService.adjudication_queue, "study")
    adjudicate = _forward(StudyService.adjudicate, "study")
    adjudication_history = _forward(StudyService.adjudication_history, "study")
    item_votes = _forward(StudyService.item_votes, "study")
    agreement = _forward(StudyService.agreement, "study")
    can_see_report = _forward(StudyService.can_see_report, "study")
    # splits
    cohort_role = _forward(SplitsService.cohort_role, "splits")
    set_cohort_role = _forward(SplitsService.set_cohort_role, "splits")
    split_cohort = _forward(SplitsService.split_cohort, "splits")
    split_parts = _forward(SplitsService.split_parts, "splits")
    split_summary = _forward(SplitsService.split_summary, "splits")
    tuning_reports = _forward(SplitsService.tuning_reports, "splits")
    require_tuning_report = _forward(SplitsService.require_tuning_report, "splits")
    queue_reports = _forward(SplitsService.queue_reports, "splits")
    check_test_lock = _forward(SplitsService.check_test_lock, "splits")
    # runs
    labeller_settings = _forward(RunsService.labeller_settings, "runs")
    start_run = _forward(RunsService.start_run, "runs")
    unchanged_run = _forward(RunsService.unchanged_run, "runs")
    interrupted_run = _forward(RunsService.interrupted_run, "runs")
    interrupted_runs = _forward(RunsService.interrupted_runs, "runs")
    run_results = _forward(RunsService.run_results, "runs")
    resume_run = _forward(RunsService.resume_run, "runs")
    retry_failed = _forward(RunsService.retry_failed, "runs")
    pending_batch = _forward(RunsService.pending_batch, "runs")
    batch_jobs = _forward(RunsService.batch_jobs, "runs")
    prediction_attributes = _forward(RunsService.prediction_attributes, "runs")
    run_info = _forward(RunsService.run_info, "runs")
    predictions = _forward(RunsService.predictions, "runs")
    prediction_matrix = _forward(RunsService.prediction_matrix, "runs")
    estimate_run = _forward(RunsService.estimate_run, "runs")
    check_budget = _forward(RunsService.check_budget, "runs")
    # adaptive
    set_adaptive = _forward(AdaptiveService.set_adaptive, "adaptive")
    check_sample_change = _forward(AdaptiveService.check_sample_change, "adaptive")
    agreement_sample = _forward(AdaptiveService.agreement_sample, "adaptive")
    agreement_scope = _forward(AdaptiveService.agreement_scope, "adaptive")
    agreement_sample_reports = _forward(AdaptiveService.agreement_sample_reports, "adaptive")
    next_report = _forward(AdaptiveService.next_report, "adaptive")
    open_report = _forward(AdaptiveService.open_report, "adaptive")
    work_list = _forward(AdaptiveService.work_list, "adaptive")
    reading_order_text = _forward(AdaptiveService.reading_order_text, "adaptive")
    adaptive_status = _forward(AdaptiveService.adaptive_status, "adaptive")
    # team
    add_user = _forward(TeamService.add_user, "team")
    set_role = _forward(TeamService.set_role, "team")
    set_disabled = _forward(TeamService.set_disabled, "team")
    set_password = _forward(TeamService.set_password, "team")
    users = _forward(TeamService.users, "team")
    authenticate = _forward(TeamService.authenticate, "team")
    authenticate_token = _forward(TeamService.authenticate_token, "team")
    create_token = _forward(TeamService.create_token, "team")
    revoke_tokens = _forward(TeamService.revoke_tokens, "team")
    start_web_session = _forward(TeamService.start_web_session, "team")
    resume_web_session = _forward(TeamService.resume_web_session, "team")
    end_web_session = _forward(TeamService.end_web_session, "team")
    actor_for = _forward(TeamService.actor_for, "team")
    audit_log = _forward(TeamService.audit_log, "team")
    verify_audit = _forward(TeamService.verify_audit, "team")
    check_bundle = _forward(TeamService.check_bundle, "team")
    allow_endpoint = _forward(TeamService.allow_endpoint, "team")
    disallow_endpoint = _forward(TeamService.disallow_endpoint, "team")
    migrate_database = _forward(TeamService.migrate_database, "team")
    # prompts
    prompt_files = _forward(PromptsService.prompt_files, "prompts")
    prompt_set = _forward(PromptsService.prompt_set, "prompts")
    unblinded_prompt_set = _forward(PromptsService.unblinded_prompt_set, "prompts")
    prompt_commit = _forward(PromptsService.prompt_commit, "prompts")
    label_prompt = _forward(PromptsService.label_prompt, "prompts")
    asked_label = _forward(PromptsService.asked_label, "prompts")
    draft = _forward(PromptsService.draft, "prompts")
    save_draft = _forward(PromptsService.save_draft, "prompts")
    discard_draft = _forward(PromptsService.discard_draft, "prompts")
    drafts = _forward(PromptsService.drafts, "prompts")
    save_prompts = _forward(PromptsService.save_prompts, "prompts")
    commit_drafts = _forward(PromptsService.commit_drafts, "prompts")
    working_edit = _forward(PromptsService.working_edit, "prompts")
    prompt_status = _forward(PromptsService.prompt_status, "prompts")
    pending_prompt = _forward(PromptsService.pending_prompt, "prompts")
    pending_labels = _forward(PromptsService.pending_labels, "prompts")
    editable_text = _forward(PromptsService.editable_text, "prompts")
    store_edited_text = _forward(PromptsService.store_edited_text, "prompts")
    set_prompt_field = _forward(PromptsService.set_prompt_field, "prompts")
    save_labels = _forward(PromptsService.save_labels, "prompts")
    revert_label = _forward(PromptsService.revert_label, "prompts")
    import_prompt_dictionary = _forward(PromptsService.import_prompt_dictionary, "prompts")
    prompt_history = _forward(PromptsService.prompt_history, "prompts")
    prompt_diff = _forward(PromptsService.prompt_diff, "prompts")
    diff_against_draft = _forward(PromptsService.diff_against_draft, "prompts")
    previous_version = _forward(PromptsService.previous_version, "prompts")
    policy_table = _forward(PromptsService.policy_table, "prompts")
    policy_conflicts = _forward(PromptsService.policy_conflicts, "prompts")
    contradictions_saved = _forward(PromptsService.contradictions_saved, "prompts")
    add_example_from_case = _forward(PromptsService.add_example_from_case, "prompts")
    # costs
    call_facts = _forward(ModelPathService.call_facts, "costs")
    call_costs = _forward(ModelPathService.call_costs, "costs")
    evidence_check = _forward(ModelPathService.evidence_check, "costs")
    call_fact = _forward(ModelPathService.call_fact, "costs")
    measure_noise = _forward(ModelPathService.measure_noise, "costs")
    noise_rates = _forward(ModelPathService.noise_rates, "costs")
    comparison_noise = _forward(ModelPathService.comparison_noise, "costs")
    suggestion_noise_lines = _forward(ModelPathService.suggestion_noise_lines, "costs")
    suggestion_noise = _forward(ModelPathService.suggestion_noise, "costs")
    # evaluation
    evaluation_inputs = _forward(EvaluationService.evaluation_inputs, "evaluation")
    macro_policy = _forward(EvaluationService.macro_policy, "evaluation")
    evaluate_run = _forward(EvaluationService.evaluate_run, "evaluation")
    reference_drift = _forward(EvaluationService.reference_drift, "evaluation")
    compare_runs = _forward(EvaluationService.compare_runs, "evaluation")
    iteration_history = _forward(EvaluationService.iteration_history, "evaluation")
    human_ceiling = _forward(EvaluationService.human_ceiling, "evaluation")
    case_matrix = _forward(EvaluationService.case_matrix, "evaluation")
    search_run = _forward(EvaluationService.search_run, "evaluation")
    # attributes
    reference_attributes = _forward(AttributesService.reference_attributes, "attributes")
    attribute_ties = _forward(AttributesService.attribute_ties, "attributes")
    attribute_inputs = _forward(AttributesService.attribute_inputs, "attributes")
    attribute_rows = _forward(AttributesService.attribute_rows, "attributes")
    attribute_metrics = _forward(AttributesService.attribute_metrics, "attributes")
    attribute_failures = _forward(AttributesService.attribute_failures, "attributes")
    adjudicate_attribute = _forward(AttributesService.adjudicate_attribute, "attributes")
    # freeze
    justifying_run = _forward(FreezeService.justifying_run, "freeze")
    default_cohort = _forward(FreezeService.default_cohort, "freeze")
    bundle_content = _forward(FreezeService.bundle_content, "freeze")
    score_generated = _forward(FreezeService.score_generated, "freeze")
    test_look = _forward(FreezeService.test_look, "freeze")
    test_looks = _forward(FreezeService.test_looks, "freeze")
    bundles = _forward(FreezeService.bundles, "freeze")
    # triage
    disagreements = _forward(TriageService.disagreements, "triage")
    case = _forward(TriageService.case, "triage")
    add_note = _forward(TriageService.add_note, "triage")
    notes = _forward(TriageService.notes, "triage")
    note_counts = _forward(TriageService.note_counts, "triage")
    # reading
    readers = _forward(ReadingService.readers, "reading")
    report_text = _forward(ReadingService.report_text, "reading")
    reading_queue = _forward(ReadingService.reading_queue, "reading")
    record_reading = _forward(ReadingService.record_reading, "reading")
    reader_progress = _forward(ReadingService.reader_progress, "reading")
    my_readings = _forward(ReadingService.my_readings, "reading")
    reading_draft = _forward(ReadingService.reading_draft, "reading")
    reading_draft_note = _forward(ReadingService.reading_draft_note, "reading")
    reading_draft_attributes = _forward(ReadingService.reading_draft_attributes, "reading")
    draft_reading = _forward(ReadingService.draft_reading, "reading")
    save_reading_draft = _forward(ReadingService.save_reading_draft, "reading")
    claim_press = _forward(ReadingService.claim_press, "reading")
    finish_press = _forward(ReadingService.finish_press, "reading")
    reading_draft_ids = _forward(ReadingService.reading_draft_ids, "reading")
    submit_reading = _forward(ReadingService.submit_reading, "reading")
    reading_note = _forward(ReadingService.reading_note, "reading")
    reading_notes = _forward(ReadingService.reading_notes, "reading")
    undo_last_save = _forward(ReadingService.undo_last_save, "reading")
    last_saved_report = _forward(ReadingService.last_saved_report, "reading")
    my_reading_list = _forward(ReadingService.my_reading_list, "reading")
    reader_attributes = _forward(ReadingService.reader_attributes, "reading")
    record_reading_attributes = _forward(ReadingService.record_reading_attributes, "reading")
    assign_work = _forward(ReadingService.assign_work, "reading")
    work_list_status = _forward(ReadingService.work_list_status, "reading")
    # app views, now with their owners
    start_run_detached = _forward(RunsService.start_run_detached, "runs")
    previous_run = _forward(TriageService.previous_run, "triage")
    disagreement_queue = _forward(TriageService.disagreement_queue, "triage")
    with_fresh_notes = _forward(TriageService.with_fresh_notes, "triage")
    label_phrases = _forward(TriageService.label_phrases, "triage")
    adjudication_worklist = _forward(StudyService.adjudication_worklist, "study")
    compare_view = _forward(EvaluationService.compare_view, "evaluation")
    default_robustness_pairs = _forward(FreezeService.default_robustness_pairs, "freeze")
    robustness = _forward(FreezeService.robustness, "freeze")
    # labelset
    mine_labelset = _forward(LabelSetService.mine_labelset, "labelset")
    estimate_mining = _forward(LabelSetService.estimate_mining, "labelset")
    labelset_lexicon = _forward(LabelSetService.labelset_lexicon, "labelset")
    set_review_rule = _forward(LabelSetService.set_review_rule, "labelset")
    review_rule = _forward(LabelSetService.review_rule, "labelset")
    labelsets = _forward(LabelSetService.labelsets, "labelset")
    vote_candidate = _forward(LabelSetService.vote_candidate, "labelset")
    candidate_outcomes = _forward(LabelSetService.candidate_outcomes, "labelset")
    candidate_votes = _forward(LabelSetService.candidate_votes, "labelset")
    labelset_candidates = _forward(LabelSetService.labelset_candidates, "labelset")
    edit_candidate = _forward(LabelSetService.edit_candidate, "labelset")
    split_candidate = _forward(LabelSetService.split_candidate, "labelset")
    settle_candidate = _forward(LabelSetService.settle_candidate, "labelset")
    adopt_labelset = _forward(LabelSetService.adopt_labelset, "labelset")
    export_labelset = _forward(LabelSetService.export_labelset, "labelset")
    # optimising
    run_cohort = _forward(OptimisingService.run_cohort, "optimising")
    evaluate_parts = _forward(OptimisingService.evaluate_parts, "optimising")
    compare_by_part = _forward(OptimisingService.compare_by_part, "optimising")
    history_by_part = _forward(OptimisingService.history_by_part, "optimising")
    phrase_lists = _forward(OptimisingService.phrase_lists, "optimising")
    suggest_failing = _forward(OptimisingService.suggest_failing, "optimising")
    suggest = _forward(OptimisingService.suggest, "optimising")
    development_cohort = _forward(OptimisingService.development_cohort, "optimising")
    evaluate_edit = _forward(OptimisingService.evaluate_edit, "optimising")
    evaluate_drafts = _forward(OptimisingService.evaluate_drafts, "optimising")
    proposals = _forward(OptimisingService.proposals, "optimising")
    proposal = _forward(OptimisingService.proposal, "optimising")
    accept_proposal = _forward(OptimisingService.accept_proposal, "optimising")
    optimise = _forward(OptimisingService.optimise, "optimising")
    optimisation_reports = _forward(OptimisingService.optimisation_reports, "optimising")


__all__ = [
    "Workbench",
    "Service",
    "StudyContext",
    "Actor",
    "init_study",
    "ImportSummary",
    "PermissionDenied",
    "ConflictError",
    "ReasonContradicts",
    "RunSummary",
    "Evaluation",
    "ROLES",
    "PERMISSIONS",
    "compose_text",
    "text_hash",
]
