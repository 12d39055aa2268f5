"""Standing grants as a service: listing, reading and revoking them, each through the
viewer's visibility.
"""

from __future__ import annotations

from datetime import datetime
from typing import assert_never

from runtime.domain.errors import GrantNotActive, UnknownGrant
from runtime.domain.external import ORIGIN_KEY
from runtime.domain.tickets import Actor
from runtime.engine.deps import Deps
from runtime.engine.grants import Grant, ends_run_grants, sees_grant, state_of, view
from runtime.engine.journal import record
from runtime.store.base import Transaction
from runtime.store.records import GrantRecord, RunRecord


class Grants:
    """Lists, reads and revokes grants, each through the viewer's visibility."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    async def _views(self, tx: Transaction, found: list[GrantRecord], now: datetime) -> list[Grant]:
        """`found` as people see them; a ``run`` grant whose run ended it reads ``ended``."""
        finished: dict[str, bool] = {}
        for grant in found:
            if grant.scope == "run" and grant.run_id not in finished:
                finished[grant.run_id] = ends_run_grants(await tx.get_run(grant.run_id))
        return [
            view(
                g,
                self._deps.agents.get(g.agent),
                now,
                run_finished=g.scope == "run" and finished.get(g.run_id, False),
            )
            for g in found
        ]

    async def find(
        self,
        viewer: Actor | None,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        active: bool = True,
        limit: int = 100,
    ) -> list[Grant]:
        """Grants `viewer` may see, newest first (see `Runtime.grants`)."""
        now = self._deps.clock.now()
        restricted = viewer is not None and not viewer.operator
        fetch = limit
        async with self._deps.store.transaction() as tx:
            while True:
                found: dict[str, GrantRecord] = {}
                exhausted = True
                # Each id of the person (their linked ids too) is one indexed read.
                for involving in sorted(viewer.ids) if restricted and viewer else [None]:
                    part = await tx.list_grants(
                        run_id=run_id,
                        thread_id=thread_id,
                        involving=involving,
                        active_at=now if active else None,
                        limit=fetch,
                    )
                    found.update((grant.grant_id, grant) for grant in part)
                    exhausted = exhausted and len(part) < fetch
                newest = sorted(
                    found.values(), key=lambda g: (g.created_at, g.grant_id), reverse=True
                )
                shown = await self._views(tx, [g for g in newest if sees_grant(viewer, g)], now)
                if active:
                    # The store knows expiry and revocation, not whether a run ended.
                    shown = [g for g in shown if g.state == "active"]
                if len(shown) >= limit or exhausted:
                    return shown[:limit]
                fetch *= 4

    async def applying_to(
        self, run: RunRecord, viewer: Actor | None, *, active: bool = True
    ) -> list[Grant]:
        """Grants that cover (or covered) calls of `run` that `viewer` may see: its own
        run grants, and thread grants of its thread for its requester. The caller checked
        the viewer sees `run`; seeing a run does not show its grants to everyone who may
        see it (see `sees_grant`)."""
        now = self._deps.clock.now()
        async with self._deps.store.transaction() as tx:
            own = await tx.list_grants(
                run_id=run.run_id, scope="run", active_at=now if active else None
            )
            threads = await tx.list_grants(
                thread_id=run.thread_id, scope="thread", active_at=now if active else None
            )
            found = own + [g for g in threads if g.requester == run.requester]
            if ORIGIN_KEY in run.origin:
                # An external approval's run is one call: the run grants of its session
                # cover it too (see `allow_by_grant`).
                session = await tx.list_grants(
                    thread_id=run.thread_id, scope="run", active_at=now if active else None
                )
                mine = {g.grant_id for g in own}
                found += [
                    g
                    for g in session
                    if g.grant_id not in mine
                    and g.requester == run.requester
                    and g.agent == run.agent
                ]
            found = [g for g in found if sees_grant(viewer, g)]
            found.sort(key=lambda g: (g.created_at, g.grant_id), reverse=True)
            shown = await self._views(tx, found, now)
        return [g for g in shown if g.state == "active"] if active else shown

    async def get(self, grant_id: str, viewer: Actor | None) -> Grant:
        """One grant (`UnknownGrant` if there is none the viewer may see)."""
        async with self._deps.store.transaction() as tx:
            found = await tx.get_grant(grant_id)
            if found is None or not sees_grant(viewer, found):
                raise UnknownGrant(f"no grant {grant_id!r}")
            [shown] = await self._views(tx, [found], self._deps.clock.now())
        return shown

    async def revoke(self, grant_id: str, actor: Actor) -> Grant:
        """Revoke a grant: from the commit on, it covers no call anywhere.

        Raises:
            UnknownGrant: No such grant, or `actor` may not see it.
            GrantNotActive: It was revoked already, it expired, or its run ended.
        """
        now = self._deps.clock.now()
        async with self._deps.store.transaction() as tx:
            found = await tx.get_grant(grant_id)
            if found is None or not sees_grant(actor, found):
                raise UnknownGrant(f"no grant {grant_id!r}")
            run = await tx.get_run(found.run_id) if found.scope == "run" else None
            ended = ends_run_grants(run)
            match state_of(found, now, run_finished=ended):
                case "revoked":
                    raise GrantNotActive(
                        f"grant {grant_id} was already revoked by {found.revoked_by}"
                    )
                case "expired":
                    assert found.expires_at is not None
                    raise GrantNotActive(
                        f"grant {grant_id} already expired at {found.expires_at.isoformat()}"
                    )
                case "ended":
                    raise GrantNotActive(
                        f"grant {grant_id} already ended with its run {found.run_id}"
                    )
                case "active":
                    pass
                case _ as unexpected:
                    assert_never(unexpected)
            if not await tx.revoke_grant(grant_id, by=actor.id, at=now):
                raise GrantNotActive(f"grant {grant_id} was revoked concurrently")
            await record(
                tx,
                found.run_id,
                now,
                "grant_revoked",
                by=actor.id,
                grant_id=grant_id,
                tool=found.tool,
                scope=found.scope,
                platform=actor.platform,
            )
            found.revoked_at, found.revoked_by = now, actor.id
        return view(found, self._deps.agents.get(found.agent), now)
