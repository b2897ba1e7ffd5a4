"""The MCP server's own costs: cold start, concurrency against a slow fake model, idle memory.

    python bench/bench_mcp.py [--turn-delay 0.2] [--starts 3]

Issue 4 asks for: the time from spawning `python -m mcp_server` until its first
`initialize` reply; 8 questions at once with --max-concurrent 8 against a fake Ollama that
takes 0.2 s per model turn, against the same 8 one after another (goal: concurrent <= 1/4
of serial); the resident memory of an idle server. The fake Ollama (tests/support/fake_runtime.py)
runs in this process; the server runs as a real stdio subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client, StdioServerParameters  # noqa: E402

from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.mcp import BOOK_GOLD, DelayedPolicy  # noqa: E402
from tests.support.policies import OraclePolicy  # noqa: E402

TOOL = "answer_sql_question"
QUESTIONS = {
    **BOOK_GOLD,
    "How many customers are there?": "SELECT count(*) FROM customers",
    "Which orders are pending?": "SELECT order_id FROM orders WHERE status = 'pending' ORDER BY order_id",
    "What is the most expensive book?": "SELECT title FROM books ORDER BY price DESC LIMIT 1",
    "How many books has each author written?": (
        "SELECT a.name, count(*) FROM authors a JOIN books b USING (author_id) GROUP BY a.name ORDER BY a.name"
    ),
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}


def server_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS")}
    env["XDG_CACHE_HOME"] = str(cache)
    return env


def cold_start(ollama_url: str, cache: Path) -> float:
    """Seconds from spawning the server until its initialize reply arrives on stdout."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--demo", "--ollama-host", ollama_url, "--log-level", "WARNING"],
        cwd=ROOT,
        env=server_env(cache),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    process.stdin.flush()
    reply = json.loads(process.stdout.readline())
    seconds = time.perf_counter() - started
    assert reply["result"]["serverInfo"]["name"] == "sqale-mcp", reply
    process.stdin.close()
    process.wait(timeout=15)
    return seconds


def rss_kb(pid: int) -> int:
    """Resident memory of one process in KiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def family_rss_kb(pid: int) -> tuple[int, int]:
    """(RSS of the process, RSS of the process plus its children) in KiB."""
    # Children started from any thread (the SQLite workers start from worker threads).
    children = {
        c for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()
    }
    own = rss_kb(pid)
    return own, own + sum(rss_kb(int(c)) for c in children)


def child_server_pid() -> int:
    """The pid of the `-m mcp_server` process this process spawned (through the stdio client)."""
    me = os.getpid()
    for task in Path(f"/proc/{me}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"mcp_server" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
    raise RuntimeError("the server subprocess was not found among this process's children")


async def ask_all(client: Client, questions: list[str], concurrent: bool) -> float:
    """Seconds to answer every question, all at once or one after another."""

    async def one(question: str) -> None:
        result = await client.call_tool(TOOL, {"question": question})
        assert result.structured_content is not None and result.structured_content["sql"] == QUESTIONS[question]

    started = time.perf_counter()
    if concurrent:
        async with anyio.create_task_group() as tg:
            for question in questions:
                tg.start_soon(one, question)
    else:
        for question in questions:
            await one(question)
    return time.perf_counter() - started


async def concurrency_and_memory(ollama_url: str, cache: Path) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        cwd=ROOT,
        env=server_env(cache),
        args=[
            "-m",
            "mcp_server",
            "--demo",
            "--ollama-host",
            ollama_url,
            "--max-concurrent",
            "8",
            "--runtime-slots",
            "8",
            "--log-level",
            "WARNING",
        ],
    )
    async with Client(params) as client:
        await client.list_tools()
        pid = child_server_pid()
        idle = family_rss_kb(pid)
        questions = list(QUESTIONS)
        serial = await ask_all(client, questions, concurrent=False)
        concurrent = await ask_all(client, questions, concurrent=True)
        after = family_rss_kb(pid)
    return {"serial": serial, "concurrent": concurrent, "idle": idle, "after": after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turn-delay", type=float, default=0.2, help="seconds per fake model turn")
    parser.add_argument("--starts", type=int, default=3, help="cold starts to time (median shown)")
    args = parser.parse_args()
    fake = FakeServer(DelayedPolicy(OraclePolicy(QUESTIONS), args.turn_delay)).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp)
            starts = [cold_start(fake.url, cache) for _ in range(args.starts)]
            figures = anyio.run(concurrency_and_memory, fake.url, cache)
    finally:
        fake.stop()
    n = len(QUESTIONS)
    ratio = figures["concurrent"] / figures["serial"]
    print(
        f"cold start to initialize reply: median {statistics.median(starts):.2f} s "
        f"(runs: {', '.join(f'{s:.2f}' for s in starts)})"
    )
    print(f"{n} questions, {args.turn_delay:g} s per model turn (3 turns each):")
    print(f"  one after another:          {figures['serial']:.2f} s")
    print(
        f"  at once, --max-concurrent 8: {figures['concurrent']:.2f} s  "
        f"(ratio {ratio:.3f}; goal <= 0.25: {'met' if ratio <= 0.25 else 'NOT met'})"
    )
    print(
        f"idle server RSS: {figures['idle'][0] / 1024:.1f} MiB "
        f"(with SQLite workers: {figures['idle'][1] / 1024:.1f} MiB)"
    )
    print(
        f"after the questions: {figures['after'][0] / 1024:.1f} MiB "
        f"(with its SQLite workers: {figures['after'][1] / 1024:.1f} MiB)"
    )


if __name__ == "__main__":
    main()
