"""How long a text or a JSON value is to a JavaScript client: what a declared size limit counts.

Claude Code, like most MCP hosts, is JavaScript: it measures a string's `length` (UTF-16 code
units, so a character outside the BMP, an emoji, counts 2) and writes numbers as
`JSON.stringify` does (`1e+20` becomes `100000000000000000000`). Python's `len` and `json.dumps`
count both differently, by up to 4 times for a row of such numbers: a limit checked with them
could be exceeded on the client.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Exponents of d.ddd × 10**n where Python's repr and JavaScript switch to writing one.
_PYTHON_LARGE_EXPONENT, _JS_LARGE_EXPONENT = 16, 21
_PYTHON_SMALL_EXPONENT, _JS_SMALL_EXPONENT = -4, -7
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # as JSON.stringify writes
_STRING_OR_EXPONENT_FLOAT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|(-?\d+(?:\.\d+)?e[+-]\d+)')


def text_chars(text: str) -> int:
    """`text`'s length in UTF-16 code units, as JavaScript's `String.length` counts it."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def json_chars(value: Any) -> int:
    """The length of `value` as compact JSON (`JSON.stringify`), counted as JavaScript does
    (never less; a float Python writes as `12.0` counts its 2 extra characters)."""
    dumped = _COMPACT.encode(value)
    return text_chars(dumped) + _number_excess(dumped)


def js_number_chars(number: float) -> int:
    """The length of a float as `JSON.stringify` writes it.

    Python's repr and JavaScript pick the same shortest round-trip digits; they differ in where
    they switch to an exponent (Python below 1e-4 and from 1e16, JavaScript below 1e-6 and from
    1e21), in Python's `.0` on whole numbers, and in its two-digit exponents (`1e-07`).
    """
    if not math.isfinite(number):
        return 4  # `null`
    if number == 0:
        return 1  # 0, and -0 too
    text = repr(number)
    mantissa, _, power = text.partition("e")
    if not power:  # 12.5, 0.0001, 12.0 (JavaScript: 12)
        return len(text) - 2 if text.endswith(".0") else len(text)
    sign = 1 if mantissa.startswith("-") else 0
    digits = len(mantissa) - sign - (1 if "." in mantissa else 0)
    exponent = int(power)  # number = d.ddd × 10**exponent
    if _PYTHON_LARGE_EXPONENT <= exponent < _JS_LARGE_EXPONENT:  # 100000000000000000000
        return sign + exponent + 1
    if _JS_SMALL_EXPONENT < exponent < _PYTHON_SMALL_EXPONENT:  # 0.0000015
        return sign + 1 - exponent + digits
    return len(text) - 1 if -10 < exponent < 0 else len(text)  # 1e-7, where Python writes 1e-07


def _number_excess(dumped: str) -> int:
    """How much longer the floats of Python's JSON `dumped` are in JavaScript's.

    Only floats Python writes with an exponent (`1.5e+20`) can be longer there; one it writes
    plainly never is (`12.0` is `12` there) and counts at Python's length: a small overcount,
    never an undercount. Strings are skipped whole, so text that looks like a number is none.
    """
    if "e+" not in dumped and "e-" not in dumped:  # the common case: no float with an exponent
        return 0
    floats = (token for token in _STRING_OR_EXPONENT_FLOAT.findall(dumped) if token)
    return sum(max(0, js_number_chars(float(token)) - len(token)) for token in floats)
