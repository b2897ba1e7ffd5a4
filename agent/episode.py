"""The episode as explicit data: settings in, rounds and a result out."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .sqlite import ResultCut
from .tools import ToolSettings
from .tools.environment import DEFAULT_ENVIRONMENT, Environment


class EpisodeStatus(StrEnum):
    """How the episode produced its SQL."""

    SUBMITTED = "submitted"  # the model called submit_sql
    FINAL_ANSWER = "final_answer"  # the model answered with SQL in its final turn
    FALLBACK = "fallback"  # no usable answer: the last query that ran without error
    FAILED = "failed"  # nothing runnable at all
    VERIFIED = "verified"  # no episode: a verified library's SQL for the same question, run now


class StopReason(StrEnum):
    """Why the exploration ended."""

    SUBMITTED = "submit_sql"
    TOOL_TURNS = "tool_turns_used"  # all tool turns spent
    FAILED_QUERIES = "failed_queries"  # too many failed run_query in a row
    TOKEN_BUDGET = "token_budget"  # the episode token budget ran out
    NO_CALL = "no_tool_call"  # a tool turn answered with SQL that ran, instead of calls
    # No tool turn held a call (or an attempt at one): not the trained agent, or a rebuilt prompt.
    NEVER_CALLED = "never_called_a_tool"
    NO_TABLES = "no_readable_tables"  # the database shows no table or view: the model was not asked
    TIME_UP = "time_up"  # told to answer now (its time nearly up): the final turn came early
    VERIFIED = "verified_answer"  # the question was answered from the verified library: no exploration


RESULT_CELL_CHARS = 10_000  # a longer text cell of an answer arrives clipped, with its length


@dataclass(frozen=True)
class EpisodeSettings:
    """Budgets exactly as trained, plus result limits; parsed once at the edge."""

    max_tool_turns: int = 6
    max_failed_queries: int = 4
    token_budget: int = 12_288
    max_turn_tokens: int = 2_048  # cap on one turn's num_predict, within what the budget leaves
    final_turn_min_tokens: int = 256  # tokens kept back so the final turn can still answer
    result_rows: int = 50  # rows of the final answer kept in the result
    result_cell_chars: int | None = RESULT_CELL_CHARS  # longer text cells arrive clipped (ClippedText)
    # What the final answer's rows may weigh as JSON; the SQLite worker cuts cells, columns
    # and rows to fit before they reach this process (QueryResult.cut says what was cut).
    result_bytes: int = 262_144
    tools: ToolSettings = field(default_factory=ToolSettings)
    environment: Environment = DEFAULT_ENVIRONMENT  # which texts the model reads (tools and turns)


@dataclass(frozen=True)
class ToolCall:
    """One call parsed from a completion."""

    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class CallRecord:
    """A call and what it returned to the model."""

    call: ToolCall
    ok: bool
    text: str  # the result text exactly as the model saw it
    seconds: float
    tables: frozenset[str] = frozenset()  # real tables this call looked at or read
    duplicate: bool = False  # identical to an earlier call in the same round; not run again


@dataclass(frozen=True)
class Round:
    """One model turn and the tool results it got back."""

    index: int  # 1-based
    final: bool  # the answer turn after exploration
    completion: str
    think: str | None
    calls: tuple[CallRecord, ...]
    notes: tuple[str, ...]  # corrective messages (no call found, broken JSON, ...)
    model_seconds: float
    tool_seconds: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    context_tokens: int  # episode tokens used after this round
    # Prompt tokens the engine served from its cache, as it reported them; None: it did not say.
    # When set, prompt_tokens is the whole prompt (prompt_tokens - cached_tokens were evaluated).
    cached_tokens: int | None = None
    replica: str | None = None  # the engine (replica) that answered, when the backend says

    @property
    def evaluated_tokens(self) -> int | None:
        """Prompt tokens the engine evaluated this round; None when it did not say what it reused."""
        return None if self.cached_tokens is None else max(0, self.prompt_tokens - self.cached_tokens)


@dataclass(frozen=True)
class EpisodeResult:
    """Everything an episode produced; the MCP server and the evaluation read only this."""

    question: str
    evidence: str | None
    sql: str | None
    status: EpisodeStatus
    stop_reason: StopReason
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    row_count: int
    truncated: bool  # more rows exist than are in `rows`, or the rows were cut to fit (see `cut`)
    error: str | None  # why the episode failed, or the final SQL's error
    rounds: tuple[Round, ...]
    tokens: int  # episode tokens used (context at the end)
    seconds: float
    model_seconds: float
    tool_seconds: float
    prompt: str  # the final raw prompt text, completions included
    cut: ResultCut | None = None  # what was cut from the rows to fit result_bytes
    tables_read: tuple[str, ...] = ()  # tables and views the final SQL read, by name
    columns_read: tuple[tuple[str, str], ...] = ()  # (table, column) pairs the final SQL read
    query_timeouts: int = 0  # the model's statements stopped by the per-query time limit
    answer_timed_out: bool = False  # the answer's own SQL ran past the per-query time limit

    @property
    def tool_calls(self) -> int:
        """Calls the model made in tool turns, duplicates included."""
        return sum(len(r.calls) for r in self.rounds)

    @property
    def tables_seen(self) -> frozenset[str]:
        """Real tables the model looked at or read during the episode."""
        return frozenset().union(*(c.tables for r in self.rounds for c in r.calls))
