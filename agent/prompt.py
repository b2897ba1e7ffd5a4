"""Prompt text of an episode: the system prompt, the user turn, tool-result turns, ChatML.

Everything here is a pure function of its arguments. Untrusted text (the question, the
evidence note, tool results, the model's own call arguments echoed back) goes through
`neutralise` so it can never open or close a chat turn.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .episode import StopReason, ToolCall
from .text import plural
from .tools.environment import (
    DEFAULT_ENVIRONMENT,
    DEFAULT_TRAINED_TEXTS,
    Environment,
    TrainedTexts,
    fill_in_order,
    template_fields,
)

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

_FINAL_REASONS: Mapping[StopReason | None, str] = MappingProxyType(
    {
        StopReason.FAILED_QUERIES: "Too many queries failed in a row, so exploration is over.\n",
        StopReason.TOKEN_BUDGET: "The token budget is almost used up, so exploration is over.\n",
    }
)

FINAL_INSTRUCTION = (
    "This is your final answer turn: tools will not run any more.\n"
    "Write your final SQL query in a ```sql code block, "
    'or call {"tool": "submit_sql", "args": {"sql": "..."}}.'
)


# The trained environment's final turn, verbatim from the authors' episodes (agent-protocol.md):
# it shows the last query that ran without error and asks for the SQL as plain text.
TRAINED_FINAL_OPENING = (
    "You have reached the exploration limit. Now generate the final SQL query to "
    "answer the question. Return only the SQL query."
)
TRAINED_LAST_QUERY = (
    "Your last query that executed without error was:\n{sql}\n"
    "If you are not sure of an improvement, return that query."
)
# Our wording, in the same structure, for what the authors show no example of.
TRAINED_NO_QUERY = (
    "None of your queries has executed without error yet, so write your best query from what you have seen."
)
_TRAINED_REASONS: Mapping[StopReason | None, str] = MappingProxyType(
    {
        StopReason.FAILED_QUERIES: "Too many queries failed in a row. ",
        StopReason.TOKEN_BUDGET: "The token budget is almost used up. ",
    }
)
ECHOED_SQL_CHARS = 4_000  # the last good query is echoed whole up to this size


@dataclass(frozen=True)
class PromptSet:
    """The texts an episode is rendered from: its two prompts, how an assistant turn opens, and the
    authors' own texts of the trained environment where their file has them (agent.prompt_files)."""

    system: str
    user_template: str  # str.format fields {question} and {evidence}; unknown fields stay as written
    assistant_prefix: str = ""  # what opens every assistant turn after `<|im_start|>assistant\n`
    texts: TrainedTexts = DEFAULT_TRAINED_TEXTS


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
    return completion if match is None else completion[: match.start()]


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


def render_initial_prompt(
    prompts: PromptSet,
    question: str,
    evidence: str | None,
    *,
    final: bool = False,
    final_reason: StopReason | None = None,
    environment: Environment = DEFAULT_ENVIRONMENT,
) -> str:
    """System turn, first user turn, and the opening of the first assistant turn."""
    message = render_user_message(prompts.user_template, question, evidence)
    if final:  # no tool turns at all (max_tool_turns == 0 or a prompt too long for the budget)
        ask = (
            trained_final_text(final_reason, None, prompts.texts)
            if environment is Environment.TRAINED
            else final_instruction(final_reason)
        )
        message += "\n\n" + ask
    return (
        chatml_turn("system", prompts.system)
        + chatml_turn("user", message)
        + ASSISTANT_OPENING
        + prompts.assistant_prefix
    )


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


def render_results_message(
    results: Sequence[tuple[ToolCall, str]],
    notes: Sequence[str],
    turns_left: int,
    *,
    final: bool = False,
    final_reason: StopReason | None = None,
) -> str:
    """One round's results as one user message: calls in order, notes, the budget line."""
    blocks = [
        f"{render_call_header(i, call)}\n{neutralise(text)}" for i, (call, text) in enumerate(results, start=1)
    ]
    blocks.extend(f"[note] {neutralise(note)}" for note in notes)
    blocks.append(budget_line(0 if final else turns_left))
    if final:
        blocks[-1] += "\n" + final_instruction(final_reason)
    return "\n\n".join(blocks)


def trained_budget_line(turns_left: int, texts: TrainedTexts = DEFAULT_TRAINED_TEXTS) -> str:
    """The trained environment's budget line: no brackets, `1 tool turn` singular (or the authors')."""
    if texts.budget is not None:
        return fill_in_order(texts.budget, str(turns_left))
    return f"{plural(turns_left, 'tool turn')} left before you must answer"


def result_label(position: int, total: int, texts: TrainedTexts = DEFAULT_TRAINED_TEXTS) -> str:
    """`result (10/12):` - a result's position out of the round's total, as the model quotes it."""
    if texts.result_label is not None:
        return fill_in_order(texts.result_label, str(position), str(total))
    return f"result ({position}/{total}):"


def _echoed_sql(sql: str) -> str:
    text = neutralise(sql.strip())
    if len(text) <= ECHOED_SQL_CHARS:
        return text
    return text[:ECHOED_SQL_CHARS] + f"…[+{len(text) - ECHOED_SQL_CHARS:,} chars]"


def trained_final_text(
    reason: StopReason | None, last_ok_sql: str | None, texts: TrainedTexts = DEFAULT_TRAINED_TEXTS
) -> str:
    """The final-turn text: the authors' words with the last query that ran without error.

    The authors' own final text, where their file has it, replaces the opening sentences (and,
    when it has a field for it, the last query's sentence as well).
    """
    reason_text = _TRAINED_REASONS.get(reason, "")
    if texts.final is not None and template_fields(texts.final) == 1 and last_ok_sql is not None:
        return reason_text + fill_in_order(texts.final, _echoed_sql(last_ok_sql))
    opening = (
        texts.final if texts.final is not None and template_fields(texts.final) == 0 else TRAINED_FINAL_OPENING
    )
    ending = (
        TRAINED_NO_QUERY
        if last_ok_sql is None
        else fill_in_order(texts.last_query or TRAINED_LAST_QUERY, _echoed_sql(last_ok_sql))
    )
    return f"{reason_text}{opening} {ending}"


def render_trained_results(
    texts: Sequence[str],
    notes: Sequence[str],
    turns_left: int,
    *,
    final: bool = False,
    final_reason: StopReason | None = None,
    last_ok_sql: str | None = None,
    trained: TrainedTexts = DEFAULT_TRAINED_TEXTS,
) -> str:
    """One round's results labelled by position, notes, then the budget line or the final text."""
    blocks = [
        f"{result_label(i, len(texts), trained)}\n{neutralise(text)}" for i, text in enumerate(texts, start=1)
    ]
    blocks.extend(neutralise(note) for note in notes)
    blocks.append(
        trained_final_text(final_reason, last_ok_sql, trained)
        if final
        else trained_budget_line(turns_left, trained)
    )
    return "\n\n".join(blocks)


def render_round_message(
    environment: Environment,
    results: Sequence[tuple[ToolCall, str]],
    notes: Sequence[str],
    turns_left: int,
    *,
    final: bool = False,
    final_reason: StopReason | None = None,
    last_ok_sql: str | None = None,
    texts: TrainedTexts = DEFAULT_TRAINED_TEXTS,
) -> str:
    """The user turn after a round, in the texts of `environment`."""
    if environment is Environment.TRAINED:
        return render_trained_results(
            [text for _, text in results],
            notes,
            turns_left,
            final=final,
            final_reason=final_reason,
            last_ok_sql=last_ok_sql,
            trained=texts,
        )
    return render_results_message(results, notes, turns_left, final=final, final_reason=final_reason)


def continue_prompt(prompt: str, completion: str, user_message: str, assistant_prefix: str = "") -> str:
    """The next prompt: strictly the previous one plus the completion, a new user turn and the
    opening of the next assistant turn."""
    return (
        prompt
        + completion
        + "<|im_end|>\n"
        + chatml_turn("user", user_message)
        + ASSISTANT_OPENING
        + assistant_prefix
    )
