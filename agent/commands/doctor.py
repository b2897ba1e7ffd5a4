"""`sqale-agent doctor`: check the runtime, the model and the databases, and say what to fix."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from importlib.metadata import packages_distributions

import anyio

from ..backends.base import DescribableBackend, SamplingSettings
from ..backends.openai_compat import OpenAICompletionsBackend
from ..backends.settings import BackendSettings, make_backend
from ..backends.slots import resolve_runtime_slots
from ..errors import SqaleError
from ..notes import read_notes
from ..options import add_flags
from ..settings.agent_settings import AgentSettings
from ..sqlite import Database, HideRules, Schema, index_order_warning
from ..text import plural
from .backend_options import add_backend_arguments, backend_choice, command_settings, config_path
from .db_options import add_hide_argument, hide_rules

OUR_DISTRIBUTION = "sqale-mcp"
OUR_PACKAGES = ("agent", "mcp_server")
PROBE_SECONDS = 5.0  # a runtime that accepts connections but never answers is reported after this


NAME = "doctor"
HELP = "check that the model runtime, the model and the databases are ready"
DESCRIPTION = ("Checks the runtime is reachable, the model is installed (and shows its "
               "parameters), and each --db opens; prints what to fix.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `sqale-agent doctor`."""
    parser.add_argument("--db", action="append", default=[], metavar="PATH",
                        help="a database to check (repeatable)")
    parser.add_argument("--notes", action="append", default=[], metavar="FILE",
                        help="a notes file to check: UTF-8, within the size limit (repeatable)")
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
            lines.append(f"[warn] the installed distribution {', '.join(others)} also provides the package "
                         f"`{package}`: imports may pick the wrong one; uninstall it or install "
                         f"{OUR_DISTRIBUTION} in its own virtual environment")
    return lines


def _check_databases(paths: list[str], hide: HideRules | None) -> list[str]:
    problems = []
    for path in paths:
        try:
            with Database(path, hide=hide) as db:
                schema = db.schema()
        except SqaleError as exc:
            print(f"[fail] database {path}: {exc}")
            problems.append(path)
            continue
        views = sum(1 for t in schema.tables if t.kind == "view")
        snapshot = any("immutable snapshot" in w for w in schema.warnings)  # may miss recent commits
        empty = schema.no_readable_tables()
        if empty is not None:
            print(f"[warn] database {db.path}: {empty}; every question on it is answered at once that "
                  "it has none")
        else:
            mark = "[warn]" if snapshot else "[ok]  "
            print(f"{mark} database {db.path}: {plural(len(schema.tables) - views, 'table')}, "
                  f"{plural(views, 'view')}")
        for warning in schema.warnings:
            print(f"       note: {warning}")
        _print_hiding(schema)
    return problems


def _check_notes(paths: list[str], max_chars: int) -> list[str]:
    problems = []
    for path in paths:
        try:
            notes = read_notes(path, max_chars=max_chars, where="notes")
        except SqaleError as exc:
            print(f"[fail] {exc}")
            problems.append(path)
            continue
        print(f"[ok]   notes {notes.path}: {notes.facts} facts, {notes.chars:,} characters in the "
              f"prompt (limit {max_chars:,}, about {notes.chars // 4:,} tokens)")
    return problems


def _print_hiding(schema: Schema) -> None:
    """What each --hide rule hid on this database; a rule that hid nothing is a warning."""
    if schema.hiding is None:
        return
    for rule, names in schema.hiding.matches:
        if names:
            print(f"       hides ({rule}): {', '.join(names)}")
        else:
            print(f"[warn] hide rule {rule!r} matches no table or column here; check its spelling "
                  "(TABLE or TABLE.COLUMN globs, any case)")
    if schema.hiding.derived:
        print(f"       also hidden, as they read hidden data: {', '.join(schema.hiding.derived)}")
    if schema.hiding.indexes:
        print(f"[warn] {index_order_warning(schema.hiding.indexes)}")


async def _check_model(args: argparse.Namespace) -> bool:
    choice = backend_choice(args)
    backend = make_backend(choice, SamplingSettings())
    where = getattr(backend, "host", None) or ", ".join(choice.base_urls)
    try:
        if not isinstance(backend, DescribableBackend):  # our backends all are; a plug-in may not be
            print(f"[info] {choice.backend} at {where}: this backend cannot check its model in advance")
            return True
        with anyio.fail_after(PROBE_SECONDS):
            info = await backend.describe_model()
            engine_slots = (await backend.engine_slots()
                            if isinstance(backend, OpenAICompletionsBackend) else None)
    except SqaleError as exc:
        print(f"[fail] {choice.backend} at {where}: {exc}")
        return False
    except TimeoutError:
        print(f"[fail] {choice.backend} at {where}: accepted the connection but did not answer within "
              f"{PROBE_SECONDS:g} s; check that this address is the model runtime and that it is not stuck")
        return False
    finally:
        with anyio.CancelScope(shield=True):
            await backend.aclose()
    print(f"[ok]   {choice.backend} at {where}: model {choice.model} is available")
    for key, value in sorted(info.details.items()):
        print(f"       {key}: {value}")
    if info.parameters:
        print("       parameters:")
        for line in info.parameters.splitlines():
            print(f"         {line.strip()}")
    if choice.backend == "ollama" and info.template.strip() not in ("{{ .Prompt }}", ""):
        print("       note: its TEMPLATE is not the raw `{{ .Prompt }}` of our Modelfile; raw requests "
              "bypass it, but re-create the model with `ollama create ... -f Modelfile` to be sure")
    _report_slots(args, choice, engine_slots)
    return True


def _report_slots(args: argparse.Namespace, choice: BackendSettings, engine_slots: int | None) -> None:
    """What --runtime-slots will be, and the runtime's own parallelism where it says."""
    given = command_settings(args, ("runtime_slots",), os.environ).values.get("runtime_slots")
    slots = resolve_runtime_slots(given, choice.backend, len(choice.base_urls), os.environ)
    print(f"[info] runtime slots: {slots.slots} ({slots.reason}): questions beyond that wait their turn")
    if engine_slots is not None:
        print(f"       the engine reports {plural(engine_slots, 'slot')} "
              "(/props total_slots)")
        if engine_slots != slots.slots:
            print(f"       note: give sqale-mcp --runtime-slots {engine_slots}: more questions at once than "
                  "slots evict each other's cached prompt; fewer leave slots idle")
    elif choice.backend == "openai":
        print("       the engine does not say how many sequences it runs at once; for a one-slot "
              "server (llama_cpp.server, llama-server -np 1) give --runtime-slots 1")


def run(args: argparse.Namespace) -> int:
    """Print one line per check; exit 1 when something needs fixing."""
    for line in package_clashes(packages_distributions()):
        print(line)
    config = config_path(args, os.environ)
    if config is not None:
        print(f"[info] settings from {config} (flags and SQALE_* variables win over it)")
    model_ok = anyio.run(_check_model, args)
    bad_dbs = _check_databases(args.db, hide_rules(args))
    bad_dbs += _check_notes(args.notes, args.max_notes_chars)
    if not args.db:
        print("[info] no --db given: add --db PATH to check a database opens")
    if model_ok and not bad_dbs:
        print("all checks passed")
        return 0
    return 1
