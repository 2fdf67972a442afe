"""The pure rules of workbench/labeller/endpoints.py: where text goes, what is this machine, what may be reached."""

import pytest

from workbench.labeller import endpoints as ep


def test_resolve_follows_litellms_order_settings_then_environment_then_default():
    env = {"OPENAI_API_BASE": "http://10.0.0.9/v1", "OPENAI_BASE_URL": "http://10.0.0.8/v1"}
    assert ep.resolve("openai/x", env=env)[0].label() == "http://10.0.0.8/v1 ($OPENAI_BASE_URL)"
    assert ep.resolve("openai/x", api_base="http://127.0.0.1:1/v1", env=env)[0].source == "settings"
    assert ep.resolve("ollama/x", env={})[0].label() == "http://localhost:11434 (provider default)"
    assert ep.resolve("workbench/rules") == ()
    with pytest.raises(ep.EndpointError, match="cannot tell where litellm would send"):
        ep.resolve("bedrock/x", env={})


@pytest.mark.parametrize(
    "url, local",
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://localhost:11434", True),
        ("http://[::1]:8000", True),
        ("http://127.0.0.1.example.com", False),
        ("http://10.1.2.3", False),
        ("https://api.openai.com/v1", False),
    ],
)
def test_is_local_is_the_loopback_hosts_written_once(url, local):
    assert ep.is_local(url) is local
    assert ep.all_local([url]) is local
    assert ep.all_local([]) is False


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.0.2.2", False),
        ("example.org", False),
    ],
)
def test_an_app_address_is_loopback_only_on_this_machine(host, loopback):
    assert ep.is_loopback_host(host) is loopback


def test_may_send_needs_every_url_under_an_allowed_entry():
    allowed = ["http://127.0.0.1:9", "https://api.openai.com/v1"]
    assert ep.may_send(allowed, ["http://127.0.0.1:9/v1", "https://api.openai.com/v1/chat"])
    assert not ep.may_send(allowed, ["http://127.0.0.1:9/v1", "http://127.0.0.2:9/v1"])
    assert not ep.may_send(allowed, [])


def test_peers_are_what_a_connection_may_reach():
    """An IP literal is itself; localhost is loopback whatever a resolver says; a name is what the resolver says."""
    lying = lambda host, port: ["127.0.0.2"]  # noqa: E731  (a hosts file that maps localhost elsewhere)
    assert ep.peers_of("http://127.0.0.1:8000/v1", lying) == {("127.0.0.1", 8000)}
    assert ep.peers_of("http://localhost:8000/v1", lying) == {("127.0.0.1", 8000), ("::1", 8000)}
    assert ep.peers_of("https://llm.example.org/v1", lambda h, p: ["10.0.0.5", "::ffff:10.0.0.6"]) == {
        ("10.0.0.5", 443),
        ("10.0.0.6", 443),
    }
    assert ep.peers_of("https://llm.example.org/v1") == frozenset()  # no resolver: nothing may be reached
    assert ep.normal_address("::ffff:127.0.0.2") == "127.0.0.2"


def test_proxy_variables_in_any_case_and_which_are_allowed():
    env = {
        "HTTP_PROXY": "http://127.0.0.2:3128",
        "https_proxy": "proxy.corp:8080",
        "All_Proxy": "socks5://10.0.0.1:1080",
        "NO_PROXY": "localhost",
        "PATH": "/bin",
    }
    assert ep.proxies_in(env) == {
        "$HTTP_PROXY": "http://127.0.0.2:3128",
        "$https_proxy": "http://proxy.corp:8080",
        "$All_Proxy": "socks5://10.0.0.1:1080",
    }
    assert ep.allowed_proxies(["http://proxy.corp:8080"], env) == ("http://proxy.corp:8080",)
    assert ep.allowed_proxies(["http://127.0.0.1"], env) == ()  # 127.0.0.2 is not 127.0.0.1
