"""Agents for `bench/serve_load.py` (loaded by `signoff serve` with SIGNOFF_APP).

One agent, ``refunds``, whose only tool needs approval: every run calls the scripted model
once, parks on ``refund``, and after an ``allow`` runs the tool and gives its final answer.
No network, no files.
"""

from __future__ import annotations

from runtime import Agent, ModelRequest, ModelResponse, ScriptedModel, final_reply, tool_call_reply


class BenchModel(ScriptedModel):
    """`ScriptedModel` without its request log.

    `ScriptedModel.calls` keeps every request (transcript included) for tests to inspect;
    over thousands of runs that list would show up in the process's memory, which a real
    model client does not hold.
    """

    async def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            return await super().complete(request)
        finally:
            self.calls.clear()


def agents() -> list[Agent]:
    """The ``refunds`` agent: one `ask` tool, two model turns."""
    model = BenchModel(
        [
            tool_call_reply(("refund", {"order": "A-1", "amount": 25})),
            final_reply("Refunded."),
        ]
    )
    refunds = Agent("refunds", "Refund what you are asked to.", model)

    @refunds.tool(permission="ask")
    async def refund(order: str, amount: float) -> str:
        """Refund an order."""
        return f"refunded {amount} on {order}"

    return [refunds]
