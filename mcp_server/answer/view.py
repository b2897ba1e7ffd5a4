"""The answer view: an MCP App (`io.modelcontextprotocol/ui`) that shows an answer in the chat.

Hosts that render MCP Apps (Claude, VS Code, ...) show `answer_view.html` next to a call of
answer_sql_question: a sortable table, a chart when one is honest, the SQL with a copy button.
Only clients that negotiated the extension learn of it: they see `_meta.ui.resourceUri` on the
tool and the `ui://` resource in resources/list. Every other client gets the same bytes as a
server without the view, and never sees an app-only tool (visibility `["app"]`), which the
page calls through its host and the model never sees. An app-only tool is listed and offered
only to the callers it names (`offered`); that is what the page shows, not an access control:
each tool checks its caller itself.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

from mcp.server.apps import Apps, ResourcePermissions, client_supports_apps
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp_types import CallToolResult, TextContent

from ..serving.access import Caller, caller_of
from .tool import TOOL_NAME
from .view_choice import CHOOSE_TOOL_NAME, RESULT_META_KEY

VIEW_URI = "ui://sqale-mcp/answer-view.html"
# The result `_meta` key (RESULT_META_KEY) names the app-only tools the page may offer as buttons
# ("Propose as verified", "Use this answer") and carries the view's choice; present only for Apps
# clients and only when there is something to say.
ANSWERING_TOOLS = (TOOL_NAME, CHOOSE_TOOL_NAME)  # their results are answers the page shows
_HTML_FILE = "answer_view.html"
_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_HASH_SLOT = "'sha256-of-the-script'"  # in the page's CSP, replaced by the script's hash


def view_html() -> str:
    """The page, its Content-Security-Policy allowing exactly its one inline script."""
    page = resources.files(__package__).joinpath(_HTML_FILE).read_text(encoding="utf-8")
    scripts = _SCRIPT.findall(page)
    if len(scripts) != 1 or page.count(_HASH_SLOT) != 1:
        raise RuntimeError(f"{_HTML_FILE} must hold one <script> and one {_HASH_SLOT} in its CSP")
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode("ascii")
    return page.replace(_HASH_SLOT, f"'sha256-{digest}'")


class AnswerView(Apps):
    """The MCP Apps extension serving the answer view, and the app-only tools its buttons call."""

    def __init__(self) -> None:
        super().__init__()
        self._offered: dict[str, Callable[[Caller], bool]] = {}
        self.add_html_resource(
            VIEW_URI, view_html(), name="answer-view", title="Answer view",
            description="The answer of answer_sql_question as a sortable table, a chart when "
                        "the result suits one, and the SQL with a copy button",
            # The copy buttons; without the permission the page selects the text instead.
            permissions=ResourcePermissions(clipboard_write={}), prefers_border=True)

    def app_tool(self, fn: Callable[..., Any], *, name: str, title: str, description: str,
                 offered: Callable[[Caller], bool] = lambda _: True) -> None:
        """Register `fn` as a tool only the page may call (visibility `app`): no model sees it.

        Only clients that negotiated MCP Apps may call it, and only callers it is `offered` to
        list it; the page shows the button for it when the tool result names it (RESULT_META_KEY).
        """
        self._offered[name] = offered
        self.tool(resource_uri=VIEW_URI, visibility=["app"], name=name, title=title,
                  description=description)(fn)

    def app_tool_names(self, caller: Caller | None = None) -> list[str]:
        """The names of the app-only tools in the order they were registered (with `caller`: those
        offered to it)."""
        names = [binding.kwargs["name"] for binding in self.tools()
                 if "model" not in (binding.meta or {}).get("ui", {}).get("visibility", ["model"])]
        return [n for n in names if caller is None or self._offered.get(n, lambda _: True)(caller)]


class ViewForAppsClients(ServerMiddleware[Any]):
    """Shows the view to clients that negotiated MCP Apps, and nothing of it to the others."""

    def __init__(self, view: AnswerView) -> None:
        self._view = view

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """tools/list, resources/list and tools/call as this client may see them."""
        if ctx.method not in ("tools/list", "resources/list", "tools/call"):
            return await call_next(ctx)
        apps = client_supports_apps(ctx)
        app_tools = self._view.app_tool_names()
        offered = self._view.app_tool_names(caller_of(ctx.request))
        called = (ctx.params or {}).get("name") if ctx.method == "tools/call" else None
        if called in app_tools and not apps:
            # As if it did not exist: this client was never shown it.
            return CallToolResult(content=[TextContent(type="text", text=f"Unknown tool: {called}")],
                                  is_error=True)
        result = await call_next(ctx)
        if not isinstance(result, dict):
            return result
        if ctx.method == "tools/list":
            return {**result, "tools": [_listed(tool, apps) for tool in result.get("tools", [])
                                        if tool.get("name") not in app_tools
                                        or (apps and tool.get("name") in offered)]}
        if ctx.method == "resources/list" and not apps:
            return {**result, "resources": [r for r in result.get("resources", [])
                                            if not str(r.get("uri", "")).startswith("ui://")]}
        if ctx.method == "tools/call" and apps and called in ANSWERING_TOOLS:
            return _with_app_tools(result, offered)
        return result


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


def _listed(tool: dict[str, Any], apps: bool) -> dict[str, Any]:
    """The tool as listed: answer_sql_question points an Apps client at the view."""
    if not apps or tool.get("name") != TOOL_NAME:
        return tool
    meta = tool.get("_meta") or {}
    return {**tool, "_meta": {**meta, "ui": {**meta.get("ui", {}), "resourceUri": VIEW_URI}}}
