"""A small OpenAI-compatible chat server on 127.0.0.1 for tests and benchmarks.

Real HTTP, real litellm, no mocks: tests point a ModelConfig at ``server.url`` and the
server misbehaves on request (429 with Retry-After, 500, slow, hang, malformed or
prose-wrapped JSON, refusals). A behaviour is chosen per server (``server.behaviour``)
or per request with a marker in the last user message, e.g. ``[[behaviour:429]]`` or
``[[behaviour:429:3]]`` (the number is the fail count for 429/500, seconds for slow/hang).

Behaviours: ok (the keyword answer), slow, 429, 500 (fail N times, then ok), 400, 401 and 404
("model does not exist", always), hang, malformed (unparseable JSON reply), prose (JSON inside prose), refusal,
reply (the configured ``reply`` text), garbage (a truncated HTTP body). ``body_fn(request body, reply)``
builds the whole response body instead (the recorded reply shapes of tests/data/reply_shapes.json).
"Fail N times then succeed" (429, 500) is counted per distinct message list, so every
request of a batch fails N times and then succeeds.

The OpenAI batch surface is there too: POST /v1/files (multipart upload), GET /v1/files/{id} and
/v1/files/{id}/content, POST /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel. A
batch completes after ``batch_polls`` retrievals (in_progress until then) or ends in ``batch_end``
("failed", "expired", "cancelled") instead; ``batch_poll_hangs`` retrievals from the
``batch_hang_from``-th on hang for ``hang_s`` (the client's poll times out), and ``batch_expires_s`` sets
a batch's ``expires_at``; its lines are answered by the same logic as chat calls
(markers included: a 400/401/404 line goes to the error file) but are not counted as chat calls
(``batch_counts`` counts uploads, creates, retrieves, contents and cancels; ``requests`` every HTTP
request of any kind). As the real services do, a batch whose lines' ``url`` is not the batch's
``endpoint`` fails at validation (its errors name the line).

Azure OpenAI's surface answers the same way at ``server.azure_url`` (the resource endpoint, an
``azure/DEPLOYMENT`` model's api_base): POST /openai/files?api-version=..., GET /openai/files/{id}/content,
POST /openai/batches, GET /openai/batches/{id}, POST /openai/batches/{id}/cancel, and the chat call
POST /openai/deployments/{deployment}/chat/completions (answered with the deployment as the model); the
v1 API's /openai/v1/files and /openai/v1/batches too. A request under /openai/ without ``api-version``
(other than the v1 API) gets Azure's 404 "Resource not found". ``surface_log`` records each files,
batches and Azure chat request: method, path, api-version, and its key headers (``api_key``: Azure's
api-key header, ``authorization``: OpenAI's; None when absent).

GET /v1/stats returns the counts as JSON. Stdlib only. Run alone
(``python tests/fake_llm_server.py --latency 0.1``) it serves in the foreground and prints
its URL on the first line; the throughput bench uses that to keep the server's threads off
the measured process's GIL.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import sys
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

BEHAVIOURS = (
    "ok",
    "slow",
    "429",
    "500",
    "400",
    "401",
    "404",
    "hang",
    "malformed",
    "prose",
    "refusal",
    "reply",
    "garbage",
)
MARKER = re.compile(r"\[\[behaviour:([a-z0-9]+)(?::([0-9.]+))?\]\]")
MALFORMED_REPLY = '{"value": , "evidence": "see report",,'
REFUSAL_REPLY = "I'm sorry, but I can't help with interpreting medical reports."


def _text_of(message: dict) -> str:
    """Flatten an OpenAI message's content (string or list of parts) to text."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def last_user_text(messages: list[dict]) -> str:
    """The last user message's text ("" when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text_of(message)
    return ""


def report_part(text: str) -> str:
    """The report inside a user message: the text after a 'Report:' line when present."""
    text = MARKER.sub("", text)
    matches = list(re.finditer(r"(?im)^\s*(?:radiology\s+)?report\s*:\s*", text))
    if not matches:
        return text.strip()
    # the LAST "Report:" line is the report; earlier ones belong to few-shot examples
    body = text[matches[-1].end() :].lstrip()
    for fence in ('"""', "```"):
        if body.startswith(fence):
            body = body[len(fence) :]
    return body.split('"""')[0].split("```")[0].strip()


def _keyword_decision(report: str, keywords) -> dict:
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", report):
        if any(k.lower() in sentence.lower() for k in keywords):
            return {"value": 1, "evidence": sentence.strip()}
    return {"value": 0, "evidence": ""}


def keyword_answer(messages: list[dict], keywords) -> str:
    """A naive deterministic labeller (no negation handling): 1 when a keyword is in the report.

    ``keywords`` is a sequence (one label) or a dict {label: keywords}; with a dict, the labels
    named in the prompt outside the report are answered: one label gives
    {"value", "evidence"}, several give the joint form {"labels": {label: {...}}}.
    """
    text = last_user_text(messages)
    report = report_part(text)
    if not isinstance(keywords, dict):
        return json.dumps(_keyword_decision(report, keywords))
    instructions = " ".join(_text_of(m) for m in messages).replace(report, " ").lower()
    asked = [label for label in keywords if label.lower() in instructions] or list(keywords)
    if len(asked) == 1:
        return json.dumps(_keyword_decision(report, keywords[asked[0]]))
    return json.dumps({"labels": {label: _keyword_decision(report, keywords[label]) for label in asked}})


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def prompt_prefix(messages: list[dict]) -> str:
    """What a provider's prefix cache can reuse: every message before the report, and the last user
    message up to where its report starts."""
    user = last_user_text(messages)
    report = report_part(user)
    head = user[: user.rfind(report)] if report and report in user else user
    return "\n".join(_text_of(m) for m in messages[:-1]) + "\n" + head


def completion_body(model: str, reply: str, messages: list[dict], cached_tokens: int = 0) -> dict:
    """A valid OpenAI chat.completion object (with usage) carrying ``reply``; cached_tokens: the prompt
    tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens, as OpenAI reports them)."""
    prompt_tokens = sum(_tokens(_text_of(m)) for m in messages)
    completion_tokens = _tokens(reply)
    cached_tokens = min(cached_tokens, prompt_tokens)
    return {
        "id": "chatcmpl-fake-" + hashlib.sha1(f"{time.time_ns()}".encode()).hexdigest()[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


class FakeLLMServer:
    """An OpenAI-compatible server in a background thread; a context manager."""

    def __init__(
        self,
        *,
        behaviour: str = "ok",
        keywords: tuple[str, ...] | list[str] | dict[str, list[str]] = ("effusion",),
        reply: str | None = None,
        answer_fn: Callable[[list[dict]], str] | None = None,
        body_fn: Callable[[dict, str], dict] | None = None,
        latency: float = 0.0,
        fail_times: int = 2,
        retry_after: float | None = 0.2,
        hang_s: float = 30.0,
        slow_s: float = 0.5,
        prefix_slots: int = 16,
        batch_polls: int = 1,
        batch_end: str = "completed",
        batch_poll_hangs: int = 0,
        batch_hang_from: int = 1,
        batch_expires_s: float | None = None,
        owned_by: str = "tests",
        total_slots: int | None = None,
        serial: bool = False,
        openapi_title: str | None = None,
        allowed: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_alive: bool = True,
    ) -> None:
        self.host, self.wanted_port = host, port  # where to listen (another loopback address, a given port)
        self.keep_alive = keep_alive  # False: every answer closes its connection (each call connects anew)
        self.allowed = allowed  # allowed in the test's studies (False: a server no admin named, for refusal tests)
        self.behaviour = behaviour
        self.keywords = keywords if isinstance(keywords, dict) else tuple(keywords)
        self.reply = reply
        self.answer_fn = answer_fn
        self.body_fn = body_fn  # (request body, reply text) -> the whole response body (recorded reply shapes)
        self.latency = latency
        self.fail_times = fail_times
        self.retry_after = retry_after
        self.hang_s = hang_s
        self.slow_s = slow_s
        self.prefix_slots = prefix_slots  # prompt prefixes the simulated provider cache keeps (least recently used go)
        self.batch_polls = batch_polls  # retrievals of a batch before it completes
        self.batch_end = batch_end  # the status a batch ends in: completed, failed, expired or cancelled
        self.batch_poll_hangs = batch_poll_hangs  # N retrievals of a batch hang for hang_s (a poll times out) ...
        self.batch_hang_from = batch_hang_from  # ... from this retrieval on (1 = the first)
        self.batch_expires_s = batch_expires_s  # a batch's expires_at, seconds after its creation (None: not said)
        self.owned_by = owned_by  # /v1/models' owned_by: "me" is what llama-cpp-python's server says
        self.total_slots = total_slots  # answer GET /props with it, as llama.cpp's own server does (None: 404)
        self.serial = serial  # answer one chat call at a time (the others wait), as a one-slot local server does
        self.openapi_title = openapi_title  # GET /openapi.json's info.title (llama-cpp-python's names it; None: 404)
        self._serial_lock = threading.Lock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        """Bind a free port on 127.0.0.1, serve in a daemon thread, and allow its address:port in the test's studies."""
        self._stop.clear()
        self._server = _make_http_server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-llm-server", daemon=True
        )
        self._thread.start()
        if self.allowed:
            serving(self.origin)
        return self

    def stop(self) -> None:
        """Wake hanging handlers, stop serving and close the socket."""
        if self._server is not None and self.allowed:
            stopped(self.origin)
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """The api_base to give litellm: http://127.0.0.1:PORT/v1."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def origin(self) -> str:
        """Its exact address and port as an allowed endpoint: http://127.0.0.1:PORT."""
        return f"http://{self.host}:{self.port}"

    @property
    def azure_url(self) -> str:
        """The api_base of an azure/DEPLOYMENT model: the resource endpoint http://127.0.0.1:PORT (Azure's paths
        start with /openai/)."""
        return f"http://{self.host}:{self.port}"

    # -- bookkeeping -------------------------------------------------------------------
    def reset(self) -> None:
        """Forget counts, bodies and fail counters (behaviour settings stay)."""
        with self._lock:
            self.count = 0
            self.counts: Counter[str] = Counter()
            self.bodies: list[dict] = []
            self.headers: list[dict[str, str]] = []
            self.in_flight = 0
            self.max_in_flight = 0
            self._failures: Counter[tuple[str, str]] = Counter()
            self._prefixes: OrderedDict[str, int] = OrderedDict()  # prefix hash -> its tokens, oldest first
            self.prompt_tokens = 0  # summed over answered requests, and the part served from the prefix cache
            self.cached_tokens = 0
            self.requests = 0  # every HTTP request, of any kind (the guard tests: nothing may arrive)
            self.batch_counts: Counter[str] = Counter()
            self.files: dict[str, dict] = {}
            self.batches: dict[str, dict] = {}
            self.surface_log: list[dict] = []  # files, batches and Azure chat requests (see the module docstring)

    def _enter(self, body: dict, headers: dict[str, str], behaviour: str) -> None:
        with self._lock:
            self.count += 1
            self.counts[behaviour] += 1
            self.bodies.append(body)
            self.headers.append(headers)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _should_fail(self, behaviour: str, messages: list[dict], times: int) -> bool:
        key = (behaviour, hashlib.sha1(json.dumps(messages, sort_keys=True).encode()).hexdigest())
        with self._lock:
            if self._failures[key] < times:
                self._failures[key] += 1
                return True
            return False

    def cached_prefix_tokens(self, messages: list[dict]) -> int:
        """Tokens of this request's prompt prefix when the cache still holds it (0 on a miss); remembers it."""
        prefix = prompt_prefix(messages)
        key = hashlib.sha1(prefix.encode()).hexdigest()
        with self._lock:
            hit = self._prefixes.get(key, 0)
            self._prefixes[key] = len(prefix.split())
            self._prefixes.move_to_end(key)
            while len(self._prefixes) > self.prefix_slots:
                self._prefixes.popitem(last=False)
        return hit

    def settle(self, quiet_s: float = 0.5, timeout_s: float = 60.0) -> None:
        """Wait until no request is being answered and none arrived for quiet_s (requests a killed
        client sent just before it died still reach the server), at most timeout_s."""
        deadline = time.monotonic() + timeout_s
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            with self._lock:
                busy, count = self.in_flight > 0, self.count
            if busy or count != last:
                last, since = count, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.02)
        raise TimeoutError(f"the fake server was still busy after {timeout_s} s")

    def wait(self, seconds: float) -> None:
        """Sleep, but wake early when the server stops."""
        if seconds > 0:
            self._stop.wait(seconds)

    # -- answering ---------------------------------------------------------------------
    def choose(self, messages: list[dict]) -> tuple[str, float | None]:
        """The behaviour for this request and its optional numeric argument."""
        match = MARKER.search(last_user_text(messages))
        if match:
            return match.group(1), (float(match.group(2)) if match.group(2) else None)
        return self.behaviour, None

    def answer(self, messages: list[dict]) -> str:
        """The deterministic correct reply."""
        if self.answer_fn is not None:
            return self.answer_fn(messages)
        if self.reply is not None:
            return self.reply
        return keyword_answer(messages, self.keywords)

    def respond(self, body: dict, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """Status, extra headers and body bytes for one chat request."""
        messages = body.get("messages") or []
        behaviour, arg = self.choose(messages)
        self._enter(body, {k.lower(): v for k, v in (headers or {}).items()}, behaviour)  # in flight: queued too
        try:
            with self._serial_lock if self.serial else contextlib.nullcontext():
                return self._respond(body, messages, behaviour, arg)
        finally:
            self._leave()

    def _respond(self, body, messages, behaviour, arg):
        model = str(body.get("model", "fake"))
        self.wait(self.latency)
        if behaviour in ("429", "500"):
            times = int(arg) if arg is not None else self.fail_times
            if self._should_fail(behaviour, messages, times):
                return self._error(int(behaviour))
            behaviour = "ok"
        if behaviour == "slow":
            self.wait(arg if arg is not None else self.slow_s)
        elif behaviour == "hang":
            self.wait(arg if arg is not None else self.hang_s)
        elif behaviour in ("400", "401", "404"):
            return self._error(int(behaviour))
        elif behaviour == "garbage":
            return 200, {}, b'{"id": "chatcmpl-broken", "choices": [ {"mess'
        reply = {
            "malformed": MALFORMED_REPLY,
            "refusal": REFUSAL_REPLY,
            "prose": None,
            "reply": self.reply,
        }.get(behaviour)
        if behaviour == "prose":
            reply = "Sure! Here is my assessment.\n" + self.answer(messages) + "\nLet me know if you need more."
        if reply is None:
            reply = self.answer(messages)
        if self.body_fn is not None:
            return 200, {}, json.dumps(self.body_fn(body, reply)).encode()
        cached = self.cached_prefix_tokens(messages)
        body = completion_body(model, reply, messages, cached)
        with self._lock:
            self.prompt_tokens += body["usage"]["prompt_tokens"]
            self.cached_tokens += body["usage"]["prompt_tokens_details"]["cached_tokens"]
        return 200, {}, json.dumps(body).encode()

    def _error(self, status: int) -> tuple[int, dict[str, str], bytes]:
        headers: dict[str, str] = {}
        if status == 429:
            message, kind = "Rate limit reached for requests", "rate_limit_exceeded"
            if self.retry_after is not None:
                headers["Retry-After"] = f"{self.retry_after:g}"
        elif status == 400:
            message, kind = "Invalid request: unsupported parameter", "invalid_request_error"
        elif status == 401:
            message, kind = "Incorrect API key provided", "invalid_api_key"
        elif status == 404:
            message, kind = "The model does not exist or you do not have access to it.", "model_not_found"
        else:
            message, kind = "The server had an error while processing your request", "server_error"
        error = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
        return status, headers, json.dumps(error).encode()

    # -- the batch surface (/v1/files, /v1/batches) -------------------------------------
    def upload(self, filename: str, purpose: str, data: bytes) -> dict:
        """Store an uploaded file; its OpenAI file object."""
        with self._lock:
            self.batch_counts["upload"] += 1
            file_id = f"file-fake-{len(self.files) + 1}"
            self.files[file_id] = {
                "data": data,
                "object": {
                    "id": file_id,
                    "object": "file",
                    "bytes": len(data),
                    "created_at": int(time.time()),
                    "filename": filename or "batch.jsonl",
                    "purpose": purpose or "batch",
                    "status": "processed",
                },
            }
        return self.files[file_id]["object"]

    def create_batch(self, body: dict) -> tuple[int, dict]:
        """A new batch on an uploaded file (404 for an unknown file)."""
        with self._lock:
            self.batch_counts["create"] += 1
            if body.get("input_file_id") not in self.files:
                return 404, {"error": {"message": "No such file", "type": "invalid_request_error"}}
            batch_id = f"batch_fake_{len(self.batches) + 1}"
            lines = [
                json.loads(x) for x in self.files[body["input_file_id"]]["data"].decode().splitlines() if x.strip()
            ]
            endpoint = body.get("endpoint", "/v1/chat/completions")
            invalid = [
                {
                    "code": "invalid_url",
                    "line": n,
                    "message": f"line {n}: url {line.get('url')!r} is not the batch's endpoint {endpoint!r}",
                }
                for n, line in enumerate(lines, 1)
                if line.get("url") != endpoint
            ]
            self.batches[batch_id] = {
                "lines": lines,
                "polls": 0,
                "invalid": invalid,
                "object": {
                    "id": batch_id,
                    "object": "batch",
                    "endpoint": endpoint,
                    "errors": None,
                    "input_file_id": body["input_file_id"],
                    "completion_window": body.get("completion_window", "24h"),
                    "status": "validating",
                    "output_file_id": None,
                    "error_file_id": None,
                    "created_at": int(time.time()),
                    "expires_at": None if self.batch_expires_s is None else int(time.time() + self.batch_expires_s),
                    "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                    "metadata": body.get("metadata") or {},
                },
            }
            return 200, self.batches[batch_id]["object"]

    def retrieve_batch(self, batch_id: str) -> tuple[int, dict]:
        """The batch after one more poll: in progress, then completed (outputs written) or batch_end."""
        with self._lock:
            self.batch_counts["retrieve"] += 1
            batch = self.batches.get(batch_id)
            if batch is None:
                return 404, {"error": {"message": "No such batch", "type": "invalid_request_error"}}
            obj = batch["object"]
            if obj["status"] in ("completed", "failed", "expired", "cancelled"):
                return 200, obj
            if batch["invalid"]:  # validation fails before any line is answered
                obj["status"] = "failed"
                obj["errors"] = {"object": "list", "data": batch["invalid"][:10]}
                return 200, obj
            batch["polls"] += 1
            if batch["polls"] <= self.batch_polls:
                obj["status"] = "in_progress"
                obj["request_counts"]["completed"] = min(batch["polls"] - 1, len(batch["lines"]))
                return 200, obj
            end = self.batch_end
        if end != "completed":
            obj["status"] = end
            obj["errors"] = {"object": "list", "data": [{"code": end, "message": f"the fake server's batch {end}"}]}
            return 200, obj
        self._complete(batch)
        return 200, obj

    def _complete(self, batch: dict) -> None:
        """Answer every line as a chat call would be answered; write the output and error files."""
        out, errors = [], []
        for line in batch["lines"]:
            body = line.get("body") or {}
            messages = body.get("messages") or []
            behaviour, arg = self.choose(messages)
            status, _headers, payload = self._respond(body, messages, behaviour, arg)
            answer = json.loads(payload) if payload.startswith(b"{") and payload.endswith(b"}") else None
            record = {"id": f"batch_req_{len(out) + len(errors) + 1}", "custom_id": line.get("custom_id")}
            if status == 200 and answer is not None:
                out.append(
                    {
                        **record,
                        "response": {"status_code": 200, "request_id": record["id"], "body": answer},
                        "error": None,
                    }
                )
            else:
                errors.append(
                    {
                        **record,
                        "response": {"status_code": status, "request_id": record["id"], "body": answer or {}},
                        "error": None,
                    }
                )
        obj = batch["object"]
        with self._lock:
            for name, rows in (("output_file_id", out), ("error_file_id", errors)):
                if rows:
                    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
                    file_id = f"file-fake-{len(self.files) + 1}"
                    self.files[file_id] = {
                        "data": data,
                        "object": {
                            "id": file_id,
                            "object": "file",
                            "bytes": len(data),
                            "created_at": int(time.time()),
                            "filename": f"{obj['id']}_{name[:-8]}.jsonl",
                            "purpose": "batch_output",
                            "status": "processed",
                        },
                    }
                    obj[name] = file_id
            obj["status"] = "completed"
            obj["request_counts"] = {"total": len(batch["lines"]), "completed": len(out), "failed": len(errors)}

    def cancel_batch(self, batch_id: str) -> tuple[int, dict]:
        """Cancel a batch that has not ended."""
        with self._lock:
            self.batch_counts["cancel"] += 1
            batch = self.batches.get(batch_id)
            if batch is None:
                return 404, {"error": {"message": "No such batch", "type": "invalid_request_error"}}
            if batch["object"]["status"] not in ("completed", "failed", "expired"):
                batch["object"]["status"] = "cancelled"
            return 200, batch["object"]

    def file_of(self, file_id: str, content: bool) -> tuple[int, bytes]:
        """A stored file's object or content."""
        with self._lock:
            self.batch_counts["content" if content else "file"] += 1
            found = self.files.get(file_id)
        if found is None:
            return 404, b'{"error": {"message": "No such file", "type": "invalid_request_error"}}'
        return 200, found["data"] if content else json.dumps(found["object"]).encode()


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str, bytes]]:
    """Form fields of a multipart/form-data body: name -> (filename, bytes)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[name] = (part.get_filename() or "", part.get_payload(decode=True) or b"")
    return fields


def _make_http_server(fake: FakeLLMServer) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        # keep-alive: litellm's HTTP clients pool connections; HTTP/1.0 would force a
        # new TCP connection per call and blur the throughput numbers
        protocol_version = "HTTP/1.1"
        # headers and body in separate segments + Nagle + delayed ACK = ~40 ms stalls
        disable_nagle_algorithm = True

        def log_message(self, *args) -> None:  # silence per-request stderr lines
            pass

        def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                if not fake.keep_alive:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self._headers_buffer.append(b"\r\n" + payload)  # one write for head and body
                self.wfile.write(b"".join(self._headers_buffer))
                self._headers_buffer = []
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (timeout): nothing to do

        def _surface(self) -> str | None:
            """The request path on the OpenAI surface (/v1/...): Azure's /openai/... mapped onto it and logged;
            None when the request was answered already (Azure's 404 without api-version)."""
            raw, _, query = self.path.partition("?")
            raw = raw.rstrip("/")
            path = raw
            azure = raw.startswith("/openai/")
            if azure:
                rest = raw.removeprefix("/openai")
                path = rest if rest.startswith("/v1/") else "/v1" + rest
                if "/deployments/" in rest:
                    path = "/v1/chat/completions" if rest.endswith("/chat/completions") else rest
            if azure or path.startswith(("/v1/files", "/v1/batches")):
                version = (parse_qs(query).get("api-version") or [None])[0]
                with fake._lock:
                    fake.surface_log.append(
                        {
                            "method": self.command,
                            "path": raw,
                            "api_version": version,
                            "api_key": self.headers.get("api-key"),
                            "authorization": self.headers.get("authorization"),
                        }
                    )
                if azure and version is None and not raw.startswith("/openai/v1/"):
                    self._send(404, {}, b'{"error": {"code": "404", "message": "Resource not found"}}')
                    return None
            return path

        def do_GET(self) -> None:
            with fake._lock:
                fake.requests += 1
            path = self._surface()
            if path is None:
                return
            if path.startswith("/v1/batches/"):
                with fake._lock:
                    fake.batch_counts["poll"] += 1
                    hang = fake.batch_poll_hangs > 0 and fake.batch_counts["poll"] >= fake.batch_hang_from
                    fake.batch_poll_hangs -= hang
                    fake.batch_counts["hung"] += hang
                if hang:  # the client gives up first (its timeout); then the connection is closed unanswered
                    fake._stop.wait(fake.hang_s)
                    return
                status, obj = fake.retrieve_batch(path.rsplit("/", 1)[1])
                self._send(status, {}, json.dumps(obj).encode())
                return
            if path.startswith("/v1/files/"):
                content = path.endswith("/content")
                file_id = path.removesuffix("/content").rsplit("/", 1)[1]
                status, payload = fake.file_of(file_id, content)
                self._send(status, {}, payload)
                return
            if self.path.rstrip("/") in ("/v1/stats", "/stats"):  # for a parent process (the bench)
                with fake._lock:
                    stats = {
                        "count": fake.count,
                        "counts": dict(fake.counts),
                        "max_in_flight": fake.max_in_flight,
                        "prompt_tokens": fake.prompt_tokens,
                        "cached_tokens": fake.cached_tokens,
                        "requests": fake.requests,
                        "batch_counts": dict(fake.batch_counts),
                    }
                self._send(200, {}, json.dumps(stats).encode())
            elif self.path.rstrip("/") in ("/v1/models", "/models"):
                data = {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": fake.owned_by}]}
                self._send(200, {}, json.dumps(data).encode())
            elif self.path.rstrip("/") == "/openapi.json" and fake.openapi_title is not None:
                self._send(200, {}, json.dumps({"openapi": "3.1.0", "info": {"title": fake.openapi_title}}).encode())
            elif self.path.rstrip("/") == "/props" and fake.total_slots is not None:
                self._send(200, {}, json.dumps({"total_slots": fake.total_slots}).encode())
            else:
                self._send(404, {}, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            with fake._lock:
                fake.requests += 1
            path = self._surface()
            if path is None:
                return
            if path.startswith(("/v1/files", "/v1/batches")):
                self._batch_post(path, raw)
                return
            # /v1/messages: Anthropic's surface, /api/chat: Ollama's own (each answered in its shape through body_fn)
            if path not in ("/v1/chat/completions", "/chat/completions", "/api/chat") and not path.endswith(
                "/messages"
            ):
                self._send(404, {}, b'{"error": {"message": "not found", "type": "invalid_request_error"}}')
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {}, b'{"error": {"message": "body is not JSON", "type": "invalid_request_error"}}')
                return
            self._send(*fake.respond(body, dict(self.headers.items())))

        def _batch_post(self, path: str, raw: bytes) -> None:
            if path == "/v1/files":
                fields = _multipart(self.headers.get("Content-Type", ""), raw)
                filename, data = fields.get("file", ("", b""))
                obj = fake.upload(filename, fields.get("purpose", ("", b"batch"))[1].decode(), data)
                self._send(200, {}, json.dumps(obj).encode())
            elif path == "/v1/batches":
                status, obj = fake.create_batch(json.loads(raw or b"{}"))
                self._send(status, {}, json.dumps(obj).encode())
            elif path.startswith("/v1/batches/") and path.endswith("/cancel"):
                status, obj = fake.cancel_batch(path.split("/")[3])
                self._send(status, {}, json.dumps(obj).encode())
            else:
                self._send(404, {}, b'{"error": {"message": "not found", "type": "invalid_request_error"}}')

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256  # the default 5 drops SYNs when 32+ clients connect at once
        allow_reuse_address = True

    return Server((fake.host, fake.wanted_port), Handler)


# A new study allows no local port (issue 34: a forwarder can listen on any), so the code that starts a
# server allows it, as an admin would with `workbench allow-endpoint 127.0.0.1:PORT`: every study the
# test process opens (conftest calls register_study) allows every running server made with allowed=True
# (the default; a test of a refusal starts its server with allowed=False). Another local server a test
# starts (a redirector) calls serving() and stopped() the same way.
_LIVE: list[str] = []  # origins (http://127.0.0.1:PORT) of the servers running now
_STUDIES: list[weakref.ref] = []


def serving(origin: str) -> None:
    """A local server of the tests' own listens at origin: every open study allows it, and those opened later."""
    _LIVE.append(origin)
    for study in _open_studies():
        allow_in(study, origin)


def stopped(origin: str) -> None:
    """That server stopped (the studies keep the entry, as an admin's would stay)."""
    if origin in _LIVE:
        _LIVE.remove(origin)


def _open_studies() -> list:
    """The studies opened in this process that are still open."""
    _STUDIES[:] = [ref for ref in _STUDIES if ref() is not None]
    return [study for study in (ref() for ref in _STUDIES) if study is not None]


def allow_in(study, origin: str) -> None:
    """Allow a server's address:port in a study: in its settings (workbench.yaml, for child processes too)."""
    if origin in study.config.allowed_endpoints or not (study.root / "workbench.yaml").exists():
        return
    from workbench.study import save_config

    study.config.allowed_endpoints.append(origin)
    save_config(study.root, study.config)


_TEMPLATES: list[bool] = []  # non-empty while a session's template studies are built (they allow no server)


@contextlib.contextmanager
def building_templates() -> Iterator[None]:
    """Studies opened in the block are templates copied by many tests: no server of the moment is allowed in them."""
    _TEMPLATES.append(True)
    try:
        yield
    finally:
        _TEMPLATES.pop()


def register_study(study) -> None:
    """A study the test opened: it allows the running servers and those started later."""
    if _TEMPLATES:
        return
    _STUDIES.append(weakref.ref(study))
    for origin in list(_LIVE):
        allow_in(study, origin)


@contextlib.contextmanager
def running_server(**options) -> Iterator[FakeLLMServer]:
    """Start a FakeLLMServer for the duration of a with-block."""
    server = FakeLLMServer(**options)
    with server:
        yield server


try:
    import pytest
except ImportError:  # the bench and the CLI run without pytest
    pytest = None

if pytest is not None:

    @pytest.fixture
    def fake_llm_server() -> Iterator[FakeLLMServer]:
        """A fresh fake OpenAI-compatible server per test; configure its attributes in the test."""
        with running_server() as server:
            yield server


def main(argv: list[str] | None = None) -> None:
    """Serve in the foreground; print the URL first so a parent process can read it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    parser.add_argument("--behaviour", default="ok", choices=BEHAVIOURS)
    parser.add_argument("--keyword", action="append", default=None, help="answer 1 when present")
    parser.add_argument("--prefix-slots", type=int, default=16, help="prompt prefixes the simulated prefix cache keeps")
    args = parser.parse_args(argv)
    server = FakeLLMServer(
        behaviour=args.behaviour,
        latency=args.latency,
        prefix_slots=args.prefix_slots,
        keywords=tuple(args.keyword or ("effusion",)),
    ).start()
    print(server.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
