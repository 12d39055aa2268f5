"""Sign-ins to MCP servers that use OAuth, wired to the store and the settings.

The tokens are sealed with ``SIGNOFF_SECRETS_KEY`` and kept in the database's
``mcp_oauth`` table, so every replica (and every restart) uses the same sign-in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from bot.settings import Settings
from runtime import ConfigurationError
from runtime.store.base import Store

if TYPE_CHECKING:
    from adapters.mcp.config import ServerConfig
    from adapters.mcp.oauth import SignIns


class StoreRecords:
    """Sealed records in the store; a store of its own (``SIGNOFF_DATABASE_URL``) until
    `use` gives it the process's.

    MCP servers connect before the runtime's store is opened, so the first reads may
    come before there is one to share.
    """

    def __init__(self, open_store: Callable[[], Awaitable[Store]]) -> None:
        self._open_store = open_store
        self._store: Store | None = None
        self._owned: Store | None = None

    def use(self, store: Store) -> None:
        """Read and write through `store` from now on."""
        self._store = store

    async def store(self) -> Store:
        """The store records go to."""
        if self._store is not None:
            return self._store
        if self._owned is None:
            self._owned = await self._open_store()
        return self._owned

    async def read(self, server: str) -> str | None:
        """The sealed record of `server`, if any."""
        async with (await self.store()).transaction() as tx:
            return await tx.read_mcp_oauth(server)

    async def write(self, server: str, sealed: str) -> None:
        """Keep `sealed` as the record of `server`."""
        async with (await self.store()).transaction() as tx:
            await tx.write_mcp_oauth(server, sealed, datetime.now(UTC))

    async def close(self) -> None:
        """Close the store of its own, if it opened one."""
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned.close()


def oauth_sign_ins(
    settings: Settings,
    servers: Sequence[ServerConfig],
    open_store: Callable[[], Awaitable[Store]],
) -> SignIns | None:
    """The sign-ins of the servers with ``auth = "oauth"``; None when there are none.

    `open_store` opens (and migrates) a store of their own, used until the process's
    store is given to them.

    Raises:
        ConfigurationError: ``SIGNOFF_SECRETS_KEY`` or ``SIGNOFF_PUBLIC_URL`` is missing.
    """
    from adapters.mcp.config import HttpServer

    oauth = [s for s in servers if isinstance(s, HttpServer) and s.oauth is not None]
    if not oauth:
        return None
    from adapters.mcp.oauth import CALLBACK_PATH, SecretBox, SignIns

    names = ", ".join(repr(s.name) for s in oauth)
    if settings.secrets_key is None:
        raise ConfigurationError(
            f"MCP servers {names} sign in with OAuth: set SIGNOFF_SECRETS_KEY (or "
            "SIGNOFF_SECRETS_KEY_FILE), the key their tokens are sealed with"
        )
    if settings.public_url is None:
        raise ConfigurationError(
            f"MCP servers {names} sign in with OAuth: set SIGNOFF_PUBLIC_URL, the console's "
            f"address, which the authorization server sends people back to ({CALLBACK_PATH})"
        )
    try:
        box = SecretBox(settings.secrets_key.get_secret_value())
    except ValueError as exc:
        raise ConfigurationError(f"SIGNOFF_SECRETS_KEY: {exc}") from None
    redirect = settings.public_url.rstrip("/") + CALLBACK_PATH
    return SignIns(oauth, StoreRecords(open_store), box, redirect)
