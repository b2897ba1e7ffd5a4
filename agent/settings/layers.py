"""Where each setting's value comes from: flag, then `SQALE_*` variable, then config file, then default.

A setting that configures one backend only (`Option(backend=...)`, e.g. `--base-url`) is
dropped from a layer below the one that chose the backend: `--backend ollama` on the command
line is not spoilt by the config file's `base-url` for the OpenAI-compatible engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ..options import env_variables, option_of, setting_name

FLAG, ENVIRONMENT, FILE = 3, 2, 1  # the layers, highest first


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
