"""SQL run now as an answer, with no model asked: a verified entry's, or a candidate a person chose.

The statement runs once as an episode's final answer does (the episode's row, cell and byte
limits, through the same worker and the database's hide rules) and becomes an EpisodeResult
with no rounds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from .episode import EpisodeResult, EpisodeSettings, EpisodeStatus, StopReason
from .loop import TIMED_OUT, schema_reads
from .sqlite import Database, QueryResult, SqlValue


async def answer_from_sql(sql: str, database: Database, settings: EpisodeSettings, *, question: str,
                          evidence: str | None, status: EpisodeStatus,
                          stop_reason: StopReason,
                          params: Mapping[str, SqlValue] | None = None) -> tuple[EpisodeResult, QueryResult]:
    """`sql` run now as the answer to `question`, with `params` bound by SQLite (when it fails, the
    answer carries SQLite's error), and the statement's own result (what it read, as the worker
    reported it)."""
    started = time.perf_counter()
    result = await database.aquery(sql, max_rows=settings.result_rows, cell_limit=settings.result_cell_chars,
                                   byte_budget=settings.result_bytes, params=params)
    ran = result if result.ok else None
    tables, columns = schema_reads(await database.aschema(), result) if ran is not None else ((), ())
    seconds = time.perf_counter() - started
    return EpisodeResult(
        question=question, evidence=evidence, sql=sql, status=status, stop_reason=stop_reason,
        columns=ran.columns if ran else (), rows=ran.rows if ran else (),
        row_count=ran.total_rows if ran else 0,
        truncated=(ran.truncated or ran.cut_to_fit) if ran else False,
        error=None if ran else (result.error or result.status.value), rounds=(), tokens=0, seconds=seconds,
        model_seconds=0.0, tool_seconds=seconds, prompt="", cut=ran.cut if ran else None,
        tables_read=tables, columns_read=columns, answer_timed_out=result.status in TIMED_OUT), result
