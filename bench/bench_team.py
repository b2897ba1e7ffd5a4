"""Load on a shared HTTP server: 16 clients x 10 questions, each client with its own token;
and what one token cannot do to the others (issue 22): a flood of sessions, samples at once.

    python bench/bench_team.py [--clients 16] [--questions 10] [--turn 0.1]
    python bench/bench_team.py --mode sessions [--sessions 1000]
    python bench/bench_team.py --mode samples [--turn 0.1]

Issue 15 asks for a bounded load test: at most a few hundred requests, loopback only, stopping
by itself, against a fake model at 0.1 s per turn; nothing lost (every question answered or
refused with a clear error) and memory flat. The server runs as `sqale-mcp --transport
streamable-http` on 127.0.0.1 with one [tokens.clientN] per client (each with the default
quotas), 16 runtime slots and 16 questions at once. Its resident memory (VmRSS) is sampled
from /proc after every round of questions; "flat" means the last rounds are within a few MB of
the first. Prints the figures; exits 1 if a question was lost or memory grew past --max-growth-mb.

--mode sessions: token `flood` opens --sessions sessions (initialize, never ended; 32 at a time),
then token `other` opens one, lists the tools and asks a question. Prints what the flood got
(opened, refused), the server's memory before and after, and how long `other` took; exits 1
unless `other` was served in under a second. --server-repo runs the server from another
checkout (say main's) for a before/after comparison.

--mode samples: token `limited` (max-concurrent = 1) asks one question with samples=8 on a server
with 8 workers and 8 runtime slots, while token `other` asks a plain question. The fake model
counts the limited token's requests in flight (one per running episode). Exits 1 if it ever had
more than one.
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

from tests.support.fake_runtime import FakeServer, RecordedRequest  # noqa: E402
from tests.support.mcp import BOOK_GOLD, DelayedPolicy, free_port, wait_for_port  # noqa: E402
from tests.support.policies import OraclePolicy  # noqa: E402

TOOL = "answer_sql_question"
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
JSON_AND_SSE = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def client_run(
    url: str, token: str, questions: list[str], rounds_done: list[int], outcomes: list[tuple[str, float]]
) -> None:
    """One client: one MCP session, its questions one after another."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
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


def start_server(
    folder: Path,
    tokens: dict[str, str],
    fake: FakeServer,
    flags: list[str],
    repo: Path = ROOT,
    token_lines: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """`sqale-mcp --transport streamable-http` on 127.0.0.1 with one [tokens.NAME] per token."""
    config = folder / "team.toml"
    config.write_text(
        "".join(
            f'[tokens.{name}]\nenv = "SQALE_TOKEN_{name.upper()}"\n{(token_lines or {}).get(name, "")}'
            for name in tokens
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS")}
    env.update({f"SQALE_TOKEN_{name.upper()}": secret for name, secret in tokens.items()})
    env["XDG_CACHE_HOME"] = str(folder / "cache")
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mcp_server",
            "--config",
            str(config),
            "--demo",
            "--ollama-host",
            fake.url,
            "--transport",
            "streamable-http",
            "--port",
            str(port),
            *flags,
        ],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    wait_for_port(port, server)
    return server, port


async def main_async(args: argparse.Namespace) -> int:
    """Start the fake model and the server, run the clients, print the figures."""
    fake = FakeServer(DelayedPolicy(OraclePolicy(BOOK_GOLD), args.turn)).start()
    tokens = {f"client{i}": f"secret-{i}-{os.urandom(8).hex()}" for i in range(args.clients)}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "episodes.jsonl"
        server, port = start_server(
            Path(tmp),
            tokens,
            fake,
            [
                "--runtime-slots",
                str(args.clients),
                "--max-concurrent",
                str(args.clients),
                "--episode-log",
                str(log),
                "--log-level",
                "WARNING",
            ],
        )
        try:
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
    print(
        f"clients {args.clients} x questions {args.questions} = {expected}; fake model "
        f"{args.turn:g} s per turn (3 turns a question)"
    )
    print(f"wall {wall:.1f} s; throughput {len(outcomes) / wall:.1f} questions/s")
    print(f"outcomes: {counts}; lost: {expected - len(outcomes)}; episode-log lines: {log_lines}")
    print(
        f"latency s: median {statistics.median(latencies):.2f}, p95 "
        f"{latencies[int(0.95 * (len(latencies) - 1))]:.2f}, max {latencies[-1]:.2f}"
    )
    print(
        "server RSS MB: start " + f"{rss[0]:.1f}; after each round: " + ", ".join(f"{m:.1f}" for m in rss[1:])
    )
    print(
        f"RSS growth after round 1: {growth:+.1f} MB (limit {args.max_growth_mb:g}); "
        f"server exit code on SIGTERM: {code}"
    )
    ok = counts.get("answered", 0) + sum(v for k, v in counts.items() if k.startswith("error")) == expected
    return 0 if ok and log_lines == expected and growth <= args.max_growth_mb and code == 0 else 1


async def sessions_async(args: argparse.Namespace) -> int:
    """One token opens --sessions sessions; how long another token then takes to be served."""
    fake = FakeServer(DelayedPolicy(OraclePolicy(BOOK_GOLD), args.turn)).start()
    tokens = {name: f"{name}-{os.urandom(8).hex()}" for name in ("flood", "other")}
    with tempfile.TemporaryDirectory() as tmp:
        server, port = start_server(Path(tmp), tokens, fake, ["--log-level", "WARNING"], args.server_repo)
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            before = await served_in(url, tokens["other"])  # also warms the server up
            rss_before = rss_mb(server.pid)
            codes: dict[int, int] = {}
            limit = anyio.Semaphore(32)
            started = time.perf_counter()
            async with httpx2.AsyncClient(
                timeout=60, headers={**JSON_AND_SSE, "Authorization": f"Bearer {tokens['flood']}"}
            ) as http:

                async def one() -> None:
                    async with limit:
                        response = await http.post(url, json=INITIALIZE)
                    codes[response.status_code] = codes.get(response.status_code, 0) + 1

                async with anyio.create_task_group() as group:
                    for _ in range(args.sessions):
                        group.start_soon(one)
            flood_seconds = time.perf_counter() - started
            rss_after = rss_mb(server.pid)
            after = await served_in(url, tokens["other"])
        finally:
            server.terminate()
            code = server.wait(timeout=60)
            fake.stop()
    print(
        f"token 'flood' asked for {args.sessions:,} sessions in {flood_seconds:.1f} s: HTTP status "
        f"counts {dict(sorted(codes.items()))}"
    )
    print(f"server RSS MB: {rss_before:.1f} before, {rss_after:.1f} after the flood")
    for when, (listed, served, answered) in (("before", before), ("after", after)):
        print(
            f"token 'other' {when} the flood: session opened and tools listed in {listed:.2f} s; "
            f"question {'answered' if answered else 'NOT answered'} in {served:.2f} s in all"
        )
    print(f"(fake model {args.turn:g} s a turn, 3 turns); server exit code on SIGTERM: {code}")
    return 0 if after[2] and after[1] < 1.0 else 1


async def served_in(url: str, token: str) -> tuple[float, float, bool]:
    """A new session of `token`: seconds to list the tools, to be answered in all, and whether it was."""
    started = time.perf_counter()
    try:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await client.list_tools()
            listed = time.perf_counter() - started
            result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    except Exception as exc:  # a refused session: the figure is the failure
        print(f"token could not be served: {exc!r}")
        return time.perf_counter() - started, time.perf_counter() - started, False
    answered = not result.is_error and result.structured_content["rows"] == [[16]]
    return listed, time.perf_counter() - started, answered


class CountingFake(FakeServer):
    """A fake runtime that counts the requests in flight whose prompt holds `phrase`."""

    def __init__(self, policy: Any, phrase: str) -> None:
        super().__init__(policy)
        self.phrase = phrase
        self.running = self.peak = 0

    async def run_delay(self, request: Any, recorded: RecordedRequest, delay: float) -> bool:
        """The scripted delay, counted while it runs."""
        mine = isinstance(recorded.body, dict) and self.phrase in str(recorded.body.get("prompt", ""))
        if mine:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            return await super().run_delay(request, recorded, delay)
        finally:
            if mine:
                self.running -= 1


async def samples_async(args: argparse.Namespace) -> int:
    """A token at one episode at a time asks with samples=8; another token asks meanwhile."""
    limited_question, other_question = "How many books are there?", "Which authors come from Nigeria?"
    fake = CountingFake(DelayedPolicy(OraclePolicy(BOOK_GOLD), args.turn), limited_question)
    fake.start()
    tokens = {name: f"{name}-{os.urandom(8).hex()}" for name in ("limited", "other")}
    results: dict[str, tuple[Any, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server, port = start_server(
            Path(tmp),
            tokens,
            fake,
            ["--max-concurrent", "8", "--runtime-slots", "8", "--max-samples", "8", "--log-level", "WARNING"],
            args.server_repo,
            {"limited": "max-concurrent = 1\n"},
        )
        url = f"http://127.0.0.1:{port}/mcp"

        async def ask(token: str, arguments: dict[str, Any], delay: float = 0.0) -> None:
            await anyio.sleep(delay)
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {tokens[token]}"}, timeout=120) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                started = time.perf_counter()
                result = await client.call_tool(TOOL, arguments)
                results[token] = (result, time.perf_counter() - started)

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(ask, "limited", {"question": limited_question, "samples": 8})
                group.start_soon(ask, "other", {"question": other_question}, 3 * args.turn)
        finally:
            server.terminate()
            server.wait(timeout=60)
            fake.stop()
    limited, limited_seconds = results["limited"]
    other, other_seconds = results["other"]
    finished = limited.structured_content.get("samples_finished") if limited.structured_content else None
    print(
        f"token 'limited' (max-concurrent 1), samples=8: {limited_seconds:.2f} s, samples finished "
        f"{finished}, most episodes at once: {fake.peak}"
    )
    print(
        f"token 'other', one sample meanwhile: {other_seconds:.2f} s, queued "
        f"{other.structured_content['queued_seconds']:.2f} s (fake model {args.turn:g} s a turn)"
    )
    return 0 if fake.peak <= 1 else 1


def main() -> int:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("load", "sessions", "samples"), default="load")
    parser.add_argument("--sessions", type=int, default=1_000, help="sessions token 'flood' asks for")
    parser.add_argument(
        "--server-repo",
        type=Path,
        default=ROOT,
        help="run the server from this checkout (for a before/after comparison)",
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--turn", type=float, default=0.1, help="fake model seconds per turn")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--max-growth-mb", type=float, default=10.0)
    args: Any = parser.parse_args()
    run = {"load": main_async, "sessions": sessions_async, "samples": samples_async}[args.mode]
    return anyio.run(run, args)


if __name__ == "__main__":
    sys.exit(main())
