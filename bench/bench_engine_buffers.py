"""What starting the real engine with ggml's extra buffer types off costs: prefill and generation speed.

    python bench/bench_engine_buffers.py [--prompt-words 300] [--repeats 3] [--rounds 2]

Issue 23 §1: the real-engine tier starts llama_cpp.server with `use_extra_bufts = False`
(tests/support/llama_launcher.py) so that it runs on hosts that advertise AMX but fault on it.
That also turns off the repacked weights some quantisations use on AVX2/AVX-512 CPUs. This
starts Gemma 3 270M both ways, alternating (`--rounds` of each, on a shared machine), and prints
the median time of a cold prefill (a prompt of `--prompt-words` words with max_tokens 1, each
prompt new so no cache helps) and of a generated token (64 tokens at temperature 0), and the
ratio off/on. No goal: the figure says what the AMX-safe start costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from tests.support.real_engine import LlamaServer, engine_missing, llama_server  # noqa: E402

GENERATED = 64


def measure(server: LlamaServer, words: int, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds per cold prefill, and seconds per generated token, `repeats` times each."""
    prefill, per_token = [], []
    with httpx.Client(timeout=900) as http:
        http.post(f"{server.url}/completions", json={"prompt": "Warm up.", "max_tokens": 1}).raise_for_status()
        for k in range(repeats):
            prompt = f"Text {k}: " + " ".join(f"w{k}x{i}" for i in range(words))
            started = time.perf_counter()
            http.post(f"{server.url}/completions", json={"prompt": prompt, "max_tokens": 1}).raise_for_status()
            prefill.append(time.perf_counter() - started)
            started = time.perf_counter()
            answer = http.post(
                f"{server.url}/completions",
                json={
                    "prompt": f"Story {k}:",
                    "max_tokens": GENERATED,
                    "min_tokens": GENERATED,
                    "temperature": 0,
                },
            ).json()
            per_token.append((time.perf_counter() - started) / max(1, answer["usage"]["completion_tokens"]))
    return prefill, per_token


def main() -> None:
    """Alternate the two starts, then print medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-words", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if (missing := engine_missing()) is not None:
        sys.exit(missing)
    results: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
    with tempfile.TemporaryDirectory() as logs:
        for _ in range(args.rounds):
            for extra_buffers in (True, False):
                with llama_server(Path(logs), n_ctx=4096, extra_buffers=extra_buffers) as server:
                    prefill, per_token = measure(server, args.prompt_words, args.repeats)
                results[extra_buffers][0].extend(prefill)
                results[extra_buffers][1].extend(per_token)
    medians = {on: (statistics.median(p), statistics.median(g)) for on, (p, g) in results.items()}
    for on, label in (
        (True, "extra buffer types on  (plain llama_cpp.server)"),
        (False, "extra buffer types off (the tier's launcher)  "),
    ):
        prefill, per_token = medians[on]
        print(
            f"{label}: cold prefill of {args.prompt_words} words {prefill:.2f} s; "
            f"{per_token * 1000:.1f} ms per generated token"
        )
    print(
        f"off / on: prefill {medians[False][0] / medians[True][0]:.2f}, "
        f"generation {medians[False][1] / medians[True][1]:.2f}"
    )


if __name__ == "__main__":
    main()
