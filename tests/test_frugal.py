"""Frugal optimisation and prefix-cache friendly calls (issue 25, items 6 and 7).

Screening: each proposal is labelled first on the label's tuning disagreements plus a seeded,
stratified sample of agreements; only those that pass are labelled in full. The fixture study is
test_optimising's plus three "calcified granuloma" reports read as nodules (the study's nodule definition says so, which
lets "granuloma" be a look-for phrase of nodule) and 300 normal reports: the offline proposer adds "granuloma" to nodule's
look-for, a change that fixes two tuning cases, which chance alone
could give, so the screen turns it down. Calls are counted after the cache, as optimise counts them,
with the offline labeller, and on the server side through the local fake server (real HTTP).
"""

from __future__ import annotations

import dataclasses
import json
import re

import pandas as pd
import pytest
from conftest import copy_study
from fake_llm_server import last_user_text, report_part, running_server
from test_optimising import KINDS, LABELS14, _write

from workbench.core import screening
from workbench.services import Workbench, init_study

GRANULOMA = (3, "Calcified granuloma in the left upper lobe.", {"nodule"})
NORMALS = (
    300,
    "Heart size normal. Lungs clear.",
    set(),
)  # agreements: the screen samples them, a full evaluation reads all


def _rows_and_reference(extra=()):
    """Report ids with text and the reference matrix: test_optimising's kinds plus the granuloma reports."""
    rows, ref, n = [], {}, 0
    for count, text, positives in [*KINDS, GRANULOMA, NORMALS, *extra]:
        for _ in range(count):
            n += 1
            rows.append((f"d{n:03d}", f"{text} Study {n}."))  # no two alike: one call key per report
            ref[f"d{n:03d}"] = {lab: int(lab in positives) for lab in LABELS14}
    return rows, pd.DataFrame.from_dict(ref, orient="index")[LABELS14]


def _study(folder, extra=(), **run):
    """A chestxray14 study with the dev cohort split 70/30 (seed 0) and one finished run (run: start_run arguments;
    extra: more (count, text, positive labels) kinds of report)."""
    rows, ref = _rows_and_reference(extra)
    wb = init_study(folder / "study", vocab="chestxray14", rule={"rule": "majority", "n": 1})
    reports, readings = _write(folder, "dev", rows, ref)
    wb.import_reports(reports, "dev")
    wb.import_readings(readings)
    wb.split_cohort("dev", validation=0.3, seed=0)
    nodule = wb.label_prompt("nodule")
    definition = f"{nodule.definition} Includes calcified granulomas."  # as the fixture's reference reads them
    wb.save_prompts(
        [dataclasses.replace(nodule, definition=definition)], "Nodules include granulomas", wb.prompt_commit()
    )
    summary = wb.start_run("dev", **run)
    assert summary.status == "finished", summary.message()
    wb.engine.dispose()
    return folder / "study", summary.run_id


@pytest.fixture(scope="module")
def frugal_template(tmp_path_factory):
    """The fixture study labelled by the offline labeller, built once (tests optimise copies of it)."""
    return _study(tmp_path_factory.mktemp("frugal-template"))


def _ten_missed():
    """400 tuning reports (100 positive), a labeller that misses the first 10 positives, and its screen sample."""
    ids = [f"r{i}" for i in range(400)]
    reference = pd.Series([1] * 100 + [0] * 300, index=ids)
    before = reference.copy()
    before.iloc[:10] = 0
    return reference, before, screening.screen_sample(reference, before, seed=0)


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
    reference, before, chosen = _ten_missed()
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


def test_a_screen_asks_the_agreements_only_when_the_proposal_could_still_pass():
    reference, before, chosen = _ten_missed()
    first = screening.fixable(chosen, reference, before)
    assert first == [f"r{i}" for i in range(10)]  # the disagreements: the only reports a change can fix
    fixes_two = before.copy()
    fixes_two.iloc[:2] = 1
    # answers on the disagreements only: even with no agreement broken, 2 fixed is what chance gives
    partial = screening.screen_verdict(chosen, reference, before, fixes_two.loc[first], asked=first)
    full = screening.screen_verdict(chosen, reference, before, fixes_two)
    assert (partial.passed, full.passed) == (False, False) and partial.stopped and not full.stopped
    assert partial.reports == 10 < full.reports and "before the agreements were asked" in partial.why()
    fixes_all = before.copy()
    fixes_all.iloc[:10] = 1
    hopeful = screening.screen_verdict(chosen, reference, before, fixes_all.loc[first], asked=first)
    assert hopeful.passed and not hopeful.stopped  # it could pass: the agreements are asked next


def test_a_change_that_cannot_raise_the_labels_f1_is_screened_out():
    ids = [f"r{i}" for i in range(300)]
    reference = pd.Series(0, index=ids)  # no reference positive on tuning (OpenI's hernia)
    before = reference.copy()
    before.iloc[:20] = 1  # twenty false findings
    chosen = screening.screen_sample(reference, before, seed=0)
    never_yes = pd.Series(0, index=ids)  # fixes all twenty, breaks nothing: McNemar alone would pass it
    for policy in ("exclude", "zero", "undefined"):  # F1 is 0 before and 0 or undefined after
        verdict = screening.screen_verdict(chosen, reference, before, never_yes, zero_division=policy)
        assert verdict.fixed == 20 and verdict.p_value < screening.SCREEN_P and not verdict.passed, policy
        assert "F1 on tuning 0.000 ->" in verdict.why()
    # where nothing to find and nothing found counts as perfect, the same change raises F1 from 0 to 1
    assert screening.screen_verdict(chosen, reference, before, never_yes, zero_division="one").passed


def test_a_proposal_that_cannot_pass_its_screen_is_not_asked_on_the_agreements(frugal_template, tmp_path):
    _, on = _optimise(frugal_template, tmp_path / "on", screen=True)
    out = [r for e in on.rounds for r in e["rejected"] if r["status"] == "screened out"]
    passed = [c for e in on.rounds for c in e["changes"]]
    # a screened-out proposal cost its disagreements (nodule's granuloma reports and the rest it got wrong), not
    # the hundred agreements beside them; no two reports are alike here, so one call each
    assert out and all(r["screen"]["reports"] < screening.MIN_AGREEMENTS for r in out)
    asked = sum(r["screen"]["reports"] for r in out) + sum(c["calls_by_part"]["screen"] for c in passed)
    assert on.screen["calls"] == asked + on.screen["refresh_calls"]
    assert all(r["screen"]["stopped"] for r in out) and not any(c["screen"]["stopped"] for c in passed)
    assert "screened out before the agreements were asked" in out[0]["detail"]


def _optimise(template, target, screen: bool, **options):
    """optimise on a private copy of a labelled study (so no copy finds another's answers in the cache)."""
    folder, run_id = template
    wb = copy_study(folder, target)
    return wb, wb.optimise(
        labels=["cardiomegaly", "mass", "edema", "nodule"],
        rounds=3,
        run_id=run_id,
        proposer="offline",
        screen=screen,
        **options,
    )


def test_screening_makes_fewer_calls_and_keeps_the_same_changes(frugal_template, tmp_path):
    from workbench.services.optimising import report_markdown

    _, off = _optimise(frugal_template, tmp_path / "off", screen=False)
    _, on = _optimise(frugal_template, tmp_path / "on", screen=True)
    kept = lambda report: {c["label"] for e in report.rounds for c in e["changes"]}  # noqa: E731
    assert kept(off) == {"cardiomegaly", "mass", "edema", "nodule"}
    assert kept(on) == {"cardiomegaly", "mass", "edema"}  # the granuloma look-for fixes 2: screened out
    screened_out = [r for e in on.rounds for r in e["rejected"] if r["status"] == "screened out"]
    # round 1's proposal, then the smaller one offered after it (the same two cases at most)
    assert {r["label"] for r in screened_out} == {"nodule"} and screened_out[0]["screen"]["fixed"] == 2
    assert on.calls["made"] < off.calls["made"]
    scr = on.screen
    assert (scr["on"], scr["screened_out"], scr["screened"]) == (True, len(screened_out), 3 + len(screened_out))
    assert on.calls["made"] == scr["calls"] + scr["full_calls"]  # the full evaluation reuses the screen's calls
    assert off.screen["on"] is False and off.calls["made"] == off.screen["full_calls"]
    for change in (c for e in on.rounds for c in e["changes"]):
        assert change["screen"]["passed"] and change["calls_made"] > change["screen"]["reports"]
    assert on.end["validation"]["macro_f1"] > on.start["validation"]["macro_f1"]
    md = report_markdown(on)
    assert "nodule: screened out" in md and f"{len(screened_out)} screened out" in md
    assert "calls made per kept change (3 kept)" in md
    assert "Screening off" in report_markdown(off)


def test_a_passing_proposal_is_decided_on_all_of_validation_and_the_rest_of_tuning_is_left_unasked(
    frugal_template, tmp_path
):
    from workbench.services.optimising import report_markdown

    _, off = _optimise(frugal_template, tmp_path / "off", screen=False)
    wb, on = _optimise(frugal_template, tmp_path / "on", screen=True)
    folder, run_id = frugal_template
    sizes = pd.Series(wb.split_parts("dev")).value_counts()
    kept = lambda report: {c["label"]: c for e in report.rounds for c in e["changes"]}  # noqa: E731
    full, frugal = kept(off), kept(on)
    assert set(frugal) == {"cardiomegaly", "mass", "edema"} <= set(full)
    for label, change in frugal.items():
        # the decision rests on the whole validation part, asked: the same figures as without the screen
        assert change["validation_f1"] == full[label]["validation_f1"]
        assert change["validation_mcnemar"] == full[label]["validation_mcnemar"]
        assert (
            change["calls_by_part"]["validation"] == sizes["validation"] == full[label]["calls_by_part"]["validation"]
        )
        # of tuning only the screen was asked; the rest is carried over and said to be
        assert change["calls_by_part"]["tuning"] == 0 and full[label]["calls_by_part"]["tuning"] == sizes["tuning"]
        assert change["tuning_carried"] == sizes["tuning"] - change["screen"]["reports"] > 0
        assert change["calls_made"] == change["calls_by_part"]["screen"] + sizes["validation"]
    assert on.screen["deferred"] == {lab: c["tuning_carried"] for lab, c in frugal.items()}
    assert on.screen["full_by_part"] == {"tuning": 0, "validation": 3 * sizes["validation"]}
    assert off.screen["full_by_part"] == {"tuning": 4 * sizes["tuning"], "validation": 4 * sizes["validation"]}
    assert on.calls["made"] == on.screen["calls"] + on.screen["full_calls"]
    md = report_markdown(on)
    assert f"(estimated, {frugal['mass']['tuning_carried']:,} answers carried over)" in md
    left = sum(on.screen["left_calls"].values())
    assert f"Not asked: {sum(on.screen['deferred'].values()):,} tuning answers" in md
    assert f"A run of the saved version still makes {left:,} calls after the call cache" in md
    assert on.screen["left_calls"] == on.screen["deferred"]  # no two reports alike here: one call each
    assert off.screen["left_calls"] == {lab: 0 for lab in full}  # without the screen nothing is left
    # what was left is exactly what a model would still be asked: evaluate-drafts asks it and nothing more,
    # and with it the tuning figures are those of the evaluation without the screen
    drafts = wb.evaluate_drafts(run_id)
    assert drafts.calls["made"] == left
    for entry in drafts.labels:
        assert entry["parts"]["tuning"]["f1_after"] == full[entry["label"]]["tuning_f1"][1]


def test_cli_optimise_no_screen_flag(frugal_template, tmp_path):
    from click.testing import CliRunner

    from workbench.cli import main

    folder, run_id = frugal_template
    copy_study(folder, tmp_path / "study").engine.dispose()
    args = [
        "optimise",
        "--study",
        str(tmp_path / "study"),
        "--labels",
        "nodule",
        "--run",
        str(run_id),
        "--proposer",
        "offline",
    ]
    screened = CliRunner().invoke(main, args)
    assert screened.exit_code == 0, screened.output
    assert "nodule: screened out" in screened.output and "0 passed" in screened.output
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
            reports[screen] = wb.optimise(
                labels=["cardiomegaly", "nodule"], rounds=2, run_id=run_id, proposer="offline", screen=screen
            )
            counts[screen] = srv.count
    assert counts[True] < counts[False]
    assert counts[True] == reports[True].calls["made"] and counts[False] == reports[False].calls["made"]
    assert reports[True].screen["screened_out"] >= 1
    assert {c["label"] for e in reports[True].rounds for c in e["changes"]} == {"cardiomegaly"}


def test_a_screened_out_proposal_sends_the_model_only_its_disagreements_over_http(tmp_path):
    with running_server(answer_fn=_follows_look_for) as srv:
        model = {"model": "openai/fake", "api_base": srv.url, "concurrency": 4, "max_retries": 0}
        folder, run_id = _study(tmp_path / "template", labels=["nodule"], **model)
        wb = copy_study(folder, tmp_path / "on")
        srv.reset()
        report = wb.optimise(labels=["nodule"], rounds=1, run_id=run_id, proposer="offline", screen=True)
        out = [r for e in report.rounds for r in e["rejected"] if r["status"] == "screened out"]
        assert len(out) == 1 and out[0]["screen"]["fixed"] < 4  # too few for chance, whatever the agreements say
        # the server was asked the reports the change could fix and nothing more: not the 100 agreements
        assert srv.count == report.calls["made"] == out[0]["screen"]["reports"] < screening.MIN_AGREEMENTS
        assert out[0]["screen"]["stopped"]


HEART_SIZE = (8, "Heart size is enlarged. Lungs clear.", {"cardiomegaly"})  # left for a second round to fix
ROUND_1, ROUND_2 = "cardiac silhouette is enlarged", "heart size is enlarged"


class TwoRoundProposer:
    """The fake server's answers: the labeller follows the prompt's look-for phrases; the model proposer adds
    ROUND_1 to cardiomegaly's look-for, then (once the prompt has it) ROUND_2."""

    def __init__(self, starter: list[str]) -> None:
        self.starter = starter

    def __call__(self, messages: list[dict]) -> str:
        from workbench.services.optimising import PROPOSER_SYSTEM

        if messages[0]["content"] != PROPOSER_SYSTEM:
            return _follows_look_for(messages)
        in_prompt = f"- {ROUND_1}" in last_user_text(messages)  # the prompt's YAML has it (not only a case's text)
        phrases = [*self.starter, ROUND_1] + ([ROUND_2] if in_prompt else [])
        return json.dumps({"edit": {"look_for": phrases}, "rationale": "the missed reports' wording"})


def _labeller_bodies(srv) -> list[dict]:
    """The chat requests the labeller sent (not the proposer's)."""
    from workbench.services.optimising import PROPOSER_SYSTEM

    return [b for b in srv.bodies if b["messages"][0]["content"] != PROPOSER_SYSTEM]


def test_carried_answers_a_later_screen_picks_are_asked_under_the_current_prompt_over_http(tmp_path):
    from workbench.services.optimising import report_markdown

    with running_server() as srv:
        model = {"model": "openai/fake", "api_base": srv.url, "concurrency": 4, "max_retries": 0}
        srv.answer_fn = lambda messages: _follows_look_for(messages)
        folder, run_id = _study(tmp_path / "template", extra=(HEART_SIZE,), labels=["cardiomegaly"], **model)
        reports, asked = {}, {}
        for screen in (False, True):
            wb = copy_study(folder, tmp_path / f"screen-{screen}")
            srv.answer_fn = TwoRoundProposer(list(wb.label_prompt("cardiomegaly").look_for))
            srv.reset()
            reports[screen] = wb.optimise(
                labels=["cardiomegaly"],
                rounds=3,
                run_id=run_id,
                proposer="llm",
                model="openai/fake",
                api_base=srv.url,
                screen=screen,
            )
            asked[screen] = _labeller_bodies(srv)
            # the model proposer's calls are paid too: counted apart from the labeller's
            assert reports[screen].calls["proposer"] == srv.count - len(asked[screen]) == 2  # round 3 has no case
        off, on = reports[False], reports[True]
        changes = lambda report: [c for e in report.rounds for c in e["changes"]]  # noqa: E731
        assert [len(e["changes"]) for e in on.rounds[:2]] == [1, 1] == [len(e["changes"]) for e in off.rounds[:2]]
        for a, b in zip(changes(off), changes(on), strict=False):  # the same decisions on the same validation answers
            assert (a["validation_f1"], a["validation_mcnemar"]) == (b["validation_f1"], b["validation_mcnemar"])
        # the server saw exactly the calls optimise counts, and no (prompt, report) twice: the cache holds
        assert len(asked[True]) == on.calls["made"] < len(asked[False]) == off.calls["made"]
        assert "plus 2 calls to the model proposer" in report_markdown(on)
        pairs = [(b["messages"][-1]["content"]) for b in asked[True]]
        assert len(set(pairs)) == len(pairs)
        # round 2's screen asked the round-1 prompt on the carried reports it picked, and counted them
        refreshed = [
            b
            for b in asked[True]
            if ROUND_1 in last_user_text(b["messages"]) and ROUND_2 not in last_user_text(b["messages"])
        ]
        first = changes(on)[0]
        assert on.screen["refresh_calls"] > 0
        assert (
            len(refreshed)
            == first["calls_by_part"]["screen"] + first["calls_by_part"]["validation"] + on.screen["refresh_calls"]
        )
        # what is left unasked is exactly what a run of the saved version asks
        wb = Workbench(tmp_path / "screen-True")
        deferred, left = on.screen["deferred"], on.screen["left_calls"]
        assert set(deferred) == {"cardiomegaly"} and deferred["cardiomegaly"] == changes(on)[1]["tuning_carried"] > 0
        assert left == deferred and off.screen["left_calls"] == {"cardiomegaly": 0}
        commit = wb.commit_drafts(["cardiomegaly"], "Two rounds of the model proposer")
        srv.reset()
        wb.start_run("dev", prompt_ref=commit, labels=["cardiomegaly"], **model)
        assert len(_labeller_bodies(srv)) == left["cardiomegaly"]


# ---------------------------------------------------------------- 7. prefix-cache friendly


def test_calls_sharing_a_label_prompt_go_together_and_cached_tokens_are_stored_and_summed(small_study):
    wb = small_study
    labels = ["pleural_effusion", "pneumothorax", "consolidation"]
    # a provider prefix cache with room for one prompt: interleaved labels would evict each other every call
    with running_server(prefix_slots=1) as srv:
        summary = wb.start_run(
            "dev", labels=labels, model="openai/fake", api_base=srv.url, concurrency=1, max_retries=0
        )
        assert summary.status == "finished" and srv.count == 8 * 3
        asked = [re.search(r"Definition of ([^:]+):", last_user_text(b["messages"])).group(1) for b in srv.bodies]
        switches = sum(a != b for a, b in zip(asked, asked[1:], strict=False))
        assert switches == 2  # each label's 8 calls one after another
        facts = wb.call_facts(summary.run_id)
        hits = pd.to_numeric(facts["cached_tokens"]).fillna(0)
        assert int((hits > 0).sum()) == 8 * 3 - 3  # every call but each label's first found its prefix cached
        costs = wb.call_costs(summary.run_id)
        assert costs["cached_tokens"].sum() == int(hits.sum()) > 0
