"""`sqale-agent doctor`: check the runtime, the model and the databases, and say what to fix."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import packages_distributions
from typing import TextIO

import anyio

from ..agent_settings import AgentSettings
from ..backends.advice import cache_advice
from ..backends.base import PROBE_PROMPT, ModelBackend, ModelInfo
from ..backends.runtime_slots import engine_slots
from ..engine_cache import DOCS
from ..engine_start import EngineSession, ModelCheck, engine_session
from ..episode import EpisodeSettings
from ..errors import SqaleError
from ..options import add_flags
from ..prompt import PromptSet, cut_at_chat_token, render_initial_prompt
from ..prompt_files import read_reference_agent
from ..replies import parse_completion
from ..telemetry.setup import TelemetryPlan, extra_installed, telemetry_plan
from ..text import echo_value, plural
from .backend_options import (
    add_backend_arguments,
    backend_choice,
    command_settings,
    config_path,
    prompts_from_args,
)
from .cache_probe import CacheProbe, probe_cache
from .db_options import add_hide_argument, hide_rules
from .doctor_files import check_databases, check_notes

OUR_DISTRIBUTION = "sqale-mcp"
OUR_PACKAGES = ("agent", "mcp_server")
PROBE_SECONDS = 5.0  # a runtime that accepts connections but never answers is reported after this
GENERATION_SECONDS = 60.0  # a one-token completion: the runtime may first load the model
# One question, as an episode opens: the trained agent's first reply thinks briefly and calls a tool.
TOOL_CHECK_QUESTION = "Which tables does this database have?"
TOOL_CHECK_TOKENS = 1_024
TOOL_CHECK_SECONDS = 180.0  # a first reply with thinking, from a 2B model on a laptop's CPU


DESCRIPTION = (
    "Checks the runtime is reachable, the model is installed (and shows its "
    "parameters), the runtime generates (one tiny completion), the model calls a tool when "
    "asked one question (as the trained agent does), which prompt texts it will read (ours, or "
    "the authors' sqale_agent.py with --reference-agent), what the engine says about "
    "itself (version, slots, context) and its known traps, that it serves a second round's "
    "prompt from its cache (a two-round probe), each --db opens, and where the OTEL_* "
    "variables send traces and metrics; prints what to fix."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `sqale-agent doctor`."""
    parser.add_argument(
        "--db", action="append", default=[], metavar="PATH", help="a database to check (repeatable)"
    )
    parser.add_argument(
        "--notes",
        action="append",
        default=[],
        metavar="FILE",
        help="a notes file to check: UTF-8, within the size limit (repeatable)",
    )
    add_flags(parser, AgentSettings, "max_notes_chars", field_defaults=True)
    add_hide_argument(parser)
    add_flags(parser, AgentSettings, "runtime_slots")  # checked as sqale-mcp will use it
    add_backend_arguments(parser)


def package_clashes(providers: Mapping[str, Sequence[str]]) -> list[str]:
    """One line per package of ours that another installed distribution also provides."""
    lines = []
    for package in OUR_PACKAGES:
        others = sorted({d for d in providers.get(package, ()) if d.lower() != OUR_DISTRIBUTION})
        if others:
            lines.append(
                f"[warn] the installed distribution {', '.join(others)} also provides the package "
                f"`{package}`: imports may pick the wrong one; uninstall it or install "
                f"{OUR_DISTRIBUTION} in its own virtual environment"
            )
    return lines


def telemetry_line(plan: TelemetryPlan) -> str:
    """Whether the OTEL_* variables turn tracing on, and where it sends (doctor's line)."""
    mark = "[warn]" if plan.problem is not None else "[ok]  " if plan.on else "[info]"
    return f"{mark} {plan.describe()}"


async def _check_model(args: argparse.Namespace, prompts: PromptSet | None) -> bool:
    choice = backend_choice(args)
    given = command_settings(args, ("runtime_slots",), os.environ).values.get("runtime_slots")
    # The budget as sqale-mcp, ask and eval fit it: the trained one, within the engines' context.
    async with engine_session(choice, EpisodeSettings(), runtime_slots=given, seconds=PROBE_SECONDS) as session:
        subject = f"{choice.backend} at {session.where}"
        if not _report_model_check(subject, session.model_check):
            return False
        generates = await _check_generation(session.backend, choice.backend, subject)
        calls = generates and prompts is not None and await _check_tool_call(session.backend, prompts)
        _report_slots(session)
        if session.budget_note is not None:
            print(f"[warn] {session.budget_note}; sqale-mcp, ask and eval do so by themselves")
        if generates:
            await _check_prompt_cache(session)
    return calls


async def _check_tool_call(backend: ModelBackend, prompts: PromptSet) -> bool:
    """Ask the model one question, as an episode does, and check that its reply calls a tool."""
    prompt = render_initial_prompt(prompts, TOOL_CHECK_QUESTION, None)
    try:
        with anyio.fail_after(TOOL_CHECK_SECONDS):
            completion = await backend.complete(prompt, max_tokens=TOOL_CHECK_TOKENS)
    except SqaleError as exc:
        print(f"[fail] asked the model one question; the request failed: {exc}")
        return False
    except TimeoutError:
        print(
            f"[warn] asked the model one question; its first reply did not finish within "
            f"{TOOL_CHECK_SECONDS:g} s, so whether it calls tools is unknown (run doctor again once the "
            "model is loaded)"
        )
        return True
    parsed = parse_completion(prompts.assistant_prefix + cut_at_chat_token(completion.text))
    if parsed.calls:
        print(
            f"[ok]   asked the model one question: it called {parsed.calls[0].tool}, as the trained agent does"
        )
        return True
    if parsed.problems:
        print(
            f"[warn] asked the model one question: it tried to call a tool in a form the loop cannot read "
            f"({parsed.problems[0]})"
        )
        return True
    reply = echo_value(" ".join(completion.text.split()), 100) or "(nothing)"
    print(
        f"[fail] asked the model one question ({TOOL_CHECK_QUESTION!r}): it called no tool; its reply began: "
        f"{reply}"
    )
    print(
        "       the trained agent's first move is a tool call, so every question would fail: another model "
        "may be served under this name, an Ollama Modelfile whose TEMPLATE is not the raw {{ .Prompt }} may "
        "rewrite the prompt, or a chat endpoint may rebuild it (see docs/engines.md)"
    )
    return False


def _report_texts(args: argparse.Namespace, prompts: PromptSet) -> None:
    """Which prompts and turn texts the model reads: ours, or the authors' file's."""
    reference = read_reference_agent(args.reference_agent) if args.reference_agent else None
    if reference is None:
        print(
            "[info] texts: ours (--reference-agent DIR, the folder the model was downloaded to, uses the "
            "authors' own sqale_agent.py)"
        )
    else:
        print(
            f"[ok]   texts: the authors' {reference.path} (sha256 {reference.sha256}): SYSTEM_PROMPT and "
            "USER_TEMPLATE"
        )
        for use in reference.uses:
            verdict = (
                ("the same as ours" if use.same else "differs from ours; used instead")
                if use.used
                else f"not used: {use.why}"
            )
            print(f"       {use.name} ({use.role}): {verdict}")
    for flag, path in (("--system-prompt", args.system_prompt), ("--user-template", args.user_template)):
        if path:
            print(f"       {flag} {path} replaces that text")
    if prompts.assistant_prefix:
        print(f"[info] every assistant turn opens with {prompts.assistant_prefix!r} (--assistant-prefix)")


def _report_model_check(subject: str, check: ModelCheck) -> bool:
    """Print what the runtime said of the model; False when that is a failure."""
    if check.cannot_check:  # our backends all can; a plug-in may not
        print(f"[info] {subject}: this backend cannot check its model in advance")
        return True
    if check.error is not None:
        print(f"[fail] {subject}: {check.error}")
        return False
    if check.info is None:  # timed out
        print(
            f"[fail] {subject}: accepted the connection but did not answer within "
            f"{PROBE_SECONDS:g} s; check that this address is the model runtime and that it is not stuck"
        )
        return False
    _print_model(subject, check.info)
    return True


def _print_model(subject: str, info: ModelInfo) -> None:
    if info.served_as is None:
        print(f"[ok]   {subject}: model {info.name} is available")
    else:
        print(
            f"[ok]   {subject}: the engine does not list the model {info.name} but answers that "
            f"name with its own model {info.served_as}; answers are labelled {info.served_as}"
        )
    for key, value in sorted(info.details.items()):
        print(f"       {key}: {value}")
    if info.parameters:
        print("       parameters:")
        for line in info.parameters.splitlines():
            print(f"         {line.strip()}")
    for note in info.notes:
        print(f"       note: {note}")


async def _check_generation(backend: ModelBackend, kind: str, subject: str) -> bool:
    """One tiny real completion on each replica: a runtime can list a model and still fail to run it."""
    replicas = backend.per_replica()
    ok = True
    for one in replicas:
        at = f"{kind} at {one.where}" if len(replicas) > 1 and one.where is not None else subject
        try:
            with anyio.fail_after(GENERATION_SECONDS):
                completion = await one.complete(PROBE_PROMPT, max_tokens=1)
        except SqaleError as exc:
            print(f"[fail] {at}: a one-token test completion failed: {exc}")
            print(
                "       the runtime answers but cannot generate: check its log (a crash on the first "
                "completion: see docs/troubleshooting.md)"
            )
            ok = False
        except TimeoutError:
            print(
                f"[fail] {at}: a one-token test completion did not finish within {GENERATION_SECONDS:g} s: "
                "the runtime may still be loading the model, busy with other requests, or stuck; "
                "run doctor again, then check its log"
            )
            ok = False
        else:
            print(
                f"[ok]   {at}: generated {plural(completion.completion_tokens, 'token')} in "
                f"{completion.seconds:.2f} s (a one-token test completion)"
            )
    return ok


def _report_slots(session: EngineSession) -> None:
    """What --runtime-slots will be, what each engine says of itself (what it is, its slots,
    version and context, the traps of its set-up), and the mismatch."""
    slots, facts = session.slots, session.facts
    print(f"[info] runtime slots: {slots.slots} ({slots.reason}): questions beyond that wait their turn")
    for f in facts:
        at = f" at {f.where}" if len(facts) > 1 else ""
        if f.engine is not None:
            print(f"       the engine{at} is {f.engine}")
        if f.slots is not None:
            print(f"       the engine{at} reports {plural(f.slots, 'slot')} ({f.slots_source})")
        for note in f.notes:
            print(f"       {note}")
        if f.version is not None:
            print(f"       the engine{at} says its version is {f.version}")
        if f.context_tokens is not None:
            print(f"       the engine{at} holds {f.context_tokens:,} tokens per sequence ({f.context_source})")
        for warning in f.warnings:
            print(f"[warn] the engine{at}: {warning}")
    told = engine_slots(facts)
    if told is None or told.slots == slots.slots:
        return
    if slots.slots > told.slots:
        print(
            f"[warn] {plural(slots.slots, 'runtime slot')} but the engine serves {told.slots} at once: "
            f"give sqale-mcp --runtime-slots {told.slots}; more questions at once than slots evict "
            "each other's cached prompt, or fail where the engine cuts a request off"
        )
    else:
        print(
            f"       note: give sqale-mcp --runtime-slots {told.slots}: fewer runtime slots than the "
            "engine has leave slots idle"
        )


async def _check_prompt_cache(session: EngineSession) -> None:
    """Two rounds on each engine: does the second round's prompt come from its cache?"""
    facts = session.facts
    kinds = {f.where: f.engine for f in facts}
    for one in session.backend.per_replica():
        where = one.where or session.backend.model
        try:
            with anyio.fail_after(GENERATION_SECONDS):
                probe = await probe_cache(one, where)
        except SqaleError as exc:
            print(f"[warn] prompt cache at {where}: the two-round probe failed: {exc}")
            continue
        except TimeoutError:
            print(
                f"[warn] prompt cache at {where}: the two-round probe did not finish within "
                f"{GENERATION_SECONDS:g} s"
            )
            continue
        _print_probe(where, probe, kinds.get(where, facts[0].engine if len(facts) == 1 else None))


def _print_probe(where: str, probe: CacheProbe, engine: str | None) -> None:
    verdict = probe.verdict
    second = probe.second
    if verdict.state == "unknown":
        print(
            f"[info] prompt cache at {where}: the engine does not report which prompt tokens it "
            f"serves from its cache, so whether it reuses our prompts is unknown (see {DOCS})"
        )
    elif verdict.unhealthy:
        print(f"[warn] {verdict.warning(cache_advice(engine))}")
    else:
        print(
            f"[ok]   prompt cache at {where}: the second of two rounds got {second.cached_tokens:,} of "
            f"its {second.prompt_tokens:,} prompt tokens from the engine's cache ({probe.source})"
        )


class _WarningTally:
    """stdout, counting the lines that start with `[warn]` (every check prints its own).

    Not an io.TextIOBase: that one flushes when collected, which fails once the stream it wraps is
    closed (a test's captured stdout, on Python 3.13's collection order).
    """

    def __init__(self, out: TextIO) -> None:
        self.out, self.warnings, self._line_start = out, 0, True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            if self._line_start and piece.startswith("[warn]"):
                self.warnings += 1
            self._line_start = piece.endswith("\n")
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def run(args: argparse.Namespace) -> int:
    """Print one line per check; exit 1 when something needs fixing. The last line says whether all
    passed, or how many warnings there were (they need no fixing, but deserve a look)."""
    tally = _WarningTally(sys.stdout)
    with contextlib.redirect_stdout(tally):
        code = _run_checks(args)
    if code == 0:
        print(
            "all checks passed"
            if tally.warnings == 0
            else f"no check failed; {plural(tally.warnings, 'warning')} above"
        )
    return code


def _run_checks(args: argparse.Namespace) -> int:
    for line in package_clashes(packages_distributions()):
        print(line)
    config = config_path(args, os.environ)
    if config is not None:
        print(f"[info] settings from {config} (flags and SQALE_* variables win over it)")
    try:
        prompts: PromptSet | None = prompts_from_args(args)
        texts_problem = None
    except SqaleError as exc:  # reported below; the tool-call check needs the texts
        prompts, texts_problem = None, exc
    model_ok = anyio.run(_check_model, args, prompts)
    bad_dbs = check_databases(args.db, hide_rules(args))
    bad_dbs += check_notes(args.notes, args.max_notes_chars)
    if not args.db:
        print("[info] no --db given: add --db PATH to check a database opens")
    print(
        telemetry_line(
            telemetry_plan(
                os.environ, installed=extra_installed(), service="sqale-mcp (sqale-agent for ask and eval)"
            )
        )
    )
    if prompts is None:
        print(f"[fail] texts: {texts_problem}")
    else:
        _report_texts(args, prompts)
    return 0 if model_ok and not bad_dbs else 1
