"""Settings declared once: each pydantic field makes its flag, its config-file key and its variable.

A setting is a field of a settings model (`BackendSettings`, `AgentSettings`, `ServerSettings`)
with its default, its bounds and `Field(description=...)`; what only the command line needs
(a metavar, another flag name, repeatable) is an `Option` in its `Annotated` type. The flags'
help, defaults and choices, the config file's keys and which of them are paths, and the
options reference page (docs/options.md) are all derived from there.
"""

from __future__ import annotations

import argparse
import copy
import enum
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Option:
    """How a setting appears outside its model, where its field alone does not say."""

    name: str | None = None  # the flag and config key without `--`, when not the field's name
    metavar: str | None = None  # default: N for numbers, SECONDS for floats, PATH for paths
    repeatable: bool = False  # the flag may be given again (a list in the config file)
    any_case: bool = False  # choices are accepted in any case
    default_text: str | None = None  # the default as help states it, when the field's is computed
    flag: bool = True  # False: only the config file holds it
    env: str | None = None  # the environment variable that sets it (below a flag, above the file)
    backend: str | None = None  # it configures this backend only


class ArgumentAdder(Protocol):
    """A parser or one of its argument groups: what `add_flags` adds to."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action: ...


def option_of(field: FieldInfo) -> Option:
    """The field's `Option` (an empty one when its type carries none)."""
    return next((m for m in field.metadata if isinstance(m, Option)), Option())


def setting_name(model: type[BaseModel], name: str) -> str:
    """The setting's flag (without `--`) and config-file key: `max_rows` -> `max-rows`."""
    return option_of(model.model_fields[name]).name or name.replace("_", "-")


def is_secret(field: FieldInfo) -> bool:
    """True for a secret: read from the variable another setting names, never a flag or a key."""
    return _plain(field.annotation) is SecretStr


def file_keys(model: type[BaseModel]) -> dict[str, str]:
    """Every config-file key of `model` and the field it sets (`db` -> `databases`): each field with a
    description, but a secret (a field without one, such as a [tokens.NAME] table's name, is no key)."""
    return {
        setting_name(model, name): name
        for name, field in model.model_fields.items()
        if field.description and not is_secret(field)
    }


def path_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields holding one path: in a config file they are relative to the file."""
    return tuple(name for name, field in model.model_fields.items() if _plain(field.annotation) is Path)


def env_variables(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the environment variable that sets it, for the fields that have one."""
    return {name: env for name, field in model.model_fields.items() if (env := option_of(field).env)}


def choices_of(field: FieldInfo) -> tuple[str, ...] | None:
    """The values a field accepts when they are a fixed list (a Literal, an Enum or a schema enum)."""
    plain = _plain(field.annotation)
    if typing.get_origin(plain) is Literal:
        return tuple(str(value) for value in typing.get_args(plain))
    if isinstance(plain, type) and issubclass(plain, enum.Enum):
        return tuple(str(member.value) for member in plain)
    extra = field.json_schema_extra
    listed = extra.get("enum") if isinstance(extra, Mapping) else None
    if isinstance(listed, list):
        return tuple(str(value) for value in listed)
    return None


def _argument_default(field: FieldInfo) -> Any:
    """The field's default as argparse would have parsed it (an Enum as its value)."""
    value = field.get_default(call_default_factory=True)
    return value.value if isinstance(value, enum.Enum) else value


def _shown(value: Any) -> str | None:
    if value is None or isinstance(value, bool) or value == ():
        return None
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}" if value >= 10_000 else str(value)
    return str(value)


def with_default(model: type[BaseModel], name: str, default: Any, *, also: str | None = None) -> Any:
    """`model`'s field `name` (description, bounds, Option) with another default, for a subclass
    whose front end needs its own: `max_result_bytes: int = with_default(AgentSettings, ...)`;
    `also` adds what is true of that front end only to the description."""
    field = copy.copy(model.model_fields[name])
    field.default = default
    if also:
        field.description = f"{field.description}; {also}"
    return field


def help_text(model: type[BaseModel], name: str, default: Any = None) -> str:
    """The field's description, then its default (or `default` when a command has its own):
    what `--help` and the options page say."""
    field = model.model_fields[name]
    if not field.description:
        raise ValueError(f"{model.__name__}.{name} has no description; give it Field(description=...)")
    phrase = option_of(field).default_text
    if default is None and phrase is not None:
        shown: str | None = f": {phrase}"  # a phrase, not a value
    else:
        value = _shown(_argument_default(field) if default is None and not field.is_required() else default)
        shown = None if value is None else f" {value}"
    text = field.description
    if shown is not None:
        text = f"{text[:-1]}; default{shown})" if text.endswith(")") else f"{text} (default{shown})"
    return text.replace("%", "%%")  # argparse formats help with %


def add_flags(
    parser: ArgumentAdder,
    model: type[BaseModel],
    *names: str,
    field_defaults: bool = False,
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Add one flag per field of `model` named in `names`, in that order.

    Each flag's value is parsed under the field's name (`--db` into `databases`). A flag's
    default is None, so that a config file or the field's own default applies later;
    with `field_defaults` it is the field's default (a setting no config file holds), and
    `defaults` gives another one (with its help saying so).
    """
    for name in names:
        default = _argument_default(model.model_fields[name]) if field_defaults else None
        parser.add_argument(
            f"--{setting_name(model, name)}", **flag_arguments(model, name, (defaults or {}).get(name, default))
        )


def flag_arguments(model: type[BaseModel], name: str, default: Any = None) -> dict[str, Any]:
    """What `add_argument` takes for the field's flag, besides the flag itself: its help, its
    default, its kind (a switch, choices, a type, repeatable), its metavar; its value is parsed
    under the field's name."""
    field = model.model_fields[name]
    option = option_of(field)
    if not option.flag or is_secret(field):
        raise ValueError(f"{model.__name__}.{name} is not a command-line setting")
    plain = _plain(field.annotation)
    kwargs: dict[str, Any] = {"help": help_text(model, name, default), "default": default, "dest": name}
    if plain is bool:  # on by default: --name / --no-name; off by default: --name
        kwargs["action"] = argparse.BooleanOptionalAction if field.default is True else "store_true"
        return kwargs
    choices = choices_of(field)
    if choices is not None:
        kwargs["choices"] = choices
        if option.any_case:
            kwargs["type"] = str.upper
    elif not option.repeatable and plain in (int, float, Path):
        kwargs["type"] = plain
    kwargs["metavar"] = option.metavar or (None if choices else _METAVARS.get(plain))
    if option.repeatable:
        kwargs["action"] = "append"
    return kwargs


_METAVARS: dict[object, str] = {int: "N", float: "SECONDS", Path: "PATH"}


def _plain(annotation: object) -> object:
    """`X | None` -> X; any other annotation as it is."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation
