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
from ..notes import DEFAULT_MAX_NOTES_CHARS, evidence_with_notes, read_notes
from ..report import progress_message, render_answer, render_trace, result_as_json
from ..sqlite import Database
from .backend_options import add_backend_arguments, backend_choice, prompts_from_args


def register(subparsers: Any) -> None:
    """Add the `ask` subcommand."""
    parser = subparsers.add_parser(
        "ask", help="answer a question on an SQLite database",
        description="The model explores the database with its tools, tests its SQL and answers.")
    parser.add_argument("question", help="the question, in plain language")
    parser.add_argument("--db", required=True, metavar="PATH", help="the SQLite database file")
    parser.add_argument("--evidence", metavar="TEXT", help="a hint such as BIRD's evidence note")
    parser.add_argument("--notes", metavar="FILE",
                        help="a UTF-8 file of facts about the data, one per line (e.g. 'amounts are "
                             "in cents'); the model reads them before --evidence")
    parser.add_argument("--max-notes-chars", type=int, default=DEFAULT_MAX_NOTES_CHARS, metavar="N",
                        help=f"longest notes allowed (default {DEFAULT_MAX_NOTES_CHARS:,})")
    parser.add_argument("--seed", type=int, help="sampling seed, for repeatable answers")
    parser.add_argument("--max-rows", type=int, default=50, help="rows of the answer kept (default 50)")
    parser.add_argument("--json", action="store_true", help="print the whole episode result as JSON")
    parser.add_argument("--trace", action="store_true",
                        help="print each round: thoughts, calls and results")
    add_backend_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run one episode and print the answer (or the JSON result)."""
    choice = backend_choice(args)
    prompts = prompts_from_args(args)
    settings = EpisodeSettings(result_rows=max(1, args.max_rows))
    notes = read_notes(args.notes, max_chars=args.max_notes_chars) if args.notes else None
    evidence = evidence_with_notes(notes.text if notes else None, args.evidence)
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
            with Database(args.db) as db:
                return await run_episode(args.question, db, backend, evidence=evidence,
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
