"""An OpenAI Agents SDK agent process whose refunds ask signoff (killed and restarted by tests).

Usage: ``python -m tests.clients.openai_agent_process URL STATE_DIR LEDGER``.

It prints ``asked <approval JSON>`` when signoff answers an approval request, and
``final <output>`` when the run ends. The refund tool appends a line to LEDGER each time
it really runs. Started again after a kill, it resumes the saved run: its scripted model
then only has the run's last turn left.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
from agents import Agent, RunConfig, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from adapters.client import AsyncSignoffClient, RetryPolicy
from adapters.client.openai_agents import FileStateStore, SignoffRunner

RUN_ID = "conv-restart"
TOKEN = "tok-agent-billing-0123456789"


async def main(url: str, state_dir: str, ledger: str) -> None:
    @function_tool(needs_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        with open(ledger, "a", encoding="utf-8") as out:
            out.write(json.dumps({"order": order, "amount": amount}) + "\n")
        return f"refunded {amount} on {order}"

    store = FileStateStore(state_dir)
    last_turn = [assistant_message("Refund done.")]
    first_turn = [function_call("refund", {"order": "A-1", "amount": 40}, call_id="call_1")]
    resuming = store.load(RUN_ID) is not None
    model = ScriptedModel([last_turn] if resuming else [first_turn, last_turn])
    agent = Agent(name="billing", instructions="Refund orders.", model=model, tools=[refund])

    async def show(response: httpx.Response) -> None:
        if response.request.method == "POST" and response.url.path == "/api/approvals":
            await response.aread()
            print("asked", json.dumps(response.json()), flush=True)

    async with (
        httpx.AsyncClient(trust_env=False, event_hooks={"response": [show]}) as http,
        AsyncSignoffClient(
            url, token=TOKEN, retry=RetryPolicy(first_delay=0.05), http_client=http
        ) as client,
    ):
        runner = SignoffRunner(
            client, agent="billing", store=store, run_config=RunConfig(tracing_disabled=True)
        )
        result = await runner.run(agent, "Refund order A-1", run_id=RUN_ID)
    print("final", result.final_output, flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
