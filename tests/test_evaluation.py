"""Evaluation of runs (issue 4) on the small study: metrics and intervals, what is left out,
comparisons, history, the human ceiling, the disagreement queue with its notes, blinding, CLI.

Real SQLite, real Git prompt repo, the offline labeller (and the fake OpenAI-compatible server over
real HTTP where a run needs failures). Expected numbers are worked out by hand from
tests/data/reports_small.csv and readings_small.csv:

reference (4 of 6): s2 cardiomegaly, pleural effusion, enlarged cardiomediastinum (4/6); s3
consolidation (5/6), lung opacity (6/6); s4 support devices; s5 cardiomegaly (4/6); s6
atelectasis; s7 fracture (5/6), pneumothorax; s8 interstitial lung disease, lung opacity (4/6);
3-3 ties waiting for adjudication: s3 pneumonia, s5 enlarged cardiomediastinum.

The starter prompts' offline labeller misses three of them: s3 consolidation ("consolidation,
cannot exclude pneumonia" is hedged and consolidation's hedge policy is negative), s3 lung
opacity (not a look-for phrase) and s2 enlarged cardiomediastinum ("Heart is enlarged").
"""

from __future__ import annotations

import dataclasses
import io
import json
import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import DATA
from conftest import SMALL_FINDINGS as FINDINGS
from conftest import SMALL_POSITIVE as POSITIVE
from fake_llm_server import REFUSAL_REPLY, last_user_text, running_server
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.inter_rater import fleiss_kappa
from statsmodels.stats.proportion import proportion_confint

from workbench.cli import main
from workbench.services import Actor, PermissionDenied
from workbench.study import StudyError

LEFT_OUT = (
    "reports used as few-shot examples (leakage)",
    "items waiting for adjudication",
    "failed or missing predictions",
)


def oracle(names: dict[str, str], overrides: dict):
    """A per-label model answering the designed truth except where overridden (reply text)."""
    ids = {name: lab for lab, name in names.items()}

    def answer(messages: list[dict]) -> str:
        text = last_user_text(messages)
        report = text.split('"""')[-2]
        sid = next(s for s, f in FINDINGS.items() if f in report)
        lab = ids[re.search(r"Answer about (.+?) only\.", text).group(1)]
        return overrides.get((sid, lab)) or json.dumps({"value": int((sid, lab) in POSITIVE), "evidence": ""})

    return answer


def reply(value: int) -> str:
    return json.dumps({"value": value, "evidence": ""})


@pytest.fixture
def baseline(small_study):
    """The small study and a run of the starter prompts with the offline labeller."""
    return small_study, small_study.start_run("dev").run_id


def edit_v2(wb) -> str:
    """Prompt version 2: fixes consolidation, breaks atelectasis and edema (hand-checked below)."""
    cons, atel, edema = (wb.label_prompt(x) for x in ("consolidation", "atelectasis", "edema"))
    return wb.save_prompts(
        [
            dataclasses.replace(cons, hedged="positive"),  # "consolidation, cannot exclude pneumonia" -> 1
            dataclasses.replace(
                atel, do_not_label_when=atel.do_not_label_when + ("the report only mentions 'bibasilar atelectasis'.",)
            ),  # s6 -> 0
            dataclasses.replace(edema, look_for=edema.look_for + ("heart",)),  # s1 "Heart size", s2 "Heart is" -> 1
        ],
        "v2: consolidation hedge positive; atelectasis and edema experiments",
        base_commit=wb.prompt_commit(),
    )


# ---------------------------------------------------------------- metrics


def test_per_label_counts_hand_checked(baseline):
    wb, run = baseline
    ev = wb.evaluate_run(run)
    t = ev.table
    counts = lambda lab: tuple(int(t.loc[lab, c]) for c in ("n", "tp", "fp", "fn", "tn"))  # noqa: E731
    assert counts("consolidation") == (8, 0, 0, 1, 7)
    assert counts("enlarged_cardiomediastinum") == (7, 0, 0, 1, 6)  # s5's 3-3 tie is left out
    assert counts("pleural_effusion") == (8, 1, 0, 0, 7)  # s6 "Resolved ... effusion" is 1 of 6 and answered 0
    assert counts("lung_opacity") == (8, 1, 0, 1, 6)
    assert counts("pneumonia") == (7, 0, 0, 0, 7)  # s3's tie left out
    assert counts("no_finding") == (8, 1, 0, 0, 7)  # derived: only s1 has no finding
    assert t.loc["consolidation", "accuracy"] == 7 / 8 and t.loc["lung_opacity", "f1"] == pytest.approx(2 / 3)
    assert t.loc["consolidation", "f1"] == 0 and not t.loc["consolidation", "f1_undefined"]
    assert t.loc["edema", "f1_undefined"] and np.isnan(t.loc["edema", "f1"])
    assert list(t.index) == wb.vocab.ids  # 21 labels: No Finding derived since every input was asked
    # macro F1 over the 11 labels where F1 is defined: eight 1s, lung opacity 2/3, two 0s
    assert ev.averages["macro_f1_labels_used"] == 11
    assert ev.averages["macro_f1"] == pytest.approx((8 + 2 / 3) / 11)
    assert ev.excluded == {LEFT_OUT[0]: 0, LEFT_OUT[1]: 2, LEFT_OUT[2]: 0}


@pytest.mark.parametrize("ci,method", [("wilson", "wilson"), ("clopper-pearson", "beta")])
def test_intervals_equal_statsmodels(baseline, ci, method):
    wb, run = baseline
    t = wb.evaluate_run(run, ci=ci, n_resamples=0).table
    checked = 0
    for lab, row in t.iterrows():
        for name, k, n in (
            ("accuracy", row.tp + row.tn, row.n),
            ("precision", row.tp, row.tp + row.fp),
            ("recall", row.tp, row.tp + row.fn),
            ("specificity", row.tn, row.tn + row.fp),
        ):
            if n == 0:
                continue
            lo, hi = proportion_confint(int(k), int(n), alpha=0.05, method=method)
            assert (row[f"{name}_lo"], row[f"{name}_hi"]) == (
                pytest.approx(lo, abs=1e-9),
                pytest.approx(hi, abs=1e-9),
            ), (lab, name)
            checked += 1
    assert checked > 60
    lo, hi = proportion_confint(7, 8, method=method)
    assert (t.loc["consolidation", "accuracy_lo"], t.loc["consolidation", "accuracy_hi"]) == (
        pytest.approx(lo),
        pytest.approx(hi),
    )


def test_undefined_f1_is_marked_in_the_paper_table(baseline):
    wb, run = baseline
    table = wb.evaluate_run(run, n_resamples=0).paper_table().set_index("label")
    assert table.loc["edema", "F1"] == "undefined*" and table.loc["edema", "precision"] == "undefined*"
    assert table.loc["consolidation", "F1"] == "0.000"  # defined (one false negative): a real 0, no star
    assert table.loc["consolidation", "precision"] == "undefined*"
    assert table.loc["pleural_effusion", "F1"] == "1.000"
    assert table.loc["consolidation", "accuracy [95% CI]"].startswith("0.875 [")
    assert (table.loc["consolidation", "FN"], table.loc["consolidation", "support"]) == (1, 1)
    zero = wb.evaluate_run(run, zero_division="zero", n_resamples=0).paper_table().set_index("label")
    assert zero.loc["edema", "F1"] == "0.000*"  # filled by policy, still marked


def test_left_out_waiting_items_and_adjudication(baseline):
    wb, run = baseline
    wb.adjudicate("s3", "pneumonia", 1, "hedged pneumonia counts as positive in this study")
    ev = wb.evaluate_run(run, n_resamples=0)
    assert ev.excluded[LEFT_OUT[1]] == 1  # only s5's tie is still waiting
    row = ev.table.loc["pneumonia"]
    assert (row.n, row.tp, row.support, row.f1) == (8, 1, 1, 1.0)  # the labeller said 1 on s3


def test_left_out_few_shot_leakage(baseline):
    wb, run = baseline
    lp, _ = wb.add_example_from_case("s2", "pleural_effusion", why="a plain small effusion")
    assert lp.examples[-1].source_report_id == "s2"
    wb.commit_drafts(["pleural_effusion"], "pleural effusion: example from s2")
    leaky = wb.start_run("dev").run_id
    ev = wb.evaluate_run(leaky, n_resamples=0)
    assert ev.excluded[LEFT_OUT[0]] == 1
    assert ev.table.loc["pleural_effusion", "n"] == 7 and ev.table.loc["pleural_effusion", "support"] == 0
    assert ev.table.loc["enlarged_cardiomediastinum", "n"] == 6  # s2 leaked, s5 waiting
    assert ev.excluded[LEFT_OUT[1]] == 2  # s3 and s5 ties; s2 had none
    assert wb.evaluate_run(run, n_resamples=0).excluded[LEFT_OUT[0]] == 0  # v1 had no such example


# ---------------------------------------------------------------- comparison and history


def test_compare_runs_hand_checked(baseline):
    wb, run_a = baseline
    edit_v2(wb)
    run_b = wb.start_run("dev").run_id
    result = wb.compare_runs(run_a, run_b)
    table = result.table
    cases = {(r.report, r.label, r.change) for r in result.cases.itertuples()}
    assert cases == {
        ("s3", "consolidation", "fixed"),
        ("s6", "atelectasis", "broken"),
        ("s1", "edema", "broken"),
        ("s2", "edema", "broken"),
        ("s1", "no_finding", "broken"),
        ("s6", "no_finding", "broken"),
    }
    assert (table.loc["consolidation", "b"], table.loc["consolidation", "c"]) == (0, 1)
    assert table.loc["consolidation", "delta_f1"] == 1.0 and table.loc["consolidation", "delta_accuracy"] == 1 / 8
    assert table.loc["atelectasis", "delta_f1"] == -1.0
    assert (table.loc["edema", "b"], table.loc["edema", "delta_accuracy"], table.loc["edema", "f1_b"]) == (
        2,
        -0.25,
        0.0,
    )
    assert np.isnan(table.loc["edema", "f1_a"])  # undefined before: no positives on either side
    assert table.loc["edema", "p_value"] == pytest.approx(0.5)  # exact McNemar, b=2, c=0
    assert (table.loc["cardiomegaly", "b"], table.loc["cardiomegaly", "c"], table.loc["cardiomegaly", "delta_f1"]) == (
        0,
        0,
        0,
    )
    for lab, row in table.iterrows():
        both_right = row.correct_a - row.b  # correct_a = both right + broken
        both_wrong = row.n - row.correct_a - row.c
        expected = mcnemar([[both_right, row.b], [row.c, both_wrong]], exact=True).pvalue
        assert row.p_value == pytest.approx(expected, abs=1e-12), lab
    assert result.macro_f1_a == pytest.approx(wb.evaluate_run(run_a, n_resamples=0).averages["macro_f1"])


def test_compare_refuses_runs_on_different_cohorts(baseline, tmp_path):
    wb, run = baseline
    other = tmp_path / "other.csv"
    pd.DataFrame(
        {
            "id": ["t1", "t2"],
            "findings": ["Small right pleural effusion.", "Lungs are clear."],
            "impression": ["Effusion.", "Normal."],
        }
    ).to_csv(other, index=False)
    wb.import_reports(other, "test")
    run_test = wb.start_run("test").run_id
    with pytest.raises(StudyError, match="different cohorts"):
        wb.compare_runs(run, run_test)


def test_iteration_history_orders_runs_by_prompt_version(baseline):
    wb, run_v1 = baseline
    v1 = wb.prompt_commit()
    v2 = edit_v2(wb)
    run_v2 = wb.start_run("dev").run_id
    run_v1_again = wb.start_run("dev", prompt_ref=v1).run_id  # newer run, older prompt
    history = wb.iteration_history("dev")
    assert list(history["run"]) == [run_v1, run_v1_again, run_v2]
    assert list(history["version"]) == [1, 1, 2]
    assert list(history["prompt"]) == [v1[:8], v1[:8], v2[:8]]
    assert history.loc[2, "macro_f1"] == pytest.approx(wb.evaluate_run(run_v2, n_resamples=0).averages["macro_f1"])
    assert history.loc[0, "f1:consolidation"] == 0 and history.loc[2, "f1:consolidation"] == 1
    assert wb.iteration_history("dev").equals(history)


# ---------------------------------------------------------------- human ceiling


def test_human_ceiling_for_every_label(baseline):
    wb, run = baseline
    hc = wb.human_ceiling(run).set_index("label")
    assert list(hc.index) == wb.vocab.asked_ids
    readings = pd.read_csv(DATA / "readings_small.csv")
    for lab in ("cardiomegaly", "consolidation", "lung_opacity", "pneumonia"):
        positives = readings[readings["label"] == lab].groupby("report_id")["value"].sum()
        table = np.column_stack([6 - positives.to_numpy(), positives.to_numpy()])
        assert hc.loc[lab, "readers_fleiss_kappa"] == pytest.approx(fleiss_kappa(table)), lab
    assert (
        np.isnan(hc.loc["edema", "readers_fleiss_kappa"]) and "agreement is perfect" in hc.loc["edema", "fleiss_note"]
    )
    ev = wb.evaluate_run(run, n_resamples=0)
    y_true, y_pred, _ = wb.evaluation_inputs(run)
    for lab in ("consolidation", "lung_opacity", "cardiomegaly"):
        ok = y_true[lab].notna() & y_pred[lab].notna()
        assert hc.loc[lab, "labeller_kappa"] == pytest.approx(cohen_kappa_score(y_true[lab][ok], y_pred[lab][ok]))
        assert hc.loc[lab, "labeller_accuracy"] == ev.table.loc[lab, "accuracy"]
    # unanimous vs split votes (waiting ties are left out)
    assert tuple(hc.loc["cardiomegaly", ["n_unanimous", "accuracy_unanimous", "n_split", "accuracy_split"]]) == (
        7,
        1.0,
        1,
        1.0,
    )
    assert tuple(hc.loc["consolidation", ["n_unanimous", "n_split", "accuracy_split"]]) == (7, 1, 0.0)
    assert tuple(hc.loc["enlarged_cardiomediastinum", ["n_unanimous", "n_split", "accuracy_split"]]) == (6, 1, 0.0)
    assert tuple(hc.loc["lung_opacity", ["n_unanimous", "accuracy_unanimous", "n_split", "accuracy_split"]]) == (
        6,
        pytest.approx(5 / 6),
        2,
        1.0,
    )
    assert (hc.loc["edema", "n_split"], hc.loc["edema", "n_unanimous"]) == (0, 8)
    assert hc["mean_reader_accuracy"].between(0, 1).all()
    result = CliRunner().invoke(main, ["ceiling", str(run), "--format", "csv", "--study", str(wb.root)])
    assert result.exit_code == 0 and "readers_fleiss_kappa" in result.output


# ---------------------------------------------------------------- disagreements


def test_disagreement_queue_types_votes_order_and_filters(small_study):
    wb = small_study
    answers = oracle(
        wb.vocab.names(),
        {
            ("s1", "edema"): REFUSAL_REPLY,  # failed
            ("s2", "edema"): reply(1),  # FP
            ("s3", "consolidation"): reply(0),  # FN
            ("s4", "support_devices"): reply(0),  # FN
            ("s5", "cardiomegaly"): reply(0),  # FN
        },
    )
    with running_server(answer_fn=answers) as server:
        run = wb.start_run("dev", model="openai/fake", api_base=server.url, max_retries=1).run_id
    queue = wb.disagreements(run)
    rows = [(r.report_id, r.label, r.type, r.votes) for r in queue.itertuples()]
    # edema: 1 wrong of 7 evaluable (s1 failed); the others 1 of 8, fewest positives first, then by label
    assert rows == [
        ("s1", "edema", "failed", "0 of 6"),
        ("s2", "edema", "FP", "0 of 6"),
        ("s3", "consolidation", "FN", "5 of 6"),
        ("s4", "support_devices", "FN", "6 of 6"),
        ("s5", "cardiomegaly", "FN", "4 of 6"),
    ]
    assert queue.loc[0, "status"] == "refusal" and np.isnan(queue.loc[0, "prediction"])
    assert list(queue["label_error_rate"]) == pytest.approx([1 / 7, 1 / 7, 1 / 8, 1 / 8, 1 / 8])
    assert list(wb.disagreements(run, label="Edema")["report_id"]) == ["s1", "s2"]
    assert list(wb.disagreements(run, kind="FN")["report_id"]) == ["s3", "s4", "s5"]
    assert list(wb.disagreements(run, kind="failed")["label"]) == ["edema"]
    assert list(wb.disagreements(run, label="edema", kind="FP")["report_id"]) == ["s2"]
    # the failed prediction is left out of the metrics, and said so
    ev = wb.evaluate_run(run, n_resamples=0)
    assert ev.excluded == {LEFT_OUT[0]: 0, LEFT_OUT[1]: 2, LEFT_OUT[2]: 1}
    assert (ev.table.loc["edema", "n"], ev.table.loc["edema", "fp"]) == (7, 1)


def test_notes_stay_attached_across_runs_and_reference_wrong_opens_adjudication(baseline):
    wb, run1 = baseline
    wb.add_note(
        "s3",
        "consolidation",
        "hedging/uncertainty",
        "changes management",
        "cannot exclude read as negative",
        run_id=run1,
    )
    lp = wb.label_prompt("fracture")
    wb.save_prompts(
        [dataclasses.replace(lp, look_for=lp.look_for + ("fractured",))],
        "fracture wording",
        base_commit=wb.prompt_commit(),
    )
    run2 = wb.start_run("dev").run_id
    queue = wb.disagreements(run2).set_index(["report_id", "label"])
    assert queue.loc[("s3", "consolidation"), "notes"] == 1
    assert queue.loc[("s3", "consolidation"), "categories"] == "hedging/uncertainty"
    assert queue.loc[("s2", "enlarged_cardiomediastinum"), "notes"] == 0
    hedging = wb.disagreements(run2, category="hedging/uncertainty")
    assert list(zip(hedging["report_id"], hedging["label"], strict=False)) == [("s3", "consolidation")]
    with pytest.raises(StudyError, match="unknown error category 'typo'"):
        wb.add_note("s3", "consolidation", "typo", "unsure")
    assert len(wb.notes()) == 1
    counts = wb.note_counts(run2).set_index("label")
    assert counts.loc["consolidation", "hedging/uncertainty"] == 1 and list(counts.index) == ["consolidation"]

    # "the reference is wrong" opens an adjudication item, until a newer adjudication
    wb.add_note(
        "s3",
        "lung_opacity",
        "reference label wrong",
        "unsure",
        "opacity is the consolidation itself",
        reference_wrong=True,
        run_id=run2,
    )
    waiting = set(zip(wb.adjudication_queue("dev")["report_id"], wb.adjudication_queue("dev")["label"], strict=False))
    assert ("s3", "lung_opacity") in waiting
    assert wb.evaluate_run(run2, n_resamples=0).excluded[LEFT_OUT[1]] == 3
    assert ("s3", "lung_opacity") not in set(
        zip(wb.disagreements(run2)["report_id"], wb.disagreements(run2)["label"], strict=False)
    )
    wb.adjudicate("s3", "lung_opacity", 0, "no separate opacity")
    queue_now = set(zip(wb.adjudication_queue("dev")["report_id"], wb.adjudication_queue("dev")["label"], strict=False))
    assert ("s3", "lung_opacity") not in queue_now
    assert wb.evaluate_run(run2, n_resamples=0).table.loc["lung_opacity", "fn"] == 0
    wb.add_note("s3", "lung_opacity", "reference label wrong", "unsure", "second thoughts", reference_wrong=True)
    queue_again = set(
        zip(wb.adjudication_queue("dev")["report_id"], wb.adjudication_queue("dev")["label"], strict=False)
    )
    assert ("s3", "lung_opacity") in queue_again  # a flag newer than the adjudication reopens it
    everything = wb.note_counts().set_index("label")
    assert everything.loc["lung_opacity", "reference label wrong"] == 2


def test_blinding_at_the_service_layer(baseline):
    wb, run = baseline
    reader = wb.as_actor(Actor("reader-x", "reader"))
    assert len(wb.disagreements(run)) == 3
    assert reader.disagreements(run).empty
    with pytest.raises(PermissionDenied):
        reader.case(run, "s3", "consolidation")
    with pytest.raises(PermissionDenied):
        reader.add_note("s3", "consolidation", "other", "unsure")
    reader.record_reading("reader-x", "s3", {"consolidation": 1, "lung_opacity": 1})
    assert reader.disagreements(run).empty  # two labels of twenty: not read yet
    values = {lab: 0 for lab in wb.vocab.asked_ids} | {"consolidation": 1, "lung_opacity": 1}
    reader.record_reading("reader-x", "s3", values)
    seen = reader.disagreements(run)
    assert set(seen["report_id"]) == {"s3"}  # s2's disagreement stays hidden: not read by reader-x
    row = seen.set_index("label").loc["consolidation"]
    assert (row["type"], row["votes"]) == ("FN", "6 of 7")
    case = reader.case(run, "s3", "consolidation")
    assert case.reference == 1 and case.prediction["value"] == 0 and len(case.votes) == 7
    with pytest.raises(PermissionDenied):
        reader.case(run, "s2", "enlarged_cardiomediastinum")


# ---------------------------------------------------------------- CLI


def test_cli_metrics_csv_and_json(baseline):
    wb, run = baseline
    runner = CliRunner()
    result = runner.invoke(
        main, ["metrics", str(run), "--ci", "clopper-pearson", "--format", "csv", "--study", str(wb.root)]
    )
    assert result.exit_code == 0, result.output
    table = pd.read_csv(io.StringIO(result.output)).set_index("label")
    lo, hi = proportion_confint(7, 8, method="beta")
    # every estimate and bound in its own column at full precision (docs/output-formats.md)
    assert table.loc["consolidation", "accuracy"] == pytest.approx(0.875)
    assert (table.loc["consolidation", "accuracy_lo"], table.loc["consolidation", "accuracy_hi"]) == (
        pytest.approx(lo),
        pytest.approx(hi),
    )
    assert pd.isna(table.loc["edema", "f1"]) and len(table) == 21  # undefined: an empty cell, never a 0
    result = runner.invoke(
        main, ["metrics", str(run), "--ci", "clopper-pearson", "--format", "json", "--study", str(wb.root)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ci"] == "clopper-pearson" and data["excluded"][LEFT_OUT[1]] == 2
    labels = {row["label"]: row for row in data["labels"]}
    assert (labels["consolidation"]["accuracy_lo"], labels["consolidation"]["accuracy_hi"]) == (
        pytest.approx(lo),
        pytest.approx(hi),
    )
    assert labels["lung_opacity"]["fn"] == 1 and data["averages"]["macro_f1"] == pytest.approx((8 + 2 / 3) / 11)
    assert 0 <= data["macro_f1_bootstrap"]["lo"] <= data["averages"]["macro_f1"] <= data["macro_f1_bootstrap"]["hi"]
    result = runner.invoke(main, ["metrics", str(run), "--study", str(wb.root)])
    assert result.exit_code == 0 and "items waiting for adjudication: 2" in result.output


def test_cli_compare_history_disagreements_note(baseline):
    wb, run_a = baseline
    edit_v2(wb)
    run_b = wb.start_run("dev").run_id
    runner = CliRunner()
    study = ["--study", str(wb.root)]
    result = runner.invoke(main, ["compare", str(run_a), str(run_b), *study])
    assert result.exit_code == 0, result.output
    assert "fixed and broken cases" in result.output
    assert re.search(r"s3\s+consolidation\s+fixed", result.output) and re.search(
        r"s6\s+atelectasis\s+broken", result.output
    )
    assert f"macro F1 {(8 + 2 / 3) / 11:.3f} ->" in result.output
    result = runner.invoke(main, ["compare", str(run_a), str(run_b), "--format", "csv", *study])
    table = pd.read_csv(io.StringIO(result.output.split("\n\n")[0])).set_index("label")
    assert table.loc["edema", "p_value"] == 0.5 and table.loc["consolidation", "c"] == 1

    result = runner.invoke(main, ["history", "--cohort", "dev", "--format", "csv", *study])
    assert result.exit_code == 0, result.output
    history = pd.read_csv(io.StringIO(result.output))
    assert list(history["run"]) == [run_a, run_b] and list(history["version"]) == [1, 2]
    assert "f1:consolidation" not in history.columns

    result = runner.invoke(main, ["disagreements", str(run_a), "--label", "consolidation", *study])
    assert result.exit_code == 0, result.output
    assert "1 disagreement(s)" in result.output and "s3" in result.output and "lung_opacity" not in result.output
    result = runner.invoke(main, ["disagreements", str(run_a), "--label", "consolidation", "--format", "csv", *study])
    frame = pd.read_csv(io.StringIO(result.output))
    assert list(zip(frame["report_id"], frame["type"], frame["votes"], strict=False)) == [("s3", "FN", "5 of 6")]

    result = runner.invoke(
        main,
        [
            "note",
            "s3",
            "consolidation",
            "--category",
            "hedging/uncertainty",
            "--significance",
            "changes management",
            "--text",
            "hedge read as negative",
            "--run",
            str(run_a),
            *study,
        ],
    )
    assert result.exit_code == 0 and re.fullmatch(r"note \d+ added\n", result.output)
    result = runner.invoke(
        main,
        [
            "note",
            "s3",
            "lung_opacity",
            "--category",
            "reference label wrong",
            "--significance",
            "unsure",
            "--reference-wrong",
            *study,
        ],
    )
    assert result.exit_code == 0 and "sent to adjudication" in result.output
    assert ("s3", "lung_opacity") in set(
        zip(wb.adjudication_queue("dev")["report_id"], wb.adjudication_queue("dev")["label"], strict=False)
    )
    result = runner.invoke(
        main, ["note", "s3", "consolidation", "--category", "typo", "--significance", "unsure", *study]
    )
    assert result.exit_code == 2 and "error: unknown error category 'typo'" in result.output
    notes = wb.notes()
    assert list(notes["label"]) == ["consolidation", "lung_opacity"] and notes["run_id"].iloc[0] == run_a
    result = runner.invoke(
        main, ["disagreements", str(run_a), "--category", "hedging/uncertainty", "--format", "csv", *study]
    )
    frame = pd.read_csv(io.StringIO(result.output))
    assert list(frame["label"]) == ["consolidation"] and frame["notes"].iloc[0] == 1
