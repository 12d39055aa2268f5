"""Agents for the multi-replica tests (loaded by each `signoff serve` with SIGNOFF_APP).

Every real tool execution appends one fsynced JSON line, with the executing process's
id, to the file named by ``SIGNOFF_TEST_LEDGER``, so a test can count executions across
replicas and kills.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from runtime import Agent, ScriptedModel, current_tool_context, final_reply, tool_call_reply


def _write(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Append `entry` to the ledger; return the entries written before it."""
    path = Path(os.environ["SIGNOFF_TEST_LEDGER"])
    earlier = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    with path.open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps({**entry, "pid": os.getpid()}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    return earlier


def agents() -> list[Agent]:
    """``payments`` (a transfer that waits for approval) and ``inventory`` (a tool that
    hangs the first time it runs, until its process is killed)."""
    payments = Agent(
        "payments",
        "Move money carefully.",
        ScriptedModel(
            [
                tool_call_reply(("transfer", {"account": "ACC-1", "amount": 500})),
                final_reply("Transfer complete."),
            ]
        ),
    )

    @payments.tool(permission="ask", replay_policy="manual")
    def transfer(account: str, amount: int) -> str:
        """Transfer money to an account."""
        _write({"tool": "transfer", "key": current_tool_context().execution_key})
        return f"sent {amount} to {account}"

    inventory = Agent(
        "inventory",
        "Keep the stock in sync.",
        ScriptedModel(
            [
                tool_call_reply(("sync_stock", {"sku": "SKU-1"})),
                final_reply("Stock synced."),
            ]
        ),
    )

    @inventory.tool(permission="allow", replay_policy="idempotent")
    async def sync_stock(sku: str) -> str:
        """Push the stock level of a SKU to the warehouse (idempotent by execution key)."""
        key = current_tool_context().execution_key
        earlier = _write({"tool": "sync_stock", "key": key})
        if not any(e["key"] == key for e in earlier):
            await asyncio.sleep(3600)  # the first attempt hangs: its process gets killed
        return f"{sku} synced"

    return [payments, inventory]
