"""Execution accuracy as the benchmarks define it, and voting among sampled answers.

Values compare with Python equality on what sqlite3 returns, exactly as the official
scripts do (they compare `cursor.fetchall()` tuples): 1 == 1.0, '1' != 1, NULL == NULL.

- BIRD (evaluation.py): `set(predicted) == set(gold)`: row order and duplicates are
  ignored; the column order matters.
- Spider (test-suite `exec_eval.result_eq`, also used for KaggleDBQA): the rows form a
  multiset, compared in order only when the gold query orders them; the columns may come
  in any order. Two deliberate differences from that script: ORDER BY counts only at the
  top level of the gold query (the script looks for "order by" anywhere, so an ordered
  subquery makes it order-sensitive), and the column permutations are pruned with every
  row instead of 20 random ones (same verdicts, deterministic).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from ..sqlite.sql_text import skip_blanks
from ..voting import MatchRule, vote_key  # one comparison for eval and the server

__all__ = ["MatchRule", "has_top_level_order_by", "results_match", "vote_key"]

Row = tuple[Any, ...]

MAX_COLUMN_PERMUTATIONS = 100_000  # beyond this many candidate column orders we give up (wrong)


def results_match(
    gold: Sequence[Row], predicted: Sequence[Row], *, rule: MatchRule, ordered: bool = False
) -> bool:
    """True when `predicted` counts as the same result as `gold` under `rule`."""
    if rule is MatchRule.SET:
        return set(gold) == set(predicted)
    return _multiset_match(list(gold), list(predicted), ordered)


def has_top_level_order_by(sql: str) -> bool:
    """True when ORDER BY appears outside parentheses, strings, quoted names and comments."""
    words = _top_level_words(sql)
    return any(a == "order" and b == "by" for a, b in itertools.pairwise(words))


def _multiset_match(gold: list[Row], predicted: list[Row], ordered: bool) -> bool:
    if not gold and not predicted:
        return True
    if len(gold) != len(predicted):
        return False
    width = len(gold[0])
    if len(predicted[0]) != width or any(len(r) != width for r in predicted):
        return False
    gold_unordered = [_unorder_row(r) for r in gold]
    pred_unordered = [_unorder_row(r) for r in predicted]
    if ordered and gold_unordered != pred_unordered:
        return False
    if not ordered and set(gold_unordered) != set(pred_unordered):
        return False
    gold_counts = Counter(gold)
    for tried, perm in enumerate(_column_permutations(gold, predicted, width)):
        if tried >= MAX_COLUMN_PERMUTATIONS:
            return False
        permuted = predicted if width == 1 else [tuple(r[j] for j in perm) for r in predicted]
        if ordered and permuted == gold:
            return True
        if not ordered and Counter(permuted) == gold_counts:
            return True
    return False


def _unorder_row(row: Row) -> Row:
    # The test-suite script's canonical order of a row's cells.
    return tuple(sorted(row, key=lambda x: str(x) + str(type(x))))


def _column_permutations(gold: list[Row], predicted: list[Row], width: int) -> Iterator[tuple[int, ...]]:
    """Orders of the predicted columns whose values all occur in the matching gold column."""
    gold_columns = [{r[i] for r in gold} for i in range(width)]
    candidates = [
        [j for j in range(width) if all(r[j] in gold_columns[i] for r in predicted)] for i in range(width)
    ]
    yield from _injective(candidates, 0, ())


def _injective(
    candidates: list[list[int]], position: int, chosen: tuple[int, ...]
) -> Iterator[tuple[int, ...]]:
    if position == len(candidates):
        yield chosen
        return
    for j in candidates[position]:
        if j not in chosen:
            yield from _injective(candidates, position + 1, (*chosen, j))


def _top_level_words(sql: str) -> list[str]:
    """Lower-cased bare words at parenthesis depth 0, skipping literals and comments."""
    words: list[str] = []
    depth, i, n = 0, 0, len(sql)
    closers = {"'": "'", '"': '"', "`": "`", "[": "]"}
    while i < n:
        ch = sql[i]
        if ch in closers:
            end = sql.find(closers[ch], i + 1)
            # A doubled quote inside a literal is an escaped quote: keep scanning.
            while end >= 0 and ch != "[" and sql.startswith(ch, end + 1):
                end = sql.find(ch, end + 2)
            i = n if end < 0 else end + 1
        elif (end := skip_blanks(sql, i)) > i:
            i = end
        elif ch == "(":
            depth, i = depth + 1, i + 1
        elif ch == ")":
            depth, i = max(0, depth - 1), i + 1
        elif ch.isalnum() or ch == "_":
            j = i
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            if depth == 0:
                words.append(sql[i:j].lower())
            i = j
        else:
            i += 1
    return words
