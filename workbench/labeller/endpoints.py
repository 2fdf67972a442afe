"""Where report text goes: resolving a destination, whether it is this machine, whether it is allowed.

Pure rules, no network: the one place that knows how litellm picks a base URL (settings, else the
provider's environment variables, else its default), which hosts are this machine, how an allowed
entry matches a URL, which proxy variables are set, and which socket addresses a pinned endpoint
may be reached at. Name resolution is the caller's: functions that need it take a `resolver`
(host, port) -> addresses, so tests can pass their own and llm.py passes the system's.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from workbench.errors import WorkbenchError

# the host names that are this machine, written once; "localhost" must really be loopback (see peers_of)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
LOOPBACK_ADDRESSES = ("127.0.0.1", "::1")  # what "localhost" may connect to, whatever a hosts file says
# provider -> (environment variables litellm 1.110 reads for the base URL, in its order; its default
# base, None when there is none). A provider not listed needs an explicit api_base.
PROVIDER_BASES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "openai": (("OPENAI_BASE_URL", "OPENAI_API_BASE"), "https://api.openai.com/v1"),
    "ollama": (("OLLAMA_API_BASE",), "http://localhost:11434"),
    "ollama_chat": (("OLLAMA_API_BASE",), "http://localhost:11434"),
    "hosted_vllm": (("HOSTED_VLLM_API_BASE",), None),
    "anthropic": (("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"), "https://api.anthropic.com"),
    "azure": (("AZURE_API_BASE",), None),
    "gemini": (("GEMINI_API_BASE",), "https://generativelanguage.googleapis.com"),
    "mistral": (("MISTRAL_API_BASE",), "https://api.mistral.ai/v1"),
    "groq": (("GROQ_API_BASE",), "https://api.groq.com/openai/v1"),
    "deepseek": (("DEEPSEEK_API_BASE",), "https://api.deepseek.com/beta"),
    "together_ai": (("TOGETHER_AI_API_BASE",), "https://api.together.ai/v1"),
    "openrouter": (("OPENROUTER_API_BASE",), "https://openrouter.ai/api/v1"),
}
# the variables httpx (and urllib, aiohttp with trust_env) read for a proxy; any case counts
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")
Resolver = Callable[[str, int], Iterable[str]]


class EndpointError(WorkbenchError, ValueError):
    """Where report text would be sent cannot be determined (unknown provider, no base URL)."""


@dataclass(frozen=True)
class Endpoint:
    """A base URL report text is sent to, and where that URL came from."""

    url: str
    source: str  # "settings", "$OLLAMA_API_BASE" (an environment variable), or "provider default"

    def label(self) -> str:
        """The URL, with its origin when it did not come from the settings."""
        return self.url if self.source == "settings" else f"{self.url} ({self.source})"


def provider_of(model: str) -> str:
    """The litellm provider prefix of a model string, guessed for bare OpenAI/Anthropic names."""
    if "/" in model:
        return model.split("/", 1)[0]
    if model.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-")):
        return "openai"
    if model.startswith("claude"):
        return "anthropic"
    return "unknown"


RULES_PREFIX = "workbench/"  # the offline rule-based labeller's model strings (workbench/rules ...)


def is_offline(model: str) -> bool:
    """True for the offline rule-based labeller's model strings: no network, no cost, no litellm."""
    return model.startswith(RULES_PREFIX)


def resolve(
    model: str, api_base: str | None = None, endpoints=(), env: Mapping[str, str] | None = None
) -> tuple[Endpoint, ...]:
    """The base URLs litellm will send this model's calls to: settings, else the provider's
    environment variables litellm reads, else its default; () for the offline labeller."""
    if is_offline(model):
        return ()
    if endpoints:
        return tuple(Endpoint(str(u), "settings") for u in endpoints)
    if api_base:
        return (Endpoint(str(api_base), "settings"),)
    provider = provider_of(model)
    if provider not in PROVIDER_BASES:
        raise EndpointError(
            f"cannot tell where litellm would send {model!r} (provider {provider!r}): give its api_base explicitly "
            f"(--api-base URL), or use a provider whose endpoint the workbench resolves: {', '.join(PROVIDER_BASES)}"
        )
    names, default = PROVIDER_BASES[provider]
    env = {} if env is None else env
    for name in names:
        if env.get(name):
            return (Endpoint(env[name], f"${name}"),)
    if default is None:
        raise EndpointError(
            f"{model!r}: provider {provider!r} has no default endpoint; give its api_base (--api-base URL)"
            f" or set ${names[0]}"
        )
    return (Endpoint(default, "provider default"),)


def host_of(url: str) -> str:
    """The lower-case host name of a URL ('' when it has none)."""
    return (urlsplit(url).hostname or "").lower()


def is_local(url: str) -> bool:
    """True when a URL names this machine (a loopback host)."""
    return host_of(url) in LOOPBACK_HOSTS


def is_loopback_host(host: str) -> bool:
    """True for a host name or address that only this machine can reach (an app's --address)."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def all_local(urls: Iterable[str]) -> bool:
    """True when there is at least one URL and every one names this machine."""
    urls = list(urls)
    return bool(urls) and all(is_local(u) for u in urls)


def _split(url: str) -> tuple[str, str, int | None, str]:
    parts = urlsplit(url)
    scheme = (parts.scheme or "").lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port, (parts.path or "").rstrip("/")


def is_local_host(host: str) -> bool:
    """True for a host whose connections stay on this machine: loopback (127.0.0.0/8, ::1, localhost) or
    the unspecified address (0.0.0.0, ::), which Linux connects to this machine."""
    if is_loopback_host(host):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def url_allowed(allowed: str, url: str) -> bool:
    """Does an endpoint URL fall under an allowed entry? Compared by parts, not as text, so
    http://127.0.0.1.example.com or http://127.0.0.1:80@evil.com do not pass for http://127.0.0.1.
    An entry without a port allows every port of a remote host, but only the scheme's own port (80, 443)
    of a local one: any local program (a forwarder such as cntlm) can listen on 127.0.0.1, so a local
    endpoint is allowed per address and port."""
    if "://" not in allowed:  # a model string ("workbench/rules"), never a prefix of URLs: "h" allows nothing
        return url == allowed or ("/" in allowed and url.startswith(allowed.rstrip("/") + "/"))
    a, u = urlsplit(allowed), urlsplit(url)
    try:
        a_port, u_port = a.port, u.port
    except ValueError:
        return False
    if u.username or u.password or "@" in u.netloc or a.scheme.lower() != u.scheme.lower():
        return False
    if (a.hostname or "") != (u.hostname or ""):
        return False
    if a_port is None and is_local_host(a.hostname or ""):
        a_port = {"http": 80, "https": 443}.get(a.scheme.lower())
    if a_port is not None and a_port != (u_port or {"http": 80, "https": 443}.get(u.scheme.lower())):
        return False
    prefix = (a.path or "").rstrip("/")
    return not prefix or u.path == prefix or u.path.startswith(prefix + "/")  # whole path segments: /v1 is not /v10


HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$")  # 127.0.0.1:8080, [::1]:8080, host:port


def allowed_entry(text: str) -> str:
    """An allowed-endpoints entry as an admin typed it, checked: a URL with its host, a model string
    (workbench/rules), or host:port (read as http://host:port). A local endpoint must name its port."""
    entry = text.strip()
    if HOST_PORT.match(entry):
        entry = f"http://{entry}"
    if ("://" in entry and not host_of(entry)) or ("://" not in entry and "/" not in entry):
        raise ValueError(
            f"{text!r} is not an endpoint: give a URL with its host (https://api.openai.com, "
            "http://127.0.0.1:8000), an address and port (127.0.0.1:8080) or a model string such as workbench/rules"
        )
    if "://" in entry and is_local_host(host_of(entry)) and _port_of(entry) is None:
        raise ValueError(
            f"{text!r} names no port: a local endpoint is allowed per address and port, since any program on this "
            f"machine can listen on a local port (a forwarder passes the text on); give the port the model server "
            f"listens on, e.g. {entry.rstrip('/')}:8080"
        )
    return entry


def _port_of(url: str) -> int | None:
    """The port written in a URL (None when none is written, -1 when it is not a number)."""
    try:
        return urlsplit(url).port
    except ValueError:
        return -1


def may_send(allowed: Iterable[str], urls: Iterable[str]) -> bool:
    """May report text go to these URLs? At least one, and each under an allowed entry."""
    allowed, urls = list(allowed), list(urls)
    return bool(urls) and all(any(url_allowed(a, u) for a in allowed) for u in urls)


def url_under(base: str, url: str) -> bool:
    """True when url is the base URL or below it (same scheme, host and port; path under the base's)."""
    b, u = _split(base), _split(url)
    if "@" in (urlsplit(url).netloc or "") or not b[1] or b[:3] != u[:3]:
        return False
    return u[3] == b[3] or u[3].startswith(b[3] + "/")


def proxies_in(env: Mapping[str, str]) -> dict[str, str]:
    """The proxy variables set in an environment ("$HTTPS_PROXY" -> URL), in any case; a bare
    host:port is read as http://host:port, as httpx does."""
    found = {}
    for name, value in env.items():
        if name.lower() in PROXY_VARIABLES and value.strip():
            value = value.strip()
            found[f"${name}"] = value if "://" in value else f"http://{value}"
    return found


def allowed_proxies(allowed: Iterable[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """The proxies set in env that are themselves allowed endpoints (the only ones calls may go through)."""
    allowed = list(allowed)
    return tuple(sorted({url for url in proxies_in(env).values() if may_send(allowed, [url])}))


def normal_address(address: str) -> str:
    """An IP address in one spelling (an IPv4-mapped IPv6 address as IPv4); other text unchanged."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def is_address(host: str) -> bool:
    """True for an IP literal (v4 or v6), False for a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def peers_of(url: str, resolver: Resolver | None = None) -> frozenset[tuple[str, int]]:
    """The (address, port) pairs a connection for this URL may reach: an IP literal is itself,
    "localhost" is the loopback addresses (never what a hosts file or DNS says), any other name is
    what the resolver gives (no resolver: none)."""
    _scheme, host, port, _path = _split(url)
    if not host or port is None or port < 0:
        return frozenset()
    if is_address(host):
        return frozenset({(normal_address(host), port)})
    if host == "localhost":
        return frozenset((a, port) for a in LOOPBACK_ADDRESSES)
    if resolver is None:
        return frozenset()
    return frozenset((normal_address(a), port) for a in resolver(host, port))


__all__ = [
    "LOOPBACK_HOSTS",
    "LOOPBACK_ADDRESSES",
    "PROVIDER_BASES",
    "PROXY_VARIABLES",
    "Endpoint",
    "EndpointError",
    "provider_of",
    "resolve",
    "host_of",
    "is_local",
    "is_loopback_host",
    "is_local_host",
    "all_local",
    "url_allowed",
    "allowed_entry",
    "may_send",
    "url_under",
    "proxies_in",
    "allowed_proxies",
    "normal_address",
    "is_address",
    "peers_of",
]
