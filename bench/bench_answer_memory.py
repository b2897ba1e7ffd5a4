"""The server's memory and responsiveness while it answers three 450 MB SELECTs at once.

    python bench/bench_answer_memory.py [--answers 3] [--max-result-bytes 262144]

Issue 10 asks for: the server's RSS idle, at its peak and 2 s after three answers to
`SELECT a,a,...(2,000 columns) FROM t, r` (50 rows x 2,000 columns x 4,500 characters) run at
once over streamable HTTP, and the worst "ping" from another client meanwhile (a tools/list
request, from its own process: this server answers MCP's ping method with "Method not found"). Goals: peak
within +300 MB of idle, back within +100 MB after, pings under 1 s. The fake Ollama
(tests/support/fake_runtime.py) runs in this process and submits that SELECT for every question; the
server runs as a real `--transport streamable-http` subprocess. Memory is the server process's
own VmRSS/VmHWM from /proc (the SQLite workers are separate processes with their own cap).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.mcp import free_port, server_command, server_env, wait_for_port  # noqa: E402
from tests.support.policies import ScriptPolicy, assistant_reply, tool_call  # noqa: E402

TOOL = "answer_sql_question"
BALLOON_SQL = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r WHERE x<50), "
    "t(a) AS (SELECT printf('%.4500c','x')) SELECT " + ",".join(["a"] * 2000) + " FROM t, r"
)
PING_EVERY = 0.1  # seconds between pings (tools/list requests) from the watching client


def proc_kb(pid: int, field: str) -> int:
    """One `VmXXX:` figure of /proc/PID/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux, needs permission); False when not possible."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def watch(url: str, pid: int, stop: Any, out: Any) -> None:
    """In its own process (so the asking clients' parsing cannot delay it): a tools/list every
    PING_EVERY seconds until `stop` is set, sampling the server's VmRSS; puts (pings, samples)."""

    async def loop() -> tuple[list[float], list[int]]:
        pings: list[float] = []
        samples: list[int] = []
        async with (
            httpx2.AsyncClient(timeout=600) as http,
            Client(streamable_http_client(url, http_client=http)) as watcher,
        ):
            out.put("ready")
            while not stop.is_set():
                started = time.perf_counter()
                await watcher.list_tools()
                pings.append(time.perf_counter() - started)
                samples.append(proc_kb(pid, "VmRSS"))
                await anyio.sleep(PING_EVERY)
        return pings, samples

    out.put(anyio.run(loop))


async def measure(url: str, pid: int, answers: int) -> dict[str, Any]:
    """Idle RSS, then `answers` balloon questions at once with pings meanwhile, then RSS after."""
    sizes: list[int] = []
    context = multiprocessing.get_context("spawn")
    stop, out = context.Event(), context.Queue()
    watcher = context.Process(target=watch, args=(url, pid, stop, out))
    watcher.start()
    assert await anyio.to_thread.run_sync(out.get) == "ready"
    await anyio.sleep(1.0)
    idle = proc_kb(pid, "VmRSS")
    peak_reset = reset_peak(pid)

    async def ask(i: int) -> None:
        async with (
            httpx2.AsyncClient(timeout=600) as client_http,
            Client(streamable_http_client(url, http_client=client_http)) as client,
        ):
            result = await client.call_tool(TOOL, {"question": f"Show everything, take {i}"})
        assert not result.is_error, result
        sizes.append(len(json.dumps(result.structured_content)) + len(result.content[0].text))

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(answers):
            tg.start_soon(ask, i)
    seconds = time.perf_counter() - started
    stop.set()
    pings, sampled = await anyio.to_thread.run_sync(out.get)
    watcher.join(timeout=30)
    await anyio.sleep(2.0)
    after = proc_kb(pid, "VmRSS")
    peak = max([idle, *sampled, *([proc_kb(pid, "VmHWM")] if peak_reset else [])])
    return {
        "idle": idle,
        "peak": peak,
        "after": after,
        "pings": pings,
        "sizes": sizes,
        "seconds": seconds,
        "peak_from_hwm": peak_reset,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=3, help="balloon questions asked at once")
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="ask `SELECT 1` instead: the pings of a machine as loaded, without the balloon",
    )
    parser.add_argument(
        "--max-result-bytes",
        type=int,
        default=None,
        help="passed to the server (default: the server's own default)",
    )
    args = parser.parse_args()
    sql = "SELECT 1" if args.baseline else BALLOON_SQL
    policy = ScriptPolicy([assistant_reply("answer", tool_call("submit_sql", sql=sql))])
    fake = FakeServer(policy).start()
    port = free_port()
    extra = [] if args.max_result_bytes is None else ["--max-result-bytes", str(args.max_result_bytes)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            process = subprocess.Popen(
                server_command(
                    "--demo",
                    "--ollama-host",
                    fake.url,
                    "--transport",
                    "streamable-http",
                    "--port",
                    str(port),
                    "--query-timeout",
                    "120",
                    "--max-concurrent",
                    str(args.answers),
                    "--log-level",
                    "WARNING",
                    *extra,
                ),
                cwd=ROOT,
                env=server_env(Path(tmp)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_for_port(port, process)
                figures = anyio.run(measure, f"http://127.0.0.1:{port}/mcp", process.pid, args.answers)
            finally:
                process.terminate()
                process.wait(timeout=15)
    finally:
        fake.stop()
    idle, peak, after = (figures[k] / 1024 for k in ("idle", "peak", "after"))
    worst = max(figures["pings"], default=0.0)
    asked = "SELECT 1 (baseline)" if args.baseline else "a 50 x 2,000 x 4,500-character SELECT"
    print(
        f"{args.answers} answers at once to {asked} over streamable HTTP "
        f"in {figures['seconds']:.1f} s; answer sizes (text + structured JSON): "
        f"{', '.join(f'{s / 1024:.0f} KiB' for s in figures['sizes'])}"
    )
    source = "VmHWM" if figures["peak_from_hwm"] else "sampled VmRSS"
    print(f"server RSS idle:     {idle:7.1f} MiB")
    print(
        f"server RSS peak:     {peak:7.1f} MiB  (+{peak - idle:.1f}; {source}; goal <= +300: "
        f"{'met' if peak - idle <= 300 else 'NOT met'})"
    )
    print(
        f"server RSS 2 s after: {after:6.1f} MiB  (+{after - idle:.1f}; goal <= +100: "
        f"{'met' if after - idle <= 100 else 'NOT met'})"
    )
    median = statistics.median(figures["pings"]) if figures["pings"] else 0.0
    print(
        f"pings meanwhile: {len(figures['pings'])}, median {median * 1000:.0f} ms, worst "
        f"{worst * 1000:.0f} ms (goal < 1000 ms: "
        f"{'met' if worst < 1.0 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
