"""What bench_server_cost.py shares: the workload, the process tree's CPU from /proc, the servers.

The workload: 20 demo questions answered in four rounds by a scripted fake model, a light
verified SQL on Chinook, a nine-table join. The CPU of a process and its descendants is read from
/proc (utime and stime in clock ticks; to the nanosecond from each task's schedstat). The servers:
`python -m mcp_server` over stdio, and DBHub 1.4 (@bytebase/dbhub) when it is installed.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tests.support.policies import (  # noqa: E402
    OraclePolicy,
    ScriptedReply,
    assistant_reply,
    is_final_turn,
    round_number,
    tool_call,
)

TOOL = "answer_sql_question"
CHINOOK = ROOT.parent / "shared" / "data" / "dbs" / "Chinook_Sqlite.sqlite"
TICK = os.sysconf("SC_CLK_TCK")
DEMO_GOLD = {
    "How many books are there?": "SELECT count(*) FROM books",
    "How many authors are there?": "SELECT count(*) FROM authors",
    "How many customers are there?": "SELECT count(*) FROM customers",
    "How many orders are there?": "SELECT count(*) FROM orders",
    "Which authors come from Nigeria?": "SELECT name FROM authors WHERE country = 'Nigeria' ORDER BY name",
    "Which authors were born before 1930?": "SELECT name FROM authors WHERE born < 1930 ORDER BY name",
    "List the titles of books published before 1960.": (
        "SELECT title FROM books WHERE published < 1960 ORDER BY title"
    ),
    "What is the most expensive book?": "SELECT title FROM books ORDER BY price DESC LIMIT 1",
    "What is the cheapest book?": "SELECT title FROM books ORDER BY price LIMIT 1",
    "How many books are in each genre?": "SELECT genre, count(*) FROM books GROUP BY genre ORDER BY genre",
    "What is the average book price?": "SELECT avg(price) FROM books",
    "Which orders are pending?": "SELECT order_id FROM orders WHERE status = 'pending' ORDER BY order_id",
    "Which orders were cancelled?": "SELECT order_id FROM orders WHERE status = 'cancelled' ORDER BY order_id",
    "Which cities do customers live in?": "SELECT DISTINCT city FROM customers ORDER BY city",
    "Which customers joined in 2021?": "SELECT name FROM customers WHERE joined LIKE '2021%' ORDER BY name",
    "How many books has each author written?": (
        "SELECT a.name, count(*) FROM authors a JOIN books b USING (author_id) GROUP BY a.name ORDER BY a.name"
    ),
    "What is the total quantity ordered per customer city?": (
        "SELECT c.city, sum(i.quantity) FROM customers c JOIN orders o USING (customer_id) "
        "JOIN order_items i USING (order_id) GROUP BY c.city ORDER BY c.city"
    ),
    "What did each order cost?": "SELECT order_id, sum(quantity * unit_price) FROM order_items "
    "GROUP BY order_id ORDER BY order_id",
    "Which books were never ordered?": "SELECT title FROM books WHERE book_id NOT IN "
    "(SELECT book_id FROM order_items) ORDER BY title",
    "Who wrote Beloved?": "SELECT a.name FROM authors a JOIN books b USING (author_id) "
    "WHERE b.title = 'Beloved'",
}
# The verified hit's question and SQL, and the many-table join of part 4 (nine tables, ON and USING).
# A light one (five rows, tens of microseconds in bare sqlite3), as most verified questions are:
# what is measured is what each server adds around the SQL.
HIT_QUESTION = "How many invoices does each customer in Brazil have?"
HIT_SQL = (
    "SELECT c.FirstName, c.LastName, count(*) AS invoices FROM Customer c JOIN Invoice i "
    "ON i.CustomerId = c.CustomerId WHERE c.Country = 'Brazil' GROUP BY c.CustomerId "
    "ORDER BY invoices DESC, c.LastName"
)
JOIN_SQL = (
    "SELECT ar.Name, g.Name, m.Name, e.LastName, sum(il.Quantity) FROM InvoiceLine il "
    "JOIN Invoice i USING (InvoiceId) JOIN Customer c ON c.CustomerId = i.CustomerId "
    "JOIN Employee e ON e.EmployeeId = c.SupportRepId JOIN Track t ON t.TrackId = il.TrackId "
    "JOIN Album al USING (AlbumId) JOIN Artist ar ON ar.ArtistId = al.ArtistId "
    "JOIN Genre g ON g.GenreId = t.GenreId JOIN MediaType m ON m.MediaTypeId = t.MediaTypeId "
    "WHERE c.Country = 'Brazil' GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC LIMIT 10"
)


class FourRounds:
    """The gold SQL in four rounds: list_tables, describe_table, run_query, submit_sql."""

    def __init__(self, gold: dict[str, str]) -> None:
        self.oracle = OraclePolicy(gold)

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The call for this round of this question."""
        sql = self.oracle.gold[self.oracle.question_in(prompt)]
        turn = round_number(prompt)
        if turn >= 4 or is_final_turn(prompt):
            call = tool_call("submit_sql", sql=sql)
        elif turn == 1:
            call = tool_call("list_tables")
        elif turn == 2:
            table = re.search(r"FROM (\w+)", sql)
            call = tool_call("describe_table", table_name=table.group(1) if table else "books")
        else:
            call = tool_call("run_query", sql=sql)
        return ScriptedReply(assistant_reply("Next step.", call))


# ---- the process tree's CPU, from /proc ---------------------------------------------------


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # from field 3 (state) on


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children started from any of its threads)."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found += [int(child), *descendants(int(child))]
    except FileNotFoundError:  # exited meanwhile
        pass
    return found


def tree_cpu(pid: int, *, reaped: bool = True) -> float:
    """CPU seconds (user + system) of `pid` and its live descendants, and with `reaped` of its
    children that exited and were waited for."""
    total = 0
    for i, p in enumerate([pid, *descendants(pid)]):
        try:
            fields = _stat(p)
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
        if i == 0 and reaped:
            total += int(fields[13]) + int(fields[14])
    return total / TICK


def split_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds, to the nanosecond, of `pid`'s threads and of its live descendants' (the workers)."""

    def threads(p: int) -> float:
        try:
            return (
                sum(
                    int((task / "schedstat").read_text().split()[0])
                    for task in Path(f"/proc/{p}/task").iterdir()
                )
                / 1e9
            )
        except FileNotFoundError:
            return 0.0

    return threads(pid), sum(threads(child) for child in descendants(pid))


def own_cpu() -> float:
    """CPU seconds of this process (every thread) and its live descendants, to the nanosecond."""
    total = time.process_time()
    for pid in descendants(os.getpid()):
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                total += int((task / "schedstat").read_text().split()[0]) / 1e9
        except FileNotFoundError:
            continue
    return total


def child_pid(marker: bytes) -> int:
    """The pid of this process's child whose command line holds `marker`."""
    for pid in descendants(os.getpid()):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except FileNotFoundError:
            continue
    raise RuntimeError(f"no child process runs {marker.decode()!r}")


# ---- servers ------------------------------------------------------------------------------


@asynccontextmanager
async def sqale_mcp(args: list[str], tmp: Path) -> AsyncIterator[Client]:
    """A connected client of `python -m mcp_server ARGS` (its default INFO logging, stderr in tmp)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "SQALE_MCP_ARGS")}
    env["XDG_CACHE_HOME"], env["XDG_CONFIG_HOME"] = str(tmp / "cache"), str(tmp / "config")
    params = StdioServerParameters(command=sys.executable, cwd=ROOT, env=env, args=["-m", "mcp_server", *args])
    with (tmp / "server-stderr.txt").open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


async def ask(
    client: Client, question: str, status: str = "submitted", evidence: str | None = None
) -> dict[str, Any]:
    """One call of the tool; its structured answer, checked."""
    arguments = {"question": question} | ({"evidence": evidence} if evidence is not None else {})
    result = await client.call_tool(TOOL, arguments)
    answer = result.structured_content or {}
    assert answer.get("status") == status, (answer.get("status"), result.content)
    return answer


async def ask_all(client: Client, questions: list[str], at_once: bool) -> tuple[float, list[dict[str, Any]]]:
    """Wall seconds to answer every question, all at once or one after another; the answers."""
    answers: list[dict[str, Any]] = []

    async def one(n: int, question: str) -> None:
        # Each call its own evidence: identical calls at once would share one question (and its episode).
        answers.append(await ask(client, question, evidence=f"call {n}"))

    started = time.perf_counter()
    if at_once:
        async with anyio.create_task_group() as group:
            for n, question in enumerate(questions):
                group.start_soon(one, n, question)
    else:
        for n, question in enumerate(questions):
            await one(n, question)
    return time.perf_counter() - started, answers


def ms(values: list[float]) -> str:
    """Median and p95 in milliseconds."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {1000 * statistics.median(ordered):.2f} ms, p95 {1000 * p95:.2f} ms"


def verdict(value: float, goal: float) -> str:
    return f"goal <= {goal:g}: {'met' if value <= goal else 'NOT met'}"


def dbhub_argv(prefix: Path, node: str, tmp: Path) -> list[str]:
    config = tmp / "dbhub.toml"
    config.write_text(
        f'[[sources]]\nid = "chinook"\ndsn = "sqlite://{CHINOOK}"\n\n[[tools]]\n'
        'name = "execute_sql"\nsource = "chinook"\nreadonly = true\nmax_rows = 50\n'
    )
    script = prefix / "node_modules" / "@bytebase" / "dbhub" / "dist" / "index.js"
    return [node, str(script), f"--config={config}", "--transport=stdio"]


def dbhub_missing(prefix: Path, node: str | None) -> str | None:
    """Why DBHub cannot run here, or None."""
    package = prefix / "node_modules" / "@bytebase" / "dbhub"
    if not (package / "dist" / "index.js").is_file():
        return f"DBHub is not installed in {prefix} (npm install --prefix {prefix} @bytebase/dbhub)"
    if node is None:
        return "no node on PATH (DBHub needs Node 22.5 or later: npm's node@22)"
    wanted = json.loads((package / "package.json").read_text()).get("engines", {}).get("node", "")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    if _version(version) < _version(wanted):
        return f"{node} is {version}; DBHub asks for node {wanted} (its SQLite is node:sqlite)"
    return None


def _version(text: str) -> tuple[int, ...]:
    """(22, 5, 0) from 'v22.5.0' or '>=22.5.0'."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


def timed_sync(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


# ---- the OpenAI-compatible backend's cost per streamed token -------------------------------

# A fake engine in its own process (so that this process's CPU is the client's alone) whose
# model thinks CHARS characters, streamed four a token; it prints its URL, serves until stdin closes.
_STREAMING_FAKE = """
import sys
from tests.support.fake_runtime import FakeServer
from tests.support.policies import ScriptedReply, assistant_reply, tool_call
class Thinking:
    def reply(self, prompt, model):
        return ScriptedReply(assistant_reply("x" * int(sys.argv[1]), tool_call("list_tables")))
fake = FakeServer(Thinking()).start()
print(fake.url, flush=True)
sys.stdin.read()
fake.stop()
"""
STREAM_PROMPT = "<|im_start|>system\n" + "You are a SQL agent. " * 300 + "<|im_end|>\n<|im_start|>assistant\n"


async def streamed_completions(url: str, count: int) -> tuple[float, int]:
    """(CPU seconds of this process per completion, completion tokens) of `count` completions
    through the OpenAI-compatible backend, after one untimed."""
    from agent.backends.registry import make_backend
    from mcp_server.config.command_line import parse_settings

    backend = make_backend(parse_settings(["--demo", "--backend", "openai", "--base-url", url + "/v1"], {}))
    try:
        tokens = (await backend.complete(STREAM_PROMPT, max_tokens=4000)).completion_tokens
        start = time.process_time()
        for _ in range(count):
            await backend.complete(STREAM_PROMPT, max_tokens=4000)
        return (time.process_time() - start) / count, tokens
    finally:
        await backend.aclose()


def stream_token_cpu(runs: int, count: int) -> tuple[list[float], tuple[int, int]]:
    """CPU microseconds of this process per streamed token, one figure per run: completions of
    about 17 and 413 tokens, alternated, by difference (what a completion costs apart from its
    tokens cancels out); and the two token counts."""
    fakes = [
        subprocess.Popen(
            [sys.executable, "-c", _STREAMING_FAKE, str(chars)],
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for chars in (16, 1600)
    ]
    try:
        urls = [fake.stdout.readline().strip() for fake in fakes if fake.stdout is not None]
        per_token, tokens = [], (0, 0)
        for _ in range(runs):
            (short, few), (long, many) = (anyio.run(streamed_completions, url, count) for url in urls)
            per_token.append(1e6 * (long - short) / (many - few))
            tokens = (few, many)
        return per_token, tokens
    finally:
        for fake in fakes:
            if fake.stdin is not None:
                fake.stdin.close()
            fake.wait()


# ---- the ollama client's share of a round ---------------------------------------------------

# A round's prompt as the loop sends it by the third round (the system prompt, the question and
# two tool results): what the client encodes and sends each time.
ROUND_PROMPT = (
    "<|im_start|>system\n"
    + "You answer questions with SQL. " * 120
    + "<|im_end|>\n"
    + "<|im_start|>user\nHow many books are there?\n"
    + "Tables: books, authors, orders. " * 25
    + "<|im_end|>\n"
    + "<|im_start|>assistant\n"
)
_CLIENT_CPU = """
import sys, time, anyio
from agent.backends.ollama import OllamaBackend
prompt, count = sys.stdin.read(), int(sys.argv[2])
async def main():
    backend = OllamaBackend("qwen3.5-2b-grpo-synsql", host=sys.argv[1])
    await backend.complete(prompt, max_tokens=512)
    used = time.thread_time()
    for _ in range(count):
        await backend.complete(prompt, max_tokens=512)
    print((time.thread_time() - used) / count)
    await backend.aclose()
anyio.run(main)
"""


def ollama_client_cpu(url: str, count: int) -> float:
    """CPU ms of one completion through our Ollama backend (the `ollama` client over httpx), in a
    process of its own talking to the fake runtime at `url`: the event loop's thread, per completion."""
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT_CPU, url, str(count)],
        input=ROUND_PROMPT,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return 1000 * float(done.stdout.strip())
