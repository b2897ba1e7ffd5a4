"""What each caller sees of the tool: only the databases its token may use, and (to a client that
answers forms) that it may ask the person to choose, with the samples such a question gets."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext

from ..config.catalog import Catalog, example_question
from ..serving.access import caller_of
from .choice_form import answers_forms
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


def with_samples_default(schema: dict[str, Any], samples: int | None) -> dict[str, Any]:
    """`schema` whose `samples` default is `samples` (None: left as it is)."""
    shape = schema.get("properties", {}).get("samples")
    if samples is not None and isinstance(shape, dict):
        shape["default"] = samples
    return schema


class ScopedToolList(ServerMiddleware[Any]):
    """Rewrites tools/list per request: the description and schema name only the caller's databases;
    a client that answers forms also reads that the tool may ask its person, and gets `ask_samples`
    as the samples' default (None: the server never asks)."""

    def __init__(self, catalog: Catalog, describe: Callable[[Catalog, bool], str],
                 ask_samples: int | None = None) -> None:
        self._catalog = catalog
        self._describe = describe  # the tool description of a catalog, saying it may ask the person or not
        self._ask_samples = ask_samples

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The tool list as the caller may see it; every other message passes through."""
        result = await call_next(ctx)
        # The chain returns tools/list as its wire dict (camelCase keys).
        if ctx.method != "tools/list" or not isinstance(result, dict):
            return result
        caller = caller_of(ctx.request)
        asks = self._ask_samples is not None and answers_forms(ctx.session.client_capabilities)
        if caller.databases is None and not asks:
            return result
        aliases = caller.visible(self._catalog.aliases)
        scoped = Catalog(tuple(e for e in self._catalog.entries if e.alias in aliases))
        description = self._describe(scoped, asks)
        verified = any(e.verified for e in scoped.entries)

        def schema(tool: dict[str, Any]) -> dict[str, Any]:
            shown = with_example(scoped_input_schema(tool.get("inputSchema", {}), aliases, verified),
                                 example_question(self._catalog), example_question(scoped))
            return with_samples_default(shown, self._ask_samples if asks else None)

        return {**result, "tools": [
            {**tool, "description": description, "inputSchema": schema(tool)} if tool.get("name") == TOOL_NAME
            else tool for tool in result.get("tools", [])]}
