"""Sealed OAuth records of MCP servers."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, insert, select

from runtime.store.schema import mcp_oauth
from runtime.store.sql.convert import to_micros
from runtime.store.sql.executing import TransactionCore

_READ = select(mcp_oauth.c.sealed).where(mcp_oauth.c.server == bindparam("server"))
_UPDATE = (
    mcp_oauth.update()
    .where(mcp_oauth.c.server == bindparam("b_server"))
    .values(sealed=bindparam("sealed"), updated_at=bindparam("updated_at"))
)
_INSERT = insert(mcp_oauth)
_DELETE = mcp_oauth.delete().where(mcp_oauth.c.server == bindparam("server"))


class McpOAuthStatements(TransactionCore):
    """The MCP sign-ins part of `SQLTransaction`."""

    async def read_mcp_oauth(self, server: str) -> str | None:
        """The sealed record of `server`, if it has one."""
        row = (await self._execute(_READ, {"server": server})).first()
        return None if row is None else str(row.sealed)

    async def write_mcp_oauth(self, server: str, sealed: str, at: datetime) -> None:
        """Keep `sealed` as the record of `server` (replacing any it had)."""
        values = {"sealed": sealed, "updated_at": to_micros(at)}
        count = (await self._execute(_UPDATE, {"b_server": server, **values})).rowcount
        if count == 0:
            await self._execute(_INSERT, {"server": server, **values})
        self.wrote = True

    async def delete_mcp_oauth(self, server: str) -> bool:
        """Forget the record of `server`; whether there was one."""
        count = (await self._execute(_DELETE, {"server": server})).rowcount
        self.wrote = self.wrote or count > 0
        return count > 0
