"""Where a verified hit's instructions go: the hit with one step of its answer taken out at a time.

    python bench/bench_hit_phases.py [--calls 30]

The server is ours over stdio on Chinook with a verified library (as in bench_server_cost.py's hit
part), run under callgrind once per variant; each variant keeps the first result of one step and
gives it back to every later call, so those calls skip that step and everything below it. The
instructions per call of the server and its SQLite worker, 30 calls after 5, then what each step
costs: the full hit minus the hit without it. The steps, outermost last:

    sql       the SQL's round trip to the SQLite worker (Database.aquery): both processes' share
    consult   the library's lookup, the SQL, the answer made of its rows (VerifiedLibraries.consult)
    fit       the response built and fitted to its budget: text, structured content, sizes
    audit     the call's episode-log line, metric, span and log line (Records.answered)
    respond   fit + audit (Answering._respond)
    run       the question's work: consult, the verified answer built, counted and recorded
    ask       everything below the tool's function: the floor "ours, the answer prebuilt"

Instructions, not time: callgrind counts the same on a busy machine. No goal; the figures say what
stands between a hit and the floors of bench_server_cost.py part 3. Needs valgrind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]  # tests.support, and this folder's helpers

from hit_support import (  # noqa: E402
    VALGRIND,
    RawServer,
    callgrind_control,
    callgrind_descendants,
    dumped_totals,
    under_callgrind,
)
from server_cost_support import CHINOOK, DEMO_GOLD, HIT_QUESTION, HIT_SQL, FourRounds  # noqa: E402

from tests.support.fake_runtime import FakeServer  # noqa: E402

VARIANTS = ("full", "sql", "consult", "fit", "audit", "respond", "run", "ask")

# Started as `python WRAPPER VARIANT <sqale-mcp options>`: the variant's step kept after its first call.
WRAPPER = """\
import sys

variant = sys.argv.pop(1)
from mcp_server.__main__ import main


def kept_after_first(owner, name, is_async):
    original, kept = getattr(owner, name), []

    async def once_async(*args, **kwargs):
        if not kept:
            kept.append(await original(*args, **kwargs))
        return kept[0]

    def once(*args, **kwargs):
        if not kept:
            kept.append(original(*args, **kwargs))
        return kept[0]

    setattr(owner, name, once_async if is_async else once)


if variant == "sql":
    from agent.sqlite import Database
    kept_after_first(Database, "aquery", True)
elif variant == "consult":
    from mcp_server.answer.verified import VerifiedLibraries
    kept_after_first(VerifiedLibraries, "consult", True)
elif variant == "fit":
    import mcp_server.answer.question as question
    kept_after_first(question, "fitted_response", False)
elif variant == "audit":
    from mcp_server.answer.audit import Records

    async def nothing(*args, **kwargs):
        return None

    Records.answered = nothing
elif variant in ("respond", "run", "ask"):
    from mcp_server.answer.question import Answering
    kept_after_first(Answering, {"respond": "_respond", "run": "_run", "ask": "ask"}[variant], True)
sys.exit(main())
"""


def instructions(
    variant: str, server_options: list[str], env: dict[str, str], tmp: Path, calls: int
) -> tuple[float, float]:
    """Instructions per hit of the server process and of its SQLite workers, for one variant."""
    out = tmp / "callgrind"
    out.mkdir(exist_ok=True)
    argv = [sys.executable, str(tmp / "wrapper.py"), variant, *server_options]
    server = RawServer(under_callgrind(argv, out, variant), env, ROOT, tmp / "stderr.txt").start()
    try:

        def hit() -> None:
            result = server.call_tool("answer_sql_question", {"question": HIT_QUESTION})
            assert (result.get("structuredContent") or {}).get("status") == "verified", result

        for _ in range(5):
            hit()
        pids = callgrind_descendants(server.pid)
        callgrind_control("-z", pids)
        for _ in range(calls):
            hit()
        callgrind_control("-d", pids)
        own = workers = 0.0
        for pid in pids:
            total = sum(dumped_totals(out, variant, pid).values()) / calls
            if pid == server.pid:
                own += total
            else:
                workers += total
        return own, workers
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="hits counted per variant, after 5 uncounted")
    args = parser.parse_args()
    if VALGRIND is None:
        sys.exit("bench_hit_phases.py needs valgrind (apt-get install valgrind)")
    if not CHINOOK.is_file():
        sys.exit(f"bench_hit_phases.py needs {CHINOOK} (../shared/data)")
    engine = FakeServer(FourRounds(DEMO_GOLD)).start()  # never asked: every call is a hit
    try:
        found = measure(engine.root, args.calls)
    finally:
        engine.stop()
    full = sum(found["full"])
    print("what each step costs (the full hit minus the hit without it):")
    for variant in VARIANTS[1:]:
        print(f"  {variant:8s} {(full - sum(found[variant])) / 1e6:5.2f} M of {full / 1e6:.2f} M")


def measure(ollama_url: str, calls: int) -> dict[str, tuple[float, float]]:
    """Each variant's instructions per hit (server, SQLite workers), printed as they come."""
    with tempfile.TemporaryDirectory(prefix="hit-phases") as folder:
        tmp = Path(folder)
        (tmp / "wrapper.py").write_text(WRAPPER)
        library = tmp / "chinook.jsonl"
        library.write_text(json.dumps({"question": HIT_QUESTION, "sql": HIT_SQL, "database": "chinook"}) + "\n")
        env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS", "PYTHONPATH")}
        env |= {
            "PYTHONPATH": str(ROOT),
            "XDG_CACHE_HOME": str(tmp / "cache"),
            "XDG_CONFIG_HOME": str(tmp / "cfg"),
        }
        # The quota raised: callgrind's hits come faster than the default 600 a minute allows.
        options = ["--db", f"chinook={CHINOOK}", "--verified", f"chinook={library}"]
        options += ["--ollama-host", ollama_url, "--token-per-minute", "100000"]
        print(f"a verified hit on Chinook, instructions per call under callgrind ({calls} calls after 5):")
        found: dict[str, tuple[float, float]] = {}
        for variant in VARIANTS:
            own, workers = found[variant] = instructions(variant, options, env, tmp, calls)
            print(
                f"  {variant:8s} server {own / 1e6:5.2f} M  SQLite workers {workers / 1e6:5.2f} M", flush=True
            )
        return found


if __name__ == "__main__":
    main()
