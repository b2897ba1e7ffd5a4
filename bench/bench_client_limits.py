"""What clients see of the tool: the description's size for 1, 12 and 50 databases, and the
size of the largest answers with the default limits.

    python bench/bench_client_limits.py

Issue 26's figures: Claude Code cuts tool descriptions at 2 KB (goal: at most 2,048 bytes with
notes and hide rules on every database) and warns past 10k tokens of tool output (goal: text plus
structured content under 40,000 characters with the default limits). The answers come from the
in-process server answering with a scripted model: a 300-column result, an 80-row result of
5,000-character cells, and a 2,000-column SELECT the SQLite worker has to cut.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: agent, mcp_server and tests.support

from mcp import Client  # noqa: E402

from mcp_server.answer.sizing import answer_chars  # noqa: E402
from tests.support.mcp import TOOL  # noqa: E402
from tests.support.mcp_in_process import build  # noqa: E402
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, tool_call  # noqa: E402
from tests.support.sqlite_files import build_db  # noqa: E402

TEN = ", ".join(f"printf('%.300c', '{c}')" for c in "abcdefghij")
WIDE = f"WITH t AS (SELECT {TEN}) SELECT * FROM " + ", ".join(f"t t{i}" for i in range(30))
LONG = (
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 80) "
    "SELECT n, printf('%.5000c', 'l') FROM r"
)
BALLOON = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 100), "
    "t(a) AS (SELECT printf('%.4500c','x')) SELECT " + ",".join(["a"] * 2000) + " FROM t, r"
)
ANSWERS = {
    "300 columns x 300 characters": WIDE,
    "80 rows x 5,000 characters": LONG,
    "2,000 columns x 4,500 characters": BALLOON,
}


def database_flags(folder: Path, count: int) -> list[str]:
    """`count` databases of 9 long-named tables, each with notes and a hide rule."""
    argv = []
    for i in range(count):
        tables = "".join(
            f"CREATE TABLE a_table_name_as_long_as_a_warehouse_schema_makes_them_x{t} "
            "(id INTEGER, secret TEXT);"
            for t in range(9)
        )
        path = build_db(folder / f"w{i:02d}.sqlite", tables)
        notes = folder / f"n{i:02d}.txt"
        notes.write_text("status 'A' means active\nprices are in cents\n")
        alias = f"warehouse_region_{i:02d}"
        argv += ["--db", f"{alias}={path}", "--notes", f"{alias}={notes}", "--hide", f"{alias}=*.secret"]
    return argv


async def main() -> None:
    """Print the description sizes, then the answer sizes."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        print("tool description (limit 2,048 bytes):")
        for count in (1, 12, 50):
            sub = folder / f"dbs{count}"
            sub.mkdir()
            server = build(
                sub,
                ["--max-samples", "8", *database_flags(sub, count)],
                PolicyBackend(ScriptPolicy(["unused"])),
            )
            async with Client(server) as client:
                (tool,) = (await client.list_tools()).tools
            text = tool.description or ""
            listed = sum(1 for i in range(count) if f"- warehouse_region_{i:02d}: " in text)
            print(
                f"  {count:>2} databases: {len(text):>5,} characters, {len(text.encode()):>5,} bytes, "
                f"{listed} listed by name"
            )
        print("answers with the default limits (goal: under 40,000 characters):")
        for label, sql in ANSWERS.items():
            sub = folder / label.split()[0].replace(",", "")
            sub.mkdir()
            policy = ScriptPolicy(
                [
                    assistant_reply("look", tool_call("run_query", sql=sql)),
                    assistant_reply("answer", tool_call("submit_sql", sql=sql)),
                ]
            )
            server = build(sub, ["--demo", "--query-timeout", "60"], PolicyBackend(policy))
            async with Client(server) as client:
                result = await client.call_tool(TOOL, {"question": "Everything?"})
            text, content = result.content[0].text, result.structured_content
            print(
                f"  {label}: {answer_chars(text, content):,} characters (text {len(text):,}), "
                f"{len(content['rows'])} rows x {len(content['columns'])} columns kept"
            )


if __name__ == "__main__":
    anyio.run(main)
