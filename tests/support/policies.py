"""Scripted model policies for tests, keyed on what the prompt says (never on call counts).

A policy turns a raw ChatML prompt into a ScriptedReply. The HTTP fakes (fake_runtime.py)
and the in-process PolicyBackend both pass the reply through `generate`, which behaves like
a runtime: it cuts at stop strings and at the token limit (about 4 characters a token).
Import from test files as `from tests.support.policies import ...`.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import anyio
import anyio.lowlevel

from agent.backends.base import STOP_STRINGS, Completion, ModelBackend, SamplingSettings, seeded_copy
from agent.backends.registry import DEFAULT_MODEL
from agent.errors import (
    BackendAuthError,
    BackendError,
    BackendResponseError,
    BackendUnreachable,
    ModelNotFound,
)
from agent.prompt import FINAL_INSTRUCTION, TRAINED_FINAL_OPENING

CHARS_PER_TOKEN = 4
# What marks the final (answer-now) turn in either environment: the first line of the rich
# instruction ("This is your final answer turn: ...") or the trained environment's opening
# sentence ("You have reached the exploration limit."). Specific enough that a question will not say it.
FINAL_TURN_MARKERS = (FINAL_INSTRUCTION.split("\n")[0].lower(), TRAINED_FINAL_OPENING.split(". ")[0].lower())

_USER_TURN = re.compile(r"<\|im_start\|>user\n(.*?)(?:<\|im_end\|>|\Z)", re.DOTALL)
_BUDGET_LINE = re.compile(r"^\[?(\d+) tool turns? left", re.MULTILINE)


@dataclass(frozen=True)
class ScriptedReply:
    """What the model 'generates' before stops and limits apply; or an HTTP failure."""

    text: str
    delay: float = 0.0  # seconds the runtime takes (the fakes notice a disconnect meanwhile)
    finish_reason: str = "stop"  # reported when the text ends without hitting a stop or limit
    http_status: int = 200  # not 200: the runtime answers this status with `text` as error


class Policy(Protocol):
    """Decides the model's reply from the prompt it was given."""

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The reply to this raw prompt."""
        ...


@runtime_checkable
class SeedAwarePolicy(Protocol):
    """A policy that also sees the sampling seed of the request (for multi-sample tests)."""

    def reply_with_seed(self, prompt: str, model: str, seed: int | None) -> ScriptedReply:
        """The reply to this raw prompt under this seed."""
        ...


def policy_reply(policy: Policy, prompt: str, model: str, seed: int | None) -> ScriptedReply:
    """Ask a policy for its reply, passing the seed to policies that want it."""
    if isinstance(policy, SeedAwarePolicy):
        return policy.reply_with_seed(prompt, model, seed)
    return policy.reply(prompt, model)


# ---- facts read from a prompt ------------------------------------------------------------


def first_user_turn(prompt: str) -> str:
    """The text of the first user turn (the question), or '' when there is none."""
    match = _USER_TURN.search(prompt)
    return match.group(1) if match else ""


def last_user_turn(prompt: str) -> str:
    """The text of the last user turn, or '' when there is none."""
    turns = _USER_TURN.findall(prompt)
    return turns[-1] if turns else ""


def round_number(prompt: str) -> int:
    """Which model turn this prompt asks for: 1 on the first call."""
    return prompt.count("<|im_start|>assistant")


def tool_turns_left(prompt: str) -> int | None:
    """The N of the last budget line (`[N tool turns left ...]` or `N tool turn(s) left ...`), if any."""
    found = _BUDGET_LINE.findall(last_user_turn(prompt))
    return int(found[-1]) if found else None


def is_final_turn(prompt: str) -> bool:
    """True when the last user turn tells the model to answer now (or leaves 0 tool turns)."""
    text = last_user_turn(prompt).lower()
    return any(marker in text for marker in FINAL_TURN_MARKERS) or tool_turns_left(prompt) == 0


# ---- runtime emulation shared by the HTTP fakes and PolicyBackend -------------------------


def count_tokens(text: str) -> int:
    """Tokens a runtime would report for `text`: about 4 characters each."""
    return -(-len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Generated:
    """A reply after stop strings and the token limit were applied."""

    text: str
    finish_reason: str  # "stop" or "length" (or the reply's own when it ends by itself)
    completion_tokens: int


def generate(reply: ScriptedReply, *, max_tokens: int | None, stops: Sequence[str]) -> Generated:
    """Cut a scripted reply like a runtime: at the first stop string, then at max_tokens."""
    text = reply.text
    positions = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    stopped = bool(positions)
    if stopped:
        text = text[: min(positions)]
    if max_tokens is not None and max_tokens >= 0 and len(text) > max_tokens * CHARS_PER_TOKEN:
        return Generated(text[: max_tokens * CHARS_PER_TOKEN], "length", max_tokens)
    return Generated(text, "stop" if stopped else reply.finish_reason, count_tokens(text))


class PromptCache:
    """Like a KV cache: counts only prompt tokens beyond the longest already-evaluated prefix."""

    def __init__(self, slots: int = 16) -> None:
        self._texts: deque[str] = deque(maxlen=slots)

    def new_tokens(self, prompt: str) -> int:
        """Prompt tokens a runtime would evaluate for `prompt` (at least 1 for a non-empty one)."""
        reused = max((_shared_prefix(t, prompt) for t in self._texts), default=0)
        if reused == len(prompt) and prompt:
            reused -= 1  # runtimes always evaluate the last prompt token again
        return count_tokens(prompt[reused:])

    def remember(self, text: str) -> None:
        """Record a prompt plus its completion as evaluated."""
        self._texts.append(text)


def _shared_prefix(a: str, b: str) -> int:
    """Length of the common prefix of two strings (binary search on slices: C-speed compares)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


# ---- policies ---------------------------------------------------------------------------


class ScriptPolicy:
    """Replies the i-th scripted turn at round i (the last one again after that)."""

    def __init__(
        self, turns: Sequence[str | ScriptedReply], *, final: str | ScriptedReply | None = None
    ) -> None:
        if not turns:
            raise ValueError("ScriptPolicy needs at least one turn")
        self.turns = tuple(t if isinstance(t, ScriptedReply) else ScriptedReply(t) for t in turns)
        self.final = ScriptedReply(final) if isinstance(final, str) else final

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The scripted turn for this prompt's round; `final` (if given) on the answer turn."""
        if self.final is not None and is_final_turn(prompt):
            return self.final
        return self.turns[min(round_number(prompt), len(self.turns)) - 1]


class OraclePolicy:
    """Knows the gold SQL: lists tables, runs the gold query, then submits it."""

    def __init__(self, gold: Mapping[str, str]) -> None:
        self.gold = dict(gold)
        # Longest first, so a question that contains another question still matches itself.
        self._questions = tuple(sorted(self.gold, key=len, reverse=True))

    def question_in(self, prompt: str) -> str:
        """The gold question quoted in the prompt's first user turn."""
        asked = first_user_turn(prompt)
        for question in self._questions:
            if question in asked:
                return question
        raise LookupError(
            f"OraclePolicy: none of its {len(self.gold)} gold questions appears in the first "
            f"user turn {asked[:200]!r}; give it the questions the test asks."
        )

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """list_tables at round 1, run_query of the gold SQL at round 2, then submit_sql."""
        sql = self.gold[self.question_in(prompt)]
        round_ = round_number(prompt)
        if round_ == 1 and not is_final_turn(prompt):
            return ScriptedReply(assistant_reply("List the tables first.", tool_call("list_tables")))
        if round_ == 2 and not is_final_turn(prompt):
            return ScriptedReply(
                assistant_reply("Test the query before submitting.", tool_call("run_query", sql=sql))
            )
        return ScriptedReply(assistant_reply("The query works; submit it.", tool_call("submit_sql", sql=sql)))


class VotePolicy(OraclePolicy):
    """A fake model whose K samples disagree as a small model's do: for each (question, seed), fixed
    by a hash, it submits the gold SQL (about `right` of the time) or one of three wrong variants of
    it whose result almost never equals the gold's: its second row only, a count of its rows, or
    its rows with one more column. Wrong samples that pick the same variant agree with each other,
    as a small model's mistakes often do."""

    VARIANTS = (
        "SELECT * FROM ({gold}) LIMIT 1 OFFSET 1",
        "SELECT count(*) FROM ({gold})",
        "SELECT *, 0 AS extra FROM ({gold})",
    )

    def __init__(self, gold: Mapping[str, str], right: float = 0.5) -> None:
        super().__init__(gold)
        self.right = right

    def answer(self, question: str, seed: int | None) -> str:
        """The SQL submitted for `question` under `seed`."""
        digest = hashlib.sha256(f"{question}\x00{seed}".encode()).digest()
        gold = self.gold[question].strip().rstrip(";")
        if digest[0] / 256 < self.right:
            return gold
        return self.VARIANTS[digest[1] % len(self.VARIANTS)].format(gold=gold)

    def reply_with_seed(self, prompt: str, model: str, seed: int | None) -> ScriptedReply:
        """The oracle's three turns (list the tables, run the SQL, submit it) with this seed's SQL."""
        sql = self.answer(self.question_in(prompt), seed)
        return OraclePolicy({self.question_in(prompt): sql}).reply(prompt, model)

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The reply without a seed."""
        return self.reply_with_seed(prompt, model, None)


class SeedSwitchPolicy:
    """Delegates to the policy registered for the request's sampling seed."""

    def __init__(self, by_seed: Mapping[int | None, Policy], default: Policy | None = None) -> None:
        self.by_seed = dict(by_seed)
        self.default = default

    def reply_with_seed(self, prompt: str, model: str, seed: int | None) -> ScriptedReply:
        """The reply of the policy for `seed` (or the default policy)."""
        policy = self.by_seed.get(seed, self.default)
        if policy is None:
            raise LookupError(f"SeedSwitchPolicy has no policy for seed {seed!r} and no default")
        return policy_reply(policy, prompt, model, seed)

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The reply when the request carries no seed."""
        return self.reply_with_seed(prompt, model, None)


# ---- building model outputs, well-formed and not ------------------------------------------


def tool_call(tool: str, /, **args: Any) -> str:
    """A well-formed call: {"tool": "<name>", "args": {...}}."""
    return json.dumps({"tool": tool, "args": args}, ensure_ascii=False)


def assistant_reply(think: str | None, *calls: str) -> str:
    """A turn: a <think> block (when given), then each call on its own line."""
    head = [f"<think>{think}</think>"] if think is not None else []
    return "\n".join([*head, *calls])


def fenced(text: str, lang: str = "json") -> str:
    """`text` inside a Markdown code fence."""
    return f"```{lang}\n{text}\n```"


def broken_json_call(tool: str = "run_query", /, **args: Any) -> str:
    """A call whose JSON misses its closing brace."""
    return tool_call(tool, **args)[:-1]


def unknown_tool_call(name: str = "drop_database") -> str:
    """A well-formed call to a tool that does not exist."""
    return tool_call(name)


def call_without_args(tool: str = "describe_table") -> str:
    """A call with no "args" key."""
    return json.dumps({"tool": tool})


def call_with_string_args(tool: str, /, **args: Any) -> str:
    """A call whose "args" is a JSON string instead of an object."""
    return json.dumps({"tool": tool, "args": json.dumps(args)})


def name_arguments_call(tool: str, /, **args: Any) -> str:
    """A call spelled the OpenAI way: {"name": ..., "arguments": {...}}."""
    return json.dumps({"name": tool, "arguments": args})


def unclosed_think(text: str) -> str:
    """A <think> block that never closes (what a length-cut turn looks like)."""
    return f"<think>{text}"


def rambling(tokens: int) -> str:
    """Text of about `tokens` tokens with no stop string and no call (to hit a token limit)."""
    return ("Let me think about the schema. " * (tokens * CHARS_PER_TOKEN // 31 + 1))[
        : tokens * CHARS_PER_TOKEN
    ]


# ---- in-process backend -----------------------------------------------------------------


@dataclass(frozen=True)
class PolicyRequest:
    """One complete() call as PolicyBackend received it."""

    prompt: str
    max_tokens: int


_STATUS_ERRORS: dict[int, type[BackendError]] = {
    401: BackendAuthError,
    403: BackendAuthError,
    404: ModelNotFound,
    502: BackendUnreachable,
    503: BackendUnreachable,
    504: BackendUnreachable,
}


class PolicyBackend(ModelBackend):
    """A zero-latency in-process ModelBackend answering from a policy, cut like the fakes.

    A reply's delay is slept (cancellably); a reply with an http_status other than 200 raises
    the BackendError a real backend would (401/403 auth, 404 model, 502-504 unreachable,
    else response error) with the reply text as message.
    """

    def __init__(
        self,
        policy: Policy,
        model: str = DEFAULT_MODEL,
        *,
        sampling: SamplingSettings = SamplingSettings(),  # noqa: B008 - frozen dataclass
        prompt_cache: bool = False,
        record: bool = True,
    ) -> None:
        self.policy = policy
        self.model = model
        self.sampling = sampling
        self.record = record  # False for benchmarks: keeps no prompts in memory
        self.requests: list[PolicyRequest] = []
        self._cache = PromptCache() if prompt_cache else None

    def with_seed(self, seed: int) -> PolicyBackend:
        """This backend answering as for `seed`, recording into the same request list."""
        return seeded_copy(self, seed)

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        """The policy's reply to `prompt`, cut at STOP_STRINGS and `max_tokens`."""
        started = time.perf_counter()
        if self.record:
            self.requests.append(PolicyRequest(prompt, max_tokens))
        reply = policy_reply(self.policy, prompt, self.model, self.sampling.seed)
        if reply.delay > 0:
            await anyio.sleep(reply.delay)
        else:
            await anyio.lowlevel.checkpoint()
        if reply.http_status != 200:
            error = _STATUS_ERRORS.get(reply.http_status, BackendResponseError)
            raise error(reply.text)
        generated = generate(reply, max_tokens=max_tokens, stops=STOP_STRINGS)
        if self._cache is None:
            prompt_tokens = count_tokens(prompt)
        else:
            prompt_tokens = self._cache.new_tokens(prompt)
            self._cache.remember(prompt + generated.text)
        return Completion(
            text=generated.text,
            prompt_tokens=prompt_tokens,
            completion_tokens=generated.completion_tokens,
            finish_reason=generated.finish_reason,
            seconds=time.perf_counter() - started,
        )

    async def aclose(self) -> None:
        """Nothing to release."""
