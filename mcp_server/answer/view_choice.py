"""The answer view's choice: for hosts that render MCP Apps but not forms, the same options as the
form, offered in the view, and the sealed state its app-only tool `choose_answer` brings back.

An answer whose samples gave several results, to an Apps client the server did not ask, carries
in its `_meta` (RESULT_META_KEY) the options (agent.choices' lines) and `token`: the question's
ChoiceState sealed for the caller's token (serving/sealing.py), for an hour.
`choose_answer(token, option)` answers as a person's reply to the form would (choosing.py),
under the same checks as every call: the token's scope, its minute's quota, a log line.
"""

from __future__ import annotations

from typing import Any

from ..serving.access import Caller
from ..serving.sealing import Sealer
from .choice_form import ChoiceState

RESULT_META_KEY = "sqale-mcp/answer-view"  # the tool result's `_meta` key the view reads (Apps clients only)
CHOOSE_TOOL_NAME = "choose_answer"
CHOOSE_TOOL_TITLE = "Use this answer"
CHOOSE_TOOL_DESCRIPTION = (
    "Make one of the samples' results the answer to the question, as the person chose it in the answer view. "
    "Called by the view's 'Use this answer' button.")
VIEW_STATE_MAX_CHARS = 32_768  # past this the view's state drops the options' traces (it rides in _meta)


def seal_choice(sealer: Sealer, state: ChoiceState, caller: Caller) -> str:
    """The view's token for `state`, which only `caller` can bring back."""
    return sealer.seal(state.encode(), caller.name)


def open_choice(sealer: Sealer, token: str, caller: Caller) -> ChoiceState | None:
    """The state a view's token holds; None when it is not this server's for `caller`, or expired."""
    text = sealer.unseal(token, caller.name)
    return None if text is None else ChoiceState.decode(text)


def view_choice_meta(options: list[str], token: str) -> dict[str, Any]:
    """The result's `_meta` offering the view's choice."""
    return {RESULT_META_KEY: {"choice": {"options": options, "token": token}}}
