"""What each engine's answer says about its prompt cache, and the verdict on it (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agent.backends.base import EngineFacts
from agent.backends.streaming import CACHE_FROM_TIMINGS, CACHE_FROM_USAGE, prompt_cache_report
from agent.engine_cache import CacheVerdict, CacheWatch, episode_reuse, verdicts
from agent.engine_fit import fit_to_engines
from agent.episode import EpisodeSettings


@dataclass(frozen=True)
class Played:
    """A round as the verdict reads it."""

    index: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    replica: str | None = None


@pytest.mark.parametrize(
    ("usage", "timings", "expected"),
    [
        # vLLM (--enable-prompt-tokens-details), SGLang, llama-server, Ollama's OpenAI bridge
        (
            {"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 800}},
            None,
            (800, 900, CACHE_FROM_USAGE),
        ),
        # llama-server's timings: cache_n reused, prompt_n evaluated
        (None, {"cache_n": 800, "prompt_n": 100}, (800, 900, CACHE_FROM_TIMINGS)),
        ({"prompt_tokens": 900}, {"cache_n": 0, "prompt_n": 900}, (0, 900, CACHE_FROM_TIMINGS)),
        # vLLM without --enable-prompt-tokens-details: null details; nothing else said
        ({"prompt_tokens": 900, "prompt_tokens_details": None}, None, (None, None, "")),
        (None, None, (None, None, "")),
        # what is not a count is not taken for one
        ({"prompt_tokens_details": {"cached_tokens": True}}, {"cache_n": -1, "prompt_n": 5}, (None, None, "")),
        ({"prompt_tokens_details": {"cached_tokens": "12"}}, None, (None, None, "")),
    ],
)
def test_cached_tokens_come_from_the_engines_own_fields(usage, timings, expected) -> None:
    """usage.prompt_tokens_details.cached_tokens, else llama-server's timings, else unknown (never 0)."""
    assert prompt_cache_report(usage, timings) == expected


def test_a_later_round_is_judged_against_what_the_previous_one_left_in_the_cache() -> None:
    """Reusable = the previous round's prompt and completion; the first round, and a round on another
    replica, could reuse nothing; a round the engine said nothing about is unknown."""
    rounds = [
        Played(1, 1000, 100, 0, "a"),
        Played(2, 1500, 80, 1050, "a"),
        Played(3, 2000, 50, 0, "b"),
        Played(4, 2500, 40, None, "b"),
    ]
    reuses = episode_reuse(rounds, "default")
    assert [(r.engine, r.reusable, r.re_evaluated) for r in reuses] == [
        ("a", None, None),
        ("a", 1100, False),
        ("b", None, None),
        ("b", 2050, None),
    ]


def test_the_verdict_needs_most_later_rounds_to_re_evaluate() -> None:
    """Re-evaluating when more than half of the later rounds reused under half of what they could."""
    healthy = [
        Played(1, 1000, 100, 0),
        Played(2, 1500, 100, 1099),
        Played(3, 2000, 100, 0),
        Played(4, 2500, 100, 2000),
    ]
    assert verdicts(episode_reuse(healthy, "e")) == [CacheVerdict("e", 3, 1, 0, 6000, 3099)]
    assert verdicts(episode_reuse(healthy, "e"))[0].state == "healthy"
    bad = [Played(1, 1000, 100, 0), Played(2, 1500, 100, 0), Played(3, 2000, 100, 0)]
    assert verdicts(episode_reuse(bad, "e"))[0].state == "re-evaluating"
    unknown = [Played(1, 1000, 100, None), Played(2, 1500, 100, None)]
    assert verdicts(episode_reuse(unknown, "e"))[0].state == "unknown"
    assert verdicts(episode_reuse(bad[:2], "e"))[0].state == "too few rounds"


def test_the_warning_says_what_happens_what_it_costs_and_what_to_do() -> None:
    """One sentence: rounds, tokens, the cost, the advice and where to read more."""
    verdict = CacheVerdict("http://127.0.0.1:8080/v1", 4, 3, 0, 8000, 1000)
    assert verdict.warning("start it with --flag") == (
        "prompt cache: the engine at http://127.0.0.1:8080/v1 re-evaluated most of the prompt in 3 of 4 "
        "rounds after an episode's first (7,000 of 8,000 prompt tokens evaluated), so every round pays "
        "for the whole conversation again (on a laptop about 10 s a round instead of 1 s); what to do: "
        'start it with --flag (see docs/engines.md, "Serving the model fast")'
    )


def test_the_watch_warns_once_per_engine() -> None:
    """However many rounds follow, an engine is warned about once; another engine has its own."""
    warned: list[str] = []
    watch = CacheWatch(lambda engine: f"fix {engine}", warned.append, min_rounds=2)
    for _ in range(3):
        rounds = [Played(1, 1000, 10, 0), Played(2, 1100, 10, 0), Played(3, 1200, 10, 0)]
        for reuse in episode_reuse(rounds, "slow"):
            watch.observe(reuse)
        for reuse in episode_reuse([Played(1, 1000, 10, 0), Played(2, 1100, 10, 1009)], "fast"):
            watch.observe(reuse)
    assert len(warned) == 1
    assert warned[0].startswith("prompt cache: the engine at slow re-evaluated most of the prompt in 2 of 2")
    assert warned[0].endswith('what to do: fix slow (see docs/engines.md, "Serving the model fast")')


def test_the_budget_shrinks_to_the_smallest_engine_context() -> None:
    """Three quarters of the smallest context an engine told, with a note naming it; none told: as is."""
    small = EngineFacts(where="http://b:8080/v1", context_tokens=8192, context_source="/props n_ctx")
    big = EngineFacts(where="http://a", context_tokens=16384)
    fitted, note = fit_to_engines(EpisodeSettings(), [big, small])
    assert fitted.token_budget == 6144
    assert note is not None and note.startswith(
        "the engine at http://b:8080/v1 holds 8,192 tokens per sequence (/props n_ctx), less than an "
        "episode's 12,288 tokens and room for the answer: episodes get a budget of 6,144 tokens"
    )
    assert fit_to_engines(EpisodeSettings(), [EngineFacts(where="x", context_tokens=16384)]) == (
        EpisodeSettings(),
        None,
    )
    assert fit_to_engines(EpisodeSettings(), [EngineFacts(where="x")]) == (EpisodeSettings(), None)
