"""Doctor's two-round probe: does the engine serve the second round's prompt from its cache?

The probe is an episode's opening in miniature: our system prompt and a question with a long
evidence text (so that the first prompt fills more than one of vLLM's cache blocks, as a real
episode's rounds do), a short completion, then a second round that appends a tool result, as
every round does. Whatever the engine reports about its cache decides; nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backends.base import Completion, ModelBackend
from ..engine_cache import CacheVerdict, RoundReuse, verdicts
from ..prompt import DEFAULT_PROMPTS, continue_prompt, cut_at_chat_token, render_initial_prompt

# Fake runtimes answer prompts holding this mark with "OK", whatever their policy.
CACHE_PROBE_MARK = "sqale doctor: checking that the engine reuses the prompt"
PROBE_QUESTION = f"{CACHE_PROBE_MARK}. How many rows does the table t0 have?"
# About 1,100 tokens of facts: the first prompt spans more than two 528-token cache blocks.
PROBE_EVIDENCE = "\n".join(
    f"fact {i}: the column c{i} of table t{i % 7} holds values from {i * 37 % 1000} to {i * 91 % 5000}"
    for i in range(60)
)
PROBE_RESULT = (
    '[1] run_query {"sql": "SELECT count(*) FROM t0"}\ncount(*)\n--------\n42\n'
    "[1 row]\n\n[5 tool turns left before you must answer]"
)
FIRST_TOKENS = 16
SECOND_TOKENS = 1


@dataclass(frozen=True)
class CacheProbe:
    """What the two rounds reported, and the verdict on the second."""

    first: Completion
    second: Completion
    verdict: CacheVerdict

    @property
    def source(self) -> str:
        """Which field of the engine's answer told the cached tokens ("" when none did)."""
        return self.second.details.get("cache", "")


def probe_prompts() -> tuple[str, str]:
    """The first prompt, and the second one's user turn (appended after the first completion)."""
    return render_initial_prompt(DEFAULT_PROMPTS, PROBE_QUESTION, PROBE_EVIDENCE), PROBE_RESULT


async def probe_cache(backend: ModelBackend, engine: str) -> CacheProbe:
    """Two rounds on `backend` (one engine); BackendError propagates."""
    first_prompt, result = probe_prompts()
    first = await backend.complete(first_prompt, max_tokens=FIRST_TOKENS)
    second_prompt = continue_prompt(first_prompt, cut_at_chat_token(first.text), result)
    second = await backend.complete(second_prompt, max_tokens=SECOND_TOKENS)
    # What the first round left in the cache: its prompt and completion (the whole second
    # prompt but its new user turn, when the engine counted no prompt tokens at all).
    reusable = first.prompt_tokens + first.completion_tokens if first.prompt_tokens else second.prompt_tokens
    later = RoundReuse(
        engine, 2, second.prompt_tokens, second.cached_tokens, min(reusable, second.prompt_tokens)
    )
    return CacheProbe(first, second, verdicts([later], min_rounds=1)[0])
