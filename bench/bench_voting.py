"""Wall time of one question with K = 5 samples against K = 1, through the MCP tool.

    python bench/bench_voting.py [--turn-delay 0.2] [--repeats 5] [--max-concurrent 8]

Issue 12 asks for: K = 5 against K = 1 with a fake model at 0.2 s per turn and
--max-concurrent 8; goal: K = 5 costs at most 2x the wall time of K = 1 when the samples agree
early. The fake Ollama (tests/support/fake_runtime.py) serves over real HTTP in this process; the
server runs in process behind an MCP client. Scenarios:
- k1: one sample, the oracle (3 model turns).
- k5-agree: five samples, all the oracle.
- k5-early: three samples answer like the oracle, two explore all 6 tool turns and answer
  otherwise: the early stop cancels those two once three agree.
- k5-no-early-stop-possible: every sample answers differently; all five run to the end.
- k5-one-slot: k5-agree with --max-concurrent 1: the samples run one after another.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client  # noqa: E402

from agent.backends.registry import make_backend  # noqa: E402
from mcp_server.app import build_server  # noqa: E402
from mcp_server.config.command_line import parse_settings  # noqa: E402
from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.mcp import BOOK_GOLD  # noqa: E402
from tests.support.policies import (  # noqa: E402
    OraclePolicy,
    Policy,
    ScriptedReply,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    policy_reply,
    tool_call,
)

TOOL = "answer_sql_question"
QUESTION = "How many books are there?"
ORACLE = OraclePolicy(BOOK_GOLD)


class SeedAwareDelay:
    """Another policy's replies (seed passed on, so SeedSwitchPolicy works), each taking `delay` s."""

    def __init__(self, policy: Policy, delay: float) -> None:
        self.policy, self.delay = policy, delay

    def reply_with_seed(self, prompt: str, model: str, seed: int | None) -> ScriptedReply:
        """The inner reply for this seed, with the delay set."""
        return dataclasses.replace(policy_reply(self.policy, prompt, model, seed), delay=self.delay)

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The inner reply without a seed."""
        return self.reply_with_seed(prompt, model, None)


def explorer(sql: str) -> ScriptPolicy:
    """Spends every tool turn exploring, then answers `sql` in the final turn."""
    return ScriptPolicy([assistant_reply("explore", tool_call("list_tables"))], final=f"```sql\n{sql}\n```")


SCENARIOS: dict[str, tuple[int, Policy, int | None]] = {
    "k1": (1, ORACLE, None),
    "k5-agree": (5, ORACLE, None),
    "k5-early": (5, SeedSwitchPolicy({3: explorer("SELECT 1"), 4: explorer("SELECT 2")}, default=ORACLE), None),
    "k5-no-early-stop-possible": (
        5,
        SeedSwitchPolicy({k: explorer(f"SELECT {k}") for k in range(1, 5)}, default=ORACLE),
        None,
    ),
    "k5-one-slot": (5, ORACLE, 1),
}


async def one_call(url: str, cache: Path, samples: int, max_concurrent: int) -> tuple[float, dict[str, Any]]:
    """Seconds for one answer_sql_question call (client and server in process), and its answer."""
    environ = {"XDG_CACHE_HOME": str(cache)}
    settings = parse_settings(
        [
            "--demo",
            "--ollama-host",
            url,
            "--seed",
            "0",
            "--max-concurrent",
            str(max_concurrent),
            "--runtime-slots",
            str(max_concurrent),
            "--log-level",
            "WARNING",
        ],
        environ,
    )
    server = build_server(settings, environ=environ, backend_factory=make_backend)
    async with Client(server) as client:
        await client.list_tools()  # start-up is not part of the figure
        started = time.perf_counter()
        result = await client.call_tool(TOOL, {"question": QUESTION, "samples": samples})
        seconds = time.perf_counter() - started
    assert not result.is_error, result.content[0].text
    return seconds, result.structured_content


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turn-delay", type=float, default=0.2, help="seconds per model turn (default 0.2)")
    parser.add_argument("--repeats", type=int, default=5, help="calls per scenario (default 5)")
    parser.add_argument("--max-concurrent", type=int, default=8, help="server slots (default 8)")
    args = parser.parse_args()
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        print(
            f"fake Ollama at {args.turn_delay:g} s per turn; --max-concurrent {args.max_concurrent} "
            f"(k5-one-slot: 1); median of {args.repeats} calls"
        )
        print(f"{'scenario':<28}{'median s':>10}{'min s':>8}{'max s':>8}  agreement  finished")
        for name, (samples, policy, slots) in SCENARIOS.items():
            fake = FakeServer(SeedAwareDelay(policy, args.turn_delay)).start()
            try:
                runs = [
                    anyio.run(one_call, fake.url, Path(tmp), samples, slots or args.max_concurrent)
                    for _ in range(args.repeats)
                ]
            finally:
                fake.stop()
            times = [seconds for seconds, _ in runs]
            answer = runs[-1][1]
            medians[name] = statistics.median(times)
            print(
                f"{name:<28}{medians[name]:>10.2f}{min(times):>8.2f}{max(times):>8.2f}  "
                f"{answer['agreement']:>9.2f}  {answer['samples_finished']}/{answer['samples']}"
            )
    for name in ("k5-agree", "k5-early", "k5-no-early-stop-possible", "k5-one-slot"):
        print(f"{name} / k1 = {medians[name] / medians['k1']:.2f}x")
    goal = max(medians["k5-agree"], medians["k5-early"]) / medians["k1"]
    print(
        f"goal (K = 5 at most 2x K = 1 when samples agree early): {'met' if goal <= 2 else 'NOT met'} "
        f"({goal:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
