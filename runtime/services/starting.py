"""Starting runs: thread history and membership, idempotency keys, the first claim."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runtime.domain.agent import Agent
from runtime.domain.errors import AccessDenied, IdempotencyConflict
from runtime.domain.policies import REQUESTER_GROUPS
from runtime.domain.states import RunStatus
from runtime.domain.tickets import Actor
from runtime.domain.visibility import is_chat_thread, may_join_thread
from runtime.engine.deps import Deps
from runtime.engine.journal import record, record_claim
from runtime.engine.moves import claim_new
from runtime.engine.results import RunResult, run_result
from runtime.engine.traces import start_trace
from runtime.services.driving import Driving
from runtime.services.queries import Queries
from runtime.store.base import DuplicateKey, Transaction
from runtime.store.records import IdempotencyRecord, RunRecord

# How many runs of a thread are checked for its participants, and how many of the latest
# ones make up a new run's history.
_THREAD_SCAN = 1000
_HISTORY_RUNS = 50

IdempotencyKeys = tuple[str, str, str] | Sequence[tuple[str, str, str]] | None
"""One ``(scope, key, fingerprint)``, several, or none."""


def idempotency_keys(given: IdempotencyKeys) -> list[tuple[str, str, str]]:
    """One ``(scope, key, fingerprint)`` or several, as a list."""
    if given is None:
        return []
    if len(given) == 3 and isinstance(given[0], str):
        scope, key, fingerprint = given
        return [(str(scope), str(key), str(fingerprint))]
    return [tuple(item) for item in given]  # type: ignore[misc]


class Starter:
    """Creates runs, once per idempotency key, and drives them when asked to wait."""

    def __init__(self, deps: Deps, queries: Queries, driving: Driving) -> None:
        self._deps = deps
        self._queries = queries
        self._driving = driving

    async def start(
        self,
        agent: Agent,
        input: str,
        *,
        requester: str | None,
        thread_id: str | None,
        origin: dict[str, Any] | None,
        wait: bool,
        idempotency: IdempotencyKeys,
        joining_as: Actor | None,
        opening: str | None = None,
    ) -> RunResult:
        """Start a run (see `Runtime.start`).

        With `opening`, the model is told that instead of `input` (which people see),
        and nothing of the thread's earlier runs: an external approval's request.
        """
        deps = self._deps
        now = deps.clock.now()
        history = []
        if thread_id is not None and opening is None:
            history = await self._history(thread_id, joining_as)
        origin = dict(origin or {})
        if (
            joining_as is not None
            and joining_as.groups
            and joining_as.id == requester
            and REQUESTER_GROUPS not in origin
        ):
            # What the edge verified of who starts it, for the agent's policy to read.
            origin[REQUESTER_GROUPS] = sorted(joining_as.groups)
        run = RunRecord(
            run_id=deps.ids.new_id("run"),
            thread_id=thread_id or deps.ids.new_id("th"),
            agent=agent.name,
            agent_version=agent.version,
            status=RunStatus.QUEUED,
            input=input,
            requester=requester,
            created_at=now,
            updated_at=now,
            origin=origin,
            messages=[*history, {"role": "user", "content": opening or input}],
        )
        run.trace_context = start_trace(deps, run)
        # Not waiting, the run goes to a free place of the local worker if there is one.
        slot = None if wait else deps.reserve_slot()
        try:
            if wait or slot is not None:
                # Inserted already claimed by this worker, so starting costs one commit.
                claim_new(deps, run, now)
            for attempt in (1, 2):
                try:
                    earlier_id = await self._insert(run, idempotency)
                    break
                except DuplicateKey:
                    # A concurrent request with the same key won the insert; read its run.
                    if attempt == 2:
                        raise
            if earlier_id is not None:
                return dataclasses.replace(await self._queries.get(earlier_id), replayed=True)
            if wait:
                return await self._driving.drive_claimed(run, model_marked=True, new=True)
            # The run as stored (a worker woken by the commit may already be driving it).
            started = run_result(run, ())
            if slot is not None:
                slot.use(run.run_id, self._driving.proceed(run, model_marked=True))
            return started
        finally:
            if slot is not None:
                slot.release()

    async def _history(self, thread_id: str, joining_as: Actor | None) -> list[dict[str, Any]]:
        """The thread's earlier exchanges, once `joining_as` is known to take part."""
        if joining_as is not None and is_chat_thread(thread_id):
            raise AccessDenied(
                f"thread {thread_id!r} belongs to a chat platform; continue it there"
            )
        async with self._deps.store.transaction() as tx:
            earlier = await tx.list_runs(thread_id=thread_id, limit=_THREAD_SCAN)
        if joining_as is not None and not may_join_thread(
            joining_as, (r.requester for r in earlier)
        ):
            raise AccessDenied(
                f"{joining_as.id} does not take part in thread {thread_id!r}; "
                "only its participants and operators may continue it"
            )
        history: list[dict[str, Any]] = []
        for previous in reversed(earlier[:_HISTORY_RUNS]):
            if previous.status is RunStatus.DONE:
                history.append({"role": "user", "content": previous.input})
                history.append({"role": "assistant", "content": previous.final_text})
        return history

    async def _insert(self, run: RunRecord, idempotency: IdempotencyKeys) -> str | None:
        async with self._deps.store.transaction() as tx:
            earlier_id = await self.use_keys(tx, idempotency_keys(idempotency), run.run_id)
            if earlier_id is not None:
                return earlier_id
            await tx.insert_run(run)
            await record(
                tx,
                run.run_id,
                run.created_at,
                "run_started",
                by=run.requester,
                agent=run.agent,
                input=run.input,
                thread_id=run.thread_id,
                origin=run.origin,
            )
            if run.lease_owner is not None:  # inserted claimed: the claim is recorded too
                await record_claim(tx, run, run.created_at)
        return None

    async def use_keys(
        self, tx: Transaction, keys: Sequence[tuple[str, str, str]], run_id: str
    ) -> str | None:
        """The run an already used key started (None if every key is new); every new key
        is recorded for that run, or for `run_id`."""
        earlier_id = None
        new = []
        for scope, key, fingerprint in keys:
            earlier = await tx.get_idempotency(scope, key)
            if earlier is None:
                new.append((scope, key, fingerprint))
            elif earlier.fingerprint != fingerprint:
                raise IdempotencyConflict(
                    f"idempotency key {key!r} was already used with a different request body"
                )
            elif earlier_id is None:
                earlier_id = earlier.run_id
        now = self._deps.clock.now()
        for scope, key, fingerprint in new:
            await tx.insert_idempotency(
                IdempotencyRecord(scope, key, fingerprint, earlier_id or run_id, now)
            )
        return earlier_id

    async def forget_idempotency(self, scope: str, before: datetime) -> int:
        """Forget the keys of `scope` first used before `before`; how many."""
        async with self._deps.store.transaction() as tx:
            return await tx.forget_idempotency(scope, before)
