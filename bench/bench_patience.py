"""Answers within the client's patience: a slow model through Claude Desktop's client.

    python bench/bench_patience.py                # real scale: 15 s a model request, 2-3 minutes a question
    python bench/bench_patience.py --quick        # the same in about a minute (1 s a request, 3 s budget)

Issue 46 asks for, with the official TypeScript SDK 1.x client at its default options (a 60 s request
timeout that progress does not reset: what Claude Desktop is built on), over stdio, a model slow enough
that a question takes 2-3 minutes, K = 3 samples on one runtime slot (Ollama's common case):
- every question reaches its answer within a few calls of the same question, and no call times out;
- the model requests are at most 1.1x a patient client's (one call without a timeout, --call-budget 0);
- a person's cancel still frees the engine: the question is stopped and the next one is answered at once.

The fake model (tests/support/fake_runtime.py, real HTTP) explores as the trained agent does, more slowly:
it lists the tables, describes one, runs a query and submits it, four requests a sample; for some questions
and seeds it submits a wrong variant (tests.support.policies.VotePolicy), so the samples disagree and all
three run. The patient client and Claude Desktop's ask the same questions at the same time, each of its
own server process and fake runtime, so a busier machine weighs on both.

Prints, per question: the calls it took, the longest call, the question's seconds, and its model requests
for each client; then the totals and the ratio of model requests; then the cancel's figures.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
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
from tests.support.mcp import BOOK_GOLD, DelayedPolicy, KeyedPolicy, server_command, server_env  # noqa: E402
from tests.support.node_tools import NODE_BIN, node_env  # noqa: E402
from tests.support.policies import (  # noqa: E402
    OraclePolicy,
    ScriptedReply,
    ScriptPolicy,
    VotePolicy,
    assistant_reply,
    round_number,
    tool_call,
)

TOOL = "answer_sql_question"
MODULES = ROOT / ".ci" / "node" / "node_modules"
TS_CLIENT = ROOT / "tests" / "support" / "ts_sdk1_client.cjs"
SAMPLES = 3
SLOW_QUESTION = "Which titles were published before 1960, asked slowly?"  # the question a person stops


class Explorer(VotePolicy):
    """VotePolicy's answers (about 70% right per seed), reached in four requests: list the tables,
    describe the first table the SQL reads, run the SQL, submit it."""

    def reply_with_seed(self, prompt: str, model: str, seed: int | None) -> ScriptedReply:
        """The sample's reply for its round."""
        sql = self.answer(self.question_in(prompt), seed)
        table = re.search(r"\bFROM\s+(\w+)", sql, re.IGNORECASE)
        turns = [
            tool_call("list_tables"),
            tool_call("describe_table", table_name=table.group(1) if table else "books"),
            tool_call("run_query", sql=sql),
            tool_call("submit_sql", sql=sql),
        ]
        return ScriptedReply(assistant_reply("step", turns[min(round_number(prompt), len(turns)) - 1]))


@dataclass(frozen=True)
class Asked:
    """One question through one client."""

    question: str
    calls: list[dict[str, Any]]  # each call's seconds and status, or its error
    seconds: float  # from the first call to the answer
    requests: int  # model requests of this question

    @property
    def answered(self) -> bool:
        """True when its last call gave an answer (not `working`, not an error)."""
        last = self.calls[-1] if self.calls else {}
        return "error" not in last and last.get("status") not in (None, "working")


def model_requests(runtime: FakeServer, question: str) -> int:
    """The model requests the runtime got for `question`."""
    return sum(question in body["prompt"] for body in runtime.bodies("/api/generate"))


def runtime(latency: float) -> FakeServer:
    """A fake runtime answering as the Explorer, `latency` seconds a request."""
    explorer = DelayedPolicy(Explorer(BOOK_GOLD, right=0.7), latency)
    return FakeServer(explorer).start()


def server_flags(url: str, *extra: str) -> list[str]:
    """The stdio server: the demo database, one runtime slot, fixed seeds, the runtime at `url`."""
    return [
        "--demo",
        "--ollama-host",
        url,
        "--runtime-slots",
        "1",
        "--seed",
        "100",
        "--episode-timeout",
        "900",
        "--log-level",
        "WARNING",
        *extra,
    ]


async def patient(questions: list[str], latency: float, folder: Path) -> list[Asked]:
    """The Python SDK client without a timeout, against --call-budget 0: one call a question."""
    fake = runtime(latency)
    try:
        command = server_command(*server_flags(fake.url, "--call-budget", "0"))
        params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(folder), cwd=ROOT)
        asked = []
        async with Client(params) as client:
            for question in questions:
                started = time.perf_counter()
                result = await client.call_tool(TOOL, {"question": question, "samples": SAMPLES})
                seconds = time.perf_counter() - started
                status = (result.structured_content or {}).get("status")
                asked.append(
                    Asked(
                        question,
                        [{"seconds": seconds, "status": status}],
                        seconds,
                        model_requests(fake, question),
                    )
                )
        return asked
    finally:
        fake.stop()


def ts_client(job: dict[str, Any]) -> dict[str, Any]:
    """Run the TS SDK 1.x client script on `job`."""
    done = subprocess.run(
        [str(NODE_BIN / "node"), str(TS_CLIENT)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**node_env(), "NODE_PATH": str(MODULES)},
        timeout=7200,
    )
    if done.returncode != 0:
        raise SystemExit(f"the TypeScript client failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


async def desktop(questions: list[str], latency: float, budget: list[str], folder: Path) -> list[Asked]:
    """Claude Desktop's client at its default options, calling again while the answer says `working`."""
    fake = runtime(latency)
    try:
        job = {
            "command": server_command(*server_flags(fake.url, *budget)),
            "env": server_env(folder),
            "cwd": str(ROOT),
            "most": 20,
            "questions": [{"question": q, "samples": SAMPLES} for q in questions],
        }
        out = await anyio.to_thread.run_sync(ts_client, job)
        return [
            Asked(q, a["calls"], sum(c["seconds"] for c in a["calls"]), model_requests(fake, q))
            for q, a in zip(questions, out["asked"], strict=True)
        ]
    finally:
        fake.stop()


async def cancel(latency: float, budget: list[str], folder: Path) -> tuple[dict[str, Any], int, str]:
    """A person stops a slow question in its second call; the next question is asked at once. Returns
    the client's record, the engine's closed requests, and how the stopped question's line ends."""
    slow = ScriptPolicy([ScriptedReply(assistant_reply("look", tool_call("list_tables")), delay=600)])
    fake = FakeServer(KeyedPolicy({"asked slowly": slow, "": OraclePolicy(BOOK_GOLD)})).start()
    log = folder / "episodes.jsonl"
    try:
        job = {
            "command": server_command(*server_flags(fake.url, *budget, "--episode-log", str(log))),
            "env": server_env(folder),
            "cwd": str(ROOT),
            "cancel_first": True,
            "questions": [
                {"question": SLOW_QUESTION, "samples": SAMPLES},
                {"question": "How many books are there?"},
            ],
        }
        out = await anyio.to_thread.run_sync(ts_client, job)
        await fake.await_disconnects(1, timeout=30)
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        stopped = next(
            (
                f"{line['status']} ({line['stop_reason']})"
                for line in lines
                if line["question"] == SLOW_QUESTION and line["status"] != "working"
            ),
            "no line",
        )
        return out, len(fake.disconnects), stopped
    finally:
        fake.stop()


def table(title: str, asked: list[Asked]) -> None:
    """One line per question, then the totals."""
    print(f"\n{title}")
    print(
        f"  {'question':<58} {'calls':>5} {'longest call':>13} {'question s':>11} {'requests':>9} "
        f"{'answered':>9}"
    )
    for a in asked:
        longest = max(c["seconds"] for c in a.calls)
        print(
            f"  {a.question[:58]:<58} {len(a.calls):>5} {longest:>12.1f}s {a.seconds:>10.1f}s "
            f"{a.requests:>9} {'yes' if a.answered else 'NO':>9}"
        )
    errors = [c["error"] for a in asked for c in a.calls if "error" in c]
    print(
        f"  total: {sum(len(a.calls) for a in asked)} calls, {sum(a.requests for a in asked)} model "
        f"requests, {len(errors)} errors{': ' + json.dumps(errors) if errors else ''}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 s a request and a 3 s budget: about a minute")
    parser.add_argument("--latency", type=float, help="seconds a model request takes (default 15; --quick 1)")
    parser.add_argument("--budget", type=float, help="--call-budget (default: the server's, 50 s; --quick 3)")
    args = parser.parse_args()
    package = MODULES / "@modelcontextprotocol" / "sdk" / "package.json"
    if not package.is_file() or not (NODE_BIN / "node").is_file():
        raise SystemExit(
            "needs node@22 and @modelcontextprotocol/sdk@1.32.2 in .ci/node (.ci/run installs them)"
        )
    latency = args.latency if args.latency is not None else 1.0 if args.quick else 15.0
    seconds = args.budget if args.budget is not None else 3.0 if args.quick else None
    budget = [] if seconds is None else ["--call-budget", str(seconds)]
    version = json.loads(package.read_text())["version"]
    questions = list(BOOK_GOLD)
    told = "the default (50 s)" if seconds is None else f"{seconds:g} s"
    print(
        f"model: {latency:g} s a request, {SAMPLES} samples on one runtime slot; call budget: {told}; "
        f"@modelcontextprotocol/sdk {version} at its default options (60 s timeout)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        results: dict[str, list[Asked]] = {}

        async def run(name: str, job: Any) -> None:
            results[name] = await job

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            group.start_soon(run, "patient", patient(questions, latency, folder / "patient"))
            group.start_soon(run, "desktop", desktop(questions, latency, budget, folder / "desktop"))
        wall = time.perf_counter() - started
        table("patient client (Python SDK, no timeout, --call-budget 0)", results["patient"])
        table("Claude Desktop's client (TypeScript SDK 1.x, default options)", results["desktop"])
        desktop_runs, patient_runs = results["desktop"], results["patient"]
        ratio = sum(a.requests for a in desktop_runs) / max(1, sum(a.requests for a in patient_runs))
        longest = max(c["seconds"] for a in desktop_runs for c in a.calls)
        print(
            f"\nmodel requests, Claude Desktop's client / patient: {ratio:.2f} (goal <= 1.10); "
            f"calls per question: {[len(a.calls) for a in desktop_runs]}; longest call: {longest:.1f} s "
            f"(timeout 60 s); all answered: {all(a.answered for a in desktop_runs)}; wall {wall:.0f} s"
        )
        out, closed, stopped = await cancel(latency, budget, folder / "cancel")
        first, second = out["asked"]
        calls = [c.get("status") or c["error"]["message"] for c in first["calls"]]
        print(
            f"\ncancel: the slow question's calls {calls}; its line: {stopped}; engine requests closed: "
            f"{closed}; the next question (one runtime slot) answered in {len(second['calls'])} call(s), "
            f"{second['calls'][-1]['seconds']:.2f} s, status {second['calls'][-1].get('status')}"
        )


if __name__ == "__main__":
    anyio.run(main)
