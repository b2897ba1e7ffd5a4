"""Where each setting's value comes from: flag, then `SQALE_*` variable, then config file, then default;
secrets from the variables their `*_env` settings name; and the one way a settings error is said.

The config file is TOML, the same for both front ends: its keys are the settings' names
(`setting_name`: the long option without `--`), and paths in it are relative to the file. The
server takes every key; the `sqale-agent` commands take the keys of the settings they have (the
model runtime's) and leave the server's to the server. How a setting is declared, and so which
flag, key and variable it has: agent/options.py.

A setting that configures one backend only (`Option(backend=...)`, e.g. `--base-url`) is
dropped from a layer below the one that chose the backend: `--backend ollama` on the command
line is not spoilt by the config file's `base-url` for the OpenAI-compatible engine.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, SecretStr, ValidationError

from .errors import ConfigError
from .options import env_variables, file_keys, is_secret, option_of, path_fields, setting_name
from .text import nearest

FLAG, ENVIRONMENT, FILE = 3, 2, 1  # the layers, highest first
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONFIG_FOLDER = "sqale-mcp"
KEYS_LISTED = 12  # a table with more keys than this refers to docs/options.md instead of listing them
# A database alias (`chinook` in `--db chinook=PATH`). Used with .match; \Z, not $: `$` also matches
# before a final newline, and a file named "x\n.db" is possible.
ALIAS_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")


def check_alias(alias: str, where: str) -> str:
    """Return `alias` if it is a valid database alias, else raise ConfigError naming `where`."""
    if not ALIAS_PATTERN.match(alias):
        raise ConfigError(
            f"{where}: alias {alias!r} is not usable; use letters, digits, '_', '-' or '.' "
            "(at most 64, not starting with '-' or '.')"
        )
    return alias


def check_plain_path(db: str, command: str) -> None:
    """Refuse the server's ALIAS=PATH form (when no file has that name): `command` takes a path."""
    alias, sep, path = db.partition("=")
    if sep and path and not Path(db).expanduser().exists() and ALIAS_PATTERN.match(alias):
        raise ConfigError(
            f"--db {db!r}: `sqale-agent {command}` takes a plain path (--db {path}); "
            "ALIAS=PATH is how sqale-mcp names its databases"
        )


def default_config_path(environ: Mapping[str, str]) -> Path:
    """$XDG_CONFIG_HOME/sqale-mcp/config.toml, else ~/.config/sqale-mcp/config.toml."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / CONFIG_FOLDER / "config.toml"


def shown_path(path: Path) -> str:
    """`path` for a message: ~/... when it is under the home folder."""
    try:
        return f"~/{path.relative_to(Path.home())}"
    except ValueError:
        return str(path)


def read_config_file(
    path: Path, model: type[BaseModel], *, others: Literal["refuse", "ignore"] = "refuse"
) -> dict[str, Any]:
    """The settings of `model` in the TOML file at `path`, by field name (see `table_settings`)."""
    return table_settings(
        read_toml(path), model, where=f"--config {path}", base=path.expanduser().resolve().parent, others=others
    )


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at `path`; ConfigError, naming it, when it is missing, unreadable or not TOML."""
    import tomllib  # here: `sqale-agent tool` checks its --db with this module and reads no file

    try:
        return tomllib.loads(path.expanduser().read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"--config {path}: no such file; check the path") from exc
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot be read ({exc.strerror})") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc}); fix the file") from exc


def table_settings(
    table: Mapping[str, Any],
    model: type[BaseModel],
    *,
    where: str,
    base: Path,
    others: Literal["refuse", "ignore"] = "refuse",
) -> dict[str, Any]:
    """The settings of `model` in one table of a config file (the file's top level, or a
    `[tokens.NAME]` table), by field name; `where` names the table in messages.

    A key `model` lacks (`file_keys`) is refused (`others="refuse"`) or left alone (`"ignore"`: a
    command, which leaves the server's keys to the server). A repeatable setting may be one string
    or a list; relative paths are relative to `base`, the file's folder.
    """
    keys = file_keys(model)
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = keys.get(key.replace("_", "-"))
        if name is None:
            if others == "refuse":
                raise ConfigError(f"{where}: {unknown_key_text(key, keys)}")
            continue
        if option_of(model.model_fields[name]).repeatable and isinstance(value, str | list):
            value = tuple(value) if isinstance(value, list) else (value,)
        values[name] = value
    for name in path_fields(model):
        if isinstance(values.get(name), str):
            values[name] = base / Path(values[name]).expanduser()
    return values


def unknown_key_text(key: str, keys: Collection[str]) -> str:
    """`unknown setting 'max_row'; did you mean 'max-rows'?`, else the keys (or where they are listed)."""
    near = nearest(key.replace("_", "-"), keys)
    if near is not None:
        return f"unknown setting {key!r}; did you mean {near!r}?"
    if len(keys) <= KEYS_LISTED:
        return f"unknown setting {key!r}; known: {', '.join(sorted(keys))}"
    return (
        f"unknown setting {key!r}; a key is a long option without `--` (`max-rows`): "
        "docs/options.md lists them, as `--help` does"
    )


@dataclass(frozen=True)
class Layered:
    """Setting values by field name, and where each came from (`--model`, `SQALE_MODEL`, the file)."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


def layered(
    model: type[BaseModel],
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
    file_values: Mapping[str, Any],
    file_label: str,
) -> Layered:
    """Merge the layers for `model`'s fields: a flag given (not None) beats its variable, which
    beats the config file's value (`file_values`, by field name, read from `file_label`)."""
    ranked: dict[str, tuple[int, Any, str]] = {}
    for name, value in file_values.items():
        if name in model.model_fields:
            ranked[name] = (FILE, value, file_label)
    for name, variable in env_variables(model).items():
        raw = environ.get(variable, "").strip()
        if raw:
            value = tuple(raw.split()) if option_of(model.model_fields[name]).repeatable else raw
            ranked[name] = (ENVIRONMENT, value, variable)
    for name, value in flags.items():
        if name in model.model_fields and value is not None:
            ranked[name] = (FLAG, value, f"--{setting_name(model, name)}")
    if "backend" in ranked:
        chosen_rank, backend, _ = ranked["backend"]
        ranked = {
            name: entry
            for name, entry in ranked.items()
            if option_of(model.model_fields[name]).backend in (None, backend) or entry[0] >= chosen_rank
        }
    return Layered(
        values={name: value for name, (_, value, _) in ranked.items()},
        sources={name: source for name, (_, _, source) in ranked.items()},
    )


def read_secret(
    env_name: object, environ: Mapping[str, str], flag: str, when: str = "before starting the server"
) -> SecretStr:
    """The non-empty value of the environment variable `env_name`; ConfigError saying how to set it."""
    if not isinstance(env_name, str) or not _ENV_NAME.match(env_name):
        raise ConfigError(f"{flag} {env_name!r}: give the NAME of an environment variable, not its value")
    value = environ.get(env_name, "").strip()
    if not value:
        raise ConfigError(
            f"{flag} {env_name}: the environment variable {env_name} is not set or empty; "
            f"export {env_name}=<secret> {when}"
        )
    return SecretStr(value)


def with_secrets(
    model: type[BaseModel],
    values: dict[str, Any],
    environ: Mapping[str, str],
    when: str = "before starting the server",
) -> dict[str, Any]:
    """`values` with each secret of `model` (`api_key`) read from the variable its `*_env`
    setting (`api_key_env`) names, when that names one: no secret is a flag or a file's key."""
    for name, info in model.model_fields.items():
        if is_secret(info) and values.get(f"{name}_env") is not None:
            values[name] = read_secret(
                values[f"{name}_env"], environ, f"--{setting_name(model, f'{name}_env')}", when
            )
    return values


def problem_text(
    exc: ValidationError, model: type[BaseModel], layers: Layered | None = None, *, table: str | None = None
) -> str:
    """The first validation problem as one line, naming the setting as the user set it: its flag
    (also for a config-file value: the key is the flag's name), its environment variable, or
    `table.key` for a key of a config-file table such as `tokens.NAME`. The one formatter of
    settings errors: every front end and every table says a problem this way."""
    layers = layers or Layered()
    err = exc.errors()[0]
    message = str(err["msg"]).removeprefix("Value error, ")
    loc = [str(part) for part in err["loc"]]
    if not loc:  # a rule across settings: say which came from outside the command line
        outside = sorted({source for source in layers.sources.values() if not source.startswith("--")})
        return f"{message} (set by {', '.join(outside)})" if outside else message
    first = loc[0]
    key = setting_name(model, first) if first in model.model_fields else first.replace("_", "-")
    if table is not None:
        name = f"{table}.{key}"
    elif layers.sources.get(first) in env_variables(model).values():
        name = layers.sources[first]
    else:
        name = f"--{key}"
    return f"{'.'.join([name, *loc[1:]])}: {message} (got {err.get('input')!r})"
