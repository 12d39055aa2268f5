"""Logging set-up: JSON lines when not on a terminal, readable lines on one.

While tracing is on (``docs/tracing.md``), a line logged inside a span carries the
span's ``trace_id`` and ``span_id`` (`set_trace_ids`), in both formats.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

# Attributes every LogRecord has; anything else came in through `extra=` and is kept.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}

# Credentials as they appear in header values and in the reprs of refused header lines.
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s\"',;\\]+")
_CREDENTIAL_HEADER = re.compile(
    r"(?i)\b(authorization|cookie|x-signoff-signature|x-slack-signature)(\s*:\s*)[^\r\n'\"]+"
)
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """`text` with bearer/basic credentials and credential header values masked."""
    text = _CREDENTIAL.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _CREDENTIAL_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


class RedactingFilter(logging.Filter):
    """Keeps request header values and credentials out of every log line.

    aiohttp logs a request its parser refuses (a control character in a header value, a
    malformed header line) at ERROR with the exception, whose text quotes the offending
    line, header value (a token) included. Such a record becomes one line naming only
    the client, the kind of error and the status. Every other record's message and
    exception text lose bearer/basic credentials and credential header values.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite `record` in place; never drops it."""
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else None
            record.msg = "refused a malformed HTTP request from %s: %s (HTTP %s)"
            record.args = (remote or "an unknown client", type(exc).__name__, exc.code)
            record.exc_info = None
            record.exc_text = None
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(text)
            record.exc_info = None
        return True


TraceIds = Callable[[], tuple[str, str] | None]
"""The current span's trace and span ids in hex (None: no span is current)."""

_trace_ids: TraceIds | None = None


def set_trace_ids(ids: TraceIds | None) -> None:
    """Stamp every line logged inside a span with ``trace_id`` and ``span_id`` as `ids`
    reads them (None: stop). Set when tracing starts; off, no line pays for it."""
    global _trace_ids
    _trace_ids = ids


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's extra fields, then the current span's ids (when tracing is on)."""
    fields = {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
    ids = _trace_ids() if _trace_ids is not None else None
    if ids is not None:
        fields.setdefault("trace_id", ids[0])
        fields.setdefault("span_id", ids[1])
    return fields


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str | None:
    if record.exc_info:
        return redact(formatter.formatException(record.exc_info))
    return record.exc_text or None


class JsonFormatter(logging.Formatter):
    """One JSON object per line with time, level, logger, message and extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_fields(record))
        exception = _exception_text(self, record)
        if exception:
            entry["exception"] = exception
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        stamp = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extras:
            line += f"  {extras}"
        exception = _exception_text(self, record)
        if exception:
            line += "\n" + exception
        return line


# Libraries that log what they send or store at their lower levels: SQL parameters (a
# secret tool argument is a parameter), HTTP bodies sent to model providers (the
# transcript holds arguments as the model wrote them), chat payloads. They only ever log
# warnings and errors, whatever SIGNOFF_LOG_LEVEL says, so no level reveals a secret.
QUIET_LIBRARIES = (
    "aiosqlite",
    "sqlalchemy",
    "alembic",
    "asyncpg",
    "aiohttp",
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "openai",
    "anthropic",
    "mcp",
    "slack_sdk",
    "slack_bolt",
    "discord",
    "websockets",
    "urllib3",
    "asyncio",
)


def configure_logging(level: str = "INFO", *, json_lines: bool | None = None) -> None:
    """Send logs to stderr, as JSON unless stderr is a terminal.

    `level` applies to signoff's own loggers (``signoff.*``); the libraries in
    `QUIET_LIBRARIES` log warnings and errors only. No line holds a request header value
    or a credential (`RedactingFilter`).
    """
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    quiet = max(logging.WARNING, logging.getLevelName(level))
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
