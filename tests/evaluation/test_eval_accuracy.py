"""Execution-accuracy rules (BIRD sets, Spider multisets with ORDER BY and column order) and voting."""

from __future__ import annotations

import pytest

from agent.evaluation.accuracy import MatchRule, has_top_level_order_by, results_match, vote_key
from tests.evaluation.test_voting import tally_of

SET, MULTI = MatchRule.SET, MatchRule.MULTISET


def test_bird_ignores_row_order_and_duplicates():
    """BIRD compares sets of rows: order and repeats do not matter."""
    gold = [(1, "a"), (2, "b")]
    assert results_match(gold, [(2, "b"), (1, "a"), (1, "a")], rule=SET) is True


def test_bird_respects_column_order():
    """BIRD compares whole tuples, so swapped columns are wrong."""
    assert results_match([(1, "a")], [("a", 1)], rule=SET) is False


def test_bird_missing_or_extra_row_is_wrong():
    """A set with a row more or less differs."""
    assert results_match([(1,), (2,)], [(1,)], rule=SET) is False
    assert results_match([(1,)], [(1,), (3,)], rule=SET) is False


def test_spider_multiset_counts_duplicates():
    """Spider compares multisets: the same rows a different number of times is wrong."""
    assert results_match([(1,), (1,), (2,)], [(1,), (2,), (2,)], rule=MULTI) is False
    assert results_match([(1,), (1,), (2,)], [(2,), (1,), (1,)], rule=MULTI) is True


def test_spider_unordered_gold_accepts_any_row_order():
    """Without ORDER BY in the gold, row order is free."""
    assert results_match([(1,), (2,), (3,)], [(3,), (1,), (2,)], rule=MULTI, ordered=False) is True


def test_spider_ordered_gold_needs_the_same_order():
    """With ORDER BY in the gold, rows must come in the gold's order."""
    assert results_match([(1,), (2,), (3,)], [(3,), (1,), (2,)], rule=MULTI, ordered=True) is False
    assert results_match([(1,), (2,), (3,)], [(1,), (2,), (3,)], rule=MULTI, ordered=True) is True


def test_spider_accepts_permuted_columns():
    """The test-suite metric lets the predicted columns come in another order."""
    gold = [("ann", 30, "uk"), ("bob", 41, "fr")]
    assert results_match(gold, [(30, "uk", "ann"), (41, "fr", "bob")], rule=MULTI) is True
    assert results_match(gold, [(41, "fr", "bob"), (30, "uk", "ann")], rule=MULTI, ordered=True) is False


def test_spider_permutation_must_keep_rows_together():
    """Permuting columns cannot pair values from different rows."""
    gold = [(1, "a"), (2, "b")]
    assert results_match(gold, [("b", 1), ("a", 2)], rule=MULTI) is False


def test_spider_column_count_must_match():
    """An extra column is wrong, even when the gold columns are all there."""
    assert results_match([(1,)], [(1, 1)], rule=MULTI) is False


def test_empty_results_match():
    """Two empty results are equal under both rules."""
    assert results_match([], [], rule=MULTI) is True
    assert results_match([], [], rule=SET) is True
    assert results_match([(1,)], [], rule=MULTI) is False


def test_values_compare_as_python_does():
    """1 == 1.0 (as in the official scripts), but '1' != 1, and NULLs are equal."""
    assert results_match([(1,)], [(1.0,)], rule=MULTI) is True
    assert results_match([(1,)], [(1.0,)], rule=SET) is True
    assert results_match([(1,)], [("1",)], rule=MULTI) is False
    assert results_match([(None, 2)], [(None, 2)], rule=SET) is True


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT name FROM singer ORDER BY age DESC", True),
        ("select name from singer order\n  by age", True),
        ("SELECT name FROM singer", False),
        ("SELECT name FROM (SELECT name FROM singer ORDER BY age LIMIT 3)", False),
        ("SELECT name FROM singer WHERE id IN (SELECT id FROM s ORDER BY x LIMIT 1)", False),
        ("SELECT 'order by' FROM t", False),
        ('SELECT "order by" FROM t', False),
        ("SELECT a FROM t -- order by a\n", False),
        ("SELECT a FROM t /* ORDER BY a */", False),
        ("SELECT 'it''s (' FROM t ORDER BY a", True),
        ("SELECT a FROM t UNION SELECT a FROM s ORDER BY a", True),
        ("SELECT [order] FROM t", False),
        ("SELECT a, count(*) FROM t GROUP BY a ORDER BY count(*) DESC LIMIT 1", True),
    ],
)
def test_top_level_order_by(sql, expected):
    """ORDER BY counts only outside parentheses, literals, quoted names and comments."""
    assert has_top_level_order_by(sql) is expected


def test_vote_key_follows_the_rule():
    """Vote keys: sets ignore repeats, multisets count them; row order never matters."""
    assert vote_key([(1,), (1,), (2,)], SET) == vote_key([(2,), (1,)], SET)
    assert vote_key([(1,), (1,), (2,)], MULTI) != vote_key([(2,), (1,)], MULTI)
    assert vote_key([(1,), (2,)], MULTI) == vote_key([(2,), (1,)], MULTI)


def test_vote_picks_the_most_common_result():
    """The largest group wins; its earliest member is returned."""
    assert tally_of(["a", "b", "b", "c"]).winner() == 1


def test_vote_tie_goes_to_the_earliest_sample():
    """Equal groups: the group whose member came first wins."""
    assert tally_of(["b", "a", "a", "b"]).winner() == 0
    assert tally_of([None, "x", "y"]).winner() == 1


def test_vote_without_results_abstains():
    """Samples with no result (None) never win; all None gives None."""
    assert tally_of([None, None]).winner() is None
    assert tally_of([None, "x", None, "x"]).winner() == 1
