"""`choose_answer`: the answer view's "Use this answer", an app-only tool (view_choice.py).

Listed only to hosts that negotiated MCP Apps (as every app-only tool), offered whenever the
server asks people to choose (--ask-to-choose not off); the token it takes opens only for the
token that got the answer, so it checks its caller on every call, as the save tool does.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from agent.choices import AskMode
from agent.telemetry.gate import question_span

from ..config.server_settings import ServerSettings
from ..opening import ready_state
from ..serving.access import caller_of
from .choice_form import ChoiceForm, PersonReply
from .saving import AppOnlyTool
from .tool import answer_choice, error_response
from .tool_errors import CallError
from .view_choice import CHOOSE_TOOL_DESCRIPTION, CHOOSE_TOOL_NAME, CHOOSE_TOOL_TITLE, open_choice


async def choose_answer(
    choice: Annotated[str, Field(description="the answer's sealed choice, as its _meta gave it to the view")],
    option: Annotated[int, Field(ge=1, description="the 1-based number of the option the person picked")],
    ctx: Context,
) -> CallToolResult:
    """Make the option the person picked in the answer view the answer."""
    server_state = await ready_state(ctx.request_context.lifespan_context)
    caller = caller_of(ctx.request_context.request)
    state = open_choice(server_state.view_choices, choice, caller)

    def picked(form: ChoiceForm) -> PersonReply:
        options = form.choice.options
        if option > len(options):
            return PersonReply("invalid_reply")
        return PersonReply("chose", options[option - 1].group, option)

    with question_span("mcp", capture_content=server_state.settings.trace_content) as traced:
        try:
            return await answer_choice(server_state, caller, state, read=picked, via="answer_view")
        except CallError as error:
            if not traced.ended:  # refused and failed calls ended their span where they were recorded
                traced.finish(error.status, error.kind)
            return error_response(error, database=state.alias if state else None,
                                  question=state.question if state else "", model=server_state.model_label)


def choice_tools(settings: ServerSettings) -> tuple[AppOnlyTool, ...]:
    """The view's choice tool, unless the server never asks (--ask-to-choose off)."""
    if settings.ask_to_choose is AskMode.OFF:
        return ()
    return (AppOnlyTool(choose_answer, CHOOSE_TOOL_NAME, CHOOSE_TOOL_TITLE, CHOOSE_TOOL_DESCRIPTION,
                        lambda _: True),)
