"""External approvals decided in Discord, end to end: agents built with LangGraph, Pydantic
AI, the OpenAI Agents SDK or plain client code ask a served signoff over HTTP; the cards
go to the fake Discord, where the real discord.py bot takes the clicks and modals; each
answer reaches the agent that asked.

The agents use no LLM: LangGraph's model node, Pydantic AI's `FunctionModel` and the
Agents SDK's `ScriptedModel` propose scripted tool calls, then report what the tools
answered. Every real tool execution is appended to a ledger. The last two tests restart
signoff between the request and the decision: stopped in this process, and a real
`signoff serve` SIGKILLed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import pytest
from agents import Agent as OpenAIAgent
from agents import RunConfig, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from discord_harness import ALICE, BOB
from external_harness import (
    AGENT,
    AGENT_TOKEN,
    QUICK_RETRY,
    ExternalSignoff,
    approval_id_of,
    field_of,
    free_port,
    labels,
    serve_env,
    serving,
)
from fake_discord import FakeDiscord
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.pregel import Pregel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from testkit import Served, query, settled, until

from adapters.client import AsyncSignoffClient, derive_key, verify_decision_token
from adapters.client.langgraph import approval_tool_node, arun_with_approvals
from adapters.client.openai_agents import SignoffRunner
from adapters.client.pydantic_ai import run_with_approvals

pytestmark = pytest.mark.timeout(90)

Ledger = list[tuple[str, dict[str, Any]]]
RUN_GRANT = "Allow for the rest of this session"
SECONDS = 30.0
"""The longest a test waits for the agent to finish once its answer is given."""


@pytest.fixture
async def signoff(fake: FakeDiscord, tmp_path: Path) -> AsyncIterator[ExternalSignoff]:
    async with serving(fake, tmp_path) as served:
        yield served


def card_delivered(database: Path, approval_id: str) -> bool:
    """Whether the approval's card is recorded as delivered: a process stopped after
    that leaves nothing to post again (stopped between the post and the record, the next
    process would post it again, as deliveries are at least once)."""
    found = query(
        database,
        "SELECT count(*) FROM outbox WHERE kind = 'approval_requested' "
        f"AND state = 'delivered' AND run_id = '{approval_id}'",
    )
    return found == [(1,)]


def refusal(who: str) -> str:
    return f"⛔ You may not decide this request. Who may: {who}. Nothing was changed."


# -- the agents ---------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def langgraph_agent(order: str, amount: int, ledger: Ledger) -> Pregel[Any, Any, Any, Any]:
    """A graph whose model proposes one refund, then reports what the tool answered."""

    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order, "amount": amount}))
        return f"refunded {amount} on {order}"

    def model(state: State) -> dict[str, Any]:
        answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if answers:
            return {"messages": [AIMessage(" | ".join(str(m.content) for m in answers))]}
        call = {"name": "refund", "args": {"order": order, "amount": amount}, "id": "call-0"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tools", approval_tool_node([refund]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=InMemorySaver())


def pydantic_agent(
    order: str, amount: int, ledger: Ledger
) -> PydanticAgent[None, str | DeferredToolRequests]:
    """An agent whose model proposes one refund (needing approval), then reports what
    the tool answered."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in returns))])
        call = ToolCallPart("refund", {"order": order, "amount": amount}, tool_call_id="call-0")
        return ModelResponse(parts=[TextPart("The customer asked for it."), call])

    agent: PydanticAgent[None, str | DeferredToolRequests] = PydanticAgent(
        FunctionModel(respond), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order, "amount": amount}))
        return f"refunded {amount} on {order}"

    return agent


# -- 1. LangGraph: Allow -------------------------------------------------------------------


async def test_a_langgraph_tool_node_runs_its_call_once_allowed_on_the_discord_card(
    signoff: ExternalSignoff,
) -> None:
    ledger: Ledger = []
    graph = langgraph_agent("A-1", 50, ledger)
    config: Any = {"configurable": {"thread_id": "conversation-1"}}
    async with signoff.client() as client:
        question = {"messages": [HumanMessage("Refund A-1")]}
        running = asyncio.create_task(
            arun_with_approvals(graph, question, config, client=client, agent=AGENT)
        )
        card = await signoff.card()
        embed = card["embeds"][0]
        assert embed["title"] == "Approval needed: refund"
        assert field_of(card, "Agent") == f"External agent · {AGENT}"
        assert field_of(card, "Requested by") == f"`svc:{AGENT}`"
        assert field_of(card, "Who may decide") == f"<@{ALICE.id}>"
        assert '"order": "A-1"' in embed["description"]
        assert labels(card)[:3] == ["Allow", "Deny", "Deny with reason"]
        assert ledger == []  # nothing runs before the answer

        answer = await signoff.click(ALICE, card, "Allow")
        assert answer.ephemeral and "Allow recorded" in answer.text
        state = await asyncio.wait_for(running, SECONDS)

        assert ledger == [("refund", {"order": "A-1", "amount": 50})]
        assert [m.content for m in state["messages"] if isinstance(m, ToolMessage)] == [
            "refunded 50 on A-1"
        ]
        decision = await client.get(approval_id_of(card))
        assert (decision.status, decision.basis) == ("allowed", "decision")
        assert (decision.decided_by, decision.decided_via) == (str(ALICE.id), "discord")
        assert decision.decision_token is not None
        claims = verify_decision_token(
            decision.decision_token,
            jwks=await client.jwks(),
            tool="refund",
            arguments={"order": "A-1", "amount": 50},
            agent=AGENT,
        )
        assert claims["jti"] == decision.approval_id
    outcome = await signoff.outcome(card)
    assert outcome.startswith(f"✅ Allowed by <@{ALICE.id}>")
    assert len(signoff.cards()) == 1


# -- 2. Pydantic AI: Deny with a reason ----------------------------------------------------


async def test_a_pydantic_ai_run_goes_on_with_the_denial_and_its_reason_from_discord(
    signoff: ExternalSignoff,
) -> None:
    ledger: Ledger = []
    agent = pydantic_agent("A-2", 900, ledger)
    async with signoff.client() as client:
        running = asyncio.create_task(
            run_with_approvals(
                agent, "Refund A-2", client=client, agent=AGENT, conversation_id="conversation-2"
            )
        )
        card = await signoff.card()
        assert field_of(card, "Agent") == f"External agent · {AGENT}"
        assert field_of(card, "Why") == "The customer asked for it."
        opened = await signoff.click(ALICE, card, "Deny with reason")
        answer = await signoff.submit(ALICE, opened, {"reason": "over the refund limit"})
        assert "Deny recorded" in answer.text
        result = await asyncio.wait_for(running, SECONDS)

        assert ledger == []
        denial = "Permission denied: over the refund limit"
        # The run went on: the model read the denial as the tool's answer, and answered.
        told = [
            (part.tool_name, part.content)
            for message in result.all_messages()
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        assert told == [("refund", denial)]
        assert result.output == denial
        decision = await client.get(approval_id_of(card))
        assert (decision.status, decision.basis) == ("denied", "decision")
        assert decision.reason == "over the refund limit"
    outcome = await signoff.outcome(card)
    assert outcome.startswith(f"⛔ Denied by <@{ALICE.id}>")
    assert "Reason: over the refund limit" in outcome


# -- 3. OpenAI Agents SDK: Allow with changes ----------------------------------------------


async def test_an_openai_agents_run_calls_the_tool_once_with_the_arguments_edited_in_discord(
    signoff: ExternalSignoff,
) -> None:
    ran: list[dict[str, Any]] = []

    @function_tool(needs_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ran.append({"order": order, "amount": amount})
        return f"refunded {amount} on {order}"

    model = ScriptedModel(
        [
            [function_call("refund", {"order": "A-3", "amount": 40}, call_id="call_1")],
            # Told it may run only as edited, the model calls again with exactly that.
            [function_call("refund", {"order": "A-3", "amount": 10}, call_id="call_2")],
            [assistant_message("Refunded 10.")],
        ]
    )
    agent = OpenAIAgent(name="billing", instructions="Refund orders.", model=model, tools=[refund])
    async with signoff.client() as client:
        runner = SignoffRunner(client, agent=AGENT, run_config=RunConfig(tracing_disabled=True))
        running = asyncio.create_task(runner.run(agent, "Refund A-3", run_id="conversation-3"))
        card = await signoff.card()
        assert field_of(card, "Agent") == f"External agent · {AGENT}"
        opened = await signoff.click(ALICE, card, "Allow with changes")
        assert opened.modal is not None
        shown = {c["custom_id"]: c for row in opened.modal["components"] for c in row["components"]}
        assert list(shown) == ["amount"]  # the rule lets only the amount change
        assert shown["amount"]["value"] == "40"
        answer = await signoff.submit(ALICE, opened, {"amount": "10"})
        assert "Allow with changes recorded" in answer.text
        result = await asyncio.wait_for(running, SECONDS)

        assert result.final_output == "Refunded 10."
        assert ran == [{"order": "A-3", "amount": 10}]
        model.assert_complete()
        decision = await client.get(approval_id_of(card))
        assert decision.allowed and decision.edited
        assert decision.arguments == {"order": "A-3", "amount": 10}
        assert decision.requested_arguments == {"order": "A-3", "amount": 40}
    outcome = await signoff.outcome(card)
    assert outcome.startswith(f"✅ Allowed with changes by <@{ALICE.id}>")
    assert "Changed: amount 40 → 10" in outcome
    assert len(signoff.cards()) == 1  # the call with the edited arguments asked nobody


# -- 4. A standing grant -------------------------------------------------------------------


async def test_a_grant_given_in_discord_allows_the_sessions_next_call_at_once(
    signoff: ExternalSignoff,
) -> None:
    async with signoff.client() as client:

        async def refund(order: str, session_id: str, *, wait: bool) -> Any:
            return await client.request_approval(
                agent=AGENT,
                tool="refund",
                arguments={"order": order, "amount": 5},
                session_id=session_id,
                idempotency_key=derive_key(session_id, order),
                wait=wait,
            )

        first = asyncio.create_task(refund("E-1", "customer-7", wait=True))
        card = await signoff.card()
        assert labels(card)[-2:] == [RUN_GRANT, "Allow in this thread…"]
        answer = await signoff.click(ALICE, card, RUN_GRANT)
        assert "Allow and standing grant recorded" in answer.text
        decided = await asyncio.wait_for(first, SECONDS)
        assert (decided.status, decided.basis) == ("allowed", "decision")
        [grant] = await signoff.runtime.grants(active=False)
        assert (grant.granted_by, grant.platform) == (str(ALICE.id), "discord")

        second = await refund("E-2", "customer-7", wait=False)
        assert (second.status, second.basis) == ("allowed", "grant")
        assert second.raw["grant_id"] == grant.grant_id
        assert second.decision_token is not None
        assert len(signoff.cards()) == 1  # no second card
        # Another session is not covered: it asks again.
        elsewhere = await refund("E-3", "customer-8", wait=False)
        assert elsewhere.pending
    outcome = await signoff.outcome(card)
    assert f"And for the rest of this run (grant `{grant.grant_id}`)" in outcome
    await signoff.card(2)


# -- 5. A deadline ----------------------------------------------------------------------------


async def test_a_request_whose_deadline_passes_is_denied_by_expiry_and_its_card_says_so(
    signoff: ExternalSignoff,
) -> None:
    async with signoff.client() as client:
        asked = await client.request_approval(
            agent=AGENT,
            tool="refund",
            arguments={"order": "C-1", "amount": 70},
            session_id="conversation-5",
            deadline_seconds=60,
            wait=False,
        )
        assert asked.pending and asked.deadline == signoff.clock.now() + timedelta(seconds=60)
        waiting = asyncio.create_task(client.wait(asked.approval_id))
        card = await signoff.card()
        assert approval_id_of(card) == asked.approval_id
        assert "<t:" in field_of(card, "Deadline")

        signoff.clock.advance(61)
        assert len(await signoff.runtime.expire_overdue()) == 1
        expired = await asyncio.wait_for(waiting, SECONDS)
        assert (expired.status, expired.basis) == ("denied", "expiry")
        assert expired.decision_token is not None
        verify_decision_token(
            expired.decision_token,
            jwks=await client.jwks(),
            tool="refund",
            arguments={"order": "C-1", "amount": 70},
            decision="denied",
            leeway=120,  # signed at the test's clock, a minute ahead of the real one
        )
    assert await signoff.outcome(card) == "⏰ Expired without a decision; the call was denied"
    late = await signoff.click(ALICE, card, "Allow")
    assert "already expired" in late.text


# -- 6. A stranger ---------------------------------------------------------------------------


async def test_a_stranger_pressing_allow_is_refused_and_the_request_stays_pending(
    signoff: ExternalSignoff,
) -> None:
    async with signoff.client() as client:
        asked = await client.request_approval(
            agent=AGENT,
            tool="refund",
            arguments={"order": "S-1", "amount": 30},
            session_id="conversation-6",
            wait=False,
        )
        waiting = asyncio.create_task(client.wait(asked.approval_id))
        card = await signoff.card()
        for label in ("Allow", RUN_GRANT):
            refused = await signoff.click(BOB, card, label)
            assert refused.ephemeral
            assert refused.text == refusal(f"<@{ALICE.id}>")
        refused = await signoff.click(BOB, card, "Allow with changes")
        assert refused.modal is None and "may not decide" in refused.text
        service = signoff.services[-1]
        await settled(service.runtime, service.worker)  # a (wrong) apply would be done by now
        assert (await client.get(asked.approval_id)).pending
        assert not waiting.done()
        assert "edits" not in signoff.fake.messages[card["id"]]
        assert await signoff.runtime.grants(active=False) == []

        # The approver still can.
        await signoff.click(ALICE, card, "Allow")
        decided = await asyncio.wait_for(waiting, SECONDS)
        assert (decided.status, decided.decided_by) == ("allowed", str(ALICE.id))


# -- a restart of signoff between the request and the decision ------------------------------


async def test_a_decision_in_discord_after_a_restart_reaches_the_client_waiting_through_it(
    signoff: ExternalSignoff,
) -> None:
    polling = asyncio.Event()

    async def sent(request: httpx.Request) -> None:
        if request.url.params.get("wait"):
            polling.set()

    async with signoff.client(on_request=sent) as client:
        key = derive_key("conversation-7", "call-1")

        async def ask(*, wait: bool) -> Any:
            return await client.request_approval(
                agent=AGENT,
                tool="refund",
                arguments={"order": "R-1", "amount": 25},
                session_id="conversation-7",
                idempotency_key=key,
                wait=wait,
            )

        asked = await ask(wait=False)
        card = await signoff.card()
        await until(lambda: card_delivered(signoff.database, asked.approval_id), "the record")
        waiting = asyncio.create_task(client.wait(asked.approval_id))
        await asyncio.wait_for(polling.wait(), SECONDS)

        # `signoff serve` stops (as on SIGTERM) and a new process starts on the same file
        # and port; it never saw the card, and the client keeps waiting meanwhile.
        await signoff.stop(signoff.services[-1])
        assert signoff.fake.connected == 0
        await signoff.serve()
        await signoff.fake.wait_for(lambda: signoff.fake.connected == 1, what="the new bot")
        assert not waiting.done()

        answer = await signoff.click(ALICE, card, "Allow")
        assert "Allow recorded" in answer.text
        decided = await asyncio.wait_for(waiting, SECONDS)
        assert (decided.approval_id, decided.status) == (asked.approval_id, "allowed")
        assert decided.decided_via == "discord"
        again = await ask(wait=False)  # the same key after the restart: the same approval
        assert (again.approval_id, again.status) == (asked.approval_id, "allowed")
    assert (await signoff.outcome(card)).startswith(f"✅ Allowed by <@{ALICE.id}>")
    assert len(signoff.cards()) == 1


@pytest.mark.crash
@pytest.mark.timeout(150)
async def test_a_client_waiting_through_a_killed_signoff_serve_gets_the_discord_decision(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    env = serve_env(fake, tmp_path, free_port())
    database = tmp_path / "signoff.db"
    first = await Served.start(env)
    try:
        await fake.wait_for(lambda: fake.connected == 1, seconds=30, what="the first bot")
        async with httpx.AsyncClient(trust_env=False) as http:
            client = AsyncSignoffClient(
                first.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http
            )
            asked = await client.request_approval(
                agent=AGENT,
                tool="refund",
                arguments={"order": "K-1", "amount": 15},
                session_id="conversation-8",
                wait=False,
            )
            [card] = await fake.wait_for(lambda: fake.cards(), seconds=30, what="the card")
            await until(lambda: card_delivered(database, asked.approval_id), "the record")
            waiting = asyncio.create_task(client.wait(asked.approval_id))
            first.kill()
            await fake.wait_for(lambda: fake.connected == 0, what="the killed bot gone")
            second = await Served.start(env)
            try:
                assert second.url == first.url
                await fake.wait_for(lambda: fake.connected == 1, seconds=30, what="the new bot")
                assert not waiting.done()
                answer = await fake.interact(fake.click(ALICE, card, "Allow"))
                await fake.answered(answer)
                assert "Allow recorded" in answer.text
                decided = await asyncio.wait_for(waiting, 60)
                assert (decided.approval_id, decided.status) == (asked.approval_id, "allowed")
                assert decided.decided_by == str(ALICE.id)

                def outcome() -> str | None:
                    fields = fake.messages[card["id"]]["embeds"][0].get("fields", [])
                    found = [str(f["value"]) for f in fields if f["name"] == "Outcome"]
                    return found[0] if found else None

                shown = await fake.wait_for(outcome, seconds=30, what="the card's outcome")
                assert shown.startswith(f"✅ Allowed by <@{ALICE.id}>")
            finally:
                waiting.cancel()
                await second.stop()
    finally:
        if first.process.poll() is None:
            first.kill()
    assert len(fake.cards()) == 1
