"""The tool's arguments as the server advertises and checks them: which configured database, and text
within its limits."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from .tool_errors import CallError, text_too_long, unknown_database


def known_alias(given: str | None, aliases: Sequence[str]) -> str | None:
    """The alias `given` names, or None when it names none of `aliases`."""
    try:
        return resolve_alias(given, aliases)
    except CallError:
        return None


def resolve_alias(given: str | None, aliases: Sequence[str]) -> str:
    """The configured alias `given` names (exact, else the only case-insensitive match)."""
    if given is None or not given.strip():
        if len(aliases) == 1:
            return aliases[0]
        raise unknown_database(None, aliases)
    name = given.strip()
    if name in aliases:
        return name
    folded = [a for a in aliases if a.casefold() == name.casefold()]
    if len(folded) == 1:
        return folded[0]
    raise unknown_database(name, aliases)


def checked_text(name: str, value: str | None, limit: int) -> str | None:
    """`value` stripped, None when empty; ToolError when longer than `limit`."""
    text = (value or "").strip()
    if len(text) > limit:
        raise text_too_long(name, len(text), limit)
    return text or None


def advertised_input_schema(schema: Mapping[str, Any], *, aliases: Sequence[str], max_question_chars: int,
                            max_evidence_chars: int, max_samples: int, example: str, default_samples: int = 1,
                            verified: bool = True) -> dict[str, Any]:
    """The tool's input schema with what the server enforces: alias enum, lengths, ranges, an example.

    Each limit is stated here once; the tool description states the answer's limits. `verified`
    is advertised only when a database has a verified library (`verified=False` drops it).
    Optional arguments are advertised plainly, as the type they take, with the default the
    server applies where it has one: an argument that may be omitted needs no null branch, and
    form-filling clients read an `anyOf` as a value to send (and fill a yes/no field with "no"
    unless told the default). The tool still takes null for each of them (its signature),
    meaning the same as leaving it out.
    """
    properties = copy.deepcopy(dict(schema["properties"]))
    if not verified:
        properties.pop("verified", None)
    given = properties["question"].get("description", "The question in plain language").rstrip(". ")
    properties["question"].update(
        description=f"{given}, e.g. '{example}'", maxLength=max_question_chars, examples=[example])
    plain: dict[str, dict[str, Any]] = {
        "database": {"type": "string", "enum": list(aliases)},
        "evidence": {"type": "string", "maxLength": max_evidence_chars},
        "samples": {"type": "integer", "minimum": 1, "maximum": max_samples, "default": default_samples},
        "verified": {"type": "boolean", "default": True}}
    for name, shape in plain.items():
        if name in properties:
            properties[name] = _plain_optional(properties[name], shape)
    return {**schema, "properties": properties}


def _plain_optional(advertised: Mapping[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    """An optional property as `shape` with its title and description: no `anyOf` null branch, no
    `default: null` (a value its own type rejects; `shape` gives the real default where there is one)."""
    return {**{k: v for k, v in advertised.items() if k not in ("anyOf", "default", "type")}, **shape}
