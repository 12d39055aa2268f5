"""Tool results that are errors, as the Anthropic SDK sends them to the fake provider."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_llm import Call, FakeLLM, Turn

from runtime import Agent, MemoryStore, RunStatus, Runtime, tool

pytestmark = pytest.mark.timeout(60)


async def test_failed_and_denied_results_are_marked_is_error(
    fake: FakeLLM, models: Callable[..., Any]
) -> None:
    @tool(permission="allow", replay_policy="safe")
    async def balance(account: str) -> str:
        """Read an account's balance."""
        return f"{account}: 1000.00"

    @tool(permission="allow")
    async def refund(account: str) -> str:
        """Refund an account."""
        raise RuntimeError("the ledger is locked")

    @tool(permission="deny")
    async def close(account: str) -> str:
        """Close an account."""
        return "closed"

    agent = Agent("bank", "Careful.", models("anthropic"), tools=[balance, refund, close])
    runtime = Runtime(MemoryStore(), [agent])
    fake.script(
        Turn.ask(
            Call("balance", {"account": "A"}),
            Call("refund", {"account": "A"}),
            Call("close", {"account": "A"}),
        ),
        Turn.say("Done."),
    )

    done = await runtime.start("bank", "Sort out account A.", requester="U1")

    assert done.status is RunStatus.DONE
    second = fake.requests[1]
    assert second.problem is None
    results = [
        block
        for message in second.messages
        for block in message["content"]
        if isinstance(message["content"], list) and block["type"] == "tool_result"
    ]
    assert [(r["content"], r.get("is_error")) for r in results] == [
        ("A: 1000.00", None),
        ("Error: RuntimeError: the ledger is locked", True),
        ("Permission denied: this tool is not allowed", True),
    ]
