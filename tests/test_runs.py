"""Runs of the labeller (issue 3) on a real study: SQLite, the Git prompt repo, the offline labeller,
and real litellm over real HTTP to the fake OpenAI-compatible server. No mocks.

The small study (tests/data/*_small.csv) has 8 reports read by 6 readers; its reference (4 of 6)
is POSITIVE below, with two 3-3 ties (s3 pneumonia, s5 enlarged cardiomediastinum).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import SMALL_FINDINGS as FINDINGS
from conftest import SMALL_POSITIVE as POSITIVE
from fake_llm_server import MALFORMED_REPLY, REFUSAL_REPLY, last_user_text, running_server

from workbench.cli import main
from workbench.study import StudyError

ASKED = 20  # ranscore-21: No Finding is derived, never asked
N_REPORTS = 8


class Oracle:
    """A model that knows the designed truth, with per-(report, label) replies overridden.

    It reads the report between the template's triple quotes (not the few-shot examples, which
    also start with "Report:"), the label from "Answer about NAME only." (per-label mode) or the
    "## id (name)" blocks (joint mode), and records which labels each call asked about.
    """

    def __init__(self, names: dict[str, str], overrides: dict | None = None, omit: tuple[str, ...] = ()):
        self.ids = {name: lab for lab, name in names.items()}
        self.overrides = overrides or {}
        self.omit = omit
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def entry(self, sid: str, lab: str) -> dict:
        value = int((sid, lab) in POSITIVE)
        return {"value": value, "evidence": FINDINGS[sid].split(". ")[0] if value else ""}

    def __call__(self, messages: list[dict]) -> str:
        text = last_user_text(messages)
        report = text.split('"""')[-2]
        sid = next(s for s, f in FINDINGS.items() if f in report)
        match = re.search(r"Answer about (.+?) only\.", text)
        if match:
            lab = self.ids[match.group(1)]
            self.asked.append((sid, (lab,)))
            return self.overrides.get((sid, lab)) or json.dumps(self.entry(sid, lab))
        labels = tuple(re.findall(r"(?m)^## (\S+) \(", text))
        self.asked.append((sid, labels))
        return json.dumps({"labels": {lab: self.entry(sid, lab) for lab in labels if lab not in self.omit}})


@pytest.fixture
def server():
    with running_server() as srv:
        yield srv


def remote(srv, **extra) -> dict:
    """start_run keyword arguments for the fake server (quick failures, few retries)."""
    return {"model": "openai/fake", "api_base": srv.url, "max_retries": 1, "timeout_s": 20, **extra}


def values(wb, run_id: int) -> dict:
    """(report, label) -> value (None for a failure) of a run's stored predictions."""
    preds = wb.predictions(run_id)
    return {
        (r, lab): (None if pd.isna(v) else int(v))
        for r, lab, v in zip(preds["report_id"], preds["label"], preds["value"], strict=False)
    }


def expected_values(labels) -> dict:
    return {(f"s{i}", lab): int((f"s{i}", lab) in POSITIVE) for i in range(1, 9) for lab in labels}


def edit_effusion(wb) -> str:
    """The issue's one-label edit: a new look-for phrase for pleural effusion, committed."""
    lp = wb.label_prompt("pleural_effusion")
    edited = dataclasses.replace(lp, look_for=lp.look_for + ("blunting of the costophrenic angle",))
    return wb.save_prompts([edited], "Pleural effusion: blunting", base_commit=wb.prompt_commit())


# ---------------------------------------------------------------- offline labeller


def test_offline_run_records_everything(small_study):
    wb = small_study
    summary = wb.start_run("dev")
    assert (summary.status, summary.calls_total, summary.calls_made, summary.calls_reused, summary.failures) == (
        "finished",
        N_REPORTS * ASKED,
        N_REPORTS * ASKED,
        0,
        0,
    )
    run = wb.run_info(summary.run_id)
    assert run.prompt_commit == wb.prompt_commit() and len(run.prompt_commit) == 40
    assert run.model == "workbench/rules" and run.mode == "per_label" and run.endpoint == "workbench/rules"
    params = json.loads(run.params_json)
    assert params["temperature"] == 0 and params["seed"] == 0 and params["model"] == "workbench/rules"
    assert run.cohort_id == wb.cohort_id("dev")
    assert json.loads(run.labels_json) == wb.vocab.asked_ids and "no_finding" not in json.loads(run.labels_json)
    assert run.started_at and run.finished_at and run.finished_at >= run.started_at
    assert (run.calls_total, run.calls_made, run.calls_reused, run.failures, run.status) == (160, 160, 0, 0, "finished")
    preds = wb.predictions(summary.run_id)
    assert len(preds) == 160
    assert set(zip(preds["report_id"], preds["label"], strict=False)) == {
        (f"s{i}", lab) for i in range(1, 9) for lab in wb.vocab.asked_ids
    }
    assert set(preds["status"]) == {"ok"} and set(preds["value"]) == {0, 1}
    got = values(wb, summary.run_id)
    assert got[("s2", "pleural_effusion")] == 1 and got[("s1", "pleural_effusion")] == 0  # "No pleural effusion"
    assert got[("s6", "pleural_effusion")] == 0  # "Resolved right pleural effusion": resolved -> negative
    positives = preds[preds["value"] == 1]
    assert positives["evidence_found"].all() and (positives["evidence"] != "").all()


def test_second_run_is_free_and_one_label_edit_costs_one_call_per_report(small_study):
    wb = small_study
    first = wb.start_run("dev")
    second = wb.start_run("dev")
    assert (second.calls_made, second.calls_reused, second.status) == (0, 160, "finished")
    assert "0 made, 160 answers reused from the cache" in second.message()
    assert values(wb, second.run_id) == values(wb, first.run_id)
    new_commit = edit_effusion(wb)
    third = wb.start_run("dev")
    assert third.calls_made == N_REPORTS  # only pleural_effusion's messages changed: 8, not 8 x 20
    assert third.calls_reused == N_REPORTS * (ASKED - 1)
    assert f"{N_REPORTS} made, {N_REPORTS * (ASKED - 1)} answers reused from the cache" in third.message()
    run = wb.run_info(third.run_id)
    assert run.prompt_commit == new_commit != wb.run_info(first.run_id).prompt_commit
    assert (run.calls_made, run.calls_reused) == (8, 152)
    changed = wb.predictions(third.run_id).merge(wb.predictions(first.run_id), on=["report_id", "label"])
    moved = changed[changed["call_key_x"] != changed["call_key_y"]]
    assert set(moved["label"]) == {"pleural_effusion"} and len(moved) == N_REPORTS


def test_cli_run_prints_calls_made_and_reused(small_study):
    runner = CliRunner()
    args = ["run", "--cohort", "dev", "--study", str(small_study.root)]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "finished: 160 calls needed, 160 made, 0 answers reused" in result.output
    edit_effusion(small_study)
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "160 calls needed, 8 made, 152 answers reused from the cache" in result.output


def test_label_subset_unknown_and_derived_labels(small_study):
    wb = small_study
    summary = wb.start_run("dev", labels=["pleural_effusion", "Pneumothorax"])  # an id and a display name
    assert (summary.calls_total, summary.calls_made) == (16, 16)
    assert json.loads(wb.run_info(summary.run_id).labels_json) == ["pleural_effusion", "pneumothorax"]
    assert set(wb.predictions(summary.run_id)["label"]) == {"pleural_effusion", "pneumothorax"}
    with pytest.raises(
        StudyError, match=r"unknown label 'pleural_efusion' \(did you mean 'pleural_effusion'.*; labels: atelectasis"
    ):
        wb.start_run("dev", labels=["pleural_effusion", "pleural_efusion"])
    with pytest.raises(StudyError, match=r"'no_finding' is derived"):
        wb.start_run("dev", labels=["No Finding"])
    assert len(wb.runs()) == 1  # the refused runs were never recorded
    runner = CliRunner()
    result = runner.invoke(main, ["run", "--cohort", "dev", "--labels", "edema,fracture", "--study", str(wb.root)])
    assert result.exit_code == 0 and "16 calls needed, 16 made" in result.output
    result = runner.invoke(main, ["run", "--cohort", "dev", "--labels", "edema,oedema", "--study", str(wb.root)])
    assert (
        result.exit_code == 2 and "error: unknown label 'oedema'" in result.output and "Traceback" not in result.output
    )


def test_progress_is_reported_up_to_total_and_throttled(small_study, monkeypatch):
    seen = []
    wb = small_study
    wb.start_run("dev", on_progress=lambda p: seen.append((p.done, p.total, p.made, p.reused, p.failures)))
    done = [s[0] for s in seen]
    assert seen[0] == (0, 160, 0, 0, 0)  # once before the first call
    assert done == sorted(done) and len(seen) <= 161
    assert seen[-1] == (160, 160, 160, 0, 0) and {s[1] for s in seen} == {160}  # the last one always comes
    again = []
    wb.start_run("dev", on_progress=lambda p: again.append((p.done, p.total, p.made, p.reused)))
    assert again == [(160, 160, 0, 160)]  # all reused: one report, already complete
    # throttled: with a long interval only the first call and the final count are reported
    import workbench.labeller.labelling as labelling_module  # the one labelling path reports runs' progress

    monkeypatch.setattr(labelling_module, "PROGRESS_EVERY_S", 3600.0)
    throttled = []
    wb.start_run(
        "dev", labels=["pneumothorax"], prompt_ref=None, temperature=0.5, on_progress=lambda p: throttled.append(p.done)
    )
    assert throttled[0] == 0 and throttled[-1] == 8 and len(throttled) == 2


def test_joint_mode_one_call_per_report_offline(small_study):
    wb = small_study
    per_label = wb.start_run("dev")
    joint = wb.start_run("dev", mode="joint")
    assert (joint.calls_total, joint.calls_made, joint.failures) == (N_REPORTS, N_REPORTS, 0)
    run = wb.run_info(joint.run_id)
    assert run.mode == "joint"
    assert len(wb.predictions(joint.run_id)) == 160
    assert values(wb, joint.run_id) == values(wb, per_label.run_id)  # same rules, same prompts, same answers
    assert wb.predictions(joint.run_id)["call_key"].nunique() == N_REPORTS


def test_storing_reused_answers_is_not_one_statement_per_cell(small_study):
    from sqlalchemy import event

    wb = small_study
    wb.start_run("dev")
    statements: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement.split()[0].upper())

    event.listen(wb.engine, "before_cursor_execute", count)
    try:
        summary = wb.start_run("dev")
    finally:
        event.remove(wb.engine, "before_cursor_execute", count)
    assert summary.calls_reused == N_REPORTS * ASKED
    assert statements.count("DELETE") <= 10, f"{statements.count('DELETE')} DELETE statements for one cached run"


def test_a_cached_rerun_stored_in_several_batches_equals_the_first_run(small_study, monkeypatch):
    from workbench.labeller import labelling

    wb = small_study
    first = wb.start_run("dev")
    monkeypatch.setattr(labelling, "REUSE_BATCH", 7)  # 160 cached answers in 23 writes by the writer thread
    again = wb.start_run("dev")
    assert (again.calls_made, again.calls_reused, again.failures, again.status) == (0, N_REPORTS * ASKED, 0, "finished")
    assert wb.run_info(again.run_id).calls_reused == N_REPORTS * ASKED  # counted with each batch, none twice
    columns = ["report_id", "label", "value", "evidence", "evidence_found", "status", "detail", "call_key"]
    before, after = (
        wb.predictions(r).sort_values(["report_id", "label"])[columns].reset_index(drop=True)
        for r in (first.run_id, again.run_id)
    )
    pd.testing.assert_frame_equal(before, after)


def test_the_run_writer_raises_the_first_failed_write_and_skips_the_rest():
    from workbench.services.runs import RunWriter

    done: list[int] = []

    def fail() -> None:
        raise OSError("disk full")

    writer = RunWriter()
    writer.submit(lambda: done.append(1))
    writer.submit(fail)
    writer.submit(lambda: done.append(3))  # queued before the failure is seen: skipped, not run after it
    with pytest.raises(OSError, match="disk full"):
        writer.close()
    assert done == [1]
    quiet = RunWriter()
    quiet.submit(fail)
    quiet.close(raise_error=False)  # the run is already failing: its own error is the one raised
    with pytest.raises(OSError, match="disk full"):
        quiet.submit(lambda: done.append(4))
    assert done == [1]


def test_a_failed_write_of_the_offline_labeller_ends_the_run_incomplete(small_study, monkeypatch):
    from workbench.store import queries as q

    wb = small_study
    real = q.upsert_predictions
    calls = {"n": 0}

    def flaky(session, run_id, rows):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("database went away")
        return real(session, run_id, rows)

    monkeypatch.setattr(q, "upsert_predictions", flaky)
    from workbench.services.runs import RunStorageFault

    with pytest.raises(RunStorageFault, match="the run is kept and no answer had been stored yet") as failed:
        wb.start_run("dev")
    assert isinstance(failed.value.__cause__, OSError)  # the store's own error, kept as the cause
    run = wb.runs("dev").iloc[0]
    assert run["status"] == "incomplete"  # never left "running" with nobody executing it
    monkeypatch.setattr(q, "upsert_predictions", real)
    resumed = wb.resume_run(int(run["id"]))
    assert resumed.status == "finished" and resumed.failures == 0


# ---------------------------------------------------------------- through litellm and HTTP


def test_correct_server_gives_ok_predictions(small_study, server):
    wb = small_study
    server.answer_fn = Oracle(wb.vocab.names())
    summary = wb.start_run("dev", **remote(server))
    assert (summary.status, summary.calls_made, summary.failures) == ("finished", 160, 0)
    assert server.count == 160  # one HTTP request per call, no retries
    assert values(wb, summary.run_id) == expected_values(wb.vocab.asked_ids)
    preds = wb.predictions(summary.run_id)
    assert set(preds["status"]) == {"ok"}
    assert preds.loc[preds["value"] == 1, "evidence_found"].all()
    run = wb.run_info(summary.run_id)
    assert run.endpoint == server.url and run.model == "openai/fake"
    assert run.prompt_tokens > 0 and run.completion_tokens > 0
    body = server.bodies[0]
    assert body["model"] == "fake" and body["temperature"] == 0 and body["seed"] == 0


@pytest.mark.parametrize("behaviour,status", [("malformed", "parse_error"), ("refusal", "refusal")])
def test_bad_replies_are_failures_then_retried(small_study, server, behaviour, status):
    wb = small_study
    server.behaviour = behaviour
    labels = ["pleural_effusion", "pneumothorax"]
    summary = wb.start_run("dev", labels=labels, **remote(server))
    assert summary.failures == 16 and summary.failure_kinds == {status: 16} and summary.status == "finished"
    preds = wb.predictions(summary.run_id)
    assert set(preds["status"]) == {status}
    assert preds["value"].isna().all()  # never a silent 0
    assert wb.run_info(summary.run_id).failures == 16
    assert server.count == 16
    detail = preds["detail"].iloc[0]
    assert detail.startswith("model refused" if status == "refusal" else "no 0/1 value found in reply")
    server.behaviour = "ok"
    server.answer_fn = Oracle(wb.vocab.names())
    retried = wb.retry_failed(summary.run_id)
    assert server.count == 32  # failures are not cached: every one went back to the server
    assert (retried.calls_made, retried.calls_reused, retried.failures, retried.status) == (16, 0, 0, "finished")
    assert wb.run_info(summary.run_id).failures == 0
    assert values(wb, summary.run_id) == expected_values(labels)


def test_only_failed_cells_are_retried(small_study, server):
    wb = small_study
    oracle = Oracle(wb.vocab.names(), overrides={("s1", "edema"): MALFORMED_REPLY, ("s2", "edema"): REFUSAL_REPLY})
    server.answer_fn = oracle
    summary = wb.start_run("dev", labels=["edema", "pneumothorax"], **remote(server))
    assert summary.failures == 2 and summary.failure_kinds == {"parse_error": 1, "refusal": 1}
    got = values(wb, summary.run_id)
    assert got[("s1", "edema")] is None and got[("s2", "edema")] is None and got[("s3", "edema")] == 0
    server.answer_fn = Oracle(wb.vocab.names())
    retried = wb.retry_failed(summary.run_id)
    assert retried.calls_made == 2 and retried.already_done == 14 and server.count == 18
    assert sorted(server.answer_fn.asked) == [("s1", ("edema",)), ("s2", ("edema",))]
    assert values(wb, summary.run_id) == expected_values(["edema", "pneumothorax"])


def test_server_errors_are_call_errors_then_cli_retry(small_study, server):
    wb = small_study
    server.behaviour, server.fail_times = "500", 10**6
    summary = wb.start_run("dev", labels=["pleural_effusion", "pneumothorax"], **remote(server))
    assert summary.failures == 16 and summary.failure_kinds == {"server": 16}
    assert server.count == 32  # max_retries=1: two attempts per call
    preds = wb.predictions(summary.run_id)
    assert set(preds["status"]) == {"call_error"} and preds["value"].isna().all()
    assert preds["detail"].str.contains("HTTP 500").all()
    assert wb.run_info(summary.run_id).failures == 16
    server.behaviour = "ok"
    server.answer_fn = Oracle(wb.vocab.names())
    result = CliRunner().invoke(main, ["run", "--retry-failed", str(summary.run_id), "--study", str(wb.root)])
    assert result.exit_code == 0, result.output
    assert f"run {summary.run_id} finished: 16 calls needed, 16 made, 0 answers reused" in result.output
    assert "0 failures" in result.output
    assert server.count == 48
    assert wb.run_info(summary.run_id).failures == 0
    assert values(wb, summary.run_id) == expected_values(["pleural_effusion", "pneumothorax"])


def test_evidence_not_in_report_is_flagged(small_study, server):
    wb = small_study
    fake_quote = json.dumps({"value": 1, "evidence": "Large right tension pneumothorax with mediastinal shift."})
    server.answer_fn = Oracle(wb.vocab.names(), overrides={("s7", "pneumothorax"): fake_quote})
    summary = wb.start_run("dev", labels=["pneumothorax", "pleural_effusion"], **remote(server))
    preds = wb.predictions(summary.run_id).set_index(["report_id", "label"])
    invented = preds.loc[("s7", "pneumothorax")]
    assert invented["value"] == 1 and invented["status"] == "ok"
    assert invented["evidence_found"] == False  # noqa: E712 (stored as 0/False)
    quoted = preds.loc[("s2", "pleural_effusion")]
    assert quoted["evidence"] == "Small left pleural effusion" and quoted["evidence_found"] == True  # noqa: E712


def test_joint_mode_through_the_server(small_study, server):
    wb = small_study
    oracle = Oracle(wb.vocab.names(), omit=("edema",))
    server.answer_fn = oracle
    summary = wb.start_run("dev", mode="joint", **remote(server))
    assert server.count == N_REPORTS and summary.calls_made == N_REPORTS
    assert all(set(labels) == set(wb.vocab.asked_ids) for _, labels in oracle.asked)
    assert summary.failures == N_REPORTS  # a label missing from a joint reply fails alone
    preds = wb.predictions(summary.run_id)
    missing = preds[preds["value"].isna()]
    assert set(missing["label"]) == {"edema"} and missing["detail"].str.contains("missing").all()
    server.answer_fn = retry_oracle = Oracle(wb.vocab.names())
    retried = wb.retry_failed(summary.run_id)
    assert retried.calls_made == N_REPORTS and server.count == 2 * N_REPORTS
    assert {labels for _, labels in retry_oracle.asked} == {("edema",)}  # only what failed was asked again
    assert values(wb, summary.run_id) == expected_values(wb.vocab.asked_ids)


def test_joint_failure_kinds_name_the_failure(small_study, server):
    server.answer_fn = Oracle(small_study.vocab.names(), omit=("edema",))
    summary = small_study.start_run("dev", mode="joint", **remote(server))
    assert summary.failure_kinds == {"parse_error": N_REPORTS}
    assert "ok:" not in summary.message()


def test_fake_server_keyword_answer_reads_the_report_not_the_examples(small_study):
    from fake_llm_server import keyword_answer

    from workbench.core.prompts import render_label_call

    messages = render_label_call(small_study.prompt_set(), "pleural_effusion", "Pleural Effusion", "Lungs are clear.")
    assert "Report: No pleural effusion or pneumothorax." in messages[1]["content"]  # the starter prompt's example
    assert json.loads(keyword_answer(messages, ("effusion",))) == {"value": 0, "evidence": ""}


# ---------------------------------------------------------------- governance


def test_remote_endpoint_refused_before_any_call(small_study, server):
    wb = small_study
    with pytest.raises(StudyError, match=re.escape("may not be sent to https://api.example.com/v1")):
        wb.start_run("dev", model="openai/gpt-4o-mini", api_base="https://api.example.com/v1")
    with pytest.raises(StudyError, match=re.escape("may not be sent to https://api.openai.com/v1")):
        wb.start_run("dev", model="openai/gpt-4o-mini")  # the provider's own API, named
    # a pool with one remote member is refused as a whole: not even the local member is called
    with pytest.raises(StudyError, match=re.escape("https://api.example.com/v1")):
        wb.start_run("dev", model="openai/fake", endpoints=[server.url, "https://api.example.com/v1"])
    assert server.count == 0
    assert wb.runs().empty


def test_every_run_records_its_endpoint_and_resume_rechecks_it(small_study, server):
    wb = small_study
    server.answer_fn = Oracle(wb.vocab.names())
    offline = wb.start_run("dev", labels=["edema"])
    online = wb.start_run("dev", labels=["edema"], **remote(server))
    runs = wb.runs().set_index("id")
    assert runs.loc[offline.run_id, "endpoint"] == "workbench/rules"
    assert runs.loc[online.run_id, "endpoint"] == server.url
    # an admin withdrew the local server: resuming that run may no longer send text to it
    wb.config.allowed_endpoints = ["workbench/rules"]
    with pytest.raises(StudyError, match=re.escape(server.url)):
        wb.resume_run(online.run_id)
    assert server.count == N_REPORTS


@pytest.mark.parametrize("base", ["http://127.0.0.1.example.com/v1", "http://localhost.example.com/v1"])
def test_lookalike_local_host_is_refused(small_study, base):
    already_cancelled = threading.Event()
    already_cancelled.set()  # if the check lets it through, no call is made anyway
    with pytest.raises(StudyError, match="may not be sent to"):
        small_study.start_run("dev", model="openai/fake", api_base=base, cancel=already_cancelled)


def test_api_key_env_is_used(small_study, server, monkeypatch):
    monkeypatch.setenv("WB_TEST_LABELLER_KEY", "sk-test-123")
    server.answer_fn = Oracle(small_study.vocab.names())
    small_study.start_run("dev", labels=["edema"], api_key_env="WB_TEST_LABELLER_KEY", **remote(server))
    assert server.count == N_REPORTS
    assert {h.get("authorization") for h in server.headers} == {"Bearer sk-test-123"}


def test_max_retries_zero_is_honoured(small_study, server):
    server.behaviour, server.fail_times = "500", 1  # every distinct call fails once, then succeeds
    summary = small_study.start_run("dev", labels=["edema"], **remote(server, max_retries=0))
    assert json.loads(small_study.run_info(summary.run_id).params_json).get("max_retries") == 0
    assert server.count == N_REPORTS and summary.failures == N_REPORTS


def test_failures_never_enter_the_call_cache(small_study, server):
    wb = small_study
    server.behaviour = "malformed"
    wb.start_run("dev", labels=["edema"], **remote(server))
    server.behaviour = "ok"
    server.answer_fn = Oracle(wb.vocab.names())
    fresh = wb.start_run("dev", labels=["edema"], **remote(server))  # a new run, same calls
    assert (fresh.calls_made, fresh.calls_reused, fresh.failures) == (N_REPORTS, 0, 0)
    assert server.count == 2 * N_REPORTS
    again = wb.start_run("dev", labels=["edema"], **remote(server))
    assert (again.calls_made, again.calls_reused) == (0, N_REPORTS) and server.count == 2 * N_REPORTS
    assert wb.predictions(again.run_id)["value"].notna().all()


def test_cli_run_against_the_server(small_study, server):
    server.answer_fn = Oracle(small_study.vocab.names())
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--cohort",
            "dev",
            "--model",
            "openai/fake",
            "--api-base",
            server.url,
            "--labels",
            "edema",
            "--concurrency",
            "2",
            "--study",
            str(small_study.root),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "8 calls needed, 8 made" in result.output
    assert server.count == N_REPORTS and server.max_in_flight <= 2
    run = small_study.run_info(int(re.search(r"run (\d+) finished", result.output).group(1)))
    assert json.loads(run.params_json)["concurrency"] == 2 and run.endpoint == server.url
