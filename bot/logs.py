"""Logging set-up: JSON lines when not on a terminal, readable lines on one."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else came in through `extra=` and is kept.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line with time, level, logger, message and extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(
            f"{k}={v}"
            for k, v in vars(record).items()
            if k not in _STANDARD and not k.startswith("_")
        )
        stamp = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extras:
            line += f"  {extras}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
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
    `QUIET_LIBRARIES` log warnings and errors only.
    """
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    quiet = max(logging.WARNING, logging.getLevelName(level))
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
