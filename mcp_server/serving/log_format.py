"""Log lines for people (text) or for log shippers (one JSON object per line)."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
from datetime import UTC, datetime

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that log a line per HTTP request at INFO: shown only with --log-level DEBUG.
CHATTY_LOGGERS = ("httpx", "httpcore")
# The MCP SDK logs session ids (32 hex digits) whole; with one, a token's holder can use the session.
_SESSION_ID = re.compile(r"\b[0-9a-f]{32}\b")
TAG_CHARS = 8


def session_tag(session_id: str) -> str:
    """A short hash of a session id, for logs: the id itself lets anyone holding the token use it."""
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()[:TAG_CHARS]


class SessionIdFilter(logging.Filter):
    """Rewrites the session ids in the MCP SDK's log lines to a short hash (`session:1a2b3c4d`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Always keeps the record; only its text changes."""
        if record.name.startswith("mcp."):
            message = record.getMessage()
            hidden = _SESSION_ID.sub(lambda m: f"session:{session_tag(m.group())}", message)
            if hidden != message:
                record.msg, record.args = hidden, None
        return True


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record: time, level, event, logger, question_id (null outside a question)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON; `extra` fields question_id and token are carried over."""
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
            "logger": record.name,
            "question_id": getattr(record, "question_id", None),
        }
        token = getattr(record, "token", None)
        if token is not None:
            entry["token"] = token
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextLogFormatter(logging.Formatter):
    """TEXT_FORMAT, and `[question ID]` after the message of a question's lines: the id a remote
    client is given with an error, so the operator finds its detail."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        """The record as text; a question's id (from `extra`) closes its first line."""
        text = super().format(record)
        question_id = getattr(record, "question_id", None)
        if question_id is None:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} [question {question_id}]{newline}{rest}"


def configure_logging(level: str, log_format: str = "text") -> None:
    """Log to stderr only (on stdio, stdout carries the protocol), as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else TextLogFormatter())
    handler.addFilter(SessionIdFilter())
    logging.basicConfig(level=level, handlers=[handler])
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(level if level == "DEBUG" else "WARNING")
