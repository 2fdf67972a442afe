"""The offline proposer on real reports (OpenI, ../shared/datasets): skipped when the datasets are absent."""

from __future__ import annotations

import pytest
from conftest import require_datasets


@pytest.fixture(scope="module")
def openi(tmp_path_factory):
    """OpenI with its gold standard, split 70/30 (seed 0), labelled once by the offline labeller."""
    datasets = require_datasets()
    from workbench.services import init_study

    wb = init_study(tmp_path_factory.mktemp("openi") / "study", vocab="chestxray14", rule={"rule": "majority", "n": 1})
    wb.import_openi(datasets / "openi" / "reports.csv", datasets / "openi" / "labels14.csv", "dev")
    wb.split_cohort("dev", validation=0.3, seed=0)
    wb.run_id = wb.start_run("dev", labels=["pleural_thickening", "hernia"]).run_id
    yield wb
    wb.engine.dispose()


def test_split_spreads_every_label_over_both_parts(openi):
    summary = openi.split_summary("dev").set_index("label")
    with_positives = summary[summary["tuning_positives"] + summary["validation_positives"] >= 2]
    assert (with_positives["tuning_positives"] > 0).all() and (with_positives["validation_positives"] > 0).all()
    assert summary.attrs["reports"] == {"tuning": 2156, "validation": 924}


def test_proposals_from_disagreements_alone_hold_on_validation(openi):
    thick = openi.suggest("pleural_thickening", openi.run_id, proposer="offline")
    assert thick.status == "ok" and thick.offered, thick
    assert "thickening" in thick.edit["fields"]["look_for"]  # "apical pleural thickening" etc. were missed
    # "peribronchial" (peribronchial thickening is bronchial, not pleural) used to come with it and win one more
    # validation case; it names no finding of pleural thickening and is refused (docs/optimisation.md)
    assert not any("peribronchial" in p for p in thick.edit["fields"]["look_for"])
    val = thick.evaluation["parts"]["validation"]
    assert val["f1_after"] >= val["f1_before"] and val["fixed"] >= val["broken"]
    hernia = openi.suggest("hernia", openi.run_id, proposer="offline")  # no gold positive: hiatal hernias are false
    rules = hernia.edit["fields"]["do_not_label_when"]
    assert any("'hiatal'" in r for r in rules) and hernia.offered
    validation = {r for r, p in openi.split_parts("dev").items() if p == "validation"}
    for result in (thick, hernia):
        sources = {ex.get("source_report_id") for ex in result.edit["fields"].get("examples", [])}
        assert not sources & validation
