"""Where each call comes in: the tools' functions (answer_sql_question, and the answer view's
choose_answer and save_verified_answer), the `Call` they make of their arguments, and the middleware
every message passes first. Each hands its work to the answering service (question.Answering).

What runs first on every message the server gets, in this order (`Admission`, which app.py puts
outermost):

1. a call of one of our tools counts its first episode of its token's minute
   (serving/quotas.TokenQuotas.admit) and is refused past it, the refusal counted and logged
   within the token's refusal-log budget (audit.Records.refusal), before anything reads the call;
   a call of a question its token already has being answered (ongoing.py) starts no episode and
   counts none;
2. the request's `_meta`, any JSON a client sent, is checked (serving/meta.py): trace fields that
   are no header text are left out, a `progressToken` that cannot be echoed is refused;

then our telemetry (serving/tracing.py), the SDK's span, and the rest. So a call that fails
anywhere after it (its `_meta`, its arguments, a bug of ours) has counted against its token, and
nothing past this point reads an unchecked `_meta` field.

`StructuredToolErrors` adds structured content to the failed calls the SDK answers itself (bad
arguments, a crash): Cursor rejects a result of a tool with an output schema that has none.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, cast

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, InputRequiredResult, RequestParams, TextContent
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from agent import question_span

from ..serving.access import Caller, caller_of
from ..serving.meta import MetaRefused, checked_meta, trace_fields
from ..serving.quotas import QuotaExceeded
from .choice_form import ChoiceState
from .output import TOOL_NAME, AnswerOutput, unanswered
from .tool_errors import (
    ARGUMENTS_ACCEPTED,
    ERROR_PREFIX,
    INVALID_ARGUMENTS,
    CallError,
    Refused,
    checked_text,
    empty_question,
    known_alias,
    resolve_alias,
    samples_out_of_range,
    wrong_arguments,
)

# The answer path (the answering service and what it runs) loads after the server's first reply
# (app.py): a client waits for that reply at every launch. The functions below import what they
# run of it when they run; the types are for the type checker.
if TYPE_CHECKING:
    from ..state import StateOpening
    from .asking import Asker
    from .audit import Call
    from .question import Answering

SAVE_TOOL_NAME, SAVE_TOOL_TITLE = "save_verified_answer", "Propose as verified"
SAVE_TOOL_DESCRIPTION = (
    "Propose a question and its SQL for the database's verified library. The library's owner reviews "
    "each proposal; once they accept it, the same question is answered at once with this SQL. Called by "
    "the answer view's 'Propose as verified' button after the user confirmed it."
)
CHOOSE_TOOL_NAME, CHOOSE_TOOL_TITLE = "choose_answer", "Use this answer"
CHOOSE_TOOL_DESCRIPTION = (
    "Make one of the samples' results the answer to the question, as the person chose it in the answer view. "
    "Called by the view's 'Use this answer' button."
)


async def answer_sql_question(
    question: Annotated[str, Field(description="The question in plain language")],
    ctx: Context,
    database: Annotated[
        str | None,
        Field(
            description="Alias of a configured database (listed "
            "in the tool description); may be omitted "
            "when only one is configured"
        ),
    ] = None,
    evidence: Annotated[
        str | None,
        Field(description="Optional hints about the data, e.g. what a term means in columns and values"),
    ] = None,
    samples: Annotated[
        int | None,
        Field(
            description="How many independent attempts to make and "
            "vote on by their results (more is slower but "
            "says how sure the answer is: see `agreement`); "
            "default: the server's"
        ),
    ] = None,
    verified: Annotated[
        bool | None,
        Field(
            description="false: answer with the model even when the "
            "database's verified library holds this "
            "question; default true"
        ),
    ] = None,
) -> Annotated[CallToolResult, AnswerOutput] | InputRequiredResult:
    """Answer a question about a configured SQLite database with a small local text-to-SQL model."""
    arrived = time.perf_counter()  # the call's budget counts from here, as the host's timer does
    service = await ready_service(ctx.request_context.lifespan_context)
    caller = caller_of(ctx.request_context.request)
    with question_span("mcp", capture_content=service.settings.trace_content) as traced:
        try:
            if ctx.request_state is not None:  # 2026-07-28: the retry bringing the person's reply
                from .asking import FormByRetry

                return await service.reply(
                    caller,
                    ChoiceState.decode(ctx.request_state),
                    FormByRetry.reply(ctx.input_responses, service.settings.ask_timeout),
                )
            asker = service.asker(ctx)
            call = checked_call(
                service,
                caller,
                question,
                database,
                evidence,
                samples=samples,
                use_verified=verified is not False,
                asker=asker,
            )
            return await service.ask(call, asker, ctx.report_progress, arrived)
        except CallError as error:
            if not traced.ended:  # refused and failed calls ended their span where they were recorded
                traced.finish(error.status, error.kind)
            # Returned, not raised: the failed call carries structured content like every other result.
            return service.failed(
                error, database=known_alias(database, service.aliases(caller)), question=question
            )


async def choose_answer(
    choice: Annotated[str, Field(description="the answer's sealed choice, as its _meta gave it to the view")],
    option: Annotated[int, Field(ge=1, description="the 1-based number of the option the person picked")],
    ctx: Context,
) -> CallToolResult:
    """Make the option the person picked in the answer view the answer."""
    service = await ready_service(ctx.request_context.lifespan_context)
    caller = caller_of(ctx.request_context.request)
    state = service.view_choice(choice, caller)
    from .asking import ViewChoice

    with question_span("mcp", capture_content=service.settings.trace_content) as traced:
        try:
            return await service.reply(caller, state, ViewChoice.reply(option), via="answer_view")
        except CallError as error:
            if not traced.ended:  # refused and failed calls ended their span where they were recorded
                traced.finish(error.status, error.kind)
            return service.failed(
                error, database=state.alias if state else None, question=state.question if state else ""
            )


async def save_verified_answer(
    database: Annotated[str, Field(description="alias of the database the answer is about")],
    question: Annotated[str, Field(description="the question, as it was asked")],
    sql: Annotated[str, Field(description="the SQL the user checked and wants to keep")],
    ctx: Context,
    evidence: Annotated[str | None, Field(description="the evidence the question was asked with")] = None,
) -> CallToolResult:
    """Propose a checked question and SQL for the database's verified library."""
    service = await ready_service(ctx.request_context.lifespan_context)
    return await service.save(
        caller_of(ctx.request_context.request), database=database, question=question, sql=sql, evidence=evidence
    )


async def ready_service(lifespan_context: object) -> Answering:
    """The answering service of a handler's lifespan context (a StateOpening), once the state is open."""
    # The SDK types the lifespan's value loosely; ours is the StateOpening the lifespan yields.
    return await cast("StateOpening[Answering]", lifespan_context).ready()


def checked_call(
    service: Answering,
    caller: Caller,
    question: str,
    database: str | None = None,
    evidence: str | None = None,
    *,
    samples: int | None = None,
    use_verified: bool = True,
    asker: Asker | None = None,
) -> Call:
    """The call the arguments make, checked (one episode by default; --ask-samples when a form may
    ask the person); a CallError says what is wrong with them."""
    from .audit import Call

    settings = service.settings
    asked = checked_text("question", question, settings.max_question_chars)
    if asked is None:
        raise empty_question()
    hint = checked_text("evidence", evidence, settings.max_evidence_chars)
    # Out of scope and nonexistent aliases get the same error: it lists only the caller's own.
    alias = resolve_alias(database, service.aliases(caller))
    by_form = asker is not None and asker.by_form
    count = samples if samples is not None else settings.ask_samples if by_form else settings.samples
    if not 1 <= count <= settings.max_samples:
        raise samples_out_of_range(count, settings.max_samples)
    return Call(
        caller,
        asked,
        alias,
        count,
        given_evidence=hint,
        notes=service.notes(alias),
        use_verified=use_verified,
        run_all=by_form,
    )


class Admission(ServerMiddleware[Any]):
    """The quota of a call of `tools` (ours), then the `_meta` of every message; see the module."""

    def __init__(self, tools: frozenset[str]) -> None:
        self.tools = tools
        self.fields = trace_fields()

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The rest of the chain, once the call is admitted and its `_meta` checked."""
        params = ctx.params or {}
        name = params.get("name") if ctx.method == "tools/call" else None
        if not isinstance(name, str) or name not in self.tools:
            return await call_next(self._checked(ctx))
        service = await ready_service(ctx.lifespan_context)
        caller = caller_of(ctx.request)
        if name == TOOL_NAME and service.asks_again(caller, params.get("arguments")):
            return await call_next(self._checked(ctx))  # it waits for a question already counted
        try:
            admitted = service.admit(caller)
        except QuotaExceeded as exc:
            return await _refused(service, caller, name, params.get("arguments"), str(exc))
        with admitted:
            return await call_next(self._checked(ctx))

    def _checked(self, ctx: ServerRequestContext[Any, Any]) -> ServerRequestContext[Any, Any]:
        """`ctx` with its `_meta` checked (MCPError naming the field when it cannot be served)."""
        params = ctx.params
        if not params or "_meta" not in params:
            return ctx
        try:
            meta = checked_meta(params["_meta"], self.fields, request=ctx.request_id is not None)
        except MetaRefused as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from exc
        if meta is params["_meta"]:
            return ctx
        # Past here the SDK reads `ctx.params` (the handler's arguments) and `ctx.meta` (its own
        # validated view of `_meta`): both are the checked ones.
        cleaned = {**params, "_meta": meta}
        return dataclasses.replace(
            ctx, params=cleaned, meta=RequestParams.model_validate({"_meta": meta}, by_name=False).meta
        )


async def _refused(
    service: Answering, caller: Caller, tool: str, arguments: object, message: str
) -> HandlerResult:
    """The failed result of a call refused for its quota when it arrived, counted and logged as a
    refused question (a save: as a refused save)."""
    from .audit import new_question_id

    given = arguments if isinstance(arguments, Mapping) else {}
    question = given.get("question") if isinstance(given.get("question"), str) else ""
    database = given.get("database") if isinstance(given.get("database"), str) else None
    alias = known_alias(database, service.aliases(caller)) or ""
    if tool == SAVE_TOOL_NAME:
        return service.library.refused(caller, alias, f"Not saved: {message}")
    samples = given.get("samples")
    refusal = Refused(message, "quota")
    # Counted and logged as a question refused where it runs is, its span a question's.
    with question_span("mcp", capture_content=service.settings.trace_content) as traced:
        traced.finish("refused", refusal.reason)
    await service.records.refusal(
        caller,
        new_question_id(),
        alias=alias,
        question=str(question),
        samples=samples if isinstance(samples, int) else None,
        refused=refusal,
    )
    if tool == TOOL_NAME:
        return service.failed(refusal, database=alias or None, question=str(question))
    return CallToolResult(
        content=[TextContent(type="text", text=f"Error executing tool {tool}: {message}")], is_error=True
    )


class StructuredToolErrors(ServerMiddleware[Any]):
    """Adds structured content to an isError result of answer_sql_question that has none.

    Our own failures already carry it (Answering.failed); arguments that fail the SDK's validation,
    and crashes, come back from the SDK without it.
    """

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The call's result, with the structured content of a failed call when it lacks one."""
        result = await call_next(ctx)
        params = ctx.params or {}
        if ctx.method != "tools/call" or params.get("name") != TOOL_NAME:
            return result
        wire = (
            result.model_dump(mode="json", by_alias=True, exclude_none=True)
            if isinstance(result, BaseModel)
            else result
        )
        if not isinstance(wire, dict) or not wire.get("isError") or wire.get("structuredContent") is not None:
            return result
        texts = [c.get("text", "") for c in wire.get("content", []) if c.get("type") == "text"]
        message = texts[0] if texts else "the call failed"
        # The SDK words an argument error as its prefix and pydantic's report (the input echoed, a
        # model name, a URL); a crash as the bare prefix. Ours names each argument instead.
        arguments = params.get("arguments")
        service = await ready_service(ctx.lifespan_context)
        if not message.startswith(ERROR_PREFIX):
            content = _failed_content(service, ctx, message, "internal_error", arguments)
            return {**wire, "structuredContent": content}
        reason = str(argument_error(arguments, service.settings.max_samples))
        return {
            **wire,
            "content": [{"type": "text", "text": f"{ERROR_PREFIX}{reason}"}],
            "structuredContent": _failed_content(service, ctx, reason, INVALID_ARGUMENTS, arguments),
        }


def argument_error(arguments: object, max_samples: int) -> Exception:
    """The one-line error for arguments the SDK refused: each missing or mistyped one, and what it accepts.

    Each argument is checked against the tool function's own annotation, with the same
    (pydantic) validation the SDK applies, so the two never disagree about a value.
    """
    given = arguments if isinstance(arguments, Mapping) else {}
    adapters = _argument_adapters()
    missing = [name for name, (_, required) in adapters.items() if required and name not in given]
    wrong = []
    for name, (adapter, _) in adapters.items():
        if name in given:
            try:
                adapter.validate_python(given[name])
            except ValidationError:
                wrong.append((name, given[name]))
    return wrong_arguments(wrong, missing, max_samples)


@functools.cache
def _argument_adapters() -> dict[str, tuple[TypeAdapter[Any], bool]]:
    """Each argument of answer_sql_question: a validator of its annotation, and whether it is required."""
    hints = typing.get_type_hints(answer_sql_question, include_extras=True)
    parameters = inspect.signature(answer_sql_question).parameters
    return {
        name: (TypeAdapter(hints[name]), parameters[name].default is inspect.Parameter.empty)
        for name in ARGUMENTS_ACCEPTED
    }


def _failed_content(
    service: Answering, ctx: ServerRequestContext[Any, Any], message: str, kind: str, arguments: object
) -> dict[str, Any]:
    """The structured content of a failed call, from what the call's arguments say."""
    given = arguments if isinstance(arguments, Mapping) else {}
    database, question = given.get("database"), given.get("question")
    aliases = service.aliases(caller_of(ctx.request))
    return unanswered(
        message,
        status="error",
        kind=kind,
        database=known_alias(database, aliases) if isinstance(database, str) else None,
        question=question[: service.settings.max_question_chars] if isinstance(question, str) else "",
        model=service.model_label,
    ).model_dump(mode="json")
