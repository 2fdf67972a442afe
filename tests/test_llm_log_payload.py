"""Report text and litellm's logging payload, and the collector's thresholds during a run.

litellm builds a logging payload for every call and hands it to whatever callbacks are
registered; even with message logging off it carries the raw request body (report text). So the
engine makes no call while a callback is registered (checked before every call), and with none
registered it skips litellm's redaction of a payload nobody receives. Real litellm, real HTTP
to the fake server on 127.0.0.1.
"""

from __future__ import annotations

import gc

import pytest
from fake_llm_server import running_server

from workbench import runtime
from workbench.labeller.llm import CallRequest, ModelConfig, _litellm, complete_all_sync

SECRET = "PATIENT-7731 Mrs Example, MRN 0042"


@pytest.fixture(scope="module")
def litellm():
    """litellm imported once for the module (its first import takes seconds)."""
    return _litellm()


@pytest.fixture(autouse=True)
def callback_lists_restored(litellm):
    """Every litellm callback list as it was before the test: litellm copies a callback it has used into
    its other lists, so removing it from the one it was added to is not enough."""
    from workbench.labeller.llm import _PAYLOAD_RECEIVERS

    kept = {name: list(getattr(litellm, name)) for name in _PAYLOAD_RECEIVERS}
    yield
    for name, callbacks in kept.items():
        getattr(litellm, name)[:] = callbacks


@pytest.fixture
def server():
    with running_server() as srv:
        yield srv


def requests_with_secret(n: int) -> list[CallRequest]:
    """n calls whose report text carries an identifiable marker."""
    return [
        CallRequest(
            key=f"r{i}",
            messages=[
                {"role": "system", "content": "You label chest X-ray reports. Answer in JSON."},
                {"role": "user", "content": f"Label: pleural effusion\nReport: {SECRET}. Small left effusion ({i})."},
            ],
        )
        for i in range(n)
    ]


def cfg_for(srv, **overrides) -> ModelConfig:
    options = dict(model="openai/fake-model", api_base=srv.url, timeout_s=30.0, max_retries=0, concurrency=2)
    options.update(overrides)
    return ModelConfig(**options)


def recording_logger(litellm):
    """A litellm CustomLogger that keeps a text dump of everything each success event hands it."""
    from litellm.integrations.custom_logger import CustomLogger

    class Recorder(CustomLogger):
        def __init__(self):
            super().__init__()
            self.events: list[str] = []

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            self.events.append(repr(kwargs) + repr(response_obj))

        def log_success_event(self, kwargs, response_obj, start_time, end_time):
            self.events.append(repr(kwargs) + repr(response_obj))

    return Recorder()


def test_a_registered_callback_is_refused_and_no_report_text_leaves(litellm, server):
    """litellm hands callbacks the raw request body even with message logging off: no call is made while one exists."""
    recorder = recording_logger(litellm)
    litellm.callbacks.append(recorder)
    results = []
    try:
        complete_all_sync(requests_with_secret(4), cfg_for(server), lambda req, res: results.append(res))
    finally:
        litellm.callbacks.remove(recorder)
    assert len(results) == 4 and {r.error_kind for r in results} == {"refused"}
    assert "Recorder" in results[0].error and "logging callback" in results[0].error
    assert server.count == 0 and recorder.events == []  # nothing was sent, so litellm had nothing to log


def test_a_callback_registered_mid_run_stops_the_calls_after_it(litellm, server):
    recorder = recording_logger(litellm)
    results = []

    def on_result(req, res) -> None:
        results.append(res)
        if len(results) == 2:
            litellm.callbacks.append(recorder)  # someone registers a logger while the run goes on

    try:
        complete_all_sync(requests_with_secret(8), cfg_for(server, concurrency=1), on_result)
    finally:
        if recorder in litellm.callbacks:
            litellm.callbacks.remove(recorder)
    assert [r.error_kind for r in results[:2]] == [None, None]
    assert results[2].error_kind == "refused" and "logging callback" in results[2].error
    assert server.count == 2  # one call at a time: nothing was sent after the callback appeared
    assert not [e for e in recorder.events if "PATIENT-7731" in e and "Small left effusion (2)" in e]


def test_without_a_receiver_the_payload_is_not_redacted(litellm, server):
    """Nothing receives the payload, so litellm's redaction of it (a tenth of the client's CPU) is skipped."""
    assert not any(getattr(litellm, name) for name in ("callbacks", "success_callback", "_async_success_callback")), (
        "another test left a litellm callback registered"
    )
    litellm.turn_off_message_logging = True  # as at import
    results = []
    complete_all_sync(requests_with_secret(2), cfg_for(server), lambda req, res: results.append(res))
    assert [r.error for r in results] == [None, None]
    assert litellm.turn_off_message_logging is False


def test_a_run_raises_the_collector_thresholds_and_restores_them(litellm, server):
    before = gc.get_threshold()
    seen = []
    complete_all_sync(requests_with_secret(3), cfg_for(server), lambda req, res: seen.append(gc.get_threshold()))
    assert seen == [runtime.RUN_THRESHOLDS] * 3
    assert gc.get_threshold() == before

    def fail(req, res) -> None:
        raise RuntimeError("the caller's handler broke")

    with pytest.raises(RuntimeError, match="handler broke"):
        complete_all_sync(requests_with_secret(2), cfg_for(server), fail)
    assert gc.get_threshold() == before  # restored on the way out of an error too


def test_overlapping_runs_restore_the_thresholds_only_when_the_last_one_ends():
    before = gc.get_threshold()
    with runtime.fewer_collections():
        with runtime.fewer_collections():
            assert gc.get_threshold() == runtime.RUN_THRESHOLDS
        assert gc.get_threshold() == runtime.RUN_THRESHOLDS  # the other run is still going
    assert gc.get_threshold() == before


def test_a_process_with_collection_tuned_higher_or_off_keeps_its_setting():
    before = gc.get_threshold()
    try:
        gc.set_threshold(0)  # collection off: not ours to turn back on
        with runtime.fewer_collections():
            assert gc.get_threshold()[0] == 0
        gc.set_threshold(200_000, 10, 10)  # already higher than ours
        with runtime.fewer_collections():
            assert gc.get_threshold() == (200_000, 10, 10)
        assert gc.get_threshold() == (200_000, 10, 10)
    finally:
        gc.set_threshold(*before)
