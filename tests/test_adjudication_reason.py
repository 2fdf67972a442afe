"""An adjudication whose reason names the other value ('absent' with value 1) is questioned, not taken
as written (issue 32, item 14): the service refuses it unless confirmed, the CLI unless --confirm."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.core.reference import reason_contradiction
from workbench.services import ReasonContradicts


@pytest.mark.parametrize(
    "value, reason, clash",
    [
        (1, "Hedged wording: absent per study policy", "'absent'"),
        (1, "Resolved or prior: absent per study policy", "'absent'"),
        (1, "not present on re-reading", "'not present'"),
        (0, "Hedged wording: present per study policy", "'present'"),
        (0, "clearly positive", "'positive'"),
        (0, "Hedged wording: absent per study policy", None),
        (1, "Hedged wording: present per study policy", None),
        (0, "not present on re-reading", None),
        (1, "clear on re-reading", None),
        (1, "present per policy, absent on the old film", None),  # names both: taken as written
    ],
)
def test_reason_naming_the_other_value_is_found(value, reason, clash):
    found = reason_contradiction(value, reason)
    assert (found is None) if clash is None else (clash in found)


def test_contradicting_reason_refused_then_saved_when_confirmed(small_study):
    with pytest.raises(ReasonContradicts, match="'absent' but the value is 1"):
        small_study.adjudicate("s3", "pneumonia", 1, "Hedged wording: absent per study policy")
    assert small_study.adjudication_history("s3", "pneumonia").empty, "nothing stored on a refusal"
    small_study.adjudicate("s3", "pneumonia", 1, "Hedged wording: absent per study policy", confirmed=True)
    history = small_study.adjudication_history("s3", "pneumonia")
    assert history["value"].tolist() == [1]


def test_cli_refuses_a_contradicting_reason_unless_confirmed(small_study):
    args = ["adjudicate", "s3", "pneumonia", "1", "--reason", "absent on review", "--study", str(small_study.root)]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2 and "'absent' but the value is 1" in refused.output and "--confirm" in refused.output
    assert small_study.adjudication_history("s3", "pneumonia").empty
    saved = CliRunner().invoke(main, [*args, "--confirm"])
    assert saved.exit_code == 0, saved.output
    assert small_study.adjudication_history("s3", "pneumonia")["value"].tolist() == [1]
