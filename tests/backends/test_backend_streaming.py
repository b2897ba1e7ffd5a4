"""Reading streamed /completions answers: pieces, finish reason, usage, cut-off and error streams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import pytest

from agent.backends.streaming import AFTER_DONE_BYTES, USAGE_COUNTED, StreamedCompletion, read_completion_stream
from agent.errors import BackendResponseError

URL = "http://127.0.0.1:9/v1/completions"


def event(text: str | None = None, finish: str | None = None, **extra: object) -> str:
    """One `data:` line as engines send it."""
    choices = [] if text is None else [{"index": 0, "text": text, "finish_reason": finish}]
    return "data: " + json.dumps({"object": "text_completion", "choices": choices, **extra})


def read(lines: list[str], *, end: str = "\n", cut: int | None = None) -> StreamedCompletion:
    """read_completion_stream over `lines` ended by `end`, in chunks of `cut` bytes (default: one
    chunk a line, as engines send a token's event), from sync test code."""
    body = "".join(line + end for line in lines).encode()
    chunks = (
        [line.encode() + end.encode() for line in lines]
        if cut is None
        else [body[i : i + cut] for i in range(0, len(body), cut)]
    )

    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return anyio.run(read_completion_stream, source(), URL)


def test_pieces_finish_reason_and_usage_from_the_server() -> None:
    """Text pieces join, pings and blank lines are skipped, the usage event gives the counts."""
    lines = [
        ": ping - 2026",
        event("<think>a"),
        "",
        event("</think>"),
        event("", "stop"),
        event(None, usage={"prompt_tokens": 40, "completion_tokens": 5}),
        "data: [DONE]",
    ]
    assert read(lines) == StreamedCompletion("<think>a</think>", "stop", 40, 5, "server")


def test_a_stream_without_usage_counts_its_pieces() -> None:
    """llama_cpp.server sends no usage: completion tokens are the pieces, prompt tokens 0 (estimated)."""
    lines = [event("SEL"), event("ECT 1"), event("", "length"), "data: [DONE]"]
    assert read(lines) == StreamedCompletion("SELECT 1", "length", 0, 2, USAGE_COUNTED)


def test_a_stream_cut_off_before_its_finish_reason_is_an_error() -> None:
    """[DONE] (or the end) without a finish reason says the server interrupted the request."""
    with pytest.raises(BackendResponseError, match="--interrupt_requests False"):
        read([event("SEL"), "data: [DONE]"])
    with pytest.raises(BackendResponseError, match="before the completion finished"):
        read([event("SEL")])


def test_error_events_and_broken_json_are_errors_that_say_what_happened() -> None:
    """An error event carries the server's message; a non-JSON event names the base URL check."""
    with pytest.raises(BackendResponseError, match="failed during the completion: context too long"):
        read([event("a"), 'data: {"error": {"message": "context too long"}}'])
    with pytest.raises(BackendResponseError, match="not JSON"):
        read(["data: <html>"])


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("cut", [None, 1, 3, 7, 64, 4096])
def test_chunks_cut_anywhere_read_as_whole_lines(end: str, cut: int | None) -> None:
    """Chunks cut inside a line, inside a UTF-8 character or between CR and LF, with any of the
    three line ends, read as the events the lines are."""
    lines = [
        ": ping",
        event("é€"),
        "",
        event("𝄞 x"),
        "",
        event("", "stop"),
        event(None, usage={"prompt_tokens": 9, "completion_tokens": 2}),
        "",
        "data: [DONE]",
    ]
    assert read(lines, end=end, cut=cut) == StreamedCompletion("é€𝄞 x", "stop", 9, 2, "server")


def test_a_last_line_without_its_end_and_bytes_that_are_not_utf8_still_read() -> None:
    """The stream's last event counts without its newline, and bytes that are not UTF-8 become
    U+FFFD as a text decoder makes them; nothing after [DONE] is read."""

    async def unended() -> AsyncIterator[bytes]:
        yield b'data: {"choices": [{"text": "a\\u00e9\xff", "finish_reason": null}]}\n\n'
        yield b'data: {"choices": [{"text": "", "finish_reason": "stop"}]}'

    async def after_done() -> AsyncIterator[bytes]:
        yield (event("b", "stop") + "\ndata: [DONE]\n").encode()
        yield b"data: <html>\n"

    assert anyio.run(read_completion_stream, unended(), URL) == StreamedCompletion(
        "a\u00e9\ufffd", "stop", 0, 1, USAGE_COUNTED
    )
    assert anyio.run(read_completion_stream, after_done(), URL) == StreamedCompletion(
        "b", "stop", 0, 1, USAGE_COUNTED
    )


def test_the_body_is_read_to_its_end_after_done_within_a_bound() -> None:
    """What follows [DONE] is read (so the connection can be reused) and ignored; a server that goes
    on sending past AFTER_DONE_BYTES is left there, never waited for to the end."""
    consumed: list[int] = []

    async def body(after: int) -> AsyncIterator[bytes]:
        yield (event("SELECT 1", "stop") + "\n").encode()
        yield b"data: [DONE]\n\n"
        for number in range(after):
            consumed.append(number)
            yield b"x" * 4096

    async def read_body(after: int) -> StreamedCompletion:
        return await read_completion_stream(body(after), URL)

    assert anyio.run(read_body, 3).text == "SELECT 1"
    assert len(consumed) == 3
    consumed.clear()
    assert anyio.run(read_body, 10_000).text == "SELECT 1"
    assert len(consumed) == AFTER_DONE_BYTES // 4096 + 1
