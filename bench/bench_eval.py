"""Throughput of the evaluation harness itself: Spider dev with a zero-latency oracle model.

    python bench/bench_eval.py [--concurrency 1 4] [--limit N] [--trace full|calls|none]

The oracle (tests/support/policies.py) lists the tables, runs the gold SQL and submits it, so
every second measured is harness time: prompt building and parsing, the tools, the gold
and predicted SQL, comparison, and writing results.jsonl. Issue 5 asks for questions per
second at concurrency 1 and 4 on the 972 runnable questions, and the share of the total
time spent outside the model.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from agent.backends.base import SamplingSettings  # noqa: E402
from agent.evaluation import (  # noqa: E402
    EvalSettings,
    RunResult,
    TraceKind,
    evaluate,
    load_dataset,
    select_examples,
    summarize,
)
from tests.support.policies import OraclePolicy, PolicyBackend  # noqa: E402

SPIDER = ROOT.parent / "shared" / "data" / "spider_dev"


def run_once(concurrency: int, limit: int | None, trace: TraceKind) -> tuple[RunResult, float]:
    """One full run into a temporary results file; returns the result and its wall time."""
    dataset = load_dataset(SPIDER)
    selection = select_examples(dataset, limit=limit)
    oracle = OraclePolicy({e.question: e.gold_sql for e in dataset.examples})

    def backend(sampling: SamplingSettings) -> PolicyBackend:
        return PolicyBackend(oracle, "oracle", sampling=sampling, record=False)

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = anyio.run(
            lambda: evaluate(
                dataset,
                selection,
                backend,
                model="oracle",
                out_path=Path(tmp) / "results.jsonl",
                settings=EvalSettings(concurrency=concurrency, trace=trace),
            )
        )
        return result, time.perf_counter() - started


def report(concurrency: int, result: RunResult, wall: float) -> None:
    """Print the figures of one run."""
    episodes = [s for r in result.records for s in r.samples]
    model = sum(s.model_seconds for s in episodes)
    tools = sum(s.tool_seconds for s in episodes)
    inside = sum(s.seconds for s in episodes)
    n = len(result.records)
    summary = summarize(result.records, benchmark="spider", model="oracle", samples=1, selected=n)
    # Episodes overlap at concurrency > 1: the model's share of the wall clock is its summed
    # time spread over the episodes that ran at once.
    model_wall = model / concurrency
    print(
        f"concurrency {concurrency}: {n} questions in {wall:.2f} s = {n / wall:.1f} questions/s "
        f"(EX {100 * (summary.accuracy.ex or 0):.1f}%)"
    )
    print(
        f"  per question: {1000 * wall / n:.2f} ms wall; summed over episodes {1000 * inside / n:.2f} ms "
        f"in the loop, of which model {1000 * model / n:.3f} ms and tools {1000 * tools / n:.2f} ms"
    )
    print(f"  time outside the model: {100 * (1 - model_wall / wall):.2f}% of the total")


def main() -> int:
    """Run the benchmark at each concurrency and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--limit", type=int, help="fewer questions, for a quick look")
    parser.add_argument("--trace", choices=list(TraceKind), default=TraceKind.FULL.value)
    args = parser.parse_args()
    if not SPIDER.is_dir():
        print(f"{SPIDER} is absent: this benchmark needs the Spider dev set in ../shared/data", file=sys.stderr)
        return 2
    run_once(1, 20, TraceKind(args.trace))  # warm the page cache and imports
    for concurrency in args.concurrency:
        result, wall = run_once(concurrency, args.limit, TraceKind(args.trace))
        report(concurrency, result, wall)
    return 0


if __name__ == "__main__":
    sys.exit(main())
