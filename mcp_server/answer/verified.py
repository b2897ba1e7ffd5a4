"""The verified library on the server: consulted before the model, shown beside its answer, proposed to.

A question whose database has a library is looked up there first (agent.verified.consult):
the same question is answered at once with the library's SQL run now (no model call, no
runtime slot); otherwise the similar verified questions are listed beside the model's answer
and, with --verified-hints, given to the model as evidence.

Proposing (`save_verified_answer`, the answer view's "Propose as verified", and the form's
checkbox) is a permission, not a listing: with --verified-writable the stdio client may save,
and over HTTP only a token whose [tokens.NAME] table says `save-verified = true` (never the
--auth-token-env token, nor a loopback server without tokens). Only hosts that negotiated MCP
Apps list the tool, and only to callers that may save; but declaring the extension is one JSON
field, so the permission is checked on every call. A token saves only for the databases it may
use. What is saved is a proposal (agent.verified.saving): checked under the hide rules, appended
to the library's proposals file with who proposed it and when, and never served to anyone until
the library's owner accepts it (`sqale-agent golden accept`). Every call counts as one episode
against the token's per-minute quota, and leaves a log line (token, question, a hash of the SQL,
the outcome) and a count in `sqale_verified_saves_total`; calls refused by the quota write a few
lines per token and minute, as refused questions do.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import anyio
from mcp_types import CallToolResult, TextContent

from agent import (
    Consulted,
    Database,
    EpisodeSettings,
    Saved,
    SqaleError,
    VerifiedLibrary,
    clip,
    consult,
    propose_entry,
    sql_digest,
)

from ..config.server_settings import ServerSettings
from ..serving.access import Caller, may_save
from ..serving.metrics import ServerMetrics
from ..serving.quotas import QuotaExceeded, TokenQuotas
from .audit import Call, new_question_id
from .output import AnswerOutput, SimilarVerified, VerifiedSource, source_params
from .samples import answer_from_episode
from .tool_errors import CallError, checked_text, edge_error, resolve_alias

logger = logging.getLogger(__name__)

VERIFIED_MODEL = "verified library"  # the `model` of a verified answer: no model wrote its SQL
LOGGED_QUESTION_CHARS = 80  # what a save's log line keeps of its question
LOGGED_DIGEST_CHARS = 16  # of the SQL's SHA-256


def verified_answer(consulted: Consulted, alias: str, max_rows: int) -> AnswerOutput:
    """The structured answer of the same-question tier: the shape of any answer, status verified."""
    assert consulted.answer is not None and consulted.provenance is not None
    p = consulted.provenance
    answer = answer_from_episode(consulted.answer, database=alias, model=VERIFIED_MODEL, max_rows=max_rows)
    return answer.model_copy(
        update={
            "agreement": None,
            "samples": 0,
            "samples_finished": 0,
            "verified": VerifiedSource(
                library=p.library,
                line=p.line,
                question=p.question,
                added_by=p.added_by,
                added_at=p.added_at,
                tags=list(p.tags),
                params=source_params(p.params),
            ),
        }
    )


def with_library(answer: AnswerOutput, consulted: Consulted | None) -> AnswerOutput:
    """A model's answer with the similar verified questions and any note on the same one."""
    if consulted is None:
        return answer
    similar = [
        SimilarVerified(
            question=e.question, sql=e.sql, line=e.line, added_by=e.entry.added_by, added_at=e.entry.added_at
        )
        for e in consulted.similar
    ]
    return answer.model_copy(update={"similar_verified": similar, "verified_note": consulted.not_served})


def saver(caller: Caller) -> str:
    """Who saves: the token's name, or for the local caller the user running the server."""
    if caller.remote:
        return caller.name
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment or the password database
        return caller.name


class VerifiedLibraries:
    """The databases' verified libraries, as the answer path consults them and proposes to them."""

    def __init__(
        self,
        libraries: Mapping[str, VerifiedLibrary],
        databases: Mapping[str, Database],
        *,
        settings: ServerSettings,
        episode: EpisodeSettings,
        aliases: Sequence[str],
        quotas: TokenQuotas,
        metrics: ServerMetrics,
    ) -> None:
        self.libraries, self.databases, self.settings, self.episode = libraries, databases, settings, episode
        self.aliases, self.quotas, self.metrics = aliases, quotas, metrics

    def first(self, call: Call) -> bool:
        """True when the call's question is looked up in its database's library before the model."""
        return call.use_verified and call.alias in self.libraries

    async def consult(self, call: Call) -> Consulted | None:
        """What the database's verified library says about the call; None when it has no library."""
        library = self.libraries.get(call.alias)
        if library is None:
            return None
        return await consult(
            library,
            self.databases[call.alias],
            call.question,
            call.given_evidence,
            settings=self.episode,
            use_exact=call.use_verified,
        )

    def hinted(self, call: Call, consulted: Consulted | None) -> Call:
        """The call with the similar verified answers in its evidence (--verified-hints), after the
        database's notes and before the caller's own evidence."""
        use = consulted is not None and self.settings.verified_hints and call.use_verified
        hints = consulted.hints() if consulted is not None and use else None
        return call if hints is None else replace(call, hints=hints)

    def may_propose(self, call: Call) -> bool:
        """True when a form may offer to propose the chosen answer as verified (may_save)."""
        return call.alias in self.libraries and may_save(self.settings, call.caller)

    async def save(
        self, caller: Caller, *, database: str, question: str, sql: str, evidence: str | None
    ) -> CallToolResult:
        """The save and its outcome as a tool result (isError when nothing holds the SQL now)."""
        settings = self.settings
        try:
            self.quotas.check_rate(caller)
        except QuotaExceeded as exc:
            return self.saved(caller, question, sql, None, "quota", f"Not saved: {exc}", failed=True)
        if not may_save(settings, caller):
            return self.saved(
                caller,
                question,
                sql,
                None,
                "not_permitted",
                (
                    f"Not saved: token '{caller.name}' may not propose verified answers. The server's operator "
                    "grants it with save-verified = true in its [tokens.NAME] table."
                ),
                failed=True,
            )
        try:
            alias = resolve_alias(database, caller.visible(self.aliases))
            asked = checked_text("question", question, settings.max_question_chars)
            hint = checked_text("evidence", evidence, settings.max_evidence_chars)
        except CallError as error:
            return self.saved(caller, question, sql, None, "invalid", str(error), failed=True)
        library = self.libraries.get(alias)
        if library is None:
            return self.saved(
                caller,
                question,
                sql,
                alias,
                "no_library",
                (
                    f"Not saved: '{alias}' has no verified library (the server's operator sets one with "
                    "--verified ALIAS=FILE)."
                ),
                failed=True,
            )
        try:
            saved: Saved = await anyio.to_thread.run_sync(
                lambda: propose_entry(
                    library,
                    self.databases[alias],
                    question=asked or "",
                    sql=sql,
                    evidence=hint,
                    proposed_by=saver(caller),
                )
            )
        except Exception as exc:
            # The database or its worker failed (or a bug of ours): mapped as for a question, so a
            # remote client reads no server path; the log line has the detail under this id.
            ident = new_question_id()
            failure = edge_error(exc, database=alias, remote=caller.remote, question_id=ident)
            logger.log(
                logging.WARNING if isinstance(exc, SqaleError) else logging.ERROR,
                "save on '%s' for token '%s' failed (id %s): %r",
                alias,
                caller.name,
                ident,
                exc,
                exc_info=not isinstance(exc, SqaleError),
                extra={"token": caller.name},
            )
            result = self.saved(
                caller, question, sql, alias, "error", f"Not saved: {failure or 'a bug of ours'}", failed=True
            )
            if failure is None:  # our own bug, on stdio: it propagates as it is
                raise
            return result
        return self.saved(caller, question, sql, alias, saved.outcome.value, saved.message, failed=saved.failed)

    def refused(self, caller: Caller, alias: str, message: str) -> CallToolResult:
        """A save refused for its quota when it arrived: counted, as the tool result."""
        self.metrics.saves.labels(alias, caller.name, "quota").inc()
        return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)

    def saved(
        self,
        caller: Caller,
        question: str,
        sql: str,
        alias: str | None,
        outcome: str,
        message: str,
        *,
        failed: bool,
    ) -> CallToolResult:
        """Count and log one call of the save tool's outcome, and return it as the tool result."""
        self.metrics.saves.labels(alias or "", caller.name, outcome).inc()
        result = CallToolResult(content=[TextContent(type="text", text=message)], is_error=failed)
        if outcome == "quota" and self.quotas.of(caller).refusal_lines.allow() is None:
            return result  # a flood must not fill the disk: counted only
        logger.info(
            "save on '%s' for token '%s': %s (question %r, sql sha256 %s…, %d characters): %s",
            alias or "-",
            caller.name,
            outcome,
            clip(question, LOGGED_QUESTION_CHARS),
            sql_digest(sql.strip())[:LOGGED_DIGEST_CHARS],
            len(sql),
            message,
            extra={"token": caller.name},
        )
        return result
