"""Where each setting's value comes from: flag, then `SQALE_*` variable, then config file, then default;
secrets from the variables their `*_env` settings name; and the one way a settings error is said.

A setting that configures one backend only (`Option(backend=...)`, e.g. `--base-url`) is
dropped from a layer below the one that chose the backend: `--backend ollama` on the command
line is not spoilt by the config file's `base-url` for the OpenAI-compatible engine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError

from ..errors import ConfigError
from ..options import env_variables, is_secret, option_of, setting_name

FLAG, ENVIRONMENT, FILE = 3, 2, 1  # the layers, highest first
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Layered:
    """Setting values by field name, and where each came from (`--model`, `SQALE_MODEL`, the file)."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    variables: frozenset[str] = frozenset()  # the fields set by an environment variable


def layered(model: type[BaseModel], flags: Mapping[str, Any], environ: Mapping[str, str],
            file_values: Mapping[str, Any], file_label: str) -> Layered:
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
        ranked = {name: entry for name, entry in ranked.items()
                  if option_of(model.model_fields[name]).backend in (None, backend) or entry[0] >= chosen_rank}
    return Layered(values={name: value for name, (_, value, _) in ranked.items()},
                   sources={name: source for name, (_, _, source) in ranked.items()},
                   variables=frozenset(name for name, (rank, _, _) in ranked.items() if rank == ENVIRONMENT))


def read_secret(env_name: object, environ: Mapping[str, str], flag: str,
                when: str = "before starting the server") -> SecretStr:
    """The non-empty value of the environment variable `env_name`; ConfigError saying how to set it."""
    if not isinstance(env_name, str) or not _ENV_NAME.match(env_name):
        raise ConfigError(f"{flag} {env_name!r}: give the NAME of an environment variable, not its value")
    value = environ.get(env_name, "").strip()
    if not value:
        raise ConfigError(f"{flag} {env_name}: the environment variable {env_name} is not set or empty; "
                          f"export {env_name}=<secret> {when}")
    return SecretStr(value)


def with_secrets(model: type[BaseModel], values: dict[str, Any], environ: Mapping[str, str],
                 when: str = "before starting the server") -> dict[str, Any]:
    """`values` with each secret of `model` (`api_key`) read from the variable its `*_env`
    setting (`api_key_env`) names, when that names one: no secret is a flag or a file's key."""
    for name, info in model.model_fields.items():
        if is_secret(info) and values.get(f"{name}_env") is not None:
            values[name] = read_secret(values[f"{name}_env"], environ,
                                       f"--{setting_name(model, f'{name}_env')}", when)
    return values


def problem_text(exc: ValidationError, model: type[BaseModel], layers: Layered | None = None, *,
                 table: str | None = None) -> str:
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
    elif first in layers.variables:
        name = layers.sources[first]
    else:
        name = f"--{key}"
    return f"{'.'.join([name, *loc[1:]])}: {message} (got {err.get('input')!r})"
