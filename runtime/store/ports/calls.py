"""The tool calls' part of the store port."""

from __future__ import annotations

from typing import Protocol

from runtime.store.records import CallRecord


class CallPort(Protocol):
    """The tool calls a model proposed, each with its progress.

    Found by id, by run (in batch and position order) or by execution key.
    """

    async def insert_call(self, call: CallRecord) -> None:
        """Add a tool call."""
        ...

    async def update_call(self, call: CallRecord) -> None:
        """Write a tool call's progress back (state, attempts, result, decision ...).

        What the call was proposed with (`runtime.store.records.CALL_CREATED_WITH`: run,
        batch and position, tool, replay policy, execution key, creation time) is
        written by `insert_call` only; the arguments change with an approver's edit.
        """
        ...

    async def get_call(self, call_id: str) -> CallRecord | None:
        """Read one tool call."""
        ...

    async def calls_for_run(self, run_id: str, *, batch: int | None = None) -> list[CallRecord]:
        """A run's calls (optionally of one batch) ordered by batch and position."""
        ...

    async def call_by_execution_key(self, execution_key: str) -> CallRecord | None:
        """The call with this execution key."""
        ...
