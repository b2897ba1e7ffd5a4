"""The options of `sqale-agent eval`: the questions to run, how to run them, and where the results go."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..agent_settings import AgentSettings
from ..backends.openai_engines import ENGINES_THAT_SAY
from ..evaluation.datasets import KAGGLE_SPLITS, Benchmark
from ..evaluation.records import TraceKind
from ..evaluation.scoring import QueryLimits
from ..options import add_flags
from ..sqlite import WorkerLimits
from .backend_options import add_backend_arguments
from .environment_option import add_environment_argument


class _DeprecatedAlias(argparse.Action):
    """Stores the value under the new option's name and says on stderr which name to use."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"sqale-agent eval: {option_string} is deprecated; it is now --scoring-timeout "
            "(the model's own statement limit is --tool-query-timeout)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `sqale-agent eval`."""
    parser.add_argument(
        "dataset",
        help="a Spider/BIRD folder or question file, a KaggleDBQA folder, "
        "or your own golden questions (a .jsonl file)",
    )
    data = parser.add_argument_group("questions")
    data.add_argument(
        "--format", choices=["auto", *Benchmark], default="auto", help="dataset format (default: detected)"
    )
    data.add_argument(
        "--db",
        action="append",
        default=[],
        metavar="ALIAS=PATH",
        help="for golden questions: the database file a `database` alias names (repeatable)",
    )
    data.add_argument(
        "--db-root",
        metavar="DIR",
        help="folder with <db_id>/<db_id>.sqlite (or <db_id>.sqlite); default: the "
        "benchmark's usual place next to the questions",
    )
    data.add_argument(
        "--split",
        choices=KAGGLE_SPLITS,
        default="all",
        help="KaggleDBQA examples to use (default all; 'test' is its plain-testing split)",
    )
    data.add_argument(
        "--db-id",
        action="append",
        default=[],
        metavar="ID",
        help="only questions on this database (repeatable)",
    )
    data.add_argument(
        "--difficulty",
        action="append",
        default=[],
        metavar="LEVEL",
        help="only this difficulty, e.g. easy/medium/hard/extra (Spider) or "
        "simple/moderate/challenging (BIRD), or this tag (golden); repeatable",
    )
    data.add_argument("--offset", type=int, default=0, metavar="N", help="skip this many selected questions")
    data.add_argument("--limit", type=int, metavar="N", help="run at most this many questions")
    run_group = parser.add_argument_group("run")
    run_group.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="episodes at once (default 1)"
    )
    run_group.add_argument(
        "--runtime-slots",
        type=int,
        metavar="N",
        help="episodes talking to the model at once (default: --concurrency, or what "
        f"the engine serves at once if fewer: {ENGINES_THAT_SAY})",
    )
    add_flags(run_group, AgentSettings, "samples", field_defaults=True)
    run_group.add_argument(
        "--no-early-stop",
        dest="early_stop",
        action="store_false",
        help="run all K samples of every question, even after a majority agrees "
        "(measures single-sample accuracy on every sample; the vote is the same)",
    )
    add_flags(run_group, AgentSettings, "seed", defaults={"seed": 0})  # a run is repeatable by default
    run_group.add_argument(
        "--scoring-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="limit for executing gold and predicted SQL when scoring (default 30, as BIRD)",
    )
    # The old spelling, read as --scoring-timeout; the server's --query-timeout is another limit.
    run_group.add_argument(
        "--query-timeout", type=float, dest="scoring_timeout", action=_DeprecatedAlias, help=argparse.SUPPRESS
    )
    run_group.add_argument(
        "--tool-query-timeout",
        type=float,
        default=WorkerLimits.query_timeout,
        metavar="SECONDS",
        help=f"limit for the model's own queries (default {WorkerLimits.query_timeout:g})",
    )
    run_group.add_argument(
        "--max-result-rows",
        type=int,
        default=QueryLimits.max_rows,
        metavar="N",
        help=f"results with more rows are not compared (default {QueryLimits.max_rows:,})",
    )
    run_group.add_argument(
        "--verified",
        metavar="FILE.jsonl",
        help="a verified library (golden questions; it may be this very file): with "
        "--verified-hints, each question's most similar entries (its own left out) "
        "go to the model as evidence",
    )
    add_flags(run_group, AgentSettings, "verified_hints", field_defaults=True)
    add_flags(run_group, AgentSettings, "trace_content")
    run_group.add_argument(
        "--max-backend-failures",
        type=int,
        default=3,
        metavar="N",
        help="stop after N episodes in a row fail in the backend (default 3)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--out",
        metavar="PATH",
        help="results file, one JSON line per question (default eval-results/<benchmark>-<time>.jsonl)",
    )
    out.add_argument(
        "--resume",
        action="store_true",
        help="continue the run recorded in --out: questions already there are kept, "
        "except those whose episodes failed in the backend, which run again",
    )
    out.add_argument(
        "--summary", metavar="PATH", help="JSON summary file (default: next to --out, <name>.summary.json)"
    )
    out.add_argument(
        "--report",
        metavar="PATH",
        help="also write the HTML report of the whole run (resumed questions included) "
        "to PATH; needs matplotlib (the `report` extra: the run says how to add it)",
    )
    out.add_argument(
        "--trace",
        choices=list(TraceKind),
        default=TraceKind.FULL.value,
        help="episode detail kept per question: full (default), calls (no tool result texts) or none",
    )
    add_backend_arguments(parser)
    add_environment_argument(parser)
