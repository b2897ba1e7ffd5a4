"""The real engine's prompt cache: each round of our append-only prompt against the same prompt cold.

    python bench/bench_real_engine.py [--data ../shared/data/spider_dev] [--questions 10]

Issue 11 asks for: 10 Spider dev questions through a real engine (llama_cpp.server serving
Gemma 3 270M, tests/support/real_engine.py), per-round model time with our append-only prompt against
the same prompt sent cold, prompt tokens per round, and episode wall time. Goal: from round 2
on, a round costs at most a fifth of a cold prefill of the same prompt.

Method: each question runs as a real episode (the OpenAI backend, streaming) and every request
is recorded. Then each recorded prompt is replayed with max_tokens 1, twice: warm (right after
the previous round's prompt, as in the episode: the engine reuses its cached prefix) and cold
(right after an unrelated request has evicted the engine's single cache). Token counts come
from the engine's tokenizer (/extras/tokenize/count). Gemma does not know our protocol, so its
episodes say nothing about answers; the prompts are the real shape and size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from agent.backends.base import Completion, ModelBackend  # noqa: E402
from agent.backends.openai_compat import OpenAICompletionsBackend  # noqa: E402
from agent.backends.wrapper import BackendWrapper  # noqa: E402
from agent.episode import EpisodeSettings  # noqa: E402
from agent.evaluation.datasets import load_dataset  # noqa: E402
from agent.loop import run_episode  # noqa: E402
from agent.sqlite import Database  # noqa: E402
from tests.support.policies import DEFAULT_MODEL  # noqa: E402
from tests.support.real_engine import LlamaServer, engine_missing, llama_server  # noqa: E402

EVICT = "Hello."  # shares no prefix with our prompts beyond the BOS token


@dataclass(frozen=True)
class Request:
    """One model request of an episode as it happened."""

    prompt: str
    completion: str
    seconds: float


class RecordingBackend(BackendWrapper):
    """The real backend, recording every request and its wall time."""

    def __init__(self, inner: ModelBackend, requests: list[Request] | None = None) -> None:
        super().__init__(inner)
        self.requests: list[Request] = [] if requests is None else requests

    def rewrap(self, inner: ModelBackend) -> RecordingBackend:
        """`inner` recorded into the same list."""
        return RecordingBackend(inner, self.requests)

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        started = time.perf_counter()
        completion = await self.inner.complete(prompt, max_tokens=max_tokens)
        self.requests.append(Request(prompt, completion.text, time.perf_counter() - started))
        return completion


async def play(
    server: LlamaServer, db_path: Path, question: str, settings: EpisodeSettings
) -> tuple[list[Request], float, str]:
    """One episode: its requests, its wall time and its status."""
    backend = RecordingBackend(OpenAICompletionsBackend(DEFAULT_MODEL, [server.url], api_key=None))
    started = time.perf_counter()
    try:
        with Database.unruled(db_path) as db:
            result = await run_episode(question, db, backend, settings=settings)
    finally:
        await backend.aclose()
    return backend.requests, time.perf_counter() - started, result.status.value


def prefill_seconds(client: httpx.Client, server: LlamaServer, prompt: str) -> float:
    """Wall time of `prompt` with one generated token (non-streamed)."""
    started = time.perf_counter()
    response = client.post(
        f"{server.url}/completions",
        json={"model": DEFAULT_MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0},
    )
    response.raise_for_status()
    return time.perf_counter() - started


def token_count(client: httpx.Client, server: LlamaServer, text: str) -> int:
    """The engine's token count of `text`."""
    root = server.url.removesuffix("/v1")
    response = client.post(f"{root}/extras/tokenize/count", json={"input": text})
    response.raise_for_status()
    return int(response.json()["count"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "spider_dev",
        help="Spider dev folder (default ../shared/data/spider_dev)",
    )
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument(
        "--max-turn-tokens",
        type=int,
        default=256,
        help="cap on one turn's generation (keeps the run short on 2 cores)",
    )
    args = parser.parse_args()
    if (reason := engine_missing()) is not None:
        sys.exit(reason)
    dataset = load_dataset(args.data)
    step = max(1, len(dataset.examples) // args.questions)  # spread over the databases
    examples = dataset.examples[::step][: args.questions]
    settings = EpisodeSettings(max_turn_tokens=args.max_turn_tokens)
    rows: list[tuple[int, int, int, float, float, float]] = []  # q, round, tokens, in-episode, warm, cold
    walls: list[tuple[float, int, str]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        llama_server(Path(tmp)) as server,
        httpx.Client(timeout=600) as client,
    ):
        for q, example in enumerate(examples, 1):
            requests, wall, status = anyio.run(
                play, server, dataset.database_path(example.db_id), example.question, settings
            )
            walls.append((wall, len(requests), status))
            warm = [prefill_seconds(client, server, r.prompt) for r in requests]  # in order: cache kept
            for k, request in enumerate(requests):
                prefill_seconds(client, server, EVICT)
                cold = prefill_seconds(client, server, request.prompt)
                tokens = token_count(client, server, request.prompt)
                rows.append((q, k + 1, tokens, request.seconds, warm[k], cold))
            print(f"question {q}: {len(requests)} rounds, {wall:.1f} s, {status}", flush=True)
    print()
    print(" q  round  prompt tokens  in episode (s)  warm prefill (s)  cold prefill (s)  warm/cold")
    for q, k, tokens, episode_s, warm_s, cold_s in rows:
        print(
            f"{q:>2}  {k:>5}  {tokens:>13,}  {episode_s:>14.2f}  {warm_s:>16.2f}  {cold_s:>16.2f}"
            f"  {warm_s / cold_s:>9.2f}"
        )
    later = [(warm_s, cold_s) for _, k, _, _, warm_s, cold_s in rows if k >= 2]
    ratios = [w / c for w, c in later]
    print()
    print(
        f"episodes: {len(walls)}, wall time median {statistics.median(w for w, _, _ in walls):.1f} s "
        f"(min {min(w for w, _, _ in walls):.1f}, max {max(w for w, _, _ in walls):.1f}); "
        f"rounds {sum(n for _, n, _ in walls)}"
    )
    print(f"round 1 cold prefill: median {statistics.median(c for _, k, _, _, _, c in rows if k == 1):.2f} s")
    if ratios:
        worst = max(ratios)
        print(
            f"rounds 2+: warm/cold median {statistics.median(ratios):.3f}, worst {worst:.3f}; "
            f"goal <= 0.2: {'met' if worst <= 0.2 else 'NOT met'} "
            f"({sum(r <= 0.2 for r in ratios)} of {len(ratios)} rounds)"
        )
        warm_total, cold_total = sum(w for w, _ in later), sum(c for _, c in later)
        print(f"rounds 2+: sum warm {warm_total:.1f} s vs sum cold {cold_total:.1f} s")


if __name__ == "__main__":
    main()
