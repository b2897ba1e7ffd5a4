"""Runtime slots: four questions at once against one after another, through one sqale-mcp process.

    python bench/bench_slots.py [--skip-real] [--db ../shared/data/dbs/Chinook_Sqlite.sqlite]

Issue 16 asks for:
- against the real engine (llama_cpp.server with Gemma 3 270M, one slot; tests/support/real_engine.py),
  four different questions at once and one after another, with wall time, total tokens and
  per-round model time; goal: at once takes no longer than one after another (ratio <= 1.05)
  and no round after an episode's first re-evaluates its whole prompt. Each run gets a fresh
  engine. `--runtime-slots 1` is the new behaviour for a one-slot engine; `--runtime-slots 4`
  (episodes interleaving on the one slot) is what the server did before.
- against the fake runtime with 4 slots (0.2 s a model turn), four questions at once still
  overlap: ratio <= 0.35 of serial.
Re-evaluations are read from the engine's own log: llama_cpp.server prints, per request, the
prefix it reused from its cache and the prompt tokens it evaluated.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client, StdioServerParameters  # noqa: E402

from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.mcp import BOOK_GOLD, DelayedPolicy  # noqa: E402
from tests.support.policies import OraclePolicy  # noqa: E402
from tests.support.real_engine import engine_missing, llama_server  # noqa: E402

TOOL = "answer_sql_question"
CHINOOK_QUESTIONS = (
    "Which genre has the most tracks?",
    "How many customers live in Brazil?",
    "What is the total of all invoices in 2010?",
    "Which employee supports the most customers?",
)
# llama_cpp.server (verbose) per request: an optional prefix-cache hit, then the perf lines.
_PREFIX = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


@dataclass(frozen=True)
class Run:
    """One batch of questions through one server process."""

    wall: float
    tokens: int
    rounds: int
    model_seconds: float
    queued: list[float]
    statuses: list[str]


def server_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS")}
    env["XDG_CACHE_HOME"] = str(cache)
    return env


async def ask_batch(args: list[str], questions: list[str], concurrent: bool, cache: Path,
                    log: Path, warm_up: bool = False) -> Run:
    """Answer `questions` through one `python -m mcp_server ARGS` over stdio.

    With `warm_up`, the questions are first asked once at once, untimed, so that the server's
    SQLite workers are running (starting them costs seconds on a loaded machine).
    """
    params = StdioServerParameters(command=sys.executable, cwd=ROOT, env=server_env(cache),
                                   args=["-m", "mcp_server", *args, "--episode-log", str(log),
                                         "--log-level", "WARNING"])
    answers: list[dict[str, Any]] = []
    async with Client(params) as client:
        await client.list_tools()

        async def one(question: str) -> None:
            result = await client.call_tool(TOOL, {"question": question})
            assert result.structured_content is not None, result.content[0].text
            answers.append(result.structured_content)

        if warm_up:
            async with anyio.create_task_group() as group:
                for question in questions:
                    group.start_soon(client.call_tool, TOOL, {"question": question})
            log.unlink()
        started = time.perf_counter()
        if concurrent:
            async with anyio.create_task_group() as group:
                for question in questions:
                    group.start_soon(one, question)
        else:
            for question in questions:
                await one(question)
        wall = time.perf_counter() - started
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return Run(wall=wall, tokens=sum(a["tokens"] for a in answers), rounds=sum(a["rounds"] for a in answers),
               model_seconds=sum(line["model_seconds"] for line in lines),
               queued=sorted(a["queued_seconds"] for a in answers), statuses=[a["status"] for a in answers])


def engine_requests(log: str) -> list[tuple[int, int]]:
    """(reused prefix tokens, evaluated prompt tokens) per completion request, from the engine's log."""
    requests: list[tuple[int, int]] = []
    reused = 0
    for line in log.splitlines():
        if (hit := _PREFIX.search(line)) is not None:
            reused = int(hit.group(1))
        elif (evaluated := _PROMPT_EVAL.search(line)) is not None:
            requests.append((reused, int(evaluated.group(2))))
            reused = 0
    return requests


def real_engine_runs(db: Path) -> None:
    questions = list(CHINOOK_QUESTIONS)
    print("real engine: llama_cpp.server, Gemma 3 270M, one slot, a fresh engine per run; "
          f"{len(questions)} questions on {db.name}")
    print("  slots  mode        wall (s)  tokens  rounds  model s/round  queued (s)              "
          "requests  whole re-evals")
    for slots in (1, 4):
        walls = {}
        for mode in ("serial", "at once"):
            with tempfile.TemporaryDirectory() as tmp, llama_server(Path(tmp)) as engine:
                run = anyio.run(ask_batch, ["--db", f"chinook={db}", "--backend", "openai",
                                            "--base-url", engine.url, "--runtime-slots", str(slots),
                                            "--max-concurrent", "4"],
                                questions, mode == "at once", Path(tmp), Path(tmp) / "episodes.jsonl")
                requests = engine_requests(engine.log())
            # A request re-evaluates its whole prompt when it reused less than a tenth of it.
            whole = sum(1 for reused, evaluated in requests if reused < 0.1 * (reused + evaluated))
            walls[mode] = run.wall
            queued = ", ".join(f"{q:.1f}" for q in run.queued)
            print(f"  {slots:>5}  {mode:<10}  {run.wall:>8.1f}  {run.tokens:>6}  {run.rounds:>6}  "
                  f"{run.model_seconds / max(1, run.rounds):>13.2f}  {queued:<22}  {len(requests):>8}  "
                  f"{whole:>14}")
        ratio = walls["at once"] / walls["serial"]
        verdict = f"goal <= 1.05: {'met' if ratio <= 1.05 else 'NOT met'}" if slots == 1 else "before"
        print(f"  --runtime-slots {slots}: at once / serial = {ratio:.2f} ({verdict})")


def fake_runs(turn_delay: float) -> None:
    print(f"fake runtime: {turn_delay:g} s a model turn, 3 turns a question, the demo database")
    fake = FakeServer(DelayedPolicy(OraclePolicy(BOOK_GOLD), turn_delay)).start()
    try:
        for slots in (4, 1):
            walls = {}
            for mode in ("serial", "at once"):
                with tempfile.TemporaryDirectory() as tmp:
                    run = anyio.run(ask_batch, ["--demo", "--ollama-host", fake.url, "--runtime-slots",
                                                str(slots), "--max-concurrent", "4"],
                                    list(BOOK_GOLD), mode == "at once", Path(tmp),
                                    Path(tmp) / "episodes.jsonl", True)
                walls[mode] = run.wall
            ratio = walls["at once"] / walls["serial"]
            verdict = f"goal <= 0.35: {'met' if ratio <= 0.35 else 'NOT met'}" if slots == 4 else "queued"
            print(f"  --runtime-slots {slots}: serial {walls['serial']:.2f} s, at once "
                  f"{walls['at once']:.2f} s, ratio {ratio:.2f} ({verdict})")
    finally:
        fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path,
                        default=ROOT.parent / "shared" / "data" / "dbs" / "Chinook_Sqlite.sqlite")
    parser.add_argument("--turn-delay", type=float, default=0.2, help="seconds per fake model turn")
    parser.add_argument("--skip-real", action="store_true", help="only the fake-runtime figures")
    args = parser.parse_args()
    fake_runs(args.turn_delay)
    if args.skip_real:
        return
    if (reason := engine_missing()) is not None:
        sys.exit(reason)
    real_engine_runs(args.db)


if __name__ == "__main__":
    main()
