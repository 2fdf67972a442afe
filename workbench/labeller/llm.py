"""The async engine that sends chat calls to a model through litellm.

This is the only module that imports litellm, lazily (the import costs ~4-5 s), so that the
rest of the workbench, its CLI help and its tests stay fast. The engine runs many calls at
once under a bound, retries what is worth retrying (429, 5xx, timeouts, connection errors)
with its own counted backoff that honours Retry-After, and turns every model failure into a
CallResult instead of an exception: a failed call is data to record, not a crash.

Where report text goes is decided here, once: resolve_endpoints() (rules in workbench/labeller/endpoints.py)
finds the URL litellm would use (settings, else the provider's environment variables litellm reads,
else its default), every call is made with that URL as api_base, and while calls run a guard refuses
any request to another URL, never follows a redirect (a 307/308 would re-post the body), bypasses
proxy variables nobody allowed, and refuses any socket connect to an address the checked endpoint is
not at (see _install_guard and docs/security.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import email.utils
import inspect
import json
import logging
import os
import random
import re
import socket
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from urllib.parse import urlsplit

from workbench.errors import UserError, WorkbenchError
from workbench.labeller.endpoints import (  # noqa: F401
    PROVIDER_BASES,
    Endpoint,
    EndpointError,
    all_local,
    is_address,
    is_offline,
    may_send,
    normal_address,
    peers_of,
    provider_of,
    resolve,
    url_allowed,
    url_under,
)
from workbench.runtime import AnyEvent, fewer_collections

DUMMY_API_KEY = "sk-no-key-needed"  # local OpenAI-compatible servers need a key-shaped string
RETRYABLE = frozenset({"rate_limit", "server", "timeout", "connection"})
ERROR_KINDS = (
    "rate_limit",
    "server",
    "timeout",
    "connection",
    "auth",
    "not_found",
    "bad_request",
    "redirect",
    "refused",
    "oversized",
    "other",
)
# a reply longer than this (characters; labeller.max_reply_chars) is a failure of kind "oversized": a labelling
# reply is a few hundred characters, and a server that sends megabytes would otherwise be stored whole
MAX_REPLY_CHARS = 200_000
OVERSIZED_KEPT = 200  # characters of an oversized reply kept in its failure message
UNUSABLE = frozenset({"connection", "auth", "not_found", "refused"})  # the endpoint itself is wrong: no point going on
_POOL_NAME = "workbench-pool"
REFUSED_IN_A_ROW = 5  # refusals with no success that stop the engine: every call would be refused
# litellm's callback lists: whatever is registered in one receives each call's logging payload.
_PAYLOAD_RECEIVERS = (
    "callbacks",
    "success_callback",
    "failure_callback",
    "input_callback",
    "service_callback",
    "audit_log_callbacks",
    "_async_success_callback",
    "_async_failure_callback",
    "_async_input_callback",
)
_PINNED: contextvars.ContextVar[Pin | None] = contextvars.ContextVar("workbench_pinned_endpoints", default=None)
# the attempt under way (one per attempt; the tasks it spawns share it): its refusals (a refused connect is
# raised deep inside httpx/aiohttp, whose wrappers may drop its type and message) and the address it connected to
_ATTEMPT: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("workbench_attempt", default=None)
_GUARD_INSTALLED = False
_LITELLM = None


class LLMError(WorkbenchError, RuntimeError):
    """A model endpoint could not be used (raised by check_model only)."""


class UnknownModel(WorkbenchError, ValueError):
    """litellm does not know the model string's provider."""


class EndpointRefused(WorkbenchError, ConnectionError):
    """The guard stopped a request to an address other than the pinned endpoint (nothing was sent)."""


def resolve_endpoints(model: str, api_base: str | None = None, endpoints=(), env=None) -> tuple[Endpoint, ...]:
    """The base URLs litellm will send this model's calls to (endpoints.resolve on this process's environment)."""
    return resolve(model, api_base, endpoints, os.environ if env is None else env)


@dataclass(frozen=True)
class ModelConfig:
    """Which model to call, where, and how hard to try."""

    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    endpoints: tuple[str, ...] = ()
    temperature: float = 0.0
    seed: int | None = 0
    max_tokens: int = 256
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    concurrency: int = 8
    json_mode: bool = False
    workers: int = 1  # processes that share the calls (workbench/labeller/workers.py); 1 = this process only
    # proxy URLs the caller checked against its allowed endpoints: only these may carry the calls; a
    # proxy variable naming any other is bypassed (the calls connect directly), see _install_guard
    proxies: tuple[str, ...] = ()
    # the allowed endpoints the caller checked against: an endpoint's name that moves to another address while
    # the calls run is refused there unless that address (with its port) falls under one of them (see Pin.admits)
    allowed: tuple[str, ...] = ()
    # address:port the same run's earlier calls connected to (a resume): a name that has moved since is
    # refused at its new address like a move within one execution (see Pin.of)
    earlier_peers: tuple[str, ...] = ()
    response_schema: bool = False  # send a JSON schema as response_format where litellm says the model supports it
    response_format: dict | None = None  # what is sent: set by the labelling path (schema_format), not by users
    max_reply_chars: int = MAX_REPLY_CHARS  # longer replies (text or reasoning) are an "oversized" failure

    def __post_init__(self) -> None:
        if not self.model or not isinstance(self.model, str):
            raise UserError("ModelConfig.model must be a non-empty string")
        object.__setattr__(self, "endpoints", tuple(self.endpoints or ()))
        object.__setattr__(self, "proxies", tuple(self.proxies or ()))
        object.__setattr__(self, "allowed", tuple(self.allowed or ()))
        object.__setattr__(self, "earlier_peers", tuple(self.earlier_peers or ()))
        if self.concurrency < 1:
            raise UserError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.timeout_s <= 0:
            raise UserError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_retries < 0:
            raise UserError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.max_tokens < 1:
            raise UserError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.workers < 1:
            raise UserError(f"workers must be >= 1, got {self.workers}")
        if not isinstance(self.max_reply_chars, int) or self.max_reply_chars < 1:
            raise UserError(f"max_reply_chars must be a whole number >= 1, got {self.max_reply_chars!r}")

    def params(self) -> dict:
        """The parameters that change an answer (for the cache key); no keys, no endpoints."""
        return {
            "model": self.model,
            "temperature": float(self.temperature),
            "seed": self.seed,
            "max_tokens": int(self.max_tokens),
            "json_mode": bool(self.json_mode),
        } | ({"response_schema": True} if self.response_schema else {})  # absent when off: existing keys stay valid

    def resolved(self, env=None) -> tuple[Endpoint, ...]:
        """The endpoints report text goes to, resolved the way litellm would (see resolve_endpoints)."""
        return resolve_endpoints(self.model, self.api_base, self.endpoints, env)

    def endpoint_label(self) -> str:
        """Where report text goes, for the governance record."""
        if is_offline(self.model):
            return "local (rule-based, no network)"
        try:
            ends = self.resolved()
        except EndpointError:
            return f"{provider_of(self.model)} (endpoint unknown: give api_base)"
        if len(ends) > 1:
            return f"pool of {len(ends)}: " + ", ".join(e.label() for e in ends)
        return ends[0].label()

    def base_urls(self) -> tuple[str, ...]:
        """The URLs every call is pinned to (settings, environment or provider default)."""
        return tuple(e.url for e in self.resolved())


@dataclass
class CallRequest:
    """One chat call to make; ``key`` is the caller's cache key, ``meta`` is opaque here."""

    key: str
    messages: list[dict]
    meta: dict = field(default_factory=dict)
    # this call's own response_format (a JSON schema naming its labels' attributes), over cfg's
    response_format: dict | None = None


@dataclass
class CallResult:
    """The outcome of one CallRequest: text on success, error and error_kind on failure."""

    key: str
    text: str | None
    error: str | None
    error_kind: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    latency_s: float = 0.0
    attempts: int = 1
    finish_reason: str | None = None  # "stop", "length" (cut off at max_tokens), "content_filter", ...
    refusal: str | None = None  # the provider's own refusal field (OpenAI structured outputs)
    reasoning: str | None = None  # reasoning_content, or the <think> text of the reply (never parsed)
    reported_model: str | None = None  # the model id the server says answered
    cached_tokens: int | None = None  # prompt tokens the provider served from its prefix cache
    peer: str | None = None  # the address:port the call's connection went to (None: no connection, offline)

    @property
    def ok(self) -> bool:
        """True when the call returned a reply."""
        return self.error is None


# -- litellm loading ---------------------------------------------------------------------


def _litellm():
    """Import litellm once, offline and quiet."""
    global _LITELLM
    if _LITELLM is None:
        os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "true")
        # openai/ models through litellm's own HTTP handler instead of the OpenAI SDK: same request, tokens,
        # cost and error mapping for about a tenth less client CPU per call (litellm reads it at every call;
        # set it to false to go back). Its transport is httpx too, so the endpoint guard below covers it.
        os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "true")
        import litellm

        litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on errors
        litellm.turn_off_message_logging = (
            True  # until a call has checked that nothing receives them (see _refuse_payload_receivers)
        )
        if hasattr(litellm, "telemetry"):
            litellm.telemetry = False
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
            logging.getLogger(name).setLevel(logging.CRITICAL)  # failures are CallResults here
        _install_guard()
        _LITELLM = litellm
    return _LITELLM


def _refuse_payload_receivers(litellm) -> None:
    """Refuse the call (nothing sent) while any litellm callback is registered; else skip the payload's redaction.

    litellm hands every registered callback the call's logging payload, and with message logging
    off it still includes the raw request body (additional_args.complete_input_dict: the report
    text, and the API key) - measured with litellm 1.110. A callback is a route off the machine no
    admin allowed, so the engine makes no call while one is registered, checked before every call
    (one registered mid-run stops the calls after it; a reply already in flight may still be
    logged to it). With none registered the payload goes nowhere, so litellm's redaction of it
    (three deep copies per call, about a tenth of the client's CPU) is switched off.
    """
    receivers = [cb for name in _PAYLOAD_RECEIVERS for cb in (getattr(litellm, name, None) or ())]
    if receivers:
        names = ", ".join(sorted({_callback_name(cb) for cb in receivers}))
        raise EndpointRefused(
            f"refused by the workbench: a litellm logging callback is registered in this process ({names}); litellm "
            "hands callbacks each call's request body, report text included, even with message logging off, so no "
            "call is made while one is registered (remove it from litellm.callbacks / success_callback); no report "
            "text was sent"
        )
    litellm.turn_off_message_logging = False


def _callback_name(callback) -> str:
    """A litellm callback as a user would recognise it: its name ("langfuse"), function or class."""
    if isinstance(callback, str):
        return callback
    return getattr(callback, "__name__", None) or type(callback).__name__


@dataclass
class Attempt:
    """One attempt of a call, as the guard saw it: the connections it refused, the address it connected to."""

    refusals: list = field(default_factory=list)
    peer: str | None = None


class AddressChanged(EndpointRefused):
    """A pinned name now resolves to an address it did not have when the calls began (and no admin allowed it)."""


@dataclass(frozen=True)
class Pin:
    """What the calls of one complete_all may reach: these base URLs, at the socket addresses they had at the start."""

    urls: tuple[str, ...]
    proxies: tuple[str, ...] = ()
    names: tuple[tuple[str, int], ...] = ()  # (host name, port) of URLs named by a name other than localhost
    peers: frozenset = frozenset()  # (address, port) pairs a socket may connect to
    allowed: tuple[str, ...] = ()  # allowed endpoint entries: an address a name moves to must be under one
    # the address:port the last admitted connection went to: a call on a kept-alive connection makes no
    # connect of its own, and (one address per endpoint, the usual case) went there
    last: dict = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, cfg: ModelConfig) -> Pin:
        """The pin of a config: its endpoints and allowed proxies, with the addresses they resolve to now (a
        name's addresses of the run's earlier calls instead, when it no longer resolves to any of them)."""
        urls = cfg.base_urls()
        targets = (*urls, *cfg.proxies)
        earlier = frozenset(_split_peer(p) for p in cfg.earlier_peers)
        peers = frozenset().union(*(_peers_for_run(u, earlier) for u in targets))
        names = tuple(
            sorted(
                {
                    (p.hostname.lower(), p.port or {"http": 80, "https": 443}.get(p.scheme, 0))
                    for p in map(urlsplit, targets)
                    if p.hostname and not peers_of(p.geturl())
                }
            )
        )
        return cls(urls, cfg.proxies, names, peers, cfg.allowed)

    def admits(self, address: str, port: int) -> bool:
        """May a socket connect here? An address the endpoints had when the calls began ("localhost" and IP
        literals never depend on the resolver). A pinned name that resolves elsewhere now (DNS re-pointed
        mid-run) is refused there with AddressChanged, unless an admin allowed that address and port."""
        peer = (normal_address(address), port)
        if peer in self.peers:
            return True
        moved = [
            host for host, p in self.names if p == port and peer in peers_of(f"http://{host}:{p}", _system_resolver)
        ]
        if not moved:
            return False
        shown = _shown(*peer)
        if any(may_send(self.allowed, [f"{scheme}://{shown}"]) for scheme in ("http", "https")):
            return True
        before = ", ".join(sorted(_shown(a, p) for a, p in self.peers if p == port)) or "none"
        raise AddressChanged(
            f"refused by the workbench: {moved[0]} now resolves to {shown}, but it was at {before} when the run's "
            f"calls began; a change of address within a run is refused unless an admin allowed the new address "
            f"(`workbench allow-endpoint {shown}`); no report text was sent to {shown}"
        )


def _peers_for_run(url: str, earlier: frozenset) -> frozenset:
    """Where a run's calls to url may connect: what it resolves to now, unless it is a name whose earlier calls in
    this run went to other addresses (then those: a connect to the new address is refused as a change)."""
    now = peers_of(url, _system_resolver)
    if not earlier or peers_of(url):  # IP literals and localhost do not move
        return now
    before = frozenset(p for p in earlier if any(p[1] == port for _a, port in now))
    return now if not before or now & before else before


def _split_peer(peer: str) -> tuple[str, int]:
    """("10.0.0.5", 443) from "10.0.0.5:443" or ("::1", 8000) from "[::1]:8000"."""
    address, _, port = peer.rpartition(":")
    return address.strip("[]"), int(port)


def _shown(address: str, port: int) -> str:
    """address:port, an IPv6 address in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for a name ([] when it gives none)."""
    try:
        return [info[4][0] for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)]
    except (OSError, UnicodeError):
        return []


def _install_guard() -> None:
    """Check every route a packet can take while calls run: the request URL, the proxy, the socket.

    Every HTTP client litellm uses (the OpenAI SDK's, its own handlers', a Router's) sends
    through httpx.Client.send / AsyncClient.send: a request to another URL is refused before a
    byte is sent, and a redirect is returned as an error instead of being followed (a 307/308
    would re-post the report text). httpx then picks a transport: a proxy from HTTP(S)_PROXY /
    ALL_PROXY (any case) is used only when the caller allowed it (cfg.proxies); any other is
    bypassed, so the call goes direct. Last, whatever library and route is used (aiohttp, a
    proxy, a name that resolves somewhere else), the socket's connect is refused unless its peer
    address is one the pinned endpoints (or allowed proxies) are at. Outside complete_all (no
    pin) everything behaves as usual.
    """
    global _GUARD_INSTALLED
    if _GUARD_INSTALLED:
        return
    import httpx  # here, not at the top: a command that calls no model never loads an HTTP client (~1 s)

    async_send, sync_send = httpx.AsyncClient.send, httpx.Client.send

    async def guarded_async_send(self, request, **kwargs):
        if _pinned_check(request):
            kwargs["follow_redirects"] = False
        return await async_send(self, request, **kwargs)

    def guarded_send(self, request, **kwargs):
        if _pinned_check(request):
            kwargs["follow_redirects"] = False
        return sync_send(self, request, **kwargs)

    httpx.AsyncClient.send, httpx.Client.send = guarded_async_send, guarded_send
    for client in (httpx.AsyncClient, httpx.Client):
        client._transport_for_url = _unproxied(client._transport_for_url)
    _unproxy_aiohttp()
    _guard_sockets()
    _GUARD_INSTALLED = True


def _unproxied(transport_for_url):
    """httpx's transport choice, with a proxy nobody allowed replaced by the direct transport."""

    def choose(self, url):
        transport = transport_for_url(self, url)
        pin = _PINNED.get()
        if pin is not None and not pin.proxies and transport is not self._transport:
            return self._transport  # an environment proxy mount: the calls go direct (the socket check still holds)
        return transport

    return choose


def _unproxy_aiohttp() -> None:
    """litellm's aiohttp transport reads the proxy variables itself, per request: none unless allowed."""
    from litellm.llms.custom_httpx import aiohttp_transport

    transport = getattr(aiohttp_transport, "LiteLLMAiohttpTransport", None)
    proxy_settings = getattr(transport, "_get_proxy_settings", None)
    if proxy_settings is None:  # another litellm: its proxy is then refused at connect, never used unchecked
        return

    async def no_unallowed_proxy(self, request):
        pin = _PINNED.get()
        if pin is not None and not pin.proxies:
            return None
        return await proxy_settings(self, request)

    transport._get_proxy_settings = no_unallowed_proxy


def _guard_sockets() -> None:
    """Wrap socket.connect / connect_ex: while a pin is active, a TCP peer must be a pinned address."""
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guarded_connect(self, address):
        return connect(self, _checked_peer(self, address))

    def guarded_connect_ex(self, address):
        return connect_ex(self, _checked_peer(self, address))

    socket.socket.connect, socket.socket.connect_ex = guarded_connect, guarded_connect_ex


def _checked_peer(sock, address):
    """The address to connect to, or EndpointRefused when a pin is active and it is not a pinned one."""
    pin = _PINNED.get()
    if pin is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return address
    host, port = address[0], address[1]
    candidates = [host] if is_address(host) else _system_resolver(host, port)  # a name: connect to what was checked
    attempt = _ATTEMPT.get()
    refusal: EndpointRefused | None = None
    for candidate in candidates:
        try:
            admitted = pin.admits(candidate, port)
        except AddressChanged as exc:
            admitted, refusal = False, exc
        if admitted:
            peer = _shown(normal_address(candidate), port)
            pin.last["peer"] = peer
            if attempt is not None:
                attempt.peer = peer
            return (candidate, port, *address[2:])
    if refusal is None:
        via = f" or the allowed proxies ({', '.join(pin.proxies)})" if pin.proxies else ""
        refusal = EndpointRefused(
            f"refused by the workbench: a connection to {_shown(host, port)} is not to an address of the checked "
            f"endpoint ({', '.join(pin.urls)}){via} (a proxy variable, a redirect or a name that resolves elsewhere); "
            "no report text was sent there"
        )
    if attempt is not None:
        attempt.refusals.append(refusal)
    raise refusal


def _pinned_check(request) -> bool:
    """Raise EndpointRefused for a request outside the pinned endpoints; True when a pin is active."""
    pin = _PINNED.get()
    if pin is None:
        return False
    url = str(request.url)
    if not any(url_under(base, url) for base in pin.urls):
        parts = urlsplit(url)
        raise EndpointRefused(
            f"refused by the workbench: a request to {parts.scheme}://{parts.netloc} is outside the "
            f"checked endpoint ({', '.join(pin.urls)}); no report text was sent there"
        )
    return True


def check_model_name(model: str) -> str:
    """The litellm provider of a model string, or UnknownModel saying how to write it (checked before
    anything is said about endpoints: a typo in the name is not a governance problem)."""
    if is_offline(model):
        return "workbench"
    litellm = _litellm()
    try:
        return litellm.get_llm_provider(model)[1]
    except Exception as exc:  # litellm raises BadRequestError("LLM Provider NOT provided ...")
        prefix, _, name = model.rpartition("/")
        what = f"litellm has no provider {prefix!r}" if prefix else "litellm cannot tell which provider serves it"
        name = name or model
        raise UnknownModel(
            f"model {model!r} is unknown to litellm ({what}): write it as provider/name, e.g. openai/{name} with "
            f"--api-base URL for an OpenAI-compatible server (vLLM, llama.cpp), ollama/{name}, anthropic/{name}; "
            "providers: https://docs.litellm.ai/docs/providers"
        ) from exc


def _check_model_string(cfg: ModelConfig) -> None:
    if is_offline(cfg.model):
        raise UserError(f"{cfg.model!r} is the offline rule-based labeller: it is not sent through litellm")


def _api_key(cfg: ModelConfig) -> str | None:
    if cfg.api_key_env:
        key = os.environ.get(cfg.api_key_env)
        if not key:
            raise UserError(f"environment variable {cfg.api_key_env} (api_key_env of {cfg.model}) is not set")
        return key
    if all(e.source == "settings" for e in cfg.resolved()):
        return DUMMY_API_KEY  # a configured server: never hand it a provider key litellm finds in the environment
    return None  # the provider's own endpoint (default or its env var): litellm reads the provider's key


def _call_kwargs(cfg: ModelConfig) -> dict:
    kwargs: dict = {
        "temperature": cfg.temperature,
        "max_tokens": cfg.max_tokens,
        "timeout": cfg.timeout_s,
        "num_retries": 0,  # we retry ourselves, to count attempts and honour Retry-After
        "max_retries": 0,  # and the OpenAI SDK must not retry behind our back either
    }
    if cfg.seed is not None and accepts_seed(cfg.model):  # Anthropic refuses a seed: every call would fail
        kwargs["seed"] = cfg.seed
    if cfg.response_format:
        kwargs["response_format"] = cfg.response_format
    elif cfg.json_mode:
        kwargs["response_format"] = {"type": "json_object"}
    return kwargs


def _make_caller(cfg: ModelConfig) -> Callable:
    """An async function messages -> litellm ModelResponse, bound to cfg (Router for a pool)."""
    litellm = _litellm()
    _price_local_model(litellm, cfg)
    key = _api_key(cfg)
    kwargs = _call_kwargs(cfg)
    if len(cfg.endpoints) > 1:
        with warnings.catch_warnings():  # pydantic's ReadOnly notice on litellm's router types
            warnings.simplefilter("ignore", UserWarning)
            router = _router(litellm, cfg, key)

        async def call_pool(messages: list[dict], response_format: dict | None = None):
            _refuse_payload_receivers(litellm)
            return await router.acompletion(
                model=_POOL_NAME, messages=messages, **_with_format(kwargs, response_format)
            )

        return call_pool
    kwargs["api_base"] = cfg.base_urls()[0]  # always explicit: what was checked is what is used
    if key:
        kwargs["api_key"] = key

    async def call_one(messages: list[dict], response_format: dict | None = None):
        _refuse_payload_receivers(litellm)
        return await litellm.acompletion(model=cfg.model, messages=messages, **_with_format(kwargs, response_format))

    return call_one


def _with_format(kwargs: dict, response_format: dict | None) -> dict:
    """The call's keyword arguments with one request's own response_format, when it has one."""
    return kwargs if response_format is None else {**kwargs, "response_format": response_format}


def _price_local_model(litellm, cfg: ModelConfig) -> None:
    """A model on this machine that litellm has no price for costs nothing: register that.

    Without a registered price litellm tries ~90 pattern matches per call to find one (about a
    fifth of its client CPU) and still records no cost; a remote model keeps its unknown cost."""
    bases = cfg.base_urls()
    if not all_local(bases) or _has_price(litellm, cfg.model):
        return
    provider = provider_of(cfg.model)
    litellm.register_model(
        {
            cfg.model: {
                "input_cost_per_token": 0.0,
                "output_cost_per_token": 0.0,
                "mode": "chat",
                "litellm_provider": provider if provider != "unknown" else "openai",
            }
        }
    )


def _has_price(litellm, model: str) -> bool:
    """Whether litellm's (offline) cost map prices this model string."""
    try:
        info = litellm.get_model_info(model=model)
    except Exception:  # litellm raises a bare Exception for an unmapped model
        return False
    return info.get("input_cost_per_token") is not None


def _router(litellm, cfg: ModelConfig, key: str | None):
    """One deployment per endpoint; litellm's cooldown steers calls away from a failing one."""
    return litellm.Router(
        model_list=[
            {"model_name": _POOL_NAME, "litellm_params": {"model": cfg.model, "api_base": url, "api_key": key}}
            for url in cfg.endpoints
        ],
        num_retries=0,
        timeout=cfg.timeout_s,
    )


# -- errors and backoff ------------------------------------------------------------------------


def _chain(exc: BaseException):
    """The exception and what it was raised from, following Python's own traceback rule."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = (
            link.__cause__ if link.__cause__ is not None else (None if link.__suppress_context__ else link.__context__)
        )


def classify(exc: BaseException) -> str:
    """The error_kind of an exception raised by a litellm call."""
    import openai  # litellm depends on it; loaded by the call that raised, so this costs nothing

    if any(isinstance(link, EndpointRefused) for link in _chain(exc)) or "refused by the workbench" in str(exc):
        return "refused"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, openai.APITimeoutError)):
        return "timeout"
    if _redirect_status(exc):  # litellm's own HTTP handler wraps it in a status-500 connection error
        return "redirect"
    status = getattr(exc, "status_code", None)
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status == 408:
        return "timeout"
    if status == 404:
        return "not_found"
    # litellm reports a refused connection as InternalServerError(500): look at the cause
    for link in _chain(exc):
        if isinstance(link, openai.APITimeoutError):
            return "timeout"
        if isinstance(link, (openai.APIConnectionError, ConnectionError)) or type(link).__name__ in (
            "ConnectError",
            "ClientConnectorError",
            "ServerDisconnectedError",
        ):
            return "connection"
    if status == 500 and "connection error" in str(exc).lower():
        return "connection"  # through a Router the cause chain is gone; litellm's wording stays
    if (
        status == 500
        and getattr(exc, "litellm_response_headers", None) is None
        and any(words in str(exc).lower() for words in _CONNECT_FAILURES)
    ):
        return "connection"  # litellm's own HTTP handler: no server answered (a real 500 carries its headers)
    if isinstance(status, int) and status >= 500:
        return "server"
    if isinstance(status, int) and 400 <= status < 500:
        return "bad_request"
    return "other"


_CONNECT_FAILURES = (
    "cannot connect to host",
    "connect call failed",
    "connection refused",
    "name or service not known",
    "temporary failure in name resolution",
    "network is unreachable",
)


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (Retry-After / retry-after-ms), None when absent."""
    for headers in _header_sources(exc):
        try:
            millis = headers.get("retry-after-ms")
            if millis is not None:
                return max(0.0, float(millis) / 1000.0)
            value = headers.get("retry-after")
        except Exception:
            continue
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value) if value else None
            if when is not None:
                return max(0.0, when.timestamp() - time.time())
    cooldown = getattr(exc, "cooldown_time", None)  # the Router's "all deployments cooling down"
    return float(cooldown) if isinstance(cooldown, (int, float)) else None


def _header_sources(exc: BaseException):
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is not None:
        yield headers
    response = getattr(exc, "response", None)
    if response is not None and getattr(response, "headers", None) is not None:
        yield response.headers
    if isinstance(getattr(exc, "headers", None), dict):
        yield {k.lower(): v for k, v in exc.headers.items()}


def _redirect_status(exc: BaseException | None) -> int | None:
    """The 3xx status of a redirect anywhere in the exception chain, None when there is none."""
    for link in _chain(exc) if exc is not None else ():
        status = getattr(link, "status_code", None)
        if isinstance(status, int) and 300 <= status < 400:
            return status
    return None


def _location(exc: BaseException | None) -> str:
    """Scheme and host of a redirect's Location header, when the exception chain still carries it."""
    for link in _chain(exc) if exc is not None else ():
        for headers in _header_sources(link):
            try:
                value = headers.get("location")
            except Exception:
                continue
            if value:
                parts = urlsplit(str(value))
                return f"{parts.scheme}://{parts.netloc}" if parts.netloc else str(value)[:100]
    return ""


def backoff_s(cfg: ModelConfig, attempt: int, retry_after: float | None) -> float:
    """Wait before the next attempt: Retry-After if given, else full-jitter exponential; capped."""
    if retry_after is not None:
        return min(cfg.backoff_max_s, retry_after + random.uniform(0, cfg.backoff_base_s))
    return random.uniform(0, min(cfg.backoff_max_s, cfg.backoff_base_s * 2 ** (attempt - 1)))


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    for noise in ("litellm.", "OpenAIException - "):
        text = text.replace(noise, "")
    name = type(exc).__name__ + ": "
    while text.startswith(name + name):  # litellm repeats the class name
        text = text[len(name) :]
    return text if len(text) <= limit else text[: limit - 3] + "..."


_SSL_CONTEXT = re.compile(r"\s*ssl:(?:<[^>]*>|default|None|False|True)")


def _without_ssl_context(detail: str) -> str:
    """aiohttp's connect error names its SSL context ("ssl:<ssl.SSLContext object at 0x...>") even for an http URL:
    noise that reads like a TLS problem, dropped."""
    return _SSL_CONTEXT.sub("", detail)


def describe(kind: str, exc: BaseException | None, attempts: int, cfg: ModelConfig) -> str:
    """A clear one-line error message for a failed call."""
    tries = f"{attempts} attempt" + ("s" if attempts != 1 else "")
    status = getattr(exc, "status_code", None)
    detail = _short(exc) if exc is not None else ""
    if kind == "timeout":
        return f"timed out after {cfg.timeout_s:g} s ({tries})"
    if kind == "rate_limit":
        return f"HTTP 429 after {tries} (rate limited): {detail}"
    if kind == "server":
        return f"HTTP {status or '5xx'} after {tries} (server error): {detail}"
    if kind == "connection":
        return (
            f"cannot connect to {cfg.endpoint_label()} after {tries} (is the server running?): "
            f"{_without_ssl_context(detail)}"
        )
    if kind == "auth":
        hint = f" (check the key in ${cfg.api_key_env})" if cfg.api_key_env else ""
        return f"HTTP {status} authentication failed{hint}: {detail}"
    if kind == "bad_request":
        return f"HTTP {status} bad request (not retried): {detail}"
    if kind == "not_found":
        return f"HTTP 404 not found at {cfg.endpoint_label()} (is the model name {cfg.model!r} served there?): {detail}"
    if kind == "redirect":
        target, status = _location(exc), _redirect_status(exc)
        return (
            f"HTTP {status} redirect{' to ' + target if target else ''} not followed: report text is only sent to "
            f"{cfg.endpoint_label()}, never re-posted to another address (not retried)"
        )
    if kind == "refused":
        text = str(exc)
        start = text.find("refused by the workbench")
        return text[start:] if start >= 0 else f"refused by the workbench: {detail}"
    return f"{type(exc).__name__}: {detail}"


# -- the engine -----------------------------------------------------------------------------------


async def _sleep_unless_cancelled(seconds: float, cancel: threading.Event | None) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if cancel is not None and cancel.is_set():
            return
        await asyncio.sleep(min(left, 0.1))


async def _run_one(
    call: Callable,
    req: CallRequest,
    cfg: ModelConfig,
    cancel: threading.Event | None,
    throttle: Throttle | None = None,
) -> CallResult:
    start = time.monotonic()
    queued = 0.0  # time spent waiting for a slot in this process: not the server's latency
    attempt = 0
    while True:
        attempt += 1
        seen = Attempt()
        _ATTEMPT.set(seen)
        try:
            asked = time.monotonic()
            async with throttle.slot() if throttle is not None else contextlib.nullcontext():
                queued += time.monotonic() - asked
                response = await asyncio.wait_for(call(req.messages, req.response_format), timeout=cfg.timeout_s)
        except Exception as exc:  # every model failure becomes data; see classify()
            # the guard's own words, whatever the library wrapped them in
            exc = seen.refusals[0] if seen.refusals else exc
            kind = classify(exc)
            if kind == "timeout" and throttle is not None:
                throttle.timed_out()  # fewer calls in flight before this one is tried again
            stop = kind not in RETRYABLE or attempt > cfg.max_retries or (cancel is not None and cancel.is_set())
            if stop:
                message = describe(kind, exc, attempt, cfg)
                if kind in RETRYABLE and attempt <= cfg.max_retries:
                    message += " (cancelled: not retried)"
                latency = time.monotonic() - start - queued
                return CallResult(req.key, None, message, kind, latency_s=latency, attempts=attempt, peer=seen.peer)
            await _sleep_unless_cancelled(backoff_s(cfg, attempt, retry_after_s(exc)), cancel)
            continue
        result = _success(req.key, response, time.monotonic() - start - queued, attempt)
        result.peer = seen.peer or _last_peer()  # no connect of its own: a kept-alive connection
        return _bounded(result, cfg.max_reply_chars)


def _last_peer() -> str | None:
    """The address the pinned calls last connected to (None outside a pin)."""
    pin = _PINNED.get()
    return pin.last.get("peer") if pin is not None else None


def _bounded(result: CallResult, limit: int) -> CallResult:
    """A reply over the size limit becomes an "oversized" failure keeping only its first characters."""
    text, reasoning = result.text or "", result.reasoning or ""
    if len(text) <= limit and len(reasoning) <= limit:
        return result
    size, what = (len(text), "reply") if len(text) > limit else (len(reasoning), "reasoning")
    result.error = (
        f"{what} of {size:,} characters, over the {limit:,} allowed (labeller.max_reply_chars); "
        f"not stored, its first {OVERSIZED_KEPT} characters: {(text or reasoning)[:OVERSIZED_KEPT]!r}"
    )
    result.error_kind, result.text, result.reasoning = "oversized", None, None
    return result


def _success(key: str, response, latency: float, attempts: int) -> CallResult:
    choices = getattr(response, "choices", None) or []
    message = getattr(choices[0], "message", None) if choices else None
    text = getattr(message, "content", None) or ""
    usage = getattr(response, "usage", None)
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return CallResult(
        key=key,
        text=text,
        error=None,
        error_kind=None,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost=float(cost) if isinstance(cost, (int, float)) else None,
        latency_s=latency,
        attempts=attempts,
        finish_reason=_text_or_none(getattr(choices[0], "finish_reason", None) if choices else None),
        refusal=_text_or_none(getattr(message, "refusal", None)),
        reasoning=_reasoning(message, text),
        reported_model=_text_or_none(getattr(response, "model", None)),
        cached_tokens=int(cached) if isinstance(cached, int) else None,
    )


def _text_or_none(value) -> str | None:
    """A reply field as text, None when absent or not text."""
    return value if isinstance(value, str) and value else None


def _reasoning(message, text: str) -> str | None:
    """A reasoning model's thinking: its separate reasoning_content, else the <think> blocks of the reply."""
    separate = _text_or_none(getattr(message, "reasoning_content", None))
    if separate:
        return separate
    if "<think>" not in text.lower():
        return None

    blocks = re.findall(r"<think>(.*?)(?:</think>|$)", text, re.S | re.I)
    return "\n".join(b.strip() for b in blocks if b.strip()) or None


async def complete_all(
    requests: list[CallRequest],
    cfg: ModelConfig,
    on_result: Callable[[CallRequest, CallResult], None],
    cancel: threading.Event | None = None,
    throttle: Throttle | None = None,
) -> None:
    """Run every request, at most cfg.concurrency at a time (fewer after timeouts: see Throttle); on_result once
    per finished request.

    on_result runs on the event loop thread, one call at a time, as each request finishes.
    When ``cancel`` is set no new request is started and pending retries are abandoned (their
    result carries the last error); requests never started get no on_result call.
    """
    _check_model_string(cfg)
    if not requests:
        return
    pin = Pin.of(cfg)  # raises EndpointError before anything is sent
    token = _PINNED.set(pin)  # tasks copy this context: every request and connection made for these calls is checked
    refused = RefusalWatch(on_result, cancel)
    try:
        call = _make_caller(cfg)
        with fewer_collections():
            await _run_workers(requests, cfg, call, refused.on_result, refused.stop, throttle)
    finally:
        _PINNED.reset(token)
    refused.raise_if_stopped(len(requests))


class CallsRefused(WorkbenchError, ValueError):
    """The engine stopped: every call it made was refused by the guard (nothing was sent); a user's
    setting to fix (a proxy variable, a hosts file), so not an OSError the CLI would call a disk fault."""


class RefusalWatch:
    """Stop the engine after REFUSED_IN_A_ROW refused calls with none answered: the rest would be refused too.

    The caller's cancel still stops it as before; when the caller itself stopped on the refusals (a
    run does, with its own words) nothing is raised, else CallsRefused says why after in-flight calls end.
    """

    def __init__(self, on_result: Callable, cancel: threading.Event | None) -> None:
        self.forward, self.cancel = on_result, cancel
        self.own = threading.Event()
        self.stop = AnyEvent(self.own, cancel)
        self.in_a_row, self.answered, self.first, self.seen = 0, False, None, 0

    def on_result(self, req: CallRequest, res: CallResult) -> None:
        """Count the result, then hand it on."""
        self.seen += 1
        if res.error_kind == "refused" and not self.answered:
            self.in_a_row += 1
            self.first = self.first or res.error
        else:
            self.answered, self.in_a_row = True, 0
        self.forward(req, res)
        if self.in_a_row >= REFUSED_IN_A_ROW:
            self.own.set()

    def raise_if_stopped(self, total: int) -> None:
        """CallsRefused when this watch stopped the engine and the caller did not stop it first."""
        if self.own.is_set() and not (self.cancel is not None and self.cancel.is_set()) and self.seen < total:
            raise CallsRefused(
                f"stopped early: {self.in_a_row} calls in a row were refused and none was answered, so the remaining "
                f"{total - self.seen} were not made: {self.first}"
            )


class Throttle:
    """The calls in flight, halved at each timed-out attempt (down to one): a server that cannot keep up
    is sent fewer calls at once instead of retries that queue behind the calls it is still answering."""

    def __init__(self, limit: int, on_note: Callable[[str], None] | None = None) -> None:
        self.limit, self.on_note, self.notes, self.in_flight = max(1, limit), on_note, [], 0

    @contextlib.asynccontextmanager
    async def slot(self):
        """One attempt in flight: waits while `limit` attempts are (a retry waits its turn like a new call)."""
        while self.in_flight >= self.limit:
            await asyncio.sleep(0.05)
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def timed_out(self) -> None:
        """One attempt timed out: halve the calls in flight (once per lowering; later timeouts of calls already
        in flight at the old limit count as the same lowering until a new limit is reached)."""
        if self.limit == 1:
            return
        before, self.limit = self.limit, max(1, self.limit // 2)
        note = f"a call timed out: concurrency lowered from {before} to {self.limit}"
        self.notes.append(note)
        if self.on_note is not None:
            self.on_note(note)


async def _run_workers(requests, cfg: ModelConfig, call, on_result, cancel, throttle: Throttle | None = None) -> None:
    queue = iter(list(requests))
    throttle = throttle or Throttle(cfg.concurrency)

    async def worker() -> None:
        for req in queue:  # a shared iterator: each request is taken by exactly one worker
            if cancel is not None and cancel.is_set():
                return
            result = await _run_one(call, req, cfg, cancel, throttle)
            on_result(req, result)

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(cfg.concurrency, len(requests)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()  # only matters when on_result raised: stop the other workers
        await asyncio.gather(*tasks, return_exceptions=True)


def complete_all_sync(
    requests: list[CallRequest],
    cfg: ModelConfig,
    on_result: Callable[[CallRequest, CallResult], None],
    cancel: threading.Event | None = None,
    throttle: Throttle | None = None,
) -> None:
    """complete_all from synchronous code (a CLI, Streamlit's script thread, a worker thread)."""
    coro = complete_all(requests, cfg, on_result, cancel, throttle)
    try:
        asyncio.get_running_loop()
        loop_running = True
    except RuntimeError:
        loop_running = False
    if not loop_running:  # run outside the except block, or every error's __context__ is that RuntimeError
        run_closing_orphans(coro)
        return
    # this thread already runs a loop (a notebook, async caller): use a private thread
    errors: list[BaseException] = []

    def runner() -> None:
        try:
            run_closing_orphans(coro)
        except BaseException as exc:  # re-raised in the caller's thread below
            errors.append(exc)

    thread = threading.Thread(target=runner, name="workbench-llm", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


class _OrphanClosingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The engine loop's default executor: remembers coroutines its jobs return until they start.

    litellm's acompletion builds its request coroutine in this executor and awaits it afterwards; a
    call cancelled meanwhile (Ctrl-C, SIGTERM) leaves that coroutine to the garbage collector, which
    prints "coroutine ... was never awaited". close_orphans() closes them once the loop is done.
    """

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="workbench-llm-executor")
        self._returned: list = []
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        """Run fn; a coroutine it returns is kept until a later job finds it started (a few at a time)."""

        def job():
            result = fn(*args, **kwargs)
            if inspect.iscoroutine(result):
                with self._lock:
                    self._returned = [c for c in self._returned if _unstarted(c)] + [result]
            return result

        return super().submit(job)

    def close_orphans(self) -> None:
        """Close the returned coroutines nobody started (their callers were cancelled)."""
        with self._lock:
            orphans, self._returned = [c for c in self._returned if _unstarted(c)], []
        for coro in orphans:
            coro.close()


def _unstarted(coro) -> bool:
    return inspect.getcoroutinestate(coro) == inspect.CORO_CREATED


def run_closing_orphans(coro):
    """asyncio.run(coro) on a loop whose executor's orphaned coroutines are closed, not left to warn.

    Ctrl-C cancels the run's main task (asyncio's own SIGINT handling); the CLI turns SIGTERM into the same.
    """
    executor = _OrphanClosingExecutor()
    try:
        with asyncio.Runner() as runner:
            runner.get_loop().set_default_executor(executor)
            return runner.run(coro)
    finally:
        executor.shutdown(wait=True)
        executor.close_orphans()


def check_model(cfg: ModelConfig) -> str:
    """Make one tiny call to confirm the endpoint answers; return the reply or raise LLMError."""
    _check_model_string(cfg)
    quick = dataclasses.replace(cfg, max_retries=min(cfg.max_retries, 1), concurrency=1)
    request = CallRequest("check", [{"role": "user", "content": "Reply with the single digit 1."}])
    results: list[CallResult] = []
    complete_all_sync([request], quick, lambda _req, res: results.append(res))
    result = results[0]
    if result.error is not None:
        raise LLMError(f"{cfg.model} at {cfg.endpoint_label()}: {result.error}")
    return result.text or ""


@dataclass(frozen=True)
class ServerFacts:
    """What a local server says about itself: which server it is, and how many calls it answers at once."""

    kind: str = ""  # "llama.cpp", "llama-cpp-python" or "" (unknown: vLLM, Ollama, a proxy ...)
    slots: int | None = None
    how: str = ""


def server_facts(cfg: ModelConfig, timeout_s: float = 3.0) -> ServerFacts:
    """What the one local server of cfg says about itself: llama.cpp's own server reports its slots (/props
    total_slots, /slots), llama-cpp-python's answers one call at a time (its /v1/models says owned_by "me");
    nothing for a remote or pooled endpoint, or a server that says nothing. Only GET requests to the configured
    server, under the same guard as the calls (no report text, no redirect, no proxy nobody allowed)."""
    bases = cfg.base_urls() if len(cfg.endpoints) <= 1 else ()
    if len(bases) != 1 or not all_local(bases):
        return ServerFacts()
    base = bases[0].rstrip("/")
    root = base.removesuffix("/v1")
    import httpx  # here, not at the top: a command that calls no model never loads an HTTP client

    _install_guard()
    token = _PINNED.set(Pin.of(dataclasses.replace(cfg, api_base=root, endpoints=())))  # /props sits above /v1
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
            props = _json_get(client, f"{root}/props")
            if isinstance(props, dict) and isinstance(props.get("total_slots"), int):
                return ServerFacts("llama.cpp", props["total_slots"], "llama.cpp server: total_slots in /props")
            slots = _json_get(client, f"{root}/slots")
            if isinstance(slots, list) and slots:
                return ServerFacts("llama.cpp", len(slots), "llama.cpp server: /slots")
            # llama-cpp-python: its OpenAPI title answers at once; /v1/models waits for the call under way
            api = _json_get(client, f"{root}/openapi.json")
            title = str(((api or {}).get("info") or {}).get("title", "")) if isinstance(api, dict) else ""
            models = None if "llama.cpp Python" in title else _json_get(client, f"{base}/models")
    finally:
        _PINNED.reset(token)
    if "llama.cpp Python" in title:
        return ServerFacts("llama-cpp-python", 1, "llama-cpp-python server: it answers one call at a time")
    data = models.get("data") if isinstance(models, dict) else None
    owners = {m.get("owned_by") for m in data if isinstance(m, dict)} if isinstance(data, list) else set()
    if owners == {"me"}:
        return ServerFacts("llama-cpp-python", 1, "llama-cpp-python server: it answers one call at a time")
    return ServerFacts()


def _json_get(client, url: str):
    """The JSON body of a GET, None when the server does not answer it with JSON."""
    import httpx

    try:
        response = client.get(url)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, OSError):  # EndpointRefused is an OSError: the guard said no
        return None


def fitted_to_server(cfg: ModelConfig, facts: ServerFacts | None = None) -> tuple[ModelConfig, str]:
    """cfg with no more calls in flight than its local server answers at once (queued calls would spend their
    timeout waiting), and a line saying what was chosen; unchanged (and "") when the server says nothing."""
    facts = server_facts(cfg) if facts is None else facts
    slots, how = facts.slots, facts.how
    if slots is None:
        return cfg, ""
    if cfg.concurrency <= slots:
        return cfg, f"concurrency {cfg.concurrency}: the server answers {slots} call(s) at once ({how})"
    return dataclasses.replace(cfg, concurrency=slots), (
        f"concurrency {slots} instead of {cfg.concurrency}: the server answers {slots} call(s) at once ({how}), "
        "and a queued call would spend its timeout waiting"
    )


# the engine's parts, for workbench/labeller/workers.py (each worker process runs its own event loop)
make_caller = _make_caller
run_one = _run_one


def pin_endpoints(cfg: ModelConfig):
    """Check every request and connection made from this context against cfg's endpoints, as complete_all does."""
    return _PINNED.set(Pin.of(cfg))


# -- what litellm knows about a model (estimates, structured output, seeds) -----------------------


def count_tokens(model: str, messages: list[dict]) -> int:
    """Prompt tokens of one call by litellm's token counter for the model (its default tokenizer when unknown)."""
    litellm = _litellm()
    return int(litellm.token_counter(model=model, messages=messages))


def token_prices(model: str) -> tuple[float, float] | None:
    """(input, output) price per token from litellm's (offline) price map, None when it has none."""
    litellm = _litellm()
    try:
        prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=1_000_000, completion_tokens=1_000_000)
    except Exception:  # litellm raises ModelNotMappedError (or a bare Exception) for a model it has no price for
        return None
    return float(prompt) / 1_000_000, float(completion) / 1_000_000


def supports_response_schema(model: str) -> bool:
    """Whether litellm says the model accepts a JSON schema as response_format."""
    litellm = _litellm()
    try:
        return bool(litellm.supports_response_schema(model=model))
    except Exception:  # an unmapped model: litellm cannot say, so the prompt's output format is used
        return False


def accepts_seed(model: str) -> bool:
    """Whether the provider takes a seed parameter (OpenAI-compatible servers do; Anthropic does not)."""
    litellm = _litellm()
    try:
        provider = litellm.get_llm_provider(model)[1]
        name = model.split("/", 1)[1] if model.startswith(provider + "/") else model
        return "seed" in (litellm.get_supported_openai_params(model=name, custom_llm_provider=provider) or [])
    except Exception:
        return False


# -- what workbench/labeller/batch.py needs: the same checks, body and reply handling as a chat call ---------


@contextlib.contextmanager
def pinned(cfg: ModelConfig):
    """While the block runs, every request and socket of this thread must go to cfg's checked endpoints."""
    token = pin_endpoints(cfg)  # raises EndpointError before anything is sent
    try:
        yield
    finally:
        _PINNED.reset(token)


def litellm_for(cfg: ModelConfig):
    """litellm, ready for a call of cfg that is not a chat call (a batch job): the model string checked, no
    logging callback registered, a local model's zero price registered."""
    _check_model_string(cfg)
    litellm = _litellm()
    _refuse_payload_receivers(litellm)
    _price_local_model(litellm, cfg)
    return litellm


def connection_kwargs(cfg: ModelConfig) -> dict:
    """api_base (always explicit: what was checked is what is used), the key, no retries behind our back."""
    kwargs = {"api_base": cfg.base_urls()[0], "timeout": cfg.timeout_s, "max_retries": 0}
    key = _api_key(cfg)
    if key:
        kwargs["api_key"] = key
    return kwargs


def request_body(cfg: ModelConfig, messages: list[dict], response_format: dict | None = None) -> dict:
    """The OpenAI chat request body a call of cfg sends (the body of one batch line); response_format: the
    request's own, over cfg's."""
    provider = provider_of(cfg.model)
    name = cfg.model.split("/", 1)[1] if cfg.model.startswith(provider + "/") else cfg.model
    skip = ("timeout", "num_retries", "max_retries")
    kwargs = _with_format({k: v for k, v in _call_kwargs(cfg).items() if k not in skip}, response_format)
    return {"model": name, "messages": messages, **kwargs}


def result_of_reply(key: str, body: dict, cost: float | None, limit: int = MAX_REPLY_CHARS) -> CallResult:
    """A CallResult from a chat.completion body received as data (a batch output line): the same fields
    a chat call's reply gives, bounded the same way."""
    response = json.loads(json.dumps(body), object_hook=lambda d: SimpleNamespace(**d))
    result = _bounded(_success(key, response, 0.0, 1), limit)
    result.cost = cost
    return result


def error_kind_of_status(status: int | None) -> str:
    """The error_kind of an HTTP status a provider reports for one request (a batch error line)."""
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status == 408:
        return "timeout"
    if isinstance(status, int) and status >= 500:
        return "server"
    if isinstance(status, int) and 400 <= status < 500:
        return "bad_request"
    return "other"


def batch_token_prices(model: str) -> tuple[float, float] | None:
    """(input, output) batch price per token from litellm's price map, None when it lists none for the model."""
    litellm = _litellm()
    try:
        info = litellm.get_model_info(model=model)
    except Exception:  # an unmapped model
        return None
    prompt, completion = info.get("input_cost_per_token_batches"), info.get("output_cost_per_token_batches")
    if prompt is None or completion is None:
        return None
    return float(prompt), float(completion)
