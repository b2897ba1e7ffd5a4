"""The tool's arguments as the server checks them: which configured database, and text within its limits."""

from __future__ import annotations

from collections.abc import Sequence

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
