"""Agents for process-level tests of `signoff serve` (loaded with SIGNOFF_APP).

The `transfer` tool appends one line per real execution to the file named by
``SIGNOFF_TEST_LEDGER`` so a test can count executions across process restarts.
"""

from __future__ import annotations

import json
import os

from runtime import Agent, ScriptedModel, current_tool_context, final_reply, tool_call_reply


def agents() -> list[Agent]:
    """One agent whose only tool needs approval."""
    model = ScriptedModel(
        [
            tool_call_reply(("transfer", {"account": "ACC-1", "amount": 500})),
            final_reply("Transfer complete."),
        ]
    )
    payments = Agent("payments", "Move money carefully.", model)

    @payments.tool(permission="ask", replay_policy="manual")
    def transfer(account: str, amount: int) -> str:
        """Transfer money to an account."""
        context = current_tool_context()
        with open(os.environ["SIGNOFF_TEST_LEDGER"], "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({"key": context.execution_key, "amount": amount}) + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        return f"sent {amount} to {account}"

    return [payments]
