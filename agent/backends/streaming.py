"""Reading a streamed OpenAI /completions answer (server-sent events) into one completion."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..errors import BackendResponseError

USAGE_FROM_SERVER = "server"
# llama_cpp.server (the Python one) sends no usage in a stream: pieces are counted instead.
USAGE_COUNTED = "counted: the server sent no usage; prompt tokens estimated"
# Where a completion's cached prompt tokens came from (Completion.details["cache"]).
CACHE_FROM_USAGE = "usage.prompt_tokens_details.cached_tokens"
CACHE_FROM_TIMINGS = "timings.cache_n"  # llama.cpp's llama-server
# Bytes read past `data: [DONE]` to reach the end of the body (its last chunk's terminator): a
# body read to its end returns its connection to the pool; one cut short is closed, and every
# completion would open a new one. A server still sending past this is left, and its connection closed.
AFTER_DONE_BYTES = 64 * 1024


@dataclass(frozen=True)
class StreamedCompletion:
    """The text, finish reason and token counts of one streamed completion."""

    text: str
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int  # 0 when the server sent no usage (the loop then estimates)
    completion_tokens: int
    usage_source: str  # USAGE_FROM_SERVER or USAGE_COUNTED
    cached_tokens: int | None = None  # prompt tokens the engine served from its cache, if it said
    cache_source: str = ""  # CACHE_FROM_USAGE or CACHE_FROM_TIMINGS; "" when it did not say


async def read_completion_stream(chunks: AsyncIterator[bytes], url: str) -> StreamedCompletion:
    """Gather `data:` events until [DONE]; BackendResponseError for errors and cut-off streams.

    `chunks` are the response body's bytes as they arrive (an engine sends one event per token):
    split into lines here, in one pass per chunk, rather than through a text and a line decoder
    layered over the body (two more async generators resumed per token; see bench_server_cost).
    """
    pieces: list[str] = []
    finish: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    async for data in _data_fields(chunks):
        chunk = _decode(data, url)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            text = choice.get("text")
            if isinstance(text, str) and text:
                pieces.append(text)
            if choice.get("finish_reason"):
                finish = str(choice["finish_reason"])
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            timings = chunk["timings"]
    if finish is None:
        raise BackendResponseError(
            f"{url} ended the completion stream before the completion finished (no finish_reason): "
            "the server interrupted it. llama_cpp.server does so whenever another request arrives "
            "unless it is started with --interrupt_requests False; otherwise check the server's log."
        )
    finish_reason = "length" if finish == "length" else "stop"
    text = "".join(pieces)
    cached, whole, cache_source = prompt_cache_report(usage, timings)
    if usage is None:
        return StreamedCompletion(
            text, finish_reason, whole or 0, len(pieces), USAGE_COUNTED, cached, cache_source
        )
    return StreamedCompletion(
        text,
        finish_reason,
        int(usage.get("prompt_tokens") or 0) or whole or 0,
        int(usage.get("completion_tokens") or 0),
        USAGE_FROM_SERVER,
        cached,
        cache_source,
    )


def prompt_cache_report(
    usage: dict[str, Any] | None, timings: dict[str, Any] | None
) -> tuple[int | None, int | None, str]:
    """(cached prompt tokens, whole prompt tokens, where from) as the engine reported them.

    OpenAI-style `usage.prompt_tokens_details.cached_tokens` (vLLM with
    --enable-prompt-tokens-details, SGLang, llama-server, Ollama's bridge), else llama-server's
    `timings` (`cache_n` reused, `prompt_n` evaluated). (None, None, "") when neither says: the
    cache is then unknown, never taken for 0.
    """
    details = usage.get("prompt_tokens_details") if usage is not None else None
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is not None:
        return cached, _count(usage.get("prompt_tokens")) if usage is not None else None, CACHE_FROM_USAGE
    if timings is not None:
        reused, evaluated = _count(timings.get("cache_n")), _count(timings.get("prompt_n"))
        if reused is not None and evaluated is not None:
            return reused, reused + evaluated, CACHE_FROM_TIMINGS
    return None, None, ""


def _count(value: object) -> int | None:
    """A token count as the engine sent it; None for anything that is not a count (a bool, -1, text)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


async def _data_fields(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The value of each `data:` line up to `data: [DONE]`, as text; other lines (blank
    separators, comments such as ": ping", event names) are skipped.

    Lines end in LF, CRLF or CR (the SSE format allows each); a chunk may end inside a line or
    a character (an LF byte never occurs inside a UTF-8 character), and a last line without its
    end counts. Bytes that are not UTF-8 are replaced, as a text decoder would. After [DONE] the
    body is read to its end (up to AFTER_DONE_BYTES), so that its connection can serve the next
    completion.
    """
    rest = b""
    async for chunk in chunks:
        if rest:
            chunk, rest = rest + chunk, b""
        if b"\r" in chunk:  # a CR cut from its LF by the chunk's end makes one more blank line
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data == b"[DONE]":
                    await _read_to_end(chunks)
                    return
                yield data.decode("utf-8", "replace")
    if rest.startswith(b"data:") and (data := rest[5:].strip()) != b"[DONE]":
        yield data.decode("utf-8", "replace")


async def _read_to_end(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows [DONE] (nothing but the body's end, from a well-behaved server)."""
    left = AFTER_DONE_BYTES
    async for chunk in chunks:
        left -= len(chunk)
        if left < 0:
            return


def _decode(data: str, url: str) -> dict[str, Any]:
    """One event's JSON object; an error event becomes BackendResponseError with its message."""
    try:
        chunk = json.loads(data)
    except ValueError as exc:
        raise BackendResponseError(
            f"{url} streamed an event that is not JSON ({data[:200]!r}); check that --base-url "
            "points at an OpenAI-compatible server ending in /v1."
        ) from exc
    if not isinstance(chunk, dict):
        raise BackendResponseError(f"{url} streamed JSON that is not an object ({data[:200]!r}).")
    error = chunk.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        raise BackendResponseError(
            f"{url} failed during the completion: {message}. Check the server's log and its "
            "limits (context length, max_tokens)."
        )
    return chunk
