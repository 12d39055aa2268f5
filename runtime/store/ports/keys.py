"""Idempotency keys and revoked console sessions: the store port's remembered keys."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runtime.store.records import IdempotencyRecord


class KeyPort(Protocol):
    """Keys remembered for a while, then forgotten.

    Idempotency keys (with the run their first use started) and revoked console
    sessions.
    """

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        """The record of a key already used in `scope`, if any."""
        ...

    async def insert_idempotency(self, item: IdempotencyRecord) -> None:
        """Remember a key. Raises `DuplicateKey` if (scope, key) exists."""
        ...

    async def forget_idempotency(self, scope: str, before: datetime) -> int:
        """Forget keys of `scope` first used before `before`; return how many."""
        ...

    async def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse a session from now until `expires_at` (idempotent)."""
        ...

    async def session_revoked(self, session_id: str) -> bool:
        """Whether a session was revoked (and has not expired since)."""
        ...

    async def forget_revoked_sessions(self, before: datetime) -> int:
        """Forget revocations of sessions that expired before `before`; return how many."""
        ...
