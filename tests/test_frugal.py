"""Frugal optimisation and prefix-cache friendly calls (issue 25, items 6 and 7).

Screening: each proposal is labelled first on the label's tuning disagreements plus a seeded,
stratified sample of agreements; only those that pass are labelled in full. The fixture study is
test_optimising's plus three "calcified granuloma" reports read as nodules and 300 normal reports: the offline proposer
adds "granuloma" to nodule's look-for, a change that fixes two tuning cases, which chance alone
could give, so the screen turns it down. Calls are counted after the cache, as optimise counts them,
with the offline labeller, and on the server side through the local fake server (real HTTP).
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from conftest import copy_study
from fake_llm_server import last_user_text, report_part, running_server
from test_optimising import KINDS, LABELS14, _write

from workbench.core import screening, splits
from workbench.services import init_study

GRANULOMA = (3, "Calcified granuloma in the left upper lobe.", {"nodule"})
NORMALS = (300, "Heart size normal. Lungs clear.", set())  # agreements: the screen samples them, a full evaluation reads all


def _rows_and_reference():
    """Report ids with text and the reference matrix: test_optimising's kinds plus the granuloma reports."""
    rows, ref, n = [], {}, 0
    for count, text, positives in [*KINDS, GRANULOMA, NORMALS]:
        for _ in range(count):
            n += 1
            rows.append((f"d{n:03d}", f"{text} Study {n}."))  # no two alike: one call key per report
            ref[f"d{n:03d}"] = {lab: int(lab in positives) for lab in LABELS14}
    return rows, pd.DataFrame.from_dict(ref, orient="index")[LABELS14]


def _study(folder, **run):
    """A chestxray14 study with the dev cohort split 70/30 (seed 0) and one finished run (run: start_run arguments)."""
    rows, ref = _rows_and_reference()
    wb = init_study(folder / "study", vocab="chestxray14", rule={"rule": "majority", "n": 1})
    reports, readings = _write(folder, "dev", rows, ref)
    wb.import_reports(reports, "dev")
    wb.import_readings(readings)
    wb.split_cohort("dev", validation=0.3, seed=0)
    summary = wb.start_run("dev", **run)
    assert summary.status == "finished", summary.message()
    wb.engine.dispose()
    return folder / "study", summary.run_id


@pytest.fixture(scope="module")
def frugal_template(tmp_path_factory):
    """The fixture study labelled by the offline labeller, built once (tests optimise copies of it)."""
    return _study(tmp_path_factory.mktemp("frugal-template"))


def test_screen_sample_keeps_every_disagreement_and_a_seeded_stratified_share_of_agreements():
    ids = [f"r{i}" for i in range(400)]
    reference = pd.Series([1] * 100 + [0] * 300, index=ids)
    prediction = reference.copy()
    prediction.iloc[:5] = 0  # five missed findings
    chosen = screening.screen_sample(reference, prediction, seed=0)
    assert set(chosen.disagreements) == {"r0", "r1", "r2", "r3", "r4"}
    assert len(chosen.agreements) == screening.MIN_AGREEMENTS and not set(chosen.agreements) & set(chosen.disagreements)
    positives = sum(reference[r] == 1 for r in chosen.agreements)
    assert positives == round(screening.MIN_AGREEMENTS * 95 / 395)  # stratified by reference value
    assert chosen == screening.screen_sample(reference, prediction, seed=0)  # same seed, same screen
    # the weights scale the sample up to every agreement of its stratum
    assert sum(chosen.weights.values()) == pytest.approx(395)


def test_screen_verdict_estimates_broken_on_all_of_tuning_and_needs_more_than_chance():
    ids = [f"r{i}" for i in range(400)]
    reference = pd.Series([1] * 100 + [0] * 300, index=ids)
    before = reference.copy()
    before.iloc[:10] = 0
    chosen = screening.screen_sample(reference, before, seed=0)
    fixes_all = before.copy()
    fixes_all.iloc[:10] = 1
    good = screening.screen_verdict(chosen, reference, before, fixes_all)
    assert (good.fixed, good.broken, good.passed) == (10, 0, True)
    fixes_two = before.copy()
    fixes_two.iloc[:2] = 1
    weak = screening.screen_verdict(chosen, reference, before, fixes_two)
    assert (weak.fixed, weak.passed) == (2, False) and "screened out" in weak.why()
    breaks = fixes_all.copy()
    breaks[list(chosen.agreements)[-3:]] = 1 - breaks[list(chosen.agreements)[-3:]]  # 3 sampled agreements broken
    worse = screening.screen_verdict(chosen, reference, before, breaks)
    assert worse.broken == 3 and worse.broken_estimate > 3 * 2.9 and not worse.passed  # each stands for about 3
    noisy = screening.screen_verdict(chosen, reference, before, fixes_all, noise_rate=0.1)
    assert noisy.noise_allowance == pytest.approx(0.1 * good.reports) and not noisy.passed


def _optimise(template, target, screen: bool, **options):
    """optimise on a private copy of a labelled study (so no copy finds another's answers in the cache)."""
    folder, run_id = template
    wb = copy_study(folder, target)
    return wb, wb.optimise(labels=["cardiomegaly", "mass", "edema", "nodule"], rounds=3, run_id=run_id,
                           proposer="offline", screen=screen, **options)


def test_screening_makes_fewer_calls_and_keeps_the_same_changes(frugal_template, tmp_path):
    from workbench.services.optimising import report_markdown

    _, off = _optimise(frugal_template, tmp_path / "off", screen=False)
    _, on = _optimise(frugal_template, tmp_path / "on", screen=True)
    kept = lambda report: {c["label"] for e in report["rounds"] for c in e["changes"]}  # noqa: E731
    assert kept(off) == {"cardiomegaly", "mass", "edema", "nodule"}
    assert kept(on) == {"cardiomegaly", "mass", "edema"}  # the granuloma look-for fixes 2: screened out
    screened_out = [r for e in on["rounds"] for r in e["rejected"] if r["status"] == "screened out"]
    # round 1's proposal, then the smaller one offered after it (the same two cases at most)
    assert {r["label"] for r in screened_out} == {"nodule"} and screened_out[0]["screen"]["fixed"] == 2
    assert on["calls"]["made"] < off["calls"]["made"]
    scr = on["screen"]
    assert (scr["on"], scr["screened_out"], scr["screened"]) == (True, len(screened_out), 3 + len(screened_out))
    assert on["calls"]["made"] == scr["calls"] + scr["full_calls"]  # the full evaluation reuses the screen's calls
    assert off["screen"]["on"] is False and off["calls"]["made"] == off["screen"]["full_calls"]
    for change in (c for e in on["rounds"] for c in e["changes"]):
        assert change["screen"]["passed"] and change["calls_made"] > change["screen"]["reports"]
    assert on["end"]["validation"]["macro_f1"] > on["start"]["validation"]["macro_f1"]
    md = report_markdown(on)
    assert "nodule: screened out" in md and f"{len(screened_out)} screened out" in md
    assert "calls made per kept change (3 kept)" in md
    assert "Screening off" in report_markdown(off)


def test_cli_optimise_no_screen_flag(frugal_template, tmp_path):
    from click.testing import CliRunner

    from workbench.cli import main

    folder, run_id = frugal_template
    copy_study(folder, tmp_path / "study").engine.dispose()
    args = ["optimise", "--study", str(tmp_path / "study"), "--labels", "nodule", "--run", str(run_id), "--proposer", "offline"]
    screened = CliRunner().invoke(main, args)
    assert screened.exit_code == 0, screened.output
    assert "nodule: screened out" in screened.output and "0 evaluated in full" in screened.output
    full = CliRunner().invoke(main, [*args, "--no-screen"])
    assert full.exit_code == 0, full.output
    assert "Screening off" in full.output and "screened out" not in full.output


def _follows_look_for(messages: list[dict]) -> str:
    """A model that answers 1 when the report holds one of the prompt's look-for phrases."""
    user = last_user_text(messages)
    report = report_part(user)
    line = re.search(r"Look specifically for phrases such as: (.*)\.", user.replace(report, ""))
    phrases = re.findall(r'"([^"]+)"', line.group(1)) if line else []
    return json.dumps({"value": int(any(p.lower() in report.lower() for p in phrases)), "evidence": ""})


def test_screening_sends_fewer_chat_requests_to_a_model_over_http(tmp_path):
    with running_server(answer_fn=_follows_look_for) as srv:
        model = {"model": "openai/fake", "api_base": srv.url, "concurrency": 4, "max_retries": 0}
        template = _study(tmp_path / "template", labels=["cardiomegaly", "nodule"], **model)
        counts, reports = {}, {}
        for screen in (False, True):
            srv.reset()
            folder, run_id = template
            wb = copy_study(folder, tmp_path / f"screen-{screen}")
            reports[screen] = wb.optimise(labels=["cardiomegaly", "nodule"], rounds=2, run_id=run_id,
                                          proposer="offline", screen=screen)
            counts[screen] = srv.count
    assert counts[True] < counts[False]
    assert counts[True] == reports[True]["calls"]["made"] and counts[False] == reports[False]["calls"]["made"]
    assert reports[True]["screen"]["screened_out"] >= 1
    assert {c["label"] for e in reports[True]["rounds"] for c in e["changes"]} == {"cardiomegaly"}


# ---------------------------------------------------------------- 7. prefix-cache friendly


def test_calls_sharing_a_label_prompt_go_together_and_cached_tokens_are_stored_and_summed(small_study):
    wb = small_study
    labels = ["pleural_effusion", "pneumothorax", "consolidation"]
    # a provider prefix cache with room for one prompt: interleaved labels would evict each other every call
    with running_server(prefix_slots=1) as srv:
        summary = wb.start_run("dev", labels=labels, model="openai/fake", api_base=srv.url, concurrency=1,
                               max_retries=0)
        assert summary.status == "finished" and srv.count == 8 * 3
        asked = [re.search(r"Definition of ([^:]+):", last_user_text(b["messages"])).group(1) for b in srv.bodies]
        switches = sum(a != b for a, b in zip(asked, asked[1:]))
        assert switches == 2  # each label's 8 calls one after another
        facts = wb.call_facts(summary.run_id)
        hits = pd.to_numeric(facts["cached_tokens"]).fillna(0)
        assert int((hits > 0).sum()) == 8 * 3 - 3  # every call but each label's first found its prefix cached
        costs = wb.call_costs(summary.run_id)
        assert costs["cached_tokens"].sum() == int(hits.sum()) > 0
