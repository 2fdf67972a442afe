"""Issue 34 item 5: only this study's frozen bundles, by name, may look at the locked test cohort; a path or a
hand-made bundle is refused and the refusal is audited; nothing is measured."""

from __future__ import annotations

import pytest
from conftest import DATA

from workbench import bundle as bundle_mod
from workbench.services import Actor
from workbench.study import StudyError


@pytest.fixture
def frozen_with_test_cohort(small_study, tmp_path):
    """small_study frozen as v1 by its admin, with a locked test cohort 'locked'."""
    locked = tmp_path / "locked.csv"
    locked.write_text((DATA / "reports_small.csv").read_text().replace("\ns", "\nt"))
    small_study.import_reports(locked, "locked")
    small_study.set_cohort_role("locked", "test")
    small_study.start_run("dev")
    small_study.freeze("v1")
    return small_study


def self_made(wb, folder, name: str) -> None:
    """A bundle made by hand from v1 (an edited prompt), written with a correct content hash."""
    content, _sha = bundle_mod.read_bundle_file(wb.paths.bundles / "v1.json")
    content["name"] = name
    content["prompts"]["note"] = "edited by hand"
    bundle_mod.write_bundle(folder, content)


def refusals(wb) -> list[str]:
    events = wb.audit_log()
    return events.loc[events["action"] == "look refused", "entity_key"].tolist()


@pytest.mark.parametrize("name", ["../../../pe/mine", "/tmp/mine", "pe/mine", "..", ".hidden"])
def test_a_path_is_not_a_bundle_name(frozen_with_test_cohort, tmp_path, name):
    wb = frozen_with_test_cohort
    engineer = wb.as_actor(Actor(user="pe", role="prompt_engineer"))
    (tmp_path / "pe").mkdir(exist_ok=True)
    self_made(wb, tmp_path / "pe", "mine")
    with pytest.raises(StudyError, match="not a path or a file; only this study's frozen bundles may look"):
        engineer.test_look(name, "locked")
    assert wb.test_looks().empty
    assert refusals(wb) == [f"locked/{name}"]


def test_a_hand_made_bundle_in_the_bundles_folder_is_refused(frozen_with_test_cohort):
    wb = frozen_with_test_cohort
    self_made(wb, wb.paths.bundles, "mine")
    engineer = wb.as_actor(Actor(user="pe", role="prompt_engineer"))
    with pytest.raises(StudyError, match="no freeze of that bundle with this content"):
        engineer.test_look("mine", "locked")
    assert wb.test_looks().empty and refusals(wb) == ["locked/mine"]
