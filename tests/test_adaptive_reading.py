"""Adaptive reading through the services: the guarantee on a real database, the agreement sample,
blinding, the figures, and two processes asking for their next report at once (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import ROOT, copy_study

from workbench.core.reference import ReferenceRule, compute_reference
from workbench.services import Actor, PermissionDenied

READERS = [f"rad{i}" for i in range(1, 7)]


def _reports(tmp_path: Path, n: int, name: str = "reports.csv") -> Path:
    """A reports file of n short synthetic reports."""
    path = tmp_path / name
    pd.DataFrame(
        {
            "id": [f"a{i:03d}" for i in range(n)],
            "findings": [f"Report {i}: heart size normal, lungs clear." for i in range(n)],
        }
    ).to_csv(path, index=False)
    return path


def _values(wb, n_reports: int, seed: int, prevalence: float = 0.15) -> dict:
    """(reader, report) -> label -> 0/1: readers who mostly agree on a per-report truth."""
    rng = np.random.default_rng(seed)
    labels = wb.vocab.asked_ids
    truth = rng.uniform(size=(n_reports, len(labels))) < prevalence
    out = {}
    for reader in READERS:
        flip = rng.uniform(size=truth.shape) < 0.12
        for i in range(n_reports):
            out[(reader, f"a{i:03d}")] = {lab: int(truth[i, j] ^ flip[i, j]) for j, lab in enumerate(labels)}
    return out


def _replay(wb, values: dict, cohort: str = "dev", readers=READERS) -> list[tuple[str, str]]:
    """Readers in turn ask for their next report and read it, until every list is done; the reads in order."""
    reads, active = [], list(readers)
    while active:
        for reader in list(active):
            report = wb.next_report(reader, cohort)
            if report is None:
                active.remove(reader)
                continue
            wb.submit_reading(reader, report, values[(reader, report)])
            reads.append((reader, report))
    return reads


def _full_reference(wb, values: dict) -> pd.DataFrame:
    """The full panel's reference: every reader's reading of every report, under the study's rule."""
    rows = [(report, lab, reader, v) for (reader, report), vals in values.items() for lab, v in vals.items()]
    readings = pd.DataFrame(rows, columns=["report_id", "label", "reader", "value"])
    return compute_reference(readings, wb.rule()).set_index(["report_id", "label"])[["value", "status"]]


@pytest.fixture
def adaptive_study(study, tmp_path):
    """An empty 4-of-6 study with 30 reports in 'dev' and adaptive reading on (20% agreement sample)."""
    study.import_reports(_reports(tmp_path, 30), "dev")
    study.set_adaptive(enabled=True)
    return study


@pytest.mark.parametrize("seed", [0, 1])
def test_replayed_readers_give_the_full_panel_reference_with_fewer_reads(adaptive_study, seed):
    wb = adaptive_study
    values = _values(wb, 30, seed)
    reads = _replay(wb, values)
    full = _full_reference(wb, values)
    got = wb.reference("dev").set_index(["report_id", "label"])[["value", "status"]]
    assert got.reindex(full.index).equals(full)
    assert len(reads) < 30 * 6
    per_report = pd.Series([r for _, r in reads]).value_counts()
    sample = wb.agreement_sample("dev")
    assert sample.reports == 6 and sample.of == 30
    with wb.session() as s:
        from workbench.store import queries as q

        ids = q.agreement_sample_ids(s)
    assert (per_report.reindex(sorted(ids)) == 6).all()  # full overlap on the sample
    status = wb.adaptive_status("dev")
    assert status.reads_done == len(reads) and status.reads_saved == 30 * 6 - len(reads)
    assert status.decided + status.waiting + status.undecided == 30 * len(wb.vocab.asked_ids) and status.undecided == 0


def test_majority_rule_with_the_extra_reader_breaks_ties_and_stops_early(study, tmp_path):
    study.config.reference = {"rule": "majority", "n": 4}
    study.save_config()
    study.import_reports(_reports(tmp_path, 20), "dev")
    study.set_adaptive(enabled=True, agreement_share=0.0, extra_reader=True)
    values = _values(study, 20, 3, prevalence=0.4)
    reads = _replay(study, values, readers=READERS[:5])
    panel = [(r, p) for r, p in values if r in READERS[:4]]
    assert len(reads) < 20 * 4 + 20  # stopped early
    counts = pd.Series([p for _, p in reads]).value_counts()
    assert counts.max() <= 5 and (counts == 5).any() or counts.max() <= 4
    assert panel  # the first four readers are the panel


def test_the_papers_rule_closes_an_unticked_report_after_three_reads_with_the_full_panel_reference(study, tmp_path):
    study.config.reference = {"rule": "positive_at_least", "k": 4, "n": 6}
    study.save_config()
    study.import_reports(_reports(tmp_path, 24), "dev")
    study.set_adaptive(enabled=True, agreement_share=0.0)
    values = _values(study, 24, 5)
    blank = [f"a{i:03d}" for i in range(0, 24, 2)]  # every reader leaves every label unticked
    for (reader, report), vals in values.items():
        if report in blank:
            values[(reader, report)] = dict.fromkeys(vals, 0)
    reads = _replay(study, values)
    full = _full_reference(study, values)
    got = study.reference("dev").set_index(["report_id", "label"])[["value", "status"]]
    assert got.reindex(full.index).equals(full)
    assert full["value"].notna().all()  # never a tie: nothing waits for adjudication
    per_report = pd.Series([r for _, r in reads]).value_counts()
    assert (per_report.reindex(blank) == 3).all()  # settled negative once N - K + 1 = 3 readers left it unticked
    status = study.adaptive_status("dev")
    assert status.waiting == 0 and status.undecided == 0 and status.reads_saved == 24 * 6 - len(reads)


def test_the_papers_rule_from_init_and_a_bad_k_refused_at_load(tmp_path):
    from workbench.cli import main
    from workbench.study import StudyError, load_config

    root = tmp_path / "paper"
    out = CliRunner().invoke(main, ["init", str(root), "--rule", "positive_at_least", "--k", "4", "--n", "6"])
    assert out.exit_code == 0, out.output
    assert "positive when at least 4 of 6 readers mark it, otherwise negative" in " ".join(out.output.split())
    assert load_config(root).reference == {"rule": "positive_at_least", "k": 4, "n": 6}
    text = (root / "workbench.yaml").read_text(encoding="utf-8").replace("k: 4", "k: 9")
    (root / "workbench.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(StudyError, match="reference: .*1 <= K <= N"):
        load_config(root)


def test_a_new_share_or_seed_redraws_an_unread_sample_and_is_refused_once_it_is_read(adaptive_study):
    from workbench.study import StudyError, load_config

    wb = adaptive_study
    wb.work_list("rad1", "dev")  # draws the sample: 6 of 30
    assert wb.agreement_sample("dev").reports == 6
    wb.set_adaptive(agreement_share=0.5)
    wb.work_list("rad1", "dev")
    assert wb.agreement_sample("dev").reports == 15 and wb.agreement_sample("dev").share == 0.5
    assert len(wb.audit_log(entity="agreement_sample")) == 2  # both draws are recorded
    before = wb.agreement_sample_reports("dev")
    wb.set_adaptive(seed=3)  # a new seed alone draws it again too, as long as nobody has read it
    wb.next_report("rad2", "dev")
    assert wb.agreement_sample("dev").seed == 3 and wb.agreement_sample("dev").reports == 15
    assert wb.agreement_sample_reports("dev") != before and len(wb.audit_log(entity="agreement_sample")) == 3
    sample = wb.agreement_sample_reports("dev")
    status = wb.adaptive_status("dev")
    assert status.reports_open == 30
    wb.submit_reading("rad1", sample[0], dict.fromkeys(wb.vocab.asked_ids, 0))
    with pytest.raises(StudyError, match="agreement sample .*already has readings.*share 50%, seed 3"):
        wb.set_adaptive(seed=7)
    assert load_config(wb.root).adaptive["seed"] == 3 and wb.agreement_sample_reports("dev") == sample
    wb.set_adaptive(extra_reader=False, order="cohort")  # other settings still change


def test_a_reader_with_an_expired_claim_is_served_by_the_database_as_by_the_candidates_frame(adaptive_study):
    """The hot path (own_claim, then first_offered) gives what _pick over the whole frame gives, also with
    expired and taken-over claims (before, any unread claim sent the reader down the frame path for good)."""
    from workbench.store import queries as q

    wb = adaptive_study

    def pick(reader):
        with wb.session() as s:
            return wb.adaptive._pick(wb.adaptive._candidates(s, 1, reader), q.now())

    def expire(reader, report):
        with wb.session(write=True) as s:
            q.put_claims(s, 1, [(report, reader)], done=False, expires_at="2000-01-01T00:00:00")

    first = wb.next_report("rad1", "dev")
    expected = pick("rad1")
    assert wb.next_report("rad1", "dev") == expected == first  # a live claim is given back
    expire("rad1", first)
    expected = pick("rad2")
    assert wb.next_report("rad2", "dev") == expected
    for reader in ("rad1", "rad2", "rad3", "rad1"):
        expected = pick(reader)
        assert wb.next_report(reader, "dev") == expected
        wb.submit_reading(reader, expected, dict.fromkeys(wb.vocab.asked_ids, 0))


def test_the_sample_is_stratified_by_the_latest_run_and_reproducible(small_study, tmp_path):
    wb = small_study
    wb.start_run("dev")
    wb.set_adaptive(enabled=True, agreement_share=0.25, seed=7)
    wb.next_report("rad1", "dev") if "rad1" in wb.readers() else wb.work_list(wb.readers()[0], "dev")
    first = wb.agreement_sample("dev")
    assert first.reports == 2 and first.run == 1 and first.seed == 7
    other = copy_study(Path(wb.root), tmp_path / "again")
    with other.session() as s:
        from workbench.store import queries as q

        q.set_meta(s, "adaptive_sample:1", "")
    with wb.session() as s:
        mine = q.agreement_sample_ids(s)
    # a second draw with the same seed and predictions picks the same reports
    from workbench.core.splits import stratified_split

    preds = wb.predictions(1).pivot_table(index="report_id", columns="label", values="value", aggfunc="first")
    parts = stratified_split(preds, 0.25, seed=7)
    assert mine == {r for r, p in parts.items() if p == "validation"}
    # every label the labeller found on at least 4 reports has a positive in the sample
    positives = preds.fillna(0).astype(int)
    for label in positives.columns[positives.sum() >= 4]:
        assert positives.loc[sorted(mine), label].sum() >= 1
    events = wb.audit_log(entity="agreement_sample")
    assert len(events) == 1


def _reader_view(wb, reader: str) -> dict:
    """Everything the services show this reader: their list, and the reads that reveal votes."""
    me = wb.as_actor(Actor(user=reader, role="reader"))
    view = {"work_list": me.work_list(reader, "dev")[["report_id", "state"]]}
    view["reference"] = me.reference("dev")
    view["summary"] = me.reference_summary("dev")
    view["status"] = me.adaptive_status("dev")
    view["agreement"] = me.agreement("dev")
    view["queue"] = me.reading_queue(reader, "dev")
    view["matrix"] = me.reference_matrix("dev")
    view["item"] = me.item_reference("a000", me.vocab.asked_ids[0])
    view["scope"] = me.agreement_scope("dev")
    return view


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_readers_view_does_not_depend_on_other_readers_values_except_reports_leaving(study_templates, tmp_path, seed):
    """Two copies of one study: the other readers' values differ (on reports the reader has not read), the
    reads are the same. What the reader sees is equal once the reports that left either list are set aside."""
    views = []
    for copy in ("a", "b"):
        wb = copy_study(study_templates["empty"], tmp_path / copy)
        wb.import_reports(_reports(tmp_path, 24, f"{copy}.csv"), "dev")
        wb.set_adaptive(enabled=True)
        base = _values(wb, 24, 100)  # the reader's own values: the same in both copies
        other = _values(wb, 24, seed if copy == "a" else seed + 50, prevalence=0.3)
        for i in range(6):  # the reader finishes six reports first
            wb.submit_reading("rad6", f"a{i:03d}", base[("rad6", f"a{i:03d}")])
        for reader in READERS[:4]:  # then four others read reports 3..20 (same reads, different values)
            for i in range(3, 21):
                wb.submit_reading(reader, f"a{i:03d}", (base if i < 6 else other)[(reader, f"a{i:03d}")])
        views.append(_reader_view(wb, "rad6"))
    a, b = views
    common = set(a["work_list"]["report_id"]) & set(b["work_list"]["report_id"])
    keep = lambda f: f[f["report_id"].isin(common)].reset_index(drop=True)  # noqa: E731
    assert keep(a["work_list"]).equals(keep(b["work_list"]))
    assert set(a["work_list"]["report_id"][:6]) == {f"a{i:03d}" for i in range(6)}
    assert a["reference"].equals(b["reference"]) and set(a["reference"]["report_id"]) <= {f"a{i:03d}" for i in range(6)}
    assert a["summary"].equals(b["summary"]) and a["status"] == b["status"] and a["queue"].equals(b["queue"])
    assert a["matrix"].equals(b["matrix"]) and a["item"] == b["item"] and a["scope"] == b["scope"]
    for name, table in a["agreement"].tables().items():
        assert table.equals(b["agreement"].tables()[name])


def test_a_started_draft_is_kept_and_counts_when_the_report_was_decided_meanwhile(adaptive_study):
    wb = adaptive_study
    wb.set_adaptive(agreement_share=0.0)  # no sample: an agreement-sample report would stay for all six
    first = wb.next_report("rad1", "dev")
    values = {(r, first): {} for r in READERS}  # everybody says "nothing": the report is decided at 4 negatives
    wb.save_reading_draft("rad1", first, {"cardiomegaly": 1})
    for reader in READERS[1:5]:
        wb.submit_reading(reader, first, values[(reader, first)])
    listed = wb.work_list("rad1", "dev")
    assert listed.set_index("report_id").loc[first, "state"] == "draft"
    assert first not in wb.work_list("rad6", "dev")["report_id"].tolist()  # it left the others' lists
    wb.submit_reading("rad1", first, {"cardiomegaly": 1})
    assert wb.item_reference(first, "cardiomegaly").n_readers == 5


def test_the_old_order_and_the_order_sentence(adaptive_study):
    wb = adaptive_study
    wb.submit_reading("rad1", "a010", {})
    finish = wb.work_list("rad2", "dev")["report_id"].tolist()
    assert finish[0] == "a010"
    assert "nearest a decision first" in wb.reading_order_text()
    assert "kept for you for 30 minutes" in wb.reading_order_text()  # the claim, stated where readers read
    wb.set_adaptive(order="cohort")
    assert wb.work_list("rad2", "dev")["report_id"].tolist()[:2] == ["a000", "a001"]
    assert "cohort's own order" in wb.reading_order_text()


def test_only_admins_change_the_setting_and_every_change_is_audited(adaptive_study):
    wb = adaptive_study
    with pytest.raises(PermissionDenied):
        wb.as_actor(Actor(user="rad1", role="reader")).set_adaptive(enabled=False)
    events = wb.audit_log(entity="settings")
    assert any("adaptive" in k for k in events["entity_key"])
    with pytest.raises(Exception, match="agreement_share"):
        wb.set_adaptive(agreement_share=2)


def test_cli_reference_and_adaptive_show_the_figures(adaptive_study):
    from workbench.cli import main

    wb = adaptive_study
    _replay(wb, _values(wb, 30, 0))
    out = CliRunner().invoke(main, ["reference", "--study", str(wb.root)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "adaptive reading on" in text and "reads saved" in text and "of a full panel of 180 reads" in text
    assert "items decided" in text and "undecided 0" in text and "waiting for adjudication" in text
    out = CliRunner().invoke(main, ["adaptive", "--off", "--study", str(wb.root)])
    assert out.exit_code == 0 and "adaptive reading off" in out.output
    out = CliRunner().invoke(main, ["agreement", "--study", str(wb.root)])
    assert "agreement sample" not in out.output
    CliRunner().invoke(main, ["adaptive", "--on", "--study", str(wb.root)])
    out = CliRunner().invoke(main, ["agreement", "--study", str(wb.root)])
    assert (
        "computed on the agreement sample only" in " ".join(out.output.split()) and "n = 6 reports of 30" in out.output
    )


# ---------------------------------------------------------------- two processes at once

CHILD = r"""
import sys, time, hashlib
from pathlib import Path
from workbench.services import Workbench
root, go, readers = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
wb = Workbench(root)
labels = wb.vocab.asked_ids
while not go.exists():
    time.sleep(0.001)
active = list(readers)
while active:
    for reader in list(active):
        report = wb.next_report(reader, "dev")
        if report is None:
            active.remove(reader)
            continue
        h = hashlib.sha256(f"{reader}{report}".encode()).digest()
        wb.submit_reading(reader, report, {lab: int(h[j] < 30) for j, lab in enumerate(labels)})
        print(reader, report, flush=True)
"""


def _two_processes(wb, tmp_path: Path) -> list[tuple[str, str]]:
    """Two processes, three readers each, replay their lists at the same moment; the reads they made."""
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(wb.root), str(go), ",".join(part)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for part in (READERS[:3], READERS[3:])
    ]
    time.sleep(0)  # both are importing; the go file releases them together
    go.write_text("go")
    reads = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        reads += [tuple(line.split()) for line in out.splitlines()]
    return reads


@pytest.fixture(params=["sqlite", "postgresql"])
def race_study(request, tmp_path, study_templates):
    """A 4-of-6 study with 16 reports and adaptive reading on, without an agreement sample, on both databases."""
    from workbench.services import init_study

    if request.param == "sqlite":
        wb = copy_study(study_templates["empty"], tmp_path / "study")
    else:
        wb = init_study(
            tmp_path / "study",
            vocab="ranscore-21",
            db_url=request.getfixturevalue("pg_url"),
            rule={"rule": "at_least", "k": 4, "n": 6},
        )
    wb.import_reports(_reports(tmp_path, 16), "dev")
    wb.set_adaptive(enabled=True, agreement_share=0.0)
    yield wb
    wb.engine.dispose()


def test_two_processes_asking_at_once_never_over_read(race_study, tmp_path):
    wb = race_study
    reads = _two_processes(wb, tmp_path)
    assert len(reads) == len(set(reads))  # nobody read a report twice
    with wb.session() as s:
        from workbench.store import queries as q

        readings = q.readings_frame(s)
        claims = pd.DataFrame(
            q._raw_rows(s, "SELECT report_id, reader_id, done FROM readingclaim"),
            columns=["report_id", "reader", "done"],
        )
    assert claims["done"].astype(bool).all()  # every report given out was read
    rule = ReferenceRule("at_least", 4, 6)
    order = {pair: i for i, pair in enumerate(_saved_order(wb))}
    for report, group in readings.groupby("report_id"):
        readers = sorted(group["reader"].unique(), key=lambda r: order[(r, report)])
        # the report was still open before its last read: no read was made after the outcome was final
        before = group[group["reader"].isin(readers[:-1])]
        from workbench.core.adaptive import report_status

        counts = before.groupby(["report_id", "label"])["value"].agg(["sum", "count"]).reset_index()
        counts.columns = ["report_id", "label", "positives", "n_readers"]
        status = report_status(counts, rule, list(wb.vocab.asked_ids), set(), report_ids=[report])
        assert bool(status["open"].iloc[0]), (report, readers)
        assert len(readers) <= 6


def _saved_order(wb) -> list[tuple[str, str]]:
    """(reader, report) in the order their readings were saved."""
    with wb.session() as s:
        from workbench.store import queries as q

        rows = q._raw_rows(
            s, "SELECT reader_id, report_id, MIN(id) FROM reading GROUP BY reader_id, report_id ORDER BY 3"
        )
    return [(a, b) for a, b, _ in rows]


def test_reports_imported_later_are_offered_too(adaptive_study, tmp_path):
    wb = adaptive_study
    wb.work_list("rad1", "dev")
    more = tmp_path / "more.csv"
    pd.DataFrame({"id": ["z001"], "findings": ["Heart size normal."]}).to_csv(more, index=False)
    wb.import_reports(more, "dev")
    assert "z001" in wb.work_list("rad1", "dev")["report_id"].tolist()


def test_a_report_opened_from_the_list_is_claimed_and_offered_to_nobody_else(adaptive_study):
    """The Annotate page's arrows and links open reports next_report did not give: opening one claims it like
    next_report does, so another reader asking meanwhile is not given the same read (before, only next_report claimed)."""
    wb = adaptive_study
    wb.set_adaptive(agreement_share=0.0)
    given = wb.next_report("rad1", "dev")
    browsed = [r for r in wb.work_list("rad1", "dev")["report_id"] if r != given][0]
    assert wb.adaptive.open_report("rad1", "dev", browsed) is True
    others = [wb.next_report(reader, "dev") for reader in READERS[1:]]
    assert browsed not in others and given not in others
    assert browsed not in wb.work_list("rad2", "dev")["report_id"].tolist()
    assert wb.adaptive.open_report("rad2", "dev", browsed) is False  # held by rad1
    assert wb.adaptive.open_report("rad1", "dev", browsed) is True  # still theirs
    wb.submit_reading("rad1", browsed, {})
    assert wb.adaptive.open_report("rad1", "dev", browsed) is False  # read: nothing to claim
    wb.set_adaptive(enabled=False)
    assert wb.adaptive.open_report("rad3", "dev", browsed) is False  # no claims without adaptive reading


def test_the_human_ceiling_states_the_sample_of_its_runs_cohort(small_study, tmp_path):
    """`workbench ceiling RUN` is computed on the run's cohort: the n and share it states are that cohort's
    sample's (before, the sum over every cohort's sample)."""
    from workbench.cli import main

    wb = small_study
    run_id = wb.start_run("dev").run_id
    wb.import_reports(_reports(tmp_path, 20), "other")
    wb.set_adaptive(enabled=True, agreement_share=0.25)
    for cohort in ("dev", "other"):
        wb.work_list(wb.readers()[0], cohort)  # draws each cohort's sample
    dev, other = wb.agreement_sample("dev"), wb.agreement_sample("other")
    assert (dev.reports, dev.of, other.reports, other.of) == (2, 8, 5, 20)
    out = CliRunner().invoke(main, ["ceiling", str(run_id), "--study", str(wb.root)])
    assert out.exit_code == 0, out.output
    assert "n = 2 reports of 8 (sample share 25%)" in " ".join(out.output.split())
