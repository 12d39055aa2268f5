"""Telling why the database could not be reached or used."""

from __future__ import annotations

from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError


class ConstraintViolated(Exception):
    """A constraint of the database refused a row (raised by a driver run directly; the
    transaction reports it as the caller's ``violation``).

    Args:
        message: The driver's message.
        waiting: The row was one of a write that waited to be sent with a later statement
            (`runtime.store.sql.postgres_direct`), not the caller's own.
    """

    def __init__(self, message: str, *, waiting: bool = False) -> None:
        super().__init__(message)
        self.waiting = waiting


def describe_database(url: URL) -> str:
    """Name a database for messages: the SQLite file, or the URL without its password."""
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            return "the in-memory SQLite database"
        return f"the SQLite database {url.database}"
    return f"the database {url.render_as_string(hide_password=True)}"


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` is the driver failing to reach the database, raised bare.

    SQLAlchemy wraps the driver's errors once a connection exists; while one is being
    opened, asyncpg's own errors (``CannotConnectNowError``, ``TooManyConnectionsError``
    ...) and the socket's (a refused connection, an unknown host, a timeout) come
    through as they are.
    """
    if isinstance(exc, OSError | TimeoutError):
        return True
    return type(exc).__module__.split(".")[0] == "asyncpg"


def unreachable_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def driver_reason(exc: SQLAlchemyError) -> str:
    """The driver's own message, without SQLAlchemy's statement dump and help link."""
    original = getattr(exc, "orig", None)
    return str(original) if original is not None else str(exc).split(" (Background")[0]
