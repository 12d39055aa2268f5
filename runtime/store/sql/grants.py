"""Standing grants."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Select, and_, bindparam, insert, or_, select, update

from runtime.store.records import GrantRecord
from runtime.store.schema import grants
from runtime.store.sql.convert import to_micros
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import GRANTS

_INSERT_GRANT = insert(grants)
_GET_GRANT = select(grants).where(grants.c.grant_id == bindparam("grant_id"))
_GRANT_LIVE = and_(
    grants.c.revoked_at.is_(None),
    or_(grants.c.expires_at.is_(None), grants.c.expires_at > bindparam("now")),
)
_ACTIVE_GRANTS = (
    select(grants)
    .where(
        grants.c.agent == bindparam("agent"),
        grants.c.tool == bindparam("tool"),
        _GRANT_LIVE,
        or_(
            and_(grants.c.scope == "run", grants.c.run_id == bindparam("run_id")),
            and_(grants.c.scope == "thread", grants.c.thread_id == bindparam("thread_id")),
        ),
    )
    .order_by(grants.c.created_at, grants.c.grant_id)
)
_REVOKE_GRANT = (
    update(grants)
    .where(grants.c.grant_id == bindparam("b_grant_id"), grants.c.revoked_at.is_(None))
    .values(revoked_at=bindparam("at"), revoked_by=bindparam("by"))
)


@cache
def _listing(
    by_run: bool, by_thread: bool, by_scope: bool, involving: bool, live: bool
) -> Select[Any]:
    """The listing statement for one combination of filters, built once: its values are
    bound parameters, so the compiled statement is reused (the SQLite writer caches plans
    by statement)."""
    statement = select(grants)
    if by_run:
        statement = statement.where(grants.c.run_id == bindparam("run_id"))
    if by_thread:
        statement = statement.where(grants.c.thread_id == bindparam("thread_id"))
    if by_scope:
        statement = statement.where(grants.c.scope == bindparam("scope"))
    if involving:
        statement = statement.where(
            or_(
                grants.c.granted_by == bindparam("involving"),
                grants.c.requester == bindparam("involving"),
            )
        )
    if live:
        statement = statement.where(_GRANT_LIVE)
    return statement.order_by(grants.c.created_at.desc(), grants.c.grant_id.desc()).limit(
        bindparam("limit")
    )


class GrantStatements(TransactionCore):
    """The standing grants part of `SQLTransaction`."""

    async def insert_grant(self, grant: GrantRecord) -> None:
        """Add a grant; `ValueError` if its id exists or its run does not."""
        await self._execute(_INSERT_GRANT, GRANTS.values(grant))
        self.wrote = True

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        """Read one grant."""
        row = (await self._execute(_GET_GRANT, {"grant_id": grant_id})).first()
        return None if row is None else GRANTS.record(row)

    async def active_grants(
        self, *, agent: str, tool: str, run_id: str, thread_id: str, now: datetime
    ) -> list[GrantRecord]:
        """Grants that may cover a call now, oldest first (see the protocol)."""
        params = {
            "agent": agent,
            "tool": tool,
            "run_id": run_id,
            "thread_id": thread_id,
            "now": to_micros(now),
        }
        return [GRANTS.record(row) for row in await self._execute(_ACTIVE_GRANTS, params)]

    async def list_grants(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        scope: str | None = None,
        involving: str | None = None,
        active_at: datetime | None = None,
        limit: int = 100,
    ) -> list[GrantRecord]:
        """Grants, newest first, filtered by every argument given."""
        statement = _listing(
            run_id is not None,
            thread_id is not None,
            scope is not None,
            involving is not None,
            active_at is not None,
        )
        given = {"run_id": run_id, "thread_id": thread_id, "scope": scope, "involving": involving}
        params: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        params["limit"] = limit
        if active_at is not None:
            params["now"] = to_micros(active_at)
        return [GRANTS.record(row) for row in await self._execute(statement, params)]

    async def revoke_grant(self, grant_id: str, *, by: str, at: datetime) -> bool:
        """Compare-and-set: revoke a grant that is not revoked yet."""
        params = {"b_grant_id": grant_id, "at": to_micros(at), "by": by}
        if (await self._execute(_REVOKE_GRANT, params)).rowcount != 1:
            return False
        self.wrote = True
        return True
