"""`sqale-agent eval --concurrency 8` against one and two OpenAI-compatible replicas.

    python bench/bench_replicas.py [--limit 40] [--delay 0.2]

Two fake /v1/completions servers (tests/support/fake_runtime.py, real HTTP on 127.0.0.1) answer as an
oracle that needs `--delay` seconds per turn. The same 40 Spider dev questions run through the
real command line with --backend openai and one --base-url, then two. Goal (issue 6): close to
2x throughput with two replicas. A fake replica serves requests concurrently, so to model a real
engine whose throughput is bounded, each fake serves at most --slots requests at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from agent.commands.cli import main as agent_main  # noqa: E402
from agent.evaluation import load_dataset, select_examples  # noqa: E402
from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.policies import OraclePolicy, ScriptedReply  # noqa: E402

SPIDER = ROOT.parent / "shared" / "data" / "spider_dev"


class BoundedOracle:
    """The oracle as a replica with `slots` generation slots, each turn taking `delay` seconds.

    The fake server calls policies on its event loop, so the policy must not block: it works
    out when a slot frees (first come, first served) and hands the wait plus the turn's time
    to the fake as the reply's (asynchronous) delay.
    """

    def __init__(self, gold: dict[str, str], delay: float, slots: int) -> None:
        self.oracle = OraclePolicy(gold)
        self.delay = delay
        self.free_at = [0.0] * slots
        self.lock = threading.Lock()

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        now = time.monotonic()
        with self.lock:
            slot = min(range(len(self.free_at)), key=self.free_at.__getitem__)
            done = max(now, self.free_at[slot]) + self.delay
            self.free_at[slot] = done
        return replace(self.oracle.reply(prompt, model), delay=done - now)


def run_eval(urls: list[str], limit: int, concurrency: int) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            "eval",
            str(SPIDER / "dev.json"),
            "--backend",
            "openai",
            "--limit",
            str(limit),
            "--concurrency",
            str(concurrency),
            "--out",
            str(Path(tmp) / "results.jsonl"),
            "--trace",
            "none",
        ]
        for url in urls:
            argv += ["--base-url", url]
        out = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = agent_main(argv)
        elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"eval exited {code}:\n{out.getvalue()}")
    overall = next((line for line in out.getvalue().splitlines() if line.strip().startswith("overall")), "")
    return elapsed, " ".join(overall.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--slots", type=int, default=4, help="turns one fake replica serves at once")
    args = parser.parse_args()
    if not (SPIDER / "dev.json").exists():
        raise SystemExit(f"skipped: {SPIDER} not found (../shared/data is absent)")
    dataset = load_dataset(SPIDER / "dev.json")
    selection = select_examples(dataset, limit=args.limit)
    gold = {ex.question: ex.gold_sql for ex in selection.examples}
    servers = [
        FakeServer(BoundedOracle(gold, args.delay, args.slots), url_path="/v1").start() for _ in range(2)
    ]
    try:
        one, acc1 = run_eval([servers[0].url], args.limit, args.concurrency)
        two, acc2 = run_eval([s.url for s in servers], args.limit, args.concurrency)
    finally:
        for server in servers:
            server.stop()
    share = [sum(1 for r in s.requests if r.path.endswith("/completions")) for s in servers]
    print(
        f"{args.limit} Spider questions, --concurrency {args.concurrency}, {args.delay:g} s per turn, "
        f"{args.slots} turns at once per replica"
    )
    print(f"  one replica:  {one:6.2f} s  {args.limit / one:5.2f} questions/s  {acc1}")
    print(f"  two replicas: {two:6.2f} s  {args.limit / two:5.2f} questions/s  {acc2}")
    print(f"  speed-up {one / two:.2f}x; completions served per replica over both runs: {share}")


if __name__ == "__main__":
    main()
