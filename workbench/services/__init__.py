"""Use-cases of the workbench: the one API the CLI and the Streamlit app call.

`Workbench` is opened on a study folder (app-factory style: each test builds one on a temporary
study). Its methods come from one mixin per area so each file stays readable.
"""

from workbench.services.attributes import AttributesService
from workbench.services.adaptive import AdaptiveService
from workbench.services.evaluation import Evaluation, EvaluationService
from workbench.services.freezing import FreezeService
from workbench.services.model_path import ModelPathService
from workbench.services.optimising import OptimisingService
from workbench.services.prompting import PromptsService
from workbench.services.runs import RunsService, RunSummary
from workbench.services.team import TeamService
from workbench.services.ui_support import UISupportService
from workbench.services.study import (
    PERMISSIONS, ROLES, Actor, ConflictError, ImportSummary, PermissionDenied, StudyService, compose_text,
    init_study, text_hash,
)


class Workbench(AdaptiveService, OptimisingService, UISupportService, TeamService, FreezeService, EvaluationService,
                PromptsService, ModelPathService, RunsService, AttributesService, StudyService):
    """A study opened for use by one actor.

    OptimisingService comes first: its bundles() adds test-look counts around FreezeService's. AdaptiveService
    comes before UISupportService: its work_list() replaces the plain one while adaptive reading is on.
    """


__all__ = ["Workbench", "Actor", "init_study", "ImportSummary", "PermissionDenied", "ConflictError", "RunSummary", "Evaluation",
           "ROLES", "PERMISSIONS", "compose_text", "text_hash"]
