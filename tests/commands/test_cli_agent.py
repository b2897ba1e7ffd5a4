"""`sqale-agent ask` and `sqale-agent doctor` against the fake Ollama over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable

import pytest

from agent.commands.cli import main
from agent.sqlite import create_database
from tests.conftest import SHARED_DATA
from tests.support.console import console_script, default_sigint
from tests.support.databases import mount_read_only, wal_database
from tests.support.mcp import BOOK_GOLD
from tests.support.policies import DEFAULT_MODEL, OraclePolicy, ScriptedReply, ScriptPolicy, tool_call

CHINOOK = SHARED_DATA / "dbs" / "Chinook_Sqlite.sqlite"
needs_chinook = pytest.mark.needs_shared("dbs/Chinook_Sqlite.sqlite")

QUESTION = "How many albums does AC/DC have?"
GOLD = "SELECT count(*) FROM Album JOIN Artist ON Album.ArtistId = Artist.ArtistId WHERE Artist.Name = 'AC/DC'"


def gold_rows(sql: str) -> list[tuple]:
    conn = sqlite3.connect(CHINOOK.as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@needs_chinook
def test_ask_prints_sql_and_rows(fake_ollama, capsys) -> None:
    """ask prints the submitted SQL in a fence and the gold rows as a table."""
    server = fake_ollama(OraclePolicy({QUESTION: GOLD}))
    code = main(["ask", "--db", str(CHINOOK), "--ollama-host", server.url, QUESTION])
    out, err = capsys.readouterr()
    assert code == 0
    status, rest = out.split("\n", 1)
    assert status.startswith("status: submitted (submit_sql); 3 rounds, 3 tool calls, ")
    assert rest == "```sql\n" + GOLD + "\n```\n" + "count(*)\n--------\n2\n[1 row]\n"
    assert "round 1/6: list_tables" in err and "round 3/6: submit_sql" in err


@needs_chinook
def test_ask_json_holds_the_episode_result(fake_ollama, capsys) -> None:
    """--json prints the episode result: SQL, status, rows equal to the gold rows, the trace."""
    server = fake_ollama(OraclePolicy({QUESTION: GOLD}))
    assert main(["ask", "--json", "--db", str(CHINOOK), "--ollama-host", server.url, QUESTION]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["sql"], data["status"], data["stop_reason"]) == (GOLD, "submitted", "submit_sql")
    assert [tuple(r) for r in data["rows"]] == gold_rows(GOLD)
    assert [c["call"]["tool"] for r in data["rounds"] for c in r["calls"]] == [
        "list_tables",
        "run_query",
        "submit_sql",
    ]
    assert data["tables_seen"] == ["Album", "Artist"]


@needs_chinook
def test_ask_trace_shows_thinking_calls_and_results(fake_ollama, capsys) -> None:
    """--trace prints each round's thoughts, calls and result texts before the answer."""
    server = fake_ollama(OraclePolicy({QUESTION: GOLD}))
    assert main(["ask", "--trace", "--db", str(CHINOOK), "--ollama-host", server.url, QUESTION]) == 0
    out = capsys.readouterr().out
    assert "=== round 1" in out and "--- thinking\nList the tables first." in out
    assert '--- run_query {"sql": "' in out
    assert out.index("=== round 3") < out.index("```sql")


def test_ask_reports_unreachable_ollama_in_one_line(dead_url, tmp_path, capsys) -> None:
    """A dead runtime is one line on stderr naming the host and `ollama serve`; exit 1."""
    db = tmp_path / "t.sqlite"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    assert main(["ask", "--db", str(db), "--ollama-host", dead_url, "how many rows?"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("sqale-agent ask: Could not reach Ollama at " + dead_url)
    assert "ollama serve" in err


def test_ask_rejects_a_bad_database_path(fake_ollama, tmp_path, capsys) -> None:
    """A missing database file is one line naming it; exit 1."""
    server = fake_ollama(OraclePolicy({}))
    assert main(["ask", "--db", str(tmp_path / "none.db"), "--ollama-host", server.url, "q"]) == 1
    assert capsys.readouterr().err == f"sqale-agent ask: {tmp_path / 'none.db'}: no such file; check the path\n"


def test_ask_and_tool_take_the_demo_database(fake_ollama, tmp_path, monkeypatch, capsys) -> None:
    """`ask --demo` and `tool --demo` use the bookshop `sqale-mcp --demo` serves, built into the cache;
    `--demo` and `--db` together are refused."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    server = fake_ollama(OraclePolicy(BOOK_GOLD))
    assert main(["ask", "--demo", "--ollama-host", server.url, "--json", "How many books are there?"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [[16]]
    assert main(["tool", "--demo", "list_tables"]) == 0
    assert capsys.readouterr().out == "authors, books, customers, order_items, orders (5 tables)\n"
    with pytest.raises(SystemExit):
        main(["ask", "--demo", "--db", "x.db", "q"])
    assert capsys.readouterr().err.endswith("error: argument --db: not allowed with argument --demo\n")


def test_doctor_shows_model_parameters_and_databases(fake_ollama, tmp_path, capsys) -> None:
    """doctor passes when the model exists and each database opens."""
    db = tmp_path / "t.sqlite"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    server = fake_ollama(OraclePolicy({}))
    assert main(["doctor", "--ollama-host", server.url, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"[ok]   ollama at {server.url}: model {DEFAULT_MODEL} is available" in out
    assert f"[ok]   database {db.resolve()}: 1 table, 0 views" in out
    assert (
        "[info] runtime slots: 1 (Ollama's one slot per model (OLLAMA_NUM_PARALLEL is not set "
        "here)): questions beyond that wait their turn\n"
    ) in out
    assert out.endswith("all checks passed\n")


def test_doctor_never_says_all_passed_after_a_warning(fake_ollama, tmp_path, capsys) -> None:
    """A warning (a database without tables) fails nothing, so doctor exits 0, but its last line counts
    the warnings instead of saying every check passed."""
    empty = create_database(tmp_path / "empty.sqlite", "CREATE TABLE t (x); DROP TABLE t;")
    server = fake_ollama(OraclePolicy({}))
    assert main(["doctor", "--ollama-host", server.url, "--db", str(empty)]) == 0
    out = capsys.readouterr().out
    assert f"[warn] database {empty.resolve()}: " in out and "all checks passed" not in out
    assert out.endswith("no check failed; 1 warning above\n")


def test_doctor_says_how_to_create_a_missing_model(fake_ollama, tmp_path, capsys) -> None:
    """doctor names the `ollama create` command when the model is missing; exit 1."""
    server = fake_ollama(OraclePolicy({}), models=("someone-else",))
    assert main(["doctor", "--ollama-host", server.url, "--db", str(tmp_path / "x.db")]) == 1
    out = capsys.readouterr().out
    assert f"ollama create {DEFAULT_MODEL} -f Modelfile" in out
    assert f"[fail] database {tmp_path / 'x.db'}: " in out


@needs_chinook
def test_ask_sends_prompts_replaced_from_files(fake_ollama, tmp_path, capsys) -> None:
    """--system-prompt and --user-template texts are what the model receives."""
    (tmp_path / "system.txt").write_text("You write SQLite queries.")
    (tmp_path / "user.txt").write_text("Q: {question}")
    server = fake_ollama(OraclePolicy({QUESTION: GOLD}))
    assert (
        main(
            [
                "ask",
                "--db",
                str(CHINOOK),
                "--ollama-host",
                server.url,
                "--system-prompt",
                str(tmp_path / "system.txt"),
                "--user-template",
                str(tmp_path / "user.txt"),
                QUESTION,
            ]
        )
        == 0
    )
    first = server.bodies("/api/generate")[0]["prompt"]
    assert first == (
        "<|im_start|>system\nYou write SQLite queries.<|im_end|>\n"
        f"<|im_start|>user\nQ: {QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    )


def test_ask_reports_an_unreadable_prompt_file(tmp_path, capsys) -> None:
    """A missing prompt file is one line naming it; exit 1."""
    assert (
        main(["ask", "--db", str(tmp_path / "x.db"), "--system-prompt", str(tmp_path / "none.txt"), "q"]) == 1
    )
    err = capsys.readouterr().err
    assert err.startswith(f"sqale-agent ask: {tmp_path / 'none.txt'}: cannot be read")


@needs_chinook
def test_ask_passes_keep_alive_to_ollama(fake_ollama, capsys) -> None:
    """--keep-alive reaches Ollama's generate request (-1 as a number: keep loaded)."""
    server = fake_ollama(OraclePolicy({QUESTION: GOLD}))
    assert main(["ask", "--db", str(CHINOOK), "--ollama-host", server.url, "--keep-alive", "-1", QUESTION]) == 0
    assert {b["keep_alive"] for b in server.bodies("/api/generate")} == {-1}


def test_doctor_checks_every_openai_replica_serves_the_model(fake_openai, dead_url, capsys) -> None:
    """With --backend openai, doctor asks each replica's /models; a down replica fails the check."""
    good = fake_openai(OraclePolicy({}))
    assert main(["doctor", "--backend", "openai", "--base-url", good.url]) == 0
    assert (
        f"[ok]   openai at {good.url}: model {DEFAULT_MODEL} is available\n"
        f"       server: {good.url}\n" in capsys.readouterr().out
    )
    assert main(["doctor", "--backend", "openai", "--base-url", good.url, "--base-url", dead_url]) == 1
    out = capsys.readouterr().out
    assert f"1 of 2 replicas did not answer:\n  {dead_url}: ConnectError" in out
    other = fake_openai(OraclePolicy({}), models=("someone-else",))
    assert main(["doctor", "--backend", "openai", "--base-url", other.url]) == 1
    assert (
        f"{other.url} does not serve the model '{DEFAULT_MODEL}'; it serves someone-else. "
        "Pass that name with --model"
    ) in capsys.readouterr().out


def test_doctor_lists_what_each_hide_rule_hides(fake_ollama, tmp_path, capsys) -> None:
    """doctor --hide prints each rule's matches per database and warns about a rule matching nothing."""
    db = tmp_path / "t.sqlite"
    sqlite3.connect(db).executescript(  # the connection closed, not only the cursor (3.13 warns)
        "CREATE TABLE Customer (id, Email); CREATE VIEW Mails AS SELECT Email FROM Customer;"
    ).connection.close()
    server = fake_ollama(OraclePolicy({}))
    assert (
        main(
            [
                "doctor",
                "--ollama-host",
                server.url,
                "--db",
                str(db),
                "--hide",
                "customer.email",
                "--hide",
                "Custmer.*",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        f"[ok]   database {db.resolve()}: 1 table, 0 views\n"
        "       hide rule 'customer.email' hides Customer.Email\n"
        "[warn] hide rule 'Custmer.*' matches no table or column; check its spelling "
        "(rules are TABLE or TABLE.COLUMN globs, any case)\n"
        "       also hidden because they read hidden data: Mails\n"
    ) in out


def test_doctor_reports_the_engines_slots_and_what_runtime_slots_will_be(fake_openai, capsys) -> None:
    """llama-server's /props total_slots is reported and followed; more --runtime-slots is a warning."""
    one_slot = fake_openai(OraclePolicy({}), total_slots=1)
    assert main(["doctor", "--backend", "openai", "--base-url", one_slot.url]) == 0
    out = capsys.readouterr().out
    assert (
        "[info] runtime slots: 1 (the engine's own: /props total_slots): "
        "questions beyond that wait their turn\n"
        "       the engine is llama.cpp's llama-server\n"
        "       the engine reports 1 slot (/props total_slots)\n"
    ) in out
    assert "[warn]" not in out
    assert main(["doctor", "--backend", "openai", "--base-url", one_slot.url, "--runtime-slots", "4"]) == 0
    out = capsys.readouterr().out
    assert (
        "[info] runtime slots: 4 (--runtime-slots): questions beyond that wait their turn\n"
        "       the engine is llama.cpp's llama-server\n"
        "       the engine reports 1 slot (/props total_slots)\n"
        "       the engine says its version is b9999-fake\n"
        "       the engine holds 16,384 tokens per sequence (/props default_generation_settings.n_ctx "
        "(per slot))\n"
        "[warn] 4 runtime slots but the engine serves 1 at once: give sqale-mcp --runtime-slots 1; "
        "more questions at once than slots evict each other's cached prompt, or fail where the "
        "engine cuts a request off\n"
    ) in out
    assert main(["doctor", "--backend", "openai", "--base-url", one_slot.url, "--runtime-slots", "1"]) == 0
    out = capsys.readouterr().out
    assert "[info] runtime slots: 1 (--runtime-slots): " in out and "note:" not in out
    silent = fake_openai(OraclePolicy({}))
    assert main(["doctor", "--backend", "openai", "--base-url", silent.url]) == 0
    out = capsys.readouterr().out
    assert "[info] runtime slots: 4 (4 per replica for batching engines (vLLM, SGLang), 1 replica): " in out
    assert "the engine does not say how many sequences it runs at once" in out


def test_doctor_states_the_wal_files_sqlite_creates(fake_ollama, tmp_path, capsys) -> None:
    """doctor on a WAL database without -wal/-shm says both were created and why."""
    db = tmp_path / "w.sqlite"
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("CREATE TABLE t (x)")
    writer.close()
    server = fake_ollama(OraclePolicy({}))
    assert main(["doctor", "--ollama-host", server.url, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert (
        f"[ok]   database {db.resolve()}: 1 table, 0 views\n       note: the database is in "
        "WAL mode and opening it created w.sqlite-wal and w.sqlite-shm beside it"
    ) in out


@pytest.mark.parametrize(
    ("flags", "result_text"),
    [
        ([], "result (1/1):\nn\n3"),
        (["--environment", "rich"], "[1 row]"),
    ],
)
def test_ask_reads_the_environment_it_is_given(fake_ollama, tmp_path, capsys, flags, result_text) -> None:
    """ask --environment picks the texts the model reads; the printed answer is the same."""
    db = create_database(
        tmp_path / "t.sqlite", "CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1), (2), (3);"
    )
    question, gold = "How many rows?", "SELECT count(*) AS n FROM t"
    server = fake_ollama(OraclePolicy({question: gold}))
    assert main(["ask", "--db", str(db), "--ollama-host", server.url, *flags, question]) == 0
    prompts = [body["prompt"] for body in server.bodies("/api/generate")]
    assert result_text in prompts[-1]
    assert capsys.readouterr().out.split("\n", 1)[1] == "```sql\n" + gold + "\n```\nn\n-\n3\n[1 row]\n"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        time.sleep(0.02)


@pytest.mark.slow
def test_ctrl_c_during_ask_is_one_line_and_exit_130(fake_ollama, tmp_path) -> None:
    """SIGINT while `sqale-agent ask` waits for the model: exit 130, one stderr line, no traceback."""
    db = create_database(tmp_path / "t.sqlite", "CREATE TABLE t (x)")
    server = fake_ollama(ScriptPolicy([ScriptedReply(tool_call("list_tables"), delay=60)]))
    ask = subprocess.Popen(
        [console_script("sqale-agent"), "ask", "--db", str(db), "--ollama-host", server.url, "how many rows?"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    wait_for(lambda: bool(server.bodies("/api/generate")), "the first model request")
    ask.send_signal(signal.SIGINT)
    out, err = ask.communicate(timeout=30)
    assert (ask.returncode, out, err) == (130, "", "\nsqale-agent ask: interrupted\n")


@pytest.mark.slow
def test_ctrl_c_during_doctor_is_one_line_and_exit_130(black_hole, tmp_path) -> None:
    """SIGINT while `sqale-agent doctor` waits for the runtime: exit 130, one stderr line."""
    doctor = subprocess.Popen(
        [console_script("sqale-agent"), "doctor", "--ollama-host", black_hole.url],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    assert black_hole.connected.wait(30), "doctor never connected to the runtime"
    doctor.send_signal(signal.SIGINT)
    out, err = doctor.communicate(timeout=30)
    assert (doctor.returncode, out, err) == (130, "", "\nsqale-agent doctor: interrupted\n")


def test_doctor_reports_a_runtime_that_never_answers(black_hole, capsys) -> None:
    """A runtime that accepts connections but never answers is a [fail] after a few seconds, not a hang."""
    started = time.monotonic()
    assert main(["doctor", "--ollama-host", black_hole.url]) == 1
    assert time.monotonic() - started < 15
    assert capsys.readouterr().out.splitlines()[0] == (
        f"[fail] ollama at {black_hole.url}: accepted the connection but did not answer within 5 s; check "
        "that this address is the model runtime and that it is not stuck"
    )


def test_doctor_warns_about_a_wal_database_opened_as_a_snapshot(fake_ollama, tmp_path, capsys) -> None:
    """A WAL database without its -shm in a read-only folder is a [warn] with the reason, not [ok]."""
    path = wal_database(tmp_path, keep_shm=False)
    if not mount_read_only(path.parent):
        pytest.skip("needs root and bind mounts to make a read-only folder")
    try:
        server = fake_ollama(OraclePolicy({}))
        assert main(["doctor", "--ollama-host", server.url, "--db", str(path)]) == 0
    finally:
        subprocess.run(["umount", str(path.parent)], capture_output=True)
    out = capsys.readouterr().out
    assert f"[warn] database {path}: 1 table, 0 views\n       note: opened as an immutable snapshot" in out


@pytest.mark.slow
def test_doctor_warns_when_another_distribution_provides_our_packages(fake_ollama, tmp_path) -> None:
    """An installed distribution that also ships `agent` is named, with what to do."""
    site = tmp_path / "site"
    info = site / "other_agent-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: other-agent\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("agent\n")
    server = fake_ollama(OraclePolicy({}))
    done = subprocess.run(
        [console_script("sqale-agent"), "doctor", "--ollama-host", server.url],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert done.stdout.splitlines()[0] == (
        "[warn] the installed distribution other-agent also provides the package `agent`: imports may "
        "pick the wrong one; uninstall it or install sqale-mcp in its own virtual environment"
    )


@pytest.mark.slow
def test_both_commands_print_their_version() -> None:
    """`sqale-agent --version` and `sqale-mcp --version` print the installed version."""
    from agent.version import package_version

    for name in ("sqale-agent", "sqale-mcp"):
        done = subprocess.run([console_script(name), "--version"], capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"{name} {package_version()}\n", "")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["   "],
            "the question is empty; ask one in plain language, e.g. sqale-agent ask --db shop.db "
            '"How many orders are there?"',
        ),
        (["--max-rows", "-5", "q?"], "--max-rows -5: give 1 or more rows to keep"),
        (
            ["--keep-alive", "forever", "q?"],
            "--keep-alive: not a duration; give seconds (300, -1 for ever) or a "
            "number with a unit: 30m, 1h, 90s (got 'forever')",
        ),
        (
            ["--ollama-host", "not a url", "q?"],
            "Ollama host 'not a url' is not a valid address; give HOST:PORT "
            "or a URL like http://127.0.0.1:11434.",
        ),
    ],
)
def test_ask_refuses_bad_values_before_contacting_the_runtime(
    argv, line, fake_ollama, tmp_path, capsys
) -> None:
    """An empty question or a bad option value: one line, exit 1, and no request reaches the runtime."""
    db = create_database(tmp_path / "t.sqlite", "CREATE TABLE t (x)")
    server = fake_ollama(OraclePolicy({}))
    host = [] if "--ollama-host" in argv else ["--ollama-host", server.url]
    assert main(["ask", "--db", str(db), *host, *argv]) == 1
    assert capsys.readouterr() == ("", f"sqale-agent ask: {line}\n")
    assert server.bodies("/api/generate") == [] and server.bodies("/api/show") == []


def test_ask_explains_that_it_takes_a_plain_path(tmp_path, capsys) -> None:
    """`ask --db chinook=PATH` (the server's form) says ask takes a plain path."""
    assert main(["ask", "--db", f"chinook={tmp_path / 'c.db'}", "q?"]) == 1
    assert capsys.readouterr().err == (
        f"sqale-agent ask: --db 'chinook={tmp_path / 'c.db'}': `sqale-agent ask` takes a plain path "
        f"(--db {tmp_path / 'c.db'}); ALIAS=PATH is how sqale-mcp names its databases\n"
    )


def test_ask_json_prints_an_error_object_on_failure(dead_url, tmp_path, capsys) -> None:
    """With --json a failure is still a JSON object on stdout ({"error", "kind"}), and exit 1."""
    db = create_database(tmp_path / "t.sqlite", "CREATE TABLE t (x)")
    assert main(["ask", "--json", "--db", str(db), "--ollama-host", dead_url, "how many rows?"]) == 1
    out, err = capsys.readouterr()
    error = json.loads(out)
    assert (sorted(error), error["kind"]) == (["error", "kind"], "backend_unreachable")
    assert error["error"].startswith(f"Could not reach Ollama at {dead_url}")
    assert err.endswith(f"sqale-agent ask: {error['error']}\n")
