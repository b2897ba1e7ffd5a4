"""The structured answer's compact per-round prompt figures: prompt tokens and what the engine
served from its cache ('unknown' where it did not say; see agent/engine_cache.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from agent.episode import Round


class RoundPrompt(BaseModel):
    """One model round's prompt and what the engine served from its cache."""

    round: int = Field(description="1-based round")
    prompt: int | Literal["unknown"] = Field(
        description="prompt tokens of the round, as the engine counted them; 'unknown' when it did not say")
    cached: int | Literal["unknown"] = Field(
        description="of which the engine served from its prompt cache; 'unknown' when the engine does "
                    "not say")
    evaluated: int | Literal["unknown"] = Field(
        description="of which the engine evaluated anew (prompt minus cached); 'unknown' likewise")


def prompt_cache_of(rounds: Sequence[Round]) -> list[RoundPrompt]:
    """The compact per-round prompt and cache figures of `rounds`."""
    # A prompt of 0 tokens is one the engine did not count (llama-cpp-python's streams).
    return [RoundPrompt(round=r.index, prompt=r.prompt_tokens or "unknown",
                        cached="unknown" if r.cached_tokens is None else r.cached_tokens,
                        evaluated="unknown" if r.evaluated_tokens is None else r.evaluated_tokens)
            for r in rounds]
