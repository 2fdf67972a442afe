"""A run adapts to the local server it meets (issue 33): no more calls in flight than the server answers at once,
fewer after timeouts, and the JSON schema sent to a server on this machine even when litellm does not know the
model. Real HTTP to the fake server on 127.0.0.1 (one-slot servers are ``serial=True``)."""

from __future__ import annotations

import pytest
from fake_llm_server import running_server

from workbench.labeller import labelling
from workbench.labeller.llm import CallRequest, ModelConfig, Throttle, fitted_to_server, server_facts


@pytest.fixture(scope="module", autouse=True)
def litellm_imported():
    """litellm's first import takes 5 s or more on a busy machine: keep it off every test's clock."""
    import litellm  # noqa: F401


def cfg_for(srv, **overrides) -> ModelConfig:
    options = dict(model="openai/smollm2", api_base=srv.url, backoff_base_s=0.01, max_retries=3, concurrency=8)
    return ModelConfig(**(options | overrides))


def requests_for(n: int) -> list[CallRequest]:
    return [
        CallRequest(
            f"k{i}",
            [{"role": "user", "content": f"Label: pleural effusion\nReport: effusion case {i}"}],
            meta={"labels": ["effusion"], "mode": "per_label", "report": f"effusion case {i}"},
        )
        for i in range(n)
    ]


def label(requests, cfg) -> tuple[labelling.LabelCounts, list]:
    answers: list = []
    counts = labelling.label_calls(requests, cfg, lambda keys: {}, answers.extend)
    return counts, answers


@pytest.mark.parametrize(
    ("options", "kind", "how"),
    [
        ({"total_slots": 2}, "llama.cpp", "total_slots in /props"),
        ({"owned_by": "me"}, "llama-cpp-python", "one call at a time"),
        # busy, its /v1/models waits for the call under way (the probe timed out): its OpenAPI title answers at once
        (
            {"openapi_title": "\U0001f999 llama.cpp Python API", "owned_by": "?"},
            "llama-cpp-python",
            "one call at a time",
        ),
    ],
)
def test_a_local_server_says_how_many_calls_it_answers_at_once(options, kind, how):
    with running_server(**options) as srv:
        facts = server_facts(cfg_for(srv))
    assert facts.kind == kind and how in facts.how
    assert facts.slots == options.get("total_slots", 1)


def test_a_server_that_says_nothing_and_a_remote_one_keep_the_configured_concurrency(fake_llm_server):
    cfg = cfg_for(fake_llm_server)
    assert fitted_to_server(cfg) == (cfg, "")
    remote = ModelConfig(model="openai/gpt-4o-mini")
    assert server_facts(remote).slots is None
    assert fake_llm_server.requests == 4  # /props, /slots, /openapi.json, /v1/models of the local one; none remote


def test_a_one_slot_server_is_sent_one_call_at_a_time_and_the_run_says_so():
    with running_server(owned_by="me", serial=True, latency=0.05) as srv:
        counts, answers = label(requests_for(6), cfg_for(srv, concurrency=8))
        in_flight = srv.max_in_flight
    assert in_flight == 1  # before: 8 sent at once, 7 of them spending their timeout in the server's queue
    assert counts.failed == 0 and len(answers) == 6
    assert any("concurrency 1 instead of 8" in note for note in counts.notes), counts.notes


def test_timeouts_lower_the_concurrency_instead_of_piling_up_retries():
    # a one-slot server that does not say so: 4 calls at once, 1 s each, a 2.5 s timeout: the 3rd and 4th
    # time out in the queue; the run halves its concurrency at each timeout and every call is answered
    with running_server(serial=True, latency=1.0) as srv:
        counts, answers = label(requests_for(6), cfg_for(srv, concurrency=4, timeout_s=2.5, max_retries=4))
    assert counts.failed == 0, counts.failure_examples
    lowered = [note for note in counts.notes if "timed out: concurrency lowered" in note]
    assert lowered and lowered[0].endswith("from 4 to 2"), counts.notes


def test_the_throttle_halves_down_to_one_and_reports_each_step():
    notes: list[str] = []
    throttle = Throttle(8, notes.append)
    for _ in range(5):
        throttle.timed_out()
    assert throttle.limit == 1 and notes[-1].endswith("from 2 to 1") and len(notes) == 3


def test_the_json_schema_goes_to_a_local_server_litellm_does_not_know(fake_llm_server):
    counts, _ = label(requests_for(1), cfg_for(fake_llm_server, response_schema=True))
    sent = fake_llm_server.bodies[-1]["response_format"]  # before: nothing sent, and nothing said
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"]["required"] == ["value", "evidence"]
    assert any("JSON schema sent as response_format to the server on this machine" in n for n in counts.notes)


def test_llama_cpp_python_gets_the_schema_in_the_form_it_accepts():
    with running_server(owned_by="me") as srv:
        label(requests_for(1), cfg_for(srv, response_schema=True))
        sent = srv.bodies[-1]["response_format"]
    assert sent["type"] == "json_object" and sent["schema"]["properties"]["value"]["enum"] == [0, 1]
