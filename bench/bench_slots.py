"""Runtime slots: four questions at once against one after another, through one sqale-mcp process.

    python bench/bench_slots.py [--skip-real] [--repeats 2] [--db /path/to/Chinook_Sqlite.sqlite]

Issues 16 and 25 ask for:
- against the real engine (llama_cpp.server with Gemma 3 270M, one slot; tests/support/real_engine.py),
  four different questions at once and one after another with --runtime-slots 1, compared per
  token in one run: goal at once <= 1.05 x serial. One engine and one sqale-mcp process serve every
  block (a warm-up block first, untimed: the SQLite workers start and the engine loads its
  weights); blocks alternate S A A S ... so that a machine getting busier weighs on both modes.
  Per block: wall time, the tokens the engine processed (prompt tokens it evaluated plus those it
  generated, from its own log), and where the wall time went: the engine computing (its own
  `total time` per request), our side of each request (set-up, streaming: our time in the request
  minus the engine's), tools, and the engine idle between requests (hand-over: the slot passing
  to the next question, the answer going back, the next question arriving).
- against the fake runtime with 4 slots (0.2 s a model turn), four questions at once still
  overlap: ratio <= 0.35 of serial.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
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
from tests.support.real_engine import LlamaServer, engine_missing, llama_server  # noqa: E402

TOOL = "answer_sql_question"
CHINOOK_QUESTIONS = (
    "Which genre has the most tracks?",
    "How many customers live in Brazil?",
    "What is the total of all invoices in 2010?",
    "Which employee supports the most customers?",
)
DEFAULT_DB = Path("/work/shared/data/dbs/Chinook_Sqlite.sqlite")
# llama_cpp.server (verbose) per request: an optional prefix-cache hit, then the perf lines.
_PREFIX = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs")
_TOTAL = re.compile(r"total time =\s*([\d.]+) ms")


@dataclass(frozen=True)
class Run:
    """One batch of questions through one server process."""

    wall: float
    tokens: int
    rounds: int
    model_seconds: float
    tool_seconds: float
    queued: list[float]
    statuses: list[str]


@dataclass(frozen=True)
class EngineRequest:
    """One completion as the engine's log tells it."""

    reused: int  # prompt tokens served from its cache
    evaluated: int  # prompt tokens it evaluated
    generated: int
    seconds: float  # its own total time for the request


def server_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS")}
    env["XDG_CACHE_HOME"] = str(cache)
    return env


def server_params(args: list[str], cache: Path, log: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        cwd=ROOT,
        env=server_env(cache),
        args=[
            "-m",
            "mcp_server",
            *args,
            "--episode-log",
            str(log),
            "--log-level",
            "WARNING",
            "--call-budget",
            "0",
        ],
    )  # a patient client


async def batch(client: Client, questions: list[str], concurrent: bool, log: Path) -> Run:
    """Ask `questions` on an open session, at once or one after another; figures from the log lines
    this batch appended."""
    answers: list[dict[str, Any]] = []
    before = len(log.read_text().splitlines()) if log.exists() else 0

    async def one(question: str) -> None:
        result = await client.call_tool(TOOL, {"question": question})
        assert result.structured_content is not None, result.content[0].text
        answers.append(result.structured_content)

    started = time.perf_counter()
    if concurrent:
        async with anyio.create_task_group() as group:
            for question in questions:
                group.start_soon(one, question)
    else:
        for question in questions:
            await one(question)
    wall = time.perf_counter() - started
    lines = [json.loads(line) for line in log.read_text().splitlines()[before:]]
    return Run(
        wall=wall,
        tokens=sum(a["tokens"] for a in answers),
        rounds=sum(a["rounds"] for a in answers),
        model_seconds=sum(line["model_seconds"] for line in lines),
        tool_seconds=sum(line["tool_seconds"] for line in lines),
        queued=sorted(a["queued_seconds"] for a in answers),
        statuses=[a["status"] for a in answers],
    )


async def ask_batch(
    args: list[str], questions: list[str], concurrent: bool, cache: Path, log: Path, warm_up: bool = False
) -> Run:
    """Answer `questions` through one `python -m mcp_server ARGS` over stdio.

    With `warm_up`, the questions are first asked once at once, untimed, so that the server's
    SQLite workers are running (starting them costs seconds on a loaded machine).
    """
    async with Client(server_params(args, cache, log)) as client:
        await client.list_tools()
        if warm_up:
            await batch(client, questions, True, log)
        return await batch(client, questions, concurrent, log)


def engine_requests(log: str) -> list[EngineRequest]:
    """Each completion request in (a slice of) the engine's log: reuse, tokens and its own time."""
    requests: list[EngineRequest] = []
    reused, evaluated, generated = 0, 0, 0
    for line in log.splitlines():
        if (hit := _PREFIX.search(line)) is not None:
            reused = int(hit.group(1))
        elif (prompt := _PROMPT_EVAL.search(line)) is not None:
            evaluated = int(prompt.group(2))
        elif (ran := _EVAL.search(line)) is not None:
            generated = int(ran.group(2))
        elif (total := _TOTAL.search(line)) is not None:
            requests.append(EngineRequest(reused, evaluated, generated, float(total.group(1)) / 1000))
            reused, evaluated, generated = 0, 0, 0
    return requests


@dataclass(frozen=True)
class Block:
    """One measured batch on the real engine, with the engine's view of it."""

    mode: str
    run: Run
    requests: list[EngineRequest]

    @property
    def engine_tokens(self) -> int:
        """Prompt tokens the engine evaluated plus tokens it generated."""
        return sum(r.evaluated + r.generated for r in self.requests)

    @property
    def engine_seconds(self) -> float:
        return sum(r.seconds for r in self.requests)

    @property
    def ms_per_token(self) -> float:
        """Wall time per engine token: what the comparison is about."""
        return 1000 * self.run.wall / max(1, self.engine_tokens)

    @property
    def whole_re_evaluations(self) -> int:
        """Requests that reused less than a tenth of their prompt (an episode's first round included)."""
        return sum(1 for r in self.requests if r.reused < 0.1 * (r.reused + r.evaluated))


def real_engine_runs(db: Path, repeats: int) -> None:
    questions = list(CHINOOK_QUESTIONS)
    print(
        "real engine: llama_cpp.server, Gemma 3 270M, one slot, --runtime-slots 1; one engine and one "
        f"sqale-mcp process for every block; {len(questions)} questions on {db.name}"
    )
    pairs = (("serial", "at once"), ("at once", "serial"))
    modes = [mode for i in range(repeats) for mode in pairs[i % 2]]
    blocks: list[Block] = []
    with tempfile.TemporaryDirectory() as tmp, llama_server(Path(tmp)) as engine:
        args = [
            "--db",
            f"chinook={db}",
            "--backend",
            "openai",
            "--base-url",
            engine.url,
            "--runtime-slots",
            "1",
            "--max-concurrent",
            "4",
        ]
        anyio.run(_blocks, engine, args, questions, modes, Path(tmp), blocks)
    print(
        "  mode      wall s  rounds  engine tok  ms/token  engine s  our side s  tools s  idle s  "
        "whole re-evals  queued s"
    )
    for b in blocks:
        ours = b.run.model_seconds - b.engine_seconds
        idle = b.run.wall - b.run.model_seconds - b.run.tool_seconds
        queued = ", ".join(f"{q:.0f}" for q in b.run.queued)
        print(
            f"  {b.mode:<8} {b.run.wall:>7.1f}  {b.run.rounds:>6}  {b.engine_tokens:>10,}  "
            f"{b.ms_per_token:>8.2f}  {b.engine_seconds:>8.1f}  {ours:>10.1f}  {b.run.tool_seconds:>7.2f}  "
            f"{idle:>6.1f}  "
            f"{b.whole_re_evaluations:>14}  {queued}"
        )
    per_mode = {mode: [b.ms_per_token for b in blocks if b.mode == mode] for mode in ("serial", "at once")}
    ratio = statistics.median(per_mode["at once"]) / statistics.median(per_mode["serial"])
    pooled = (
        sum(b.run.wall for b in blocks if b.mode == "at once")
        / max(1, sum(b.engine_tokens for b in blocks if b.mode == "at once"))
    ) / (
        sum(b.run.wall for b in blocks if b.mode == "serial")
        / max(1, sum(b.engine_tokens for b in blocks if b.mode == "serial"))
    )
    print(
        f"  at once / serial per token: median {ratio:.3f}, pooled {pooled:.3f} "
        f"(goal <= 1.05: {'met' if max(ratio, pooled) <= 1.05 else 'NOT met'})"
    )


async def _blocks(
    engine: LlamaServer, args: list[str], questions: list[str], modes: list[str], tmp: Path, blocks: list[Block]
) -> None:
    log = tmp / "episodes.jsonl"
    async with Client(server_params(args, tmp, log)) as client:
        await client.list_tools()
        await batch(client, questions, True, log)  # warm-up, untimed
        for mode in modes:
            mark = len(engine.log())
            run = await batch(client, questions, mode == "at once", log)
            blocks.append(Block(mode, run, engine_requests(engine.log()[mark:])))


def fake_runs(turn_delay: float) -> None:
    print(f"fake runtime: {turn_delay:g} s a model turn, 3 turns a question, the demo database")
    fake = FakeServer(DelayedPolicy(OraclePolicy(BOOK_GOLD), turn_delay)).start()
    try:
        for slots in (4, 1):
            walls = {}
            for mode in ("serial", "at once"):
                with tempfile.TemporaryDirectory() as tmp:
                    run = anyio.run(
                        ask_batch,
                        [
                            "--demo",
                            "--ollama-host",
                            fake.url,
                            "--runtime-slots",
                            str(slots),
                            "--max-concurrent",
                            "4",
                        ],
                        list(BOOK_GOLD),
                        mode == "at once",
                        Path(tmp),
                        Path(tmp) / "episodes.jsonl",
                        True,
                    )
                walls[mode] = run.wall
            ratio = walls["at once"] / walls["serial"]
            verdict = f"goal <= 0.35: {'met' if ratio <= 0.35 else 'NOT met'}" if slots == 4 else "queued"
            print(
                f"  --runtime-slots {slots}: serial {walls['serial']:.2f} s, at once "
                f"{walls['at once']:.2f} s, ratio {ratio:.2f} ({verdict})"
            )
    finally:
        fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    beside = ROOT.parent / "shared" / "data" / "dbs" / "Chinook_Sqlite.sqlite"
    parser.add_argument("--db", type=Path, default=beside if beside.is_file() else DEFAULT_DB)
    parser.add_argument("--repeats", type=int, default=2, help="serial and at-once blocks of each (default 2)")
    parser.add_argument("--skip-fake", action="store_true", help="only the real-engine figures")
    parser.add_argument("--turn-delay", type=float, default=0.2, help="seconds per fake model turn")
    parser.add_argument("--skip-real", action="store_true", help="only the fake-runtime figures")
    args = parser.parse_args()
    if not args.skip_fake:
        fake_runs(args.turn_delay)
    if args.skip_real:
        return
    if (reason := engine_missing()) is not None:
        sys.exit(reason)
    real_engine_runs(args.db, args.repeats)


if __name__ == "__main__":
    main()
