"""Sign-ins to MCP servers that use OAuth: the store port's sealed records."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class McpOAuthPort(Protocol):
    """One sealed (encrypted) record per MCP server: its OAuth client, tokens and any
    sign-in under way. The store never sees what the record holds."""

    async def read_mcp_oauth(self, server: str) -> str | None:
        """The sealed record of `server`, if it has one."""
        ...

    async def write_mcp_oauth(self, server: str, sealed: str, at: datetime) -> None:
        """Keep `sealed` as the record of `server` (replacing any it had)."""
        ...

    async def delete_mcp_oauth(self, server: str) -> bool:
        """Forget the record of `server`; whether there was one."""
        ...
