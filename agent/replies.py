"""Reading a completion: its think block, the tool calls in it, and a final SQL answer.

Pure functions. The model's mistakes (broken JSON, unknown tools, missing arguments) come
back as short corrective texts in `problems`, which the loop shows the model as notes.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from .episode import ToolCall
from .sqlite.sql_text import TokenKind, sql_tokens
from .text import echo_value
from .tools import TOOL_NAMES, TOOLS, canonical_tool_name, nearest_tool_name

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# tools whose every argument is optional: a bare {"tool": "list_tables"} is a whole call
NO_ARGUMENT_TOOLS = frozenset(s.name for s in TOOLS.values() if not any(p.required for p in s.params))
_TOOL_KEYS = ("tool", "name")
_ARGS_KEYS = ("args", "arguments", "parameters")
SUBMIT = "submit_sql"
SQL_KEYS = TOOLS[SUBMIT].params[0].keys  # "sql" and the spellings agent.tools accepts
CALL_FORMAT = '{"tool": "<name>", "args": {...}}'

# Where an object that was meant as a call starts, so broken JSON there is reported, not skipped.
_CALL_START = re.compile(r"""\{\s*["']?(?:tool|name)["']?\s*:""")
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)
# A statement start: at a line start after optional list marks, a short "label:" or backticks.
# Only all-caps or all-lowercase keywords count: "Select the rows ..." or "With that ..." is prose.
_STATEMENT_START = re.compile(
    r"^[ \t>*-]*(?:[^\n:`\"{}]{0,40}:[ \t]*)?`*[ \t]*(?=(?:SELECT|select|WITH|with)\b)", re.MULTILINE
)
_WITH_CLAUSE = re.compile(
    r"(?:WITH|with)\s+(?:RECURSIVE\s+|recursive\s+)?[^\s(]+\s*(?:\([^)]*\)\s*)?(?:AS|as)\s*\("
)
_SELECT_START = re.compile(r"(?:SELECT|select)\s+\S")
_DECODER = json.JSONDecoder(strict=False)  # models write multi-line SQL inside JSON strings
MAX_CALL_DEPTH = 16  # a call nests two levels; deeper JSON is not a call a tool can take
MAX_PROBLEMS = 5  # corrective notes kept per completion: more would only flood the prompt
DROPPED_CHARS = 120  # what the episode's record shows of text left out after an answer's SQL


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


@dataclass(frozen=True)
class FinalSql:
    """The answer SQL a reply holds, and the text after a bare statement that was not read as SQL."""

    sql: str
    dropped: str | None = None  # non-SQL text that followed a bare statement, left out of it

    def note(self) -> str | None:
        """One line saying what was left out of the answer, for the episode's record."""
        if self.dropped is None:
            return None
        return (
            "the answer's SQL was read up to where it ended; the text after it is not SQL and was "
            f"left out: {echo_value(' '.join(self.dropped.split()), DROPPED_CHARS)}"
        )


def extract_final_sql(text: str) -> str | None:
    """The answer SQL: a submit_sql call, else the last ```sql fence, else a run_query, else bare SQL."""
    final = read_final_sql(text)
    return None if final is None else final.sql


def read_final_sql(text: str) -> FinalSql | None:
    """`extract_final_sql` with what was left out after a bare statement."""
    parsed = parse_completion(text)
    submitted = _call_sql(parsed, SUBMIT)
    if submitted is not None:
        return FinalSql(submitted)
    fenced = last_sql_fence(parsed.body)
    if fenced is not None:
        return FinalSql(fenced)
    # A query tested in the answer turn is what the model means to answer with.
    tested = _call_sql(parsed, "run_query")
    if tested is not None:
        return FinalSql(tested)
    return last_bare_statement(parsed.body)


def _call_sql(parsed: ParsedCompletion, tool: str) -> str | None:
    sqls = [sql_argument(call.args) for call in parsed.calls if call.tool == tool]
    usable = [sql for sql in sqls if sql is not None]
    return usable[-1] if usable else None


def sql_argument(args: dict[str, Any]) -> str | None:
    """The SQL of a run_query/submit_sql call ("sql", or the "query" spelling the tools accept)."""
    for key in SQL_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def last_sql_fence(text: str) -> str | None:
    """Content of the last ```sql (or unlabelled SELECT/WITH) code fence; an unclosed one counts."""
    found = None
    for match in _FENCE.finditer(text):
        label, content = match.group(1).strip().lower(), match.group(2).strip()
        if not content:
            continue
        if label in ("sql", "sqlite") or (label == "" and _starts_statement(content)):
            found = content
    return found


def _starts_statement(text: str) -> bool:
    return bool(_SELECT_START.match(text) or _WITH_CLAUSE.match(text))


def last_bare_statement(text: str) -> FinalSql | None:
    """The last SELECT/WITH statement written as plain text, read whole, and what followed it.

    It ends at its first unquoted `;`, at a backtick, at the end of the text, or at a blank
    line after which the text no longer continues the statement (see `_continues`).
    """
    found: FinalSql | None = None
    pos = 0
    while (match := _STATEMENT_START.search(text, pos)) is not None:
        start = match.end()
        end = _statement_end(text, start)
        statement = text[start:end].strip()
        if _starts_statement(statement):
            rest = text[end:].lstrip(" \t\r\n;`")
            found = FinalSql(statement, rest.rstrip() or None)
            pos = max(end, start + 1)
        else:
            pos = start + 1
    return found


# A statement is not over at a blank line when what follows continues it: a clause keyword (in
# the statement's own case: "WHERE" after "SELECT", "where" after "select"; "Where ..." is prose)
# or an operator; or when what came before cannot end a statement (an open parenthesis, a
# trailing comma, operator or keyword such as AND, FROM, BY).
_CONTINUING_WORDS = frozenset(
    {
        "from",
        "where",
        "group",
        "order",
        "having",
        "limit",
        "offset",
        "join",
        "inner",
        "left",
        "right",
        "full",
        "cross",
        "natural",
        "outer",
        "on",
        "using",
        "and",
        "or",
        "union",
        "intersect",
        "except",
        "window",
        "as",
        "not",
        "in",
        "is",
        "like",
        "glob",
        "between",
        "then",
        "else",
        "end",
        "when",
        "collate",
        "escape",
        "asc",
        "desc",
        "nulls",
    }
)
_UNFINISHED_WORDS = _CONTINUING_WORDS - {"end", "asc", "desc"} | {
    "select",
    "distinct",
    "all",
    "by",
    "case",
    "with",
    "recursive",
    "exists",
    "filter",
    "over",
    "partition",
    "values",
}
_OPERATORS = frozenset(
    {
        ",",
        "(",
        "=",
        "==",
        "<",
        ">",
        "<=",
        ">=",
        "!=",
        "<>",
        "+",
        "-",
        "*",
        "/",
        "%",
        "||",
        "&",
        "|",
        "<<",
        ">>",
        ".",
        "->",
        "->>",
    }
)


def _statement_end(text: str, start: int) -> int:
    """Index of the statement's end: an unquoted `;` or backtick, a blank line it does not go on
    past, or the end of `text`."""
    quote: str | None = None
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch in ";`" or (
            ch == "\n"
            and depth == 0
            and text[i + 1 :].lstrip(" \t").startswith("\n")
            and not _continues(text[start:i], text[i:])
        ):
            return i
        i += 1
    return len(text)


def _continues(before: str, after: str) -> bool:
    """Whether the text after a blank line goes on with the statement written before it."""
    following = next(sql_tokens(after), None)
    if following is None:
        return False
    last = deque(sql_tokens(before), maxlen=1)
    if last and _open_end(before[last[0].start : last[0].end]):
        return True
    word = after[following.start : following.end]
    if following.kind is TokenKind.SYMBOL:
        return word in _OPERATORS or word == ")"
    own_case = word.upper() if before.lstrip()[:1].isupper() else word.lower()  # SELECT or select
    return following.kind is TokenKind.WORD and word.lower() in _CONTINUING_WORDS and word == own_case


def _open_end(token: str) -> bool:
    """Whether a statement's last token leaves it unfinished (AND, FROM, a comma, `=` ...)."""
    return token in _OPERATORS or token.lower() in _UNFINISHED_WORDS
