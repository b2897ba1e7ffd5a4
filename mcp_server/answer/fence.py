"""Marking database rows and SQL as untrusted data in the answer's text: `agent.untrusted`,
which `sqale-agent ask` shows its answers through too, under the name the answer modules use."""

from __future__ import annotations

from agent.untrusted import (
    MARKER_WORD,
    NEUTRAL_WORD,
    ROWS_ARE_DATA,
    TAG_CHARS,
    SqlAuthor,
    block_tag,
    fence_untrusted,
    looks_like_marker,
    neutralise_markers,
    plain_sql,
    sql_block,
    sql_fence,
)

__all__ = ["MARKER_WORD", "NEUTRAL_WORD", "ROWS_ARE_DATA", "TAG_CHARS", "SqlAuthor", "block_tag",
           "fence_untrusted", "looks_like_marker", "neutralise_markers", "plain_sql", "sql_block",
           "sql_fence"]
