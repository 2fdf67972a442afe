"""Adjudicating tied attributes: the listing, the decision (service and CLI), blinding and the audit trail."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner
from test_attributes import attribute_study

from workbench.services import Actor, PermissionDenied
from workbench.study import StudyError

REPORTS = [
    ("r1", "Small left pleural effusion.", ""),
    ("r3", "Bilateral effusions.", ""),
    ("r4", "Mild cardiomegaly.", ""),
]
# r1: both readers tick the effusion, sides tie (left / right), severities agree (mild)
# r3: two of three tick it (presence 1), the two sides tie; r4: presence itself ties (2 of 4), so its
# severity tie waits on the presence adjudication first
READINGS = """report_id,label,reader,value,side,severity
r1,Effusion,ann,1,left,mild
r1,Effusion,bob,1,right,mild
r3,Effusion,ann,1,left,
r3,Effusion,bob,0,,
r3,Effusion,cat,1,bilateral,
r4,Cardiomegaly,ann,1,,mild
r4,Cardiomegaly,bob,1,,severe
r4,Cardiomegaly,cat,0,,
r4,Cardiomegaly,dan,0,,
"""


@pytest.fixture
def study(tmp_path):
    """A chestxray14 study with attribute ties."""
    wb, _ = attribute_study(tmp_path, REPORTS, READINGS)
    yield wb
    wb.engine.dispose()


def keys(frame) -> set:
    return set(zip(frame["report_id"], frame["label"], frame["attribute"], strict=False))


def test_ties_of_positive_findings_are_listed_with_the_readers_values_and_counts(study):
    ties = study.attribute_ties("dev")
    assert keys(ties) == {("r1", "effusion", "side"), ("r3", "effusion", "side")}
    row = ties.set_index(["report_id", "label", "attribute"]).loc[("r1", "effusion", "side")]
    assert row["votes"] == "left 1, right 1" and row["tied"] == "left, right" and row["readers"] == 2
    assert list(ties.columns) == ["report_id", "label", "attribute", "votes", "tied", "readers"]
    assert keys(study.attribute_ties()) == keys(ties), "without a cohort: every cohort"


def test_an_adjudication_settles_the_tie_and_is_audited(study):
    study.adjudicate_attribute("r1", "effusion", "side", "Left", "the text says left")
    assert keys(study.attribute_ties("dev")) == {("r3", "effusion", "side")}
    ref = study.reference_attributes("dev").set_index(["report_id", "label", "attribute"])
    assert ref.loc[("r1", "effusion", "side"), "reference"] == "left"
    event = study.audit_log(entity="reading attribute").iloc[0]
    assert event["entity_key"] == "r1/effusion/side" and "the text says left" in str(event["new"])


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ("r1", "effusion", "severity", "mild"),
            "no tie waits on r1 / effusion / severity: the readers' majority is mild",
        ),
        (("r1", "effusion", "side", "up"), "unknown value 'up'"),
        (("r9", "effusion", "side", "left"), "no report 'r9'"),
        (("r1", "cardiomegaly", "side", "left"), "has no attribute 'side'"),
    ],
)
def test_an_adjudication_that_settles_no_tie_is_refused_and_writes_nothing(study, args, message):
    with pytest.raises(StudyError, match=message):
        study.adjudicate_attribute(*args)
    assert study.audit_log(entity="reading attribute").empty


def test_a_reader_sees_only_ties_of_reports_they_finished_and_cannot_adjudicate(study):
    reader = study.as_actor(Actor("ann", "reader"))
    with pytest.raises(PermissionDenied):
        reader.adjudicate_attribute("r1", "effusion", "side", "left")
    seen = keys(reader.attribute_ties("dev"))
    assert seen <= keys(study.attribute_ties("dev"))
    assert all(r in reader.blind_scope() for r, _, _ in seen)


def run(study, *args):
    from workbench.cli import main

    return CliRunner().invoke(main, [*args, "--study", str(study.root)])


def test_cli_lists_ties_in_three_formats_and_adjudicates_one(study):
    listed = run(study, "attribute-ties", "--format", "csv")
    assert listed.exit_code == 0, listed.output
    rows = list(csv.DictReader(io.StringIO(listed.output)))
    assert list(rows[0]) == ["report_id", "label", "attribute", "votes", "tied", "readers"] and len(rows) == 2
    assert len(json.loads(run(study, "attribute-ties", "--format", "json").output)) == 2
    table = run(study, "attribute-ties", "--cohort", "dev")
    assert "left 1, right 1" in table.output and "2 attribute tie(s) waiting" in table.output
    done = run(study, "adjudicate-attribute", "r1", "Effusion", "side", "right", "--reason", "right on the film")
    assert done.exit_code == 0, done.output
    assert done.output.strip() == "adjudicated r1/effusion side = right"
    assert keys(study.attribute_ties("dev")) == {("r3", "effusion", "side")}
    wrong = run(study, "adjudicate-attribute", "r1", "Effusion", "severity", "mild")
    assert wrong.exit_code == 2 and "no tie waits on r1 / effusion / severity" in wrong.output
    assert len(wrong.output.strip().splitlines()) == 1


def test_reference_counts_attribute_ties_waiting(study):
    result = run(study, "reference")
    assert result.exit_code == 0, result.output
    assert "attribute ties waiting for adjudication: 2" in result.output
