"""The agent of the multi-replica grant tests (loaded by each `signoff serve` with
SIGNOFF_APP): ``shop`` refunds one order a run and asks first, unless a grant covers it."""

from __future__ import annotations

from typing import Any

from runtime import Agent, ModelRequest, ScriptedModel, final_reply, tool, tool_call_reply


def agents() -> list[Agent]:
    """``shop``, whose ``refund`` allows grants for the run and the thread."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        if request.messages[-1].get("role") == "tool":
            return final_reply(str(request.messages[-1]["content"]))
        return tool_call_reply(("refund", {"order": "A1", "amount": 20.0}))

    @tool(permission="ask", grants=["run", "thread"])
    async def refund(order: str, amount: float) -> str:
        """Refund an order."""
        return f"refunded {order}"

    return [Agent("shop", "Refund.", ScriptedModel(reply), [refund])]
