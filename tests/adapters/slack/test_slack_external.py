"""External approvals decided in Slack, end to end: agents built with the OpenAI Agents
SDK, LangGraph and Pydantic AI ask a served signoff over its approvals API; their cards go
to the fake Slack through the real slack_sdk, and the clicks and modals come back signed
the way Slack signs them, through the real slack-bolt.

The agents use no LLM: scripted models propose the risky call, then report what the tool
answered. Every real execution of a tool is appended to a ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from agents import Agent, RunConfig, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from external_bed import (
    AGENT_TOKEN,
    APPROVER,
    CHANNEL,
    QUICK_RETRY,
    External,
    cards_of,
    serve_env,
    serve_external,
)
from fake_slack import (
    FakeSlack,
    Message,
    click_payload,
    interaction_body,
    signed_headers,
    text_input,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from slackbed import buttons, text_of
from testkit import Served, query, until

from adapters.client import AsyncSignoffClient, Decision, verify_decision_token
from adapters.client.langgraph import approval_tool_node, arun_with_approvals
from adapters.client.openai_agents import SignoffRunner
from adapters.client.pydantic_ai import run_with_approvals
from adapters.slack import blocks
from runtime import Actor

pytestmark = pytest.mark.timeout(120)

Ledger = list[tuple[str, dict[str, Any]]]


@pytest.fixture
async def signoff(fake: FakeSlack, tmp_path: Path) -> AsyncIterator[External]:
    async with serve_external(fake, tmp_path) as served:
        yield served


def assert_external_card(card: Message, tool: str, arguments: dict[str, Any]) -> None:
    """The card is in the agent's channel, marked as an external agent's, with its call."""
    assert card.channel == CHANNEL and card.thread_ts is None
    shown = text_of(card)
    assert f"Approval needed: {tool}" in shown and f"wants to run `{tool}`" in shown
    assert "External agent · `support`" in shown
    assert "*support* (external agent)" in shown
    for value in arguments.values():
        assert str(value) in shown
    assert f"<@{APPROVER}>" in shown  # who may decide


def field_of(card: Message, label: str) -> str:
    """The text of the card's field `label`."""
    for block in card.blocks:
        for item in block.get("fields") or []:
            name, _, value = item["text"].partition("\n")
            if name == f"*{label}*":
                return str(value)
    raise AssertionError(f"no field {label!r} on the card")


# -- 1. OpenAI Agents SDK: Allow ---------------------------------------------------------------


async def test_openai_agents_run_continues_after_an_allow_click_and_the_token_verifies(
    signoff: External,
) -> None:
    ledger: Ledger = []

    @function_tool(needs_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order, "amount": amount}))
        return f"refunded {amount} on {order}"

    model = ScriptedModel(
        [
            [function_call("refund", {"order": "A-1", "amount": 40}, call_id="call_1")],
            [assistant_message("Refunded.")],
        ]
    )
    agent = Agent(name="support", instructions="Refund orders.", model=model, tools=[refund])
    asked: list[Decision] = []
    async with signoff.client() as client:
        runner = SignoffRunner(
            client,
            agent="support",
            on_pending=asked.append,
            run_config=RunConfig(tracing_disabled=True),
        )
        running = asyncio.create_task(runner.run(agent, "Refund A-1", run_id="conv-1"))
        card = await signoff.card("refund")
        assert_external_card(card, "refund", {"order": "A-1", "amount": 40})
        assert ledger == []

        assert await signoff.click(blocks.ACTION_ALLOW, card) == 200
        result = await asyncio.wait_for(running, 60)

        assert result.final_output == "Refunded."
        assert ledger == [("refund", {"order": "A-1", "amount": 40})]
        [pending] = asked
        decision = await client.get(pending.approval_id)
        assert decision.allowed and decision.basis == "decision"
        assert (decision.decided_by, decision.decided_via) == (APPROVER, "slack")
        assert decision.decision_token is not None
        claims = verify_decision_token(
            decision.decision_token,
            jwks=await client.jwks(),
            tool="refund",
            arguments={"order": "A-1", "amount": 40},
            agent="support",
        )
        assert claims["decision"] == "allowed"

    await signoff.updated(card)
    assert buttons(card) == {}
    assert f"Approved by <@{APPROVER}>" in text_of(card)
    assert len(signoff.cards("refund")) == 1
    assert signoff.received() == ["applied"]


# -- 2. LangGraph: Deny ------------------------------------------------------------------------


def refund_graph(ledger: Ledger, order: str, amount: int) -> CompiledStateGraph[Any]:
    """A graph whose model proposes one refund, then repeats what the tool node answered."""

    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order, "amount": amount}))
        return f"refunded {amount} on {order}"

    def model(state: MessagesState) -> dict[str, Any]:
        answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if answers:
            return {"messages": [AIMessage(" | ".join(str(m.content) for m in answers))]}
        call = {"name": "refund", "args": {"order": order, "amount": amount}, "id": "call-0"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", approval_tool_node([refund]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=InMemorySaver())


async def deny_in_slack(signoff: External, card: Any, reason: str | None) -> None:
    """Deny `card`: the Deny button, or Deny with reason and its modal."""
    if reason is None:
        assert await signoff.click(blocks.ACTION_DENY, card) == 200
        return
    before = len(signoff.fake.called("views.open"))
    assert await signoff.click(blocks.ACTION_DENY_REASON, card) == 200
    view = await signoff.opened_view(before)
    assert view["callback_id"] == "signoff.deny_reason"
    status, text = await signoff.submit(view, {"reason": text_input(reason)})
    assert (status, text) == (200, "")  # the modal closes


@pytest.mark.parametrize("reason", [None, "already refunded last week"])
async def test_langgraph_tool_node_resumes_with_the_rejection_after_a_deny_in_slack(
    signoff: External, reason: str | None
) -> None:
    ledger: Ledger = []
    graph = refund_graph(ledger, "B-2", 900)
    config: Any = {"configurable": {"thread_id": "conversation-2"}}
    async with signoff.client() as client:
        question = {"messages": [HumanMessage("Refund B-2")]}
        running = asyncio.create_task(
            arun_with_approvals(graph, question, config, client=client, agent="support")
        )
        card = await signoff.card("refund")
        assert_external_card(card, "refund", {"order": "B-2", "amount": 900})

        await deny_in_slack(signoff, card, reason)
        state = await asyncio.wait_for(running, 60)
        [approval] = await signoff.approvals("conversation-2")

    assert ledger == []  # the tool never ran
    [answer] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert answer.status == "error"
    assert approval.denied and approval.basis == "decision"
    assert (approval.decided_by, approval.decided_via) == (APPROVER, "slack")
    assert approval.reason == reason
    assert answer.content == ("Permission denied" + (f": {reason}" if reason else ""))
    assert state["messages"][-1].content == answer.content  # what the model read

    await signoff.updated(card)
    shown = text_of(card)
    assert buttons(card) == {}
    assert f"Denied by <@{APPROVER}>" in shown
    if reason is not None:
        assert reason in shown
    assert len(signoff.cards("refund")) == 1


# -- 3. Pydantic AI: allow with changes ----------------------------------------------------------


async def test_pydantic_ai_tool_runs_once_with_the_arguments_edited_in_slack(
    signoff: External,
) -> None:
    ledger: Ledger = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in returns))])
        call = ToolCallPart("refund", {"order": "C-3", "amount": 500}, tool_call_id="call-0")
        return ModelResponse(parts=[TextPart("The customer was charged twice."), call])

    agent: PydanticAgent[None, str | DeferredToolRequests] = PydanticAgent(
        FunctionModel(respond), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order, "amount": amount}))
        return f"refunded {amount} on {order}"

    async with signoff.client() as client:
        running = asyncio.create_task(
            run_with_approvals(
                agent,
                "Refund C-3",
                client=client,
                agent="support",
                conversation_id="conversation-3",
            )
        )
        card = await signoff.card("refund")
        assert_external_card(card, "refund", {"order": "C-3", "amount": 500})
        assert "Why: The customer was charged twice." in text_of(card)

        before = len(signoff.fake.called("views.open"))
        assert await signoff.click(blocks.ACTION_EDIT, card) == 200
        view = await signoff.opened_view(before)
        assert view["callback_id"] == "signoff.edit"
        inputs = {b["label"]["text"]: b for b in view["blocks"] if b["type"] == "input"}
        assert set(inputs) == {"Amount"}  # only what the rule lets change
        assert inputs["Amount"]["element"]["initial_value"] == "500"
        status, text = await signoff.submit(view, {inputs["Amount"]["block_id"]: text_input("120")})
        assert (status, text) == (200, "")  # the modal closes
        result = await asyncio.wait_for(running, 60)
        [approval] = await signoff.approvals("conversation-3")

    assert ledger == [("refund", {"order": "C-3", "amount": 120})]  # once, as edited
    assert result.output == "refunded 120 on C-3"
    assert approval.allowed and approval.edited and approval.basis == "decision"
    assert approval.arguments == {"order": "C-3", "amount": 120}
    assert approval.requested_arguments == {"order": "C-3", "amount": 500}

    await signoff.updated(card)
    shown = text_of(card)
    assert buttons(card) == {}
    assert f"Approved with changes by <@{APPROVER}>" in shown
    assert "amount 500 → 120" in shown
    assert len(signoff.cards("refund")) == 1


# -- 4. a standing grant from Slack --------------------------------------------------------------


async def test_a_grant_from_slack_allows_the_sessions_next_call_at_once_without_a_card(
    signoff: External,
) -> None:
    async with signoff.client() as client:
        first = await client.request_approval(
            agent="support",
            tool="refund",
            arguments={"order": "D-1", "amount": 30},
            session_id="conversation-4",
            wait=False,
        )
        assert first.pending
        card = await signoff.card("refund")
        offered = buttons(card)
        assert blocks.ACTION_ALLOW_RUN in offered and blocks.ACTION_ALLOW_THREAD in offered
        # The approval's run is one call: its run grant covers the rest of the session.
        assert "Allow for the rest of this session" in text_of(card)
        assert "Allow for the rest of this run" not in text_of(card)

        assert await signoff.click(blocks.ACTION_ALLOW_RUN, card) == 200
        decided = await client.wait(first.approval_id, timeout=60)
        assert decided.allowed and decided.basis == "decision"
        assert (decided.decided_by, decided.decided_via) == (APPROVER, "slack")

        second = await client.request_approval(
            agent="support",
            tool="refund",
            arguments={"order": "D-2", "amount": 35},
            session_id="conversation-4",
            wait=False,
        )
        # Another session is not covered: it asks.
        other = await client.request_approval(
            agent="support",
            tool="refund",
            arguments={"order": "D-3", "amount": 35},
            session_id="conversation-5",
            wait=False,
        )

    assert second.allowed and second.basis == "grant"  # at once, in the first answer
    assert second.raw["grant_id"] is not None
    assert other.pending
    [grant] = await signoff.service.runtime.grants(active=False)
    assert grant.grant_id == second.raw["grant_id"]
    assert (grant.scope, grant.thread_id) == ("run", "ext:support:conversation-4")
    assert (grant.granted_by, grant.platform) == (APPROVER, "slack")
    await signoff.updated(card)
    shown = text_of(card)
    assert buttons(card) == {}
    assert f"Approved by <@{APPROVER}>" in shown
    assert f"(grant `{grant.grant_id}`)" in shown
    # One card for the session's two calls; the other session's call has its own.
    await signoff.fake.wait_for(lambda: len(signoff.cards("refund")) == 2, "the other card")
    await signoff.settled()
    first_card, other_card = signoff.cards("refund")
    assert first_card is card and "D-3" in text_of(other_card)
    assert not any("D-2" in text_of(c) for c in signoff.fake.messages.values())
    assert second.decided_via == "grant" and second.decision_token is not None


async def test_a_session_grant_given_in_slack_is_listed_as_active_and_can_be_revoked(
    signoff: External,
) -> None:
    runtime = signoff.service.runtime
    async with signoff.client() as client:
        first = await client.request_approval(
            agent="support",
            tool="refund",
            arguments={"order": "H-1", "amount": 30},
            session_id="conversation-9",
            wait=False,
        )
        card = await signoff.card("refund")
        assert await signoff.click(blocks.ACTION_ALLOW_RUN, card) == 200
        assert (await client.wait(first.approval_id, timeout=60)).allowed
        await signoff.finished(first.approval_id)  # the approval's one-call run
        [given] = await runtime.grants(active=False)

        assert [g.grant_id for g in await runtime.grants()] == [given.grant_id]
        await runtime.revoke_grant(given.grant_id, actor=Actor(id="ops:alice", operator=True))
        later = await client.request_approval(
            agent="support",
            tool="refund",
            arguments={"order": "H-2", "amount": 30},
            session_id="conversation-9",
            wait=False,
        )
    assert later.pending  # asked again once the grant was revoked


# -- 5. expiry ---------------------------------------------------------------------------------


async def test_a_request_nobody_decides_before_its_deadline_is_denied_by_expiry(
    signoff: External,
) -> None:
    async with signoff.client() as client:
        asked = await client.request_approval(
            agent="support",
            tool="refund",
            arguments={"order": "E-1", "amount": 70},
            session_id="conversation-6",
            deadline_seconds=300,
            wait=False,
        )
        assert asked.pending and asked.deadline is not None
        card = await signoff.card("refund")
        assert field_of(card, "Deadline").startswith(f"<!date^{int(asked.deadline.timestamp())}^")

        signoff.clock.advance(301)  # the deadline loop expires it on its next look
        decided = await client.wait(asked.approval_id, timeout=60)

    assert decided.denied and decided.basis == "expiry"
    assert decided.decision_token is not None
    await signoff.updated(card)
    shown = text_of(card)
    assert buttons(card) == {}
    assert "Expired without a decision; the call was denied" in shown
    assert len(signoff.cards("refund")) == 1


# -- 7. a stranger's click -----------------------------------------------------------------------


async def test_a_stranger_clicking_allow_is_refused_and_the_approval_stays_pending(
    signoff: External,
) -> None:
    async with signoff.client() as client:
        asked = await client.request_approval(
            agent="support",
            tool="refund",
            arguments={"order": "F-1", "amount": 80},
            session_id="conversation-7",
            wait=False,
        )
        card = await signoff.card("refund")

        assert await signoff.click(blocks.ACTION_ALLOW, card, user="U9") == 200
        [told] = await signoff.ephemeral("U9")
        assert "may not decide" in told["text"] and f"<@{APPROVER}>" in told["text"]
        await signoff.settled()
        still = await client.get(asked.approval_id)

        assert still.pending and still.decided_by is None
        assert signoff.received() == []  # nothing was stored for the stranger
        assert card.updates == 0 and set(buttons(card)) >= {blocks.ACTION_ALLOW}

        # The approver's click still decides it.
        assert await signoff.click(blocks.ACTION_ALLOW, card) == 200
        decided = await client.wait(asked.approval_id, timeout=60)
    assert decided.allowed and decided.decided_by == APPROVER


# -- a restart between the request and the click ---------------------------------------------------


class Observed(httpx.AsyncBaseTransport):
    """The real transport, telling the test when a long poll left and when one failed."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.polling = asyncio.Event()
        self.failed = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.params.get("wait"):
            self.polling.set()
        try:
            return await self._inner.handle_async_request(request)
        except httpx.TransportError:
            self.failed.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.crash
async def test_a_client_waiting_through_a_killed_serve_gets_the_slack_decision_one_card_only(
    fake: FakeSlack, tmp_path: Path
) -> None:
    env = serve_env(fake, tmp_path)
    database = tmp_path / "signoff.db"
    first = await Served.start(env)
    observed = Observed()
    async with (
        httpx.AsyncClient(transport=observed) as http,
        AsyncSignoffClient(
            first.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http
        ) as client,
    ):
        try:
            asked = await client.request_approval(
                agent="support",
                tool="refund",
                arguments={"order": "G-1", "amount": 60},
                session_id="conversation-8",
                idempotency_key="conversation-8:call-1",
                wait=False,
            )
            assert asked.pending
            [card] = await fake.wait_for(lambda: cards_of(fake, "refund"), "the card")
            await until(
                lambda: query(database, "SELECT state FROM outbox") == [("delivered",)],
                "the card's delivery recorded",
            )
            waiting = asyncio.create_task(client.wait(asked.approval_id, timeout=90))
            await asyncio.wait_for(observed.polling.wait(), 30)
        finally:
            first.kill()
        await asyncio.wait_for(observed.failed.wait(), 30)  # the long poll was cut off

        second = await Served.start(env)
        try:
            assert second.url == first.url
            message: dict[str, Any] = {"ts": card.ts, "text": card.text, "blocks": card.blocks}
            payload = click_payload(
                blocks.ACTION_ALLOW,
                buttons(card)[blocks.ACTION_ALLOW],
                user=APPROVER,
                channel=card.channel,
                message=message,
            )
            body = interaction_body(payload)
            async with (
                aiohttp.ClientSession() as slack,
                slack.post(
                    f"{second.url}/slack/events", data=body, headers=signed_headers(body)
                ) as answer,
            ):
                assert answer.status == 200

            decided = await asyncio.wait_for(waiting, 60)
            assert decided.allowed and decided.approval_id == asked.approval_id
            assert (decided.decided_by, decided.decided_via) == (APPROVER, "slack")
            await fake.wait_for(lambda: card.updates >= 1, "the card's update")
            # Asking again with the same key after the restart: the same approval.
            again = await client.request_approval(
                agent="support",
                tool="refund",
                arguments={"order": "G-1", "amount": 60},
                session_id="conversation-8",
                idempotency_key="conversation-8:call-1",
                wait=False,
            )
            assert again.approval_id == asked.approval_id and again.allowed
        finally:
            await second.stop()

    assert buttons(card) == {}
    assert f"Approved by <@{APPROVER}>" in text_of(card)
    assert len(cards_of(fake, "refund")) == 1  # one card, before and after the restart
    assert query(database, "SELECT count(*) FROM tickets") == [(1,)]
