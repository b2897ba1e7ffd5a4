"""What tracing costs a fake-model episode: off, on the API's no-op, and exporting over OTLP.

    python bench/bench_telemetry.py [--episodes 40] [--rounds 3] [--model-ms 100]

One question (one sample) of seven rounds with a zero-latency scripted model on a small database:
a question span, the episode, its rounds, model calls, 11 tool calls and 9 statements: 36 spans (the
harshest case: nothing but our own code and the spans' cost). With `--model-ms`, the same again
with a model that takes that long for each completion (slept: a stand-in for an engine's latency,
CPU-free), so the ratios show what the same spans cost beside a model that takes time. Each
mode runs in its own process (OpenTelemetry's providers are set once per process), question by
question alternating with questions whose tracing is switched off in the same process (every
span helper replaced by the cheapest stand-in, the backend untraced: the code as it was before),
so that each ratio compares like with like; the modes alternate for `--rounds` rounds:

- no-op:  the product as installed, no OTEL_* variable set (no span is started at all);
- export: OTEL_EXPORTER_OTLP_ENDPOINT set to a receiver in this process, nothing else: the SDK
          with its defaults (batch span processor, 512 spans a batch; metrics every 60 s), OTLP/HTTP
          protobuf;
- sampled: the same, with OTEL_TRACES_SAMPLER=parentbased_traceidratio and OTEL_TRACES_SAMPLER_ARG=0.1
          (one question in ten traced; a dropped question starts no span below it).

Prints the median wall and CPU time (this process's threads) per question of each mode and of
the questions beside it with tracing off, and their ratios. Under load, wall times vary more.
Goal (issue 36): no-op/off <= 1.01, export/off <= 1.05.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("no-op", "export", "sampled")
SPANS = 36  # spans a traced question of the script makes (the schema cached)
SCHEMA = """
CREATE TABLE authors (author_id INTEGER PRIMARY KEY, name TEXT, country TEXT);
CREATE TABLE books (book_id INTEGER PRIMARY KEY, title TEXT, author_id INTEGER REFERENCES authors(author_id),
                    year INTEGER, price REAL);
INSERT INTO authors (name, country) VALUES ('Achebe', 'Nigeria'), ('Woolf', 'UK'), ('Borges', 'Argentina');
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
INSERT INTO books (title, author_id, year, price)
SELECT 'Book ' || i, 1 + i % 3, 1900 + i % 120, i * 0.5 FROM n;
"""


def _script(delay: float) -> Any:
    from tests.support.policies import ScriptedReply, ScriptPolicy, assistant_reply, fenced, tool_call

    sql = "SELECT b.title, a.name FROM books b JOIN authors a USING (author_id) WHERE b.year < 1950 LIMIT 5"
    turns = [
        assistant_reply("List the tables.", tool_call("list_tables")),
        assistant_reply(
            "Look at both.",
            tool_call("describe_table", table_name="books"),
            tool_call("describe_table", table_name="authors"),
        ),
        assistant_reply(
            "How do they join?",
            tool_call("join_path", table_a="books", table_b="authors"),
            tool_call("foreign_keys", table_name="books"),
        ),
        assistant_reply(
            "Rows.",
            tool_call("sample_rows", table_name="books", limit=5),
            tool_call("sample_rows", table_name="authors", limit=3),
        ),
        assistant_reply(
            "Values.",
            tool_call("distinct_values", table_name="authors", column_name="country", limit=10),
            tool_call("run_query", sql="SELECT count(*) FROM books"),
        ),
        assistant_reply(
            "Test it.",
            tool_call("run_query", sql=sql),
            tool_call("run_query", sql="SELECT min(year), max(year) FROM books"),
        ),
    ]
    return ScriptPolicy(
        [ScriptedReply(turn, delay=delay) for turn in turns],
        final=ScriptedReply(assistant_reply("Answer.", fenced(sql, "sql")), delay=delay),
    )


def _switches() -> dict[str, Any]:
    """Turn tracing off and on in this process: off, every span helper is the cheapest stand-in
    where it is used, and the backend untraced (the code as it was without tracing)."""
    import agent.episode_calls
    import agent.loop
    import agent.sampling
    import agent.sqlite

    class _Nothing:
        span = None
        stopped_early = False

        def slot_granted(self, *args: Any) -> None:
            return None

        def finished(self, **kwargs: Any) -> None:
            return None

    stand_in = contextlib.nullcontext(_Nothing())

    def nothing(*args: Any, **kwargs: Any) -> Any:
        return stand_in

    places = [
        (agent.loop, "round_span"),
        (agent.episode_calls, "tool_span"),
        (agent.loop, "round_played"),
        (agent.sampling, "episode_span"),
        (agent.sampling, "_episode_ended"),
        (agent.sqlite, "_statement_span"),
    ]
    real = {(module, name): getattr(module, name) for module, name in places}

    def switch(on: bool) -> None:
        for (module, name), helper in real.items():
            setattr(module, name, helper if on else nothing)

    return {"switch": switch}


def child(mode: str, episodes: int, delay: float) -> None:
    """Alternate questions with tracing off and as `mode` sets it up; print (mode, wall, cpu) as JSON."""
    import anyio

    from agent.engine_start import traced_backend
    from agent.loop import run_episode
    from agent.sampling import Question, SampleBackends, ask
    from agent.sqlite import Database, create_database
    from agent.telemetry.gate import question_span
    from agent.telemetry.setup import start_telemetry
    from tests.support.policies import PolicyBackend

    plan = start_telemetry("bench")
    assert plan.on == (mode in ("export", "sampled")), plan.describe()
    switch = _switches()["switch"]
    policy = _script(delay)
    measured: list[tuple[str, float, float]] = []
    with (
        tempfile.TemporaryDirectory() as folder,
        Database.unruled(create_database(Path(folder) / "books.db", SCHEMA)) as db,
    ):

        async def one(traced_now: bool) -> tuple[float, float]:
            plain = PolicyBackend(policy, record=False)
            backend = traced_backend(plain, "ollama", ()) if traced_now else plain  # as the product's
            question = Question("Which books came out before 1950?", db)
            started, cpu = time.perf_counter(), time.process_time()
            if traced_now:
                with question_span("bench", capture_content=False) as traced_question:
                    traced_question.describe(database="books", samples=1)
                    asked = await ask(question, SampleBackends((None,), (backend,)), run_episode)
            else:
                asked = await ask(question, SampleBackends((None,), (backend,)), run_episode)
            assert asked.chosen is not None and asked.chosen.result is not None
            assert len(asked.chosen.result.rounds) == 7
            return time.perf_counter() - started, time.process_time() - cpu

        for _ in range(3):  # warm: the worker, the schema cache, imports
            for on in (False, True):
                switch(on)
                anyio.run(one, on)
        for episode in range(episodes):
            for on in (False, True) if episode % 2 else (True, False):  # neither always goes first
                switch(on)
                wall, cpu = anyio.run(one, on)
                measured.append((mode if on else "off", wall, cpu))
    print(json.dumps(measured))


@contextlib.contextmanager
def receiver() -> Iterator[tuple[str, list[int]]]:
    """An OTLP/HTTP endpoint on loopback that answers 200 to every export; yields its URL and bytes received."""
    received: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(len(self.rfile.read(int(self.headers.get("content-length", 0)))))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--model-ms", type=float, default=0.0, help="also measure with a model taking this long per completion"
    )
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.episodes, args.model_ms / 1000)
        return
    print(
        f"{args.rounds} rounds x {args.episodes} questions per mode, each beside as many with tracing off in "
        f"the same process (one sample of 7 rounds, 11 tool calls, {SPANS} spans)"
    )
    print("  (cpu: this process's threads; the SQLite worker's are excluded, so the cpu ratio overstates)")
    for model_ms in (0.0, *([args.model_ms] if args.model_ms else [])):
        measure(args.rounds, args.episodes, model_ms)


def measure(rounds: int, episodes: int, model_ms: float) -> None:
    """Run the modes alternating, each in its own process, for `rounds` rounds; print the ratios."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    runs: dict[str, list[tuple[str, float, float]]] = {mode: [] for mode in MODES}
    with receiver() as (endpoint, received):
        for _ in range(rounds):
            for mode in MODES:
                env = dict(base)
                if mode in ("export", "sampled"):  # the SDK's defaults otherwise (batches of 512 spans,
                    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)  # metrics every 60 s)
                if mode == "sampled":
                    env.update(OTEL_TRACES_SAMPLER="parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG="0.1")
                command = [
                    sys.executable,
                    __file__,
                    "--child",
                    mode,
                    "--episodes",
                    str(episodes),
                    "--model-ms",
                    str(model_ms),
                ]
                done = subprocess.run(
                    command, env=env, capture_output=True, text=True, check=False, timeout=600
                )
                if done.returncode != 0:
                    raise SystemExit(f"{mode}: {done.stderr}")
                runs[mode] += [tuple(one) for one in json.loads(done.stdout.splitlines()[-1])]
    print(f"model {model_ms:g} ms per completion (load average {os.getloadavg()[0]:.1f}):")
    for mode in MODES:

        def median(kind: str, column: int, measured: list[tuple[str, float, float]] = runs[mode]) -> float:
            return statistics.median(m[column] for m in measured if m[0] == kind)

        wall, cpu = median(mode, 1), median(mode, 2)
        off_wall, off_cpu = median("off", 1), median("off", 2)
        print(
            f"  {mode:8s} wall {wall * 1000:6.2f} ms (off {off_wall * 1000:6.2f}), cpu {cpu * 1000:6.2f} ms "
            f"(off {off_cpu * 1000:6.2f}): ratio to off: wall {wall / off_wall:.3f}, cpu {cpu / off_cpu:.3f} "
            f"(+{(cpu - off_cpu) * 1000:.2f} ms)"
        )
    print(
        f"  goals: no-op <= 1.01, export <= 1.05; {len(received)} OTLP requests, {sum(received):,} bytes "
        "received"
    )


if __name__ == "__main__":
    main()
