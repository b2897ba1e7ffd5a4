"""Human-facing text about an episode that every front end shows: progress lines, cells as JSON,
what was cut from an answer, the model's last reply, why an episode never called a tool.

Pure functions; the CLI and the MCP server both print through them (the CLI's answer table and
round-by-round trace are `sqale-agent ask`'s own: agent/commands/ask.py).
"""

from __future__ import annotations

import math

from .episode import EpisodeResult, Round, ToolCall
from .replies import split_think
from .sqlite.types import BlobRef, ClippedText, ResultCut
from .text import escape_unsafe, plural
from .tools import call_label_args

LABEL_CHARS = 60
LAST_REPLY_CHARS = 400  # of a failed answer's last reply shown to the caller
# How a failed answer ends when a writer held the database: waiting helps, rephrasing cannot.
BUSY_ADVICE = "another program was writing to the database: ask again once it is done"
REPHRASE_ADVICE = "try rephrasing the question or naming the tables it is about"


JsonCell = str | int | float | bool | None


def clip(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def json_cell(value: object) -> JsonCell:
    """A result cell as a JSON value: blobs as `<blob N bytes>`, other odd types as text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return str(BlobRef(len(value)))
    if isinstance(value, ClippedText):
        return f"{value.prefix}…[{value.length:,} chars]"
    return str(value)


def cut_note(cut: ResultCut, rows_kept: int) -> str:
    """What was cut from an answer's rows to fit the byte budget, and how to get less."""
    parts = []
    if cut.columns_cut:
        parts.append(f"{cut.total_columns - cut.columns_cut:,} of {cut.total_columns:,} columns kept")
    if cut.cells_cut_to is not None:
        parts.append(f"text cells clipped to {cut.cells_cut_to:,} characters")
    if cut.rows_cut:
        parts.append(f"only the first {plural(rows_kept, 'row')} kept")
    return (
        f"the result was cut to fit {cut.byte_budget:,} bytes ({'; '.join(parts)}); ask for "
        "fewer columns, shorter values (substr) or an aggregate (COUNT, SUM, GROUP BY) to "
        "get all of it"
    )


def call_label(call: ToolCall) -> str:
    """A call as progress shows it: `describe_table(Track)`, `join_path(A, B)`, `run_query`.

    The model wrote the name and arguments: they are kept on one line with invisible and
    direction-changing characters shown as escapes.
    """
    shown = call_label_args(call.tool, call.args)
    name = escape_unsafe(clip(call.tool, 40))
    return f"{name}({escape_unsafe(clip(', '.join(shown), LABEL_CHARS))})" if shown else name


def progress_message(played: Round, max_tool_turns: int, limit: int = 200) -> str:
    """`round 2/6: describe_table(Track), run_query` (the final turn says `final answer`)."""
    labels: list[str] = []
    for record in played.calls:
        label = call_label(record.call)
        if label not in labels:
            labels.append(label)
    head = "final answer" if played.final else f"round {played.index}/{max_tool_turns}"
    body = ", ".join(labels) if labels else "no tool call"
    return clip(f"{head}: {body}", limit)


def last_reply_excerpt(result: EpisodeResult, limit: int = LAST_REPLY_CHARS) -> str | None:
    """The model's last reply on one line, clipped: what it wrote outside its thinking (its
    calls, its SQL or its words), else the end of its thinking; None when it never replied."""
    if not result.rounds:
        return None
    thinking, outside, _ = split_think(result.rounds[-1].completion)
    said = " ".join(outside.split())
    if said:
        return clip(said, limit)
    thought = " ".join((thinking or "").split())
    if len(thought) <= limit:
        return thought
    return "…" + thought[len(thought) - limit + 1 :]  # where it stopped says most


def never_called(rounds: int) -> str:
    """Why an episode whose tool turns held no call has no answer, and what to check."""
    return (
        f"no answer: the model called no tool in {rounds} rounds, so it never looked at the database. "
        "That is a problem of the model or its runtime, not of the question: another model may be "
        "served under this model's name, an Ollama Modelfile whose TEMPLATE is not the raw "
        "{{ .Prompt }} may rewrite the prompt, or a chat endpoint may rebuild it; run "
        "`sqale-agent doctor`, which asks the model one question and checks that it calls a tool"
    )
