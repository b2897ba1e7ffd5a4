"""What the HTML report shows, computed from result records alone (pure; no HTML, no plotting).

Every count the page prints or plots comes from a function here, so the tests can check the
numbers without reading SVG. Groupings are by a field of the record (difficulty today; tags
or any other label later) through `Grouping`, so a new kind of label needs no new chart code.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError
from ..records import BACKEND_ERROR_STATUS, Outcome, QuestionRecord, RowsPreview, SampleRecord, read_records
from ..summary import DIFFICULTY_ORDER, SUMMARY_SUFFIX, Summary, results_path_for, summarize

FINAL_ROUND = "final"
NO_STOP_REASON = "none (backend error)"
STOPPED_EARLY = "stopped early (the vote was decided)"  # a sample cancelled once a majority agreed


@dataclass(frozen=True)
class Run:
    """One results file as the report sees it: every record, traces included, in question order."""

    name: str  # how the page names this run (the file name)
    records: tuple[QuestionRecord, ...]

    @property
    def scored(self) -> tuple[QuestionRecord, ...]:
        """Questions whose gold SQL ran: the accuracy denominator."""
        return tuple(r for r in self.records if not r.gold_error)

    @property
    def gold_failures(self) -> tuple[QuestionRecord, ...]:
        """Questions whose gold SQL failed: reported apart, not scored."""
        return tuple(r for r in self.records if r.gold_error)

    @property
    def samples(self) -> int:
        """Episodes per question (K)."""
        return max((len(r.samples) for r in self.scored), default=1)

    @property
    def episodes(self) -> tuple[SampleRecord, ...]:
        """Every sampled episode of the scored questions."""
        return tuple(s for r in self.scored for s in r.samples)

    @property
    def ran(self) -> tuple[SampleRecord, ...]:
        """Episodes that reached the model (backend failures excluded)."""
        return tuple(s for s in self.episodes if s.status != BACKEND_ERROR_STATUS)


def load_run(path: Path) -> Run:
    """Read a results file with its traces; an empty or missing file is an error."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such results file; give the --out file of a `sqale-agent eval` run")
    if path.name.endswith(SUMMARY_SUFFIX):  # eval writes it next to the results: an easy slip
        results = results_path_for(path)
        raise ConfigError(
            f"{path} is the summary of an eval run; give its results file instead: "
            f"{results} (the --out file, one JSON line per question)"
        )
    records = read_records(path, traces=True)
    if not records:
        raise ConfigError(f"{path}: holds no result line yet; run `sqale-agent eval` first")
    return Run(name=path.name, records=tuple(sorted(records.values(), key=lambda r: r.index)))


def run_summary(run: Run) -> Summary:
    """The same summary `sqale-agent eval` prints, for the headline."""
    first = run.records[0]
    return summarize(
        run.records,
        benchmark=first.benchmark,
        model=first.model,
        samples=run.samples,
        selected=len(run.records),
    )


# ---- groupings --------------------------------------------------------------------------


@dataclass(frozen=True)
class Grouping:
    """A way to split questions into groups by a field; a question may be in several groups."""

    name: str  # the field, as the filter and the chart call it
    labels_of: Callable[[QuestionRecord], tuple[str, ...]]
    rank: Callable[[str], tuple[int, str]] | None = None  # fixed order; None: by accuracy


def _difficulty_rank(label: str) -> tuple[int, str]:
    return (DIFFICULTY_ORDER.index(label), "") if label in DIFFICULTY_ORDER else (len(DIFFICULTY_ORDER), label)


DIFFICULTY = Grouping("difficulty", lambda r: (r.difficulty,) if r.difficulty else (), _difficulty_rank)
DATABASE = Grouping("database", lambda r: (r.db_id,))
TAGS = Grouping("tags", lambda r: tuple(r.tags))  # a golden question's labels; it may have several
# Labels a question set may carry; the page charts and filters by those present.
LABEL_GROUPINGS = (DIFFICULTY, TAGS)


def label_groupings(run: Run) -> tuple[Grouping, ...]:
    """The label groupings that at least one question of the run has a label in."""
    return tuple(g for g in LABEL_GROUPINGS if any(g.labels_of(r) for r in run.records))


@dataclass(frozen=True)
class GroupAccuracy:
    """Voted execution accuracy of one group."""

    label: str
    correct: int
    questions: int

    @property
    def accuracy(self) -> float:
        """correct / questions (0 for an empty group)."""
        return self.correct / self.questions if self.questions else 0.0


def accuracy_by(records: Iterable[QuestionRecord], grouping: Grouping) -> list[GroupAccuracy]:
    """Accuracy per group of scored questions; fixed order if the grouping has one, else best first."""
    correct: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for record in records:
        if record.gold_error:
            continue
        for label in grouping.labels_of(record):
            total[label] += 1
            correct[label] += bool(record.correct)
    groups = [GroupAccuracy(label, correct[label], n) for label, n in total.items()]
    if grouping.rank is not None:
        rank = grouping.rank
        return sorted(groups, key=lambda g: rank(g.label))
    return sorted(groups, key=lambda g: (-g.accuracy, -g.questions, g.label))


# ---- episode counts and distributions ---------------------------------------------------


def count(values: Iterable[str]) -> dict[str, int]:
    """Occurrences of each value, most frequent first (ties by name)."""
    counted = Counter(values)
    return dict(sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])))


def status_mix(run: Run) -> dict[str, int]:
    """Episodes by how they produced their SQL (submitted, final_answer, fallback, failed, backend_error)."""
    return count(s.status for s in run.episodes)


def stop_reason_mix(run: Run) -> dict[str, int]:
    """Episodes by why the exploration ended."""
    return count(
        s.stop_reason or (STOPPED_EARLY if s.outcome is Outcome.CANCELLED else NO_STOP_REASON)
        for s in run.episodes
    )


def outcome_mix(run: Run) -> dict[str, int]:
    """Episodes by verdict: correct, wrong_result, and each kind of error."""
    return count(s.outcome.value for s in run.episodes)


@dataclass(frozen=True)
class Distribution:
    """One number per episode that ran, split by whether the episode was right."""

    name: str
    unit: str
    correct: tuple[float, ...]
    wrong: tuple[float, ...]
    discrete: bool  # small whole numbers: one bar per value


DISTRIBUTIONS: tuple[tuple[str, str, Callable[[SampleRecord], float], bool], ...] = (
    ("rounds", "rounds per episode", lambda s: s.rounds, True),
    ("tool_calls", "tool calls per episode", lambda s: s.tool_calls, True),
    ("tokens", "tokens per episode", lambda s: s.tokens, False),
    ("seconds", "seconds per episode", lambda s: s.seconds, False),
)


def distributions(run: Run) -> list[Distribution]:
    """Rounds, tool calls, tokens and seconds of every episode that ran."""
    ran = run.ran
    return [
        Distribution(
            name,
            unit,
            tuple(value(s) for s in ran if s.correct),
            tuple(value(s) for s in ran if not s.correct),
            discrete,
        )
        for name, unit, value, discrete in DISTRIBUTIONS
    ]


def bin_edges(values: Sequence[float], *, discrete: bool, bins: int = 20) -> list[float]:
    """Histogram edges shared by every run drawn on the same axes."""
    if not values:
        return [0.0, 1.0]
    low, high = min(values), max(values)
    if discrete:
        return [v - 0.5 for v in range(math.floor(low), math.floor(high) + 2)]
    if high <= low:
        return [low - 0.5, low + 0.5]
    step = (high - low) / bins
    return [low + i * step for i in range(bins + 1)]


def histogram(values: Iterable[float], edges: Sequence[float]) -> list[int]:
    """Values per bin [edges[i], edges[i+1]); the last bin includes its upper edge."""
    counts = [0] * (len(edges) - 1)
    for value in values:
        i = bisect.bisect_right(edges, value) - 1
        if i == len(counts) and value == edges[-1]:
            i -= 1
        if 0 <= i < len(counts):
            counts[i] += 1
    return counts


@dataclass(frozen=True)
class ToolRounds:
    """How many calls of each tool the model made in each round, over episodes with a trace."""

    rounds: tuple[str, ...]  # "1", "2", ..., "final"
    tools: tuple[str, ...]  # most called first
    counts: dict[tuple[str, str], int]  # (round, tool) -> calls
    traced: int  # episodes that kept their trace


def tool_rounds(run: Run) -> ToolRounds:
    """Calls per (round, tool), duplicates included, from the kept traces."""
    counts: Counter[tuple[str, str]] = Counter()
    traced = 0
    for sample in run.ran:
        if sample.trace is None:
            continue
        traced += 1
        for played in sample.trace:
            label = FINAL_ROUND if played.final else str(played.index)
            counts.update((label, call.tool) for call in played.calls)
    rounds = sorted({r for r, _ in counts}, key=lambda r: (r == FINAL_ROUND, int(r) if r.isdigit() else 0))
    by_tool = count(t for (_, t), n in counts.items() for _ in range(n))
    return ToolRounds(tuple(rounds), tuple(by_tool), dict(counts), traced)


@dataclass(frozen=True)
class GoldTablesTable:
    """Episodes by whether they looked at every table the gold SQL reads, and whether they were right."""

    saw_correct: int
    saw_wrong: int
    missed_correct: int
    missed_wrong: int


def gold_tables_table(run: Run) -> GoldTablesTable:
    """The 2×2 of 'saw every gold table' against 'correct', over episodes that ran."""
    cells = Counter((bool(s.saw_gold_tables), s.correct) for s in run.ran)
    return GoldTablesTable(cells[True, True], cells[True, False], cells[False, True], cells[False, False])


# ---- the side-by-side results -----------------------------------------------------------


def unmatched_rows(
    mine: RowsPreview, theirs: RowsPreview, *, ordered: bool, any_column_order: bool
) -> list[bool]:
    """For each shown row of `mine`: True when the other side's shown rows do not account for it.

    Unordered results match rows as a multiset; ordered ones position by position. With
    `any_column_order` (Spider's rule) a row's cells are compared as a sorted bag. Only the
    preview rows are compared, so a row may be marked that appears further down the other result.
    """

    def key(row: list) -> tuple:
        cells = tuple(_cell_key(v) for v in row)
        return tuple(sorted(cells, key=repr)) if any_column_order else cells

    if ordered:
        other = [key(r) for r in theirs.rows]
        return [i >= len(other) or key(r) != other[i] for i, r in enumerate(mine.rows)]
    left = Counter(key(r) for r in theirs.rows)
    marks = []
    for row in mine.rows:
        k = key(row)
        marks.append(left[k] <= 0)
        left[k] -= 1
    return marks


def _cell_key(value: object) -> tuple[str, object]:
    # Numbers compare by value as the scorer does (1 == 1.0); '1' and 1 stay different.
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return ("number" if is_number else type(value).__name__, value)


# ---- two runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Pairing:
    """Two runs over the same questions, question by question."""

    pairs: tuple[tuple[QuestionRecord, QuestionRecord], ...]  # scored in both, in A's order
    only_a: int  # scored questions of A that B lacks (or did not score)
    only_b: int

    def _count(self, a: bool, b: bool) -> int:
        return sum(bool(x.correct) == a and bool(y.correct) == b for x, y in self.pairs)

    @property
    def both(self) -> int:
        """Right in both runs."""
        return self._count(True, True)

    @property
    def a_only(self) -> int:
        """Right in A, wrong in B."""
        return self._count(True, False)

    @property
    def b_only(self) -> int:
        """Right in B, wrong in A."""
        return self._count(False, True)

    @property
    def neither(self) -> int:
        """Wrong in both runs."""
        return self._count(False, False)

    @property
    def difference(self) -> float | None:
        """Accuracy of B minus accuracy of A on the paired questions."""
        return (self.b_only - self.a_only) / len(self.pairs) if self.pairs else None

    @property
    def p_value(self) -> float:
        """Two-sided exact McNemar test on the questions that flipped."""
        return sign_test(self.a_only, self.b_only)

    @property
    def flipped(self) -> tuple[tuple[QuestionRecord, QuestionRecord], ...]:
        """Pairs right in exactly one run, in question order."""
        return tuple((a, b) for a, b in self.pairs if bool(a.correct) != bool(b.correct))


def pair_runs(a: Run, b: Run) -> Pairing:
    """Pair the scored questions of two runs by key (the same question text is required)."""
    theirs = {r.key: r for r in b.scored}
    pairs = tuple(
        (r, theirs[r.key]) for r in a.scored if r.key in theirs and theirs[r.key].question == r.question
    )
    if not pairs and a.scored and b.scored:
        raise ConfigError(
            f"{a.name} and {b.name} share no scored question; compare two runs of the same question set"
        )
    return Pairing(pairs, only_a=len(a.scored) - len(pairs), only_b=len(b.scored) - len(pairs))


def sign_test(x: int, y: int) -> float:
    """Two-sided exact binomial p-value of x against y successes out of x + y at p = 1/2."""
    n = x + y
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(x, y) + 1)) / 2**n
    return min(1.0, 2 * tail)


def align_groups(
    a: Sequence[GroupAccuracy], b: Sequence[GroupAccuracy]
) -> tuple[list[GroupAccuracy], list[GroupAccuracy]]:
    """Both runs' groups in one order (A's, then B's extras), a group missing on one side as 0 of 0."""
    order = list(dict.fromkeys([g.label for g in a] + [g.label for g in b]))
    mine, theirs = {g.label: g for g in a}, {g.label: g for g in b}
    return (
        [mine.get(label, GroupAccuracy(label, 0, 0)) for label in order],
        [theirs.get(label, GroupAccuracy(label, 0, 0)) for label in order],
    )


def align_tool_rounds(a: ToolRounds, b: ToolRounds) -> tuple[ToolRounds, ToolRounds]:
    """Both runs over the same rounds and tools (so a tool has one colour in both charts)."""
    rounds = tuple(
        sorted(set(a.rounds) | set(b.rounds), key=lambda r: (r == FINAL_ROUND, int(r) if r.isdigit() else 0))
    )
    tools = tuple(dict.fromkeys(a.tools + b.tools))
    return (ToolRounds(rounds, tools, a.counts, a.traced), ToolRounds(rounds, tools, b.counts, b.traced))
