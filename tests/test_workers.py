"""Labelling with worker processes: real spawned processes, real litellm, real HTTP to the fake server."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
from fake_llm_server import running_server

from workbench.labeller import workers
from workbench.labeller.llm import CallRequest, ModelConfig

REPORTS = [
    "Small left pleural effusion.",
    "No effusion or pneumothorax.",
    "Lungs are clear.",
    "Moderate right effusion.",
]


@pytest.fixture(autouse=True)
def plain_main(monkeypatch):
    """A spawned child re-runs the parent's __main__ script; after an AppTest in this process that is
    the app's temporary script (Streamlit sets sys.modules["__main__"]), which fails in the child.
    The tests here are about the workers, so they start from a plain __main__ (see the xfail below)."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))


def test_workers_do_not_re_run_the_hosts_main_script(monkeypatch, tmp_path):
    import sys
    import types

    script = tmp_path / "host_script.py"
    mark = tmp_path / "ran-again"
    script.write_text(f"open({str(mark)!r}, 'w').close()\n", encoding="utf-8")  # leaves a mark if it runs
    host = types.ModuleType("__main__")
    host.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", host)
    seen = []
    with running_server(latency=0.0) as srv:
        workers.complete_all_workers(
            requests(2 * workers.MIN_CALLS_PER_WORKER), cfg(srv.url), lambda req, res: seen.append(res)
        )
    assert len(seen) == 2 * workers.MIN_CALLS_PER_WORKER
    assert not mark.exists(), "the host's main script ran again in a labeller worker"


def requests(n: int) -> list[CallRequest]:
    return [
        CallRequest(
            f"k{i}",
            [
                {"role": "system", "content": "Answer in JSON."},
                {"role": "user", "content": f"Label: pleural effusion\nReport {i}: {REPORTS[i % 4]}"},
            ],
        )
        for i in range(n)
    ]


def cfg(url: str, **overrides) -> ModelConfig:
    options = dict(
        model="openai/fake-model",
        api_base=url,
        timeout_s=20.0,
        max_retries=2,
        backoff_base_s=0.01,
        concurrency=8,
        workers=2,
    )
    options.update(overrides)
    return ModelConfig(**options)


def test_worker_count_needs_enough_calls_per_worker():
    c = ModelConfig(model="openai/x", api_base="http://127.0.0.1:1/v1", concurrency=8, workers=4)
    assert workers.worker_count(c, 10) == 1  # too little work: this process
    assert workers.worker_count(c, 2 * workers.MIN_CALLS_PER_WORKER) == 2
    assert workers.worker_count(c, 100 * workers.MIN_CALLS_PER_WORKER) == 4
    assert (
        workers.worker_count(ModelConfig(model="openai/x", concurrency=2, workers=4), 10**6) == 2
    )  # one call each at least


def test_every_call_answered_once_by_two_processes_in_this_thread():
    n = 2 * workers.MIN_CALLS_PER_WORKER + 37
    calls = requests(n)
    for req in calls[::10]:  # every tenth call is refused by the server: failures come back as results too
        req.messages[-1]["content"] = "[[behaviour:400]] " + req.messages[-1]["content"]
    seen: dict[str, object] = {}
    threads = set()
    spawned = set()

    def on_result(req, res):
        assert req.key == res.key and res.key not in seen, "on_result called twice for one call"
        seen[res.key] = res
        threads.add(threading.get_ident())
        spawned.update(p.name for p in multiprocessing.active_children() if p.name.startswith("workbench-labeller"))

    with running_server(latency=0.01, answer_fn=lambda messages: messages[-1]["content"][-40:]) as srv:
        workers.complete_all_workers(calls, cfg(srv.url), on_result)
        assert srv.count == n  # no call made twice, none lost
        assert srv.max_in_flight <= 8  # the concurrency is split across the workers, not multiplied
    assert len(seen) == n and threads == {threading.get_ident()}  # one writer: the calling thread
    assert spawned == {"workbench-labeller-1"}  # two workers: this process and one spawned process
    for i, req in enumerate(calls):
        res = seen[req.key]
        if i % 10 == 0:
            assert not res.ok and res.error_kind == "bad_request"
        else:  # each answer belongs to its own call (the server echoes the end of the message it was sent)
            assert res.ok and res.text == req.messages[-1]["content"][-40:]


def test_cancel_stops_the_workers_and_keeps_what_was_answered():
    n = 4 * workers.MIN_CALLS_PER_WORKER
    cancel = threading.Event()
    results = []

    def on_result(req, res):
        results.append(res)
        if len(results) == 20:
            cancel.set()

    with running_server(latency=0.05) as srv:
        workers.complete_all_workers(requests(n), cfg(srv.url), on_result, cancel)
        made = srv.count
    assert 20 <= len(results) < n and made < n


def test_a_run_with_workers_labels_every_cell(small_study):
    with running_server(latency=0.0) as srv:
        summary = small_study.start_run("dev", model="openai/fake-model", api_base=srv.url, workers=2, concurrency=4)
    assert summary.status == "finished" and summary.calls_made == 160 and summary.failures == 0
    assert '"workers": 2' in small_study.run_info(summary.run_id).params_json


@pytest.mark.parametrize("bad", [0, -1])
def test_workers_must_be_positive(bad):
    with pytest.raises(ValueError, match="workers"):
        ModelConfig(model="openai/x", workers=bad)
