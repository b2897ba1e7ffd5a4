"""What the verified-hit part of bench_server_cost.py drives: a raw JSON-RPC client over stdio, the
servers it compares (ours, DBHub, and two floors made of the SDK alone), and callgrind.

The client writes one request line and reads lines until the reply with its id: no SDK on the
client side, so the 2 cores are spent on the servers. Every server is a real process over pipes.
The floors: the SDK's `MCPServer` with an async tool that does nothing (over the SDK's own stdio
transport), and the SDK's low-level `Server` over stdio read on the event loop (our
mcp_server/serving/stdio_shim.py) running the same SQL in process with sqlite3: what a complete
SQL answer costs on this SDK with nothing of ours around it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROTOCOL = "2025-11-25"

NOOP_SERVER = '''\
from mcp.server.mcpserver import MCPServer

server = MCPServer("noop")


@server.tool()
async def noop() -> str:
    """Do nothing."""
    return "ok"


server.run()
'''

# The same no-op tool served as sqale-mcp serves stdio (mcp_server/serving/stdio_shim.py): on the loop.
NOOP_SHIM_SERVER = NOOP_SERVER.replace(
    "server.run()\n",
    """import anyio
from mcp_server.serving.stdio_shim import serve_stdio

anyio.run(serve_stdio, server)
""",
)

# The no-op floor's tool returning our verified answer's response, built once at start as the hit
# builds it (the SQL run in process, AnswerOutput fitted to its text and budget): what the SDK's tool
# layer costs a call that answers with a result of our size and schema, nothing of ours per call.
ANSWER_SHIM_SERVER = NOOP_SHIM_SERVER.replace(
    'async def noop() -> str:\n    """Do nothing."""\n    return "ok"',
    'async def noop() -> CallToolResult:\n    """Return the answer built at start."""\n    return BUILT',
).replace(
    "from mcp.server.mcpserver import MCPServer\n",
    """import sqlite3
import sys

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult

from mcp_server.answer.output import AnswerOutput, VerifiedSource
from mcp_server.answer.sizing import fitted_response
from mcp_server.config.limits import AnswerLimits

path, question, sql, library = sys.argv[1:5]
limits = AnswerLimits(max_rows=50, cell_chars=1000, query_timeout=10.0, episode_timeout=300.0)
cursor = sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute(sql)
columns, rows = [d[0] for d in cursor.description], [list(row) for row in cursor.fetchall()]
read = {"Customer": ["Country", "CustomerId", "FirstName", "LastName"], "Invoice": ["CustomerId"]}
BUILT = fitted_response(
    AnswerOutput(
        database="chinook", question=question, sql=sql, columns=columns, rows=rows, row_count=len(rows),
        truncated=False, status="verified", stop_reason="verified_answer", rounds=0, tool_calls=0, tokens=0,
        seconds=0.001, model="verified library", tables=sorted(read), columns_read=read, agreement=None,
        samples=0, samples_finished=0, error=None, trace=[],
        verified=VerifiedSource(library=library, line=1, question=question, added_by=None, added_at=None),
    ),
    limits,
)
""",
)

# The least a verified hit can cost with what issue 44 says must stay and nothing else of ours: the
# SDK's MCPServer over our stdio on the loop, one tool taking the SQL, run as the server runs an
# owner's statement (agent's Database, owner_sql: read-only, the authorizer, the hide rules, its
# deadline, the byte budget), answered with a structured result (columns, rows, count) whose JSON is
# also its text: no answer text of ours, no library, no audit, no question task.
GUARDED_SHIM_SERVER = NOOP_SHIM_SERVER.replace(
    'async def noop() -> str:\n    """Do nothing."""\n    return "ok"',
    """async def run_sql(sql: str) -> CallToolResult:
    \"\"\"Run the owner's SQL under our guard.\"\"\"
    result = await database.aquery(sql, max_rows=50, timeout=10.0, byte_budget=BUDGET, owner_sql=True)
    rows = [list(row) for row in result.rows]
    data = {"columns": list(result.columns), "rows": rows, "count": result.total_rows}
    text = [TextContent(type="text", text=json.dumps(data))]
    return CallToolResult(content=text, structured_content=data)""",
).replace(
    "from mcp.server.mcpserver import MCPServer\n",
    """import json
import sys

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from agent import Database, HideRules
from mcp_server.config.limits import AnswerLimits

database = Database(sys.argv[1], hide=HideRules())
BUDGET = AnswerLimits.max_result_bytes  # the server's default --max-result-bytes
""",
)

# sqale-mcp whose tool, once it has answered, answers every later call with that same response: what
# a call costs with no answer work at all (no SQL, no building, no audit), everything else as served.
PREBUILT_SERVER = """\
import sys
from mcp_server.answer.question import Answering
from mcp_server.__main__ import main

built = []
answer = Answering.ask


async def prebuilt(*args, **kwargs):
    if not built:
        built.append(await answer(*args, **kwargs))
    return built[0]


Answering.ask = prebuilt
sys.exit(main())
"""

# How both low-level servers below serve: over pipes read on the event loop, as sqale-mcp does.
LOWLEVEL_SERVING = """

async def main():
    with claimed_pipes() as pipes:
        assert pipes is not None, "stdin and stdout must be pipes"
        async with stdio_server(stdin=pipes.stdin, stdout=pipes.stdout) as (read, write):
            await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""

# The low-level server over pipes read on the event loop, answering one tool with SQL run in process:
# with bare sqlite3 (its rows as JSON text, as DBHub answers), or with "guarded" as the server runs an
# owner's statement (agent's Database, owner_sql), its rows also as structured content.
LOWLEVEL_SQL_SERVER = """\
import json, sqlite3, sys
import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from agent import Database, HideRules
from mcp_server.config.limits import AnswerLimits
from mcp_server.serving.stdio_shim import claimed_pipes

if sys.argv[2:] == ["guarded"]:
    database = Database(sys.argv[1], hide=HideRules())
    budget = AnswerLimits.max_result_bytes  # the server's default --max-result-bytes
else:
    connection = sqlite3.connect(sys.argv[1], uri=True, check_same_thread=False)


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="run_sql", input_schema={
        "type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]})])


async def call_tool(ctx, params):
    if sys.argv[2:] == ["guarded"]:
        result = await database.aquery(
            params.arguments["sql"], max_rows=50, timeout=10.0, byte_budget=budget, owner_sql=True
        )
        rows = [dict(zip(result.columns, row)) for row in result.rows]
        data = {"rows": rows, "count": result.total_rows}
        content = [types.TextContent(type="text", text=json.dumps(data))]
        return types.CallToolResult(content=content, structured_content=data)
    cursor = connection.execute(params.arguments["sql"])
    columns = [d[0] for d in cursor.description]
    rows = [dict(zip(columns, row)) for row in cursor.fetchall()]
    text = json.dumps({"rows": rows, "count": len(rows)})
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("lowlevel-sql", on_list_tools=list_tools, on_call_tool=call_tool)
"""

# The least a verified hit can cost with our answer kept: the low-level server over pipes read on the
# event loop and our structured answer (AnswerOutput) built and fitted to its text and budget
# (sizing.fitted_response) as our server does, its SQL run either in process with bare sqlite3
# (read-only, under an allow-reads authorizer and a progress handler), or by agent's Database: as the
# server runs an owner's statement (owner_sql: in process on a guarded connection that keeps its
# statements, the authorizer and hide rules, the inline deadline, the byte budget), or through our
# guarded SQLite worker (its process, time and memory limits), as the last argument says. Left out:
# the SDK's tool layer, our middleware, quotas, the library lookup, the audit and the question's task.
LOWLEVEL_ANSWER_SERVER = """\
import sqlite3, sys, time
import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from agent import Database, HideRules
from mcp_server.answer.output import AnswerOutput, VerifiedSource
from mcp_server.answer.sizing import fitted_response
from mcp_server.config.limits import AnswerLimits
from mcp_server.serving.stdio_shim import claimed_pipes

path, question, library, where = sys.argv[1:5]
limits = AnswerLimits(max_rows=50, cell_chars=1000, query_timeout=10.0, episode_timeout=300.0)
READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
deadline = [0.0]
if where.startswith("in-process"):
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    connection.set_authorizer(lambda action, *_: sqlite3.SQLITE_OK if action in READS else sqlite3.SQLITE_DENY)
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline[0]), 1000)
else:  # "guarded in process": the owner's statement as the server runs it (sqlite._inline); "worker"
    database = Database(path, hide=HideRules())


async def run(sql):
    if where.startswith("in-process"):
        deadline[0] = time.monotonic() + limits.query_timeout
        cursor = connection.execute(sql)
        columns = [d[0] for d in cursor.description]
        rows = [list(row) for row in cursor.fetchmany(limits.max_rows + 1)]
        read = {"Customer": ["Country", "CustomerId", "FirstName", "LastName"], "Invoice": ["CustomerId"]}
        return columns, rows[: limits.max_rows], len(rows), len(rows) > limits.max_rows, read
    result = await database.aquery(
        sql,
        max_rows=limits.max_rows,
        timeout=limits.query_timeout,
        byte_budget=limits.max_result_bytes,
        owner_sql=where == "guarded in process",
    )
    read = {}
    for table, column in sorted(result.columns_read):
        read.setdefault(table, []).append(column)
    return list(result.columns), [list(r) for r in result.rows], result.total_rows, result.truncated, read


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="answer_sql_question", input_schema={
        "type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]})])


built = []


async def call_tool(ctx, params):
    started = time.perf_counter()
    sql = params.arguments["sql"]
    columns, rows, count, truncated, read = await run(sql)
    if where == "in-process, answer built once" and built:
        return built[0]
    answer = AnswerOutput(
        database="chinook", question=params.arguments["question"], sql=sql, columns=columns,
        rows=rows, row_count=count, truncated=truncated,
        status="verified", stop_reason="verified_answer", rounds=0, tool_calls=0, tokens=0,
        seconds=round(time.perf_counter() - started, 3), model="verified library",
        tables=sorted(read), columns_read=read,
        agreement=None, samples=0, samples_finished=0, error=None, trace=[],
        verified=VerifiedSource(library=library, line=1, question=question, added_by=None, added_at=None),
    )
    response = fitted_response(answer, limits)
    if not built:  # the first for "answer built once"; the others are not kept (memory stays flat)
        built.append(response)
    return response


server = Server("lowlevel-answer", on_list_tools=list_tools, on_call_tool=call_tool)
"""


@dataclass
class RawServer:
    """One stdio MCP server process spoken to with raw JSON-RPC lines."""

    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    stderr: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    next_id: int = 0
    wrapper_pid: int | None = field(default=None)

    def start(self) -> RawServer:
        """Spawn the server and complete the handshake."""
        err = self.stderr.open("ab") if self.stderr else subprocess.DEVNULL
        self.process = subprocess.Popen(
            list(self.argv),
            env=dict(self.env) if self.env else None,
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
        self.request(
            "initialize",
            {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
        )
        self.notify("notifications/initialized")
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def request(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The result of one request; raises on an error reply."""
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.process is not None and self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.argv[:3]} closed its stdout (see its stderr)")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{self.argv[:3]}: {message['error']}")
                return message["result"]  # type: ignore[no-any-return]

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments})

    def _send(self, message: Mapping[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process is None:
            return
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of `pid` and its descendants."""
    from server_cost_support import descendants

    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                status = (task / "status").read_text()
            except FileNotFoundError:
                continue
            for line in status.splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


# ---- callgrind ----------------------------------------------------------------------------

VALGRIND = shutil.which("valgrind")


def under_callgrind(argv: Sequence[str], out_dir: Path, name: str) -> list[str]:
    """`argv` run under callgrind, every process and thread counted apart, its dumps in `out_dir`."""
    assert VALGRIND is not None
    return [
        VALGRIND,
        "--tool=callgrind",
        "--trace-children=yes",
        "--separate-threads=yes",
        "--dump-instr=no",
        "--compress-strings=no",
        f"--callgrind-out-file={out_dir}/{name}.%p",
        *argv,
    ]


def callgrind_control(option: str, pids: Sequence[int]) -> None:
    """Zero (-z) or dump (-d) the counters of these callgrind processes (and no one else's)."""
    for pid in pids:
        subprocess.run(["callgrind_control", option, str(pid)], check=False, capture_output=True, timeout=300)


def dumped_totals(out_dir: Path, name: str, pid: int) -> dict[str, int]:
    """Instructions in the last explicit dump of process `pid` (files NAME.PID.DUMP-THREAD), per
    thread ('thread 1' is the main one)."""
    dumps: dict[int, list[Path]] = {}
    for path in out_dir.glob(f"{name}.{pid}.*-*"):
        number = path.name.split(".")[2].split("-")[0]
        if number.isdigit():
            dumps.setdefault(int(number), []).append(path)
    if not dumps:
        return {}
    totals: dict[str, int] = {}
    for dump in dumps[max(dumps)]:
        thread = int(dump.name.rsplit("-", 1)[1])
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                totals[f"thread {thread}"] = int(line.split()[1])
                break
    return totals


def callgrind_descendants(pid: int) -> list[int]:
    """`pid` and every process below it (valgrind runs each in place of its program)."""
    from server_cost_support import descendants

    return [pid, *descendants(pid)]


def wait_for(check: Callable[[], bool], seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def process_name(pid: int) -> str:
    """What a process runs, shortly: its command line's program and first argument or module."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    shown = [os.path.basename(w) for w in words if not w.startswith("--")][:3]
    return " ".join(shown)


# ---- the servers of the hit part ----------------------------------------------------------


@dataclass(frozen=True)
class HitSide:
    """One server of the comparison: how to start it, and its one call (checked)."""

    name: str
    argv: list[str]
    call: Callable[[RawServer], object]
    env: Mapping[str, str] | None = None
    cwd: Path | None = None


def hit_sides(
    *,
    python: str,
    root: Path,
    tmp: Path,
    chinook: Path,
    question: str,
    sql: str,
    ollama_url: str,
    dbhub: list[str] | None,
    before: Path | None = None,
) -> list[HitSide]:
    """Ours (the verified hit; with `before`, also that tree's), DBHub's execute_sql of the same SQL
    (when installed), and the floors."""
    library = tmp / "chinook.jsonl"
    library.write_text(json.dumps({"question": question, "sql": sql, "database": "chinook"}) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS", "PYTHONPATH")}
    env |= {
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "PYTHONPATH": str(root),
    }
    noop, noop_shim = tmp / "noop_server.py", tmp / "noop_shim_server.py"
    answer_shim = tmp / "answer_shim_server.py"
    answer_shim.write_text(ANSWER_SHIM_SERVER)
    guarded_shim = tmp / "guarded_shim_server.py"
    guarded_shim.write_text(GUARDED_SHIM_SERVER)
    lowlevel, prebuilt = tmp / "lowlevel_sql_server.py", tmp / "prebuilt_server.py"
    lowlevel_answer = tmp / "lowlevel_answer_server.py"
    lowlevel_answer.write_text(LOWLEVEL_ANSWER_SERVER + LOWLEVEL_SERVING)
    noop.write_text(NOOP_SERVER)
    noop_shim.write_text(NOOP_SHIM_SERVER)
    prebuilt.write_text(PREBUILT_SERVER)
    lowlevel.write_text(LOWLEVEL_SQL_SERVER + LOWLEVEL_SERVING)

    def ours_answer(result: dict[str, Any]) -> None:
        status = (result.get("structuredContent") or {}).get("status")
        assert status == "verified", result

    def ours(server: RawServer) -> None:
        ours_answer(server.call_tool("answer_sql_question", {"question": question}))

    def rows(server: RawServer, tool: str, arguments: dict[str, Any]) -> None:
        result = server.call_tool(tool, arguments)
        assert not result.get("isError") and '"count": 5' in result["content"][0]["text"], result

    ours_argv = [
        python,
        "-m",
        "mcp_server",
        "--db",
        f"chinook={chinook}",
        "--verified",
        f"chinook={library}",
        "--ollama-host",
        ollama_url,
    ]
    sides = [HitSide("ours (verified hit)", ours_argv, ours, env, root)]
    if before is not None:
        sides.append(HitSide("ours before", ours_argv, ours, {**env, "PYTHONPATH": str(before)}, before))
    if dbhub is not None:
        sides.append(
            HitSide("DBHub execute_sql", dbhub, lambda s: rows(s, "execute_sql", {"sql": sql}), None, tmp)
        )
    sides += [
        HitSide("floor: ours, the answer prebuilt", [python, str(prebuilt), *ours_argv[3:]], ours, env, root),
        HitSide(
            "floor: MCPServer no-op tool", [python, str(noop)], lambda s: s.call_tool("noop", {}), env, tmp
        ),
        HitSide(
            "floor: MCPServer no-op, stdio on the loop",
            [python, str(noop_shim)],
            lambda s: s.call_tool("noop", {}),
            env,
            tmp,
        ),
        HitSide(
            "floor: MCPServer on the loop, our answer built once",
            [python, str(answer_shim), str(chinook), question, sql, library.name],
            lambda s: ours_answer(s.call_tool("noop", {})),
            env,
            root,
        ),
        HitSide(
            "floor: MCPServer on the loop, our guarded statement, rows as JSON",
            [python, str(guarded_shim), str(chinook)],
            lambda s: rows(s, "run_sql", {"sql": sql}),
            env,
            root,
        ),
        HitSide(
            "floor: low-level, no threads, sqlite3",
            [python, str(lowlevel), chinook.as_uri() + "?mode=ro"],
            lambda s: rows(s, "run_sql", {"sql": sql}),
            env,
            tmp,
        ),
        HitSide(
            "floor: low-level, our guarded statement, rows as JSON",
            [python, str(lowlevel), str(chinook), "guarded"],
            lambda s: rows(s, "run_sql", {"sql": sql}),
            env,
            root,
        ),
    ]
    for where, name in (
        ("in-process, answer built once", "sqlite3 in process, our answer built once"),
        ("in-process", "sqlite3 in process, our answer"),
        ("guarded in process", "our guarded statement in process (as served), our answer"),
        ("worker", "our SQLite worker, our answer"),
    ):
        sides.append(
            HitSide(
                f"floor: low-level, {name}",
                [python, str(lowlevel_answer), str(chinook), question, library.name, where],
                lambda s: ours_answer(s.call_tool("answer_sql_question", {"question": question, "sql": sql})),
                env,
                root,
            )
        )
    return sides
