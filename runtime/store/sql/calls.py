"""Tool calls."""

from __future__ import annotations

from sqlalchemy import bindparam, insert, select, update

from runtime.store.records import CALL_CREATED_WITH, CallRecord
from runtime.store.schema import tool_calls
from runtime.store.sql.convert import without
from runtime.store.sql.executing import TransactionCore
from runtime.store.sql.rows import CALLS

_INSERT_CALL = insert(tool_calls)
_UPDATE_CALL = update(tool_calls).where(tool_calls.c.call_id == bindparam("b_call_id"))
_CALLS_FOR_RUN = (
    select(tool_calls)
    .where(tool_calls.c.run_id == bindparam("run_id"))
    .order_by(tool_calls.c.batch, tool_calls.c.seq)
)
_CALLS_FOR_BATCH = (
    select(tool_calls)
    .where(tool_calls.c.run_id == bindparam("run_id"), tool_calls.c.batch == bindparam("batch"))
    .order_by(tool_calls.c.seq)
)
_GET_CALL = select(tool_calls).where(tool_calls.c.call_id == bindparam("call_id"))
_CALL_BY_KEY = select(tool_calls).where(tool_calls.c.execution_key == bindparam("key"))


_WAITING = "insert_call"
"""Names a call's insert while it waits (`TransactionCore._write`'s ``key``)."""


class CallStatements(TransactionCore):
    """The tool calls part of `SQLTransaction`."""

    async def insert_call(self, call: CallRecord) -> None:
        """Add a tool call; `ValueError` if its id or execution key exists (on PostgreSQL,
        from a later statement of the transaction: see `_write`)."""
        values = CALLS.values(call)
        await self._write(_INSERT_CALL, values, table=tool_calls, key=(_WAITING, call.call_id))
        self._fresh_calls.add(call.call_id)
        if self._direct is not None:
            self._inserted_calls[call.call_id] = values
        self.wrote = True

    async def update_call(self, call: CallRecord) -> None:
        """Write a tool call back; `ValueError` if it does not exist (on PostgreSQL, from a
        later statement of the transaction: see `_write`)."""
        values = CALLS.values(call)
        inserted = self._inserted_calls.get(call.call_id)
        if inserted is not None:
            # Inserted by this transaction: while the insert waits it writes the call as
            # it is now (what it was proposed with stays as inserted).
            whole = {**values, **{name: inserted[name] for name in CALL_CREATED_WITH}}
            if self._rewrite((_WAITING, call.call_id), _INSERT_CALL, whole):
                self.wrote = True
                return
            del self._inserted_calls[call.call_id]  # the insert went: updated from now on
        values = without(values, "call_id", *CALL_CREATED_WITH)
        values["b_call_id"] = call.call_id
        missing = f"call {call.call_id} does not exist"
        await self._write(_UPDATE_CALL, values, table=tool_calls, check=missing)
        self.wrote = True

    async def get_call(self, call_id: str) -> CallRecord | None:
        """Read one tool call."""
        row = (await self._execute(_GET_CALL, {"call_id": call_id})).first()
        return None if row is None else CALLS.record(row)

    async def calls_for_run(self, run_id: str, *, batch: int | None = None) -> list[CallRecord]:
        """A run's calls (optionally of one batch) ordered by batch and position."""
        if batch is None:
            result = await self._execute(_CALLS_FOR_RUN, {"run_id": run_id})
        else:
            result = await self._execute(_CALLS_FOR_BATCH, {"run_id": run_id, "batch": batch})
        return [CALLS.record(row) for row in result]

    async def call_by_execution_key(self, execution_key: str) -> CallRecord | None:
        """The call with this execution key."""
        row = (await self._execute(_CALL_BY_KEY, {"key": execution_key})).first()
        return None if row is None else CALLS.record(row)
