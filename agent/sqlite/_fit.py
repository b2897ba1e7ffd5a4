"""Cutting a result to a byte budget in the worker, before anything crosses to the server.

Runs inside the worker process (which has a memory cap): the server process only ever
receives what fits. Cells are clipped first, then trailing columns are left out, then rows;
the result records each cut so the answer can say what was cut and how to get less.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any

from .types import BlobRef, ClippedText

MIN_CELL_CHARS = 100  # text cells are never clipped shorter than this to fit more columns
_ROW_OVERHEAD = 4  # brackets and separators of one row in JSON
_CLIPPED_OVERHEAD = 24  # what a clipped cell adds when shown: `…[12,345 chars]`


def clip_value(value: Any, cell_limit: int | None) -> Any:
    """A blob as its size, and text past `cell_limit` characters as a ClippedText."""
    if cell_limit is None:
        return value
    if isinstance(value, bytes):
        return BlobRef(len(value))
    if isinstance(value, str) and len(value) > cell_limit:
        return ClippedText(value[:cell_limit], len(value))
    return value


def clip_row(row: tuple[Any, ...], cell_limit: int | None) -> tuple[Any, ...]:
    """Every cell of `row` through clip_value (`row` itself when none is a blob or too long)."""
    if cell_limit is None:
        return row
    for value in row:
        if isinstance(value, bytes) or (isinstance(value, str) and len(value) > cell_limit):
            return tuple(clip_value(v, cell_limit) for v in row)
    return row


def _json_length(text: str) -> int:
    """The length of `text` as a JSON string (ASCII-escaped, quotes included), as json.dumps writes it."""
    # json.dumps(text) is this very function behind two Python calls (JSONEncoder.encode).
    return len(encode_basestring_ascii(text))


def cell_weight(value: Any) -> int:
    """An upper bound of the bytes a cell takes in the JSON answer (ASCII-escaped)."""
    if value is None:
        return 5
    if isinstance(value, str):
        return _json_length(value) + 1
    if isinstance(value, ClippedText):
        return _json_length(value.prefix) + _CLIPPED_OVERHEAD
    if isinstance(value, bytes):
        return len(value) * 2 + 4
    return len(str(value)) + 1 if isinstance(value, (int, float)) else _CLIPPED_OVERHEAD


def row_weight(row: tuple[Any, ...]) -> int:
    """Bytes of one row in the JSON answer (an upper bound)."""
    weight = _ROW_OVERHEAD
    for value in row:
        # The usual cells weighed here, as cell_weight would: a call per cell costs more than this.
        kind = type(value)
        if kind is int:
            weight += len(str(value)) + 1
        elif kind is str:
            weight += len(encode_basestring_ascii(value)) + 1
        else:
            weight += cell_weight(value)
    return weight


@dataclass
class ResultFitter:
    """Collects rows while they fit in `budget` bytes (None: no budget, only cell_limit)."""

    columns: tuple[str, ...]
    cell_limit: int | None
    budget: int | None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    kept_columns: int = -1  # decided by the first row; -1 until then
    cells_cut_to: int | None = None  # text cells were clipped to this many characters to fit
    rows_cut: bool = False  # a row did not fit in what was left of the budget
    used: int = 0

    def add(self, raw: tuple[Any, ...]) -> bool:
        """Keep `raw` (cut to fit); False when it no longer fits and collecting must stop."""
        if self.budget is None:
            self.rows.append(clip_row(raw, self.cell_limit))
            return True
        if self.kept_columns < 0:
            return self._add_first(raw)
        row = clip_row(raw[: self.kept_columns], self._cell_chars())
        weight = row_weight(row)
        if self.used + weight > self.budget:
            self.rows_cut = True
            return False
        self.used += weight
        self.rows.append(row)
        return True

    @property
    def columns_cut(self) -> int:
        """How many trailing columns were left out to fit."""
        return 0 if self.kept_columns < 0 else len(self.columns) - self.kept_columns

    def _cell_chars(self) -> int:
        # With a budget, blobs are always sizes and text is always clippable.
        if self.cells_cut_to is None:
            return (self.budget or 0) if self.cell_limit is None else self.cell_limit
        return self.cells_cut_to if self.cell_limit is None else min(self.cell_limit, self.cells_cut_to)

    def _add_first(self, raw: tuple[Any, ...]) -> bool:
        """The first row decides how far cells are clipped and how many columns are kept."""
        assert self.budget is not None
        header = [_json_length(name) + 1 for name in self.columns]
        row = clip_row(raw, self._cell_chars())
        if sum(header) + row_weight(row) > self.budget:
            # Clip every text cell to an equal share first: more columns stay visible.
            share = max(MIN_CELL_CHARS, self.budget // (2 * max(1, len(self.columns))))
            if share < self._cell_chars():
                self.cells_cut_to = share
                row = clip_row(raw, share)
        used, kept = _ROW_OVERHEAD, 0
        for name_weight, value in zip(header, row, strict=True):
            weight = name_weight + cell_weight(value)
            if kept and used + weight > self.budget:
                break
            used += weight
            kept += 1
        self.kept_columns = kept
        if kept == 0:  # a statement without result columns
            return True
        if used > self.budget:  # one column alone is too big: clip its text further
            room = max(0, (self.budget - header[0] - _ROW_OVERHEAD - _CLIPPED_OVERHEAD) // 6)
            self.cells_cut_to = room
            row = clip_row(raw[:1], room)
            used = _ROW_OVERHEAD + header[0] + cell_weight(row[0])
        self.used = used
        self.rows.append(row[:kept])
        return True


__all__ = ["MIN_CELL_CHARS", "ResultFitter", "cell_weight", "clip_row", "clip_value", "row_weight"]
