"""What content a span may hold: none by default; with content capture on, the text with every
hidden name taken out.

Content is the question, the evidence, SQL, tool results (cell values among them) and what the
model wrote. Without `--trace-content` no span holds any of it: spans carry names from fixed
lists, counts, statuses and durations only. With it, each content attribute goes through
`ContentPolicy.text`, which replaces every hidden table and column name (in any case, inside
longer words too) with `[hidden]`: a name the owner hides never reaches a span, even when the
question or the model's SQL writes it.

The policy of the question being answered travels in a context variable, set by the front end
around the question (`capture`) and read by every span below it (the model calls, tools and
statements run in the question's context: anyio copies it into tasks and worker threads).
Outside a question the policy captures nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

HIDDEN = "[hidden]"
# What a span keeps of one content text: a span is no place for a whole result set.
CONTENT_CHARS = 4_096


@dataclass(frozen=True)
class ContentPolicy:
    """Whether spans hold content, and the hidden names that never appear in it."""

    capture: bool = False
    hidden: frozenset[str] = frozenset()  # identifiers, case-folded: "email", "secrets"
    _pattern: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.hidden:
            # Inside longer words too: `Email_dump` would still spell the hidden `Email`.
            words = "|".join(re.escape(w) for w in sorted(self.hidden, key=len, reverse=True))
            object.__setattr__(self, "_pattern", re.compile(words, re.IGNORECASE))

    @classmethod
    def of(cls, capture: bool, hidden_names: Iterable[str] = ()) -> ContentPolicy:
        """The policy for `capture` over a database hiding `hidden_names` ("Table", "Table.Column")."""
        words = {part.casefold() for name in hidden_names for part in _parts(name)}
        return cls(capture, frozenset(words))

    def text(self, value: str | None) -> str | None:
        """`value` as a span may hold it: None when capture is off, else clipped, hidden names out."""
        if not self.capture or value is None:
            return None
        clipped = value if len(value) <= CONTENT_CHARS else value[:CONTENT_CHARS] + "…"
        return clipped if self._pattern is None else self._pattern.sub(HIDDEN, clipped)

    def json(self, value: Any) -> str | None:
        """`value` as JSON text under the same rules as `text`."""
        if not self.capture:
            return None
        return self.text(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))


def _parts(name: str) -> tuple[str, ...]:
    """The identifiers a hidden name stands for: a table, or a column (the column's own name)."""
    table, dot, column = name.partition(".")
    return (column,) if dot else (table,)


NO_CONTENT = ContentPolicy()
_CURRENT: ContextVar[ContentPolicy] = ContextVar("sqale_trace_content", default=NO_CONTENT)


def content_policy() -> ContentPolicy:
    """The policy of the question being answered (nothing captured outside a question)."""
    return _CURRENT.get()


@contextmanager
def capture(policy: ContentPolicy) -> Iterator[None]:
    """Answer the block's question under `policy` (what `narrow` sets inside it ends with it)."""
    token = _CURRENT.set(policy)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def narrow(policy: ContentPolicy) -> None:
    """Replace the policy of the question being answered (inside `capture`): once its database is
    known, its hidden names join the policy for everything the question does from then on."""
    _CURRENT.set(policy)
