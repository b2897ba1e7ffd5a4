"""The texts an episode uses, from files: the authors' `sqale_agent.py` (read, never run) or text files.

The authors ship `sqale_agent.py` beside the weights in each model repository, so the download
step that fetches the weights fetches it too. `--reference-agent` takes that file or the
downloaded folder holding it. Its `SYSTEM_PROMPT` and `USER_TEMPLATE` replace ours, and its
other module-level string constants replace our texts of the trained environment by one rule
(`ROLES`, docs/how-it-works.md): a constant takes a role when its text carries the role's
marker, no other constant's does, it has as many replacement fields as the role fills (filled
in order) and it is no longer than ROLE_CHARS. Everything is read with `ast`; nothing runs.
"""

from __future__ import annotations

import ast
import hashlib
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import PromptConfigError
from .prompt import (
    DEFAULT_PROMPTS,
    PromptSet,
    cut_at_chat_token,
    result_label,
    trained_budget_line,
    trained_final_text,
)
from .tools.environment import DEFAULT_TRAINED_TEXTS, TrainedTexts, fill_in_order, template_fields
from .tools.trained_text import ERROR_LINE, MORE_ROWS

REFERENCE_FILE = "sqale_agent.py"
REFERENCE_NAMES = ("SYSTEM_PROMPT", "USER_TEMPLATE")
ROLE_CHARS = 600  # a turn text is a sentence or three; a longer constant is instructions, not one
PREFIX_CHARS = 1_000


@dataclass(frozen=True)
class _Role:
    """A text of the trained environment that the authors' file may hold a constant for."""

    field: str  # the TrainedTexts field it fills
    label: str  # what doctor calls it
    marker: re.Pattern[str]  # what its text says, whoever wrote it
    fields: frozenset[int]  # how many replacement fields a constant for it may have
    sample: Callable[[TrainedTexts], str]  # the text with sample values: ours, or theirs in its place


ROLES = (
    _Role(
        "budget",
        "budget line",
        re.compile(r"tool turns? left", re.IGNORECASE),
        frozenset({1}),
        lambda t: trained_budget_line(3, t),
    ),
    _Role(
        "final",
        "final-turn text",
        re.compile(r"exploration limit", re.IGNORECASE),
        frozenset({0, 1}),
        lambda t: trained_final_text(None, "SELECT 1", t),
    ),
    _Role(
        "last_query",
        "last-query line",
        re.compile(r"(?:executed|ran) without error", re.IGNORECASE),
        frozenset({1}),
        lambda t: trained_final_text(None, "SELECT 1", t),
    ),
    _Role(
        "result_label",
        "result label",
        re.compile(r"\bresult\s*\(", re.IGNORECASE),
        frozenset({2}),
        lambda t: result_label(2, 3, t),
    ),
    _Role(
        "more_rows",
        "more-rows line",
        re.compile(r"more rows", re.IGNORECASE),
        frozenset({1}),
        lambda t: fill_in_order(t.more_rows or MORE_ROWS, "5"),
    ),
    _Role(
        "error",
        "error text",
        re.compile(r"^\s*error\s*:", re.IGNORECASE),
        frozenset({1}),
        lambda t: fill_in_order(t.error or ERROR_LINE, "no such column: x"),
    ),
)
# A constant with the final text's marker may also name the last query: it is the final text.
_COVERS = {"final": "last_query"}


@dataclass(frozen=True)
class ConstantUse:
    """A string constant of the authors' file that plays a role we also write, and what we do with it."""

    name: str
    role: str  # the role's label
    used: bool  # it replaces our text
    same: bool  # what it renders is ours already
    why: str | None = None  # why it is not used


@dataclass(frozen=True)
class ReferenceAgent:
    """What the authors' file gives: its prompts, its texts and how each constant was taken."""

    path: Path
    sha256: str
    prompts: PromptSet
    uses: tuple[ConstantUse, ...]


def load_prompts(
    reference_agent: str | Path | None = None,
    system_prompt: str | Path | None = None,
    user_template: str | Path | None = None,
    assistant_prefix: str = "",
) -> PromptSet:
    """Our prompts, or the reference agent's, with either text replaced from a file, and the
    text that opens each assistant turn."""
    base = read_reference_agent(reference_agent).prompts if reference_agent is not None else DEFAULT_PROMPTS
    prompts = load_prompt_files(system_prompt, user_template, base=base)
    return replace(prompts, assistant_prefix=assistant_prefix_text(assistant_prefix))


def load_prompt_files(
    system_path: str | Path | None = None,
    user_template_path: str | Path | None = None,
    base: PromptSet = DEFAULT_PROMPTS,
) -> PromptSet:
    """`base` with the system prompt and/or user template replaced by UTF-8 text files."""
    system = _read_text(system_path) if system_path is not None else base.system
    template = _read_text(user_template_path) if user_template_path is not None else base.user_template
    return replace(base, system=system, user_template=template)


def assistant_prefix_text(given: str) -> str:
    """The assistant-prefix setting as text: `\\n` and `\\t` written in a flag become the characters."""
    text = re.sub(r"\\(\\|n|t)", lambda m: {"\\": "\\", "n": "\n", "t": "\t"}[m.group(1)], given)
    if len(text) > PREFIX_CHARS:
        raise PromptConfigError(
            f"--assistant-prefix: {len(text):,} characters; give at most "
            f"{PREFIX_CHARS:,} (it opens every assistant turn, e.g. '<think>\\n')"
        )
    if cut_at_chat_token(text) != text:
        raise PromptConfigError(
            "--assistant-prefix: it holds a chat control token such as <|im_end|>, "
            "which would end the assistant turn it opens; give only the text that "
            "opens the turn, e.g. '<think>\\n'"
        )
    return text


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PromptConfigError(f"{path}: not UTF-8 text; save the file as UTF-8") from exc
    except OSError as exc:
        raise PromptConfigError(f"{path}: cannot be read ({exc.strerror or exc}); check the path") from exc


def reference_file(path: str | Path) -> Path:
    """The authors' file itself, or `sqale_agent.py` inside the downloaded model folder."""
    given = Path(path).expanduser()
    if not given.is_dir():
        return given
    inside = given / REFERENCE_FILE
    if inside.is_file():
        return inside
    others = sorted(p.name for p in given.glob("*.py"))[:5]
    seen = f" (it has {', '.join(others)})" if others else ""
    raise PromptConfigError(
        f"{path}: the folder has no {REFERENCE_FILE}{seen}; give the folder the model was downloaded to "
        f"(`hf download trl-lab/qwen3.5-2b-grpo-synsql --local-dir DIR` fetches it beside the weights) "
        f"or the file itself"
    )


def read_reference_agent(path: str | Path) -> ReferenceAgent:
    """Read the authors' file without running it: its prompts, and its constants for our texts."""
    file = reference_file(path)
    source = _read_text(file)
    known, not_literal = _string_constants(source, file)
    problems = []
    for name in REFERENCE_NAMES:
        if name in not_literal:
            problems.append(f"{name} is not a literal string")
        elif name not in known:
            problems.append(f"{name} is missing")
    if problems:
        raise PromptConfigError(
            f"{file}: {'; '.join(problems)} (expected module-level assignments of string literals); "
            "give the authors' sqale_agent.py or use prompt files instead"
        )
    texts, uses = recognise_texts({k: v for k, v in known.items() if k not in REFERENCE_NAMES})
    prompts = PromptSet(system=known["SYSTEM_PROMPT"], user_template=known["USER_TEMPLATE"], texts=texts)
    return ReferenceAgent(file, hashlib.sha256(source.encode("utf-8")).hexdigest(), prompts, uses)


def recognise_texts(constants: Mapping[str, str]) -> tuple[TrainedTexts, tuple[ConstantUse, ...]]:
    """The authors' texts for our roles, by the one rule of this module, and how each constant was taken."""
    claims: dict[str, list[str]] = {}  # role field -> constants carrying its marker
    uses: list[ConstantUse] = []
    for name, text in constants.items():
        roles = [r for r in ROLES if r.marker.search(text)]
        roles = [r for r in roles if not any(_COVERS.get(o.field) == r.field for o in roles)]
        if len(roles) > 1:
            labels = " and ".join(r.label for r in roles)
            uses.append(
                ConstantUse(
                    name, labels, used=False, same=False, why=f"it reads as both the {labels}; ours are kept"
                )
            )
        elif roles:
            claims.setdefault(roles[0].field, []).append(name)
    texts = DEFAULT_TRAINED_TEXTS
    for role in ROLES:
        names = claims.get(role.field, [])
        for name in names:
            why = _why_not(role, constants[name], names)
            if why is not None:
                uses.append(ConstantUse(name, role.label, used=False, same=False, why=why))
                continue
            texts = replace(texts, **{role.field: constants[name]})
            same = role.sample(texts) == role.sample(DEFAULT_TRAINED_TEXTS)
            uses.append(ConstantUse(name, role.label, used=True, same=same))
    order = {name: i for i, name in enumerate(constants)}
    return texts, tuple(sorted(uses, key=lambda u: order[u.name]))


def _why_not(role: _Role, text: str, rivals: list[str]) -> str | None:
    """Why a constant carrying a role's marker cannot take its place; None when it can."""
    if len(rivals) > 1:
        return f"{' and '.join(rivals)} all read as the {role.label}; ours is kept"
    fields = template_fields(text)
    if fields is None:
        return "it has a stray brace, so it is not a template we can fill"
    if fields not in role.fields:
        wanted = " or ".join(str(n) for n in sorted(role.fields))
        return f"it has {fields} replacement fields where the {role.label} fills {wanted}"
    if len(text) > ROLE_CHARS:
        return f"{len(text):,} characters: longer than a {role.label} ({ROLE_CHARS} at most)"
    return None


def _string_constants(source: str, file: Path) -> tuple[dict[str, str], set[str]]:
    """Module-level names bound to strings (literals and a few harmless forms), and those that are not."""
    try:
        module = ast.parse(source, filename=str(file))
    except SyntaxError as exc:
        raise PromptConfigError(
            f"{file}: not valid Python (line {exc.lineno}: {exc.msg}); give the authors' sqale_agent.py"
        ) from exc
    known: dict[str, str] = {}
    not_literal: set[str] = set()
    for node in module.body:
        target, value = _simple_assignment(node)
        if target is None or value is None:
            continue
        text = _string_value(value, known)
        if text is None:
            known.pop(target, None)
            not_literal.add(target)
        else:
            known[target] = text
            not_literal.discard(target)
    return known, not_literal


def _simple_assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


_STRIP_METHODS = frozenset({"strip", "lstrip", "rstrip"})


def _string_value(node: ast.expr, known: Mapping[str, str]) -> str | None:
    """The string an expression evaluates to, for literals and a few harmless forms, else None."""
    # Literals (implicit concatenation included) plus `a + b`, `.strip()`, `textwrap.dedent(...)`
    # and names of earlier module-level strings: how prompt constants are commonly written.
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string_value(node.left, known), _string_value(node.right, known)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Call) and not node.keywords and isinstance(node.func, ast.Attribute | ast.Name):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id
        if isinstance(func, ast.Attribute) and name in _STRIP_METHODS and not node.args:
            inner = _string_value(func.value, known)
            return None if inner is None else getattr(inner, name)()
        is_dedent = name == "dedent" and (
            isinstance(func, ast.Name) or (isinstance(func.value, ast.Name) and func.value.id == "textwrap")
        )
        if is_dedent and len(node.args) == 1:
            inner = _string_value(node.args[0], known)
            return None if inner is None else textwrap.dedent(inner)
    return None
