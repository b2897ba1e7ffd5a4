"""What to do when an engine re-evaluates our prompts: each backend's advice for its engines."""

from __future__ import annotations

from .ollama_facts import CACHE_ADVICE as OLLAMA_CACHE_ADVICE
from .ollama_facts import OLLAMA
from .openai_engines import CACHE_ADVICE


def cache_advice(engine: str | None) -> str:
    """The advice for `engine` (an EngineFacts.engine name); general advice for one not identified."""
    if engine == OLLAMA:
        return OLLAMA_CACHE_ADVICE
    return CACHE_ADVICE.get(engine, CACHE_ADVICE[None])
