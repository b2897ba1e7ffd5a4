"""Whether the engine reuses the episode's prompt: per round, what it served from its cache, and a
verdict per engine (pure, but for CacheWatch's memory of what it already warned about).

An episode's prompt only grows (append-only), so after its first round an engine that keeps the
prefix evaluates only the new text: the previous completion and the tool results. What an engine
served from its cache is read from its own report (Completion.cached_tokens); an engine that
does not say leaves the reuse unknown, never taken for 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

UNKNOWN = "unknown"
# A round after an episode's first re-evaluated its prompt when the engine served less than this
# share of what the previous round left in its cache (that round's prompt and completion).
REUSE_SHARE = 0.5
# The verdict on an engine waits for this many later rounds whose reuse the engine reported.
MIN_LATER_ROUNDS = 2
DOCS = "docs/engines.md"


class PlayedRound(Protocol):
    """What the verdict needs of a round: an episode Round, or a round kept in a results file."""

    @property
    def index(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def replica(self) -> str | None: ...


@dataclass(frozen=True)
class RoundReuse:
    """One round's prompt and what the engine reused of it."""

    engine: str  # the engine (replica) that answered
    index: int
    prompt_tokens: int
    cached_tokens: int | None  # None: the engine did not say
    reusable: int | None  # what the previous round left in this engine's cache; None: a first round

    @property
    def later(self) -> bool:
        """A round after the episode's first on the same engine: it could reuse the prefix."""
        return self.reusable is not None

    @property
    def re_evaluated(self) -> bool | None:
        """Whether a later round re-evaluated most of its prompt; None when unknown or a first round."""
        if self.reusable is None or self.cached_tokens is None:
            return None
        return self.cached_tokens < REUSE_SHARE * self.reusable


def episode_reuse(rounds: Sequence[PlayedRound], default_engine: str) -> list[RoundReuse]:
    """Each round of one episode with what it could have reused; `default_engine` names an engine
    the rounds do not name (one engine per backend)."""
    reuses = []
    previous: PlayedRound | None = None
    for played in rounds:
        engine = played.replica or default_engine
        reusable = None
        if previous is not None and (previous.replica or default_engine) == engine:
            reusable = min(previous.prompt_tokens + previous.completion_tokens, played.prompt_tokens)
        reuses.append(RoundReuse(engine, played.index, played.prompt_tokens, played.cached_tokens, reusable))
        previous = played
    return reuses


def next_reuse(previous: PlayedRound | None, current: PlayedRound, default_engine: str) -> RoundReuse:
    """The reuse of `current`, the round after `previous` in the same episode (None: its first)."""
    return episode_reuse([r for r in (previous, current) if r is not None], default_engine)[-1]


@dataclass(frozen=True)
class CacheVerdict:
    """How one engine treated the prompts of rounds after an episode's first."""

    engine: str
    later_rounds: int  # later rounds whose reuse the engine reported
    re_evaluated: int  # of which re-evaluated most of their prompt
    unknown: int  # later rounds the engine said nothing about
    prompt_tokens: int  # of the reported later rounds
    cached_tokens: int
    min_rounds: int = MIN_LATER_ROUNDS

    @property
    def state(self) -> str:
        """ "re-evaluating", "healthy", "unknown" (the engine does not say) or "too few rounds"."""
        if self.later_rounds == 0:
            return UNKNOWN if self.unknown else "too few rounds"
        if self.later_rounds < self.min_rounds:
            return "too few rounds"
        return "re-evaluating" if 2 * self.re_evaluated > self.later_rounds else "healthy"

    @property
    def unhealthy(self) -> bool:
        """Rounds after the first keep re-evaluating most of their prompt."""
        return self.state == "re-evaluating"

    def summary(self) -> str:
        """One line on what the engine reused: `e: 1,830 of 2,100 prompt tokens (87%) from its cache…`."""
        if self.later_rounds == 0 and self.unknown:
            return (
                f"{self.engine}: prompt reuse {UNKNOWN} (the engine does not report what it serves "
                "from its cache)"
            )
        if self.later_rounds == 0:
            return f"{self.engine}: no round after an episode's first yet"
        share = self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
        rounds = f"{self.later_rounds} round{'s' if self.later_rounds != 1 else ''}"
        return (
            f"{self.engine}: {self.cached_tokens:,} of {self.prompt_tokens:,} prompt tokens "
            f"({100 * share:.0f}%) served from its cache in {rounds} after an episode's first; "
            f"{self.re_evaluated} re-evaluated most of their prompt"
        )

    def warning(self, advice: str) -> str:
        """The cache-health warning: what happens, what it costs, what to do."""
        evaluated = self.prompt_tokens - self.cached_tokens
        return (
            f"prompt cache: the engine at {self.engine} re-evaluated most of the prompt in "
            f"{self.re_evaluated} of {self.later_rounds} rounds after an episode's first "
            f"({evaluated:,} of {self.prompt_tokens:,} prompt tokens evaluated), so every round "
            f"pays for the whole conversation again (on a laptop about 10 s a round instead of "
            f'1 s); what to do: {advice} (see {DOCS}, "Serving the model fast")'
        )


def verdicts(reuses: Iterable[RoundReuse], min_rounds: int = MIN_LATER_ROUNDS) -> list[CacheVerdict]:
    """One verdict per engine over the later rounds of `reuses`, engines in name order."""
    tally: dict[str, list[int]] = {}
    for reuse in reuses:
        counts = tally.setdefault(reuse.engine, [0, 0, 0, 0, 0])
        if not reuse.later:
            continue
        if reuse.re_evaluated is None:
            counts[2] += 1
            continue
        counts[0] += 1
        counts[1] += int(reuse.re_evaluated)
        counts[3] += reuse.prompt_tokens
        counts[4] += reuse.cached_tokens or 0
    return [
        CacheVerdict(engine, later, re_evaluated, unknown, prompt, cached, min_rounds)
        for engine, (later, re_evaluated, unknown, prompt, cached) in sorted(tally.items())
    ]


class CacheWatch:
    """Watches the rounds a server plays and warns once per engine whose later rounds keep
    re-evaluating their prompt (never again for that engine, however many questions follow)."""

    def __init__(self, advice: Callable[[str], str], warn: Callable[[str], None], min_rounds: int = 4) -> None:
        self._advice, self._warn, self._min_rounds = advice, warn, min_rounds
        self._reuses: dict[str, list[RoundReuse]] = {}
        self._warned: set[str] = set()

    def observe(self, reuse: RoundReuse) -> None:
        """Note one round; warn when its engine's verdict turns to re-evaluating."""
        if not reuse.later or reuse.re_evaluated is None or reuse.engine in self._warned:
            return
        seen = self._reuses.setdefault(reuse.engine, [])
        seen.append(reuse)
        del seen[:-64]  # the recent rounds decide: an engine fixed by a restart is judged afresh
        verdict = verdicts(seen, self._min_rounds)[0]
        if verdict.unhealthy:
            self._warned.add(reuse.engine)
            self._warn(verdict.warning(self._advice(reuse.engine)))
