"""The episode loop's token accounting: the budget, the final turn's room, incremental counts."""

from __future__ import annotations

from typing import Any

import anyio

from agent.backends.base import Completion
from agent.engine_fit import context_after, final_turn_tokens, tool_turn_tokens
from agent.episode import EpisodeResult, EpisodeSettings, EpisodeStatus, StopReason
from agent.loop import run_episode
from agent.sqlite import Database
from tests.support.music_episodes import FINAL_TEXT, QUESTION, run, script
from tests.support.policies import OraclePolicy, PolicyBackend, ScriptPolicy, assistant_reply, tool_call


def test_token_budget_running_out_goes_to_the_final_turn(db: Database) -> None:
    """When too few tokens are left for a tool turn the next turn is final (token_budget)."""
    settings = EpisodeSettings(token_budget=1_500, final_turn_min_tokens=100, max_turn_tokens=400)
    backend = script(assistant_reply("x" * 800, tool_call("list_tables")), final="SELECT 1")
    result = run(QUESTION, db, backend, settings=settings)
    assert result.stop_reason == StopReason.TOKEN_BUDGET
    assert result.rounds[-1].final and len(result.rounds) < 6
    assert "The token budget is almost used up" in backend.requests[-1].prompt
    assert all(r.max_tokens <= 400 for r in backend.requests)
    assert backend.requests[-1].max_tokens >= 100


def test_a_prompt_too_long_for_the_budget_asks_for_the_answer_at_once(db: Database) -> None:
    """With no room for a tool turn the first turn is already the final one."""
    backend = script("SELECT count(*) FROM album")
    result = run(QUESTION, db, backend, settings=EpisodeSettings(token_budget=300))
    assert len(backend.requests) == 1 and backend.requests[0].max_tokens == 256
    assert backend.requests[0].prompt.endswith(
        "The token budget is almost used up, so exploration is over.\n"
        + FINAL_TEXT
        + "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (result.stop_reason, result.status, result.rows) == (
        StopReason.TOKEN_BUDGET,
        EpisodeStatus.FINAL_ANSWER,
        ((3,),),
    )


def test_zero_tool_turns_means_one_answer_turn(db: Database) -> None:
    """max_tool_turns=0 gives a single final turn asking for the answer."""
    backend = script("```sql\nSELECT 5\n```")
    result = run(QUESTION, db, backend, settings=EpisodeSettings(max_tool_turns=0))
    assert backend.requests[0].prompt.endswith(f"\n\n{FINAL_TEXT}<|im_end|>\n<|im_start|>assistant\n")
    assert (result.stop_reason, result.rows, len(result.rounds)) == (StopReason.TOOL_TURNS, ((5,),), 1)


def test_incremental_prompt_counts_give_the_same_token_total(db: Database) -> None:
    """A runtime reusing its KV cache (counting only new prompt tokens) is tracked like a full one."""
    turns = (tool_call("list_tables"), tool_call("describe_table", table_name="album"))
    full = run(QUESTION, db, script(*turns, final="SELECT 1"))
    cached_backend = PolicyBackend(ScriptPolicy(list(turns), final="SELECT 1"), prompt_cache=True)
    cached = run(QUESTION, db, cached_backend)
    assert all(
        c.prompt_tokens < f.prompt_tokens / 2 for c, f in zip(cached.rounds[1:], full.rounds[1:], strict=True)
    )
    assert abs(cached.tokens - full.tokens) <= len(full.rounds)
    assert full.tokens == full.rounds[-1].context_tokens


def test_context_after_handles_whole_incremental_and_missing_counts() -> None:
    """Whole prompt counts replace the total; smaller ones add to it; 0 uses the estimate."""
    assert context_after(1000, 50, Completion("", prompt_tokens=1100, completion_tokens=20)) == 1120
    assert context_after(1000, 50, Completion("", prompt_tokens=60, completion_tokens=20)) == 1080
    assert context_after(1000, 50, Completion("", prompt_tokens=0, completion_tokens=20)) == 1070
    assert context_after(0, 50, Completion("", prompt_tokens=0, completion_tokens=20)) == 70


def test_turn_token_bounds() -> None:
    """Tool turns get min(max_turn_tokens, budget - used - pending - reserve); the final turn the rest."""
    settings = EpisodeSettings(token_budget=10_000, max_turn_tokens=2_000, final_turn_min_tokens=300)
    assert tool_turn_tokens(settings, 1_000, 500) == 2_000
    assert tool_turn_tokens(settings, 8_000, 500) == 1_200
    assert final_turn_tokens(settings, 8_000, 500) == 1_500
    assert final_turn_tokens(settings, 9_900, 500) == 300


def test_default_settings_match_the_trained_budgets() -> None:
    """6 tool turns, 4 failed queries, 12,288 tokens."""
    settings = EpisodeSettings()
    assert (settings.max_tool_turns, settings.max_failed_queries, settings.token_budget) == (6, 4, 12_288)


def test_episode_over_the_ollama_http_fake_with_a_kv_cache(db: Database, fake_ollama: Any) -> None:
    """Through the real Ollama client and a runtime reporting incremental prompt counts, it answers."""
    from agent.backends.ollama import OllamaBackend

    gold = {QUESTION: "SELECT artist_id, count(*) FROM album GROUP BY artist_id"}
    server = fake_ollama(OraclePolicy(gold), prompt_cache=True)

    async def main() -> EpisodeResult:
        backend = OllamaBackend("qwen3.5-2b-grpo-synsql", host=server.url)
        try:
            return await run_episode(QUESTION, db, backend)
        finally:
            await backend.aclose()

    result = anyio.run(main)
    assert (result.status, result.rows) == (EpisodeStatus.SUBMITTED, ((1, 2), (2, 1)))
    assert result.rounds[-1].prompt_tokens < result.rounds[-2].context_tokens
    assert result.tokens == result.rounds[-1].context_tokens > result.rounds[-2].context_tokens
