"""Loading the texts an episode uses: prompt files, the authors' sqale_agent.py (file or folder), the
assistant prefix, and the authors' constants that take the place of our trained texts."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from agent.errors import PromptConfigError
from agent.prompt import DEFAULT_PROMPTS, PromptSet, result_label, trained_budget_line, trained_final_text
from agent.prompt_files import (
    ConstantUse,
    load_prompt_files,
    load_prompts,
    read_reference_agent,
    recognise_texts,
)
from agent.tools.environment import TrainedTexts


def test_load_prompt_files_replaces_only_what_is_given(tmp_path: Path) -> None:
    """Prompt files replace the system prompt and/or the user template."""
    system = tmp_path / "system.txt"
    system.write_text("You are SQL.", encoding="utf-8")
    assert load_prompt_files(system) == PromptSet("You are SQL.", DEFAULT_PROMPTS.user_template)
    with pytest.raises(PromptConfigError) as info:
        load_prompt_files(None, tmp_path / "missing.txt")
    assert str(info.value) == (
        f"{tmp_path / 'missing.txt'}: cannot be read (No such file or directory); check the path"
    )


REFERENCE = '''\
"""The authors' loop (never imported by us)."""
import textwrap
open(__file__ + ".ran", "w").write("executed")
raise SystemExit("must not run")

SYSTEM_PROMPT = "old"
TOOLS: str = (
    "Tools: "
    "list_tables"
)
SYSTEM_PROMPT = textwrap.dedent("""
    You are an agent.
    """).strip() + "\\n" + TOOLS
USER_TEMPLATE = "Question: {question}\\nEvidence: {evidence}"

def helper():
    USER_TEMPLATE = "ignored"
'''


def test_load_reference_agent_reads_literals_without_running_the_file(tmp_path: Path) -> None:
    """SYSTEM_PROMPT and USER_TEMPLATE come from the AST; the file is never executed."""
    path = tmp_path / "sqale_agent.py"
    path.write_text(REFERENCE, encoding="utf-8")
    assert load_prompts(path) == PromptSet(
        "You are an agent.\nTools: list_tables", "Question: {question}\nEvidence: {evidence}"
    )
    assert not (tmp_path / "sqale_agent.py.ran").exists()


def test_load_reference_agent_names_missing_and_non_literal_strings(tmp_path: Path) -> None:
    """The error names the file and each name that is missing or not a literal string."""
    path = tmp_path / "sqale_agent.py"
    path.write_text('import os\nSYSTEM_PROMPT = f"{os.getcwd()}"\n', encoding="utf-8")
    with pytest.raises(PromptConfigError) as info:
        load_prompts(path)
    assert str(info.value) == (
        f"{path}: SYSTEM_PROMPT is not a literal string; USER_TEMPLATE is missing (expected "
        "module-level assignments of string literals); give the authors' sqale_agent.py or use "
        "prompt files instead"
    )


def test_load_reference_agent_rejects_invalid_python(tmp_path: Path) -> None:
    """A file that is not Python is a PromptConfigError naming the line."""
    path = tmp_path / "sqale_agent.py"
    path.write_text("SYSTEM_PROMPT = (\n", encoding="utf-8")
    with pytest.raises(PromptConfigError, match=r"sqale_agent.py: not valid Python \(line 1"):
        load_prompts(path)


def test_load_reference_agent_missing_file(tmp_path: Path) -> None:
    """A missing file is a PromptConfigError saying to check the path."""
    with pytest.raises(PromptConfigError) as info:
        load_prompts(tmp_path / "nope.py")
    assert str(info.value) == (
        f"{tmp_path / 'nope.py'}: cannot be read (No such file or directory); check the path"
    )


def test_load_prompt_files_rejects_non_utf8(tmp_path: Path) -> None:
    """A prompt file that is not UTF-8 is a PromptConfigError saying how to fix it."""
    path = tmp_path / "system.txt"
    path.write_bytes(b"caf\xe9")
    with pytest.raises(PromptConfigError) as info:
        load_prompt_files(path)
    assert str(info.value) == f"{path}: not UTF-8 text; save the file as UTF-8"


def test_load_prompts_combines_reference_agent_and_file_overrides(tmp_path) -> None:
    """Files replace single texts of the reference agent's prompts (or of ours)."""
    agent_file = tmp_path / "sqale_agent.py"
    agent_file.write_text('SYSTEM_PROMPT = "ref system"\nUSER_TEMPLATE = "ref {question}"\n')
    system_file = tmp_path / "system.txt"
    system_file.write_text("my system")
    assert load_prompts() == DEFAULT_PROMPTS
    assert load_prompts(agent_file) == PromptSet("ref system", "ref {question}")
    assert load_prompts(agent_file, system_file) == PromptSet("my system", "ref {question}")
    assert load_prompts(None, None, system_file) == PromptSet(DEFAULT_PROMPTS.system, "my system")


AUTHORS_FILE = '''\
"""A reference loop (a fixture: the shape of the authors' file, not its text)."""
import json
MODEL_NAME = "trl-lab/qwen3.5-2b-grpo-synsql"
VLLM_URL = "http://127.0.0.1:8000/v1"
SYSTEM_PROMPT = "You are a SQL agent."
USER_TEMPLATE = "Question: {question}"
BUDGET_FMT = "[{remaining} tool turns left before you must answer]"
FINAL_FMT = ("You have reached the exploration limit. Write the final SQL now. The last query that "
             "ran without error:\\n{sql}")
RESULT_FMT = "result ({i}/{n}):"
ERROR_FMT = "Error: {err}"
TRUNCATED = "... ({} rows shown; more rows exist)"
RETRY_NOTE = "Your query executed without error but returned nothing."
STOP = ["<|im_end|>", "<|endoftext|>"]
'''


def write_authors_file(folder: Path, text: str = AUTHORS_FILE) -> Path:
    """The fixture file as `sqale_agent.py` in a model folder beside fake weights."""
    folder.mkdir(exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"")
    path = folder / "sqale_agent.py"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_model_folder_or_the_file_gives_the_same_prompts(tmp_path: Path) -> None:
    """--reference-agent takes the downloaded folder as well as the sqale_agent.py in it."""
    path = write_authors_file(tmp_path / "qwen3.5-2b-grpo-synsql")
    assert load_prompts(path.parent) == load_prompts(path)
    assert (load_prompts(path.parent).system, load_prompts(path.parent).user_template) == (
        "You are a SQL agent.",
        "Question: {question}",
    )


def test_a_folder_without_the_file_says_where_it_comes_from(tmp_path: Path) -> None:
    """A folder with no sqale_agent.py names what it has and how the download fetches the file."""
    (tmp_path / "run.py").write_text("")
    with pytest.raises(PromptConfigError) as info:
        load_prompts(tmp_path)
    assert str(info.value) == (
        f"{tmp_path}: the folder has no sqale_agent.py (it has run.py); give the folder the model was "
        "downloaded to (`hf download trl-lab/qwen3.5-2b-grpo-synsql --local-dir DIR` fetches it beside the "
        "weights) or the file itself"
    )


def test_the_authors_constants_take_our_texts_places_by_one_rule(tmp_path: Path) -> None:
    """Constants recognised by content replace our texts; others are listed with why, none run."""
    agent = read_reference_agent(write_authors_file(tmp_path / "model"))
    assert agent.prompts.texts == TrainedTexts(
        budget="[{remaining} tool turns left before you must answer]",
        final="You have reached the exploration limit. Write the final SQL now. The last query that ran "
        "without error:\n{sql}",
        result_label="result ({i}/{n}):",
        more_rows="... ({} rows shown; more rows exist)",
        error="Error: {err}",
    )
    assert agent.uses == (
        ConstantUse("BUDGET_FMT", "budget line", used=True, same=False),
        ConstantUse("FINAL_FMT", "final-turn text", used=True, same=False),
        ConstantUse("RESULT_FMT", "result label", used=True, same=True),
        ConstantUse("ERROR_FMT", "error text", used=True, same=True),
        ConstantUse("TRUNCATED", "more-rows line", used=True, same=False),
        ConstantUse(
            "RETRY_NOTE",
            "last-query line",
            used=False,
            same=False,
            why="it has 0 replacement fields where the last-query line fills 1",
        ),
    )
    assert agent.sha256 == hashlib.sha256(AUTHORS_FILE.encode()).hexdigest()


@pytest.mark.parametrize(
    ("constants", "why"),
    [
        (
            {"A": "{} tool turns left", "B": "[{}] tool turns left before you answer"},
            "A and B all read as the budget line; ours is kept",
        ),
        ({"A": "{} tool turns left, {} calls"}, "it has 2 replacement fields where the budget line fills 1"),
        ({"A": "{ tool turns left"}, "it has a stray brace, so it is not a template we can fill"),
        ({"A": "x" * 600 + " {} tool turns left"}, "619 characters: longer than a budget line (600 at most)"),
        (
            {"A": "result ({}/{}): {} tool turns left"},
            "it reads as both the budget line and result label; ours are kept",
        ),
    ],
)
def test_a_constant_that_cannot_take_a_role_is_listed_and_ours_kept(
    constants: dict[str, str], why: str
) -> None:
    """Rivals, the wrong number of fields, a stray brace, a long text or two roles: ours is kept."""
    texts, uses = recognise_texts(constants)
    assert texts == TrainedTexts()
    assert {use.why for use in uses} == {why}


def test_the_authors_texts_reach_the_episode(tmp_path: Path) -> None:
    """Rendered with the authors' constants: their budget line, final text, label and more-rows line."""
    texts = read_reference_agent(write_authors_file(tmp_path / "model")).prompts.texts
    assert trained_budget_line(4, texts) == "[4 tool turns left before you must answer]"
    assert trained_final_text(None, "SELECT 1", texts) == (
        "You have reached the exploration limit. Write the final SQL now. The last query that ran without "
        "error:\nSELECT 1"
    )
    assert trained_final_text(None, None, texts) == trained_final_text(None, None)  # nothing ran: ours
    assert result_label(2, 5, texts) == "result (2/5):"


@pytest.mark.parametrize(
    ("given", "text"),
    [
        ("<think>\\n", "<think>\n"),
        ("<think>\n", "<think>\n"),
        ("<think>\\n\\n</think>\\n\\n", "<think>\n\n</think>\n\n"),
        ("a\\\\nb\\t", "a\\nb\t"),
        ("", ""),
    ],
)
def test_the_assistant_prefix_reads_escapes(given: str, text: str) -> None:
    """`\\n` and `\\t` written in a flag become the characters; `\\\\` a backslash."""
    assert load_prompts(assistant_prefix=given).assistant_prefix == text


@pytest.mark.parametrize("given", ["<|im_end|>", "<think>\\n<|im_start|>user", "<|endoftext|>", "x" * 1_001])
def test_an_assistant_prefix_that_would_break_the_turn_is_refused(given: str) -> None:
    """A chat control token in the prefix (or a huge one) stops start-up with what to give instead."""
    with pytest.raises(PromptConfigError, match=r"^--assistant-prefix: .*'<think>\\n'"):
        load_prompts(assistant_prefix=given)
