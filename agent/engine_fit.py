"""An episode's token budget within what the engine holds: shrunk, with a note, rather than an
episode that fails mid-way with the engine's context error.

The trained budget (12,288 tokens) is three quarters of the context the Modelfile asks for
(16,384): the rest covers the final turn's minimum and the tokens of new text that our estimate
(4 characters a token) does not see. A smaller engine context keeps that proportion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .backends.base import EngineFacts
from .episode import EpisodeSettings

BUDGET_SHARE = (3, 4)  # of the engine's context, as 12,288 is of 16,384
SMALLEST_USEFUL_BUDGET = 2_048  # below this an episode barely gets one round of exploration
WANTED_CONTEXT = 16_384


def budget_for(context_tokens: int) -> int:
    """The episode budget an engine context of `context_tokens` holds safely."""
    numerator, denominator = BUDGET_SHARE
    return context_tokens * numerator // denominator


def smallest_context(facts: Sequence[EngineFacts]) -> EngineFacts | None:
    """The engine (replica) with the smallest context it told, or None when none told one."""
    told = [f for f in facts if f.context_tokens]
    return min(told, key=lambda f: f.context_tokens or 0) if told else None


def fit_to_engines(settings: EpisodeSettings,
                   facts: Sequence[EngineFacts]) -> tuple[EpisodeSettings, str | None]:
    """`settings` with a token budget the engines hold, and a note saying why when it shrank."""
    smallest = smallest_context(facts)
    if smallest is None or smallest.context_tokens is None:
        return settings, None
    budget = budget_for(smallest.context_tokens)
    if budget >= settings.token_budget:
        return settings, None
    worry = (" which leaves little room to explore" if budget < SMALLEST_USEFUL_BUDGET else "")
    note = (f"the engine at {smallest.where} holds {smallest.context_tokens:,} tokens per sequence "
            f"({smallest.context_source}), less than an episode's {settings.token_budget:,} tokens and "
            f"room for the answer: episodes get a budget of {budget:,} tokens{worry} (they reach the "
            f"final answer sooner); for the trained budget give the engine a context of "
            f"{WANTED_CONTEXT:,} per sequence (llama-server: -c {WANTED_CONTEXT:,} times -np; vLLM: "
            f"--max-model-len {WANTED_CONTEXT}; Ollama: sqale asks for num_ctx {WANTED_CONTEXT})")
    return replace(settings, token_budget=max(1, budget)), note
