"""Process-wide logging configuration, applied once by the CLI.

`json` (the default for `sits serve`) writes one JSON object per line with the request id and
trace id of the request being handled; `text` is for a terminal. Credentials never reach a log
line: bearer tokens and key-shaped strings are redacted in every record, whatever logged them.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from contextvars import ContextVar

import orjson

# Set by the HTTP edge for the request being handled (a task-local value).
current_request_id: ContextVar[str | None] = ContextVar("sits_request_id", default=None)
current_trace_id: ContextVar[str | None] = ContextVar("sits_trace_id", default=None)

_SECRET = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+|\b(sk|rk|pk)-[A-Za-z0-9_-]{8,}")
_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime", "taskName"}


def redact(text: str) -> str:
    return _SECRET.sub(lambda m: (m.group(1) or "") + "[REDACTED]", text)


class JsonFormatter(logging.Formatter):
    converter = time.gmtime  # the "Z" in the timestamp means UTC

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        request_id, trace_id = current_request_id.get(), current_trace_id.get()
        if request_id:
            entry["request_id"] = request_id
        if trace_id:
            entry["trace_id"] = trace_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = redact(value) if isinstance(value, str) else value
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return orjson.dumps(entry, default=str).decode()


class RedactingTextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        request_id = current_request_id.get()
        text = super().format(record)
        return redact(f"{text} request_id={request_id}" if request_id else text)


def configure_logging(level: str, fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingTextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
