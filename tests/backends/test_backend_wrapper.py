"""One backend contract: a nominal ModelBackend with neutral defaults, and wrappers that pass every
capability on explicitly and re-wrap what they return (the server's metrics reach every seeded
sample and every replica, on every Python)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import mcp_server.app  # noqa: F401 - loads every wrapper the product defines
import tests.support.mcp  # noqa: F401 - and the tests' own
from agent.backends.base import PROBE_PROMPT, Completion, EngineFacts, ModelBackend, SlotChoice
from agent.backends.openai_compat import OpenAICompletionsBackend
from agent.backends.openai_engines import LLAMA_SERVER, VLLM
from agent.backends.wrapper import BackendWrapper
from agent.errors import BackendResponseError
from mcp_server.serving.metrics import MeteredBackend, ServerMetrics
from tests.support.policies import DEFAULT_MODEL, OraclePolicy, PolicyBackend, ScriptedReply, ScriptPolicy

pytestmark = pytest.mark.anyio


def public_members(contract: type) -> list[str]:
    """The methods and properties `contract` itself declares for the product to call."""
    return sorted(
        name
        for name, value in vars(contract).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    )


def owner(cls: type, name: str) -> type | None:
    """The class in `cls`'s MRO whose body defines `name` (None: none does)."""
    return next((c for c in cls.__mro__ if name in vars(c)), None)


def not_passed_on(wrapper: type, contract: type = ModelBackend) -> list[str]:
    """The contract's members a wrapper leaves to the contract's neutral default (or lacks)."""
    return [name for name in public_members(contract) if owner(wrapper, name) in (contract, None)]


def every_wrapper() -> list[type]:
    """BackendWrapper and every subclass loaded (the product's and the tests')."""
    found, todo = [], [BackendWrapper]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_the_contract_lists_every_capability() -> None:
    """The members the product may call on any backend: the two required, then the capabilities."""
    assert public_members(ModelBackend) == [
        "aclose",
        "complete",
        "default_slots",
        "describe_model",
        "engine_facts",
        "per_replica",
        "remember_engines",
        "replica_label",
        "where",
        "with_seed",
    ]
    assert ModelBackend.__abstractmethods__ == frozenset({"complete", "aclose"})


@pytest.mark.parametrize("wrapper", every_wrapper(), ids=lambda cls: cls.__qualname__)
def test_every_wrapper_passes_every_capability_on(wrapper: type) -> None:
    """No wrapper falls back to ModelBackend's neutral default, which would hide its inner backend's
    capability (a new one added to the contract fails here until BackendWrapper passes it on)."""
    assert not_passed_on(wrapper) == []


def test_a_capability_the_wrapper_forgets_is_found() -> None:
    """The check itself: a contract with one more method than BackendWrapper passes on names it."""

    class Wider(ModelBackend):
        def pin_replica(self, url: str) -> None:
            """A capability BackendWrapper does not know."""

    assert not_passed_on(BackendWrapper, Wider) == ["pin_replica"]
    assert MeteredBackend in every_wrapper() and not_passed_on(MeteredBackend) == []


class Plain(ModelBackend):
    """A backend that can only complete: every capability is the contract's neutral default."""

    model = "plain"

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        return Completion(text="OK", prompt_tokens=3, completion_tokens=1)

    async def aclose(self) -> None:
        return None


async def test_a_backend_says_what_it_cannot_do_by_its_answers() -> None:
    """The neutral answers, through the metered wrapper too: itself for a seed and as its one
    replica, no model check, no location, one slot, no engine facts."""
    for backend in (Plain(), MeteredBackend(Plain(), "plain", ServerMetrics())):
        assert backend.with_seed(7) is backend and backend.per_replica() == (backend,)
        assert (await backend.describe_model(), backend.where, backend.replica_label) == (None, None, "default")
        assert backend.default_slots({"OLLAMA_NUM_PARALLEL": "8"}) == SlotChoice(
            1, "this backend does not say how many requests its runtime serves at once"
        )
        assert await backend.engine_facts() == ()
        backend.remember_engines([EngineFacts(where="x")])
        assert (await backend.complete("p", max_tokens=1)).text == "OK"


def sample(metrics: ServerMetrics, name: str, **labels: str) -> float:
    """One sample of `metrics` (0 when absent)."""
    for family in text_string_to_metric_families(metrics.render().decode()):
        for one in family.samples:
            if one.name == name and all(one.labels.get(k) == v for k, v in labels.items()):
                return one.value
    return 0.0


def requests_counted(metrics: ServerMetrics, *urls: str) -> list[float]:
    """Model requests the metrics timed, per replica."""
    return [sample(metrics, "sqale_model_request_seconds_count", backend="openai", replica=url) for url in urls]


async def test_every_capability_works_through_the_metered_wrapper(fake_openai: Any) -> None:
    """Over two real replicas (llama-server, vLLM): each answer is the inner backend's, and the seeded
    copy and the replicas are metered wrappers whose requests, tokens and failures are counted."""
    a = fake_openai(OraclePolicy({}), total_slots=2)
    b = fake_openai(OraclePolicy({}), vllm=True)
    inner = OpenAICompletionsBackend(DEFAULT_MODEL, [a.url, b.url], api_key=None)
    metrics = ServerMetrics()
    metered = MeteredBackend(inner, "openai", metrics)
    try:
        assert (metered.model, metered.where, metered.replica_label) == (DEFAULT_MODEL, inner.where, "any")
        assert metered.default_slots({}) == inner.default_slots({})
        facts = await metered.engine_facts()
        assert [(f.where, f.engine, f.slots) for f in facts] == [(a.url, LLAMA_SERVER, 2), (b.url, VLLM, None)]
        assert await metered.describe_model() == await inner.describe_model()

        seeded = metered.with_seed(7)
        assert isinstance(seeded, MeteredBackend) and isinstance(seeded.inner, OpenAICompletionsBackend)
        assert (seeded.inner.sampling.seed, inner.sampling.seed) == (7, None)
        await seeded.complete(PROBE_PROMPT, max_tokens=1)
        assert sum(requests_counted(metrics, a.url, b.url)) == 1
        assert [body.get("seed") for body in a.bodies("/v1/completions") + b.bodies("/v1/completions")] == [7]

        replicas = metered.per_replica()
        assert [(type(r), r.where, r.replica_label) for r in replicas] == [
            (MeteredBackend, a.url, a.url),
            (MeteredBackend, b.url, b.url),
        ]
        before = requests_counted(metrics, a.url, b.url)
        for one in replicas:
            await one.complete(PROBE_PROMPT, max_tokens=1)
        assert [n - m for n, m in zip(requests_counted(metrics, a.url, b.url), before, strict=True)] == [1, 1]
        # Each engine got the neutral samplers under its own names: what engine_facts told the backend.
        assert "typical_p" not in b.bodies("/v1/completions")[-1]
        assert "typical_p" in a.bodies("/v1/completions")[-1]
        assert (
            sample(
                metrics, "sqale_model_prompt_tokens_total", backend="openai", replica=a.url, cache="evaluated"
            )
            > 0
        )
    finally:
        await metered.aclose()
    assert inner._client.is_closed


async def test_a_fresh_backend_learns_its_engines_through_the_wrapper(fake_openai: Any) -> None:
    """remember_engines passes on: a backend told that a replica is vLLM spells its samplers so."""
    engine = fake_openai(OraclePolicy({}), vllm=True)
    metered = MeteredBackend(
        OpenAICompletionsBackend(DEFAULT_MODEL, [engine.url], api_key=None), "openai", ServerMetrics()
    )
    try:
        await metered.complete(PROBE_PROMPT, max_tokens=1)
        metered.remember_engines([EngineFacts(where=engine.url, engine=VLLM)])
        await metered.complete(PROBE_PROMPT, max_tokens=1)
    finally:
        await metered.aclose()
    spelled = [("typical_p" in body, "repetition_penalty" in body) for body in engine.bodies("/v1/completions")]
    assert spelled == [(True, True), (False, True)]


async def test_a_seeded_samples_failure_is_counted() -> None:
    """A request of a seeded copy that fails counts under the model request failures."""
    broken = ScriptPolicy([ScriptedReply("the engine fell over", http_status=500)])
    metrics = ServerMetrics()
    seeded = MeteredBackend(PolicyBackend(broken), "ollama", metrics).with_seed(3)
    with pytest.raises(BackendResponseError, match="the engine fell over"):
        await seeded.complete(PROBE_PROMPT, max_tokens=1)
    assert (
        sample(
            metrics,
            "sqale_model_request_failures_total",
            backend="ollama",
            replica="default",
            error="BackendResponseError",
        )
        == 1
    )
