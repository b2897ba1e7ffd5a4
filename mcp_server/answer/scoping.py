"""What each caller sees of the tool: only the databases its token may use."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext

from ..config.catalog import Catalog, example_question
from ..serving.access import caller_of
from .tool import TOOL_NAME


def scoped_input_schema(schema: dict[str, Any], aliases: tuple[str, ...],
                        verified: bool = True) -> dict[str, Any]:
    """`schema` with its list of database aliases (the `database` enum) cut to `aliases`; without
    `verified` (none of them has a verified library), no `verified` argument."""
    scoped = copy.deepcopy(schema)
    if not verified:
        scoped.get("properties", {}).pop("verified", None)
    database = scoped.get("properties", {}).get("database", {})
    if isinstance(database.get("enum"), list):
        database["enum"] = [a for a in database["enum"] if a in aliases]
    return scoped


def with_example(schema: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """`schema` whose example question `old` (about any served database) is replaced by `new`."""
    question = schema.get("properties", {}).get("question")
    if isinstance(question, dict):
        question["description"] = str(question.get("description", "")).replace(old, new)
        if "examples" in question:
            question["examples"] = [new if e == old else e for e in question["examples"]]
    return schema


class ScopedToolList(ServerMiddleware[Any]):
    """Rewrites tools/list per request: the description and schema name only the caller's databases."""

    def __init__(self, catalog: Catalog, describe: Callable[[Catalog], str]) -> None:
        self._catalog = catalog
        self._describe = describe  # the tool description of a catalog

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The tool list as the caller may see it; every other message passes through."""
        result = await call_next(ctx)
        # The chain returns tools/list as its wire dict (camelCase keys).
        if ctx.method != "tools/list" or not isinstance(result, dict):
            return result
        caller = caller_of(ctx.request)
        if caller.databases is None:
            return result
        aliases = caller.visible(self._catalog.aliases)
        scoped = Catalog(tuple(e for e in self._catalog.entries if e.alias in aliases))
        description = self._describe(scoped)
        return {**result, "tools": [
            {**tool, "description": description,
             "inputSchema": with_example(scoped_input_schema(tool.get("inputSchema", {}), aliases,
                                                             any(e.verified for e in scoped.entries)),
                                         example_question(self._catalog), example_question(scoped))}
            if tool.get("name") == TOOL_NAME else tool
            for tool in result.get("tools", [])]}
