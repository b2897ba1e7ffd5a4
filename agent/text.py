"""Small text helpers used across the agent and the server: counts, plurals, and untrusted text made safe.

Text from untrusted sources (the model, table names, cell values) made safe to show.
Pure functions shared by the tool texts and the MCP server: each keeps shown text on one
line, makes invisible or direction-changing characters visible as escapes, and bounds how
much of a long value is echoed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

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
    return escape_unsafe(cut(text, limit))  # what `cut` adds needs no escape


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


# What a renderer of Markdown or HTML could turn into markup or a link, in text meant as plain
# (`plain_label`). Look-alikes are folded first (NFKC: `ｈｔｔｐｓ：／／`, `＜`, `＠`), so each rule sees
# what a reader, and a renderer, would take the text for.
_MARKDOWN_ESCAPE = re.compile(r"\\(?=[!-/:-@\[-`{-~]|$)")  # `\*`, `\[`: Markdown drops the backslash
_IDEOGRAPHIC_DOT = re.compile(r"\u3002(?=xn--|[^\W\d_]{2})")  # `evil。com`: a dot in a host name
_TAG_OPENER = re.compile(r"<(?=[A-Za-z/!?])")  # `<b>`, `</p>`, `<!--`, `<?xml`, `<http://...>`
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")  # `&lt;`, `&#60;`
# A backslash before a scheme's colon, or a host's dot, is read as none (Markdown drops it).
_SCHEME = re.compile(r"(?<![\w+.-])([^\W\d_][\w+.-]+)\\?:(//(?=[^\s/\]]))?(?=\S)")  # `https://`, `data:`
_SLASHES = re.compile(r"(?<![\[/])//(?=[^\s/\]])")  # linkify links `//host` (any host) on its own
_WWW = re.compile(r"(?i)(?<![\w.-])(www)\\?\.")  # GFM links a bare www.x
# A host name: labels and dots ending in a top-level-domain-like label (`evil.com`, `例え.jp`,
# `xn--p1ai`), or an IPv4 address before a path or port. Some linkifiers link any of them bare.
_HOST = re.compile(
    r"(?<![\w.-])(?:[\w-]+\\?\.)+(?:xn--[\w-]+|[^\W\d_]{2,})(?![\w-])"
    r"|(?<![\w.])\d{1,3}(?:\\?\.\d{1,3}){3}(?![\w.])"
)
_HOST_DOT = re.compile(r"\\?\.")
_AT = re.compile(r"(?<!\[)@(?![\]\s]|$)")  # `ann@example.com`, `@someone`
_LINK_SYNTAX = re.compile(r"\]\s*[(\[:]|!\[")  # `[text](url)`, `[text][ref]`, `[ref]: url`, `![img]`
_LOOSE_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")  # emphasis; `snake_case` is kept
# Inline markup characters, written as look-alikes no renderer reads: emphasis, strikethrough, code.
_INLINE_MARKUP = str.maketrans({"*": "\u2217", "~": "\u223c", "`": "\u02cb"})
# Block markup at the start of a line: a heading, a quote, a list item.
_LINE_START = re.compile(r"#{1,6}(?=\s|$)|>|[-+](?=\s|$)|\d{1,9}[.)](?=\s|$)")
_LINE_START_LOOKALIKES = str.maketrans(
    {"#": "\uff03", ">": "\u203a", "-": "\u2010", "+": "\uff0b", ".": "\uff0e", ")": "\uff09"}
)
_RULE_LINE = re.compile(r"[-=|:\s]*[-=][-=|:\s]*")  # a thematic break, a setext underline, a table's rule row
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")  # letters that show as nothing


def plain_label(text: str, limit: int) -> str:
    """Untrusted text shown as one plain line a form, Markdown or chat renderer cannot turn into anything.

    Look-alikes are folded (NFKC) before anything is checked; whitespace (newlines included)
    becomes single spaces; control, format, bidi and invisible characters become escapes; tag
    openers and entities are broken up (`< b>`, `& lt;`); a scheme (`https[://]`,
    `javascript[:]`), `[//]`, host names (`evil[.]com/x`, `www[.]x`, `g[.]Name`: linkify links any
    name ending in a top-level domain) and `@` (`ann[@]example[.]com`) are defanged; Markdown's own
    characters become look-alikes no renderer reads (`∗`, `∼`, `ˋ`, `ˍ` for an underscore outside a
    word, `⧵` for an escaping backslash), link syntax is spaced out (`[a] (b)`), and a heading,
    quote, list or rule marker at the start is written as a look-alike (`＃`). Applying it again
    changes nothing. Past `limit` characters the text ends with an ellipsis.
    """
    source = text[: limit * 8 + 256]  # whitespace and escapes change the length; the rest is never shown
    # NFKC would make our own ellipsis three dots: each part around it is folded on its own.
    folded = "\u2026".join(unicodedata.normalize("NFKC", part) for part in source.split("\u2026"))
    flat = " ".join(folded.split())
    # Each rule runs only where its character is (a regex starting with a lookbehind tries every
    # position): an option's line costs a few dozen microseconds, not hundreds.
    if "\u3002" in flat:
        flat = _IDEOGRAPHIC_DOT.sub(".", flat)
    flat = _escape_invisible(escape_unsafe(flat))
    flat = _TAG_OPENER.sub("< ", _ENTITY.sub("& ", flat))
    if "www" in flat.lower():
        flat = _WWW.sub(r"\1[.]", flat)
    if ":" in flat:
        flat = _SCHEME.sub(_defanged_scheme, flat)
    if "//" in flat:
        flat = _SLASHES.sub("[//]", flat)
    if "." in flat:
        flat = _HOST.sub(lambda m: _HOST_DOT.sub("[.]", m.group()), flat)
    if "@" in flat:
        flat = _AT.sub("[@]", flat)
    if "\\" in flat:
        flat = _MARKDOWN_ESCAPE.sub("\u29f5", flat)
    flat = flat.translate(_INLINE_MARKUP)
    if "_" in flat:
        flat = _LOOSE_UNDERSCORE.sub("\u02cd", flat)
    flat = _LINK_SYNTAX.sub(lambda m: f"{m.group()[0]} {m.group()[-1]}", flat)  # idempotent: `] (` stays
    if _RULE_LINE.fullmatch(flat):
        flat = flat.translate(_LINE_START_LOOKALIKES).replace("=", "\uff1d")
    elif (start := _LINE_START.match(flat)) is not None:
        flat = start.group().translate(_LINE_START_LOOKALIKES) + flat[start.end() :]
    if len(flat) <= limit and len(source) == len(text):
        return flat
    return flat[: limit - 1].rstrip() + "…"


def _defanged_scheme(match: re.Match[str]) -> str:
    return f"{match[1]}[://]" if match[2] else f"{match[1]}[:]"


def _escape_invisible(text: str) -> str:
    """`text` with every other format, private-use or separator character, and the letters that show as
    nothing (Hangul fillers, the blank Braille pattern), written as escapes too."""
    if text.isascii():
        return text
    hidden = {
        c
        for c in set(text)
        if not c.isascii() and (c in _BLANK_LETTERS or unicodedata.category(c) in _INVISIBLE_CATEGORIES)
    }
    if not hidden:
        return text
    return "".join(
        (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}") if c in hidden else c for c in text
    )


__all__ = [
    "ECHO_CHARS",
    "NAME_CHARS",
    "QUOTE_CHARS",
    "cut",
    "did_you_mean",
    "display_name",
    "echo_value",
    "escape_unsafe",
    "lone_surrogate_at",
    "nearest",
    "plain_label",
    "quoted_name",
    "quoted_text",
    "replace_lone_surrogates",
]


NEAR_CUTOFF = 0.6  # difflib's ratio for a suggestion (`--samles` -> `--samples`, `max_row` -> `max-rows`)


def nearest(word: str, choices: Iterable[str], cutoff: float = NEAR_CUTOFF) -> str | None:
    """The choice closest to `word` (a mistyped flag, key, alias or tool), None when none is close."""
    import difflib  # only an error needs it

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`; did you mean --samples?` for the choice closest to `word`, or nothing."""
    near = nearest(word, choices)
    return f"; did you mean {near}?" if near is not None else ""


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
