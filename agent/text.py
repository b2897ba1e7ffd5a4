"""Small text helpers used across the agent and the server: counts, plurals, and untrusted text made safe.

Text from untrusted sources (the model, table names, cell values) made safe to show.
Pure functions shared by the tool texts and the MCP server: each keeps shown text on one
line, makes invisible or direction-changing characters visible as escapes, and bounds how
much of a long value is echoed.
"""

from __future__ import annotations

import re

# Characters that break a line, hide text or reorder it on screen: C0/C1 controls, soft
# hyphen, bidi marks, embeddings, overrides and isolates, zero-width characters, line and
# paragraph separators, the BOM, interlinear annotations, and lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069"
    "\ufeff\ufff9-\ufffb\ud800-\udfff]"
)
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ECHO_CHARS = 60  # how much of a value the model sent is echoed back to it
NAME_CHARS = 120  # how much of a table or column name is shown
QUOTE_CHARS = 500  # how much of an untrusted message (an SQLite error) is quoted


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape_unsafe(text: str, keep: str = "") -> str:
    """`text` with control, bidi, zero-width and surrogate characters written as escapes.

    Characters in `keep` (say "\\n\\t" for a multi-line SQL block) stay as they are.
    """
    if not keep:
        return _UNSAFE.sub(_escape_one, text)
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape_one(m), text)


def cut(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[+{len(text) - limit:,} chars]"


def echo_value(text: str, limit: int = ECHO_CHARS) -> str:
    """Model-written text shown back to it: cut to `limit`, escaped, on one line."""
    if len(text) <= limit:
        return escape_unsafe(text)
    return f"{escape_unsafe(text[:limit])}…[+{len(text) - limit:,} chars]"


def display_name(name: str, limit: int = NAME_CHARS) -> str:
    """A table or column name for display: bare when SQL-plain, else double-quoted and escaped.

    A name longer than `limit` is cut after the closing quote, so a name can never pose
    as text of ours (a newline and `SYSTEM: ...` in a table name stays visibly quoted).
    """
    if _BARE_NAME.fullmatch(name) and len(name) <= limit:
        return name
    return quoted_name(name, limit)


def quoted_name(name: str, limit: int = NAME_CHARS) -> str:
    """The name always double-quoted (quotes doubled), escaped and cut to `limit`."""
    shown = escape_unsafe(name[:limit].replace('"', '""'))
    more = f"…[+{len(name) - limit:,} chars]" if len(name) > limit else ""
    return f'"{shown}"{more}'


def quoted_text(text: str, limit: int = QUOTE_CHARS, quote: str = '"') -> str:
    """Untrusted prose (an error that may echo cell text) on one line, visibly quoted.

    Backslashes and the quote are escaped, then control, bidi and invisible characters, so the
    text can neither end its quotes nor its line; past `limit` it is cut after the closing quote.
    """
    shown = escape_unsafe(text[:limit].replace("\\", "\\\\").replace(quote, "\\" + quote))
    more = f"…[+{len(text) - limit:,} chars]" if len(text) > limit else ""
    return f"{quote}{shown}{quote}{more}"


def lone_surrogate_at(text: str) -> int | None:
    """Index of the first lone surrogate (text that cannot be UTF-8), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def replace_lone_surrogates(text: str) -> str:
    """`text` with surrogate pairs joined and lone surrogates replaced by U+FFFD."""
    if lone_surrogate_at(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# What a renderer of Markdown or HTML could turn into markup or a link, in text meant as plain:
_TAG_OPENER = re.compile(r"<(?=[A-Za-z/!?])")  # `<b>`, `</p>`, `<!--`, `<?xml`, `<http://...>`
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")  # `&lt;`, `&#60;`
_SCHEME = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,30}):(?=/)")  # `https://`, `file:/`
_WWW = re.compile(r"(?i)(?<![A-Za-z0-9.-])(www)\.")  # GFM links a bare www.example.com
_AT = re.compile(r"(?<=[A-Za-z0-9._%+-])@(?=[A-Za-z0-9-]+\.)")  # GFM links a bare ann@example.com
_LINK_SYNTAX = re.compile(r"\]\s*[(\[:]|!\[")  # `[text](url)`, `[text][ref]`, `[ref]: url`, `![img]`


def plain_label(text: str, limit: int) -> str:
    """Untrusted text shown as one plain line a form or chat renderer cannot turn into anything.

    Whitespace (newlines included) becomes single spaces; control, bidi and invisible
    characters become escapes; tag openers, entities, link syntax, URLs (`https[:]//`),
    `www[.]` and e-mail addresses (`ann[@]example.com`) are broken up so no renderer makes
    markup or a link of them; past `limit` characters the text ends with an ellipsis.
    """
    flat = escape_unsafe(" ".join(text.split()))
    flat = _TAG_OPENER.sub("< ", _ENTITY.sub("& ", flat))
    flat = _SCHEME.sub(r"\1[:]", _WWW.sub(r"\1[.]", _AT.sub("[@]", flat)))
    flat = _LINK_SYNTAX.sub(lambda m: f"{m.group()[0]} {m.group()[-1]}", flat)  # idempotent: `] (` stays
    return flat if len(flat) <= limit else flat[:limit - 1].rstrip() + "…"


__all__ = ["ECHO_CHARS", "NAME_CHARS", "QUOTE_CHARS", "cut", "display_name", "echo_value",
           "escape_unsafe", "lone_surrogate_at", "plain_label", "quoted_name", "quoted_text",
           "replace_lone_surrogates"]


def format_count(n: int) -> str:
    """An integer with thousands separators: 1,234."""
    return f"{n:,}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 row`, `3 rows` (with separators)."""
    return f"{format_count(n)} {word if n == 1 else many or word + 's'}"


def sentence(text: str) -> str:
    """`text` ending in one full stop, whether or not it had one: `...variable.` never `..`."""
    text = text.rstrip()
    return text if text.endswith((".", "?", "!")) else f"{text}."
