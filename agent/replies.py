"""Reading a completion: its think block and the tool calls in it (its final SQL answer: final_sql.py).

Pure functions. The model's mistakes (broken JSON, unknown tools, missing arguments) come
back as short corrective texts in `problems`, which the loop shows the model as notes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .episode import ToolCall
from .text import echo_value
from .tools import TOOL_NAMES, TOOLS, canonical_tool_name, nearest_tool_name

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# tools whose every argument is optional: a bare {"tool": "list_tables"} is a whole call
NO_ARGUMENT_TOOLS = frozenset(s.name for s in TOOLS.values() if not any(p.required for p in s.params))
_TOOL_KEYS = ("tool", "name")
_ARGS_KEYS = ("args", "arguments", "parameters")
SUBMIT = "submit_sql"
CALL_FORMAT = '{"tool": "<name>", "args": {...}}'

# Where an object that was meant as a call starts, so broken JSON there is reported, not skipped.
_CALL_START = re.compile(r"""\{\s*["']?(?:tool|name)["']?\s*:""")
_DECODER = json.JSONDecoder(strict=False)  # models write multi-line SQL inside JSON strings
MAX_CALL_DEPTH = 16  # a call nests two levels; deeper JSON is not a call a tool can take
MAX_PROBLEMS = 5  # corrective notes kept per completion: more would only flood the prompt


@dataclass(frozen=True)
class ParsedCompletion:
    """What one completion contains."""

    think: str | None  # the thinking text (an unclosed block too), None when there is none
    calls: tuple[ToolCall, ...]  # every well-formed call, in order of appearance
    problems: tuple[str, ...]  # corrective messages for calls that could not be used
    body: str = ""  # the text outside think blocks: where calls and SQL are looked for
    think_unclosed: bool = False  # the completion ended inside <think>


def split_think(text: str) -> tuple[str | None, str, bool]:
    """(thinking, text outside thinking, ended inside an open <think>)."""
    thoughts: list[str] = []
    body: list[str] = []
    pos = 0
    first_open, first_close = text.find(THINK_OPEN), text.find(THINK_CLOSE)
    if first_close != -1 and (first_open == -1 or first_close < first_open):
        # "</think>" with no opening tag: the runtime's template opened the block
        thoughts.append(text[:first_close])
        pos = first_close + len(THINK_CLOSE)
    unclosed = False
    while True:
        start = text.find(THINK_OPEN, pos)
        if start == -1:
            body.append(text[pos:])
            break
        body.append(text[pos:start])
        end = text.find(THINK_CLOSE, start + len(THINK_OPEN))
        if end == -1:
            thoughts.append(text[start + len(THINK_OPEN) :])
            unclosed = True
            break
        thoughts.append(text[start + len(THINK_OPEN) : end])
        pos = end + len(THINK_CLOSE)
    think = "\n\n".join(t.strip() for t in thoughts) if thoughts else None
    return think, "".join(body), unclosed


def parse_completion(text: str) -> ParsedCompletion:
    """The think block, every JSON tool call outside it, and problems with the rest."""
    think, body, unclosed = split_think(text)
    calls: list[ToolCall] = []
    problems: list[str] = []
    pos = body.find("{")
    while pos != -1:
        try:
            obj, end = _DECODER.raw_decode(body, pos)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, too deep
            if _CALL_START.match(body, pos):
                problems.append(_broken_json_problem(body, pos, _decode_reason(exc)))
            pos = body.find("{", pos + 1)
            continue
        if _depth_exceeds(obj, MAX_CALL_DEPTH):
            if _CALL_START.match(body, pos):
                problems.append(_broken_json_problem(body, pos, "nested too deeply"))
            pos = body.find("{", end)
            continue
        if isinstance(obj, dict) and any(key in obj for key in _TOOL_KEYS):
            call, problem = _to_call(obj)
            if call is not None:
                calls.append(call)
            if problem is not None:
                problems.append(problem)
            pos = body.find("{", end)
        else:  # some other JSON value: calls may still sit inside it (a list of calls, say)
            pos = body.find("{", pos + 1)
    distinct = tuple(dict.fromkeys(problems))
    if len(distinct) > MAX_PROBLEMS:
        distinct = (
            *distinct[:MAX_PROBLEMS],
            f"[{len(distinct) - MAX_PROBLEMS} more problems like these; write one well-formed call per tool]",
        )
    return ParsedCompletion(
        think=think, calls=tuple(calls), problems=distinct, body=body, think_unclosed=unclosed
    )


def _decode_reason(exc: ValueError | RecursionError) -> str:
    """Why JSON could not be decoded, in a few words."""
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return "a number with too many digits"  # Python refuses to convert past 4,300 digits


def _depth_exceeds(value: Any, limit: int) -> bool:
    """True when containers nest deeper than `limit` (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _broken_json_problem(body: str, pos: int, reason: str) -> str:
    snippet = echo_value(" ".join(body[pos : pos + 60].split()), 60)
    if len(body) - pos > 60:
        snippet += "…"
    return (
        f"could not read the call {snippet} as JSON ({reason}); write {CALL_FORMAT} with double "
        'quotes around keys and strings, and \\" for a double quote inside a string'
    )


def _to_call(obj: dict[str, Any]) -> tuple[ToolCall | None, str | None]:
    """A call from a decoded object with a tool key, or a problem text."""
    tool_key = next(key for key in _TOOL_KEYS if key in obj)
    name = obj[tool_key]
    if not isinstance(name, str) or not name.strip():
        return None, f'a call needs "tool" set to a tool name, one of: {", ".join(TOOL_NAMES)}'
    tool = canonical_tool_name(name)
    if tool is None:
        close = nearest_tool_name(name)
        hint = f"did you mean {close}? " if close else ""
        return None, f'unknown tool "{echo_value(name)}"; {hint}the tools are: {", ".join(TOOL_NAMES)}'
    args_key = next((key for key in _ARGS_KEYS if key in obj), None)
    if args_key is None:
        extra = {k: v for k, v in obj.items() if k != tool_key}
        if extra:  # arguments written next to "tool" instead of inside "args": accept them
            return ToolCall(tool, extra), None
        if tool in NO_ARGUMENT_TOOLS or tool == SUBMIT:  # an empty submit still ends the episode
            return ToolCall(tool, {}), None
        return None, (
            f'the {tool} call has no "args"; write {{"tool": "{tool}", "args": {{...}}}} with its arguments'
        )
    args = obj[args_key]
    if isinstance(args, str):  # {"arguments": "{\"sql\": ...}"} as in OpenAI-style calls
        if not args.strip():
            args = {}
        else:
            try:
                args = json.loads(args, strict=False)
                if _depth_exceeds(args, MAX_CALL_DEPTH):
                    raise RecursionError("nested too deeply")
            except (ValueError, RecursionError) as exc:
                return None, (
                    f'the "args" of the {tool} call is a string that is not JSON '
                    f"({_decode_reason(exc)}); "
                    f'write "args" as an object, e.g. {{"tool": "{tool}", "args": {{...}}}}'
                )
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, f'the "args" of the {tool} call must be a JSON object like {{"table_name": "..."}}'
    return ToolCall(tool, args), None
