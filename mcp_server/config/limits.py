"""The limits a server enforces on an answer, stated where the caller looks, and said when hit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent import RESULT_CELL_CHARS

from .server_settings import MAX_ANSWER_CHARS, ServerSettings

LimitName = Literal["max_rows", "cell_chars", "result_bytes", "query_timeout"]

# What a whole answer (text and structured content) may weigh, in characters as clients count them
# (at most MAX_ANSWER_CHARS, the most a tool may declare to Claude Code: anthropic/maxResultSizeChars).
DEFAULT_ANSWER_CHARS = 40_000  # ~10k tokens: under Claude Code's warning, under its 50,000 default
# With the default rows budget, what is left beside the rows for the text, SQL, trace and the rest.
ROOM_BESIDE_ROWS = DEFAULT_ANSWER_CHARS - ServerSettings.model_fields["max_result_bytes"].default
MAX_ROWS_BYTES = MAX_ANSWER_CHARS - ROOM_BESIDE_ROWS  # the most rows that leave that room in any answer
RESULT_SIZE_META = "anthropic/maxResultSizeChars"  # how a tool raises Claude Code's inline limit


@dataclass(frozen=True)
class AnswerLimits:
    """What one answer may hold and how long it may take; from the settings, fixed at start."""

    max_rows: int  # rows an answer returns (--max-rows)
    cell_chars: int  # a longer text cell arrives clipped, with its length
    query_timeout: float  # seconds one SQL statement may run (--query-timeout)
    episode_timeout: float  # seconds answering one question may take (--episode-timeout)
    # What an answer's rows may weigh as JSON: --max-result-bytes, at most MAX_ROWS_BYTES.
    max_result_bytes: int = ServerSettings.model_fields["max_result_bytes"].default

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> AnswerLimits:
        """The limits a server started with `settings` enforces (cells: as an episode clips them;
        rows: --max-result-bytes as far as an answer of MAX_ANSWER_CHARS carries them)."""
        return cls(
            max_rows=settings.max_rows,
            cell_chars=RESULT_CELL_CHARS,
            query_timeout=settings.query_timeout,
            episode_timeout=settings.episode_timeout,
            max_result_bytes=min(settings.max_result_bytes, MAX_ROWS_BYTES),
        )

    @property
    def answer_chars(self) -> int:
        """Characters a whole answer may take: its rows' budget and the room beside it."""
        return min(MAX_ANSWER_CHARS, max(DEFAULT_ANSWER_CHARS, self.max_result_bytes + ROOM_BESIDE_ROWS))


def result_size_meta(limits: AnswerLimits) -> dict[str, int] | None:
    """The tool's `_meta` raising Claude Code's inline limit, when the limits allow larger answers."""
    if limits.answer_chars <= DEFAULT_ANSWER_CHARS:
        return None
    return {RESULT_SIZE_META: limits.answer_chars}


def answer_size_notice(settings: ServerSettings) -> str | None:
    """What the start-up log says of the answers' size when --max-result-bytes raises it, else None."""
    limits = AnswerLimits.from_settings(settings)
    if limits.answer_chars <= DEFAULT_ANSWER_CHARS:
        return None
    declared = (
        "(_meta anthropic/maxResultSizeChars), which Claude Code keeps in the conversation; a "
        "client that does not read it may cut or set aside answers past its own limit (Claude "
        "Code's is 50,000 characters)"
    )
    given = f"--max-result-bytes {settings.max_result_bytes:,}"
    if settings.max_result_bytes <= MAX_ROWS_BYTES:
        return f"{given}: the tool declares answers of up to {limits.answer_chars:,} characters {declared}"
    return (
        f"{given} is more than one answer carries: an answer's rows are cut to {MAX_ROWS_BYTES:,} bytes "
        f"of JSON (give at most that to silence this warning), so that the whole answer stays within "
        f"{limits.answer_chars:,} characters, the most the tool may declare {declared}"
    )


def limits_paragraph(limits: AnswerLimits) -> str:
    """The tool description's paragraph about the limits in force and what to do about them."""
    return (
        f"Limits: an answer holds at most {limits.max_rows:,} rows (row_count still counts "
        f"the rest) and at most {limits.max_result_bytes:,} bytes of rows as JSON (columns, "
        f"cells and rows are cut to fit); text cells over {limits.cell_chars:,} characters "
        "are clipped; each SQL "
        f"statement may run {limits.query_timeout:g} s; answering one question may take "
        f"{limits.episode_timeout:g} s (time queued not counted). An answer that hits one names "
        "it in `limits_hit` and in the text; ask for less (a top N, an aggregate, a filter, fewer "
        "columns, a shorter period) to stay within them."
    )


def limits_hit(
    *,
    truncated: bool,
    clipped_cells: bool,
    query_timeouts: int,
    answer_timed_out: bool,
    cut_to_fit: bool = False,
) -> list[LimitName]:
    """The names of the limits an answer ran into, in a fixed order."""
    hit: list[LimitName] = []
    if truncated:
        hit.append("max_rows")
    if clipped_cells:
        hit.append("cell_chars")
    if cut_to_fit:
        hit.append("result_bytes")
    if query_timeouts or answer_timed_out:
        hit.append("query_timeout")
    return hit


def limit_lines(hit: list[LimitName], limits: AnswerLimits) -> list[str]:
    """One line per limit the answer hit: which limit, its value, and how to ask for less."""
    lines = []
    if "max_rows" in hit:
        lines.append(
            f"Limit hit: the answer stops at the server's cap of {limits.max_rows:,} rows "
            "(--max-rows). To see every row, ask for fewer: a top N, an aggregate or a filter."
        )
    if "cell_chars" in hit:
        lines.append(
            f"Limit hit: text cells over {limits.cell_chars:,} characters were clipped. "
            "Ask for the part you need (e.g. the first 200 characters) or for fewer columns."
        )
    if "result_bytes" in hit:
        lines.append(
            f"Limit hit: the rows were cut to fit the server's {limits.max_result_bytes:,} "
            "bytes per answer (--max-result-bytes); the note above says what was cut."
        )
    if "query_timeout" in hit:
        lines.append(
            f"Limit hit: SQL ran past the {limits.query_timeout:g} s per-query limit "
            "(--query-timeout) and was stopped. Ask a narrower question (a filter, a "
            "shorter period, fewer tables) or ask the operator to raise the limit."
        )
    return lines
