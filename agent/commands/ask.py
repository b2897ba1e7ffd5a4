"""`sqale-agent ask`: answer one question on one database with the model."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio

from ..agent_settings import AgentSettings
from ..backends.advice import cache_advice
from ..backends.runtime_slots import RuntimeSlots
from ..engine_cache import episode_reuse, verdicts
from ..engine_start import engine_session
from ..episode import EpisodeResult, EpisodeSettings, EpisodeStatus, Round
from ..episode_text import cut_note, json_cell, last_reply_excerpt, progress_message
from ..errors import ConfigError
from ..loop import run_episode
from ..notes import evidence_with_notes, read_notes
from ..options import add_flags
from ..sampling import Question, SampleBackends, SampledAnswer, sample_question, summary_text, trace_outcome
from ..settings import check_plain_path
from ..sqlite import Database
from ..telemetry.gate import question_span
from ..telemetry.setup import start_telemetry
from ..text import escape_unsafe, plural
from ..tools.result_text import format_cell, render_grid
from ..untrusted import SqlAuthor, sql_block
from ..verified import Consulted, consult, params_text, provenance_text, similar_text
from .backend_options import add_backend_arguments, backend_choice, command_settings, prompts_from_args
from .db_options import add_database_arguments, database_path, hide_rules
from .environment_option import add_environment_argument, environment_from_args
from .verified_options import add_verified_arguments, open_library

SERVICE = "sqale-agent"  # OpenTelemetry's service name for ask and eval, unless OTEL_SERVICE_NAME says
EXIT_NO_ANSWER = 3  # the model produced no runnable SQL (1: our error, 2: a usage error, 130: Ctrl-C)

DESCRIPTION = "The model explores the database with its tools, tests its SQL and answers."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `sqale-agent ask`."""
    parser.add_argument("question", help="the question, in plain language")
    add_database_arguments(parser)
    parser.add_argument("--evidence", metavar="TEXT", help="a hint such as BIRD's evidence note")
    parser.add_argument(
        "--notes",
        metavar="FILE",
        help="a UTF-8 file of facts about the data, one per line (e.g. 'amounts are "
        "in cents'); the model reads them before --evidence",
    )
    add_flags(
        parser,
        AgentSettings,
        "max_notes_chars",
        "seed",
        "samples",
        "runtime_slots",
        "max_rows",
        "max_result_bytes",
        field_defaults=True,
    )
    add_flags(parser, AgentSettings, "trace_content")
    parser.add_argument("--json", action="store_true", help="print the whole episode result as JSON")
    parser.add_argument("--trace", action="store_true", help="print each round: thoughts, calls and results")
    add_verified_arguments(parser)
    add_backend_arguments(parser)
    add_environment_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Run the episodes, vote, and print the answer (or the JSON result)."""
    if args.samples < 1:
        raise ConfigError("--samples must be 1 or more")
    question = args.question.strip()
    if not question:
        raise ConfigError(
            "the question is empty; ask one in plain language, e.g. "
            'sqale-agent ask --db shop.db "How many orders are there?"'
        )
    if args.max_rows < 1:
        raise ConfigError(f"--max-rows {args.max_rows}: give 1 or more rows to keep")
    path = database_path(args)
    check_plain_path(path, args.command)
    choice = backend_choice(args)
    given_slots = command_settings(args, ("runtime_slots",), os.environ).values.get("runtime_slots")
    prompts = prompts_from_args(args)
    rules = hide_rules(args)
    settings = EpisodeSettings(
        result_rows=max(1, args.max_rows),
        environment=environment_from_args(args),
        result_bytes=max(1024, args.max_result_bytes),
    )
    notes = read_notes(args.notes, max_chars=args.max_notes_chars) if args.notes else None
    content = bool(command_settings(args, ("trace_content",), os.environ).values.get("trace_content"))
    live = sys.stderr.isatty()

    async def report(k: int, played: Round) -> None:
        line = progress_message(played, settings.max_tool_turns)
        if args.samples > 1:
            line = f"sample {k + 1}/{args.samples} {line}"
        if live:
            print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    library = open_library(args, Path(path).expanduser())

    async def answered() -> tuple[SampledAnswer | None, Consulted | None]:
        with Database(path, hide=rules) as db, question_span("ask", capture_content=content) as traced:
            traced.describe(
                database=db.path.name,
                samples=args.samples,
                question=question,
                evidence=args.evidence,
                hidden_names=db.all_hidden_names,
            )
            asked, consulted = await episodes(db)
            if asked is not None:
                trace_outcome(traced, asked)
            elif consulted is not None and consulted.answer is not None and consulted.provenance is not None:
                traced.finish(
                    "verified",
                    consulted.answer.stop_reason.value,
                    rows=consulted.answer.row_count,
                    verified_tier=consulted.provenance.tier,
                    sql=consulted.answer.sql,
                )
            return asked, consulted

    async def episodes(db: Database) -> tuple[SampledAnswer | None, Consulted | None]:
        consulted = None
        if library is not None:
            consulted = await consult(library, db, question, args.evidence, settings=settings)
            if consulted.answer is not None:
                return None, consulted  # verified: no model asked
        hints = consulted.hints() if consulted is not None and args.verified_hints else None
        model_evidence = evidence_with_notes(
            evidence_with_notes(notes.text if notes else None, hints), args.evidence
        )
        # As in the server: samples share the runtime's slots (what the engine says it serves at
        # once, else the backend's default), and the budget fits the engine's context.
        try:
            async with engine_session(
                choice, settings, runtime_slots=given_slots, check_model=False
            ) as session:
                if session.budget_note is not None:
                    print(f"sqale-agent ask: {session.budget_note}", file=sys.stderr)
                slots = RuntimeSlots(session.slots.slots)
                asked = Question(question, db, model_evidence, session.episode, prompts)
                backends = SampleBackends.seeded(session.backend, args.samples, args.seed)
                done = await sample_question(
                    asked, backends, run_episode, slot=lambda k: slots.slot(), on_round=report
                )
                warn_of_prompt_cache(done, session.where, session.engine_kind)
                return done, consulted
        finally:
            if live:
                print("\r\033[K", end="", file=sys.stderr, flush=True)

    start_telemetry(SERVICE)  # the question a trace, when the OTEL_* variables ask for it
    asked, consulted = anyio.run(answered)
    if asked is None:
        assert consulted is not None
        return print_verified(consulted, as_json=args.json)
    # Without an episode timeout every sample finishes (or our error was raised).
    assert asked.chosen is not None and asked.chosen.result is not None
    chosen = asked.chosen.result
    if args.json:
        data = result_as_json(chosen)
        if args.samples > 1:
            data.update(asked.vote_fields())
        data.update(library_fields(consulted))
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return exit_status(chosen)
    if args.trace:
        print(render_trace(chosen))
        print()
    print(render_answer(chosen))
    if args.samples > 1:
        print()
        print(summary_text(asked.summary(), fence=lambda sql: sql_block(sql, exact=EXACT_SQL)))
    for paragraph in library_paragraphs(consulted):
        print()
        print(paragraph)
    return exit_status(chosen)


def warn_of_prompt_cache(asked: SampledAnswer, engine: str, kind: str | None) -> None:
    """The cache-health warning when the rounds after the first kept re-evaluating their prompt."""
    rounds = [
        r
        for run in asked.outcome.results.values()
        if run.result is not None
        for r in episode_reuse(run.result.rounds, engine)
    ]
    for verdict in verdicts(rounds):
        if verdict.unhealthy:
            print(f"\nsqale-agent ask: {verdict.warning(cache_advice(kind))}", file=sys.stderr)


def library_paragraphs(consulted: Consulted | None) -> list[str]:
    """Beside the model's answer: why the library's own entry was not used, the similar entries."""
    if consulted is None:
        return []
    listed = similar_text(consulted.similar, exact=EXACT_SQL)
    return [*([f"note: {consulted.not_served}"] if consulted.not_served else []), *([listed] if listed else [])]


def print_verified(consulted: Consulted, *, as_json: bool) -> int:
    """Print the library's answer to a repeated question (no model was asked)."""
    assert consulted.answer is not None and consulted.provenance is not None
    if as_json:
        data = {**result_as_json(consulted.answer), **library_fields(consulted)}
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    print(render_answer(consulted.answer))
    print()
    read = params_text(consulted.provenance.params)  # a template's values, as read from the question
    if read:
        print(read)
    print(f"{provenance_text(consulted.provenance)} Leave out --verified for the model's own answer.")
    return 0


def library_fields(consulted: Consulted | None) -> dict[str, Any]:
    """What the library adds to `ask --json`: the verified answer's source, or the similar entries."""
    if consulted is None:
        return {}
    if consulted.provenance is not None:
        return {"verified": asdict(consulted.provenance)}
    return {
        "similar_verified": [{"question": e.question, "sql": e.sql, "line": e.line} for e in consulted.similar],
        "verified_note": consulted.not_served,
    }


def exit_status(result: EpisodeResult) -> int:
    """0 when the model produced SQL that ran (even as a fallback); EXIT_NO_ANSWER when it did not."""
    return EXIT_NO_ANSWER if result.status is EpisodeStatus.FAILED else 0


# How the answer is printed: the SQL, the first rows, what is missing; --trace and --json.
ANSWER_ROWS = 20
ANSWER_CELL_CHARS = 60
EXACT_SQL = "`ask --json`"  # where the printed answer sends a reader for the exact SQL


def render_rows(
    columns: tuple[str, ...],
    rows: tuple[tuple[Any, ...], ...],
    *,
    max_rows: int = ANSWER_ROWS,
    cell_chars: int = ANSWER_CELL_CHARS,
) -> str:
    """An aligned table of the first rows."""
    cells = [[format_cell(v, cell_chars) for v in row] for row in rows[:max_rows]]
    return render_grid(list(columns), cells)


def render_answer(result: EpisodeResult, *, max_rows: int = ANSWER_ROWS) -> str:
    """The SQL in a fence, then the first rows as a table, then what is missing."""
    lines = [
        f"status: {result.status.value} ({result.stop_reason.value}); {len(result.rounds)} rounds, "
        f"{result.tool_calls} tool calls, {result.seconds:.1f} s"
    ]
    last_reply = last_reply_excerpt(result) if result.status is EpisodeStatus.FAILED else None
    if result.sql is None:
        lines.append(f"no SQL: {result.error or 'the model produced nothing runnable'}")
        if last_reply:
            lines.append(f"the model's last reply: {escape_unsafe(last_reply)}")
        return "\n".join(lines)
    author = SqlAuthor.LIBRARY if result.status is EpisodeStatus.VERIFIED else SqlAuthor.MODEL
    lines.append(sql_block(result.sql.strip(), author=author, ran=not result.error, exact=EXACT_SQL))
    if result.error:
        lines.append(f"error: {result.error}")
        if last_reply:
            lines.append(f"the model's last reply: {escape_unsafe(last_reply)}")
        return "\n".join(lines)
    if result.columns:
        lines.append(render_rows(result.columns, result.rows, max_rows=max_rows))
    shown = min(max_rows, len(result.rows))
    total = plural(result.row_count, "row")
    if result.truncated and result.row_count <= len(result.rows):
        total = f"more than {total}"
    lines.append(
        f"[{total}; first {shown} shown]" if shown < result.row_count or result.truncated else f"[{total}]"
    )
    if result.cut is not None:
        lines.append(f"[{cut_note(result.cut, len(result.rows))}]")
    return "\n".join(lines)


def render_trace(result: EpisodeResult) -> str:
    """Every round: the model's thoughts, its calls, and what each call returned."""
    out: list[str] = []
    for played in result.rounds:
        head = "final turn" if played.final else f"round {played.index}"
        cached = "unknown" if played.cached_tokens is None else played.cached_tokens
        out.append(
            f"=== {head}  (model {played.model_seconds:.2f} s, tools {played.tool_seconds:.3f} s, "
            f"tokens {played.prompt_tokens}+{played.completion_tokens}, cached {cached}, "
            f"context {played.context_tokens})"
        )
        if played.think:
            out += ["--- thinking", played.think.strip()]
        for record in played.calls:
            args = json.dumps(record.call.args, ensure_ascii=False)
            flag = "" if record.ok else "  [error]"
            dup = "  [duplicate, not run again]" if record.duplicate else ""
            out += [f"--- {record.call.tool} {args}{flag}{dup}", record.text.rstrip()]
        for note in played.notes:
            out.append(f"--- note: {note}")
        if not played.calls and not played.think:
            out += ["--- completion", played.completion.strip()]
    return "\n".join(out)


def result_as_json(result: EpisodeResult) -> dict[str, Any]:
    """The episode result as JSON-safe data (blobs as `<blob N bytes>`)."""
    data = asdict(result)
    data["status"] = result.status.value
    data["stop_reason"] = result.stop_reason.value
    data["rows"] = [[json_cell(v) for v in row] for row in result.rows]
    data["tool_calls"] = result.tool_calls
    data["tables_seen"] = sorted(result.tables_seen)
    for played in data["rounds"]:
        for record in played["calls"]:
            record["tables"] = sorted(record["tables"])
    return data
