"""`sqale-agent doctor` on what the model reads and does: the texts in use, and one question that the
trained agent answers with a tool call."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from agent.commands.cli import main
from agent.commands.doctor import TOOL_CHECK_QUESTION
from tests.support.policies import OraclePolicy

AUTHORS_FILE = """\
SYSTEM_PROMPT = "You are a SQL agent."
USER_TEMPLATE = "Question: {question}"
BUDGET = "[{} tool turns left before you must answer]"
RESULT_LABEL = "result ({}/{}):"
NOTE = "The last query ran without error."
"""


def model_folder(tmp_path: Path) -> Path:
    """A downloaded model folder holding the authors' file (a fixture of its shape)."""
    folder = tmp_path / "qwen3.5-2b-grpo-synsql"
    folder.mkdir()
    (folder / "sqale_agent.py").write_text(AUTHORS_FILE, encoding="utf-8")
    return folder


def test_doctor_names_the_authors_file_its_hash_and_each_constant(
    fake_ollama: Any, tmp_path: Path, capsys: Any
) -> None:
    """With --reference-agent DIR: the file, its SHA-256, and what each constant of a role does."""
    server = fake_ollama(OraclePolicy({}))
    folder = model_folder(tmp_path)
    assert main(["doctor", "--ollama-host", server.url, "--reference-agent", str(folder)]) == 0
    out = capsys.readouterr().out
    digest = hashlib.sha256(AUTHORS_FILE.encode()).hexdigest()
    assert (
        f"[ok]   texts: the authors' {folder / 'sqale_agent.py'} (sha256 {digest}): SYSTEM_PROMPT and "
        "USER_TEMPLATE\n"
        "       BUDGET (budget line): differs from ours; used instead\n"
        "       RESULT_LABEL (result label): the same as ours\n"
        "       NOTE (last-query line): not used: it has 0 replacement fields where the last-query line "
        "fills 1\n"
        "all checks passed\n"
    ) in out
    prompt = next(b["prompt"] for b in server.bodies("/api/generate") if TOOL_CHECK_QUESTION in b["prompt"])
    assert prompt.startswith("<|im_start|>system\nYou are a SQL agent.<|im_end|>\n")


def test_doctor_says_our_texts_are_in_use_and_the_prefix(fake_ollama: Any, capsys: Any) -> None:
    """Without the authors' file: ours, and how to use theirs; the assistant prefix opens the question."""
    server = fake_ollama(OraclePolicy({}))
    assert main(["doctor", "--ollama-host", server.url, "--assistant-prefix", "<think>\\n"]) == 0
    out = capsys.readouterr().out
    assert (
        "[info] texts: ours (--reference-agent DIR, the folder the model was downloaded to, uses the "
        "authors' own sqale_agent.py)\n"
        "[info] every assistant turn opens with '<think>\\n' (--assistant-prefix)\n"
    ) in out
    assert "[ok]   asked the model one question: it called list_tables, as the trained agent does\n" in out
    prompt = next(b["prompt"] for b in server.bodies("/api/generate") if TOOL_CHECK_QUESTION in b["prompt"])
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")


@pytest.mark.parametrize("reply", ["I am Gemma, a helpful assistant.", "", "SELECT name FROM sqlite_master"])
def test_doctor_fails_a_model_that_calls_no_tool(fake_ollama: Any, capsys: Any, reply: str) -> None:
    """Another model under our name lists, loads and generates, but calls no tool: doctor fails it."""
    server = fake_ollama(OraclePolicy({}), tool_check_reply=reply)
    assert main(["doctor", "--ollama-host", server.url]) == 1
    out = capsys.readouterr().out
    began = " ".join(reply.split()) or "(nothing)"
    assert (
        f"[fail] asked the model one question ('{TOOL_CHECK_QUESTION}'): it called no tool; its reply "
        f"began: {began}\n"
        "       the trained agent's first move is a tool call, so every question would fail: another "
        "model may be served under this name, an Ollama Modelfile whose TEMPLATE is not the raw "
        "{{ .Prompt }} may rewrite the prompt, or a chat endpoint may rebuild it (see docs/engines.md)\n"
    ) in out
    assert "all checks passed" not in out


def test_doctor_warns_of_a_call_it_cannot_read(fake_ollama: Any, capsys: Any) -> None:
    """A call in a form the loop cannot read is the agent trying: a warning with the problem."""
    server = fake_ollama(OraclePolicy({}), tool_check_reply='{"tool": "list_tables", "args": {')
    assert main(["doctor", "--ollama-host", server.url]) == 0
    assert (
        "[warn] asked the model one question: it tried to call a tool in a form the loop cannot read "
        "(could not read the call" in capsys.readouterr().out
    )


def test_doctor_fails_texts_it_cannot_read(fake_ollama: Any, tmp_path: Path, capsys: Any) -> None:
    """A --reference-agent folder without the file is a failed check naming what to give."""
    server = fake_ollama(OraclePolicy({}))
    assert main(["doctor", "--ollama-host", server.url, "--reference-agent", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"[fail] texts: {tmp_path}: the folder has no sqale_agent.py; give the folder" in out
    assert "all checks passed" not in out
