"""Signed-out console sessions, shared by every process on the database."""

from __future__ import annotations

from datetime import datetime

from runtime.engine.deps import Deps


class Sessions:
    """Remembers revoked sessions until they would have expired anyway."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    async def revoke(self, session_id: str, expires_at: datetime) -> None:
        """Refuse `session_id` until `expires_at`; forget revocations that have lapsed."""
        async with self._deps.store.transaction() as tx:
            await tx.forget_revoked_sessions(self._deps.clock.now())
            await tx.revoke_session(session_id, expires_at)

    async def revoked(self, session_id: str) -> bool:
        """Whether `session_id` was signed out."""
        async with self._deps.store.transaction() as tx:
            return await tx.session_revoked(session_id)
