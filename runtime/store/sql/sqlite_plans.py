"""SQLite's dialect as the store configures it, and a failure to open a file.

The statements themselves are compiled once each (`runtime.store.sql.plans`), for SQLite
as for PostgreSQL.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect

from runtime.domain.errors import StorageError


class OpenFailed(StorageError):
    """The database file could not be opened.

    Attributes:
        reason: SQLite's own message.
    """

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"cannot open {where}: {reason}")
        self.reason = reason


def sqlite_dialect() -> Dialect:
    """SQLAlchemy's SQLite dialect, configured for this machine's SQLite library."""
    dialect = sqlite.dialect()
    returning = sqlite3.sqlite_version_info >= (3, 35)
    # An offline dialect does not know the library's version; RETURNING came with 3.35.
    dialect.insert_returning = returning
    dialect.update_returning = returning
    dialect.delete_returning = returning
    return dialect
