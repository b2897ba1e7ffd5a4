"""Scripted policies, the runtime emulation they share, PolicyBackend, and the fakes' other routes."""

from __future__ import annotations

import dataclasses

import anyio
import httpx
import ollama
import pytest

from agent.backends.base import STOP_STRINGS, Completion, SamplingSettings
from agent.backends.ollama import OllamaBackend
from agent.backends.openai_compat import OpenAICompletionsBackend
from agent.errors import (
    BackendAuthError,
    BackendError,
    BackendResponseError,
    BackendUnreachable,
    ModelNotFound,
)
from tests.support.policies import (
    DEFAULT_MODEL,
    Generated,
    OraclePolicy,
    PolicyBackend,
    PolicyRequest,
    PromptCache,
    ScriptedReply,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    broken_json_call,
    call_with_string_args,
    call_without_args,
    fenced,
    first_user_turn,
    generate,
    is_final_turn,
    last_user_turn,
    name_arguments_call,
    rambling,
    round_number,
    tool_call,
    tool_turns_left,
    unclosed_think,
    unknown_tool_call,
)

QUESTION = "How many singers are there?"
ROUND1 = (
    "<|im_start|>system\nYou explore databases.<|im_end|>\n"
    f"<|im_start|>user\nQuestion: {QUESTION}<|im_end|>\n<|im_start|>assistant\n"
)
ROUND2 = (
    ROUND1 + '<think>look</think>{"tool": "list_tables", "args": {}}<|im_end|>\n'
    "<|im_start|>user\nlist_tables: singer, concert\n[5 tool turns left before you must answer]"
    "<|im_end|>\n<|im_start|>assistant\n"
)
ROUND3 = (
    ROUND2 + "<think>count</think>...<|im_end|>\n<|im_start|>user\nrun_query: 6\n"
    "[4 tool turns left before you must answer]<|im_end|>\n<|im_start|>assistant\n"
)
FINAL_AT_ROUND2 = (
    ROUND1 + "<think>x</think><|im_end|>\n<|im_start|>user\n[1] run_query\nno such table: x\n\n"
    "[4 tool turns left before you must answer]\n"
    "This is your final answer turn: tools will not run any more.\n"
    "Write your final SQL query in a ```sql code block.<|im_end|>\n<|im_start|>assistant\n"
)


# ---- prompt facts --------------------------------------------------------------------------


def test_prompt_facts() -> None:
    """Question turn, last user turn, round number and budget line are read from the prompt."""
    assert (
        first_user_turn(ROUND3),
        last_user_turn(ROUND3),
        round_number(ROUND3),
        tool_turns_left(ROUND3),
        tool_turns_left(ROUND1),
    ) == (
        f"Question: {QUESTION}",
        "run_query: 6\n[4 tool turns left before you must answer]",
        3,
        4,
        None,
    )


def test_final_turn_detection() -> None:
    """The final turn is recognised by agent.prompt's instruction or a zero budget."""
    zero_left = ROUND2.replace("[5 tool turns left", "[0 tool turns left")
    question_says_final_answer = ROUND1.replace(QUESTION, "What is the final answer?")
    final_from_the_start = ROUND1.replace(
        "<|im_end|>\n<|im_start|>assistant",
        "\n\nThis is your final answer turn: tools will not run any more.<|im_end|>\n<|im_start|>assistant",
    )
    assert [
        is_final_turn(p)
        for p in (
            ROUND1,
            ROUND2,
            FINAL_AT_ROUND2,
            zero_left,
            question_says_final_answer,
            final_from_the_start,
        )
    ] == [False, False, True, True, False, True]


# ---- runtime emulation ---------------------------------------------------------------------


def test_generate_cuts_at_first_stop() -> None:
    """The earliest stop string ends the text; finish_reason is 'stop'."""
    reply = ScriptedReply("abc<|endoftext|>def<|im_end|>", finish_reason="length")
    assert generate(reply, max_tokens=100, stops=STOP_STRINGS) == Generated("abc", "stop", 1)


def test_generate_cuts_at_token_limit() -> None:
    """More than max_tokens*4 characters: cut there with 'length'; no limit when None or < 0."""
    reply = ScriptedReply("x" * 10)
    assert [generate(reply, max_tokens=m, stops=STOP_STRINGS) for m in (2, None, -1)] == [
        Generated("xxxxxxxx", "length", 2),
        Generated("x" * 10, "stop", 3),
        Generated("x" * 10, "stop", 3),
    ]


def test_generate_keeps_the_replys_own_finish_reason() -> None:
    """A reply that ends by itself reports the finish_reason it was scripted with."""
    reply = ScriptedReply("abcd", finish_reason="length")
    assert generate(reply, max_tokens=10, stops=STOP_STRINGS) == Generated("abcd", "length", 1)


def test_prompt_cache_counts_only_new_text() -> None:
    """After prompt+completion is remembered, the next round pays only for what was appended."""
    cache = PromptCache()
    first = cache.new_tokens("a" * 40)
    cache.remember("a" * 40 + "b" * 8)
    assert (first, cache.new_tokens("a" * 40 + "b" * 8 + "c" * 12), cache.new_tokens("a" * 40)) == (10, 3, 1)


# ---- policies ------------------------------------------------------------------------------


def test_script_policy_by_round() -> None:
    """The i-th turn at round i, the last one repeated, `final` on the answer turn."""
    policy = ScriptPolicy(["one", ScriptedReply("two", delay=0.5)], final="done")
    assert [policy.reply(p, DEFAULT_MODEL) for p in (ROUND1, ROUND2, ROUND3, FINAL_AT_ROUND2)] == [
        ScriptedReply("one"),
        ScriptedReply("two", delay=0.5),
        ScriptedReply("two", delay=0.5),
        ScriptedReply("done"),
    ]


def test_oracle_policy_explores_then_submits() -> None:
    """list_tables, then run_query of the gold SQL, then submit_sql; submit on the final turn."""
    sql = "SELECT count(*) FROM singer"
    oracle = OraclePolicy({QUESTION: sql, "How many?": "SELECT 0"})
    assert [oracle.reply(p, DEFAULT_MODEL).text for p in (ROUND1, ROUND2, ROUND3, FINAL_AT_ROUND2)] == [
        '<think>List the tables first.</think>\n{"tool": "list_tables", "args": {}}',
        "<think>Test the query before submitting.</think>\n"
        '{"tool": "run_query", "args": {"sql": "SELECT count(*) FROM singer"}}',
        "<think>The query works; submit it.</think>\n"
        '{"tool": "submit_sql", "args": {"sql": "SELECT count(*) FROM singer"}}',
        "<think>The query works; submit it.</think>\n"
        '{"tool": "submit_sql", "args": {"sql": "SELECT count(*) FROM singer"}}',
    ]


def test_oracle_policy_unknown_question() -> None:
    """A prompt without any gold question is a test bug, reported clearly."""
    with pytest.raises(LookupError) as caught:
        OraclePolicy({"Other?": "SELECT 1"}).reply(ROUND1, DEFAULT_MODEL)
    assert str(caught.value) == (
        "OraclePolicy: none of its 1 gold questions appears in the first user turn "
        "'Question: How many singers are there?'; give it the questions the test asks."
    )


def test_seed_switch_policy() -> None:
    """The policy registered for the request's seed answers; the default otherwise."""
    policy = SeedSwitchPolicy({1: ScriptPolicy(["right"])}, default=ScriptPolicy(["wrong"]))
    assert [policy.reply_with_seed(ROUND1, DEFAULT_MODEL, s).text for s in (1, 2, None)] == [
        "right",
        "wrong",
        "wrong",
    ]


def test_output_builders() -> None:
    """Golden strings of the well-formed and malformed outputs."""
    assert [
        tool_call("describe_table", table_name="singer"),
        assistant_reply("plan", tool_call("list_tables"), tool_call("run_query", sql="SELECT 1")),
        assistant_reply(None, "x"),
        fenced(tool_call("list_tables")),
        broken_json_call("run_query", sql="SELECT 1"),
        unknown_tool_call(),
        call_without_args(),
        call_with_string_args("sample_rows", table_name="t", limit=3),
        name_arguments_call("foreign_keys", table_name="t"),
        unclosed_think("still thinking"),
        rambling(3),
    ] == [
        '{"tool": "describe_table", "args": {"table_name": "singer"}}',
        '<think>plan</think>\n{"tool": "list_tables", "args": {}}\n'
        '{"tool": "run_query", "args": {"sql": "SELECT 1"}}',
        "x",
        '```json\n{"tool": "list_tables", "args": {}}\n```',
        '{"tool": "run_query", "args": {"sql": "SELECT 1"}',
        '{"tool": "drop_database", "args": {}}',
        '{"tool": "describe_table"}',
        '{"tool": "sample_rows", "args": "{\\"table_name\\": \\"t\\", \\"limit\\": 3}"}',
        '{"name": "foreign_keys", "arguments": {"table_name": "t"}}',
        "<think>still thinking",
        "Let me think",
    ]


# ---- PolicyBackend -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_policy_backend_matches_the_fakes(fake_ollama, fake_openai) -> None:
    """PolicyBackend, fake Ollama and fake OpenAI return the same completion for a prompt."""
    policy = ScriptPolicy(['<think>a</think>{"tool": "list_tables"}<|im_end|>tail'])
    ollama_fake, openai_fake = fake_ollama(policy), fake_openai(policy)
    backends = [
        PolicyBackend(policy),
        OllamaBackend(DEFAULT_MODEL, host=ollama_fake.url),
        OpenAICompletionsBackend(DEFAULT_MODEL, [openai_fake.url], api_key=None),
    ]
    results = []
    for backend in backends:
        completion = await backend.complete(ROUND1, max_tokens=50)
        results.append(dataclasses.replace(completion, seconds=0.0, details={}))
        await backend.aclose()
    expected = Completion('<think>a</think>{"tool": "list_tables"}', 35, 10, "stop")
    assert results == [expected, expected, expected]


@pytest.mark.anyio
async def test_policy_backend_records_and_caches() -> None:
    """Requests are recorded; with prompt_cache, later rounds report only the appended tokens."""
    backend = PolicyBackend(ScriptPolicy(["abcd"]), prompt_cache=True)
    first = await backend.complete(ROUND1, max_tokens=10)
    second = await backend.complete(ROUND1 + "abcd" + "x" * 40, max_tokens=5)
    assert ((first.prompt_tokens, second.prompt_tokens), backend.requests) == (
        (35, 10),
        [PolicyRequest(ROUND1, 10), PolicyRequest(ROUND1 + "abcd" + "x" * 40, 5)],
    )


@pytest.mark.anyio
async def test_policy_backend_seed_reaches_seed_aware_policies() -> None:
    """The backend's SamplingSettings.seed selects the SeedSwitchPolicy branch."""
    policy = SeedSwitchPolicy({7: ScriptPolicy(["seven"])}, default=ScriptPolicy(["other"]))
    texts = [
        (await PolicyBackend(policy, sampling=SamplingSettings(seed=s)).complete(ROUND1, max_tokens=5)).text
        for s in (7, 8)
    ]
    assert texts == ["seven", "other"]


@pytest.mark.anyio
async def test_policy_backend_errors() -> None:
    """Replies with an HTTP status raise the BackendError a real backend would."""
    raised = []
    for status in (401, 404, 503, 500):
        backend = PolicyBackend(ScriptPolicy([ScriptedReply(f"status {status}", http_status=status)]))
        with pytest.raises(BackendError) as caught:
            await backend.complete(ROUND1, max_tokens=5)
        raised.append((type(caught.value), str(caught.value)))
    assert raised == [
        (BackendAuthError, "status 401"),
        (ModelNotFound, "status 404"),
        (BackendUnreachable, "status 503"),
        (BackendResponseError, "status 500"),
    ]


@pytest.mark.anyio
async def test_policy_backend_delay_is_cancellable() -> None:
    """A reply delay is slept, and cancelling it ends the call promptly."""
    backend = PolicyBackend(ScriptPolicy([ScriptedReply("late", delay=30.0)]))
    with anyio.move_on_after(0.1) as scope:
        await backend.complete(ROUND1, max_tokens=5)
    assert scope.cancelled_caught


# ---- the fakes' other routes ---------------------------------------------------------------


@pytest.mark.anyio
async def test_fake_ollama_routes(fake_ollama) -> None:
    """GET/HEAD /, /api/version and /api/tags answer like Ollama (read by the real client)."""
    fake = fake_ollama(ScriptPolicy(["x"]), models=("m1", "m2:q8"))
    async with httpx.AsyncClient(base_url=fake.url) as client:
        root, head, version = (await client.get("/"), await client.head("/"), await client.get("/api/version"))
    client = ollama.AsyncClient(host=fake.url)
    listed = await client.list()
    await client.close()
    assert (root.text, head.status_code, version.json(), [m.model for m in listed.models]) == (
        "Ollama is running",
        200,
        {"version": "0.17.6"},
        ["m1:latest", "m2:q8"],
    )


@pytest.mark.anyio
async def test_fake_openai_models_and_cache(fake_openai) -> None:
    """GET /v1/models lists the models; prompt_cache makes usage count only new prompt text."""
    fake = fake_openai(ScriptPolicy(["abcd"]), prompt_cache=True)
    backend = OpenAICompletionsBackend(DEFAULT_MODEL, [fake.url], api_key=None)
    first = await backend.complete(ROUND1, max_tokens=5)
    second = await backend.complete(ROUND1 + "abcd" + "y" * 8, max_tokens=5)
    await backend.aclose()
    async with httpx.AsyncClient() as client:
        models = (await client.get(f"{fake.url}/models")).json()
    assert ((first.prompt_tokens, second.prompt_tokens), [m["id"] for m in models["data"]]) == (
        (35, 2),
        [DEFAULT_MODEL],
    )


@pytest.mark.anyio
async def test_fake_reports_a_failing_policy(fake_ollama) -> None:
    """A policy that raises gives a 500 naming the error, and stop() re-raises it."""
    fake = fake_ollama(OraclePolicy({"Other?": "SELECT 1"}))
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url)
    with pytest.raises(BackendResponseError) as caught:
        await backend.complete(ROUND1, max_tokens=5)
    await backend.aclose()
    with pytest.raises(LookupError):
        fake.stop()
    fake.policy_errors.clear()  # handled here; the fixture's teardown must not raise it again
    assert str(caught.value).startswith(
        f"Ollama at {fake.url} refused the request for model '{DEFAULT_MODEL}' (HTTP 500): "
        "fake runtime: the policy raised LookupError: OraclePolicy: none of its 1 gold questions"
    )
