"""Prompt text of an episode: the system prompt, the user turn, tool-result turns, ChatML.

Everything here is a pure function of its arguments. Untrusted text (the question, the
evidence note, tool results, the model's own call arguments echoed back) goes through
`neutralise` so it can never open or close a chat turn.
"""

from __future__ import annotations

import ast
import json
import re
import string
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from .episode import StopReason, ToolCall
from .errors import PromptConfigError
from .text import plural
from .tools.environment import DEFAULT_ENVIRONMENT, Environment

SYSTEM_PROMPT = """\
You answer a question about an SQLite database by writing one SQL query.
You cannot see the database yet: explore it with the tools below first.

Tools:
- list_tables: the names of all tables. Args: none.
- describe_table: the columns, types and keys of a table. Args: table_name.
- foreign_keys: how a table links to other tables. Args: table_name.
- join_path: the JOIN lines that link two tables. Args: table_a, table_b.
- sample_rows: a few rows of a table. Args: table_name, limit.
- distinct_values: the values a column takes, most common first. Args: table_name, column_name, limit.
- run_query: run a SELECT query and see its result or its error. Args: sql.
- submit_sql: submit your final SQL query. This ends the task. Args: sql.

Plan:
1. list_tables.
2. describe_table for the tables the question needs.
3. Check the values you filter on with distinct_values or sample_rows.
4. Test your query with run_query. Fix it until its result answers the question.
5. submit_sql with that query.

In each reply, first think briefly inside <think>...</think>.
Then call a tool with one JSON object: {"tool": "<name>", "args": {...}}
Example:
<think>I need to know which tables exist.</think>
{"tool": "list_tables", "args": {}}
Another example:
{"tool": "describe_table", "args": {"table_name": "orders"}}

The results come back in the next message, with the number of tool turns you have left.
Only SELECT (or WITH ... SELECT) queries can run.
When no tool turns are left, give your final answer: the SQL query in a ```sql code block,
or submit_sql."""

USER_TEMPLATE = "Question: {question}\nEvidence: {evidence}"

# Every Qwen/ChatML special token is written `<|name|>`; the thinking tags are added tokens
# that a tokenizer also matches inside ordinary text.
_CHAT_TOKEN = r"\|[A-Za-z0-9_.-]{1,64}\|>"
_CONTROL_TOKEN = re.compile(rf"<({_CHAT_TOKEN}|/?think>|/?tool_call>|/?tool_response>)")
_CHAT_CONTROL_TOKEN = re.compile(rf"<{_CHAT_TOKEN}")

_FINAL_REASONS: Mapping[StopReason | None, str] = MappingProxyType({
    StopReason.FAILED_QUERIES: "Too many queries failed in a row, so exploration is over.\n",
    StopReason.TOKEN_BUDGET: "The token budget is almost used up, so exploration is over.\n",
})

FINAL_INSTRUCTION = (
    "This is your final answer turn: tools will not run any more.\n"
    "Write your final SQL query in a ```sql code block, "
    'or call {"tool": "submit_sql", "args": {"sql": "..."}}.'
)


# The trained environment's final turn, verbatim from the authors' episodes (agent-protocol.md):
# it shows the last query that ran without error and asks for the SQL as plain text.
TRAINED_FINAL_OPENING = ("You have reached the exploration limit. Now generate the final SQL query to "
                         "answer the question. Return only the SQL query.")
TRAINED_LAST_QUERY = ("Your last query that executed without error was:\n{sql}\n"
                      "If you are not sure of an improvement, return that query.")
# Our wording, in the same structure, for what the authors show no example of.
TRAINED_NO_QUERY = ("None of your queries has executed without error yet, so write your best query "
                    "from what you have seen.")
_TRAINED_REASONS: Mapping[StopReason | None, str] = MappingProxyType({
    StopReason.FAILED_QUERIES: "Too many queries failed in a row. ",
    StopReason.TOKEN_BUDGET: "The token budget is almost used up. ",
})
ECHOED_SQL_CHARS = 4_000  # the last good query is echoed whole up to this size


@dataclass(frozen=True)
class PromptSet:
    """The two prompt texts an episode is rendered from."""

    system: str
    user_template: str  # str.format fields {question} and {evidence}; unknown fields stay as written


DEFAULT_PROMPTS = PromptSet(system=SYSTEM_PROMPT, user_template=USER_TEMPLATE)


def neutralise(text: str) -> str:
    """Break chat control tokens in untrusted text by a visible space after their `<`."""
    # A plain ASCII space (not a zero-width character) keeps the change visible in logs
    # and to the model, which can still read the word, while no tokenizer matches it.
    return _CONTROL_TOKEN.sub(r"< \1", text)


def cut_at_chat_token(completion: str) -> str:
    """The completion up to its first chat control token (`<|im_start|>`, `<|im_end|>`, ...)."""
    # A model that does not know ChatML (or a runtime that ignores a stop string) may write
    # `<|im_start|>user ...` as text; appended to the prompt, that would fabricate a turn.
    match = _CHAT_CONTROL_TOKEN.search(completion)
    return completion if match is None else completion[:match.start()]


def chatml_turn(role: str, content: str) -> str:
    """One complete ChatML turn."""
    return f"<|im_start|>{role}\n{content}<|im_end|>\n"


ASSISTANT_OPENING = "<|im_start|>assistant\n"


def fill_template(template: str, values: Mapping[str, str]) -> str:
    """str.format-like filling of known fields only; unknown fields are left as written."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:  # stray single braces: not a format string, substitute by name
        filled = template
        for key, value in values.items():
            filled = filled.replace("{" + key + "}", value)
        return filled
    out: list[str] = []
    for literal, name, spec, conversion in parts:
        out.append(literal)  # Formatter.parse has already turned "{{" and "}}" into single braces
        if name is None:
            continue
        if name in values:
            out.append(values[name])
        else:
            field = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            out.append("{" + field + "}")
    return "".join(out)


def _field_names(line: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(line) if name is not None}
    except ValueError:
        return {name for name in ("question", "evidence") if "{" + name + "}" in line}


def render_user_message(template: str, question: str, evidence: str | None) -> str:
    """The first user message: the question, and the evidence note when there is one."""
    lines = template.split("\n")
    if evidence is None:  # drop lines that only carry the evidence field
        lines = [line for line in lines if _field_names(line) != {"evidence"}]
    message = fill_template(
        "\n".join(lines), {"question": neutralise(question), "evidence": neutralise(evidence or "")}
    )
    fields = _field_names(template)
    if "question" not in fields:  # a template without the question would ask nothing
        message += ("\n" if message else "") + f"Question: {neutralise(question)}"
    if evidence is not None and "evidence" not in fields:
        message += f"\nEvidence: {neutralise(evidence)}"
    return message


def render_initial_prompt(prompts: PromptSet, question: str, evidence: str | None, *,
                          final: bool = False, final_reason: StopReason | None = None,
                          environment: Environment = DEFAULT_ENVIRONMENT) -> str:
    """System turn, first user turn, and the opening of the first assistant turn."""
    message = render_user_message(prompts.user_template, question, evidence)
    if final:  # no tool turns at all (max_tool_turns == 0 or a prompt too long for the budget)
        ask = (trained_final_text(final_reason, None) if environment is Environment.TRAINED
               else final_instruction(final_reason))
        message += "\n\n" + ask
    return chatml_turn("system", prompts.system) + chatml_turn("user", message) + ASSISTANT_OPENING


def render_call_header(index: int, call: ToolCall) -> str:
    """`[2] describe_table {"table_name": "Track"}`: which call a result belongs to."""
    header = f"[{index}] {call.tool}"
    if call.args:
        header += " " + json.dumps(call.args, ensure_ascii=False)
    return neutralise(header)


def budget_line(turns_left: int) -> str:
    """The budget line in the protocol's wording; "tool turns" stays plural for 1 as well."""
    return f"[{turns_left} tool turns left before you must answer]"


def final_instruction(reason: StopReason | None) -> str:
    """What the final turn asks for, with why exploration ended early when it did."""
    return _FINAL_REASONS.get(reason, "") + FINAL_INSTRUCTION


def render_results_message(results: Sequence[tuple[ToolCall, str]], notes: Sequence[str],
                           turns_left: int, *, final: bool = False,
                           final_reason: StopReason | None = None) -> str:
    """One round's results as one user message: calls in order, notes, the budget line."""
    blocks = [f"{render_call_header(i, call)}\n{neutralise(text)}"
              for i, (call, text) in enumerate(results, start=1)]
    blocks.extend(f"[note] {neutralise(note)}" for note in notes)
    blocks.append(budget_line(0 if final else turns_left))
    if final:
        blocks[-1] += "\n" + final_instruction(final_reason)
    return "\n\n".join(blocks)


def trained_budget_line(turns_left: int) -> str:
    """The trained environment's budget line: no brackets, `1 tool turn` singular."""
    return f"{plural(turns_left, 'tool turn')} left before you must answer"


def result_label(position: int, total: int) -> str:
    """`result (10/12):` - a result's position out of the round's total, as the model quotes it."""
    return f"result ({position}/{total}):"


def _echoed_sql(sql: str) -> str:
    text = neutralise(sql.strip())
    if len(text) <= ECHOED_SQL_CHARS:
        return text
    return text[:ECHOED_SQL_CHARS] + f"…[+{len(text) - ECHOED_SQL_CHARS:,} chars]"


def trained_final_text(reason: StopReason | None, last_ok_sql: str | None) -> str:
    """The final-turn text: the authors' words with the last query that ran without error."""
    ending = (TRAINED_NO_QUERY if last_ok_sql is None
              else TRAINED_LAST_QUERY.format(sql=_echoed_sql(last_ok_sql)))
    return f"{_TRAINED_REASONS.get(reason, '')}{TRAINED_FINAL_OPENING} {ending}"


def render_trained_results(texts: Sequence[str], notes: Sequence[str], turns_left: int, *,
                           final: bool = False, final_reason: StopReason | None = None,
                           last_ok_sql: str | None = None) -> str:
    """One round's results labelled by position, notes, then the budget line or the final text."""
    blocks = [f"{result_label(i, len(texts))}\n{neutralise(text)}"
              for i, text in enumerate(texts, start=1)]
    blocks.extend(neutralise(note) for note in notes)
    blocks.append(trained_final_text(final_reason, last_ok_sql) if final
                  else trained_budget_line(turns_left))
    return "\n\n".join(blocks)


def render_round_message(environment: Environment, results: Sequence[tuple[ToolCall, str]],
                         notes: Sequence[str], turns_left: int, *, final: bool = False,
                         final_reason: StopReason | None = None,
                         last_ok_sql: str | None = None) -> str:
    """The user turn after a round, in the texts of `environment`."""
    if environment is Environment.TRAINED:
        return render_trained_results([text for _, text in results], notes, turns_left, final=final,
                                      final_reason=final_reason, last_ok_sql=last_ok_sql)
    return render_results_message(results, notes, turns_left, final=final, final_reason=final_reason)


def continue_prompt(prompt: str, completion: str, user_message: str) -> str:
    """The next prompt: strictly the previous one plus the completion and a new user turn."""
    return prompt + completion + "<|im_end|>\n" + chatml_turn("user", user_message) + ASSISTANT_OPENING


def load_prompt_files(system_path: str | Path | None = None,
                      user_template_path: str | Path | None = None,
                      base: PromptSet = DEFAULT_PROMPTS) -> PromptSet:
    """`base` with the system prompt and/or user template replaced by UTF-8 text files."""
    system = _read_text(system_path) if system_path is not None else base.system
    template = _read_text(user_template_path) if user_template_path is not None else base.user_template
    return PromptSet(system=system, user_template=template)


def load_prompts(reference_agent: str | Path | None = None, system_prompt: str | Path | None = None,
                 user_template: str | Path | None = None) -> PromptSet:
    """Our prompts, or the reference agent's, with either text replaced from a file."""
    base = load_reference_agent(reference_agent) if reference_agent is not None else DEFAULT_PROMPTS
    return load_prompt_files(system_prompt, user_template, base=base)


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PromptConfigError(f"{path}: not UTF-8 text; save the file as UTF-8") from exc
    except OSError as exc:
        raise PromptConfigError(f"{path}: cannot be read ({exc.strerror or exc}); check the path") from exc


REFERENCE_NAMES = ("SYSTEM_PROMPT", "USER_TEMPLATE")


def load_reference_agent(path: str | Path) -> PromptSet:
    """Read SYSTEM_PROMPT and USER_TEMPLATE from the authors' sqale_agent.py without running it."""
    source = _read_text(path)
    try:
        module = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise PromptConfigError(
            f"{path}: not valid Python (line {exc.lineno}: {exc.msg}); give the authors' sqale_agent.py"
        ) from exc
    known: dict[str, str] = {}  # module-level names bound to string values so far
    not_literal: set[str] = set()
    for node in module.body:
        target, value = _simple_assignment(node)
        if target is None or value is None:
            continue
        text = _string_value(value, known)
        if text is None:
            known.pop(target, None)
            not_literal.add(target)
        else:
            known[target] = text
            not_literal.discard(target)
    problems = []
    for name in REFERENCE_NAMES:
        if name in not_literal:
            problems.append(f"{name} is not a literal string")
        elif name not in known:
            problems.append(f"{name} is missing")
    if problems:
        raise PromptConfigError(
            f"{path}: {'; '.join(problems)} (expected module-level assignments of string literals); "
            "give the authors' sqale_agent.py or use prompt files instead"
        )
    return PromptSet(system=known["SYSTEM_PROMPT"], user_template=known["USER_TEMPLATE"])


def _simple_assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


_STRIP_METHODS = frozenset({"strip", "lstrip", "rstrip"})


def _string_value(node: ast.expr, known: Mapping[str, str]) -> str | None:
    """The string an expression evaluates to, for literals and a few harmless forms, else None."""
    # Literals (implicit concatenation included) plus `a + b`, `.strip()`, `textwrap.dedent(...)`
    # and names of earlier module-level strings: how prompt constants are commonly written.
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string_value(node.left, known), _string_value(node.right, known)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Call) and not node.keywords and isinstance(node.func, ast.Attribute | ast.Name):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id
        if isinstance(func, ast.Attribute) and name in _STRIP_METHODS and not node.args:
            inner = _string_value(func.value, known)
            return None if inner is None else getattr(inner, name)()
        is_dedent = name == "dedent" and (
            isinstance(func, ast.Name) or (isinstance(func.value, ast.Name) and func.value.id == "textwrap"))
        if is_dedent and len(node.args) == 1:
            inner = _string_value(node.args[0], known)
            return None if inner is None else textwrap.dedent(inner)
    return None
