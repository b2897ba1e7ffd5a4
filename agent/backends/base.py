"""The model-backend interface: raw prompt text in, completion text and token counts out."""

from __future__ import annotations

import abc
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

_B = TypeVar("_B")

# ChatML stop strings the model was trained with, and the start of a turn: a completion must
# never open one (models that do not know ChatML write `<|im_start|>user` as plain text).
STOP_STRINGS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")

# The prompt of the one-token completion that checks an engine really generates (doctor, and
# whether an engine answers a model name it does not list).
PROBE_PROMPT = "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\n"


@dataclass(frozen=True)
class SamplingSettings:
    """Sampling as trained (temperature 0.6, top-p 0.95, top-k 20)."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    seed: int | None = None


# The model was trained with vLLM, which applies no repetition penalty (1.0) and none of the
# samplers below unless asked. Ollama applies repeat_penalty 1.1 by default, so every Ollama
# request (and the Modelfile) sets these neutral values to sample as vLLM did.
VLLM_NEUTRAL_SAMPLERS: Mapping[str, float] = MappingProxyType(
    {
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "min_p": 0.0,
        "typical_p": 1.0,
    }
)


@dataclass(frozen=True)
class Completion:
    """One generated continuation of a raw prompt."""

    text: str
    prompt_tokens: int  # tokens the runtime evaluated for the prompt (may exclude a reused cache)
    completion_tokens: int
    finish_reason: str = "stop"  # "stop" or "length"
    seconds: float = 0.0
    details: dict[str, str] = field(default_factory=dict)  # e.g. which replica answered
    # Prompt tokens the engine says it served from its prompt cache; None when it does not say
    # (never a guess). When set, `prompt_tokens` is the whole prompt, cached tokens included.
    cached_tokens: int | None = None


@dataclass(frozen=True)
class ModelInfo:
    """What a runtime says about the model it serves (for `doctor` and the server's start-up check)."""

    name: str
    parameters: str = ""  # Ollama: the Modelfile PARAMETER lines, as Ollama prints them
    template: str = ""
    details: dict[str, str] = field(default_factory=dict)  # family, parameter_size, replicas, ...
    capabilities: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # advice about how the model is set up, one sentence each
    # The engine's own id for its model, when it does not know `name` but answers any name with
    # the one model it serves (llama_cpp.server does): answers are labelled with it.
    served_as: str | None = None

    @property
    def label(self) -> str:
        """The model to name in answers: the engine's own id when it ignores ours."""
        return self.served_as or self.name


@dataclass(frozen=True)
class SlotChoice:
    """How many runtime slots to use, and why (for doctor and the start-up log)."""

    slots: int
    reason: str


@dataclass(frozen=True)
class EngineFacts:
    """What one engine (one replica) tells about itself; None or empty where it does not say.

    Gathered best effort: an engine that says nothing yields facts with only `where` set.
    """

    where: str  # the engine's address, as the user gave it
    engine: str | None = None  # what it is, when it can be told: "llama.cpp's llama-server", ...
    slots: int | None = None  # sequences it serves at once
    slots_source: str = ""  # how we know `slots`: "/props total_slots", ...
    notes: tuple[str, ...] = ()  # advice about this engine, one sentence each
    version: str | None = None  # as the engine says it: Ollama's /api/version, vLLM's /version, ...
    # Tokens one sequence may hold (prompt and completion), when the engine says.
    context_tokens: int | None = None
    context_source: str = ""  # how we know `context_tokens`: "/props n_ctx", ...
    warnings: tuple[str, ...] = ()  # known traps this engine is set up with, one sentence each


class ModelBackend(abc.ABC):
    """Anything that completes raw ChatML text: the one contract the product uses a backend by.

    `complete` and `aclose` are required. Every other capability is a method whose default is
    the neutral answer of a backend that cannot do it (the product's behaviour without it: one
    runtime slot, no model check, the runtime's own randomness, no engine facts, itself as its
    only replica), so a backend says what it cannot do by its answer, never by a missing
    attribute, and the product never probes. A backend in front of another derives from
    `agent.backends.wrapper.BackendWrapper`. Errors are agent.errors.BackendError subclasses.
    """

    model: str  # the model name sent to the runtime

    @abc.abstractmethod
    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        """Continue `prompt` for at most `max_tokens` tokens, stopping at STOP_STRINGS."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections."""

    def with_seed(self, seed: int) -> ModelBackend:
        """This backend sampling with `seed` over the same connections (close only the original).

        Itself when it cannot set a seed: the runtime's own randomness varies the samples.
        """
        return self

    async def describe_model(self) -> ModelInfo | None:
        """The runtime's word on the model before any question (the start-up check, `doctor`);
        raises BackendError subclasses (unreachable, not found). None: it cannot check in advance."""
        return None

    @property
    def where(self) -> str | None:
        """Where the model runs, for messages: a host, or the replicas' base URLs; None: it does not say."""
        return None

    @property
    def replica_label(self) -> str:
        """The replica a request is counted under when its completion does not name one."""
        return "default"

    def default_slots(self, environ: Mapping[str, str]) -> SlotChoice:
        """The runtime slots to use without --runtime-slots and without word from the engine."""
        return SlotChoice(1, "this backend does not say how many requests its runtime serves at once")

    async def engine_facts(self) -> tuple[EngineFacts, ...]:
        """One EngineFacts per engine (replica), best effort: silence is no error. () when it
        cannot ask its engines about themselves."""
        return ()

    def remember_engines(self, facts: Sequence[EngineFacts]) -> None:
        """Take what another instance's engine_facts() found (how to talk to each engine).

        Nothing to take by default: a backend that spells every request the same needs none.
        """
        return None

    def per_replica(self) -> tuple[ModelBackend, ...]:
        """This backend once per replica (engine), sharing the connections: close only the original.

        Itself alone when it does not spread over several engines.
        """
        return (self,)


def seeded_copy(backend: _B, seed: int) -> _B:
    """A shallow copy of a backend with `sampling` whose seed is replaced (connections shared)."""
    twin = copy.copy(backend)
    twin.sampling = replace(backend.sampling, seed=seed)  # type: ignore[attr-defined]
    return twin
