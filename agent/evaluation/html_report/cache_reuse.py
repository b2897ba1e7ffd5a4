"""The report's prompt-cache section: per round, how much of its prompt the engine served from its
cache, and the cache-health verdict per engine with what to do (data and HTML; no plotting).

The figures come from what the engine reported, kept on each round of the traces; rounds whose
engine did not say are counted apart as unknown, never as 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ...backends.advice import cache_advice
from ...engine_cache import CacheVerdict, RoundReuse, episode_reuse, verdicts
from ...jsonl import file_lines
from ..records import QuestionRecord
from .data import FINAL_ROUND, Run
from .episodes import esc

DEFAULT_ENGINE = "the engine"


@dataclass(frozen=True)
class RoundCache:
    """One round position (1, 2, ... or final) over every traced episode."""

    round: str
    rounds: int  # traced rounds at this position
    reported: int  # of which the engine said what it served from its cache
    prompt_tokens: int  # of the reported rounds
    cached_tokens: int

    @property
    def share(self) -> float | None:
        """Cached share of the reported rounds' prompt tokens; None when none reported."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


@dataclass(frozen=True)
class CacheReuse:
    """The section's numbers: per round position, and the verdict per engine."""

    by_round: tuple[RoundCache, ...]
    verdicts: tuple[CacheVerdict, ...]
    engine_kind: str | None  # what the engine is (EngineFacts.engine), as the run recorded it


def _run_setting(run: Run, key: str) -> str | None:
    for record in run.records:
        if record.run is not None and isinstance(record.run.settings.get(key), str):
            return str(record.run.settings[key])
    return None


def cache_reuse(run: Run) -> CacheReuse:
    """Per-round cache figures and the verdicts, from the kept traces of episodes that ran."""
    engine = _run_setting(run, "engine") or DEFAULT_ENGINE
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    reuses = []
    for sample in run.ran:
        if not sample.trace:
            continue
        reuses += episode_reuse(sample.trace, engine)
        for played in sample.trace:
            counts = tally[FINAL_ROUND if played.final else str(played.index)]
            counts[0] += 1
            if played.cached_tokens is not None:
                counts[1] += 1
                counts[2] += played.prompt_tokens
                counts[3] += min(played.cached_tokens, played.prompt_tokens)
    order = sorted(tally, key=lambda name: (name == FINAL_ROUND, int(name) if name.isdigit() else 0))
    return CacheReuse(
        tuple(RoundCache(name, *tally[name]) for name in order),
        tuple(verdicts(reuses)),
        _run_setting(run, "engine_kind"),
    )


def cache_section(run: Run) -> str:
    """The section's HTML: the verdict (a warning with what to do, when unhealthy), then the table."""
    data = cache_reuse(run)
    if not data.by_round:
        return '<p class="muted">No trace kept (the run used --trace none): prompt reuse is not known.</p>'
    lines = []
    for verdict in data.verdicts:
        if verdict.unhealthy:
            warning = verdict.warning(cache_advice(data.engine_kind))
            lines.append(f'<p class="bad cache-verdict">{esc(warning)}</p>')
        else:
            lines.append(f'<p class="cache-verdict">{esc(verdict.summary())}</p>')
    rows = "".join(
        f'<tr><td>{esc(r.round)}</td><td class="num">{r.rounds:,}</td>'
        f'<td class="num">{r.reported:,}</td><td class="num">{r.prompt_tokens:,}</td>'
        f'<td class="num">{r.cached_tokens:,}</td>'
        f'<td class="num">{"unknown" if r.share is None else f"{100 * r.share:.0f}%"}</td></tr>'
        for r in data.by_round
    )
    table = (
        '<table class="two cache-rounds"><tr><th>round</th><th>rounds</th><th>engine reported</th>'
        "<th>prompt tokens</th><th>from its cache</th><th>share</th></tr>"
        f"{rows}</table>"
    )
    note = (
        '<p class="muted">What the engine said it served from its prompt cache, per round; rounds '
        "after the first should come mostly from the cache. Rounds whose engine said nothing are "
        "counted under rounds only (unknown, never taken for 0).</p>"
    )
    return "".join(lines) + table + note


def results_verdicts(path: Path, engine: str) -> list[CacheVerdict]:
    """The verdicts over a results file, read a line at a time (a long run's traces do not fit in
    memory); `engine` names the engine of rounds that do not name theirs."""

    def reuses() -> Iterable[RoundReuse]:
        for _, line in file_lines(path):
            try:
                record = QuestionRecord.model_validate_json(line)
            except ValidationError:
                continue  # a torn last line; read_records reports anything worse
            for sample in record.samples:
                yield from episode_reuse(sample.trace or [], engine)

    return verdicts(reuses())
