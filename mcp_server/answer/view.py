"""What each client sees of the server: the tool as its caller may see it, and the answer view with
its app-only tools for the clients that negotiated MCP Apps.

The tool's description and input schema name only the databases the caller's token may use; a
client that answers forms also reads that the tool may ask its person, and gets --ask-samples as
the samples' default.

The answer view is an MCP App (`io.modelcontextprotocol/ui`) that shows an answer in the chat:
hosts that render MCP Apps (Claude, VS Code, ...) show `answer_view.html` next to a call of
answer_sql_question: a sortable table, a chart when one is honest, the SQL with a copy button.
Only clients that negotiated the extension learn of it: they see `_meta.ui.resourceUri` on the
tool and the `ui://` resource in resources/list. Every other client gets the same bytes as a
server without the view, and never sees an app-only tool (visibility `["app"]`), which the
page calls through its host and the model never sees. An app-only tool is listed and offered
only to the callers it names (`offered`); that is what the page shows, not an access control:
each tool checks its caller itself (door.py).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from mcp.server.apps import Apps, ResourcePermissions, client_supports_apps
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp_types import CallToolResult, TextContent

from agent import AskMode

from ..config.catalog import Catalog
from ..config.server_settings import ServerSettings
from ..serving.access import Caller, caller_of, may_save
from .choice_form import answers_forms
from .door import (
    CHOOSE_TOOL_DESCRIPTION,
    CHOOSE_TOOL_NAME,
    CHOOSE_TOOL_TITLE,
    SAVE_TOOL_DESCRIPTION,
    SAVE_TOOL_NAME,
    SAVE_TOOL_TITLE,
    choose_answer,
    save_verified_answer,
)
from .output import RESULT_META_KEY, TOOL_NAME

VIEW_URI = "ui://sqale-mcp/answer-view.html"
# The result `_meta` key (RESULT_META_KEY) names the app-only tools the page may offer as buttons
# ("Propose as verified", "Use this answer") and carries the view's choice; present only for Apps
# clients and only when there is something to say.
ANSWERING_TOOLS = (TOOL_NAME, CHOOSE_TOOL_NAME)  # their results are answers the page shows
_HTML_FILE = "answer_view.html"
_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_HASH_SLOT = "'sha256-of-the-script'"  # in the page's CSP, replaced by the script's hash

# The tool's description and input schema as a caller that sees a catalog reads them (True: to a
# client that answers forms, which may be asked to choose).
Advertise = Callable[[Catalog, bool], tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class AppOnlyTool:
    """A tool only the answer view may call (MCP Apps visibility `app`), as the view registers it."""

    fn: Callable[..., Any]
    name: str
    title: str
    description: str
    offered: Callable[[Caller], bool]  # who is shown it (the tool itself checks who may call it)


def app_only_tools(settings: ServerSettings) -> tuple[AppOnlyTool, ...]:
    """ "Propose as verified", with --verified-writable, shown to callers that may save and see a database
    with a library."""
    if not (settings.verified_writable and settings.verified):
        return ()
    with_library = [spec.alias for spec in settings.verified]

    def offered(caller: Caller) -> bool:
        return may_save(settings, caller) and bool(caller.visible(with_library))

    return (AppOnlyTool(save_verified_answer, SAVE_TOOL_NAME, SAVE_TOOL_TITLE, SAVE_TOOL_DESCRIPTION, offered),)


def choice_tools(settings: ServerSettings) -> tuple[AppOnlyTool, ...]:
    """ "Use this answer", the view's choice (asking.ViewChoice), unless the server never asks (--ask-to-choose
    off); its token opens only for the token that got the answer."""
    if settings.ask_to_choose is AskMode.OFF:
        return ()
    return (
        AppOnlyTool(
            choose_answer, CHOOSE_TOOL_NAME, CHOOSE_TOOL_TITLE, CHOOSE_TOOL_DESCRIPTION, lambda _: True
        ),
    )


def view_html() -> str:
    """The page, its Content-Security-Policy allowing exactly its one inline script."""
    page = resources.files(__package__).joinpath(_HTML_FILE).read_text(encoding="utf-8")
    scripts = _SCRIPT.findall(page)
    if len(scripts) != 1 or page.count(_HASH_SLOT) != 1:
        raise RuntimeError(f"{_HTML_FILE} must hold one <script> and one {_HASH_SLOT} in its CSP")
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode("ascii")
    return page.replace(_HASH_SLOT, f"'sha256-{digest}'")


def advertised_input_schema(
    schema: Mapping[str, Any],
    *,
    aliases: Sequence[str],
    max_question_chars: int,
    max_evidence_chars: int,
    max_samples: int,
    example: str,
    default_samples: int = 1,
    verified: bool = True,
) -> dict[str, Any]:
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
        description=f"{given}, e.g. '{example}'", maxLength=max_question_chars, examples=[example]
    )
    plain: dict[str, dict[str, Any]] = {
        "database": {"type": "string", "enum": list(aliases)},
        "evidence": {"type": "string", "maxLength": max_evidence_chars},
        "samples": {"type": "integer", "minimum": 1, "maximum": max_samples, "default": default_samples},
        "verified": {"type": "boolean", "default": True},
    }
    for name, shape in plain.items():
        if name in properties:
            properties[name] = _plain_optional(properties[name], shape)
    return {**schema, "properties": properties}


def _plain_optional(advertised: Mapping[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    """An optional property as `shape` with its title and description: no `anyOf` null branch, no
    `default: null` (a value its own type rejects; `shape` gives the real default where there is one)."""
    return {**{k: v for k, v in advertised.items() if k not in ("anyOf", "default", "type")}, **shape}


class AnswerView(Apps):
    """The MCP Apps extension serving the answer view, and the app-only tools its buttons call."""

    def __init__(self) -> None:
        super().__init__()
        self._offered: dict[str, Callable[[Caller], bool]] = {}
        self.add_html_resource(
            VIEW_URI,
            view_html(),
            name="answer-view",
            title="Answer view",
            description="The answer of answer_sql_question as a sortable table, a chart when "
            "the result suits one, and the SQL with a copy button",
            # The copy buttons; without the permission the page selects the text instead.
            permissions=ResourcePermissions(clipboard_write={}),
            prefers_border=True,
        )

    def app_tool(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        title: str,
        description: str,
        offered: Callable[[Caller], bool] = lambda _: True,
    ) -> None:
        """Register `fn` as a tool only the page may call (visibility `app`): no model sees it.

        Only clients that negotiated MCP Apps may call it, and only callers it is `offered` to
        list it; the page shows the button for it when the tool result names it (RESULT_META_KEY).
        """
        self._offered[name] = offered
        self.tool(resource_uri=VIEW_URI, visibility=["app"], name=name, title=title, description=description)(
            fn
        )

    def app_tool_names(self, caller: Caller | None = None) -> list[str]:
        """The names of the app-only tools in the order they were registered (with `caller`: those
        offered to it)."""
        names = [
            binding.kwargs["name"]
            for binding in self.tools()
            if "model" not in (binding.meta or {}).get("ui", {}).get("visibility", ["model"])
        ]
        return [n for n in names if caller is None or self._offered.get(n, lambda _: True)(caller)]


class ClientListing(ServerMiddleware[Any]):
    """Rewrites tools/list, resources/list and our tools' results per request: the tool as its caller
    may see it (`advertise`: its description and schema for the caller's databases; asking, to a client
    that answers forms when `asks`), and the view and its app-only tools to MCP Apps clients only."""

    def __init__(self, catalog: Catalog, advertise: Advertise, *, asks: bool, view: AnswerView | None) -> None:
        self._catalog, self._advertise, self._asks, self._view = catalog, advertise, asks, view

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The listings and results as this client may see them; every other message passes through."""
        if ctx.method not in ("tools/list", "resources/list", "tools/call"):
            return await call_next(ctx)
        caller = caller_of(ctx.request)
        apps = self._view is not None and client_supports_apps(ctx)
        app_tools = self._view.app_tool_names() if self._view else []
        called = (ctx.params or {}).get("name") if ctx.method == "tools/call" else None
        if called in app_tools and not apps:
            # As if it did not exist: this client was never shown it.
            return CallToolResult(
                content=[TextContent(type="text", text=f"Unknown tool: {called}")], is_error=True
            )
        # The chain returns each result as its wire dict (camelCase keys).
        result = await call_next(ctx)
        if not isinstance(result, dict):
            return result
        offered = self._view.app_tool_names(caller) if self._view else []
        if ctx.method == "tools/list":
            asks = self._asks and answers_forms(ctx.session.client_capabilities)
            return {
                **result,
                "tools": [
                    self._listed(tool, caller, apps, asks)
                    for tool in result.get("tools", [])
                    if tool.get("name") not in app_tools or (apps and tool.get("name") in offered)
                ],
            }
        if ctx.method == "resources/list" and not apps:
            return {
                **result,
                "resources": [
                    r for r in result.get("resources", []) if not str(r.get("uri", "")).startswith("ui://")
                ],
            }
        if ctx.method == "tools/call" and apps and called in ANSWERING_TOOLS:
            return _with_app_tools(result, offered)
        return result

    def _listed(self, tool: dict[str, Any], caller: Caller, apps: bool, asks: bool) -> dict[str, Any]:
        """The tool as listed: answer_sql_question scoped to the caller, pointing an Apps client at the view."""
        if tool.get("name") != TOOL_NAME:
            return tool
        if caller.databases is not None or asks:
            aliases = caller.visible(self._catalog.aliases)
            description, schema = self._advertise(
                Catalog(tuple(e for e in self._catalog.entries if e.alias in aliases)), asks
            )
            tool = {**tool, "description": description, "inputSchema": schema}
        if not apps:
            return tool
        meta = tool.get("_meta") or {}
        return {**tool, "_meta": {**meta, "ui": {**meta.get("ui", {}), "resourceUri": VIEW_URI}}}


def _with_app_tools(result: dict[str, Any], offered: list[str]) -> dict[str, Any]:
    """An answer's result naming the app-only tools the page may offer for it: "Use this answer"
    only when the answer carries the view's choice; nothing at all when none applies."""
    if result.get("resultType") == "input_required":  # the form first; the answer later
        return result
    meta = result.get("_meta") or {}
    ours = meta.get(RESULT_META_KEY, {})
    tools = [name for name in offered if name != CHOOSE_TOOL_NAME or "choice" in ours]
    if not tools:
        return result
    return {**result, "_meta": {**meta, RESULT_META_KEY: {**ours, "appTools": tools}}}
