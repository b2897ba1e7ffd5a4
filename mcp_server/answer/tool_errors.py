"""The edge where our errors become ToolErrors a client (and its user) can act on."""

from __future__ import annotations

from collections.abc import Sequence

from mcp.server.mcpserver.exceptions import ToolError

from agent.errors import (
    BackendAuthError,
    BackendError,
    BackendResponseError,
    BackendTimeout,
    BackendUnreachable,
    DatabasePathError,
    DatabaseWorkerError,
    ModelNotFound,
    SqaleError,
)
from agent.text import sentence

# Prefixes say which layer failed; the wrapped messages already say what to do next.
_PREFIXES: tuple[tuple[type[SqaleError], str], ...] = (
    (BackendUnreachable, "The model runtime is unreachable"),
    (ModelNotFound, "The model is not installed"),
    (BackendTimeout, "The model runtime timed out"),
    (BackendAuthError, "The model runtime refused our credentials"),
    (BackendResponseError, "The model runtime failed"),
    (BackendError, "The model runtime failed"),
    (DatabasePathError, "The database cannot be read"),
    (DatabaseWorkerError, "The SQLite worker failed"),
)


def tool_error_for(exc: SqaleError, *, database: str) -> ToolError:
    """The ToolError for one of our errors raised while answering about `database`."""
    for kind, prefix in _PREFIXES:
        if isinstance(exc, kind):
            if kind in (DatabasePathError, DatabaseWorkerError):
                return ToolError(f"{prefix} ('{database}'): {sentence(str(exc))} Ask the server's "
                                 "operator to check the database file, then retry.")
            return ToolError(f"{prefix}: {exc}")
    return ToolError(f"Answering failed: {exc}")


def unknown_database(given: str | None, aliases: Sequence[str]) -> ToolError:
    """No database chosen, or an alias that is not configured."""
    listed = ", ".join(aliases)
    if given is None:
        return ToolError(f"Several databases are configured; pass one as `database`: {listed}.")
    return ToolError(f"Unknown database {given!r}; pass one of the configured aliases as "
                     f"`database`: {listed}.")


def empty_question() -> ToolError:
    """The question is empty or only whitespace."""
    return ToolError("The question is empty; ask a question about the data in plain language, "
                     "e.g. 'Which 5 customers spent the most?'.")


def text_too_long(name: str, length: int, limit: int) -> ToolError:
    """`question` or `evidence` exceeds its limit."""
    advice = ("Shorten it to one precise question; put background hints in `evidence`."
              if name == "question" else "Keep only the hints the question needs.")
    return ToolError(f"The {name} is {length:,} characters long; the limit is {limit:,}. {advice}")


def samples_out_of_range(given: int, limit: int) -> ToolError:
    """`samples` below 1 or above --max-samples."""
    return ToolError(f"`samples` is {given}; give a number from 1 to {limit} (the server's "
                     "--max-samples), or leave it out for the server's default.")


def episode_timeout(seconds: float) -> ToolError:
    """The whole episode ran past --episode-timeout."""
    return ToolError(
        f"Answering took longer than the {seconds:g} s limit and was stopped. Retry, ask a "
        "narrower question, or ask the server's operator to raise --episode-timeout (a slow "
        "machine or a model still loading can cause this).")


def server_stopping() -> ToolError:
    """A question that arrived while the server drains before it stops."""
    return ToolError("The server is shutting down and takes no new questions. Ask again in a "
                     "minute, once it has restarted (or ask its operator).")


def server_stopped_answering() -> ToolError:
    """A question still running when the drain time ran out."""
    return ToolError("The server shut down before this question was answered (it ran past the "
                     "server's drain time). Ask again once the server has restarted.")
