"""Time and size of the HTML report for Spider dev's 972 runnable questions with full traces.

    python bench/bench_report.py [--spider DIR] [--results FILE] [--keep DIR] [--limit N]

The results come from the zero-latency oracle run of bench_eval.py (tests/support/policies.py lists
the tables, runs the gold SQL and submits it), kept with --trace full. Issue 14's goal: the
page builds in under 5 s and weighs under 20 MB. Printed: the build time from a cold start
(reading the file, importing matplotlib, charts, HTML) and warm, the page size, and that size
scaled to 1,000 questions. `--results` reuses a results file instead of running the oracle.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent and tests.support

from agent.backends.base import SamplingSettings  # noqa: E402
from agent.evaluation import EvalSettings, TraceKind, evaluate, load_dataset, select_examples  # noqa: E402
from tests.support.policies import OraclePolicy, PolicyBackend  # noqa: E402

SPIDER = ROOT.parent / "shared" / "data" / "spider_dev"
# A fresh interpreter builds the page, so imports and matplotlib's start-up count as a user sees them.
BUILD = """
import sys, time
started = time.perf_counter()
from agent.evaluation.html_report import write_report
from pathlib import Path
write_report([Path(p) for p in sys.argv[2:]], Path(sys.argv[1]))
print(time.perf_counter() - started, time.process_time())
"""


def oracle_results(spider: Path, out: Path, limit: int | None) -> int:
    """Run the oracle over the runnable questions into `out`; returns the number of questions."""
    dataset = load_dataset(spider)
    selection = select_examples(dataset, limit=limit)
    oracle = OraclePolicy({e.question: e.gold_sql for e in dataset.examples})

    def backend(sampling: SamplingSettings) -> PolicyBackend:
        return PolicyBackend(oracle, "oracle", sampling=sampling, record=False)

    anyio.run(
        lambda: evaluate(
            dataset,
            selection,
            backend,
            model="oracle",
            out_path=out,
            settings=EvalSettings(concurrency=2, trace=TraceKind.FULL),
        )
    )
    return len(selection.examples)


def build(results: list[Path], page: Path) -> tuple[float, float]:
    """Wall and CPU seconds a fresh `python` takes to write the page (imports included).

    On a busy machine the wall time waits for the CPU; the CPU time is what the build costs.
    """
    done = subprocess.run(
        [sys.executable, "-c", BUILD, str(page), *map(str, results)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    wall, cpu = done.stdout.split()
    return float(wall), float(cpu)


def main() -> int:
    """Make (or reuse) the results, build the page three times, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spider", type=Path, default=SPIDER, help="the Spider dev folder")
    parser.add_argument("--results", type=Path, help="an existing results file (skips the oracle run)")
    parser.add_argument("--keep", type=Path, help="folder to keep the results and pages in")
    parser.add_argument("--limit", type=int, help="fewer questions, for a quick look")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        results = args.results
        if results is None:
            if not args.spider.is_dir():
                print(f"{args.spider} is absent: give --spider DIR or --results FILE", file=sys.stderr)
                return 2
            results = folder / "oracle.jsonl"
            results.unlink(missing_ok=True)
            started = time.perf_counter()
            n = oracle_results(args.spider, results, args.limit)
            print(f"oracle run: {n} questions in {time.perf_counter() - started:.1f} s")
        questions = sum(1 for _ in results.open(encoding="utf-8"))
        print(f"results: {results.stat().st_size / 1e6:.1f} MB, {questions} questions with full traces")
        page = folder / "report.html"
        times = [build([results], page) for _ in range(3)]
        size = page.stat().st_size
        wall, cpu = min(times)
        print(
            f"report: built in {wall:.2f} s wall, {cpu:.2f} s CPU (best of 3; load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs); {size / 1e6:.2f} MB, "
            f"{size / questions * 1000 / 1e6:.2f} MB per 1,000 questions"
        )
        compare = folder / "compare.html"
        wall, cpu = build([results, results], compare)
        print(
            f"comparison of the run with itself: {wall:.2f} s wall, {cpu:.2f} s CPU, "
            f"{compare.stat().st_size / 1e6:.2f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
