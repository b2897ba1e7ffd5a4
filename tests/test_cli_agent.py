"""`sqale-agent ask` and `sqale-agent doctor` against the fake Ollama over real HTTP."""

from __future__ import annotations

import json
import sqlite3

import pytest

from agent.cli import main
from agent.sqlite import create_database
from tests.conftest import SHARED_DATA
from tests.support.policies import DEFAULT_MODEL, OraclePolicy

CHINOOK = SHARED_DATA / "dbs" / "Chinook_Sqlite.sqlite"
needs_chinook = pytest.mark.needs_shared("dbs/Chinook_Sqlite.sqlite")

QUESTION = "How many albums does AC/DC have?"
GOLD = ("SELECT count(*) FROM Album JOIN Artist ON Album.ArtistId = Artist.ArtistId "
        "WHERE Artist.Name = 'AC/DC'")


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
        "list_tables", "run_query", "submit_sql"]
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


def test_doctor_shows_model_parameters_and_databases(fake_ollama, tmp_path, capsys) -> None:
    """doctor passes when the model exists and each database opens."""
    db = tmp_path / "t.sqlite"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    server = fake_ollama(OraclePolicy({}))
    assert main(["doctor", "--ollama-host", server.url, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"[ok]   ollama at {server.url}: model {DEFAULT_MODEL} is available" in out
    assert f"[ok]   database {db.resolve()}: 1 tables, 0 views" in out
    assert ("[info] runtime slots: 1 (Ollama's one slot per model (OLLAMA_NUM_PARALLEL is not set "
            "here)): questions beyond that wait their turn\n") in out
    assert out.endswith("all checks passed\n")


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
    assert main(["ask", "--db", str(CHINOOK), "--ollama-host", server.url,
                 "--system-prompt", str(tmp_path / "system.txt"),
                 "--user-template", str(tmp_path / "user.txt"), QUESTION]) == 0
    first = server.bodies("/api/generate")[0]["prompt"]
    assert first == ("<|im_start|>system\nYou write SQLite queries.<|im_end|>\n"
                     f"<|im_start|>user\nQ: {QUESTION}<|im_end|>\n<|im_start|>assistant\n")


def test_ask_reports_an_unreadable_prompt_file(tmp_path, capsys) -> None:
    """A missing prompt file is one line naming it; exit 1."""
    assert main(["ask", "--db", str(tmp_path / "x.db"), "--system-prompt", str(tmp_path / "none.txt"),
                 "q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sqale-agent ask: {tmp_path / 'none.txt'}: cannot be read")


@needs_chinook
def test_ask_passes_keep_alive_to_ollama(fake_ollama, capsys) -> None:
    """--keep-alive reaches Ollama's generate request (-1 as a number: keep loaded)."""
    server = fake_ollama(OraclePolicy({QUESTION: GOLD}))
    assert main(["ask", "--db", str(CHINOOK), "--ollama-host", server.url, "--keep-alive", "-1",
                 QUESTION]) == 0
    assert {b["keep_alive"] for b in server.bodies("/api/generate")} == {-1}


def test_doctor_checks_every_openai_replica_serves_the_model(fake_openai, dead_url, capsys) -> None:
    """With --backend openai, doctor asks each replica's /models; a down replica fails the check."""
    good = fake_openai(OraclePolicy({}))
    assert main(["doctor", "--backend", "openai", "--base-url", good.url]) == 0
    assert f"[ok]   openai at {good.url}: model {DEFAULT_MODEL} is available\n" \
           f"       replicas: {good.url}\n" in capsys.readouterr().out
    assert main(["doctor", "--backend", "openai", "--base-url", good.url, "--base-url", dead_url]) == 1
    out = capsys.readouterr().out
    assert f"1 of 2 replicas did not answer:\n  {dead_url}: ConnectError" in out
    other = fake_openai(OraclePolicy({}), models=("someone-else",))
    assert main(["doctor", "--backend", "openai", "--base-url", other.url]) == 1
    assert (f"{other.url} does not serve the model '{DEFAULT_MODEL}'; it serves someone-else. "
            "Pass that name with --model") in capsys.readouterr().out


def test_doctor_lists_what_each_hide_rule_hides(fake_ollama, tmp_path, capsys) -> None:
    """doctor --hide prints each rule's matches per database and warns about a rule matching nothing."""
    db = tmp_path / "t.sqlite"
    sqlite3.connect(db).executescript(
        "CREATE TABLE Customer (id, Email); CREATE VIEW Mails AS SELECT Email FROM Customer;").close()
    server = fake_ollama(OraclePolicy({}))
    assert main(["doctor", "--ollama-host", server.url, "--db", str(db),
                 "--hide", "customer.email", "--hide", "Custmer.*"]) == 0
    out = capsys.readouterr().out
    assert (f"[ok]   database {db.resolve()}: 1 tables, 0 views\n"
            "       hides (customer.email): Customer.Email\n"
            "[warn] hide rule 'Custmer.*' matches no table or column here; check its spelling "
            "(TABLE or TABLE.COLUMN globs, any case)\n"
            "       also hidden, as they read hidden data: Mails\n") in out


def test_doctor_reports_the_engines_slots_and_what_runtime_slots_will_be(fake_openai, capsys) -> None:
    """llama-server's /props total_slots is reported, with a note when --runtime-slots differs."""
    one_slot = fake_openai(OraclePolicy({}), total_slots=1)
    assert main(["doctor", "--backend", "openai", "--base-url", one_slot.url]) == 0
    out = capsys.readouterr().out
    assert ("[info] runtime slots: 4 (4 per replica for batching engines (vLLM, SGLang), 1 replica): "
            "questions beyond that wait their turn\n"
            "       the engine reports 1 slot (/props total_slots)\n"
            "       note: give sqale-mcp --runtime-slots 1: more questions at once than slots evict "
            "each other's cached prompt; fewer leave slots idle\n") in out
    assert main(["doctor", "--backend", "openai", "--base-url", one_slot.url, "--runtime-slots", "1"]) == 0
    out = capsys.readouterr().out
    assert "[info] runtime slots: 1 (--runtime-slots): " in out and "note:" not in out
    silent = fake_openai(OraclePolicy({}))
    assert main(["doctor", "--backend", "openai", "--base-url", silent.url]) == 0
    assert "the engine does not say how many sequences it runs at once" in capsys.readouterr().out


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
    assert (f"[ok]   database {db.resolve()}: 1 tables, 0 views\n       note: the database is in "
            "WAL mode and opening it created w.sqlite-wal and w.sqlite-shm beside it") in out


@pytest.mark.parametrize(("flags", "result_text"), [
    ([], "result (1/1):\nn\n3"),
    (["--environment", "rich"], "[1 row]"),
])
def test_ask_reads_the_environment_it_is_given(fake_ollama, tmp_path, capsys, flags, result_text) -> None:
    """ask --environment picks the texts the model reads; the printed answer is the same."""
    db = create_database(tmp_path / "t.sqlite",
                         "CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1), (2), (3);")
    question, gold = "How many rows?", "SELECT count(*) AS n FROM t"
    server = fake_ollama(OraclePolicy({question: gold}))
    assert main(["ask", "--db", str(db), "--ollama-host", server.url, *flags, question]) == 0
    prompts = [body["prompt"] for body in server.bodies("/api/generate")]
    assert result_text in prompts[-1]
    assert capsys.readouterr().out.split("\n", 1)[1] == "```sql\n" + gold + "\n```\nn\n-\n3\n[1 row]\n"
