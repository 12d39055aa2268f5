"""The console's sign-in token and cookie key when none is configured.

With a SQLite file and no ``SIGNOFF_OPERATOR_TOKEN`` / ``SIGNOFF_COOKIE_SECRET``, the
first `signoff serve` makes both up and keeps them next to the database, in
``<database file>-console.json`` (created once, readable by its owner only). Later
starts read them back, so the printed token stays the same and console sessions survive
a restart. A configured value always wins over the kept one. With an in-memory database
there is nowhere to keep them: they are made up for the process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from bot.settings import Settings, uses_sqlite
from runtime import ConfigurationError

log = logging.getLogger("signoff.serve")

SUFFIX = "-console.json"
"""Appended to the SQLite file's name (like SQLite's own ``-wal`` and ``-shm``)."""

TOKEN_BYTES = 18
COOKIE_SECRET_BYTES = 32

Origin = Literal["configured", "made", "kept", "process"]
"""Where a value came from: the settings, made up and kept now, read back from the kept
file, or made up for this process only."""


@dataclass(frozen=True, slots=True)
class ConsoleSecrets:
    """The operator's sign-in token and the key signing console cookies.

    Attributes:
        operator_token: The built-in operator's sign-in token.
        cookie_secret: The key signing console session cookies.
        token_origin: Where the token came from.
        path: The file they are kept in (None: nothing kept).
    """

    operator_token: str
    cookie_secret: bytes
    token_origin: Origin
    path: Path | None


def sqlite_file(settings: Settings) -> Path | None:
    """The SQLite database file of `settings` (None: not SQLite, or in memory)."""
    if not uses_sqlite(settings):
        return None
    try:
        name = make_url(settings.database_url).database
    except ArgumentError:
        return None
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name)


def kept_path(settings: Settings) -> Path | None:
    """Where the made-up token and cookie key are kept for `settings` (None: nowhere)."""
    database = sqlite_file(settings)
    return None if database is None else database.with_name(database.name + SUFFIX)


def console_secrets(settings: Settings) -> ConsoleSecrets:
    """The token and cookie key `signoff serve` uses: configured, kept or made up.

    Raises:
        ConfigurationError: The kept file cannot be read or written, or is not what
            signoff wrote (it is never overwritten).
    """
    token = settings.operator_token.get_secret_value() if settings.operator_token else None
    cookie = settings.cookie_secret.get_secret_value().encode() if settings.cookie_secret else None
    if token is not None and cookie is not None:
        return ConsoleSecrets(token, cookie, "configured", None)
    path = kept_path(settings)
    if path is None:
        return ConsoleSecrets(
            token or secrets.token_urlsafe(TOKEN_BYTES),
            cookie or secrets.token_bytes(COOKIE_SECRET_BYTES),
            "configured" if token is not None else "process",
            None,
        )
    kept, made = _read_or_create(path)
    return ConsoleSecrets(
        token if token is not None else kept["operator_token"],
        cookie if cookie is not None else kept["cookie_secret"].encode(),
        "configured" if token is not None else ("made" if made else "kept"),
        path,
    )


def _read_or_create(path: Path) -> tuple[dict[str, str], bool]:
    """The kept values, creating the file first if there is none; and whether it was."""
    fresh = {
        "operator_token": secrets.token_urlsafe(TOKEN_BYTES),
        "cookie_secret": secrets.token_urlsafe(COOKIE_SECRET_BYTES),
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            json.dump(fresh, out)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            # Linking fails when the file exists: of two processes starting at once,
            # exactly one creates it and both use what it holds.
            os.link(temporary, path)
            return fresh, True
        except FileExistsError:
            pass
    except OSError as exc:
        raise ConfigurationError(
            f"cannot keep the console's sign-in token in {path}: {exc.strerror} (set "
            "SIGNOFF_OPERATOR_TOKEN and SIGNOFF_COOKIE_SECRET instead)"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()
    return _read(path), False


def _read(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the console's kept sign-in token from {path}: {exc.strerror}"
        ) from None
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if (
        not isinstance(found, dict)
        or not isinstance(found.get("operator_token"), str)
        or len(found["operator_token"]) < 16
        or not isinstance(found.get("cookie_secret"), str)
        or len(found["cookie_secret"]) < 32
    ):
        raise ConfigurationError(
            f"{path} is not the console's kept sign-in token and cookie key; move it away "
            "(a new one is made) or set SIGNOFF_OPERATOR_TOKEN and SIGNOFF_COOKIE_SECRET"
        )
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s can be read by other users of this machine; chmod 600 it", path, extra={})
    return {"operator_token": found["operator_token"], "cookie_secret": found["cookie_secret"]}
