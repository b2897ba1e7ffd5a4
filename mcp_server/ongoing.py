"""Questions still being answered after the call that asked them ended with status `working`.

A host gives up on a tool call after a fixed time (Claude Desktop at 60 s), and a slow model takes
longer than that to answer. So a call waits for its question at most --call-budget seconds from its
arrival (0: as long as it takes): a question not answered by then goes on here, untouched, while its
call ends saying `working`; a call of the same question (its `QuestionKey`: the same token, database
and arguments) finds it and waits for it again. Nothing is asked of the model twice, and its quota
was counted once, when it started. With --one-call-answers, once the budget is nearly up (its last
fifth, or twice the question's longest model request if more), the question is told to finish: its
samples answer now with what they have (agent/sampling.py), and the call waits for that answer
until its budget ends. The budget has the server answer before a host's timer fires, so a cancel is
a person's: a cancel of a call (notifications/cancelled, or its client gone) cancels the question
when no other call waits on it, and the engine is freed at once (issue 46 §4). A host whose timer
is shorter than the budget needs a smaller --call-budget (docs/clients.md). A 2025-11-25 form is
sent from inside a waiting call and the person's reply outlives it: a call whose question waits on
a form still ends within its budget.

Bounds: a token holds at most --token-max-working questions here; one that no call waits on is kept
--working-timeout seconds after its last call ended, then cancelled (or its answer dropped), saying
so in the episode log. The work runs in the server state's own task group, inside the question gate
(serving/draining.py): a drain waits for it, a stop cancels it.

This module knows nothing of what a question is: the answer layer (answer/question.py) gives the
work to run and reads its outcome. Its calls hear its progress through a `ProgressClock`.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup

from agent import Round

logger = logging.getLogger(__name__)

ReportProgress = Callable[[float, float | None, str | None], Awaitable[None]]
SendForm = Callable[[str, dict[str, Any]], Awaitable[Any]]
# With --one-call-answers, the end of the budget kept for the samples' final turns: at least this
# share of it, or this many times the question's longest model request.
FINAL_TURN_SHARE = 0.2
FINAL_TURN_REQUESTS = 2.0


@dataclass(frozen=True)
class QuestionKey:
    """What makes two calls the same question: who asks, where, and the arguments as checked."""

    token: str
    database: str
    question: str
    evidence: str | None
    samples: int
    verified: bool
    asking: str  # how its client may be asked to choose (none, form, retry, view): the work differs


@dataclass(frozen=True)
class Waiter:
    """A call waiting on a question: where its progress goes, and (2025-11-25) how it sends a form."""

    report: ReportProgress
    send_form: SendForm | None = None


class ProgressClock:
    """Sends a call's progress notifications, each strictly above the one before (MCP's MUST).

    `reached` is the count of steps done. When it has not moved past the last value sent (a
    wait reported again, a second sample waiting, a report racing another), the value goes a
    fraction further, staying below the next whole step: n/(n+1) past it for the n-th repeat.
    One lock orders the sends, so concurrent samples cannot overtake each other on the wire.
    """

    def __init__(self, report: ReportProgress) -> None:
        self.report = report
        self.sent: float | None = None  # the last value sent
        self._repeats = 0  # notifications since the count last moved
        # fast_acquire (anyio 4.5; mcp 2.3 needs 4.9): no yield when no other send is under way, so
        # a report nobody listens to does not let another sample overtake this one in a queue.
        self._lock = anyio.Lock(fast_acquire=True)

    async def send(self, reached: int, total: int, message: str) -> None:
        """Report `message` at `reached` of `total` steps, or just past the last value sent."""
        async with self._lock:
            if self.sent is None or reached > self.sent:
                value: float = reached
                self._repeats = 0
            else:
                self._repeats += 1
                value = math.floor(self.sent) + self._repeats / (self._repeats + 1)
            self.sent = value
            await self.report(value, total, message)


class TooManyWorking(Exception):
    """A token asked a new question while it already has --token-max-working being answered."""

    def __init__(self, token: str, limit: int) -> None:
        super().__init__(token, limit)
        self.token, self.limit = token, limit


class Ongoing:
    """One question being answered: the calls waiting on it, what it has done, and its outcome."""

    def __init__(self, key: QuestionKey, question_id: str) -> None:
        self.key, self.question_id = key, question_id
        self.started = time.perf_counter()
        self.calls = 0  # calls that asked this question so far
        self.waiters: dict[int, Waiter] = {}  # the calls waiting on it now, by call number
        self.left_at = self.started  # when the last call stopped waiting
        self.done = anyio.Event()  # set once `outcome` or `error` is known, or it was cancelled
        self.outcome: object | None = None
        self.error: Exception | None = None
        self.cancelled_why: str | None = None  # call_cancelled, not_asked_again or server_stopped
        self.finish_now = anyio.Event()  # set: its samples answer with what they have (one-call answers)
        self.rounds: list[Round] = []  # every round its samples played, as each ended
        self.samples_finished = 0
        self.asking = False  # a form waits for its person's choice
        self.taken = False  # a call has its outcome
        self.scope = anyio.CancelScope()
        self._changed: anyio.Event | None = None  # made when something waits for a change
        self._last_report: tuple[float, float | None, str | None] | None = None
        self._numbers = itertools.count(1)

    @property
    def seconds(self) -> float:
        """Seconds since the first call asked it."""
        return time.perf_counter() - self.started

    def longest_request(self) -> float:
        """The longest model request of its rounds so far (0 before the first round ends)."""
        return max((r.model_seconds for r in self.rounds), default=0.0)

    def attach(self, waiter: Waiter) -> int:
        """A call waits on it from now on; returns the call's number (1 for the first call)."""
        number = next(self._numbers)
        self.calls = number
        self.waiters[number] = waiter
        self.touch()
        return number

    def detach(self, number: int) -> None:
        """Call `number` no longer waits on it."""
        if self.waiters.pop(number, None) is not None and not self.waiters:
            self.left_at = time.perf_counter()
        self.touch()

    def touch(self) -> None:
        """Wake whoever waits for a change: a call came or went, a round ended, it finished."""
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def changed(self) -> None:
        """Return at its next change."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    async def report(self, progress: float, total: float | None, message: str | None) -> None:
        """Send a progress notification to every call waiting on it, and keep it for the next call to
        come. (The SDK drops a notification to a client that has gone, with a debug log: it never
        fails the work.)"""
        self._last_report = (progress, total, message)
        for waiter in list(self.waiters.values()):
            await waiter.report(progress, total, message)

    async def greet(self, waiter: Waiter) -> None:
        """Tell a call that has just come where the question stands (the last progress sent)."""
        if self._last_report is not None:
            await waiter.report(*self._last_report)

    async def send_form(self, message: str, schema: dict[str, Any]) -> Any:
        """2025-11-25: send the form through a call waiting on the question (the next one to come,
        when none waits now) and wait for the person's reply, which outlives that call."""
        self.asking = True
        try:
            while True:
                sender = next(
                    (w.send_form for w in reversed(self.waiters.values()) if w.send_form is not None), None
                )
                if sender is not None:
                    return await sender(message, schema)
                await self.changed()
        finally:
            self.asking = False


class OngoingQuestions:
    """Every question being answered, by key; they run while `running()` is open (the server state's)."""

    def __init__(self, *, keep_seconds: float, per_token: int) -> None:
        self.keep_seconds, self.per_token = keep_seconds, per_token
        self._held: dict[QuestionKey, Ongoing] = {}
        # What records each held question's answer should no call take it; popped when its keeper starts.
        self._expiry: dict[Ongoing, Callable[[Ongoing], Awaitable[None]]] = {}
        self._group: TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run questions until the block ends, then cancel those still running (each writes its line)."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    @property
    def held(self) -> int:
        """Questions being answered or holding an answer no call has taken yet."""
        return len(self._held)

    @property
    def unwaited(self) -> int:
        """Of those, the ones no call waits on (their calls said `working`)."""
        return sum(1 for work in self._held.values() if not work.waiters)

    def asks(self, token: str, arguments: object) -> bool:
        """Whether a call's `arguments`, unchecked, ask a question `token` has being answered (by its
        text and evidence): such a call starts no episode, so admission counts none for it. (One that
        only looks so starts its episodes as any question does, counted then.)"""
        if not isinstance(arguments, Mapping):
            return False
        question, evidence = arguments.get("question"), arguments.get("evidence")
        if not isinstance(question, str) or not (evidence is None or isinstance(evidence, str)):
            return False
        wanted = (question.strip(), (evidence or "").strip() or None)
        return any(key.token == token and (key.question, key.evidence) == wanted for key in self._held)

    def find(self, key: QuestionKey) -> Ongoing | None:
        """The question being answered under `key`, if any."""
        return self._held.get(key)

    def start(
        self,
        key: QuestionKey,
        question_id: str,
        run: Callable[[Ongoing], Awaitable[object]],
        on_expired: Callable[[Ongoing], Awaitable[None]],
    ) -> Ongoing:
        """Start answering a question: `run(work)` gives its outcome; `on_expired(work)` records an
        answer no call came back for. TooManyWorking when its token holds its most."""
        held = sum(1 for other in self._held if other.token == key.token)
        if held >= self.per_token:
            raise TooManyWorking(key.token, self.per_token)
        if self._group is None:
            raise RuntimeError("OngoingQuestions.start() outside running()")  # our bug
        work = Ongoing(key, question_id)
        self._held[key] = work
        self._expiry[work] = on_expired
        self._group.start_soon(self._run, work, run)
        return work

    async def wait(
        self, work: Ongoing, waiter: Waiter, *, arrived: float, budget: float, one_call_answers: bool
    ) -> bool:
        """Wait on `work` for a call's `budget` from `arrived`; True once it is done, False when the
        budget ran out (see the module).

        Cancelled (the client's cancel, or its session's end), the call cancels the question unless
        another call waits on it, and the cancellation goes on.
        """
        number: int | None = None
        finished = False  # the call takes the outcome (Answering.ask): no keeper then
        try:
            await work.greet(waiter)  # before it hears the question's next progress, which is higher
            number = work.attach(waiter)
            if budget <= 0:
                await work.done.wait()
                finished = True
                return True
            deadline = arrived + budget
            while one_call_answers and not work.done.is_set() and not work.finish_now.is_set():
                reserve = max(FINAL_TURN_SHARE * budget, FINAL_TURN_REQUESTS * work.longest_request())
                left = deadline - reserve - time.perf_counter()
                if left <= 0:
                    work.finish_now.set()  # the samples answer now, with what they have
                    break
                with anyio.move_on_after(left):
                    await work.changed()
            with anyio.move_on_after(deadline - time.perf_counter()):
                await work.done.wait()
            finished = work.done.is_set()
            return finished
        except anyio.get_cancelled_exc_class():
            if number is not None:
                work.detach(number)
            if not work.waiters:
                self.cancel(work, "call_cancelled")
            raise
        finally:
            if number is not None:
                work.detach(number)
            if not finished:
                self._kept_if_left(work)

    def take(self, work: Ongoing) -> None:
        """A call answers with a finished question's outcome: the next call of it is a new question."""
        work.taken = True
        self._forget(work)

    def cancel(self, work: Ongoing, why: str) -> None:
        """Stop a question being answered (`why` goes in its log line); one already answered is left
        for a later call, or to expire."""
        if work.done.is_set():
            return
        if work.cancelled_why is None:
            work.cancelled_why = why
            work.scope.cancel()
        self._forget(work)

    def _forget(self, work: Ongoing) -> None:
        if self._held.get(work.key) is work:
            del self._held[work.key]
        self._expiry.pop(work, None)
        work.touch()

    def _kept_if_left(self, work: Ongoing) -> None:
        """Start the keeper of a held question no call waits on now (once). Most questions are
        answered within their first call, which takes the outcome: they never need one."""
        if work.waiters or self._held.get(work.key) is not work or self._group is None:
            return
        on_expired = self._expiry.pop(work, None)
        if on_expired is not None:  # none: its keeper runs already
            self._group.start_soon(self._keep, work, on_expired)

    async def _run(self, work: Ongoing, run: Callable[[Ongoing], Awaitable[object]]) -> None:
        try:
            with work.scope:
                try:
                    work.outcome = await run(work)
                except Exception as exc:  # the calls waiting on it raise it (our bugs too)
                    work.error = exc
        finally:
            if work.cancelled_why is None and work.outcome is None and work.error is None:
                work.cancelled_why = "server_stopped"  # cancelled from outside: the server stops
            work.done.set()
            work.touch()
            self._kept_if_left(work)  # answered while no call waited (or none ever did)

    async def _keep(self, work: Ongoing, on_expired: Callable[[Ongoing], Awaitable[None]]) -> None:
        """Drop the question once no call has waited on it for keep_seconds."""
        while self._held.get(work.key) is work:
            if work.waiters:
                await work.changed()
                continue
            left = work.left_at + self.keep_seconds - time.perf_counter()
            if left > 0:
                with anyio.move_on_after(left):
                    await work.changed()
                continue
            if work.done.is_set():
                self._forget(work)
                if work.outcome is not None:
                    with anyio.CancelScope(shield=True):
                        try:
                            await on_expired(work)
                        except Exception:  # our bug: logged whole; it must not stop the other questions
                            logger.exception(
                                "recording question %s, expired unanswered, failed", work.question_id
                            )
            else:
                self.cancel(work, "not_asked_again")
            return
