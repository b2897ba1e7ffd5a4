"""The server's own cost (issues 37, 44): a round, bursts, a verified hit, reads, streams, start-up.

    python bench/bench_server_cost.py [--runs 3] [--repeats 2] [--hits 300] [--instructions N] [--before REF]
                                      [--parts cpu,burst,hit,reads,stream,reuse,startup]
                                      [--dbhub DIR] [--node PATH]

Figures from one run, each a median of repeated runs, every server a real `python -m
mcp_server` over stdio; the fake model runtime (tests/support/fake_runtime.py) runs in this
process, so the server's process tree holds the server and its SQLite workers only:

1. cpu: server CPU per model round. 20 questions on the demo database, four rounds each
   (list_tables, describe_table, run_query, submit_sql) against a fake Ollama that answers at
   once, one after another, in batches of the 20; the CPU of the server's threads and of its
   SQLite workers from /proc (each task's schedstat, to the nanosecond), over the rounds the
   answers report, after one untimed question and one untimed batch. The figure is the least
   batch; its breakdown: the ollama client (one completion of a round-sized prompt through our
   Ollama backend, timed apart in a process of its own), the SQLite workers, and the rest (our
   loop and the MCP server). Beside it the same episodes run in this process (run_episode with
   an in-process policy backend: no MCP, no HTTP). Goal: <= 4 ms per round over stdio.
2. burst: 8 questions at once against the same 8 one at a time (0.2 s a model turn,
   --max-concurrent 8 --runtime-slots 8), blocks alternated S A A S; start-up (spawn to the
   initialize reply, then a first untimed burst that starts the SQLite workers) is reported
   apart. Goal: ratio <= 0.25. Then 32 at once with 32 slots on one server, against 32 times
   that server's own serial time per question (8 asked one at a time): reported.
3. hit: a verified-library answer on Chinook over MCP stdio against DBHub's `execute_sql`
   (@bytebase/dbhub, read-only, max_rows 50 like our --max-rows) of the same SQL, spoken to with
   raw JSON-RPC lines (bench/hit_support.py: no SDK client shares the cores), --hits rounds each
   calling every server once in a new order, after a warm-up; each process tree's CPU and context
   switches per call. Beside them the floors: our server whose tool answers with a prebuilt
   response (no SQL, no building, no audit), the SDK's MCPServer with a no-op tool (over the SDK's
   stdio transport, and over ours on the event loop), the same tool over ours answering with our
   verified answer's response built once at start (the SDK's tool layer with a result of our size
   and schema), the same MCPServer running the SQL as the server runs an owner's statement (agent's
   Database, owner_sql: in process, the guard, hide rules, deadline, reads and byte budget) with its
   rows as JSON; the SDK's low-level server over ours running the SQL in process with bare sqlite3
   or as an owner's statement, its rows as JSON; and the same server answering with our structured
   answer, built and fitted as ours is, its SQL run with bare sqlite3 (read-only under an
   authorizer and a progress handler), as an owner's statement, or through our SQLite worker.
   Then what stands between: the hit built up floor by floor (HIT_STEPS), and the least that keeps
   what issue 44 says must stay (the statement as an owner's is run, our answer built per call).
   With --before REF, that commit's server too; with
   --instructions N, each server under callgrind for N calls, its instructions per call by process
   and thread. Goal: ours <= 1.0x DBHub.
   DBHub needs `npm install --prefix DIR @bytebase/dbhub` (DIR defaults to $TMPDIR/dbhub) and
   the Node its package asks for (22.5+: its SQLite is node:sqlite; .ci/node's node@22, else the
   one on PATH); without them this part says why and goes on.
4. reads: the guarded worker's read completion (tables_read from the statement's EXPLAIN) on a
   nine-table join on Chinook: Database.query with reads off and on, alternated, each query's
   text new (a comment) so that nothing remembered of a statement serves it, then on for the
   same text again; bare sqlite3 running the statement and its EXPLAIN. Goal: on - off <= 1 ms.

5. stream: the OpenAI-compatible backend (vLLM, llama-server) streams a completion one event a
   token: CPU of this process per token, from completions of ~17 and ~413 tokens alternated
   (a fake engine in its own process), by difference. No goal: a team server's engine writes
   hundreds of tokens a round, so this, not part 1's Ollama figure, is its CPU per round.

6. reuse: 160 completions one after another through the OpenAI-compatible backend against a fake
   engine over real HTTP that records each request's peer. Goal: one connection.

7. startup: this checkout installed (pip install --target), its console script spawned until its
   first reply to initialize (the demo; Chinook with a verified library) and to server/discover,
   against the SDK's minimal server asked the same, interleaved (bench_startup.py's measures).
   Goal: <= 1.2x each.

Parts 3 and 4 need ../shared/data (Chinook) and say so when it is absent.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import cycle, islice
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from hit_support import (  # noqa: E402 - beside this file
    VALGRIND,
    RawServer,
    callgrind_control,
    callgrind_descendants,
    context_switches,
    dumped_totals,
    hit_sides,
    process_name,
    under_callgrind,
)
from server_cost_support import (  # noqa: E402 - beside this file
    CHINOOK,
    DEMO_GOLD,
    HIT_QUESTION,
    HIT_SQL,
    JOIN_SQL,
    ROUND_PROMPT,
    STREAM_PROMPT,
    FourRounds,
    ask,
    ask_all,
    child_pid,
    dbhub_argv,
    dbhub_missing,
    ms,
    ollama_client_cpu,
    own_cpu,
    split_cpu,
    sqale_mcp,
    stream_token_cpu,
    timed_sync,
    tree_cpu,
    verdict,
)
from trees import extract_tree  # noqa: E402 - beside this file

from agent.demo import ensure_demo_database  # noqa: E402
from agent.loop import run_episode  # noqa: E402
from agent.sqlite import Database, WorkerLimits, WorkerPool  # noqa: E402
from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.mcp import DelayedPolicy  # noqa: E402
from tests.support.policies import PolicyBackend, ScriptedReply, assistant_reply, tool_call  # noqa: E402

# ---- 1. CPU per round ---------------------------------------------------------------------


async def cpu_over_stdio(url: str, runs: int, tmp: Path) -> tuple[list[float], list[tuple[float, float]]]:
    """(start-up CPU seconds: to the initialize reply, then the first question; per batch of the 20
    questions, the first one first: CPU ms per round of the server process and of its SQLite workers)."""
    per_round = []
    async with sqale_mcp(["--demo", "--ollama-host", url], tmp) as client:
        pid = child_pid(b"mcp_server")
        start_up = [tree_cpu(pid)]
        await ask(client, next(iter(DEMO_GOLD)))  # the worker starts, the schema is read
        start_up.append(tree_cpu(pid) - start_up[0])
        for _ in range(runs + 1):
            before = split_cpu(pid)
            _, answers = await ask_all(client, list(DEMO_GOLD), at_once=False)
            after, rounds = split_cpu(pid), sum(a["rounds"] for a in answers)
            per_round.append((1000 * (after[0] - before[0]) / rounds, 1000 * (after[1] - before[1]) / rounds))
    return start_up, per_round


async def cpu_in_process(demo: Path, runs: int) -> tuple[list[float], list[float]]:
    """(wall minus model, CPU of this process and its workers) ms per round, per run."""
    walls, cpus = [], []
    backend = PolicyBackend(FourRounds(DEMO_GOLD), record=False)
    with Database.unruled(demo) as db:
        await run_episode(next(iter(DEMO_GOLD)), db, backend)  # warm: worker, schema
        for _ in range(runs):
            rounds, harness = 0, 0.0
            before = tree_cpu(os.getpid(), reaped=False)
            for question in DEMO_GOLD:
                started = time.perf_counter()
                result = await run_episode(question, db, backend)
                harness += time.perf_counter() - started - result.model_seconds
                rounds += len(result.rounds)
            cpus.append(1000 * (tree_cpu(os.getpid(), reaped=False) - before) / rounds)
            walls.append(1000 * harness / rounds)
    return walls, cpus


# ---- 2. a burst of questions --------------------------------------------------------------


@dataclass(frozen=True)
class Burst:
    spawn: float  # spawn to the initialize reply
    first: float  # the first burst, which starts the workers
    serial: list[float]
    at_once: list[float]
    alone: list[float]  # episode seconds as answered one at a time
    together: list[float]  # episode seconds as answered at once
    queued: list[float]  # seconds the questions asked at once waited for a slot
    cpu_per_round: float  # server tree CPU ms per round over the timed blocks


async def burst(url: str, n: int, repeats: int, serial_n: int, tmp: Path) -> Burst:
    """Blocks S A A S ... of `n` questions at once and `serial_n` one after another on one server."""
    questions = list(islice(cycle(DEMO_GOLD), n))
    started = time.perf_counter()
    # A token (stdio's too) runs 16 episodes at once by default, the rest waiting, and holds at most
    # 16 questions being answered, refusing more: a burst of more asks for room for all of them.
    args = [
        "--demo",
        "--ollama-host",
        url,
        "--max-concurrent",
        str(n),
        "--runtime-slots",
        str(n),
        "--token-max-concurrent",
        str(max(n, 16)),
        "--token-max-working",
        str(max(n, 16)),
    ]
    async with sqale_mcp(args, tmp) as client:
        spawn = time.perf_counter() - started
        first, _ = await ask_all(client, questions, at_once=True)
        pid = child_pid(b"mcp_server")
        cpu, rounds = tree_cpu(pid), 0
        serial, at_once, alone, together, queued = [], [], [], [], []
        for i in range(repeats):
            for mode in ("serial", "at once") if i % 2 == 0 else ("at once", "serial"):
                if mode == "serial":
                    wall, answers = await ask_all(client, questions[:serial_n], at_once=False)
                    serial.append(wall / serial_n)
                    alone += [a["seconds"] for a in answers]
                else:
                    wall, answers = await ask_all(client, questions, at_once=True)
                    at_once.append(wall)
                    together += [a["seconds"] for a in answers]
                    queued += [a["queued_seconds"] for a in answers]
                rounds += sum(a["rounds"] for a in answers)
        cpu = 1000 * (tree_cpu(pid) - cpu) / rounds
    return Burst(spawn, first, serial, at_once, alone, together, queued, cpu)


def print_burst(label: str, b: Burst, n: int) -> float:
    serial = statistics.median(b.serial) * n
    ratio = statistics.median(b.at_once) / serial
    print(
        f"  {label}: start-up apart: spawn to initialize {b.spawn:.2f} s, first burst (workers "
        f"start) {b.first:.2f} s"
    )
    print(
        f"    one at a time {serial:.2f} s for {n} (per question: "
        f"{', '.join(f'{s:.2f}' for s in b.serial)} s); at once {statistics.median(b.at_once):.2f} s "
        f"(runs {', '.join(f'{s:.2f}' for s in b.at_once)})"
    )
    print(
        f"    episode seconds: alone median {statistics.median(b.alone):.2f}, at once median "
        f"{statistics.median(b.together):.2f} (longest {max(b.together):.2f}, longest wait for a slot "
        f"{max(b.queued):.2f}); server CPU {b.cpu_per_round:.1f} ms per round"
    )
    return ratio


# ---- 3. a verified hit against DBHub ------------------------------------------------------


def verified_hits(
    url: str, hits: int, tmp: Path, dbhub: list[str] | None, before: Path | None
) -> dict[str, Any]:
    """Per server: wall seconds of each call, process-tree CPU and context switches per call, over
    `hits` rounds, each round calling every server once in a new order, after a warm-up."""
    sides = hit_sides(
        python=sys.executable,
        root=ROOT,
        tmp=tmp,
        chinook=CHINOOK,
        question=HIT_QUESTION,
        sql=HIT_SQL,
        ollama_url=url,
        dbhub=dbhub,
        before=before,
    )
    servers = {side.name: RawServer(side.argv, side.env, side.cwd, tmp / "hit-stderr.txt") for side in sides}
    calls = {side.name: side.call for side in sides}
    times: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for server in servers.values():
            server.start()
        for name, server in servers.items():  # warm-up: workers started, caches filled
            for _ in range(10):
                calls[name](server)
        cpu = {name: tree_cpu(s.pid) for name, s in servers.items()}
        switches = {name: context_switches(s.pid) for name, s in servers.items()}
        order, shuffle = list(servers), random.Random(44)
        for _ in range(hits):
            shuffle.shuffle(order)
            for name in order:
                started = time.perf_counter()
                calls[name](servers[name])
                times[name].append(time.perf_counter() - started)
        cpu = {name: (tree_cpu(s.pid) - cpu[name]) / hits for name, s in servers.items()}
        switches = {name: (context_switches(s.pid) - switches[name]) / hits for name, s in servers.items()}
    finally:
        for server in servers.values():
            server.close()
    return {"times": times, "cpu": cpu, "switches": switches}


def hit_instructions(
    url: str, calls: int, tmp: Path, dbhub: list[str] | None, before: Path | None
) -> dict[str, dict[str, float]]:
    """Instructions per call of each server under callgrind, per process and thread of its tree."""
    out = tmp / "callgrind"
    out.mkdir(exist_ok=True)
    sides = hit_sides(
        python=sys.executable,
        root=ROOT,
        tmp=tmp,
        chinook=CHINOOK,
        question=HIT_QUESTION,
        sql=HIT_SQL,
        ollama_url=url,
        dbhub=dbhub,
        before=before,
    )
    found: dict[str, dict[str, float]] = {}
    for number, side in enumerate(sides):
        tag = f"side{number}"
        server = RawServer(
            under_callgrind(side.argv, out, tag), side.env, side.cwd, tmp / "callgrind-stderr.txt"
        )
        try:
            server.start()
            for _ in range(5):
                side.call(server)
            pids = callgrind_descendants(server.pid)
            names = {pid: process_name(pid) for pid in pids}
            callgrind_control("-z", pids)
            for _ in range(calls):
                side.call(server)
            callgrind_control("-d", pids)
            per: dict[str, float] = {}
            for pid in pids:
                for thread, total in dumped_totals(out, tag, pid).items():
                    per[f"{'server' if pid == server.pid else names[pid]} {thread}"] = total / calls
            found[side.name] = per
        finally:
            server.close()
    return found


# ---- 4. the guarded worker's read completion ----------------------------------------------


def read_completion(repeat: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Wall seconds of Database.query of JOIN_SQL with reads off and on (alternated; the text made
    new each time by a comment, so nothing the worker remembers of a statement serves it), on
    again for the very same text, and bare sqlite3; and the CPU seconds per query (this process
    and its worker) of each."""
    engine = WorkerPool(WorkerLimits())
    db = Database.unruled(CHINOOK, engine)
    modes = {"reads off": False, "reads on": True, "same SQL again": True}
    samples: dict[str, list[float]] = {name: [] for name in modes}
    cpu = dict.fromkeys(modes, 0.0)
    try:
        for i in range(repeat + 1):
            for name, reads in modes.items():
                sql = JOIN_SQL if name == "same SQL again" else f"{JOIN_SQL} -- {name} {i}"
                started, used = time.perf_counter(), own_cpu()
                result = db.query(sql, max_rows=50, reads=reads)
                samples[name].append(time.perf_counter() - started)
                if i:  # the first of each is a warm-up
                    cpu[name] += (own_cpu() - used) / repeat
                assert result.ok, result.error
        on_tables = db.query(JOIN_SQL, max_rows=50).tables_read
        assert len(on_tables) == 9, on_tables
    finally:
        engine.close()
    bare = sqlite3.connect(CHINOOK.as_uri() + "?mode=ro", uri=True)
    for name, sql in (("bare sqlite3", JOIN_SQL), ("bare EXPLAIN", "EXPLAIN " + JOIN_SQL)):
        used = own_cpu()
        samples[name] = [timed_sync(lambda sql=sql: bare.execute(sql).fetchall()) for _ in range(repeat + 1)]
        cpu[name] = (own_cpu() - used) / (repeat + 1)
    bare.close()
    return {k: v[1:] for k, v in samples.items()}, cpu


def report_cpu(url: str, runs: int, tmp: Path) -> None:
    start_up, per_run = anyio.run(cpu_over_stdio, url, runs, tmp)
    batches = [server + workers for server, workers in per_run[1:]]
    least = min(range(len(batches)), key=batches.__getitem__)
    server, workers = per_run[1:][least]
    client = ollama_client_cpu(url, 40)
    wall, cpu = anyio.run(cpu_in_process, ensure_demo_database(tmp / "demo"), runs)
    print(
        f"1. server CPU per model round ({len(DEMO_GOLD)} questions x 4 rounds, a fake model "
        f"answering at once, the least of {runs} batches after a first one):"
    )
    print(
        f"  start-up apart: {start_up[0]:.2f} s CPU to the initialize reply, {start_up[1]:.2f} s "
        f"for the first question (worker start, schema); first batch {sum(per_run[0]):.2f} ms per round"
    )
    print(
        f"  over stdio, server + SQLite workers: {batches[least]:.2f} ms per round "
        f"(batches {', '.join(f'{v:.2f}' for v in batches)}; {verdict(batches[least], 4)})"
    )
    print(
        f"    of it: the ollama client {client:.2f} ms (one completion of a {len(ROUND_PROMPT):,}-character "
        f"prompt, measured apart), our loop and the MCP server {server - client:.2f} ms, "
        f"the SQLite workers {workers:.2f} ms"
    )
    print(
        f"  in process (run_episode, no MCP, no HTTP): wall minus model {statistics.median(wall):.2f} ms, "
        f"CPU with workers {statistics.median(cpu):.2f} ms per round"
    )


def report_burst(url: str, repeats: int, turn_delay: float, tmp: Path) -> None:
    print(f"2. questions at once, {turn_delay:g} s a model turn, 4 turns each:")
    ratio = print_burst("8 at once, 8 slots", anyio.run(burst, url, 8, repeats, 8, tmp), 8)
    print(f"    ratio at once / one at a time: {ratio:.3f} ({verdict(ratio, 0.25)})")
    ratio = print_burst("32 at once, 32 slots", anyio.run(burst, url, 32, repeats, 8, tmp), 32)
    print(f"    ratio at once / (32 x one at a time): {ratio:.3f} (ideal {1 / 32:.3f})")


def report_hit(
    url: str, hits: int, dbhub_prefix: Path, node: str | None, tmp: Path, instructions: int, before: str | None
) -> None:
    reason = dbhub_missing(dbhub_prefix, node)
    dbhub = None if reason or node is None else dbhub_argv(dbhub_prefix, node, tmp)
    tree = extract_tree(before, tmp / "before") if before else None
    hit = verified_hits(url, hits, tmp, dbhub, tree)
    times = hit["times"]
    peer = "DBHub execute_sql"
    base = statistics.median(times[peer]) if peer in times else None
    print(
        f"3. a verified hit on Chinook over stdio, raw JSON-RPC ({hits} rounds, every server once a round "
        "in a new order; CPU and context switches of each server's process tree per call):"
    )
    for name, values in times.items():
        ratio = f"  {statistics.median(values) / base:4.2f}x DBHub" if base else ""
        print(
            f"  {name:<40} {ms(values)}{ratio}; CPU {1000 * hit['cpu'][name]:.2f} ms, "
            f"{hit['switches'][name]:.1f} context switches"
        )
    if reason or base is None:
        print(f"  DBHub skipped: {reason}")
    else:
        ratio = statistics.median(times["ours (verified hit)"]) / base
        print(f"  ours / DBHub: {ratio:.2f}x ({verdict(ratio, 1.0)})")
        print_hit_steps(times, base)
    if instructions and VALGRIND is None:
        print("  instructions: skipped (no valgrind on PATH)")
    elif instructions:
        print(f"  instructions per call under callgrind ({instructions} calls after 5, by process and thread):")
        for name, per in hit_instructions(url, instructions, tmp, dbhub, tree).items():
            parts = ", ".join(
                f"{part} {value / 1e6:.2f} M" for part, value in sorted(per.items()) if value >= 5e3
            )
            print(f"  {name:<40} {sum(per.values()) / 1e6:.2f} M ({parts})")


# What stands between the SDK's leanest server and ours, floor by floor (names as hit_support's):
# each step keeps all the one before it kept. The third keeps what issue 44 says must stay.
HIT_STEPS = (
    (
        "the SDK's low-level server, bare sqlite3, rows as JSON",
        "floor: low-level, no threads, sqlite3",
    ),
    (
        "+ the statement run as the server runs an owner's",
        "floor: low-level, our guarded statement, rows as JSON",
    ),
    (
        "+ our answer built per call",
        "floor: low-level, our guarded statement in process (as served), our answer",
    ),
    (
        "+ our own path (lookup, bookkeeping, quotas, audit)",
        "ours (verified hit)",
    ),
)


def print_hit_steps(times: dict[str, list[float]], base: float) -> None:
    """The hit's wall time built up from the floors of the same run, and the least of it that keeps
    every guarantee, against DBHub's `base`."""
    print("  what stands between, from the floors of this run (median wall, x DBHub):")
    before = None
    for label, name in HIT_STEPS:
        median = statistics.median(times[name])
        added = "" if before is None else f" ({1000 * (median - before):+.2f} ms)"
        print(f"    {label:<54} {1000 * median:.2f} ms{added}  {median / base:4.2f}x")
        before = median
    least = statistics.median(times[HIT_STEPS[2][1]]) / base
    print(f"  the least that keeps what must stay: {least:.2f}x DBHub")


def report_reads(repeat: int) -> None:
    reads, cpu = read_completion(repeat)
    print(f"4. read completion on a nine-table join (Chinook, {repeat} each):")
    for name, values in reads.items():
        print(f"  {name:<14} {ms(values)}; CPU {1000 * cpu[name]:.2f} ms (with the worker's)")
    added = statistics.median(reads["reads on"]) - statistics.median(reads["reads off"])
    print(
        f"  added by reads: {1000 * added:.2f} ms, CPU {1000 * (cpu['reads on'] - cpu['reads off']):.2f} ms "
        f"({verdict(1000 * added, 1.0)})"
    )


def report_stream(runs: int) -> None:
    per_token, (few, many) = stream_token_cpu(runs, 30)
    print(
        f"5. the OpenAI-compatible backend's CPU per streamed token (completions of {few} and "
        f"{many} tokens, by difference, {runs} runs): median {statistics.median(per_token):.1f} us "
        f"({', '.join(f'{v:.1f}' for v in per_token)})"
    )


async def completion_connections(url: str, count: int) -> int:
    """`count` completions through the OpenAI-compatible backend, one after another, against the fake
    engine at `url` (which records each request's peer: one per connection)."""
    from agent.backends.registry import make_backend
    from mcp_server.config.command_line import parse_settings

    backend = make_backend(parse_settings(["--demo", "--backend", "openai", "--base-url", url + "/v1"], {}))
    try:
        for _ in range(count):
            await backend.complete(STREAM_PROMPT, max_tokens=64)
    finally:
        await backend.aclose()
    return count


class SteadyModel:
    """The same short reply to every prompt."""

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        return ScriptedReply(assistant_reply("Next step.", tool_call("list_tables")))


def report_reuse(count: int) -> None:
    engine = FakeServer(SteadyModel()).start()
    try:
        anyio.run(completion_connections, engine.root, count)
        peers = {r.peer for r in engine.requests if r.path == "/v1/completions"}
        done = sum(r.path == "/v1/completions" for r in engine.requests)
    finally:
        engine.stop()
    print(
        f"6. the OpenAI-compatible backend's connections: {done} completions one after another on "
        f"{len(peers)} connection(s) (goal: one per engine: {'met' if len(peers) == 1 else 'NOT met'})"
    )


def report_startup(runs: int) -> None:
    from bench_startup import startup_figures

    figures = startup_figures(runs)
    print(
        f"7. start-up, spawn to the first reply (installed tree, console script, median of {runs} "
        "interleaved runs; bench_startup.py has the rest):"
    )
    for name, (seconds, ratio) in figures.items():
        print(f"  {name:36s} {seconds:6.3f} s  {ratio:5.2f}x the SDK's minimal server  {verdict(ratio, 1.2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of the 20 questions for the CPU figure")
    parser.add_argument("--repeats", type=int, default=2, help="serial and at-once blocks of each burst")
    parser.add_argument("--turn-delay", type=float, default=0.2, help="seconds per fake model turn in bursts")
    parser.add_argument("--hits", type=int, default=300, help="rounds of the verified hit and its peers")
    parser.add_argument(
        "--instructions",
        type=int,
        default=0,
        help="also count instructions per hit under callgrind, over this many calls",
    )
    parser.add_argument("--join-repeat", type=int, default=200, help="queries of the join per mode")
    parser.add_argument(
        "--dbhub",
        type=Path,
        default=Path(tempfile.gettempdir()) / "dbhub",
        help="npm prefix holding @bytebase/dbhub",
    )
    ci_node = ROOT / ".ci" / "node" / "node_modules" / ".bin" / "node"
    parser.add_argument("--node", default=str(ci_node) if ci_node.is_file() else shutil.which("node"))
    parser.add_argument("--before", metavar="REF", help="also run this commit's server in the hit part")
    parser.add_argument("--startup-runs", type=int, default=9, help="interleaved start-ups of each server")
    parser.add_argument(
        "--parts", default="cpu,burst,hit,reads,stream,reuse,startup", help="which parts to run, by name"
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    quick = FakeServer(FourRounds(DEMO_GOLD)).start()
    slow = FakeServer(DelayedPolicy(FourRounds(DEMO_GOLD), args.turn_delay)).start()
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            if "cpu" in parts:
                report_cpu(quick.url, args.runs, tmp)
            if "burst" in parts:
                report_burst(slow.url, args.repeats, args.turn_delay, tmp)
            for part, label in (("hit", "3."), ("reads", "4.")):
                if part in parts and not CHINOOK.is_file():
                    print(f"{label} skipped: {CHINOOK} not found (../shared/data is absent)")
            if "hit" in parts and CHINOOK.is_file():
                report_hit(quick.url, args.hits, args.dbhub, args.node, tmp, args.instructions, args.before)
            if "reads" in parts and CHINOOK.is_file():
                report_reads(args.join_repeat)
            if "stream" in parts:
                report_stream(args.runs)
            if "reuse" in parts:
                report_reuse(160)
            if "startup" in parts:
                report_startup(args.startup_runs)
    finally:
        quick.stop()
        slow.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
