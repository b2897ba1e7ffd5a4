"""`sqale-agent ask`: answer one question on one database with the model."""

from __future__ import annotations

import argparse
import json
import os
import sys

import anyio

from ..asking import Asked, Question, SampleBackends, ask, summary_text
from ..backends.base import SamplingSettings
from ..backends.settings import make_backend
from ..backends.slots import RuntimeSlots, gather_engine_facts, resolve_runtime_slots
from ..episode import EpisodeResult, EpisodeSettings, EpisodeStatus, Round
from ..episode_text import progress_message, render_answer, render_trace, result_as_json
from ..errors import ConfigError
from ..loop import run_episode
from ..notes import evidence_with_notes, read_notes
from ..options import add_flags
from ..settings.agent_settings import AgentSettings
from ..settings.aliases import check_plain_path
from ..sqlite import Database
from .backend_options import add_backend_arguments, backend_choice, command_settings, prompts_from_args
from .db_options import add_database_arguments, hide_rules
from .environment_option import add_environment_argument, environment_from_args

EXIT_NO_ANSWER = 3  # the model produced no runnable SQL (1: our error, 2: a usage error, 130: Ctrl-C)
FACTS_SECONDS = 5.0  # asking the engine how many requests it serves at once

NAME = "ask"
HELP = "answer a question on an SQLite database"
DESCRIPTION = ("The model explores the database with its tools, tests its SQL and answers.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `sqale-agent ask`."""
    parser.add_argument("question", help="the question, in plain language")
    add_database_arguments(parser)
    parser.add_argument("--evidence", metavar="TEXT", help="a hint such as BIRD's evidence note")
    parser.add_argument("--notes", metavar="FILE",
                        help="a UTF-8 file of facts about the data, one per line (e.g. 'amounts are "
                             "in cents'); the model reads them before --evidence")
    add_flags(parser, AgentSettings, "max_notes_chars", "seed", "samples", "runtime_slots", "max_rows",
              "max_result_bytes", field_defaults=True)
    parser.add_argument("--json", action="store_true", help="print the whole episode result as JSON")
    parser.add_argument("--trace", action="store_true",
                        help="print each round: thoughts, calls and results")
    add_backend_arguments(parser)
    add_environment_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Run the episodes, vote, and print the answer (or the JSON result)."""
    if args.samples < 1:
        raise ConfigError("--samples must be 1 or more")
    question = args.question.strip()
    if not question:
        raise ConfigError('the question is empty; ask one in plain language, e.g. '
                          'sqale-agent ask --db shop.db "How many orders are there?"')
    if args.max_rows < 1:
        raise ConfigError(f"--max-rows {args.max_rows}: give 1 or more rows to keep")
    check_plain_path(args.db, NAME)
    choice = backend_choice(args)
    given_slots = command_settings(args, ("runtime_slots",), os.environ).values.get("runtime_slots")
    prompts = prompts_from_args(args)
    rules = hide_rules(args)
    settings = EpisodeSettings(result_rows=max(1, args.max_rows), environment=environment_from_args(args),
                               result_bytes=max(1024, args.max_result_bytes))
    notes = read_notes(args.notes, max_chars=args.max_notes_chars) if args.notes else None
    evidence = evidence_with_notes(notes.text if notes else None, args.evidence)
    live = sys.stderr.isatty()

    async def report(k: int, played: Round) -> None:
        line = progress_message(played, settings.max_tool_turns)
        if args.samples > 1:
            line = f"sample {k + 1}/{args.samples} {line}"
        if live:
            print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    async def episodes() -> Asked:
        backend = make_backend(choice, SamplingSettings())
        try:
            # As in the server: samples share the runtime's slots (what the engine says it serves
            # at once, else the backend's default). One sample needs no more than one.
            facts = await gather_engine_facts(backend, FACTS_SECONDS) if args.samples > 1 else ()
            slots = RuntimeSlots(resolve_runtime_slots(given_slots, backend, os.environ, facts).slots)
            with Database(args.db, hide=rules) as db:
                asked = Question(question, db, evidence, settings, prompts)
                return await ask(asked, SampleBackends.seeded(backend, args.samples, args.seed), run_episode,
                                 slot=lambda k: slots.slot(), on_round=report)
        finally:
            await backend.aclose()
            if live:
                print("\r\033[K", end="", file=sys.stderr, flush=True)

    asked = anyio.run(episodes)
    # Without an episode timeout every sample finishes (or our error was raised).
    assert asked.chosen is not None and asked.chosen.result is not None
    chosen = asked.chosen.result
    if args.json:
        data = result_as_json(chosen)
        if args.samples > 1:
            data.update(asked.vote_fields())
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return exit_status(chosen)
    if args.trace:
        print(render_trace(chosen))
        print()
    print(render_answer(chosen))
    if args.samples > 1:
        print()
        print(summary_text(asked.summary()))
    return exit_status(chosen)


def exit_status(result: EpisodeResult) -> int:
    """0 when the model produced SQL that ran (even as a fallback); EXIT_NO_ANSWER when it did not."""
    return EXIT_NO_ANSWER if result.status is EpisodeStatus.FAILED else 0
