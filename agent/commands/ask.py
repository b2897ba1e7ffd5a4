"""`sqale-agent ask`: answer one question on one database with the model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio

from ..backends.base import SamplingSettings
from ..backends.settings import make_backend
from ..episode import EpisodeSettings, Round
from ..loop import run_episode
from ..report import progress_message, render_answer, render_trace, result_as_json
from ..sqlite import Database
from .backend_options import add_backend_arguments, backend_choice, prompts_from_args
from .db_options import add_hide_argument, hide_rules
from .environment_option import add_environment_argument, environment_from_args


def register(subparsers: Any) -> None:
    """Add the `ask` subcommand."""
    parser = subparsers.add_parser(
        "ask", help="answer a question on an SQLite database",
        description="The model explores the database with its tools, tests its SQL and answers.")
    parser.add_argument("question", help="the question, in plain language")
    parser.add_argument("--db", required=True, metavar="PATH", help="the SQLite database file")
    add_hide_argument(parser)
    parser.add_argument("--evidence", metavar="TEXT", help="a hint such as BIRD's evidence note")
    parser.add_argument("--seed", type=int, help="sampling seed, for repeatable answers")
    parser.add_argument("--max-rows", type=int, default=50, help="rows of the answer kept (default 50)")
    parser.add_argument("--max-result-bytes", type=int, default=EpisodeSettings.result_bytes,
                        metavar="N", help="bytes the answer's rows may weigh as JSON; cells, columns "
                                          f"and rows are cut to fit (default {EpisodeSettings.result_bytes:,})")
    parser.add_argument("--json", action="store_true", help="print the whole episode result as JSON")
    parser.add_argument("--trace", action="store_true",
                        help="print each round: thoughts, calls and results")
    add_backend_arguments(parser)
    add_environment_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run one episode and print the answer (or the JSON result)."""
    choice = backend_choice(args)
    prompts = prompts_from_args(args)
    rules = hide_rules(args)
    settings = EpisodeSettings(result_rows=max(1, args.max_rows), environment=environment_from_args(args),
                               result_bytes=max(1024, args.max_result_bytes))
    live = sys.stderr.isatty()

    async def report(played: Round) -> None:
        line = progress_message(played, settings.max_tool_turns)
        if live:
            print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    async def episode() -> Any:
        backend = make_backend(choice, SamplingSettings(seed=args.seed))
        try:
            with Database(args.db, hide=rules) as db:
                return await run_episode(args.question, db, backend, evidence=args.evidence,
                                         prompts=prompts, settings=settings, on_round=report)
        finally:
            await backend.aclose()
            if live:
                print("\r\033[K", end="", file=sys.stderr, flush=True)

    result = anyio.run(episode)
    if args.json:
        print(json.dumps(result_as_json(result), ensure_ascii=False, indent=2))
        return 0
    if args.trace:
        print(render_trace(result))
        print()
    print(render_answer(result))
    return 0
