"""Use-cases of the workbench: the one API the CLI and the Streamlit app call.

`Workbench` is opened on a study folder (app-factory style: each test builds one on a temporary
study). Its methods come from one mixin per area so each file stays readable.
"""

from workbench.services.adaptive import AdaptiveService
from workbench.services.evaluation import Evaluation, EvaluationService
from workbench.services.freezing import FreezeService
from workbench.services.optimising import OptimisingService
from workbench.services.prompting import PromptsService
from workbench.services.runs import RunsService, RunSummary
from workbench.services.team import TeamService
from workbench.services.ui_support import UISupportService
from workbench.services.study import (
    PERMISSIONS, ROLES, Actor, ConflictError, ImportSummary, PermissionDenied, StudyService, compose_text,
    init_study, text_hash,
)


class Workbench(AdaptiveService, OptimisingService, UISupportService, TeamService, FreezeService, EvaluationService, PromptsService,
                RunsService, StudyService):
    """A study opened for use by one actor.

    OptimisingService comes first: its bundles() adds test-look counts and its commit_drafts() records
    where an accepted proposal came from, both around the methods of the mixins after it. AdaptiveService
    comes before UISupportService: its work_list() replaces the plain one while adaptive reading is on.
    """


__all__ = ["Workbench", "Actor", "init_study", "ImportSummary", "PermissionDenied", "ConflictError", "RunSummary", "Evaluation",
           "ROLES", "PERMISSIONS", "compose_text", "text_hash"]
