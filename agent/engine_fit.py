"""An episode's token budget: within what the engine holds (shrunk, with a note, rather than an
episode that fails mid-way with the engine's context error), and spent turn by turn.

The trained budget (12,288 tokens) is three quarters of the context the Modelfile asks for
(16,384): the rest covers the final turn's minimum and the tokens of new text that our estimate
(4 characters a token) does not see. A smaller engine context keeps that proportion.

Turn by turn, whole-prompt and incremental (KV-cache) prompt counts are both handled
(`context_after`); text not yet counted by the runtime is estimated at 4 characters a token. A
tool turn needs at least final_turn_min_tokens of room besides the reserve; the final turn always
gets at least final_turn_min_tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from .backends.base import Completion, EngineFacts
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


def fit_to_engines(
    settings: EpisodeSettings, facts: Sequence[EngineFacts]
) -> tuple[EpisodeSettings, str | None]:
    """`settings` with a token budget the engines hold, and a note saying why when it shrank."""
    smallest = smallest_context(facts)
    if smallest is None or smallest.context_tokens is None:
        return settings, None
    budget = budget_for(smallest.context_tokens)
    if budget >= settings.token_budget:
        return settings, None
    worry = " which leaves little room to explore" if budget < SMALLEST_USEFUL_BUDGET else ""
    note = (
        f"the engine at {smallest.where} holds {smallest.context_tokens:,} tokens per sequence "
        f"({smallest.context_source}), less than an episode's {settings.token_budget:,} tokens and "
        f"room for the answer: episodes get a budget of {budget:,} tokens{worry} (they reach the "
        f"final answer sooner); for the trained budget give the engine a context of "
        f"{WANTED_CONTEXT:,} per sequence (llama-server: -c {WANTED_CONTEXT:,} times -np; vLLM: "
        f"--max-model-len {WANTED_CONTEXT}; Ollama: sqale asks for num_ctx {WANTED_CONTEXT})"
    )
    return replace(settings, token_budget=max(1, budget)), note


# Rough size of a token, only for text the runtime has not counted yet (the next user turn).
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """A rough token count for text the runtime has not reported on yet."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def context_after(used: int, pending_estimate: int, completion: Completion) -> int:
    """Episode tokens after a completion, whether the runtime reports whole or incremental prompts."""
    # A whole-prompt count can never be smaller than the context already used; a smaller
    # one is what a runtime reusing its KV cache reports: only the newly evaluated tokens.
    # A runtime that reports no prompt count at all (0) gets our estimate of the new text.
    if completion.prompt_tokens >= used and completion.prompt_tokens > 0:
        return completion.prompt_tokens + completion.completion_tokens
    new_prompt = completion.prompt_tokens or pending_estimate
    return used + new_prompt + completion.completion_tokens


def tool_turn_tokens(settings: EpisodeSettings, used: int, pending_estimate: int) -> int:
    """num_predict for a tool turn; below final_turn_min_tokens there is no room for one."""
    left = settings.token_budget - used - pending_estimate - settings.final_turn_min_tokens
    return min(settings.max_turn_tokens, left)


def final_turn_tokens(settings: EpisodeSettings, used: int, pending_estimate: int) -> int:
    """num_predict for the final turn: what is left, but never less than the reserved minimum."""
    left = settings.token_budget - used - pending_estimate
    return max(settings.final_turn_min_tokens, min(settings.max_turn_tokens, left))
