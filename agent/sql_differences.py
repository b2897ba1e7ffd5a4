"""What sets one SQL text apart from others, told in plain terms or shown as an excerpt (pure).

- `differences_text`: the top-level parts (agent.sqlite.sql_clauses) one statement has that
  not every other has ("filter Genre.Name = 'Jazz'"), and those every other has but it lacks
  ("no filter ..."), most telling kinds first; when no part differs (the difference is inside
  a subquery, say), the words where its text first differs from the others'.
- `differing_excerpt`: a long SQL cut to show where it differs from a reference (the answer's
  SQL) instead of the start both share: eight long SQLs that differ only at the end stay eight
  different excerpts.
Comments never appear in what these return (the scanner drops them).
"""

from __future__ import annotations

from collections.abc import Sequence

from .sqlite.sql_clauses import PartKind, SqlPart, sql_parts, without_comments

PART_CHARS = 60  # one part quoted in a difference
DIFFERENCES_SHOWN = 2
DIFFERENCE_CHARS = 110  # all of them
EXCERPT_CONTEXT = 24  # characters kept before the first difference
TEXT_DIFFERENCE_CHARS = 50  # the fallback: the text where it first differs

# The word before a part it has (none: the part's own text starts with its keyword, `LEFT JOIN ...`).
_HAS = {
    PartKind.FILTER: "filter",
    PartKind.JOIN: "",
    PartKind.FROM: "from",
    PartKind.GROUP: "grouped by",
    PartKind.HAVING: "having",
    PartKind.COLUMN: "column",
    PartKind.DISTINCT: "",
    PartKind.LIMIT: "",
    PartKind.ORDER: "ordered by",
    PartKind.COMPOUND: "",
    PartKind.WITH: "with",
}
_LACKS = {PartKind.GROUP: "not grouped by", PartKind.ORDER: "not ordered by"}
_ORDER = list(PartKind)


def differences_text(index: int, sqls: Sequence[str]) -> str | None:
    """What sets `sqls[index]` apart from the other statements, in one short line; None when alone
    or identical in text to another."""
    mine = sqls[index]
    others = [s for k, s in enumerate(sqls) if k != index]
    if not others:
        return None
    parts = sql_parts(mine)
    their = [sql_parts(s) for s in others]
    said = _part_differences(parts, their) if parts and all(their) else []
    if not said:
        excerpt = _first_text_difference(mine, others)
        return None if excerpt is None else f"differs at: {excerpt}"
    shown = said[:DIFFERENCES_SHOWN]
    text = "; ".join(shown)
    if len(said) > len(shown):
        text += f"; and {len(said) - len(shown)} more"
    return text if len(text) <= DIFFERENCE_CHARS else text[: DIFFERENCE_CHARS - 1].rstrip() + "…"


def _part_differences(parts: Sequence[SqlPart], their: Sequence[Sequence[SqlPart]]) -> list[str]:
    """What it says, most telling first: its parts no other statement has; the parts every other
    has and it lacks (unless it has its own of that kind, told already); its parts only some
    others lack. Each group in the order of PartKind."""
    keys = {p.key for p in parts}
    their_keys = [{p.key for p in ps} for ps in their]
    unique = [p for p in parts if not any(p.key in k for k in their_keys)]
    partial = [p for p in parts if p not in unique and not all(p.key in k for k in their_keys)]
    told_kinds = {p.kind for p in unique}
    lacks: list[SqlPart] = []
    for p in their[0]:
        if (
            p.key not in keys
            and p.kind not in told_kinds
            and all(p.key in k for k in their_keys)
            and p.key not in {q.key for q in lacks}
        ):
            lacks.append(p)

    def by_kind(group: list[SqlPart]) -> list[SqlPart]:
        return sorted(group, key=lambda p: _ORDER.index(p.kind))

    return (
        [_told(p, lacking=False) for p in by_kind(unique)]
        + [_told(p, lacking=True) for p in by_kind(lacks)]
        + [_told(p, lacking=False) for p in by_kind(partial)]
    )


def _told(part: SqlPart, *, lacking: bool) -> str:
    text = _clipped(part.text, PART_CHARS)
    word = _LACKS.get(part.kind, f"no {_HAS[part.kind]}".rstrip()) if lacking else _HAS[part.kind]
    return f"{word} {text}" if word else text


def _first_text_difference(mine: str, others: Sequence[str]) -> str | None:
    """The words of `mine` where it first differs from the other statement sharing most of its start
    (comments dropped); None when their texts are the same."""
    flat = without_comments(mine)
    their = [without_comments(o) for o in others]
    if any(t == flat for t in their):
        return None
    best = max((_common_prefix(flat, t) for t in their), default=0)
    start = _word_start(flat, max(0, best - 10))
    return _clipped(("…" if start else "") + flat[start:], TEXT_DIFFERENCE_CHARS)


def differing_excerpt(sql: str, reference: str | None, limit: int, *, same: str = "the answer's SQL") -> str:
    """`sql` on one line in at most about `limit` characters: from just before where it differs from
    `reference`, saying how much before that it shares with `same` and how much follows."""
    flat = " ".join(sql.split())
    if len(flat) <= limit:
        return flat
    shared = _common_prefix(flat, " ".join(reference.split())) if reference is not None else 0
    start = _word_start(flat, max(0, shared - EXCERPT_CONTEXT)) if shared > EXCERPT_CONTEXT else 0
    head = f"…({start:,} characters as in {same}) " if start else ""
    room = max(20, limit - len(head) - 30)
    body = flat[start : start + room]
    rest = len(flat) - start - len(body)
    return f"{head}{body}{f' …(+{rest:,} characters)' if rest else ''}"


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _word_start(text: str, i: int) -> int:
    """`i`, moved back to the start of the word it falls in."""
    while 0 < i < len(text) and not text[i - 1].isspace():
        i -= 1
    return i


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
