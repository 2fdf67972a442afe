"""The LLM engine over real HTTP: real litellm talking to the fake server on 127.0.0.1."""

import asyncio
import threading
import time

import pytest
from fake_llm_server import FakeLLMServer, running_server

from workbench.core.parsing import parse_reply
from workbench.labeller.llm import (
    CallRequest,
    CallResult,
    LLMError,
    ModelConfig,
    backoff_s,
    check_model,
    complete_all,
    complete_all_sync,
)

REPORTS = [
    "Small left pleural effusion. Heart size normal.",
    "No acute cardiopulmonary process. No effusion or pneumothorax.",
    "Lungs are clear. No focal consolidation.",
    "Moderate right effusion with basal atelectasis.",
]


@pytest.fixture(scope="module", autouse=True)
def litellm_imported():
    """litellm's first import takes 5 s or more on a busy machine: keep it off every test's clock."""
    import litellm  # noqa: F401


@pytest.fixture
def server():
    with running_server() as srv:
        yield srv


def cfg_for(srv: FakeLLMServer, **overrides) -> ModelConfig:
    options = dict(
        model="openai/fake-model",
        api_base=srv.url,
        backoff_base_s=0.01,
        backoff_max_s=2.0,
        timeout_s=30.0,
        max_retries=3,
        concurrency=4,
    )
    options.update(overrides)
    return ModelConfig(**options)


def request(key: str, report: str, marker: str = "") -> CallRequest:
    messages = [
        {"role": "system", "content": "You label chest X-ray reports. Answer in JSON."},
        {"role": "user", "content": f"{marker}Label: pleural effusion\nReport: {report}"},
    ]
    return CallRequest(key=key, messages=messages, meta={"report": report})


def run(requests, cfg, cancel=None):
    """Run the engine; return {key: CallResult} and check on_result's one-per-request contract."""
    results: dict[str, CallResult] = {}

    def on_result(req: CallRequest, res: CallResult) -> None:
        assert req.key == res.key
        assert res.key not in results, "on_result called twice for one request"
        results[res.key] = res

    complete_all_sync(requests, cfg, on_result, cancel)
    return results


def test_correct_answers_and_usage(server):
    requests = [request(str(i), r) for i, r in enumerate(REPORTS)]
    results = run(requests, cfg_for(server))
    assert set(results) == {"0", "1", "2", "3"}
    decisions = {k: parse_reply(r.text, REPORTS[int(k)]) for k, r in results.items()}
    assert {k: d.value for k, d in decisions.items()} == {"0": 1, "1": 1, "2": 0, "3": 1}
    assert all(d.status == "ok" for d in decisions.values())
    assert decisions["0"].evidence == "Small left pleural effusion."
    assert decisions["0"].evidence_found is True
    for res in results.values():
        assert res.error is None and res.error_kind is None and res.attempts == 1
        assert res.prompt_tokens > 5 and res.completion_tokens >= 1
        assert res.latency_s > 0
        assert res.cost == 0.0  # a model on this machine that litellm has no price for costs nothing
    assert server.count == 4


def test_usage_matches_the_server(server):
    server.reply = "one two three"
    results = run([request("a", "x")], cfg_for(server))
    assert results["a"].text == "one two three"
    assert results["a"].completion_tokens == 3
    body = server.bodies[0]
    assert results["a"].prompt_tokens == sum(len(m["content"].split()) for m in body["messages"])


def test_temperature_seed_and_max_tokens_are_sent(server):
    run([request("a", REPORTS[0])], cfg_for(server, max_tokens=77))
    body = server.bodies[0]
    assert body["temperature"] == 0
    assert body["seed"] == 0
    assert body["max_tokens"] == 77
    assert body["model"] == "fake-model"
    assert "response_format" not in body


def test_no_seed_and_json_mode(server):
    run([request("a", REPORTS[0])], cfg_for(server, seed=None, json_mode=True, temperature=0.3))
    body = server.bodies[0]
    assert "seed" not in body
    assert body["temperature"] == 0.3
    assert body["response_format"] == {"type": "json_object"}


def test_dummy_key_for_local_servers_and_env_key(server, monkeypatch):
    run([request("a", "x")], cfg_for(server))
    assert server.headers[0]["authorization"].startswith("Bearer ")
    monkeypatch.setenv("WB_TEST_KEY", "sk-test-123")
    run([request("b", "y")], cfg_for(server, api_key_env="WB_TEST_KEY"))
    assert server.headers[1]["authorization"] == "Bearer sk-test-123"


def test_missing_key_env_is_a_config_error(server, monkeypatch):
    monkeypatch.delenv("WB_MISSING_KEY", raising=False)
    with pytest.raises(ValueError, match="WB_MISSING_KEY"):
        run([request("a", "x")], cfg_for(server, api_key_env="WB_MISSING_KEY"))
    assert server.count == 0


def test_concurrency_bound_is_respected(server):
    server.latency = 0.15
    requests = [request(str(i), f"effusion {i}.") for i in range(24)]
    start = time.monotonic()
    results = run(requests, cfg_for(server, concurrency=3))
    elapsed = time.monotonic() - start
    assert len(results) == 24 and all(r.error is None for r in results.values())
    assert server.max_in_flight == 3
    assert elapsed >= 24 / 3 * 0.15 * 0.9


def test_calls_run_in_parallel(server):
    server.latency = 1.0  # long enough for the calls to overlap on a loaded machine too
    run([request(str(i), "x") for i in range(16)], cfg_for(server, concurrency=16))
    assert server.max_in_flight >= 8  # the server saw them at once (a clock would also count the machine's load)


def test_429_with_retry_after_then_success(server):
    server.retry_after = 0.3
    start = time.monotonic()
    results = run([request("a", REPORTS[0], "[[behaviour:429:2]]")], cfg_for(server))
    elapsed = time.monotonic() - start
    res = results["a"]
    assert res.error is None and res.attempts == 3
    assert parse_reply(res.text).value == 1
    assert server.count == 3 and server.counts["429"] == 3
    assert elapsed >= 0.55  # two waits of Retry-After 0.3 s, not backoff_base_s 0.01 s


def test_retry_after_is_capped_by_backoff_max(server):
    server.retry_after = 30
    cfg = cfg_for(server, backoff_max_s=0.2)
    assert all(backoff_s(cfg, 1, 30.0) <= 0.2 for _ in range(100))  # the wait itself, with its jitter
    results = run([request("a", "x", "[[behaviour:429:1]]")], cfg)
    assert results["a"].attempts == 2 and results["a"].error is None
    # the call's own clock (litellm's import is before it): far below the 30 s the server asked for,
    # with room for a loaded machine
    assert results["a"].latency_s < 20


def test_permanent_429_is_rate_limit_error(server):
    server.retry_after = 0.01
    results = run([request("a", "x", "[[behaviour:429:99]]")], cfg_for(server, max_retries=2))
    res = results["a"]
    assert res.text is None and res.error_kind == "rate_limit" and res.attempts == 3
    assert "429 after 3 attempts" in res.error
    assert server.count == 3


def test_500_then_success(server):
    results = run([request("a", REPORTS[2], "[[behaviour:500:2]]")], cfg_for(server))
    res = results["a"]
    assert res.error is None and res.attempts == 3
    assert parse_reply(res.text).value == 0
    assert server.count == 3


def test_permanent_500_gives_up_after_max_retries_plus_one(server):
    results = run([request("a", "x", "[[behaviour:500:99]]")], cfg_for(server, max_retries=4))
    res = results["a"]
    assert res.text is None
    assert res.error_kind == "server"
    assert res.attempts == 5
    assert "HTTP 500 after 5 attempts" in res.error
    assert server.count == 5


def test_no_retry_on_auth_or_bad_request(server):
    results = run(
        [request("a", "x", "[[behaviour:401]]"), request("b", "y", "[[behaviour:400]]")], cfg_for(server, max_retries=4)
    )
    assert results["a"].error_kind == "auth" and results["a"].attempts == 1
    assert results["b"].error_kind == "bad_request" and results["b"].attempts == 1
    assert "401" in results["a"].error and "400" in results["b"].error
    assert server.count == 2


def test_timeout_is_retried_then_reported(server):
    start = time.monotonic()
    results = run([request("a", "x", "[[behaviour:hang:20]]")], cfg_for(server, timeout_s=0.5, max_retries=1))
    res = results["a"]
    assert res.error_kind == "timeout"
    assert res.attempts == 2
    assert res.error.startswith("timed out after 0.5 s (2 attempts)")
    assert time.monotonic() - start < 15  # not the 2 x 20 s the server would hang
    assert server.count == 2


def test_slow_but_within_timeout_succeeds(server):
    results = run([request("a", REPORTS[0], "[[behaviour:slow:0.3]]")], cfg_for(server, timeout_s=30))
    assert results["a"].error is None and results["a"].latency_s >= 0.3


def test_connection_refused_is_connection_error():
    with running_server() as srv:
        url = srv.url
    cfg = ModelConfig("openai/fake", api_base=url, backoff_base_s=0.01, max_retries=2, timeout_s=2)
    results = run([request("a", "x")], cfg)
    assert results["a"].error_kind == "connection"
    assert results["a"].attempts == 3
    assert url in results["a"].error


def test_malformed_prose_and_refusal_replies_come_back_as_text(server):
    requests = [
        request("malformed", REPORTS[0], "[[behaviour:malformed]]"),
        request("prose", REPORTS[0], "[[behaviour:prose]]"),
        request("refusal", REPORTS[0], "[[behaviour:refusal]]"),
    ]
    results = run(requests, cfg_for(server))
    assert all(r.error is None and r.text for r in results.values())
    assert parse_reply(results["malformed"].text).status == "parse_error"
    prose = parse_reply(results["prose"].text, REPORTS[0])
    assert (prose.value, prose.status, prose.evidence_found) == (1, "ok", True)
    assert parse_reply(results["refusal"].text).status == "refusal"


def test_broken_http_body_is_a_failure_not_an_exception(server):
    results = run([request("a", "x", "[[behaviour:garbage]]")], cfg_for(server, max_retries=1))
    assert results["a"].text is None and results["a"].error_kind in ("server", "other")


def test_router_pool_spreads_calls_across_endpoints():
    with running_server(latency=0.02) as a, running_server(latency=0.02) as b:
        cfg = ModelConfig("openai/fake", endpoints=(a.url, b.url), backoff_base_s=0.01, concurrency=8)
        requests = [request(str(i), f"effusion {i}.") for i in range(40)]
        results = run(requests, cfg)
        assert len(results) == 40 and all(r.error is None for r in results.values())
        assert all(parse_reply(r.text).value == 1 for r in results.values())
        assert a.count > 0 and b.count > 0
        assert a.count + b.count == 40
        assert a.bodies[0]["temperature"] == 0 and a.bodies[0]["seed"] == 0


def test_router_pool_survives_a_dead_endpoint():
    with running_server() as dead:
        dead_url = dead.url
    with running_server() as alive:
        cfg = ModelConfig(
            "openai/fake", endpoints=(alive.url, dead_url), backoff_base_s=0.01, max_retries=6, concurrency=4
        )
        results = run([request(str(i), "x") for i in range(20)], cfg)
        assert all(r.error is None for r in results.values())
        assert alive.count == 20


def test_cancel_stops_new_calls(server):
    server.latency = 0.1
    cancel = threading.Event()
    seen = []

    def on_result(req, res):
        seen.append(res)
        if len(seen) == 3:
            cancel.set()

    requests = [request(str(i), "x") for i in range(50)]
    complete_all_sync(requests, cfg_for(server, concurrency=2), on_result, cancel)
    assert 3 <= len(seen) <= 4  # the calls in flight when cancel was set still finish
    assert server.count == len(seen)


def test_cancel_before_start_makes_no_calls(server):
    cancel = threading.Event()
    cancel.set()
    assert run([request("a", "x")], cfg_for(server), cancel) == {}
    assert server.count == 0


def test_cancel_abandons_pending_retries(server):
    server.retry_after = 30
    cancel = threading.Event()
    cancelled_at = []

    def cancel_after_the_first_429():
        while server.count < 1 and not cancel.is_set():
            time.sleep(0.01)
        cancelled_at.append(time.monotonic())
        cancel.set()

    threading.Thread(target=cancel_after_the_first_429, daemon=True).start()
    results = run([request("a", "x", "[[behaviour:429:99]]")], cfg_for(server, backoff_max_s=60), cancel)
    assert time.monotonic() - cancelled_at[0] < 15  # not the 30 s the server asked to wait
    assert results["a"].error_kind == "rate_limit"
    assert "cancelled" in results["a"].error


def test_on_result_runs_on_one_thread_one_at_a_time(server):
    server.latency = 0.02
    threads, active, overlaps = set(), [0], [0]

    def on_result(req, res):
        threads.add(threading.get_ident())
        active[0] += 1
        overlaps[0] = max(overlaps[0], active[0])
        time.sleep(0.001)
        active[0] -= 1

    complete_all_sync([request(str(i), "x") for i in range(30)], cfg_for(server, concurrency=8), on_result)
    assert len(threads) == 1 and overlaps[0] == 1


def test_on_result_exception_propagates(server):
    def boom(req, res):
        raise KeyError("caller bug")

    with pytest.raises(KeyError):
        complete_all_sync([request(str(i), "x") for i in range(5)], cfg_for(server), boom)


def test_async_api_and_sync_wrapper_inside_a_running_loop(server):
    got = []

    async def main():
        await complete_all([request("a", REPORTS[0])], cfg_for(server), lambda q, r: got.append(r))
        # a caller already inside a loop (a notebook) can still use the sync wrapper
        complete_all_sync([request("b", REPORTS[1])], cfg_for(server), lambda q, r: got.append(r))

    asyncio.run(main())
    assert [r.key for r in got] == ["a", "b"] and all(r.error is None for r in got)


def test_sync_wrapper_from_a_plain_thread_twice(server):
    """Streamlit's script thread has no loop; each run makes a new loop (cached clients must cope)."""
    out = []

    def work():
        for key in ("a", "b"):
            complete_all_sync([request(key, "x")], cfg_for(server), lambda q, r: out.append(r))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(30)
    assert [r.key for r in out] == ["a", "b"] and all(r.error is None for r in out)


def test_empty_request_list_is_a_no_op(server):
    assert run([], cfg_for(server)) == {}


def test_workbench_models_are_refused(server):
    cfg = ModelConfig("workbench/rules")
    with pytest.raises(ValueError, match="rule-based"):
        run([request("a", "x")], cfg)
    with pytest.raises(ValueError):
        check_model(cfg)


def test_check_model(server):
    assert check_model(cfg_for(server)) == '{"value": 0, "evidence": ""}'
    with running_server() as gone:
        url = gone.url
    with pytest.raises(LLMError, match="cannot connect"):
        check_model(ModelConfig("openai/fake", api_base=url, backoff_base_s=0.01))


def test_params_and_endpoint_label(monkeypatch):
    cfg = ModelConfig(
        "openai/qwen3-14b",
        api_base="http://127.0.0.1:8000/v1",
        api_key_env="KEY",
        endpoints=("http://a:8000/v1", "http://b:8000/v1"),
        seed=7,
        json_mode=True,
    )
    assert cfg.params() == {
        "model": "openai/qwen3-14b",
        "temperature": 0.0,
        "seed": 7,
        "max_tokens": 256,
        "json_mode": True,
    }
    other_pool = ModelConfig("openai/qwen3-14b", endpoints=("http://c:8000/v1",), seed=7, json_mode=True)
    assert cfg.params() == other_pool.params()  # where it runs does not change the cache key
    assert cfg.endpoint_label() == "pool of 2: http://a:8000/v1, http://b:8000/v1"
    assert ModelConfig("openai/x", api_base="http://127.0.0.1:8000/v1").endpoint_label() == "http://127.0.0.1:8000/v1"
    for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL", "OLLAMA_API_BASE"):
        monkeypatch.delenv(var, raising=False)
    assert ModelConfig("openai/gpt-4o-mini").endpoint_label() == "https://api.openai.com/v1 (provider default)"
    assert ModelConfig("gpt-4o-mini").endpoint_label() == "https://api.openai.com/v1 (provider default)"
    assert ModelConfig("anthropic/claude-3-5-haiku").endpoint_label() == "https://api.anthropic.com (provider default)"
    assert ModelConfig("ollama/llama3").endpoint_label() == "http://localhost:11434 (provider default)"
    monkeypatch.setenv("OLLAMA_API_BASE", "http://127.0.0.2:9999")  # litellm reads it: so does the label
    assert ModelConfig("ollama_chat/llama3").endpoint_label() == "http://127.0.0.2:9999 ($OLLAMA_API_BASE)"
    assert ModelConfig("workbench/rules").endpoint_label().startswith("local")


@pytest.mark.parametrize("bad", [dict(concurrency=0), dict(timeout_s=0), dict(max_retries=-1), dict(model="")])
def test_model_config_validation(bad):
    with pytest.raises(ValueError):
        ModelConfig(**{"model": "openai/x", **bad})


def test_endpoints_list_becomes_tuple():
    cfg = ModelConfig("openai/x", endpoints=["http://a/v1", "http://b/v1"])
    assert cfg.endpoints == ("http://a/v1", "http://b/v1")
    hash(cfg)


def test_cost_for_a_priced_model(server):
    """litellm prices known model names from its bundled (offline) cost map."""
    results = run([request("a", REPORTS[0])], cfg_for(server, model="openai/gpt-4o-mini"))
    assert results["a"].error is None
    assert results["a"].cost is not None and 0 < results["a"].cost < 0.01


def test_fake_server_stats_and_report_extraction(server):
    import json
    import urllib.request

    from fake_llm_server import keyword_answer

    messages = [{"role": "user", "content": "Is there an effusion?\nReport: Lungs clear. Trace left effusion."}]
    assert json.loads(keyword_answer(messages, ("effusion",))) == {"value": 1, "evidence": "Trace left effusion."}
    run([request("a", "x", "[[behaviour:500:1]]")], cfg_for(server))
    with urllib.request.urlopen(server.url + "/stats") as response:
        stats = json.load(response)
    assert stats["count"] == 2 and stats["counts"] == {"500": 2}


def test_fake_server_answers_per_label_and_joint_from_a_keyword_map():
    from fake_llm_server import keyword_answer

    from workbench.core.parsing import parse_joint_reply

    keywords = {"pneumothorax": ["pneumothorax"], "cardiomegaly": ["cardiomegaly", "enlarged heart"]}
    report = "Enlarged heart. Lungs clear."
    one = [{"role": "user", "content": f"Label: cardiomegaly\nReport: {report}"}]
    assert parse_reply(keyword_answer(one, keywords), report).value == 1
    joint = [
        {"role": "system", "content": "Labels: pneumothorax, cardiomegaly"},
        {"role": "user", "content": f"Report: {report}"},
    ]
    decisions = parse_joint_reply(keyword_answer(joint, keywords), list(keywords), report)
    assert {k: d.value for k, d in decisions.items()} == {"pneumothorax": 0, "cardiomegaly": 1}
    assert all(d.status == "ok" for d in decisions.values())


@pytest.mark.parametrize("own_handler", ["true", "false"])
def test_connection_error_kind_when_called_inside_an_except_block(own_handler, monkeypatch):
    """Every exception raised inside an except block inherits it as __context__: must not confuse,
    through litellm's own HTTP handler (the default here) and through the OpenAI SDK."""
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", own_handler)  # litellm reads it at every call
    with running_server() as srv:
        url = srv.url
    cfg = ModelConfig("openai/fake", api_base=url, max_retries=0)
    try:
        raise RuntimeError("caller's own handled error")
    except RuntimeError:
        results = run([request("a", "x")], cfg)
    assert results["a"].error_kind == "connection"


@pytest.mark.parametrize("own_handler", ["true", "false"])
def test_a_real_server_500_stays_a_server_error_with_either_http_path(own_handler, monkeypatch):
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", own_handler)
    with running_server() as srv:
        results = run([request("a", "x", "[[behaviour:500:9]]")], cfg_for(srv, max_retries=1))
        assert srv.count == 2  # retried once: a server error is worth another try
    assert results["a"].error_kind == "server" and results["a"].attempts == 2


@pytest.mark.parametrize(
    "base,url,ok",
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/chat/completions", True),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", True),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v10/chat/completions", False),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.2:8000/v1/chat/completions", False),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1/chat/completions", False),
        ("http://127.0.0.1:8000/v1", "https://127.0.0.1:8000/v1/chat/completions", False),
        ("http://127.0.0.1:8000/v1", "http://evil@127.0.0.1:8000/v1/chat/completions", False),
        ("https://api.anthropic.com", "https://api.anthropic.com/v1/messages", True),
        ("https://api.openai.com/v1", "https://api.openai.com:443/v1/chat/completions", True),
        ("http://localhost:11434", "http://LOCALHOST:11434/api/chat", True),
    ],
)
def test_url_under_compares_scheme_host_port_and_path_segments(base, url, ok):
    from workbench.labeller.llm import url_under

    assert url_under(base, url) is ok


def test_provider_environment_variables_resolve_like_litellm():
    from workbench.labeller.llm import resolve_endpoints

    env = {"OPENAI_API_BASE": "http://b", "OPENAI_BASE_URL": "http://a"}
    assert [(e.url, e.source) for e in resolve_endpoints("openai/x", env=env)] == [("http://a", "$OPENAI_BASE_URL")]
    assert resolve_endpoints("gpt-4o-mini", env={"OPENAI_API_BASE": "http://b"})[0].source == "$OPENAI_API_BASE"
    assert resolve_endpoints("openai/x", api_base="http://c/v1", env=env)[0].url == "http://c/v1"  # settings win
    assert resolve_endpoints("ollama_chat/x", env={})[0].url == "http://localhost:11434"
    assert resolve_endpoints("workbench/rules") == ()


@pytest.mark.parametrize(
    "allowed,url,ok",
    [
        ("http://127.0.0.1", "http://127.0.0.1:8000/v1", False),  # a local entry with no port: port 80 only
        ("http://127.0.0.1", "http://127.0.0.1/v1", True),
        ("https://api.openai.com", "https://api.openai.com:8443/v1", True),  # a remote one: every port of the host
        ("http://127.0.0.1", "http://127.0.0.2:8000/v1", False),
        ("http://127.0.0.1", "http://127.0.0.1.example.com/v1", False),
        ("http://127.0.0.1", "http://127.0.0.1:80@evil.com/v1", False),
        ("https://api.openai.com/v1", "https://api.openai.com/v1", True),
        ("https://api.openai.com/v1", "https://api.openai.com/v10", False),
        ("https://api.openai.com", "http://api.openai.com/v1", False),
        ("workbench/rules", "workbench/rules", True),
    ],
)
def test_url_allowed_entries(allowed, url, ok):
    from workbench.labeller.llm import url_allowed

    assert url_allowed(allowed, url) is ok
