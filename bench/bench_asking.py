"""How often the right answer is among the options a person is shown when the samples disagree.

    python bench/bench_asking.py [--spider DIR] [--samples 3 5] [--right 0.5] [--limit N] [--keep DIR]

Runs `eval` on Spider dev (the runnable questions, as a golden set) with the fake vote policy
(tests/support/policies.py, VotePolicy): each sample submits the gold SQL about `--right` of the
time (the model card gives 44.3% on BIRD dev for a 2B model) and otherwise one of three wrong
variants of it, fixed per question and seed. Every sample runs to the end (--no-early-stop),
as the server runs them when it may ask. Printed per K, from the run's summary (the figures the
HTML report shows beside its calibration chart): how many questions disagreed, and on those how
often the vote's answer was right, the right answer was among the options (at most 4), and any
sample was right. `--keep DIR` keeps each results file and its HTML report there.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent and tests.support

from agent.backends.base import SamplingSettings  # noqa: E402
from agent.evaluation import (  # noqa: E402
    EvalSettings,
    TraceKind,
    evaluate,
    load_dataset,
    read_records,
    select_examples,
    summarize,
)
from agent.evaluation.html_report import write_report  # noqa: E402
from tests.support.policies import PolicyBackend, VotePolicy  # noqa: E402

SPIDER = ROOT.parent / "shared" / "data" / "spider_dev"


def run(spider: Path, samples: int, right: float, limit: int | None, out: Path) -> float:
    """One eval run of the vote policy into `out`; returns its wall time."""
    dataset = load_dataset(spider)
    selection = select_examples(dataset, limit=limit)
    policy = VotePolicy({e.question: e.gold_sql for e in dataset.examples}, right=right)

    def backend(sampling: SamplingSettings) -> PolicyBackend:
        return PolicyBackend(policy, "vote-policy", sampling=sampling, record=False)

    started = time.perf_counter()
    settings = EvalSettings(samples=samples, concurrency=2, early_stop=False, trace=TraceKind.NONE)
    anyio.run(
        lambda: evaluate(dataset, selection, backend, model="vote-policy", out_path=out, settings=settings)
    )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spider", type=Path, default=SPIDER, help="the Spider dev folder")
    parser.add_argument("--samples", type=int, nargs="+", default=[3, 5], help="K per run (default 3 5)")
    parser.add_argument(
        "--right", type=float, default=0.5, help="share of samples answering right (default 0.5)"
    )
    parser.add_argument("--limit", type=int, help="fewer questions, for a quick look")
    parser.add_argument("--keep", type=Path, help="folder to keep the results files and reports in")
    args = parser.parse_args()
    if not args.spider.is_dir():
        print(f"{args.spider} is absent: give --spider DIR", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"Spider dev, fake vote policy (right {args.right:.0%} per sample), every sample to the end")
        print(
            f"{'K':>3} {'scored':>7} {'single':>7} {'voted':>6} {'disagreed':>10} {'vote right':>12} "
            f"{'among options':>14} {'any sample':>12} {'right not shown':>16} {'seconds':>8}"
        )
        for k in args.samples:
            out = folder / f"vote-policy-k{k}.jsonl"
            out.unlink(missing_ok=True)
            seconds = run(args.spider, k, args.right, args.limit, out)
            records = list(read_records(out).values())
            summary = summarize(
                records, benchmark="spider", model="vote-policy", samples=k, selected=len(records)
            )
            a, acc = summary.asking, summary.accuracy
            assert a is not None
            anyone = sum(bool(r.any_correct) for r in records if r.choice is not None and not r.gold_error)
            print(
                f"{k:>3} {summary.questions.scored:>7} {_pct(acc.single):>7} {_pct(acc.ex):>6} "
                f"{a.questions:>10} {_share(a.vote_right, a.questions):>12} "
                f"{_share(a.right_offered, a.questions):>14} {_share(anyone, a.questions):>12} "
                f"{a.right_not_offered:>16} {seconds:>8.0f}"
            )
            if args.keep:
                write_report([out], out.with_suffix(".html"))
    return 0


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _share(n: int, of: int) -> str:
    return f"{n} ({100 * n / of:.1f}%)" if of else "-"


if __name__ == "__main__":
    sys.exit(main())
