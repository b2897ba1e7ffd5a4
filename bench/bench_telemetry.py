"""What tracing costs a fake-model episode: off, on the API's no-op, and exporting over OTLP.

    python bench/bench_telemetry.py [--episodes 40] [--rounds 3]

One question (one sample) of seven rounds with a zero-latency scripted model on a small database:
a question span, the episode, its rounds, model calls, 14 tool calls and their statements. Each
mode runs in its own process (OpenTelemetry's providers are set once per process), the modes
alternating for `--rounds` rounds so that machine load falls on all of them alike:

- off:    the span helpers replaced by no-ops and no traced backend (what the code cost before);
- no-op:  the product as installed, no OTEL_* variable set: every span the API's non-recording one;
- export: OTEL_EXPORTER_OTLP_ENDPOINT set to a receiver in this process, nothing else: the SDK
          with its defaults (batch span processor, 512 spans a batch; metrics every 60 s), OTLP/HTTP
          protobuf;
- sampled: the same, with OTEL_TRACES_SAMPLER=parentbased_traceidratio and OTEL_TRACES_SAMPLER_ARG=0.1
          (one question in ten traced; a dropped question starts no span below it).

Prints the median wall time and CPU time (this process's threads) per question of each mode,
and their ratios to `off`. Under load, wall times vary far more than CPU times.
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

MODES = ("off", "no-op", "export", "sampled")
SCHEMA = """
CREATE TABLE authors (author_id INTEGER PRIMARY KEY, name TEXT, country TEXT);
CREATE TABLE books (book_id INTEGER PRIMARY KEY, title TEXT, author_id INTEGER REFERENCES authors(author_id),
                    year INTEGER, price REAL);
INSERT INTO authors (name, country) VALUES ('Achebe', 'Nigeria'), ('Woolf', 'UK'), ('Borges', 'Argentina');
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
INSERT INTO books (title, author_id, year, price)
SELECT 'Book ' || i, 1 + i % 3, 1900 + i % 120, i * 0.5 FROM n;
"""


def _script() -> Any:
    from tests.support.policies import ScriptPolicy, assistant_reply, fenced, tool_call

    sql = "SELECT b.title, a.name FROM books b JOIN authors a USING (author_id) WHERE b.year < 1950 LIMIT 5"
    turns = [
        assistant_reply("List the tables.", tool_call("list_tables")),
        assistant_reply("Look at both.", tool_call("describe_table", table_name="books"),
                        tool_call("describe_table", table_name="authors")),
        assistant_reply("How do they join?", tool_call("join_path", table_a="books", table_b="authors"),
                        tool_call("foreign_keys", table_name="books")),
        assistant_reply("Rows.", tool_call("sample_rows", table_name="books", limit=5),
                        tool_call("sample_rows", table_name="authors", limit=3)),
        assistant_reply("Values.", tool_call("distinct_values", table_name="authors", column_name="country",
                                             limit=10),
                        tool_call("run_query", sql="SELECT count(*) FROM books")),
        assistant_reply("Test it.", tool_call("run_query", sql=sql),
                        tool_call("run_query", sql="SELECT min(year), max(year) FROM books")),
    ]
    return ScriptPolicy(turns, final=assistant_reply("Answer.", fenced(sql, "sql")))


def _switch_off() -> None:
    """Replace every span helper where it is used by the cheapest stand-in (the code without tracing)."""
    import agent.asking
    import agent.loop
    import agent.sqlite

    class _Nothing:
        span = None
        stopped_early = False

        def slot_granted(self, *args: Any) -> None:
            return None

        def finished(self, **kwargs: Any) -> None:
            return None

    off = contextlib.nullcontext(_Nothing())

    def nothing(*args: Any, **kwargs: Any) -> Any:
        return off

    agent.loop.round_span = agent.loop.tool_span = nothing  # type: ignore[assignment]
    agent.loop.round_played = nothing  # type: ignore[assignment]
    agent.asking.episode_span = nothing  # type: ignore[assignment]
    agent.asking._episode_ended = nothing  # type: ignore[assignment]
    agent.sqlite.statement_span = nothing  # type: ignore[assignment]


def child(mode: str, episodes: int) -> None:
    """Run `episodes` questions in this process under `mode`; print their wall times as JSON."""
    import anyio

    from agent.asking import Question, SampleBackends, ask
    from agent.backends.traced import Engines, traced
    from agent.loop import run_episode
    from agent.sqlite import Database, create_database
    from agent.telemetry.setup import start_telemetry
    from agent.telemetry.spans import question_span
    from tests.support.policies import PolicyBackend

    if mode == "off":
        _switch_off()
    plan = start_telemetry("bench")
    assert plan.on == (mode in ("export", "sampled")), plan.describe()
    policy = _script()
    walls: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as folder, \
            Database.unruled(create_database(Path(folder) / "books.db", SCHEMA)) as db:
        async def one() -> tuple[float, float]:
            plain = PolicyBackend(policy, record=False)
            backend = plain if mode == "off" else traced(plain, Engines("ollama"))
            started, cpu = time.perf_counter(), time.process_time()
            with question_span("bench", capture_content=False) as question:
                question.describe(database="books", samples=1)
                asked = await ask(Question("Which books came out before 1950?", db), SampleBackends((None,),
                                  (backend,)), run_episode)
                assert asked.chosen is not None and asked.chosen.result is not None
                assert len(asked.chosen.result.rounds) == 7
            return time.perf_counter() - started, time.process_time() - cpu

        for _ in range(3):  # warm: the worker, the schema cache, imports
            anyio.run(one)
        for _ in range(episodes):
            walls.append(anyio.run(one))
    print(json.dumps(walls))


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
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.episodes)
        return
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    walls: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    with receiver() as (endpoint, received):
        for _ in range(args.rounds):
            for mode in MODES:
                env = dict(base)
                if mode in ("export", "sampled"):  # the SDK's defaults otherwise (batches of 512 spans,
                    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)  # metrics every 60 s)
                if mode == "sampled":
                    env.update(OTEL_TRACES_SAMPLER="parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG="0.1")
                command = [sys.executable, __file__, "--child", mode, "--episodes", str(args.episodes)]
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                                      timeout=600)
                if done.returncode != 0:
                    raise SystemExit(f"{mode}: {done.stderr}")
                walls[mode] += json.loads(done.stdout.splitlines()[-1])
    wall = {mode: statistics.median(w for w, _ in values) for mode, values in walls.items()}
    cpu = {mode: statistics.median(c for _, c in values) for mode, values in walls.items()}
    print(f"{args.rounds} rounds x {args.episodes} questions per mode (one sample of 7 rounds, 14 tool calls; "
          f"load average {os.getloadavg()[0]:.1f})")
    print("  (wall: per question; cpu: this process's threads, the SQLite worker's excluded, so the cpu ratio "
          "overstates)")
    for mode in MODES:
        print(f"  {mode:8s} wall {wall[mode] * 1000:7.2f} ms, cpu {cpu[mode] * 1000:7.2f} ms"
              + ("" if mode == "off" else f"   ratio to off: wall {wall[mode] / wall['off']:.3f}, "
                                          f"cpu {cpu[mode] / cpu['off']:.3f}"))
    print(f"  goals: no-op <= 1.01, export <= 1.05; {len(received)} OTLP requests, {sum(received):,} bytes "
          "received")


if __name__ == "__main__":
    main()
