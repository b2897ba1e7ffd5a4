"""The form that asks a person to choose among the samples' results, and the state a later reply
(a retry's, the answer view's) carries back.

One form in both protocol eras: a single-choice field (one option per distinct result, from
agent.choices, then "None of these") and, when the caller may propose verified answers, a
checkbox to propose the chosen one. A 2025-11-25 call sends it as `elicitation/create`; a
2026-07-28 call ends with an `input_required` result holding it, and the client calls again
with the reply and the request state (`ChoiceState`), which the SDK seals before it leaves
(mcp.server.request_state: AES-256-GCM, bound to the tool, its arguments and the caller's
token, expiring). The answer view carries the same state in a token of ours (`ViewTokens`: the
same codec under a key derived for this purpose, sealed for the caller's token, for an hour). The
state holds only what the caller may read in any answer (the options, the candidates' SQL, traces,
votes), never a path or anything hidden.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Literal

from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState
from mcp_types import (
    ClientCapabilities,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    InputResponses,
)
from pydantic import BaseModel, ConfigDict, ValidationError

from agent import NONE_OF_THESE, Choice, ChoiceOption

from ..config.server_settings import ServerSettings
from ..serving.access import Caller
from .output import AskedPerson, Candidate, Reply, RoundPrompt, SimilarVerified, TraceEntry

FORM_KEY = "choose_answer"  # the form's key among a 2026-07-28 result's input requests
NONE_KEY = "none"
PROPOSE_TITLE = "Also propose the chosen answer as the team's verified answer"
VIEW_TOKEN_PURPOSE = "sqale-mcp/answer-view-choice/v1"  # a token of ours never opens as another's
VIEW_TOKEN_SECONDS = 3_600.0  # how long the view may still offer the choice
PROPOSE_DESCRIPTION = (
    "The library's owner reviews the proposal first; nobody is answered with it until they accept it."
)


def answers_forms(capabilities: ClientCapabilities | None) -> bool:
    """True when a client declared form elicitation (a bare `elicitation: {}` counts; URL-only does not)."""
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


@dataclass(frozen=True)
class PersonReply:
    """What the person answered, read against the form."""

    reply: Reply
    group: int | None = None  # the vote's group chosen (0: the vote's own answer)
    option: int | None = None  # its 1-based number on the form
    propose: bool = False  # they also asked to propose it as verified

    def asked(self, form: ChoiceForm, proposal: str | None = None) -> AskedPerson:
        """What the answer says about the form and this reply."""
        return AskedPerson(options=form.titles, reply=self.reply, chosen=self.option, proposal=proposal)


@dataclass(frozen=True)
class ChoiceForm:
    """The form for one question's choice."""

    choice: Choice
    propose: bool = False  # offer the "propose as verified" checkbox

    @property
    def titles(self) -> list[str]:
        """The options as the form shows them, "None of these" last."""
        return [o.label for o in self.choice.options] + [NONE_OF_THESE]

    @property
    def schema(self) -> dict[str, Any]:
        """The requested schema: a titled single choice (2025-11-25's `oneOf` of `const`/`title`),
        and the proposal checkbox when offered."""
        keys = [*(_key(k) for k in range(len(self.choice.options))), NONE_KEY]
        properties: dict[str, Any] = {
            "answer": {
                "type": "string",
                "title": "The right answer",
                "description": "Pick the result that answers your question, or None of these.",
                "oneOf": [{"const": key, "title": title} for key, title in zip(keys, self.titles, strict=True)],
            }
        }
        if self.propose:
            properties["propose"] = {
                "type": "boolean",
                "title": PROPOSE_TITLE,
                "description": PROPOSE_DESCRIPTION,
                "default": False,
            }
        return {"type": "object", "properties": properties, "required": ["answer"]}

    def request(self) -> ElicitRequest:
        """The form as an `elicitation/create` request (2026-07-28: one of a result's input requests)."""
        return ElicitRequest(
            params=ElicitRequestFormParams(message=self.choice.message, requested_schema=self.schema)
        )

    def input_required(self, state: ChoiceState) -> InputRequiredResult:
        """A 2026-07-28 call's result asking for the form, with the state its retry brings back."""
        return InputRequiredResult(input_requests={FORM_KEY: self.request()}, request_state=state.encode())

    def read(self, result: ElicitResult) -> PersonReply:
        """The person's reply; content that does not fit the form is `invalid_reply`."""
        if result.action == "decline":
            return PersonReply("declined")
        if result.action == "cancel":
            return PersonReply("cancelled")
        content = result.content or {}
        answer, propose = content.get("answer"), content.get("propose", False)
        if not isinstance(propose, bool) or (propose and not self.propose):
            return PersonReply("invalid_reply")
        if answer == NONE_KEY:
            return PersonReply("none_of_these")
        options = self.choice.options
        number = next((k + 1 for k in range(len(options)) if answer == _key(k)), None)
        if number is None:
            return PersonReply("invalid_reply")
        return PersonReply("chose", options[number - 1].group, number, propose)

    def read_retry(self, responses: InputResponses | None, asked_at: float, timeout: float) -> PersonReply:
        """The reply a 2026-07-28 retry carries: none (`no_reply`), too late, or the person's."""
        response = (responses or {}).get(FORM_KEY)
        if response is None:
            return PersonReply("no_reply")
        if not isinstance(response, ElicitResult):
            return PersonReply("invalid_reply")
        if time.time() - asked_at > timeout:
            return PersonReply("late_reply")
        return self.read(response)


def _key(k: int) -> str:
    return str(k + 1)


class OptionRecord(BaseModel):
    """What a retry needs of one option's answer besides its rows, which run again."""

    # defer_build: built at the first question asked, not at start-up (bench/bench_startup.py)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    group: int
    sql: str
    status: str
    stop_reason: str
    rounds: int
    tool_calls: int
    tokens: int
    seconds: float
    queued_seconds: float
    trace: list[TraceEntry]
    trace_omitted: int = 0
    prompt_cache: list[RoundPrompt]


class ChoiceState(BaseModel):
    """A 2026-07-28 question awaiting the person's choice, as its retry brings it back."""

    # defer_build: built at the first question asked, not at start-up (bench/bench_startup.py)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    v: Literal[1] = 1  # STATE_VERSION
    question_id: str
    asked_at: float  # time.time() when the form went out
    alias: str
    question: str  # the question as the answer shows it
    evidence: str | None  # the caller's own evidence (a proposal is filed with it)
    model: str
    labels: list[str]  # the options' lines, as the form showed them
    more: int
    propose: bool
    options: list[OptionRecord]
    samples: int
    samples_finished: int
    candidates: list[Candidate]
    similar_verified: list[SimilarVerified]
    verified_note: str | None

    def encode(self) -> str:
        """The state as the SDK seals it."""
        return self.model_dump_json()

    @classmethod
    def decode(cls, text: str) -> ChoiceState | None:
        """The state a retry brought back (the SDK checked it is ours); None when its shape is not
        this version's (a state minted by another version of the server)."""
        try:
            return cls.model_validate_json(text)
        except ValidationError:
            return None

    def form(self) -> ChoiceForm:
        """The form this state was asked with."""
        options = tuple(
            ChoiceOption(record.group, label) for record, label in zip(self.options, self.labels, strict=True)
        )
        return ChoiceForm(Choice(self.question, self.samples, options, self.more), self.propose)


class ViewTokens:
    """Seals a question's state for the answer view: a token its client carries back and may neither
    read nor forge, which opens only for the caller it was sealed for, for VIEW_TOKEN_SECONDS.

    The SDK's request-state codec (AES-256-GCM, mcp.server.request_state) under a key of our own,
    derived for this purpose from --request-state-key-env's secret (so every process behind one
    address opens the others' tokens) or from one this process makes: a view token never opens as
    the SDK's request state, nor the other way round. The owner and the expiry are inside the
    sealed text.
    """

    def __init__(self, secret: bytes) -> None:
        key = hmac.new(secret, VIEW_TOKEN_PURPOSE.encode(), hashlib.sha256).digest()
        self._codec = AESGCMRequestStateCodec([key])

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> ViewTokens:
        """Under --request-state-key-env's key, else a key this process makes."""
        key = settings.request_state_key
        return cls(key.get_secret_value().encode() if key is not None else os.urandom(32))

    def seal(self, state: ChoiceState, caller: Caller) -> str:
        """The view's token for `state`, which only `caller` can bring back."""
        payload = {
            "purpose": VIEW_TOKEN_PURPOSE,
            "owner": caller.name,
            "exp": time.time() + VIEW_TOKEN_SECONDS,
            "text": state.encode(),
        }
        return self._codec.seal(json.dumps(payload).encode())

    def open(self, token: str, caller: Caller) -> ChoiceState | None:
        """The state `token` holds; None when it is not this server's for `caller`, or has expired."""
        try:
            payload: Any = json.loads(self._codec.unseal(token))
        except (InvalidRequestState, ValueError):
            return None
        if not isinstance(payload, dict) or payload.get("purpose") != VIEW_TOKEN_PURPOSE:
            return None
        exp, sealed_for, text = payload.get("exp"), payload.get("owner"), payload.get("text")
        if not isinstance(exp, int | float) or not time.time() < exp or not isinstance(text, str):
            return None
        owner = isinstance(sealed_for, str) and hmac.compare_digest(sealed_for.encode(), caller.name.encode())
        return ChoiceState.decode(text) if owner else None
