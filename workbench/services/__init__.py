"""Use-cases of the workbench: the one API the CLI and the Streamlit app call.

`Workbench` is opened on a study folder (app-factory style: each test builds one on a temporary
study). It composes one plain service per area on a shared `StudyContext` (services/base.py); each
service takes the services it uses in its constructor, so the order below is the layering:

- `study` (StudyService, study.py)
- `splits` (SplitsService, splits.py): uses study
- `runner` (RunsService, runs.py): uses study
- `adaptive` (AdaptiveService, adaptive.py): uses study
- `team` (TeamService, team.py): uses study
- `prompts` (PromptsService, prompting.py): uses study, splits
- `model_path` (ModelPathService, model_path.py): uses study, runner
- `evaluation` (EvaluationService, evaluation.py): uses study, splits, runner
- `attributes` (AttributesService, attributes.py): uses study, runner, evaluation
- `freezing` (FreezeService, freezing.py): uses study, splits, runner, evaluation
- `triage` (TriageService, triage.py): uses study, splits, runner, model_path, attributes
- `views` (UISupportService, ui_support.py): uses study, runner, prompts, evaluation, triage, adaptive
- `optimising` (OptimisingService, optimising.py): uses study, splits, runner, model_path, prompts, evaluation, triage

Call a service directly (`wb.runner.start_run("dev")`, `wb.evaluation.evaluate_run(1)`) or through
the flat names (`wb.start_run`), which are the same bound methods: each one below says which service
owns it.
"""

from workbench.services.adaptive import AdaptiveService
from workbench.services.attributes import AttributesService
from workbench.services.base import Service, StudyContext
from workbench.services.evaluation import Evaluation, EvaluationService
from workbench.services.freezing import FreezeService
from workbench.services.model_path import ModelPathService
from workbench.services.optimising import OptimisingService
from workbench.services.prompting import PromptsService
from workbench.services.runs import RunsService, RunSummary
from workbench.services.splits import SplitsService
from workbench.services.study import (
    PERMISSIONS,
    ROLES,
    Actor,
    ConflictError,
    ImportSummary,
    PermissionDenied,
    StudyService,
    compose_text,
    init_study,
    text_hash,
)
from workbench.services.team import TeamService
from workbench.services.triage import TriageService
from workbench.services.ui_support import UISupportService


class _Forward:
    """A facade name that is the named service's method of the same name."""

    def __init__(self, service: str) -> None:
        self.service = service

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, wb, owner=None):
        if wb is None:
            return self
        return getattr(getattr(wb, self.service), self.name)


class Workbench:
    """A study opened for use by one actor: the services of one study context."""

    def __init__(self, root, actor: Actor | None = None, engine=None) -> None:
        self.ctx = ctx = StudyContext(root, actor or Actor(), engine)
        self.study = StudyService(ctx)
        self.splits = SplitsService(ctx, self.study)
        self.runner = RunsService(ctx, self.study)
        self.adaptive = AdaptiveService(ctx, self.study)
        self.team = TeamService(ctx, self.study)
        self.prompts = PromptsService(ctx, self.study, self.splits)
        self.model_path = ModelPathService(ctx, self.study, self.runner)
        self.evaluation = EvaluationService(ctx, self.study, self.splits, self.runner)
        self.attributes = AttributesService(ctx, self.study, self.runner, self.evaluation)
        self.freezing = FreezeService(ctx, self.study, self.splits, self.runner, self.evaluation)
        self.triage = TriageService(ctx, self.study, self.splits, self.runner, self.model_path, self.attributes)
        self.views = UISupportService(
            ctx, self.study, self.runner, self.prompts, self.evaluation, self.triage, self.adaptive
        )
        self.optimising = OptimisingService(
            ctx, self.study, self.splits, self.runner, self.model_path, self.prompts, self.evaluation, self.triage
        )

    def as_actor(self, actor: Actor) -> "Workbench":
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
    permission_warnings = _Forward("study")
    migrate = _Forward("study")
    blind_scope = _Forward("study")
    save_config = _Forward("study")
    cohort_id = _Forward("study")
    label_id = _Forward("study")
    cohorts = _Forward("study")
    import_reports = _Forward("study")
    import_openi = _Forward("study")
    import_readings = _Forward("study")
    record_reading = _Forward("study")
    reader_progress = _Forward("study")
    my_readings = _Forward("study")
    reference = _Forward("study")
    item_reference = _Forward("study")
    reference_matrix = _Forward("study")
    reference_summary = _Forward("study")
    adjudication_queue = _Forward("study")
    adjudicate = _Forward("study")
    adjudication_history = _Forward("study")
    item_votes = _Forward("study")
    agreement = _Forward("study")
    prompt_files = _Forward("study")
    prompt_set = _Forward("study")
    unblinded_prompt_set = _Forward("study")
    prompt_commit = _Forward("study")
    can_see_report = _Forward("study")
    # splits
    cohort_role = _Forward("splits")
    set_cohort_role = _Forward("splits")
    split_cohort = _Forward("splits")
    split_parts = _Forward("splits")
    split_summary = _Forward("splits")
    tuning_reports = _Forward("splits")
    require_tuning_report = _Forward("splits")
    queue_reports = _Forward("splits")
    check_test_lock = _Forward("splits")
    # runner
    labeller_settings = _Forward("runner")
    start_run = _Forward("runner")
    unchanged_run = _Forward("runner")
    interrupted_run = _Forward("runner")
    interrupted_runs = _Forward("runner")
    resume_run = _Forward("runner")
    retry_failed = _Forward("runner")
    pending_batch = _Forward("runner")
    batch_jobs = _Forward("runner")
    prediction_attributes = _Forward("runner")
    runs = _Forward("runner")
    run_info = _Forward("runner")
    predictions = _Forward("runner")
    prediction_matrix = _Forward("runner")
    estimate_run = _Forward("runner")
    check_budget = _Forward("runner")
    # adaptive
    set_adaptive = _Forward("adaptive")
    check_sample_change = _Forward("adaptive")
    agreement_sample = _Forward("adaptive")
    agreement_scope = _Forward("adaptive")
    agreement_sample_reports = _Forward("adaptive")
    next_report = _Forward("adaptive")
    open_report = _Forward("adaptive")
    work_list = _Forward("adaptive")
    reading_order_text = _Forward("adaptive")
    adaptive_status = _Forward("adaptive")
    # team
    add_user = _Forward("team")
    set_role = _Forward("team")
    set_disabled = _Forward("team")
    set_password = _Forward("team")
    users = _Forward("team")
    authenticate = _Forward("team")
    authenticate_token = _Forward("team")
    create_token = _Forward("team")
    revoke_tokens = _Forward("team")
    start_web_session = _Forward("team")
    resume_web_session = _Forward("team")
    end_web_session = _Forward("team")
    actor_for = _Forward("team")
    audit_log = _Forward("team")
    verify_audit = _Forward("team")
    check_bundle = _Forward("team")
    allow_endpoint = _Forward("team")
    disallow_endpoint = _Forward("team")
    migrate_database = _Forward("team")
    # prompts
    label_prompt = _Forward("prompts")
    asked_label = _Forward("prompts")
    draft = _Forward("prompts")
    save_draft = _Forward("prompts")
    discard_draft = _Forward("prompts")
    drafts = _Forward("prompts")
    save_prompts = _Forward("prompts")
    commit_drafts = _Forward("prompts")
    working_edit = _Forward("prompts")
    prompt_status = _Forward("prompts")
    pending_prompt = _Forward("prompts")
    pending_labels = _Forward("prompts")
    editable_text = _Forward("prompts")
    store_edited_text = _Forward("prompts")
    set_prompt_field = _Forward("prompts")
    save_labels = _Forward("prompts")
    revert_label = _Forward("prompts")
    import_prompt_dictionary = _Forward("prompts")
    prompt_history = _Forward("prompts")
    prompt_diff = _Forward("prompts")
    diff_against_draft = _Forward("prompts")
    previous_version = _Forward("prompts")
    policy_table = _Forward("prompts")
    policy_conflicts = _Forward("prompts")
    add_example_from_case = _Forward("prompts")
    # model_path
    call_facts = _Forward("model_path")
    call_costs = _Forward("model_path")
    evidence_check = _Forward("model_path")
    call_fact = _Forward("model_path")
    measure_noise = _Forward("model_path")
    noise_rates = _Forward("model_path")
    comparison_noise = _Forward("model_path")
    suggestion_noise_lines = _Forward("model_path")
    suggestion_noise = _Forward("model_path")
    # evaluation
    evaluation_inputs = _Forward("evaluation")
    macro_policy = _Forward("evaluation")
    evaluate_run = _Forward("evaluation")
    reference_drift = _Forward("evaluation")
    compare_runs = _Forward("evaluation")
    iteration_history = _Forward("evaluation")
    human_ceiling = _Forward("evaluation")
    case_matrix = _Forward("evaluation")
    search_run = _Forward("evaluation")
    # attributes
    reference_attributes = _Forward("attributes")
    attribute_ties = _Forward("attributes")
    attribute_inputs = _Forward("attributes")
    attribute_rows = _Forward("attributes")
    attribute_metrics = _Forward("attributes")
    attribute_failures = _Forward("attributes")
    record_reading_attributes = _Forward("attributes")
    reader_attributes = _Forward("attributes")
    adjudicate_attribute = _Forward("attributes")
    # freezing
    justifying_run = _Forward("freezing")
    default_cohort = _Forward("freezing")
    freeze = _Forward("freezing")
    bundle_content = _Forward("freezing")
    score_generated = _Forward("freezing")
    test_look = _Forward("freezing")
    test_looks = _Forward("freezing")
    bundles = _Forward("freezing")
    # triage
    disagreements = _Forward("triage")
    case = _Forward("triage")
    add_note = _Forward("triage")
    notes = _Forward("triage")
    note_counts = _Forward("triage")
    # views
    start_run_detached = _Forward("views")
    readers = _Forward("views")
    report_text = _Forward("views")
    reading_queue = _Forward("views")
    reading_draft = _Forward("views")
    save_reading_draft = _Forward("views")
    reading_draft_ids = _Forward("views")
    submit_reading = _Forward("views")
    reading_note = _Forward("views")
    reading_notes = _Forward("views")
    undo_last_save = _Forward("views")
    last_saved_report = _Forward("views")
    my_reading_list = _Forward("views")
    assign_work = _Forward("views")
    work_list_status = _Forward("views")
    previous_run = _Forward("views")
    disagreement_queue = _Forward("views")
    with_fresh_notes = _Forward("views")
    label_phrases = _Forward("views")
    adjudication_worklist = _Forward("views")
    compare_view = _Forward("views")
    default_robustness_pairs = _Forward("views")
    robustness = _Forward("views")
    # optimising
    run_cohort = _Forward("optimising")
    evaluate_parts = _Forward("optimising")
    compare_by_part = _Forward("optimising")
    history_by_part = _Forward("optimising")
    phrase_lists = _Forward("optimising")
    suggest_failing = _Forward("optimising")
    suggest = _Forward("optimising")
    development_cohort = _Forward("optimising")
    evaluate_edit = _Forward("optimising")
    evaluate_drafts = _Forward("optimising")
    proposals = _Forward("optimising")
    proposal = _Forward("optimising")
    accept_proposal = _Forward("optimising")
    optimise = _Forward("optimising")
    optimisation_reports = _Forward("optimising")


__all__ = [
    "Workbench",
    "Service",
    "StudyContext",
    "Actor",
    "init_study",
    "ImportSummary",
    "PermissionDenied",
    "ConflictError",
    "RunSummary",
    "Evaluation",
    "ROLES",
    "PERMISSIONS",
    "compose_text",
    "text_hash",
]
