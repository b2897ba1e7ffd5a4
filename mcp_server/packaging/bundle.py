"""The MCP Bundle's launcher: what Claude Desktop passes from the extension's settings, as
`sqale-mcp` options.

The host substitutes each `${user_config.KEY}` of manifest.json's arguments: a list (several
files) becomes one argument per item, a value inside a longer argument is replaced in place,
and a setting the user left empty stays as the placeholder itself (or, with an empty default,
becomes empty). So every value here may be missing, empty or an unreplaced placeholder, and
all three mean "not set". Run as `python -m mcp_server.packaging.bundle`.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from agent import ConfigError

from ..__main__ import main as serve

logger = logging.getLogger(__name__)

# The manifest's user_config keys, as this launcher's options (manifest.json passes each one).
BUNDLE_OPTIONS = {
    "databases": "--databases",
    "folder": "--folder",
    "runtime": "--runtime",
    "model": "--model",
    "model_folder": "--model-folder",
    "notes": "--notes",
}
_UNSAFE_ALIAS_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class BundleSettings:
    """The extension's settings once the host has substituted them: only what the user set."""

    databases: tuple[Path, ...]
    folder: Path | None
    runtime: str | None  # Ollama's address, or an OpenAI-compatible base URL ending in /v1
    model: str | None
    notes: tuple[Path, ...]
    model_folder: Path | None = None  # the downloaded model, whose sqale_agent.py gives the prompts


def is_set(value: str | None) -> bool:
    """False for a setting the user left empty: missing, blank, or the host's unreplaced placeholder."""
    return value is not None and bool(value.strip()) and "${user_config." not in value


def parse_bundle_args(argv: Sequence[str]) -> BundleSettings:
    """The settings in `argv` as manifest.json passes them; ConfigError for anything else."""
    parser = _Parser(prog="sqale-mcp bundle", add_help=False)
    parser.add_argument("--databases", nargs="*", default=[])
    parser.add_argument("--notes", nargs="*", default=[])
    for name in ("--folder", "--runtime", "--model", "--model-folder"):
        parser.add_argument(name)
    args = parser.parse_args(list(argv))
    return BundleSettings(
        databases=tuple(Path(p).expanduser() for p in args.databases if is_set(p)),
        folder=Path(args.folder).expanduser() if is_set(args.folder) else None,
        runtime=args.runtime.strip() if is_set(args.runtime) else None,
        model=args.model.strip() if is_set(args.model) else None,
        notes=tuple(Path(p).expanduser() for p in args.notes if is_set(p)),
        model_folder=Path(args.model_folder).expanduser() if is_set(args.model_folder) else None,
    )


def server_arguments(settings: BundleSettings) -> list[str]:
    """The `sqale-mcp` options for these settings; ConfigError when they cannot work together."""
    argv: list[str] = []
    aliases: dict[str, Path] = {}
    for path in settings.databases:
        alias = alias_for(path, aliases)
        aliases[alias] = path
        argv += ["--db", f"{alias}={path}"]
    if settings.folder is not None:
        argv += ["--db-dir", str(settings.folder)]
    if not argv:
        logger.warning(
            "no database chosen in the extension's settings: serving the demo bookshop; "
            "choose SQLite files or a folder in Settings > Extensions"
        )
        argv.append("--demo")
    argv += _notes_arguments(settings.notes, aliases, from_folder=settings.folder is not None)
    if settings.runtime is not None:
        argv += runtime_arguments(settings.runtime)
    if settings.model is not None:
        argv += ["--model", settings.model]
    if settings.model_folder is not None:
        argv += ["--reference-agent", str(settings.model_folder)]
    return argv


def alias_for(path: Path, taken: dict[str, Path]) -> str:
    """The alias a picked file is served under: its name without extension, made a valid alias
    (other characters become '_') and unique (`_2`, `_3`, ...)."""
    base = _UNSAFE_ALIAS_CHARS.sub("_", path.stem).lstrip(".-")[:60] or "db"
    alias, n = base, 1
    while alias in taken:
        n += 1
        alias = f"{base}_{n}"
    return alias


def runtime_arguments(address: str) -> list[str]:
    """`--ollama-host URL`, or `--backend openai --base-url URL` for an address whose path ends in /v1."""
    if urlsplit(address).path.rstrip("/").endswith("/v1"):
        return ["--backend", "openai", "--base-url", address]
    return ["--ollama-host", address]


def _notes_arguments(notes: Sequence[Path], aliases: dict[str, Path], *, from_folder: bool) -> list[str]:
    """`--notes ALIAS=FILE` for each notes file: the one database's, else the database it is named
    after (a file of the folder is served under its name: the server checks it is there)."""
    argv = []
    for path in notes:
        if len(aliases) == 1 and len(notes) == 1 and not from_folder:
            alias = next(iter(aliases))
        else:
            matches = [a for a, db in aliases.items() if db.stem == path.stem or a == path.stem]
            if not matches and from_folder:
                matches = [path.stem]
            if len(matches) != 1:
                raise ConfigError(
                    f"notes file {path.name}: name it after the database it describes (e.g. "
                    f"{next(iter(aliases), 'chinook')}.txt), so it is clear which one it is for; the "
                    f"databases are {', '.join(aliases) or 'none picked as files'}"
                )
            alias = matches[0]
        argv += ["--notes", f"{alias}={path}"]
    return argv


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"the bundle's arguments: {message}; reinstall the extension")


def main(argv: Sequence[str] | None = None) -> int:
    """Serve MCP over stdio with the extension's settings."""
    try:
        arguments = server_arguments(parse_bundle_args(sys.argv[1:] if argv is None else argv))
    except ConfigError as exc:
        print(f"sqale-mcp: {exc}", file=sys.stderr)
        return 2
    return serve(arguments)


if __name__ == "__main__":
    sys.exit(main())
