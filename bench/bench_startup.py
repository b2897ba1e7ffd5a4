"""Start-up a person notices: `--version` of both commands, the stdio server's first reply, `tool`.

    python bench/bench_startup.py [--runs 7] [--before REF]

In one run: `sqale-agent --version` and `sqale-mcp --version` within 4x `python -c pass`; the
stdio server's reply to `initialize`, and to the 2026-07-28 `server/discover` that Claude Code
2.1.260+ sends first (some clients give up on it within about 0.6 s), each within 1.2x that of the
MCP SDK's own minimal server (an `MCPServer` with one trivial tool, run over stdio, asked the
same); the wall time of a `sqale-agent tool run_query` call; and `sqale-agent ask`, `tool` and
`golden` never importing the MCP SDK.

Every figure is a median of --runs, the commands interleaved (each round runs every command
once, in a shuffled order) so that the machine's load weighs on all of them alike; ratios
compare figures of the same run. What runs is what users run: each tree (this checkout, and
with --before REF that commit's, extracted with `git archive`) is installed with
`pip install --no-deps --target` (pip compiles its bytecode, as at any install) and started
through its installed console scripts, with the default log level; the SDK runs from this
environment as installed. The server answers with `--demo` (its database built once, before
the timed runs) and, when ../shared/data is there, on Chinook with a verified library, with a
fake Ollama (tests/support/fake_runtime.py) in this process; `tool run_query` counts the rows of
a table of a tiny database.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: tests.support

from trees import extract_tree  # noqa: E402 - beside this file

from tests.support.fake_runtime import FakeServer  # noqa: E402
from tests.support.policies import OraclePolicy  # noqa: E402
from tests.support.startup import MINIMAL_SERVER  # noqa: E402

AGENT = "import sys; from agent.commands.cli import main; sys.exit(main())"  # as the sqale-agent script
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
DISCOVER = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "server/discover",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
        }
    },
}
CHINOOK = ROOT.parent / "shared" / "data" / "dbs" / "Chinook_Sqlite.sqlite"
QUESTION = "How many rows has t?"
QUESTION_SQL = "SELECT count(*) FROM t"
# Top-level modules of the MCP SDK and the HTTP server side: none may load in these commands.
SERVER_SIDE = ("mcp", "mcp_types", "mcp_server", "starlette", "uvicorn", "opentelemetry")
VERSION_GOAL, INITIALIZE_GOAL = 4.0, 1.2
# PYTHONDONTWRITEBYTECODE would have every run compile our modules anew, PYTHONPYCACHEPREFIX look for
# bytecode away from where pip wrote it: no user's server does either.
NOT_PASSED_ON = (
    "OLLAMA_HOST",
    "SQALE_MCP_ARGS",
    "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPYCACHEPREFIX",
)


@dataclass(frozen=True)
class Tree:
    """A tree installed for the commands to run: how it is named in the table, where it is installed."""

    label: str
    path: Path  # what `pip install --target` made: the packages and bin/ with the console scripts


@dataclass(frozen=True)
class Place:
    """What every command needs: the temporary folder, the tiny database, the fake Ollama."""

    folder: Path
    database: Path
    minimal_server: Path
    ollama_url: str
    library: Path  # a verified library of one Chinook question


def tree_env(tree: Tree, place: Place) -> dict[str, str]:
    """This process's environment with `tree`'s installed packages first on the import path."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED_ON}
    env["PYTHONPATH"] = str(tree.path)
    env["XDG_CACHE_HOME"] = str(place.folder / "cache")  # the demo database, built by the warm-up
    env["XDG_CONFIG_HOME"] = str(place.folder / "config")  # no user config file
    return env


def checkout_copy(into: Path) -> Path:
    """This checkout's tracked files as they are now (changes included), copied under `into`:
    pip builds in the tree it installs, and the checkout stays as it is."""
    listed = (
        subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True, timeout=60)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


def install(source: Path, into: Path) -> Path:
    """`source` installed as users install it (bytecode compiled by pip), into `into`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(into), str(source)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    return into


def run_seconds(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> float:
    """Wall seconds of one command that must exit 0."""
    started = time.perf_counter()
    done = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=300,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode(errors='replace')[-2000:]}")
    return seconds


def first_reply_seconds(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, request: Mapping[str, object] = INITIALIZE
) -> float:
    """Wall seconds from spawning a stdio server until its reply to `request` (its first) is on its stdout."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write((json.dumps(request) + "\n").encode())
        process.stdin.flush()
        reply = json.loads(process.stdout.readline() or b"null")
        seconds = time.perf_counter() - started
    finally:
        process.stdin.close()
        process.wait(timeout=60)
        process.stdout.close()
    if not isinstance(reply, dict) or "result" not in reply:
        raise RuntimeError(f"{argv} did not answer {request['method']}: {reply!r}")
    return seconds


def commands(tree: Tree, place: Place) -> dict[str, Callable[[], float]]:
    """Each timed command on `tree`, by its row name, run through its installed console scripts."""
    env, cwd, python = tree_env(tree, place), place.folder, sys.executable
    agent, server = str(tree.path / "bin" / "sqale-agent"), str(tree.path / "bin" / "sqale-mcp")
    query = json.dumps({"sql": QUESTION_SQL})
    demo = [python, server, "--demo", "--ollama-host", place.ollama_url]
    timed = {
        "sqale-agent --version": lambda: run_seconds([python, agent, "--version"], env, cwd),
        "sqale-mcp --version": lambda: run_seconds([python, server, "--version"], env, cwd),
        "sqale-agent tool run_query": lambda: run_seconds(
            [python, agent, "tool", "run_query", query, "--db", str(place.database)], env, cwd
        ),
        "sqale-mcp initialize": lambda: first_reply_seconds(demo, env, cwd),
        "sqale-mcp server/discover": lambda: first_reply_seconds(demo, env, cwd, DISCOVER),
    }
    if CHINOOK.is_file():
        chinook = [
            python,
            server,
            "--db",
            f"chinook={CHINOOK}",
            "--verified",
            f"chinook={place.library}",
            "--ollama-host",
            place.ollama_url,
        ]
        timed["sqale-mcp initialize, Chinook"] = lambda: first_reply_seconds(chinook, env, cwd)
    return timed


def baselines(place: Place) -> dict[str, Callable[[], float]]:
    """What the goals compare with: an empty interpreter, and the SDK's minimal stdio server."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED_ON}
    minimal = [sys.executable, str(place.minimal_server)]
    return {
        "python -c pass": lambda: run_seconds([sys.executable, "-c", "pass"], env, place.folder),
        "SDK minimal server initialize": lambda: first_reply_seconds(minimal, env, place.folder),
        "SDK minimal server server/discover": lambda: first_reply_seconds(minimal, env, place.folder, DISCOVER),
    }


def measure(timed: Mapping[str, Callable[[], float]], runs: int) -> dict[str, float]:
    """The median seconds of each command over `runs` rounds, every round in a new order."""
    for run in timed.values():  # warm-up, not counted: .pyc files, the demo database, the page cache
        run()
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    order = list(timed)
    shuffle = random.Random(32)
    for _ in range(runs):
        shuffle.shuffle(order)
        for name in order:
            seconds[name].append(timed[name]())
    return {name: statistics.median(values) for name, values in seconds.items()}


def imports_server_side(tree: Tree, place: Place, argv: Sequence[str]) -> list[str]:
    """The SERVER_SIDE packages `sqale-agent ARGV` imports on `tree` (read from -X importtime)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(tree.path / "bin" / "sqale-agent"), *argv],
        env=tree_env(tree, place),
        cwd=place.folder,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"sqale-agent {argv} exited {done.returncode}: {done.stderr[-2000:]}")
    found = {
        line.rpartition("|")[2].strip().partition(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return sorted(found & set(SERVER_SIDE))


def agent_commands(place: Place) -> dict[str, list[str]]:
    """The `sqale-agent` commands that must not import the server side, by name."""
    golden = place.folder / "golden.jsonl"
    return {
        "ask": ["ask", "--db", str(place.database), "--ollama-host", place.ollama_url, QUESTION],
        "tool": ["tool", "list_tables", "--db", str(place.database)],
        "golden": [
            "golden",
            "add",
            "--db",
            str(place.database),
            "--file",
            str(golden),
            "--by",
            "bench",
            QUESTION,
            QUESTION_SQL,
        ],
    }


def prepare(folder: Path, ollama_url: str) -> Place:
    """The tiny database, the verified library and the minimal server's file in `folder`."""
    database = folder / "tiny.db"
    with sqlite3.connect(database) as connection:
        connection.executescript(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT);"
            "INSERT INTO t (name) VALUES ('a'), ('b'), ('c');"
        )
    connection.close()
    minimal = folder / "minimal_server.py"
    minimal.write_text(MINIMAL_SERVER, encoding="utf-8")
    library = folder / "chinook.jsonl"
    library.write_text(
        json.dumps(
            {
                "question": "How many customers are there?",
                "database": "chinook",
                "sql": "SELECT count(*) FROM Customer",
            }
        )
        + "\n"
    )
    return Place(
        folder=folder, database=database, minimal_server=minimal, ollama_url=ollama_url, library=library
    )


def verdict(ratio: float, goal: float) -> str:
    """Whether `ratio` meets a goal of at most `goal` times its baseline, as the table says it."""
    return f"goal <= {goal:g}x: {'met' if ratio <= goal else 'NOT met'}"


def report(
    trees: Sequence[Tree],
    figures: Mapping[str, Mapping[str, float]],
    base: Mapping[str, float],
    server_side: Mapping[str, Mapping[str, list[str]]],
    runs: int,
    load: float,
) -> None:
    """Print every figure, its ratio to what its goal compares it with, and the goal's verdict."""
    passing = base["python -c pass"]
    print(
        f"start-up, median of {runs} interleaved runs ({os.cpu_count()} cores, load average {load:.1f} "
        "before the runs), installed trees, console scripts, default log level"
    )
    for name, seconds in base.items():
        print(f"  {name:36s}  {seconds:6.3f} s")
    for tree in trees:
        f = figures[tree.label]
        print(f"{tree.label}:")
        for name in ("sqale-agent --version", "sqale-mcp --version"):
            ratio = f[name] / passing
            print(
                f"  {name:36s}  {f[name]:6.3f} s  {ratio:5.1f}x python -c pass    "
                f"{verdict(ratio, VERSION_GOAL)}"
            )
        for name in ("sqale-mcp initialize", "sqale-mcp initialize, Chinook", "sqale-mcp server/discover"):
            if name not in f:
                continue
            request = "server/discover" if "discover" in name else "initialize"
            ratio = f[name] / base[f"SDK minimal server {request}"]
            print(
                f"  {name:36s}  {f[name]:6.3f} s  {ratio:5.2f}x the SDK's minimal server  "
                f"{verdict(ratio, INITIALIZE_GOAL)}"
            )
        name = "sqale-agent tool run_query"
        print(f"  {name:36s}  {f[name]:6.3f} s  {f[name] / passing:5.1f}x python -c pass")
        for command, found in server_side[tree.label].items():
            print(
                f"  sqale-agent {command:24s}  imports {', '.join(found) if found else 'none'} of "
                f"{', '.join(SERVER_SIDE)}  goal none: {'met' if not found else 'NOT met'}"
            )
    if len(trees) == 2:
        before, after = (figures[t.label] for t in trees)
        print(f"after / before ({trees[1].label} / {trees[0].label}):")
        for name in before:
            print(f"  {name:36s}  {after[name] / before[name]:5.2f}")


def startup_figures(runs: int) -> dict[str, tuple[float, float]]:
    """This checkout's server, installed, to its first reply (initialize on the demo and on Chinook,
    server/discover): seconds and the ratio to the SDK's minimal server asked the same."""
    fake = FakeServer(OraclePolicy({QUESTION: QUESTION_SQL})).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            place = prepare(Path(tmp), fake.url)
            copied = checkout_copy(Path(tmp) / "checkout")
            tree = Tree("this checkout", install(copied, Path(tmp) / "installed"))
            timed = {name: run for name, run in baselines(place).items() if "server" in name}
            timed |= {
                name: run
                for name, run in commands(tree, place).items()
                if name.startswith("sqale-mcp i") or "discover" in name
            }
            medians = measure(timed, runs)
    finally:
        fake.stop()
    return {
        name: (
            seconds,
            seconds
            / medians["SDK minimal server " + ("server/discover" if "discover" in name else "initialize")],
        )
        for name, seconds in medians.items()
        if name.startswith("sqale-mcp")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each command (median shown)")
    parser.add_argument("--before", metavar="REF", help="also time this commit's tree (e.g. main)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    fake = FakeServer(OraclePolicy({QUESTION: QUESTION_SQL})).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            place = prepare(Path(tmp), fake.url)
            copied = checkout_copy(Path(tmp) / "checkout")
            trees = [Tree("this checkout", install(copied, Path(tmp) / "installed"))]
            if args.before:
                before = extract_tree(args.before, Path(tmp) / "before")
                installed = install(before, Path(tmp) / "installed-before")
                trees.insert(0, Tree(f"before ({args.before})", installed))
            timed: dict[str, Callable[[], float]] = dict(baselines(place))
            for tree in trees:
                timed |= {f"{tree.label}|{name}": run for name, run in commands(tree, place).items()}
            medians = measure(timed, args.runs)
            figures = {
                t.label: {
                    name.partition("|")[2]: s for name, s in medians.items() if name.startswith(f"{t.label}|")
                }
                for t in trees
            }
            server_side = {
                t.label: {c: imports_server_side(t, place, argv) for c, argv in agent_commands(place).items()}
                for t in trees
            }
            report(trees, figures, {k: medians[k] for k in baselines(place)}, server_side, args.runs, load)
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
