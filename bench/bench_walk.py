"""A question's walk through the server: the frames from the MCP handler to the model backend's
`complete`, and the modules of ours on the way and at work (issue 45).

    python bench/bench_walk.py [--before REF]

One question (K = 1, the demo database, an in-process scripted model) through `mcp.Client` in
process, as the tests ask it. The walk follows the question across tasks: each task started with
anyio's `start_soon` carries the stack that started it, so a question run in a task of its own
(mcp_server/ongoing.py) and each sample's task count from the handler. Event-loop plumbing
(asyncio, anyio's backend) is left out; every other frame (ours, the SDK's, the libraries') counts.
It prints the frames from our first middleware to the handler, the frames from the handler to
`complete`, the modules of ours on that walk, and the modules of ours whose code ran at all during
a second question (a profiler on every thread). With --before REF, that commit's tree (extracted
with `git archive`) is walked too, first. Not a timing: the figures are counts.
"""

from __future__ import annotations

import argparse
import contextvars
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

from trees import extract_tree  # beside this file

ROOT = Path(__file__).resolve().parents[1]
PLUMBING = ("/asyncio/", "anyio/_backends", "anyio/_core/_eventloop", "anyio/_core/_tasks", "bench_walk.py")
QUESTIONS = ("How many books are there?", "Which authors come from Nigeria?")


def walk(tree: Path) -> None:
    """Ask two questions of `tree`'s server and print the second one's walk."""
    sys.path.insert(0, str(tree))
    import anyio
    from anyio._backends import _asyncio as backend
    from mcp import Client

    from agent.backends.base import Completion
    from tests.support.mcp import BOOK_GOLD, TOOL
    from tests.support.mcp_in_process import build
    from tests.support.policies import OraclePolicy, PolicyBackend

    Stack = tuple[traceback.FrameSummary, ...]
    parent: contextvars.ContextVar[Stack] = contextvars.ContextVar("parent", default=())
    start_soon = backend.TaskGroup.start_soon

    def kept(stack: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
        return [f for f in stack if not any(part in f.filename for part in PLUMBING)]

    def carried_start_soon(self: Any, func: Any, *args: Any, name: Any = None) -> None:
        chain = [*parent.get(), *kept(traceback.extract_stack()[:-1])]

        async def carried(*given: Any) -> Any:
            parent.set(tuple(chain))
            return await func(*given)

        start_soon(self, carried, *args, name=name or getattr(func, "__qualname__", None))

    backend.TaskGroup.start_soon = carried_start_soon  # type: ignore[method-assign]
    walks: list[list[traceback.FrameSummary]] = []

    class Recording(PolicyBackend):
        async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
            walks.append([*parent.get(), *kept(traceback.extract_stack()[:-1])])
            return await super().complete(prompt, max_tokens=max_tokens)

        def with_seed(self, seed: int | None) -> Recording:
            return self

    def ours(filename: str) -> str | None:
        try:
            parts = Path(filename).resolve().relative_to(tree.resolve()).with_suffix("").parts
        except ValueError:
            return None
        return ".".join(parts) if parts[0] in ("agent", "mcp_server") else None

    ran: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and (module := ours(frame.f_code.co_filename)):
            ran.add(module)

    async def ask() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            server = build(Path(tmp), ["--demo"], Recording(OraclePolicy(BOOK_GOLD)))
            async with Client(server) as client:
                await client.call_tool(TOOL, {"question": QUESTIONS[0]})  # everything loaded, the state open
                walks.clear()
                sys.setprofile(profile)
                threading.setprofile(profile)
                try:
                    result = await client.call_tool(TOOL, {"question": QUESTIONS[1]})
                finally:
                    sys.setprofile(None)
                    threading.setprofile(None)
                assert not result.is_error, result

    anyio.run(ask)
    first = walks[0]
    start = next(i for i, f in enumerate(first) if f.name == "answer_sql_question")
    outer = first[next(i for i, f in enumerate(first) if ours(f.filename)) : start]
    path = first[start:]
    print(
        f"frames from our first middleware to the handler: {len(outer)} "
        f"({sum(1 for f in outer if ours(f.filename))} ours)"
    )
    ours_on_path = sum(1 for f in path if ours(f.filename))
    print(f"frames from the handler to complete: {len(path)} ({ours_on_path} ours):")
    for f in path:
        print(f"    {ours(f.filename) or Path(f.filename).name}:{f.lineno} {f.name}")
    on_path = sorted({m for f in path if (m := ours(f.filename))})
    print(f"modules of ours on that walk: {len(on_path)}: {', '.join(on_path)}")
    server = sorted(m for m in ran if m.startswith("mcp_server"))
    agent = sorted(m for m in ran if m.startswith("agent"))
    print(
        f"modules of ours whose code ran during the question: {len(ran)} ({len(server)} mcp_server, "
        f"{len(agent)} agent)"
    )
    print(f"    mcp_server: {' '.join(m.removeprefix('mcp_server.') for m in server)}")
    print(f"    agent: {' '.join(m.removeprefix('agent.') for m in agent)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REF", help="also walk this commit's tree, first")
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)  # walk this tree, in this process
    args = parser.parse_args()
    if args.tree is not None:
        walk(args.tree)
        return
    with tempfile.TemporaryDirectory() as tmp:
        trees = []
        if args.before:
            extract_tree(args.before, Path(tmp))
            trees.append((f"before ({args.before})", Path(tmp)))
        trees.append(("this checkout", ROOT))
        for label, tree in trees:
            print(f"{label}:", flush=True)
            command = [sys.executable, __file__, "--tree", str(tree)]
            subprocess.run(command, check=True, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
