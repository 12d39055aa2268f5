"""Idempotency keys and revoked console sessions."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, insert, select

from runtime.store.base import DuplicateKey
from runtime.store.records import IdempotencyRecord
from runtime.store.schema import idempotency_keys, revoked_sessions
from runtime.store.sql.convert import to_micros
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import IDEMPOTENCY_KEYS

_FORGET_KEYS = idempotency_keys.delete().where(
    idempotency_keys.c.scope == bindparam("scope"),
    idempotency_keys.c.created_at < bindparam("before"),
)
_SESSION_REVOKED = select(revoked_sessions.c.session_id).where(
    revoked_sessions.c.session_id == bindparam("session_id")
)
_REVOKE_SESSION = insert(revoked_sessions)
_FORGET_SESSIONS = revoked_sessions.delete().where(
    revoked_sessions.c.expires_at < bindparam("before")
)


_INSERT_KEY = insert(idempotency_keys)
_GET_KEY = select(idempotency_keys).where(
    idempotency_keys.c.scope == bindparam("scope"), idempotency_keys.c.key == bindparam("key")
)


class KeyStatements(TransactionCore):
    """The idempotency keys and sessions part of `SQLTransaction`."""

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        """The record of a key already used in `scope`, if any."""
        row = (await self._execute(_GET_KEY, {"scope": scope, "key": key})).first()
        return None if row is None else IDEMPOTENCY_KEYS.record(row)

    async def insert_idempotency(self, item: IdempotencyRecord) -> None:
        """Remember a key; `DuplicateKey` if (scope, key) exists."""
        values = IDEMPOTENCY_KEYS.values(item)
        await self._execute(_INSERT_KEY, values, violation=DuplicateKey)
        self.wrote = True

    async def forget_idempotency(self, scope: str, before: datetime) -> int:
        """Forget keys of `scope` first used before `before`; return how many."""
        params = {"scope": scope, "before": to_micros(before)}
        count = (await self._execute(_FORGET_KEYS, params)).rowcount
        self.wrote = self.wrote or count > 0
        return count

    async def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse a session from now until `expires_at` (idempotent)."""
        if await self.session_revoked(session_id):
            return
        await self._execute(
            _REVOKE_SESSION, {"session_id": session_id, "expires_at": to_micros(expires_at)}
        )
        self.wrote = True

    async def session_revoked(self, session_id: str) -> bool:
        """Whether a session was revoked."""
        found = await self._execute(_SESSION_REVOKED, {"session_id": session_id})
        return found.first() is not None

    async def forget_revoked_sessions(self, before: datetime) -> int:
        """Forget revocations of sessions that expired before `before`."""
        params = {"before": to_micros(before)}
        count = (await self._execute(_FORGET_SESSIONS, params)).rowcount
        self.wrote = self.wrote or count > 0
        return count
