"""Sealed MCP sign-ins over every store: kept, replaced, forgotten, rolled back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runtime.store.base import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def test_records_round_trip_replace_and_forget(store: Store) -> None:
    async with store.transaction() as tx:
        assert await tx.read_mcp_oauth("crm") is None
        await tx.write_mcp_oauth("crm", "sealed-1", T0)
        await tx.write_mcp_oauth("tickets", "other", T0)
    async with store.transaction() as tx:
        assert await tx.read_mcp_oauth("crm") == "sealed-1"
        await tx.write_mcp_oauth("crm", "sealed-2", T0)
    async with store.transaction() as tx:
        assert await tx.read_mcp_oauth("crm") == "sealed-2"
        assert await tx.read_mcp_oauth("tickets") == "other"
        assert await tx.delete_mcp_oauth("crm") is True
        assert await tx.delete_mcp_oauth("crm") is False
    async with store.transaction() as tx:
        assert await tx.read_mcp_oauth("crm") is None
        assert await tx.read_mcp_oauth("tickets") == "other"


async def test_a_failed_transaction_keeps_the_record_before_it(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.write_mcp_oauth("crm", "kept", T0)
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.write_mcp_oauth("crm", "lost", T0)
            await tx.delete_mcp_oauth("crm")
            raise RuntimeError("rolled back")
    async with store.transaction() as tx:
        assert await tx.read_mcp_oauth("crm") == "kept"
