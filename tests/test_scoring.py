"""Scoring generated reports with a frozen bundle (Ran Score), checked by hand on a small fixture,
and the robustness check on paraphrase / significant-change pairs.

Fixture (tests/data/scoring/, see its README.md): 12 short reference reports and two generators'
reports with the same ids and deliberate, known differences. The bundle is frozen from a study
whose dev cohort is the reference fixture, after a run of the shipped ranscore-21 starter
prompts with the offline labeller (workbench/rules). No network, no mocks.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import DATA, ROOT
from sqlmodel import select

import workbench
from workbench import scoring
from workbench.bundle import load_bundle
from workbench.cli import main
from workbench.labeller.labelling import text_sha
from workbench.services import init_study
from workbench.shipped import shipped_dir
from workbench.store.tables import Extraction

SCORING = DATA / "scoring"
REFERENCE, GEN_A, GEN_B = SCORING / "reference.csv", SCORING / "generated_a.csv", SCORING / "generated_b.csv"

# ---------------------------------------------------------------- the expected label tables (by hand)
# Positive labels of each report as the starter prompts label them (every other label is 0; the
# derived No Finding is 1 exactly when a report has no other positive). Written by reading the
# texts in tests/data/scoring/*.csv, not by running the labeller.
EXPECTED_REF: dict[str, set[str]] = {
    "r01": set(),  # normal; effusion and pneumothorax negated
    "r02": {"cardiomegaly", "pleural_effusion"},
    "r03": {"consolidation", "pneumonia"},
    "r04": {"support_devices"},  # pneumothorax negated
    "r05": {"edema", "cardiomegaly"},
    "r06": {"pneumothorax"},
    "r07": {"atelectasis"},  # consolidation negated
    "r08": {"fracture"},
    "r09": {"pleural_effusion", "atelectasis"},
    "r10": {"lung_lesion"},
    "r11": set(),  # normal
    "r12": {"support_devices", "cardiomegaly"},
}
# Generator A: r02 paraphrased (same labels), r03 misses pneumonia, r04 invents a pneumothorax,
# r07 turns the negated consolidation positive.
EXPECTED_A = {
    **EXPECTED_REF,
    "r03": {"consolidation"},
    "r04": {"support_devices", "pneumothorax"},
    "r07": {"atelectasis", "consolidation"},
}
# Generator B: r02 misses the effusion, r04 turns the negated pneumothorax positive, r06
# paraphrased (same labels), r10 misses the nodule (so it reads as No Finding), r11 invents
# cardiomegaly (so it loses No Finding).
EXPECTED_B = {
    **EXPECTED_REF,
    "r02": {"cardiomegaly"},
    "r04": {"support_devices", "pneumothorax"},
    "r10": set(),
    "r11": {"cardiomegaly"},
}

# Hand-checked per-label counts (TP, FP, FN) for the labels the generators get wrong:
#   A: consolidation (1, 1, 0): r03 found, r07 invented   -> P 1/2, R 1, F1 2/3
#      pneumonia     (0, 0, 1): r03 missed                -> P 0/0 undefined, R 0, F1 0
#      pneumothorax  (1, 1, 0): r06 found, r04 invented   -> P 1/2, R 1, F1 2/3
#   B: cardiomegaly  (3, 1, 0): r11 invented              -> P 3/4, R 1, F1 6/7
#      no_finding    (1, 1, 1): r01 ok, r10 extra, r11 lost -> F1 2/4 = 1/2
#      pleural_effusion (1, 0, 1): r02 missed             -> F1 2/3
#      lung_lesion   (0, 0, 1): r10 missed                -> F1 0
#      pneumothorax  (1, 1, 0): r04 invented              -> F1 2/3
HAND_COUNTS = {
    "A": {
        "consolidation": (1, 1, 0),
        "pneumonia": (0, 0, 1),
        "pneumothorax": (1, 1, 0),
        "cardiomegaly": (3, 0, 0),
        "no_finding": (2, 0, 0),
        "pleural_effusion": (2, 0, 0),
    },
    "B": {
        "cardiomegaly": (3, 1, 0),
        "no_finding": (1, 1, 1),
        "pleural_effusion": (1, 0, 1),
        "lung_lesion": (0, 0, 1),
        "pneumothorax": (1, 1, 0),
        "consolidation": (1, 0, 0),
    },
}
# Ran Score by hand. 21 labels; 11 have a positive somewhere (atelectasis, cardiomegaly,
# consolidation, edema, fracture, lung_lesion, no_finding, pleural_effusion, pneumonia,
# pneumothorax, support_devices); the other 10 have no positive on either side (F1 0/0).
#   A: sum of defined F1 = 8 * 1 + 2/3 + 0 + 2/3 = 28/3
#      zero: (28/3) / 21 = 4/9;  one: (28/3 + 10) / 21 = 58/63;  exclude: (28/3) / 11 = 28/33
#   B: sum of defined F1 = 6 * 1 + 6/7 + 1/2 + 2/3 + 2/3 + 0 = 365/42
#      zero: 365/882;  one: (365/42 + 10) / 21 = 785/882;  exclude: 365/462
HAND_RAN = {
    "A": {"zero": Fraction(4, 9), "one": Fraction(58, 63), "exclude": Fraction(28, 33)},
    "B": {"zero": Fraction(365, 882), "one": Fraction(785, 882), "exclude": Fraction(365, 462)},
}
# Micro averages (pooled over the 12 x 21 cells): A TP 16, FP 2, FN 1; B TP 14, FP 3, FN 3.
HAND_MICRO = {"A": (16, 2, 1), "B": (14, 3, 3)}
GENERATED = {"A": EXPECTED_A, "B": EXPECTED_B}


def label_ids(wb) -> list[str]:
    return wb.vocab.ids


def expected_matrix(table: dict[str, set[str]], ids: list[str]) -> dict[str, dict[str, int]]:
    """Report -> label -> 0/1 from a positive-label table, with No Finding derived."""
    out = {}
    for rid, positives in table.items():
        row = {lab: int(lab in positives) for lab in ids}
        row["no_finding"] = int(not positives)
        out[rid] = row
    return out


def expected_counts(ref: dict, gen: dict, ids: list[str]) -> dict[str, tuple[int, int, int]]:
    """Per label (TP, FP, FN) from two expected label tables."""
    r, g = expected_matrix(ref, ids), expected_matrix(gen, ids)
    return {
        lab: (
            sum(r[i][lab] and g[i][lab] for i in r),
            sum((not r[i][lab]) and g[i][lab] for i in r),
            sum(r[i][lab] and not g[i][lab] for i in r),
        )
        for lab in ids
    }


def f1(tp: int, fp: int, fn: int, policy: str) -> Fraction | None:
    """F1 with the zero-division policy (None = left out)."""
    if 2 * tp + fp + fn == 0:
        return {"zero": Fraction(0), "one": Fraction(1), "exclude": None}[policy]
    return Fraction(2 * tp, 2 * tp + fp + fn)


def ran_score(counts: dict, policy: str) -> Fraction:
    values = [v for v in (f1(*c, policy) for c in counts.values()) if v is not None]
    return sum(values, Fraction(0)) / len(values)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def scored_study(tmp_path_factory):
    """A study whose dev cohort is the reference fixture (readings: six readers agreeing on the
    expected table), a finished run of the starter prompts, frozen as 'starter'."""
    root = tmp_path_factory.mktemp("scoring")
    wb = init_study(root / "study", vocab="ranscore-21", rule={"rule": "at_least", "k": 4, "n": 6})
    wb.import_reports(REFERENCE, "dev")
    rows = [
        {"report_id": rid, "label": lab, "reader": f"reader-{k}", "value": int(lab in positives)}
        for rid, positives in EXPECTED_REF.items()
        for lab in wb.vocab.asked_ids
        for k in range(6)
    ]
    pd.DataFrame(rows).to_csv(root / "readings.csv", index=False)
    wb.import_readings(root / "readings.csv")
    run = wb.start_run("dev")
    info = wb.freeze("starter", frozen_at="2026-03-01T12:00:00+00:00")
    return wb, run, info


@pytest.fixture(scope="module")
def bundle_path(scored_study) -> Path:
    return scored_study[2].json


@pytest.fixture(scope="module")
def result(bundle_path):
    return scoring.score(bundle_path, REFERENCE, {"A": GEN_A, "B": GEN_B}, n_resamples=500, seed=0)


# ---------------------------------------------------------------- the fixture itself


def test_fixture_files_pair_up_and_the_reference_labels_are_as_written_by_hand(scored_study, bundle_path):
    ref, a, b = (pd.read_csv(p) for p in (REFERENCE, GEN_A, GEN_B))
    assert len(ref) == 12 and ref["id"].tolist() == a["id"].tolist() == b["id"].tolist() == sorted(EXPECTED_REF)
    # the two generators differ from the reference exactly where documented
    assert (ref["text"] != a["text"]).sum() == 4 and (ref["text"] != b["text"]).sum() == 5
    # the study's run of the starter prompts agrees with the hand-written reference everywhere
    wb, run, _ = scored_study
    ev = wb.evaluate_run(run.run_id)
    assert ev.table[["fp", "fn"]].to_numpy().sum() == 0
    assert ev.excluded["items waiting for adjudication"] == 0
    # and so does the bundle's labelling of the reference texts
    self_score = scoring.score(bundle_path, REFERENCE, {"self": REFERENCE}, n_resamples=50)
    rows = self_score.generators["self"].per_report.set_index("report_id")
    expected = expected_matrix(EXPECTED_REF, wb.vocab.ids)
    for rid in EXPECTED_REF:
        assert json.loads(rows.loc[rid, "reference_labels"]) == expected[rid], rid


# ---------------------------------------------------------------- per label


@pytest.mark.parametrize("gen", ["A", "B"])
def test_per_label_counts_precision_recall_f1_and_support(result, scored_study, gen):
    wb = scored_study[0]
    table = result.generators[gen].per_label
    assert table.index.tolist() == wb.vocab.ids and len(table) == 21
    counts = expected_counts(EXPECTED_REF, GENERATED[gen], wb.vocab.ids)
    for lab, (tp, fp, fn) in HAND_COUNTS[gen].items():  # hand-checked labels agree with the tables
        assert counts[lab] == (tp, fp, fn), lab
    for lab, (tp, fp, fn) in counts.items():
        row = table.loc[lab]
        assert (row["tp"], row["fp"], row["fn"]) == (tp, fp, fn), lab
        assert row["tn"] == 12 - tp - fp - fn and row["support"] == tp + fn, lab
        assert row["name"] == wb.vocab.names()[lab]
        assert bool(row["f1_undefined"]) == (2 * tp + fp + fn == 0), lab
        if tp + fp:
            assert row["precision"] == pytest.approx(tp / (tp + fp)), lab
        if tp + fn:
            assert row["recall"] == pytest.approx(tp / (tp + fn)), lab
        assert row["f1"] == pytest.approx(float(f1(tp, fp, fn, "zero"))), lab


def test_hand_checked_rows(result):
    a, b = result.generators["A"].per_label, result.generators["B"].per_label
    assert a.loc["consolidation", ["precision", "recall", "f1"]].tolist() == pytest.approx([0.5, 1.0, 2 / 3])
    assert a.loc["pneumonia", ["tp", "fp", "fn", "support"]].tolist() == [0, 0, 1, 1]
    assert a.loc["pneumonia", ["recall", "f1"]].tolist() == [0.0, 0.0]
    assert b.loc["cardiomegaly", ["precision", "recall", "f1"]].tolist() == pytest.approx([0.75, 1.0, 6 / 7])
    assert b.loc["no_finding", ["tp", "fp", "fn", "f1"]].tolist() == pytest.approx([1, 1, 1, 0.5])
    assert b.loc["pleural_effusion", ["precision", "recall"]].tolist() == pytest.approx([1.0, 0.5])
    assert b.loc["emphysema", ["tp", "fp", "fn", "support", "f1"]].tolist() == [0, 0, 0, 0, 0.0]
    assert bool(b.loc["emphysema", "f1_undefined"])


# ---------------------------------------------------------------- averages and Ran Score


@pytest.mark.parametrize("gen", ["A", "B"])
def test_micro_and_macro_averages(result, scored_study, gen):
    avg = result.generators[gen].averages
    tp, fp, fn = HAND_MICRO[gen]
    assert (avg["micro_tp"], avg["micro_fp"], avg["micro_fn"]) == (tp, fp, fn)
    assert avg["micro_tn"] == 12 * 21 - tp - fp - fn
    assert avg["micro_precision"] == pytest.approx(tp / (tp + fp))
    assert avg["micro_recall"] == pytest.approx(tp / (tp + fn))
    assert avg["micro_f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert avg["micro_accuracy"] == pytest.approx((12 * 21 - fp - fn) / (12 * 21))
    counts = expected_counts(EXPECTED_REF, GENERATED[gen], scored_study[0].vocab.ids)
    assert avg["macro_f1"] == pytest.approx(float(ran_score(counts, "zero")))
    recalls = [Fraction(c[0], c[0] + c[2]) if c[0] + c[2] else Fraction(0) for c in counts.values()]
    assert avg["macro_recall"] == pytest.approx(float(sum(recalls) / 21))


@pytest.mark.parametrize("policy", ["zero", "one", "exclude"])
def test_ran_score_under_each_zero_division_policy(bundle_path, scored_study, policy):
    res = scoring.score(bundle_path, REFERENCE, {"A": GEN_A, "B": GEN_B}, zero_division=policy, n_resamples=200)
    assert res.zero_division == policy
    for gen in ("A", "B"):
        counts = expected_counts(EXPECTED_REF, GENERATED[gen], scored_study[0].vocab.ids)
        assert ran_score(counts, policy) == HAND_RAN[gen][policy]  # the tables and the fractions agree
        ran = res.generators[gen].ran_score
        assert ran.estimate == pytest.approx(float(HAND_RAN[gen][policy]))
        assert ran.labels == 21 and ran.labels_undefined == 10
        assert ran.labels_used == (11 if policy == "exclude" else 21)
        assert ran.policy == scoring.POLICY_TEXT[policy]
    assert res.to_json()["zero_division_policy"] == scoring.POLICY_TEXT[policy]


def test_ran_score_bootstrap_is_reproducible_with_a_seed(bundle_path):
    def interval(seed):
        res = scoring.score(
            bundle_path, REFERENCE, {"A": GEN_A, "B": GEN_B}, zero_division="exclude", n_resamples=300, seed=seed
        )
        return {g: (r.ran_score.lo, r.ran_score.estimate, r.ran_score.hi) for g, r in res.generators.items()}

    first, again, other = interval(11), interval(11), interval(12)
    assert first == again
    assert first != other  # the seed matters
    for lo, est, hi in first.values():
        assert 0 <= lo <= est <= hi <= 1


def test_ran_score_interval_contains_the_estimate_under_the_default_policy(result):
    for gen in ("A", "B"):
        ran = result.generators[gen].ran_score
        assert ran.lo <= ran.estimate <= ran.hi, (gen, ran)


# ---------------------------------------------------------------- per report and summary


def test_per_report_rows_name_invented_and_missed_findings(result):
    a = result.generators["A"].per_report.set_index("report_id")
    b = result.generators["B"].per_report.set_index("report_id")
    assert a.index.tolist() == sorted(EXPECTED_REF)
    assert (a.loc["r03", "missed_findings"], a.loc["r03", "invented_findings"]) == ("pneumonia", "")
    assert (a.loc["r04", "invented_findings"], a.loc["r04", "missed_findings"]) == ("pneumothorax", "")
    assert a.loc["r07", "invented_findings"] == "consolidation"
    # the paraphrase keeps the same labels
    assert (a.loc["r02", "invented_findings"], a.loc["r02", "missed_findings"], a.loc["r02", "matched_positive"]) == (
        "",
        "",
        2,
    )
    assert set(a.index[(a["invented_findings"] != "") | (a["missed_findings"] != "")]) == {"r03", "r04", "r07"}
    assert b.loc["r02", "missed_findings"] == "pleural_effusion"
    assert b.loc["r04", "invented_findings"] == "pneumothorax"
    assert (b.loc["r10", "missed_findings"], b.loc["r10", "invented_findings"]) == ("lung_lesion", "no_finding")
    assert (b.loc["r11", "invented_findings"], b.loc["r11", "missed_findings"]) == ("cardiomegaly", "no_finding")
    assert b.loc["r06", "invented_findings"] == b.loc["r06", "missed_findings"] == ""  # paraphrase
    assert json.loads(b.loc["r11", "generated_labels"])["cardiomegaly"] == 1
    assert json.loads(b.loc["r11", "reference_labels"])["no_finding"] == 1


def test_side_by_side_summary_for_two_generators(result):
    s = result.summary().set_index("generator")
    assert s.index.tolist() == ["A", "B"]
    assert s["reports"].tolist() == [12, 12]
    assert s["ran_score"].tolist() == pytest.approx([float(HAND_RAN["A"]["zero"]), float(HAND_RAN["B"]["zero"])])
    assert s["macro_f1"].tolist() == s["ran_score"].tolist()
    assert s["invented_findings_fp"].tolist() == [2, 3] and s["missed_findings_fn"].tolist() == [1, 3]
    assert s.loc["A", "micro_f1"] == pytest.approx(32 / 35) and s.loc["B", "micro_f1"] == pytest.approx(28 / 34)
    for col in (
        "micro_accuracy",
        "micro_precision",
        "micro_recall",
        "macro_accuracy",
        "macro_precision",
        "macro_recall",
        "ran_score_lo",
        "ran_score_hi",
    ):
        assert s[col].between(0, 1).all(), col
    assert result.model == "workbench/rules" and result.bundle_name == "starter" and len(result.bundle_sha) == 64


# ---------------------------------------------------------------- CLI outputs


def test_cli_writes_readable_csv_and_json(bundle_path, tmp_path, monkeypatch):
    monkeypatch.delenv("WORKBENCH_STUDY", raising=False)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main,
        [
            "score",
            "--bundle",
            str(bundle_path),
            "--reference",
            str(REFERENCE),
            "--generated",
            f"A={GEN_A}",
            "--generated",
            f"B={GEN_B}",
            "--out",
            str(out),
            "--resamples",
            "200",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "Ran Score 0.444" in res.output and "Ran Score 0.414" in res.output
    assert "zero_division=0" in res.output and f"wrote CSV and JSON to {out}" in res.output
    assert sorted(p.name for p in out.iterdir()) == [
        "A.attributes.csv",
        "A.per_label.csv",
        "A.per_report.csv",
        "A.report_errors.csv",
        "B.attributes.csv",
        "B.per_label.csv",
        "B.per_report.csv",
        "B.report_errors.csv",
        "results.json",
        "summary.csv",
    ]
    summary = pd.read_csv(out / "summary.csv")
    assert summary["generator"].tolist() == ["A", "B"]
    assert summary["ran_score"].tolist() == pytest.approx([float(HAND_RAN["A"]["zero"]), float(HAND_RAN["B"]["zero"])])
    per_label = pd.read_csv(out / "B.per_label.csv").set_index("label")
    assert per_label.loc["cardiomegaly", ["tp", "fp", "fn", "support"]].tolist() == [3, 1, 0, 3]
    per_report = pd.read_csv(out / "A.per_report.csv", keep_default_na=False).set_index("report_id")
    assert per_report.loc["r04", "invented_findings"] == "pneumothorax"
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert data["bundle"]["name"] == "starter" and data["zero_division"] == "zero"
    assert data["reference"]["texts"] == 12
    assert [row["generator"] for row in data["summary"]] == ["A", "B"]
    gen_a = {row["label"]: row for row in data["generators"]["A"]["per_label"]}
    assert (gen_a["pneumonia"]["fn"], gen_a["consolidation"]["fp"]) == (1, 1)
    assert data["generators"]["A"]["ran_score"]["estimate"] == pytest.approx(4 / 9)


def test_cli_zero_division_choice(bundle_path, monkeypatch):
    monkeypatch.delenv("WORKBENCH_STUDY", raising=False)
    res = CliRunner().invoke(
        main,
        [
            "score",
            "--bundle",
            str(bundle_path),
            "--reference",
            str(REFERENCE),
            "--generated",
            f"A={GEN_A}",
            "--zero-division",
            "exclude",
            "--resamples",
            "50",
        ],
    )
    assert res.exit_code == 0, res.output
    assert f"Ran Score {float(HAND_RAN['A']['exclude']):.3f}" in res.output
    assert "left out of the macro average" in res.output


# ---------------------------------------------------------------- errors


def test_generated_ids_that_do_not_match_give_a_clear_error(bundle_path, tmp_path, monkeypatch):
    gen = pd.read_csv(GEN_A)
    gen.loc[gen["id"] == "r12", "id"] = "r99"
    bad = tmp_path / "bad.csv"
    gen.to_csv(bad, index=False)
    with pytest.raises(
        ValueError,
        match=r"generator 'bad': 1 reference id\(s\) have no generated report \(e\.g\. r12\); "
        r"1 generated id\(s\) are not in the reference \(e\.g\. r99\)",
    ):
        scoring.score(bundle_path, REFERENCE, {"A": GEN_A, "bad": bad}, n_resamples=10)
    monkeypatch.delenv("WORKBENCH_STUDY", raising=False)
    res = CliRunner().invoke(
        main, ["score", "--bundle", str(bundle_path), "--reference", str(REFERENCE), "--generated", f"bad={bad}"]
    )
    assert res.exit_code == 2 and "error: generator 'bad'" in res.output and "r99" in res.output
    with pytest.raises(ValueError, match="zero_division must be one of"):
        scoring.score(bundle_path, REFERENCE, {"A": GEN_A}, zero_division="nan")
    with pytest.raises(ValueError, match="at least one generator"):
        scoring.score(bundle_path, REFERENCE, {})


def test_a_modified_bundle_is_refused(bundle_path, tmp_path):
    from workbench.bundle import BundleError

    edited = tmp_path / "edited.json"
    edited.write_text(bundle_path.read_text(encoding="utf-8").replace('"starter"', '"starteR"'), encoding="utf-8")
    with pytest.raises(BundleError, match="was modified"):
        scoring.score(edited, REFERENCE, {"A": GEN_A})


def test_top_level_import_works(bundle_path):
    from workbench import score  # noqa: F401  (the import itself is the promise)

    res = score(bundle_path, REFERENCE, {"A": GEN_A}, n_resamples=50)
    assert res.generators["A"].ran_score.estimate == pytest.approx(4 / 9)
    assert workbench.score is score


# ---------------------------------------------------------------- reference extracted once, cached


def extraction_rows(wb) -> list[Extraction]:
    with wb.session() as s:
        rows = s.exec(select(Extraction)).all()
        return [Extraction(**r.model_dump()) for r in rows]


def test_reference_labels_are_extracted_once_and_cached_by_bundle_and_text(bundle_path, tmp_path):
    wb = init_study(tmp_path / "cache-study", vocab="ranscore-21")  # its own, empty Extraction table
    # a reference with one text repeated under a second id
    ref = pd.read_csv(REFERENCE)
    ref = pd.concat([ref, pd.DataFrame([{"id": "r13", "text": ref.loc[0, "text"]}])], ignore_index=True)
    gen_a, gen_b = pd.read_csv(GEN_A), pd.read_csv(GEN_B)
    gen_a = pd.concat([gen_a, pd.DataFrame([{"id": "r13", "text": ref.loc[0, "text"]}])], ignore_index=True)
    gen_b = pd.concat([gen_b, pd.DataFrame([{"id": "r13", "text": ref.loc[0, "text"]}])], ignore_index=True)
    for name, frame in (("ref", ref), ("a", gen_a), ("b", gen_b)):
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    assert extraction_rows(wb) == []

    first = wb.score_generated(bundle_path, tmp_path / "ref.csv", {"A": tmp_path / "a.csv"}, n_resamples=50)
    assert first.reference_stats == {
        "texts": 13,
        "extracted": 12,
        "reused": 0,
        "failures": 0,
        "failure_causes": {},
        "attribute_parse_failures": 0,
    }
    ref_hashes = {text_sha(t) for t in ref["text"]}
    rows = extraction_rows(wb)
    assert len(ref_hashes) == 12
    assert sorted(r.text_hash for r in rows if r.text_hash in ref_hashes) == sorted(
        ref_hashes
    )  # one row per distinct text
    assert {r.bundle_sha for r in rows} == {first.bundle_sha}
    # generator A shares 9 of its 13 texts with the reference: those are reused, 4 are new
    assert first.generators["A"].stats == {
        "texts": 13,
        "extracted": 4,
        "reused": 9,
        "failures": 0,
        "failure_causes": {},
        "attribute_parse_failures": 0,
    }
    assert len(rows) == 12 + 4

    second = wb.score_generated(bundle_path, tmp_path / "ref.csv", {"B": tmp_path / "b.csv"}, n_resamples=50)
    assert second.reference_stats["reused"] == 13 and second.reference_stats["extracted"] == 0
    assert second.generators["B"].stats["extracted"] == 5
    rows = extraction_rows(wb)
    assert len([r for r in rows if r.text_hash in ref_hashes]) == 12  # still one row per reference text
    assert len(rows) == 12 + 4 + 5
    assert second.generators["B"].ran_score.estimate != first.generators["A"].ran_score.estimate
    # the same scores as without the cache
    plain = scoring.score(bundle_path, tmp_path / "ref.csv", {"B": tmp_path / "b.csv"}, n_resamples=50)
    pd.testing.assert_frame_equal(plain.generators["B"].per_label, second.generators["B"].per_label)


def test_cli_score_with_a_study_uses_its_cache(scored_study, bundle_path, tmp_path):
    wb = scored_study[0]
    before = len(extraction_rows(wb))
    args = [
        "score",
        "--bundle",
        str(bundle_path),
        "--reference",
        str(REFERENCE),
        "--generated",
        f"A={GEN_A}",
        "--resamples",
        "20",
        "--study",
        str(wb.root),
    ]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    assert "reference: 0 extracted, 12 reused from cache" in second.output
    assert len(extraction_rows(wb)) >= before


# ---------------------------------------------------------------- robustness


def test_robustness_on_the_shipped_pairs(bundle_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = scoring.robustness(bundle_path, "annotations/robustness/pairs.csv")
    pairs = pd.read_csv(shipped_dir("annotations") / "robustness" / "pairs.csv")
    per_kind = res.per_kind.set_index("kind")
    assert sorted(per_kind.index) == ["paraphrase", "significant"]
    for kind in ("paraphrase", "significant"):
        assert per_kind.loc[kind, "pairs"] == (pairs["kind"] == kind).sum()
        own = res.pairs[res.pairs["kind"] == kind]["correct"].mean()
        assert per_kind.loc[kind, "share_correct"] == pytest.approx(own)
        assert 0 <= per_kind.loc[kind, "share_correct"] <= 1
    per_label = res.per_label
    assert list(per_label.columns) == ["label", "share_detected", "pairs", "paraphrase_flips"]
    assert per_label["pairs"].sum() == (pairs["kind"] == "significant").sum()
    assert per_label["share_detected"].between(0, 1).all()
    assert set(per_label["label"]) <= set(load_bundle(bundle_path).vocab.asked_ids)
    flips = sum(res.paraphrase_flips.values())
    assert flips >= int((~res.pairs[res.pairs["kind"] == "paraphrase"]["correct"]).sum())


def test_robustness_on_a_users_own_pairs_file(bundle_path):
    res = scoring.robustness(bundle_path, SCORING / "pairs.csv")
    pairs = res.pairs.set_index("pair_id")
    assert pairs["correct"].all(), pairs
    assert pairs.loc["own-s2", "label"] == "cardiomegaly"  # given by display name, resolved to the id
    assert pairs.loc["own-s3", "detail"] == "pleural_effusion: 1.0 -> 0.0"  # 'pericardial effusion' is excluded
    assert pairs.loc["own-p1", "detail"] == "same labels"
    assert res.per_kind.set_index("kind")["pairs"].to_dict() == {"paraphrase": 3, "significant": 3}
    assert res.per_label.set_index("label")["share_detected"].to_dict() == {
        "cardiomegaly": 1.0,
        "pleural_effusion": 1.0,
        "pneumothorax": 1.0,
    }
    assert res.paraphrase_flips == {}
    # a harmful "paraphrase" is caught as a change
    own = pd.read_csv(SCORING / "pairs.csv", keep_default_na=False)
    own.loc[own["pair_id"] == "own-p2", "text_b"] = "Small pneumothorax."
    res = scoring.robustness(bundle_path, own)
    assert not res.pairs.set_index("pair_id").loc["own-p2", "correct"]
    assert res.paraphrase_flips == {"pneumothorax": 1}
    assert res.per_kind.set_index("kind").loc["paraphrase", "share_correct"] == pytest.approx(2 / 3)


def test_robustness_cli(bundle_path):
    res = CliRunner().invoke(main, ["robustness", "--bundle", str(bundle_path), "--pairs", str(SCORING / "pairs.csv")])
    assert res.exit_code == 0, res.output
    assert "paraphrase" in res.output and "significant" in res.output and "pleural_effusion" in res.output


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda f: f.assign(kind=f["kind"].replace("paraphrase", "synonym")),
            r"kind must be paraphrase or significant, got \['synonym'\]",
        ),
        (lambda f: f.drop(columns=["text_b"]), r"missing column\(s\) \['text_b'\]"),
        (lambda f: f.drop(columns=["pair_id", "kind"]), r"missing column\(s\) \['kind', 'pair_id'\]"),
        (
            lambda f: f.assign(label=f["label"].replace("pneumothorax", "unicorn")),
            "pair own-s1: unknown label 'unicorn'",
        ),
    ],
)
def test_robustness_bad_pairs_give_a_clear_error(bundle_path, tmp_path, change, message):
    frame = change(pd.read_csv(SCORING / "pairs.csv", keep_default_na=False))
    with pytest.raises(ValueError, match=message):
        scoring.robustness(bundle_path, frame)
    path = tmp_path / "pairs.csv"  # the same from a file
    frame.to_csv(path, index=False)
    with pytest.raises(ValueError, match=message):
        scoring.robustness(bundle_path, path)


def test_robustness_missing_label_column_is_a_clear_error(bundle_path):
    frame = pd.read_csv(SCORING / "pairs.csv", keep_default_na=False).drop(columns=["label"])
    with pytest.raises(ValueError, match="label"):
        scoring.robustness(bundle_path, frame)


# ---------------------------------------------------------------- DataFrames (issue 30, item 5)


def test_dataframes_read_with_pd_read_csv_score_like_the_files(bundle_path, result):
    ref, gen_a = pd.read_csv(REFERENCE), pd.read_csv(GEN_A)  # an `id` column, as read: no renaming by the caller
    scored = scoring.score(bundle_path, ref, {"A": gen_a}, n_resamples=500, seed=0)
    assert scored.generators["A"].ran_score == result.generators["A"].ran_score
    single = scoring.score(bundle_path, REFERENCE, gen_a, n_resamples=50)
    assert list(single.generators) == ["generated"]


def test_a_dataframe_goes_through_the_same_column_rules_as_a_file(bundle_path):
    no_id = pd.read_csv(GEN_A).rename(columns={"id": "name"})
    with pytest.raises(ValueError, match=r"the generated DataFrame: no report id column"):
        scoring.score(bundle_path, REFERENCE, no_id, n_resamples=10)
    blank = pd.read_csv(GEN_A)
    blank.loc[2, "text"] = None  # a missing cell, as pandas reads an empty CSV field
    with pytest.raises(ValueError, match=r"the generated DataFrame row 4: report has no text"):
        scoring.score(bundle_path, REFERENCE, blank, n_resamples=10)
    numeric = pd.read_csv(GEN_A).assign(text=1.5)
    with pytest.raises(ValueError, match=r"column 'text': holds decimal numbers"):
        scoring.score(bundle_path, REFERENCE, numeric, n_resamples=10)
