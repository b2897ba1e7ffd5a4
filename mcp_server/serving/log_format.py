"""Log lines for people (text) or for log shippers (one JSON object per line)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that log a line per HTTP request at INFO: shown only with --log-level DEBUG.
CHATTY_LOGGERS = ("httpx", "httpcore")


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


def configure_logging(level: str, log_format: str = "text") -> None:
    """Log to stderr only (on stdio, stdout carries the protocol), as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(level if level == "DEBUG" else "WARNING")
