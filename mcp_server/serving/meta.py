"""A request's `_meta`, checked before anything reads it: the client's, so any JSON at all.

What reads it, under us and in our code: the trace context (OpenTelemetry's propagators read
`traceparent`, `tracestate` and `baggage`, or the fields OTEL_PROPAGATORS names) in the SDK's span
of every message and in ours (serving/tracing.py, over HTTP); and `progressToken`, which every
progress notification of the call echoes. A trace field that is not text crashed both (`7` has
no `len()`, no `encode()`). So, before them (answer/door.py runs `checked_meta` right after
the call's quota):

- a trace field that is not text of a header's size (ASCII, at most TRACE_FIELD_CHARS) is left
  out: W3C has a receiver ignore an invalid `traceparent`, so the call goes on untraced by its
  caller, as one without the field;
- a `progressToken` that is neither text of at most PROGRESS_TOKEN_CHARS nor a whole number in
  SQLite's (and JSON's usual) 64-bit range is refused, as is a `_meta` that is not an object,
  with an error naming the field (the SDK says only "Invalid request parameters");
- every other key is the SDK's to validate (its `io.modelcontextprotocol/*` keys) or nobody's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

W3C_FIELDS = ("traceparent", "tracestate", "baggage")
TRACE_FIELD_CHARS = 8_192  # W3C Baggage's limit for the whole header; traceparent is 55
PROGRESS_TOKEN_CHARS = 1_000  # echoed in every progress notification of the call
_INT64 = (-(2**63), 2**63 - 1)


class MetaRefused(ValueError):
    """A `_meta` the request cannot be served with; the message names the field and what it takes."""


def trace_fields() -> frozenset[str]:
    """The `_meta` keys the configured propagators read (W3C's at least)."""
    from opentelemetry import propagate  # loaded by the MCP SDK already (its span of every message)

    return frozenset({*W3C_FIELDS, *propagate.get_global_textmap().fields})


def checked_meta(meta: object, fields: frozenset[str], *, request: bool = True) -> Mapping[str, Any]:
    """`meta` with every trace field in `fields` that is not header text left out; MetaRefused for a
    `_meta` or a `progressToken` that cannot be served (a notification's are left out instead)."""
    if not isinstance(meta, Mapping):
        if request:
            raise MetaRefused(f"`_meta` must be an object, not {json_kind(meta)}")
        return {}
    kept = {key: value for key, value in meta.items() if key not in fields or header_text(value)}
    token = kept.get("progressToken", "")
    if not progress_token(token):
        if request:
            raise MetaRefused(
                f"`_meta.progressToken` must be text of at most {PROGRESS_TOKEN_CHARS:,} "
                f"characters or a whole number (the token progress notifications "
                f"carry), not {json_kind(token)}"
            )
        del kept["progressToken"]
    return meta if len(kept) == len(meta) else kept


def header_text(value: object) -> bool:
    """True for what a propagator can read as a header's value: ASCII text of a header's size."""
    return isinstance(value, str) and len(value) <= TRACE_FIELD_CHARS and value.isascii()


def progress_token(value: object) -> bool:
    """True for a progress token the call can echo: bounded text, or a whole number (not a boolean)."""
    if isinstance(value, str):
        return len(value) <= PROGRESS_TOKEN_CHARS
    return isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]


def json_kind(value: object) -> str:
    """What kind of JSON value `value` is, in words; never the value (it may be anything)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"text of {len(value):,} characters"
    if isinstance(value, int):
        return "a whole number" if _INT64[0] <= value <= _INT64[1] else "a whole number past 64 bits"
    kinds = ((float, "a decimal number"), (list, "a list"), (Mapping, "an object"))
    return next((kind for cls, kind in kinds if isinstance(value, cls)), "another kind of value")
