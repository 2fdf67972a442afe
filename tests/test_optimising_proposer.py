"""The offline proposer's candidate kinds and selection on small fixtures with known right answers:
the halves-of-tuning check, a hedge flip repaired by exclusions, look-for variants, outside phrase
lists, and the smaller, safer edit asked for after validation turned a proposal down.

Each fixture is a handful of report texts labelled with the real rule-based labeller; report ids
are picked by their half of tuning (a fixed division by id) so that where a gain sits is known.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from workbench.core import proposals
from workbench.core.prompts import DEFAULT_CUES, parse_label_prompt
from workbench.importers import ImportProblems, read_phrase_lists
from workbench.labeller import rules
from workbench.study import find_vocabulary_file, load_vocabulary_file


def _lp(label: str, look_for: list[str], hedged: str = "negative"):
    """A plain label prompt."""
    return parse_label_prompt(
        {
            "label": label,
            "task": f"Is there {label}?",
            "definition": f"{label}.",
            "look_for": look_for,
            "do_not_label_when": [],
            "hedged": hedged,
            "temporal": {"resolved": "negative", "stable": "positive", "improving": "positive", "prior": "negative"},
            "examples": [],
        },
        "test",
    )


def label_fn(lp, texts):
    """The real offline labeller on a batch of texts."""
    return np.array([rules.label_one(t, lp, DEFAULT_CUES)["value"] for t in texts], dtype=int)


def _ids(n_per_half: tuple[int, int], prefix: str) -> list[str]:
    """Report ids, the first n in half 0 and the next m in half 1 (by the proposer's fixed division)."""
    want, out, i = list(n_per_half), [], 0
    by_half: dict[int, list[str]] = {0: [], 1: []}
    while len(by_half[0]) < want[0] or len(by_half[1]) < want[1]:
        rid = f"{prefix}{i}"
        h = int(proposals._halves([rid])[0])
        if len(by_half[h]) < want[h]:
            by_half[h].append(rid)
        i += 1
    out = by_half[0] + by_half[1]
    return out


def _tuning(rows: list[tuple[str, str, int]], lp):
    """Tuning (ids, texts, reference, the labeller's current answers) and the cases frame the miner reads."""
    ids, texts, ref = [r[0] for r in rows], [r[1] for r in rows], np.array([r[2] for r in rows])
    pred = label_fn(lp, texts)
    evidence = [rules.label_one(t, lp, DEFAULT_CUES)["evidence"] for t in texts]
    cases = pd.DataFrame({"report_id": ids, "text": texts, "reference": ref, "prediction": pred, "evidence": evidence})
    return proposals.Tuning(ids, texts, ref, pred), cases


def _propose(lp, rows, candidates=None, **kw):
    """Mine (unless candidates are given) and propose on the rows."""
    tuning, cases = _tuning(rows, lp)
    if candidates is None:
        pos = [t for t, v in zip(tuning.texts, tuning.reference, strict=False) if v]
        neg = [t for t, v in zip(tuning.texts, tuning.reference, strict=False) if not v]
        candidates = proposals.mine_candidates(lp, cases, pos, neg, cues=DEFAULT_CUES, phrases=kw.pop("phrases", None))
    return proposals.offline_propose(lp, tuning, label_fn, candidates, cues=DEFAULT_CUES, **kw), tuning


def _look_for(lp, phrase: str, origin: str = "disagreements"):
    return proposals.Candidate("look_for", phrase, replace(lp, look_for=lp.look_for + (phrase,)), origin=origin)


CARDIO = _lp("cardiomegaly", ["cardiomegaly"])


# ---------------------------------------------------------------- the halves of tuning


@pytest.mark.parametrize(
    "fixed_halves, broken_half, kept",
    [
        ((4, 0), 1, False),  # all the gain in one half, the loss in the other: a quirk, refused
        ((2, 2), 1, True),  # wins on both halves: kept although it breaks one case
        ((4, 0), None, True),  # breaks nothing: losing on neither half is enough
    ],
)
def test_a_trade_must_win_on_both_halves_of_tuning(fixed_halves, broken_half, kept):
    missed = _ids(fixed_halves, "fn")
    rows = [(rid, "The heart is big.", 1) for rid in missed]
    if broken_half is not None:
        rows.append((_ids((1, 0) if broken_half == 0 else (0, 1), "fp")[0], "The heart is big for a child.", 0))
    rows += [(rid, "Cardiomegaly.", 1) for rid in _ids((2, 2), "tp")]
    result, _ = _propose(CARDIO, rows, [_look_for(CARDIO, "heart is big")])
    assert (result.status == "ok") is kept, result.detail
    if kept:
        assert result.edit.fields["look_for"] == ["cardiomegaly", "heart is big"]
    else:
        assert "both halves" in result.detail


def test_what_an_outside_list_asks_for_needs_no_halves():
    rows = [(rid, "Cardiac enlargement.", 1) for rid in _ids((4, 0), "fn")]
    rows += [(rid, "Cardiac enlargement in a child.", 0) for rid in _ids((0, 1), "fp")]
    rows += [(rid, "Cardiomegaly.", 1) for rid in _ids((2, 2), "tp")]
    mined, _ = _propose(CARDIO, rows, [_look_for(CARDIO, "cardiac enlargement")])
    listed, _ = _propose(CARDIO, rows, [_look_for(CARDIO, "cardiac enlargement", origin="phrase list")])
    assert mined.status == "empty" and listed.status == "ok"
    assert "cardiac enlargement" in listed.edit.fields["look_for"]


# ---------------------------------------------------------------- a hedge flip repaired


def test_hedge_flip_is_repaired_by_the_cues_the_reference_does_not_count():
    """The reference counts "probable effusion" and not "could represent effusion": flipping the hedge
    policy alone fixes 6 and breaks 5 (refused); with 'could represent' excluded it fixes 6, breaks 0."""
    lp = _lp("effusion", ["pleural effusion", "effusion"])
    rows = [(rid, "Probable small pleural effusion.", 1) for rid in _ids((3, 3), "fn")]
    rows += [(rid, "Blunting which could represent a pleural effusion.", 0) for rid in _ids((3, 2), "hedge")]
    rows += [(rid, "Large pleural effusion.", 1) for rid in _ids((2, 2), "tp")]
    rows += [(rid, "No pleural effusion.", 0) for rid in _ids((3, 3), "tn")]
    tuning, cases = _tuning(rows, lp)
    flip = [c for c in proposals.mine_candidates(lp, cases, [], [], cues=DEFAULT_CUES) if c.kind == "hedged"]
    from_flip, _ = _propose(lp, rows, flip)
    assert (flip[0].fixed, flip[0].broken) == (6, 5)  # the plain flip: refused
    result, tuning = _propose(lp, rows)
    assert from_flip.edit.fields == result.edit.fields
    assert result.status == "ok", result.detail
    fields = result.edit.fields
    assert fields["hedged"] == "positive"
    assert fields["do_not_label_when"] == ["the report only mentions 'could represent'"]
    after = label_fn(proposals.apply_edit(lp, fields), tuning.texts)
    assert (after == tuning.reference).all()


def test_hedge_convention_pooled_over_labels():
    """How the reference treats each hedge cue, from every label's hedged mentions; too rare a cue is left out."""
    clauses = (
        [("Probable small effusion", 1)] * 3
        + [("Atelectasis versus scarring", 1)] * 2
        + [("Nodule versus vessel", 0)]
        + [("Which could represent edema", 0)] * 3
        + [("Concerning for pneumonia", 1), ("Concerning for a mass", 0)]
    )
    convention = proposals.hedge_convention(clauses, DEFAULT_CUES)
    assert convention == {"probable": True, "versus": True, "could represent": False}
    label = [("Probable effusion", 1), ("Could represent effusion", 0), ("Could represent effusion", 1)]
    assert proposals.uncounted_hedges(convention, label) == ("could represent",)
    assert proposals.uncounted_hedges(convention, [("Could represent effusion", 0)]) is None  # nothing to count
    assert proposals.uncounted_hedges(convention, [("Probable effusion", 1)]) == ()


def test_convention_candidate_counts_hedges_except_the_uncounted_cues():
    lp = _lp("effusion", ["pleural effusion", "effusion"])
    rows = [(rid, "Probable small pleural effusion.", 1) for rid in _ids((2, 2), "fn")]
    rows += [(rid, "Blunting which could represent a pleural effusion.", 0) for rid in _ids((1, 1), "hedge")]
    rows += [(rid, "Large pleural effusion.", 1) for rid in _ids((2, 2), "tp")]
    tuning, cases = _tuning(rows, lp)
    candidates = proposals.mine_candidates(lp, cases, [], [], cues=DEFAULT_CUES, uncounted_hedges=("could represent",))
    convention = [c for c in candidates if c.origin == "hedge convention"]
    assert [c.text for c in convention] == ["hedged wording: positive except 'could represent'"]
    result = proposals.offline_propose(lp, tuning, label_fn, convention, cues=DEFAULT_CUES)
    assert result.edit.fields == {
        "do_not_label_when": ["the report only mentions 'could represent'"],
        "hedged": "positive",
    }


# ---------------------------------------------------------------- look-for variants


def test_a_look_for_phrase_with_a_word_inside_becomes_a_candidate():
    lp = _lp("cardiomegaly", ["cardiomegaly", "heart is enlarged"])
    rows = [(rid, "The heart is mildly enlarged. Lungs are clear.", 1) for rid in _ids((2, 2), "fn")]
    rows += [
        ("once", "The heart is moderately enlarged.", 1),
        ("tp", "The heart is enlarged.", 1),
        ("tn1", "Mildly enlarged hilar nodes.", 0),
        ("tn2", "Mildly enlarged hilar nodes.", 0),
    ]
    rows += [(f"n{i}", "Heart size is normal.", 0) for i in range(3)]
    tuning, cases = _tuning(rows, lp)
    kinds = {c.text: c.kind for c in proposals.mine_candidates(lp, cases, [], [], cues=DEFAULT_CUES)}
    assert kinds.get("heart is mildly enlarged") == "look_for"
    assert "heart is moderately enlarged" not in kinds  # one report is not a habit
    result, _ = _propose(lp, rows)
    assert "heart is mildly enlarged" in result.edit.fields["look_for"]
    assert not any(p == "mildly enlarged" for p in result.edit.fields["look_for"])  # not the bare modifier


# ---------------------------------------------------------------- outside phrase lists


def _vocab():
    return load_vocabulary_file(find_vocabulary_file("chestxray14"))


def test_phrase_list_read_in_place_and_mapped_to_labels(tmp_path):
    path = tmp_path / "phrases.csv"
    path.write_text(
        "observation,list,raw_phrase,matched_as\n"
        "Cardiomegaly,mention,cardiac enlargement,cardiac enlargement\n"
        "Pleural Effusion,mention,pleural fluid,pleural fluid\n"
        "Pleural Effusion,unmention,pericardial effusion,pericardial effusion\n"
        "Enlarged Cardiomediastinum,mention,_mediastinum, mediastinum\n"
        "Lung Lesion,mention,mass,mass\n",
        encoding="utf-8",
    )
    lists = read_phrase_lists(path, _vocab())
    assert lists == {
        "cardiomegaly": {"mention": ["cardiac enlargement"], "unmention": []},
        "effusion": {"mention": ["pleural fluid"], "unmention": ["pericardial effusion"]},
    }


@pytest.mark.parametrize(
    "body, message",
    [
        ("observation,list\nCardiomegaly,mention\n", "raw_phrase"),
        ("observation,list,raw_phrase\nCardiomegaly,maybe,big heart\n", "row 2, column 'list'"),
        ("observation,list,raw_phrase\nCardiomegaly,mention, \n", "is empty"),
    ],
)
def test_a_bad_phrase_list_names_what_is_wrong(tmp_path, body, message):
    path = tmp_path / "phrases.csv"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ImportProblems) as info:
        read_phrase_lists(path, _vocab())
    assert message in str(info.value)


def test_phrase_list_synonym_and_unmention_are_proposed():
    lp = _lp("effusion", ["effusion"])
    rows = [(rid, "Small amount of pleural fluid.", 1) for rid in _ids((2, 0), "fn")]
    rows += [(rid, "Small pericardial effusion.", 0) for rid in _ids((1, 1), "fp")]
    rows += [(rid, "Effusion.", 1) for rid in _ids((2, 2), "tp")]
    phrases = {"mention": ["pleural fluid", "hydrothorax"], "unmention": ["pericardial effusion"]}
    result, _ = _propose(lp, rows, phrases=phrases)
    assert result.status == "ok", result.detail
    assert result.edit.fields["look_for"] == ["effusion", "pleural fluid"]  # hydrothorax fixes nothing here
    assert result.edit.fields["do_not_label_when"] == ["the report only mentions 'pericardial effusion'"]


# ---------------------------------------------------------------- after a rejection: smaller and safer


def test_after_a_rejection_one_clean_change_then_the_next_best_not_turned_down():
    rows = [(rid, "The heart is huge.", 1) for rid in _ids((3, 3), "a")]
    rows += [(rid, "Cardiac bulk.", 1) for rid in _ids((2, 1), "b")]
    rows += [(rid, "Possible cardiomegaly.", 1) for rid in _ids((2, 2), "c")]
    rows += [(rid, "Cardiomegaly.", 1) for rid in _ids((2, 2), "tp")]
    rows += [(rid, "Lungs are clear.", 0) for rid in _ids((2, 2), "tn")]

    def candidates():
        return [
            _look_for(CARDIO, "heart is huge"),
            _look_for(CARDIO, "cardiac bulk"),
            proposals.Candidate("hedged", "hedged wording: positive", replace(CARDIO, hedged="positive")),
        ]

    full, _ = _propose(CARDIO, rows, candidates())
    assert full.edit.fields == {"look_for": ["cardiomegaly", "heart is huge", "cardiac bulk"], "hedged": "positive"}
    first, _ = _propose(CARDIO, rows, candidates(), level=1)
    assert first.edit.fields == {"look_for": ["cardiomegaly", "heart is huge"]}  # the best clean change alone
    turned_down = frozenset({proposals.apply_edit(CARDIO, first.edit.fields)})
    second, _ = _propose(CARDIO, rows, candidates(), level=2, avoid=turned_down)
    assert second.edit.fields == {"look_for": ["cardiomegaly", "cardiac bulk"]}  # no policy flip at a safer level
    turned_down |= {proposals.apply_edit(CARDIO, second.edit.fields)}
    third, _ = _propose(CARDIO, rows, candidates(), level=3, avoid=turned_down)
    assert third.status == "empty"


# ---------------------------------------------------------------- in a study: rounds after a rejection, and what the proposer reads


@pytest.fixture
def quirk_study(tmp_path):
    """A chestxray14 study where one mined phrase is a quirk of the tuning part.

    Cardiomegaly is written "Cardiomegaly." (the starter prompt finds it), "The cardiac silhouette is
    enlarged." (missed everywhere) and "Cardioquirk noted." (missed; on tuning only ever with the
    finding). On validation every report without the finding also says "Cardioquirk noted.", so a
    proposal that adds the quirk makes validation worse; the silhouette wording alone makes it better.
    Validation texts carry "Quokka sign.", the test cohort's "Wombat sign.": neither may reach the proposer.
    """
    from test_optimising import LABELS14, split_study

    from workbench.core import splits

    ids = [f"r{i:03d}" for i in range(150)]
    ref = pd.DataFrame(
        {lab: [int(lab == "cardiomegaly" and i < 50) for i in range(150)] for lab in LABELS14}, index=ids
    )
    parts = splits.stratified_split(ref, 0.3, 0)
    counts = {"tuning": 0, "validation": 0}
    rows = []
    for rid in ids:
        part = parts[rid]
        if ref.loc[rid, "cardiomegaly"]:
            k = counts[part]
            counts[part] += 1
            cut = (14, 28) if part == "tuning" else (6, 12)
            text = (
                "Cardiomegaly."
                if k < cut[0]
                else "The cardiac silhouette is enlarged."
                if k < cut[1]
                else "Cardioquirk noted."
            )
        else:
            text = "Lungs are clear." if part == "tuning" else "Cardioquirk noted. Lungs are clear."
        rows.append((rid, text + (" Quokka sign." if part == "validation" else "")))
    assert counts == {"tuning": 35, "validation": 15}
    test_rows = [(f"t{i}", "Cardioquirk noted. Wombat sign.") for i in range(3)]
    test_ref = pd.DataFrame({lab: [0] * 3 for lab in LABELS14}, index=[r for r, _ in test_rows])
    wb = split_study(tmp_path, rows, ref, test_rows, test_ref)
    wb.parts = parts
    wb.first_run = wb.start_run("dev", labels=["cardiomegaly"]).run_id
    return wb


def test_a_rejected_label_gets_a_smaller_safer_proposal_next_round(quirk_study):
    wb = quirk_study
    report = wb.optimise(labels=["cardiomegaly"], rounds=3, proposer="offline")
    first, second = report.rounds[0], report.rounds[1]
    assert not first["changes"]
    turned_down = [r for r in first["rejected"] if r["status"] == "validation worse"]
    assert turned_down and any("quirk" in c for c in turned_down[0]["changes"])  # the quirk came with it
    assert turned_down[0]["validation_f1"][1] < turned_down[0]["validation_f1"][0]
    kept = second["changes"]
    assert len(kept) == 1 and kept[0]["validation_f1"][1] > kept[0]["validation_f1"][0]
    assert len(kept[0]["changes"]) == 1 and "quirk" not in kept[0]["changes"][0]  # one clean change
    final = report.final_prompts["cardiomegaly"]["look_for"]
    assert not any("quirk" in p for p in final)
    assert report.end["validation"]["per_label"]["cardiomegaly"] == pytest.approx(24 / 27)  # 12 found, 3 missed


def test_the_proposer_reads_and_labels_only_tuning_reports(quirk_study, monkeypatch):
    """Every text the offline proposer mines or labels, over optimise rounds with a rejection and a
    safer retry and a suggestion, is a tuning report's; validation and test are only measured."""
    wb = quirk_study
    seen: dict[str, list] = {"ids": [], "texts": []}
    mine, propose = proposals.mine_candidates, proposals.offline_propose

    def spy_mine(lp, cases, pos, neg, *args, **kw):
        seen["ids"] += list(cases["report_id"])
        seen["texts"] += list(cases["text"]) + list(pos) + list(neg)
        return mine(lp, cases, pos, neg, *args, **kw)

    def spy_propose(lp, tuning, fn, candidates, **kw):
        seen["ids"] += list(tuning.ids)
        seen["texts"] += list(tuning.texts)

        def watched(prompt, texts):
            seen["texts"].extend(texts)
            return fn(prompt, texts)

        return propose(lp, tuning, watched, candidates, **kw)

    monkeypatch.setattr(proposals, "mine_candidates", spy_mine)
    monkeypatch.setattr(proposals, "offline_propose", spy_propose)
    wb.optimise(labels=["cardiomegaly"], rounds=3, proposer="offline")
    wb.suggest("cardiomegaly", wb.first_run, proposer="offline")
    tuning = {rid for rid, part in wb.parts.items() if part == "tuning"}
    assert seen["texts"] and set(seen["ids"]) <= tuning
    assert not any("quokka" in t.lower() or "wombat" in t.lower() for t in seen["texts"])


def test_a_proposals_validation_cases_are_shown_as_counts_and_ids_never_text(quirk_study):
    """Showing validation report text invites tuning to validation: the command line shows its fixed
    and broken cases by id only (text and JSON output)."""
    from click.testing import CliRunner

    from workbench.cli import main

    wb = quirk_study
    outputs = []
    for fmt in ("text", "json"):
        result = CliRunner().invoke(
            main,
            [
                "suggest",
                "cardiomegaly",
                "--run",
                str(wb.first_run),
                "--proposer",
                "offline",
                "--format",
                fmt,
                "--study",
                str(wb.root),
            ],
        )
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    proposal = wb.proposal(int(wb.proposals("cardiomegaly")["id"].iloc[0]))
    broken = proposal.evaluation["parts"]["validation"]["broken_cases"]
    assert broken and all(wb.parts[r] == "validation" for r in broken)
    for out in outputs:
        assert broken[0] in out  # by id
        assert "quokka" not in out.lower() and "lungs are clear" not in out.lower()  # never by text


def test_a_validation_case_cannot_be_opened_by_its_id(quirk_study):
    """The ids shown for validation cases do not open their text (case view, CLI --text, the app)."""
    from workbench.study import StudyError

    wb = quirk_study
    validation = sorted(r for r, part in wb.parts.items() if part == "validation")
    tuning = sorted(r for r, part in wb.parts.items() if part == "tuning")
    with pytest.raises(StudyError, match="not in the tuning part"):
        wb.case(wb.first_run, validation[0], "cardiomegaly")
    assert wb.case(wb.first_run, tuning[0], "cardiomegaly").text
