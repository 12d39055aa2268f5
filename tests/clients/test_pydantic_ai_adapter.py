"""The Pydantic AI adapter against a real signoff: an agent with ``requires_approval``
tools, driven by `run_with_approvals` over HTTP, its deferred approvals decided by a
person through the JSON API.

The agents run on Pydantic AI's `FunctionModel` (no network): it proposes scripted tool
calls, then reports what the tools answered. The docs' example runs as a subprocess that
is killed between the request and the decision, and run again on its saved history.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from adapters.client import AsyncSignoffClient, SignoffClient
from adapters.client.pydantic_ai import (
    load_history,
    pending_approvals,
    run_with_approvals,
    run_with_approvals_sync,
)
from tests.clients.inprocess_signoff import (
    AGENT_TOKEN,
    Signoff,
    example_source,
    serve_approvals,
    start_example,
)

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "pydantic-ai.md"
WHY = "The customer asked for their money back."


def refund_agent(
    calls: Sequence[tuple[str, dict[str, Any]]], ledger: list[tuple[str, dict[str, Any]]]
) -> Agent[None, str | DeferredToolRequests]:
    """An agent whose model proposes `calls` at once, then reports every tool's answer.

    ``refund`` needs approval, ``lookup_order`` does not; both append each real execution
    to `ledger`.
    """

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in returns))])
        proposed = [
            ToolCallPart(name, args, tool_call_id=f"call-{index}")
            for index, (name, args) in enumerate(calls)
        ]
        return ModelResponse(parts=[TextPart(WHY), *proposed])

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(respond), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order, "amount": amount}))
        return f"refunded {amount} on {order}"

    @agent.tool_plain
    def lookup_order(order: str) -> str:
        """Look an order up."""
        ledger.append(("lookup_order", {"order": order}))
        return f"{order}: paid 50"

    return agent


@pytest.fixture
async def signoff(tmp_path: Path) -> AsyncIterator[Signoff]:
    async with serve_approvals(tmp_path) as served:
        yield served


@contextmanager
def closing_its_loop() -> Iterator[None]:
    """Closes the event loop ``run_sync`` leaves set in the thread it ran in (Pydantic AI
    keeps one per thread for the next call), so that no loop outlives the test."""
    try:
        yield
    finally:
        policy = asyncio.get_event_loop_policy()
        with suppress(RuntimeError):
            policy.get_event_loop().close()
        policy.set_event_loop(None)


async def test_an_allowed_call_runs_as_asked_next_to_a_call_that_needs_no_approval(
    signoff: Signoff,
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    calls: list[tuple[str, dict[str, Any]]] = [
        ("lookup_order", {"order": "A-1"}),
        ("refund", {"order": "A-1", "amount": 50}),
    ]
    agent = refund_agent(calls, ledger)
    saved: list[bytes] = []

    def conversation() -> Any:
        with SignoffClient(signoff.url, token=AGENT_TOKEN) as client, closing_its_loop():
            return run_with_approvals_sync(
                agent,
                "Refund A-1",
                client=client,
                agent="support",
                conversation_id="conversation-1",
                save=saved.append,
            )

    running = asyncio.create_task(asyncio.to_thread(conversation))
    [card] = await signoff.cards.wait_for(1)
    assert card.external
    assert card.tool == "refund"
    assert card.args == {"order": "A-1", "amount": 50}
    assert card.why == WHY
    assert ledger == [("lookup_order", {"order": "A-1"})]
    await signoff.decide(card.ticket_id, decision="allow")
    result = await running

    assert result.output == "A-1: paid 50 | refunded 50 on A-1"
    assert ledger == [
        ("lookup_order", {"order": "A-1"}),
        ("refund", {"order": "A-1", "amount": 50}),
    ]
    # What was saved when the run stopped waits on the refund only.
    [history] = saved
    [waiting] = pending_approvals(load_history(history))
    assert (waiting.tool_name, waiting.tool_call_id) == ("refund", "call-1")
    [approval] = await signoff.approvals(session_id="conversation-1")
    assert approval["status"] == "allowed"
    assert approval["decided_by"] == "U-ann"


async def test_a_denied_call_never_runs_and_the_model_reads_the_reason(
    signoff: Signoff,
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    agent = refund_agent([("refund", {"order": "A-2", "amount": 900})], ledger)
    async with AsyncSignoffClient(signoff.url, token=AGENT_TOKEN) as client:
        running = asyncio.create_task(
            run_with_approvals(
                agent,
                "Refund A-2",
                client=client,
                agent="support",
                conversation_id="conversation-2",
            )
        )
        [card] = await signoff.cards.wait_for(1)
        await signoff.decide(card.ticket_id, decision="deny", reason="over the refund limit")
        result = await running

    assert ledger == []
    assert result.output == "Permission denied: over the refund limit"


async def test_an_edited_call_runs_with_the_edited_arguments(signoff: Signoff) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    agent = refund_agent([("refund", {"order": "A-3", "amount": 500})], ledger)
    async with AsyncSignoffClient(signoff.url, token=AGENT_TOKEN) as client:
        running = asyncio.create_task(
            run_with_approvals(
                agent,
                "Refund A-3",
                client=client,
                agent="support",
                conversation_id="conversation-3",
            )
        )
        [card] = await signoff.cards.wait_for(1)
        await signoff.decide(card.ticket_id, decision="allow", args={"amount": 120})
        result = await running

    assert ledger == [("refund", {"order": "A-3", "amount": 120})]
    assert result.output == "refunded 120 on A-3"
    # The model's history shows the call as it ran.
    calls = [
        part
        for message in result.all_messages()
        if isinstance(message, ModelRequest | ModelResponse)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    assert [part.content for part in calls] == ["refunded 120 on A-3"]


async def test_a_follow_up_in_the_conversation_is_allowed_by_the_grant_of_the_first_call(
    signoff: Signoff,
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(str(returns[0].content))])
        [prompt] = [p for p in last.parts if isinstance(p, UserPromptPart)]
        order = str(prompt.content).removeprefix("Refund ")
        # Numbered the same every turn, as some models do: the history tells them apart.
        call = ToolCallPart("refund", {"order": order, "amount": 5}, tool_call_id="call-0")
        return ModelResponse(parts=[call])

    agent = refund_agent([], ledger)
    async with AsyncSignoffClient(signoff.url, token=AGENT_TOKEN) as client:

        async def ask(prompt: str, history: list[ModelMessage] | None) -> Any:
            return await run_with_approvals(
                agent,
                prompt,
                client=client,
                agent="support",
                conversation_id="customer-8",
                message_history=history,
                model=FunctionModel(respond),
            )

        first = asyncio.create_task(ask("Refund E-1", None))
        [card] = await signoff.cards.wait_for(1)
        await signoff.decide(card.ticket_id, decision="allow", grant={"scope": "run"})
        earlier = await first
        later = await ask("Refund E-2", earlier.all_messages())

    assert (earlier.output, later.output) == ("refunded 5 on E-1", "refunded 5 on E-2")
    assert ledger == [
        ("refund", {"order": "E-1", "amount": 5}),
        ("refund", {"order": "E-2", "amount": 5}),
    ]
    by_order = {
        a["arguments"]["order"]: a for a in await signoff.approvals(session_id="customer-8")
    }
    assert (by_order["E-1"]["status"], by_order["E-1"]["basis"]) == ("allowed", "decision")
    assert (by_order["E-2"]["status"], by_order["E-2"]["basis"]) == ("allowed", "grant")
    assert len(signoff.cards.sent) == 1


async def test_an_approval_nobody_decides_expires_and_the_call_is_denied(
    signoff: Signoff,
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    agent = refund_agent([("refund", {"order": "C-1", "amount": 70})], ledger)
    async with AsyncSignoffClient(signoff.url, token=AGENT_TOKEN) as client:
        running = asyncio.create_task(
            run_with_approvals(
                agent,
                "Refund C-1",
                client=client,
                agent="hurried",
                conversation_id="conversation-5",
            )
        )
        [card] = await signoff.cards.wait_for(1)
        assert card.deadline is not None
        signoff.clock.advance(601)  # past the agent's ten-minute deadline
        result = await running

    assert ledger == []
    [approval] = await signoff.approvals(session_id="conversation-5")
    assert approval["status"] == "denied"
    assert approval["basis"] == "expiry"
    assert result.output == f"Permission denied: {approval['reason']}"


# -- the docs' example, across a restart of the agent process ---------------------------------


@pytest.mark.crash
async def test_the_docs_example_finishes_the_same_conversation_after_the_agent_restarts(
    signoff: Signoff, tmp_path: Path
) -> None:
    workdir = tmp_path / "agent"
    workdir.mkdir()
    script = workdir / "refund_agent.py"
    script.write_text(
        example_source(PAGE, "tests/clients/test_pydantic_ai_adapter.py"), encoding="utf-8"
    )

    first = start_example(script, signoff.url)
    try:
        [card] = await signoff.cards.wait_for(1, seconds=60)
    finally:
        first.kill()
        await asyncio.to_thread(first.communicate)
    assert signoff.count("tickets") == 1
    assert (workdir / "conversation-42.json").exists()
    assert not (workdir / "refunds.txt").exists()

    second = start_example(script, signoff.url)
    try:
        await signoff.decide(card.ticket_id, decision="allow", args={"amount": 20})
        out, err = await asyncio.to_thread(second.communicate, timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
            await asyncio.to_thread(second.communicate)
    assert second.returncode == 0, err
    assert out.strip() == "Done: refunded 20 on A-1"
    assert (workdir / "refunds.txt").read_text(encoding="utf-8") == "A-1 20\n"
    # The restarted process asked again with the same key: the same approval, one card.
    assert signoff.count("runs") == 1
    assert signoff.count("tickets") == 1
    [approval] = await signoff.approvals(session_id="conversation-42")
    assert approval["approval_id"] == card.run_id
    assert approval["arguments"] == {"order": "A-1", "amount": 20}
