"""The TOML config file both front ends read: where it is, which keys it holds, and reading them.

Its keys are the settings' names (`setting_name`: the long option without `--`); paths in
it are relative to the file. The server takes every key; the `sqale-agent` commands take the
keys of the settings they have (the model runtime's) and leave the server's to the server.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ..errors import ConfigError
from ..options import file_keys, option_of, path_fields
from ..text import nearest

CONFIG_FOLDER = "sqale-mcp"


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


def read_config_file(path: Path, model: type[BaseModel], *,
                     others: Literal["refuse", "ignore"] = "refuse") -> dict[str, Any]:
    """The settings of `model` in the TOML file at `path`, by field name (see `table_settings`)."""
    return table_settings(read_toml(path), model, where=f"--config {path}",
                          base=path.expanduser().resolve().parent, others=others)


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at `path`; ConfigError, naming it, when it is missing, unreadable or not TOML."""
    try:
        return tomllib.loads(path.expanduser().read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"--config {path}: no such file; check the path") from exc
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot be read ({exc.strerror})") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc}); fix the file") from exc


def table_settings(table: Mapping[str, Any], model: type[BaseModel], *, where: str, base: Path,
                   others: Literal["refuse", "ignore"] = "refuse",
                   given: tuple[str, ...] = ()) -> dict[str, Any]:
    """The settings of `model` in one table of a config file (the file's top level, or a
    `[tokens.NAME]` table), by field name; `where` names the table in messages.

    A key `model` lacks, or one naming a field in `given` (what the caller sets itself), is
    refused (`others="refuse"`) or left alone (`"ignore"`: a command, which leaves the server's
    keys to the server). A repeatable setting may be one string or a list; relative paths are
    relative to `base`, the file's folder.
    """
    keys = {key: name for key, name in file_keys(model).items() if name not in given}
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


KEYS_LISTED = 12  # a table with more keys than this refers to docs/options.md instead of listing them


def unknown_key_text(key: str, keys: Collection[str]) -> str:
    """`unknown setting 'max_row'; did you mean 'max-rows'?`, else the keys (or where they are listed)."""
    near = nearest(key.replace("_", "-"), keys)
    if near is not None:
        return f"unknown setting {key!r}; did you mean {near!r}?"
    if len(keys) <= KEYS_LISTED:
        return f"unknown setting {key!r}; known: {', '.join(sorted(keys))}"
    return (f"unknown setting {key!r}; a key is a long option without `--` (`max-rows`): "
            "docs/options.md lists them, as `--help` does")
