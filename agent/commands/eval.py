"""`sqale-agent eval`: run the agent over a Spider, BIRD or KaggleDBQA question set and score it."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import anyio

from ..backends.advice import cache_advice
from ..backends.base import EngineFacts, ModelBackend, SamplingSettings
from ..backends.registry import BackendSettings, make_backend
from ..engine_start import EngineSession, engine_session, traced_backend
from ..episode import EpisodeSettings
from ..errors import ConfigError, SqaleError
from ..evaluation import html_report
from ..evaluation.datasets import Benchmark, Dataset, Selection, load_dataset, select_examples
from ..evaluation.golden_dataset import load_golden
from ..evaluation.html_report.cache_reuse import results_verdicts
from ..evaluation.progress import ProgressLine
from ..evaluation.records import TraceKind, read_records
from ..evaluation.runner import EvalSettings, EvaluationAborted, RunResult, evaluate, run_info
from ..evaluation.scoring import QueryLimits
from ..evaluation.summary import render_summary, summarize, summary_path_for, write_summary
from ..golden_file import is_golden_file
from ..telemetry.setup import start_telemetry
from ..text import plural
from ..tools import DEFAULT_ENVIRONMENT, Environment
from .ask import SERVICE
from .backend_options import backend_choice, command_settings, prompts_from_args
from .environment_option import environment_from_args
from .eval_options import add_arguments as add_arguments  # the command's options, where cli.py reads them

EXIT_OK, EXIT_ABORTED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


DESCRIPTION = (
    "Run the agent on each question of a text-to-SQL benchmark, execute its SQL and "
    "the gold SQL, and report execution accuracy."
)


def run(args: argparse.Namespace) -> int:
    """Run the evaluation; print the summary table; return the exit code."""
    try:
        settings = settings_from_args(args)
        choice = backend_choice(args)
        prompts = prompts_from_args(args)
        if args.report:
            html_report.require_plotting()  # before the run, not after hours of it
        benchmark = None if args.format == "auto" else Benchmark(args.format)
        dataset = load_questions(args, benchmark)
        selection = select_examples(
            dataset, db_ids=args.db_id, difficulties=args.difficulty, offset=args.offset, limit=args.limit
        )
        start_telemetry(SERVICE)  # each question a trace, when the OTEL_* variables ask for it
    except SqaleError as exc:
        print(f"sqale-agent eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not selection.examples:
        print(
            "sqale-agent eval: no question to run: the selection is empty (check --db-id, --difficulty, "
            "--offset, --limit, and that the database files exist)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    out_path = Path(args.out) if args.out else default_out_path(dataset.benchmark)
    summary_path = Path(args.summary) if args.summary else summary_path_for(out_path)
    print(describe_run(dataset, selection, choice, out_path, settings.episode.environment), file=sys.stderr)

    async def run_on_engines() -> tuple[RunResult, EvalSettings, EngineSession]:
        async with engine_session(
            choice, settings.episode, runtime_slots=settings.runtime_slots, wanted_slots=settings.concurrency
        ) as session:
            fitted = settings_for_engines(settings, session)
            progress = ProgressLine(
                len(selection.examples), fitted.samples, sys.stderr, tty=sys.stderr.isatty()
            )
            # The engine's address (and what it is): a comparison of two runs says which engine each ran on.
            kind = session.engine_kind
            run_details = run_info(
                fitted,
                backend=choice.backend,
                extra={
                    "engine": session.where,
                    "prompts": prompt_label(args),
                    **({"engine_kind": kind} if kind is not None else {}),
                },
            )
            result = await evaluate(
                dataset,
                selection,
                partial(backend_for_run, choice, session.facts),
                model=session.model_label,
                out_path=out_path,
                resume=args.resume,
                settings=fitted,
                prompts=prompts,
                progress=progress,
                run=run_details,
            )
            return result, fitted, session

    try:
        result, settings, session = anyio.run(run_on_engines)
    except EvaluationAborted as exc:
        print(f"sqale-agent eval: {exc}", file=sys.stderr)
        print(
            f"sqale-agent eval: {recorded_text(len(read_records(out_path)))} in {out_path}; "
            f"{resume_hint(args, out_path)}",
            file=sys.stderr,
        )
        return EXIT_ABORTED
    except SqaleError as exc:
        print(f"sqale-agent eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        recorded = len(read_records(out_path))
        print(
            f"\nsqale-agent eval: interrupted; {recorded_text(recorded)} in {out_path}; "
            f"{resume_hint(args, out_path)}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    summary = summarize(
        result.records,
        benchmark=dataset.benchmark.value,
        model=session.model_label,
        samples=settings.samples,
        selected=len(selection.examples),
        missing_db_ids=selection.missing_db_ids,
        missing_db=len(selection.missing_db),
    )
    write_summary(summary, summary_path)
    print(render_summary(summary), end="")
    warn_of_prompt_cache(out_path, session.where, session.engine_kind)
    print(
        f"\n{plural(result.ran, 'question')} run in {result.seconds:.1f} s ({result.resumed} kept from an "
        f"earlier run); results: {out_path}; summary: {summary_path}"
    )
    if args.report:
        try:
            report = html_report.write_report([out_path], Path(args.report))
        except SqaleError as exc:
            print(f"sqale-agent eval: the results are saved, but the report failed: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"report: {report}")
    if not any_model_answer(result):
        print(
            "sqale-agent eval: no question got an answer from the model (every request to the runtime "
            "failed; see the errors above); check it with `sqale-agent doctor`, then "
            f"{resume_hint(args, out_path)}",
            file=sys.stderr,
        )
        return EXIT_ABORTED
    return EXIT_OK


def settings_for_engines(settings: EvalSettings, session: EngineSession) -> EvalSettings:
    """The run's settings within what the engines said: their model's label, their slots when they
    serve fewer episodes at once than --concurrency, the budget their context holds (each change
    said on stderr)."""
    info = session.model_check.info
    if info is not None and info.served_as is not None:
        print(
            f"sqale-agent eval: the engine does not list the model {info.name} but answers that name "
            f"with its own model {info.served_as}; the results are labelled {info.served_as}",
            file=sys.stderr,
        )
    slots = session.slots
    if settings.runtime_slots is None and slots.slots < settings.concurrency:
        print(
            f"runtime slots: {slots.slots} ({slots.reason}): fewer episodes talk to the model at once "
            f"than --concurrency {settings.concurrency}",
            file=sys.stderr,
        )
        settings = replace(settings, runtime_slots=slots.slots)
    if session.budget_note is not None:
        print(f"sqale-agent eval: {session.budget_note}", file=sys.stderr)
        settings = replace(settings, episode=session.episode)
    return settings


def backend_for_run(
    choice: BackendSettings, facts: Sequence[EngineFacts], sampling: SamplingSettings
) -> ModelBackend:
    """One of the run's backends (one per seed), told what the engines said of themselves."""
    backend = make_backend(choice, sampling)
    backend.remember_engines(facts)
    return traced_backend(backend, choice.backend, facts)  # as the session's: each model call a span


def warn_of_prompt_cache(out_path: Path, engine: str, engine_kind: str | None) -> None:
    """The cache-health warning, once per engine, when later rounds kept re-evaluating their prompt."""
    for verdict in results_verdicts(out_path, engine):
        if verdict.unhealthy:
            print(f"sqale-agent eval: {verdict.warning(cache_advice(engine_kind))}", file=sys.stderr)


def any_model_answer(result: RunResult) -> bool:
    """True when at least one sample of the run got a reply from the model runtime."""
    return any(not sample.outcome.is_backend for record in result.records for sample in record.samples)


def resume_hint(args: argparse.Namespace, out_path: Path) -> str:
    """How to continue this run: the same command with --resume and this --out file."""
    out = "" if args.out else f" --out {shlex.quote(str(out_path))}"
    return f"rerun the same command with --resume{out} to continue"


def load_questions(args: argparse.Namespace, benchmark: Benchmark | None) -> Dataset:
    """The question set: golden questions for a .jsonl file (or --format golden), else a benchmark."""
    path = Path(args.dataset).expanduser()
    if benchmark is Benchmark.GOLDEN or (benchmark is None and is_golden_file(path)):
        return load_golden(path, database_flags(args.db))
    if args.db:
        raise ConfigError(
            "--db ALIAS=PATH is for golden questions (.jsonl); benchmarks find their databases under --db-root"
        )
    return load_dataset(path, benchmark=benchmark, db_root=args.db_root, split=args.split)


def database_flags(items: list[str]) -> dict[str, Path]:
    """`ALIAS=PATH` strings into a mapping (ConfigError for a malformed one)."""
    out: dict[str, Path] = {}
    for item in items:
        alias, sep, path = item.partition("=")
        if not sep or not alias.strip() or not path.strip():
            raise ConfigError(f"--db {item!r}: write it as ALIAS=PATH, e.g. --db sales=sales.db")
        out[alias.strip()] = Path(path.strip()).expanduser()
    return out


def settings_from_args(args: argparse.Namespace) -> EvalSettings:
    """The run settings the options describe (ConfigError when out of range)."""
    if bool(args.verified) != bool(args.verified_hints):
        raise ConfigError(
            "eval uses a verified library only for hints: give both --verified FILE.jsonl "
            "and --verified-hints (the run without them is the one to compare with)"
        )
    library = Path(args.verified).expanduser() if args.verified else None
    if library is not None and not library.is_file():
        raise ConfigError(f"--verified {args.verified}: no such file; give a golden-question file")
    return EvalSettings(
        verified_hints=library,
        samples=args.samples,
        concurrency=args.concurrency,
        runtime_slots=args.runtime_slots,
        seed=args.seed,
        limits=QueryLimits(timeout=args.scoring_timeout, max_rows=args.max_result_rows),
        tool_query_timeout=args.tool_query_timeout,
        max_backend_failures=args.max_backend_failures,
        trace=TraceKind(args.trace),
        early_stop=args.early_stop,
        episode=EpisodeSettings(environment=environment_from_args(args)),
        trace_content=bool(command_settings(args, ("trace_content",), os.environ).values.get("trace_content")),
    )


def prompt_label(args: argparse.Namespace) -> str:
    """Which prompts the run used, by file name: `ours`, or the reference agent and any overrides."""
    parts = []
    if args.reference_agent:
        parts.append(f"reference agent {Path(args.reference_agent).name}")
    if args.system_prompt:
        parts.append(f"system prompt {Path(args.system_prompt).name}")
    if args.user_template:
        parts.append(f"user template {Path(args.user_template).name}")
    if args.assistant_prefix:
        parts.append(f"assistant prefix {args.assistant_prefix!r}")
    return ", ".join(parts) or "ours"


def default_out_path(benchmark: Benchmark) -> Path:
    """eval-results/<benchmark>-<YYYYmmdd-HHMMSS>.jsonl in the current folder."""
    return Path("eval-results") / f"{benchmark.value}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"


def recorded_text(n: int) -> str:
    """`1 question is recorded`, `3 questions are recorded`."""
    return plural(n, "question is recorded", "questions are recorded")


def describe_run(
    dataset: Dataset,
    selection: Selection,
    choice: BackendSettings,
    out_path: Path,
    environment: Environment = DEFAULT_ENVIRONMENT,
) -> str:
    """The line printed before the run starts."""
    missing = ", ".join(selection.missing_db_ids)
    skipped = f" ({len(selection.missing_db)} skipped: database missing: {missing})" if missing else ""
    questions = plural(len(selection.examples), "question")
    return (
        f"{dataset.benchmark.value}: {questions} from {dataset.source}{skipped}; "
        f"model {choice.model} via {choice.backend} ({choice.address}); {environment} environment; "
        f"results -> {out_path}"
    )
