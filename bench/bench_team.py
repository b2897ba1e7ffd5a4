"""Load on a shared HTTP server: 16 clients x 10 questions, each client with its own token.

    python bench/bench_team.py [--clients 16] [--questions 10] [--turn 0.1]

Issue 15 asks for a bounded load test: at most a few hundred requests, loopback only, stopping
by itself, against a fake model at 0.1 s per turn; nothing lost (every question answered or
refused with a clear error) and memory flat. The server runs as `sqale-mcp --transport
streamable-http` on 127.0.0.1 with one [tokens.clientN] per client (each with the default
quotas), 16 runtime slots and 16 questions at once. Its resident memory (VmRSS) is sampled
from /proc after every round of questions; "flat" means the last rounds are within a few MB of
the first. Prints the figures; exits 1 if a question was lost or memory grew past --max-growth-mb.
"""

from __future__ import annotations

import argparse
import os
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
from tests.support.mcp import BOOK_GOLD, DelayedPolicy, free_port, wait_for_port  # noqa: E402
from tests.support.policies import OraclePolicy  # noqa: E402

TOOL = "answer_sql_question"


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def client_run(url: str, token: str, questions: list[str], rounds_done: list[int],
                     outcomes: list[tuple[str, float]]) -> None:
    """One client: one MCP session, its questions one after another."""
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
                Client(streamable_http_client(url, http_client=http)) as client):
        for index, question in enumerate(questions):
            started = time.perf_counter()
            result = await client.call_tool(TOOL, {"question": question})
            elapsed = time.perf_counter() - started
            if result.is_error:
                outcomes.append((f"error: {result.content[0].text[:80]}", elapsed))
            elif result.structured_content["sql"] == BOOK_GOLD[question]:
                outcomes.append(("answered", elapsed))
            else:
                outcomes.append(("wrong", elapsed))
            rounds_done[index] += 1


async def main_async(args: argparse.Namespace) -> int:
    """Start the fake model and the server, run the clients, print the figures."""
    fake = FakeServer(DelayedPolicy(OraclePolicy(BOOK_GOLD), args.turn)).start()
    tokens = {f"client{i}": f"secret-{i}-{os.urandom(8).hex()}" for i in range(args.clients)}
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "team.toml"
        config.write_text("".join(f'[tokens.{name}]\nenv = "SQALE_TOKEN_{name.upper()}"\n'
                                  for name in tokens))
        env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS")}
        env.update({f"SQALE_TOKEN_{name.upper()}": secret for name, secret in tokens.items()})
        env["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        port = free_port()
        log = Path(tmp) / "episodes.jsonl"
        server = subprocess.Popen(
            [sys.executable, "-m", "mcp_server", "--config", str(config), "--demo", "--ollama-host",
             fake.url, "--transport", "streamable-http", "--port", str(port), "--runtime-slots",
             str(args.clients), "--max-concurrent", str(args.clients), "--episode-log", str(log),
             "--log-level", "WARNING"],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            wait_for_port(port, server)
            url = f"http://127.0.0.1:{port}/mcp"
            questions = list(BOOK_GOLD)
            rss = [rss_mb(server.pid)]
            rounds_done = [0] * args.questions
            outcomes: list[tuple[str, float]] = []
            started = time.perf_counter()

            async def sample_memory() -> None:
                seen = 0
                while seen < args.questions:
                    if rounds_done[seen] == args.clients:
                        rss.append(rss_mb(server.pid))
                        seen += 1
                    else:
                        await anyio.sleep(0.05)

            with anyio.fail_after(args.time_limit):
                async with anyio.create_task_group() as group:
                    group.start_soon(sample_memory)
                    for i, token in enumerate(tokens.values()):
                        mine = [questions[(i + k) % len(questions)] for k in range(args.questions)]
                        group.start_soon(client_run, url, token, mine, rounds_done, outcomes)
            wall = time.perf_counter() - started
            log_lines = len(log.read_text().splitlines())
        finally:
            server.terminate()
            code = server.wait(timeout=60)
            fake.stop()
    expected = args.clients * args.questions
    counts: dict[str, int] = {}
    for outcome, _ in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    latencies = sorted(elapsed for _, elapsed in outcomes)
    growth = max(rss[2:] or rss) - rss[1] if len(rss) > 1 else 0.0
    print(f"clients {args.clients} x questions {args.questions} = {expected}; fake model "
          f"{args.turn:g} s per turn (3 turns a question)")
    print(f"wall {wall:.1f} s; throughput {len(outcomes) / wall:.1f} questions/s")
    print(f"outcomes: {counts}; lost: {expected - len(outcomes)}; episode-log lines: {log_lines}")
    print(f"latency s: median {statistics.median(latencies):.2f}, p95 "
          f"{latencies[int(0.95 * (len(latencies) - 1))]:.2f}, max {latencies[-1]:.2f}")
    print("server RSS MB: start " + f"{rss[0]:.1f}; after each round: "
          + ", ".join(f"{m:.1f}" for m in rss[1:]))
    print(f"RSS growth after round 1: {growth:+.1f} MB (limit {args.max_growth_mb:g}); "
          f"server exit code on SIGTERM: {code}")
    ok = counts.get("answered", 0) + sum(v for k, v in counts.items() if k.startswith("error")) == expected
    return 0 if ok and log_lines == expected and growth <= args.max_growth_mb and code == 0 else 1


def main() -> int:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--turn", type=float, default=0.1, help="fake model seconds per turn")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--max-growth-mb", type=float, default=10.0)
    args: Any = parser.parse_args()
    return anyio.run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
