"""The LangGraph adapter against a real signoff: a graph whose tool node interrupts for
approval (the Agent Inbox shape), driven by `run_with_approvals` over HTTP, decided by a
person through the JSON API.

The graphs use no LLM: their model node proposes scripted tool calls, then reports what
the tools answered. The docs' example runs as a subprocess that is killed between the
request and the decision, and run again.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.pregel import Pregel
from langgraph.types import Command

from adapters.client import AsyncSignoffClient, Decision, SignoffClient
from adapters.client.langgraph import (
    ActionRequest,
    HumanInterrupt,
    HumanInterruptConfig,
    approval_tool_node,
    arun_with_approvals,
    human_response,
    run_with_approvals,
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
PAGE = REPO / "docs" / "langgraph.md"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def refund_graph(
    calls: Sequence[tuple[str, dict[str, Any]]],
    ledger: list[tuple[str, dict[str, Any]]],
    checkpointer: Any,
    *,
    needs_approval: set[str] | None = None,
) -> Pregel[Any, Any, Any, Any]:
    """A graph whose model proposes `calls` at once, then reports every tool's answer.

    Its tools append each real execution to `ledger`.
    """

    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ledger.append(("refund", {"order": order, "amount": amount}))
        return f"refunded {amount} on {order}"

    def lookup_order(order: str) -> str:
        """Look an order up."""
        ledger.append(("lookup_order", {"order": order}))
        return f"{order}: paid 50"

    def model(state: State) -> dict[str, Any]:
        answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if answers:
            return {"messages": [AIMessage(" | ".join(str(m.content) for m in answers))]}
        proposed = [
            {"name": name, "args": args, "id": f"call-{index}"}
            for index, (name, args) in enumerate(calls)
        ]
        return {"messages": [AIMessage("", tool_calls=proposed)]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    tools = approval_tool_node([refund, lookup_order], needs_approval=needs_approval)
    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


@pytest.fixture
async def signoff(tmp_path: Path) -> AsyncIterator[Signoff]:
    async with serve_approvals(tmp_path) as served:
        yield served


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def sqlite_saver(path: Path) -> SqliteSaver:
    return SqliteSaver(sqlite3.connect(path, check_same_thread=False))


async def test_an_allowed_call_runs_as_asked_and_a_rule_allows_a_lookup_without_a_card(
    signoff: Signoff, tmp_path: Path
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    calls: list[tuple[str, dict[str, Any]]] = [
        ("lookup_order", {"order": "A-1"}),
        ("refund", {"order": "A-1", "amount": 50}),
    ]
    graph = refund_graph(calls, ledger, sqlite_saver(tmp_path / "checkpoints.sqlite"))
    config: Any = {"configurable": {"thread_id": "conversation-1"}}

    def agent() -> Any:
        with SignoffClient(signoff.url, token=AGENT_TOKEN) as client:
            question = {"messages": [HumanMessage("Refund A-1")]}
            return run_with_approvals(graph, question, config, client=client, agent="support")

    running = asyncio.create_task(asyncio.to_thread(agent))
    [card] = await signoff.cards.wait_for(1)
    assert card.external
    assert card.tool == "refund"
    assert card.args == {"order": "A-1", "amount": 50}
    assert ledger == []  # nothing runs before every answer is in
    await signoff.decide(card.ticket_id, decision="allow")
    state = await running

    assert ledger == [
        ("lookup_order", {"order": "A-1"}),
        ("refund", {"order": "A-1", "amount": 50}),
    ]
    assert [m.content for m in tool_messages(state)] == ["A-1: paid 50", "refunded 50 on A-1"]
    assert state["messages"][-1].content == "A-1: paid 50 | refunded 50 on A-1"
    approvals = {a["tool"]: a for a in await signoff.approvals(session_id="conversation-1")}
    assert approvals["refund"]["status"] == "allowed"
    assert approvals["refund"]["decided_by"] == "U-ann"
    assert approvals["lookup_order"]["status"] == "allowed"
    assert approvals["lookup_order"]["basis"] == "rule"
    assert len(signoff.cards.sent) == 1


async def test_a_denied_call_never_runs_and_the_model_reads_the_reason(
    signoff: Signoff,
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    graph = refund_graph(
        [("refund", {"order": "A-2", "amount": 900})],
        ledger,
        InMemorySaver(),
        needs_approval={"refund"},
    )
    config: Any = {"configurable": {"thread_id": "conversation-2"}}
    async with AsyncSignoffClient(signoff.url, token=AGENT_TOKEN) as client:
        question = {"messages": [HumanMessage("Refund A-2")]}
        running = asyncio.create_task(
            arun_with_approvals(graph, question, config, client=client, agent="support")
        )
        [card] = await signoff.cards.wait_for(1)
        await signoff.decide(card.ticket_id, decision="deny", reason="over the refund limit")
        state = await running

    assert ledger == []
    [answer] = tool_messages(state)
    assert answer.content == "Permission denied: over the refund limit"
    assert answer.status == "error"
    assert state["messages"][-1].content == "Permission denied: over the refund limit"


async def test_an_edited_call_runs_with_the_edited_arguments(
    signoff: Signoff, tmp_path: Path
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    graph = refund_graph(
        [("refund", {"order": "A-3", "amount": 500})],
        ledger,
        sqlite_saver(tmp_path / "checkpoints.sqlite"),
    )
    config: Any = {"configurable": {"thread_id": "conversation-3"}}

    def agent() -> Any:
        with SignoffClient(signoff.url, token=AGENT_TOKEN) as client:
            question = {"messages": [HumanMessage("Refund A-3")]}
            return run_with_approvals(graph, question, config, client=client, agent="support")

    running = asyncio.create_task(asyncio.to_thread(agent))
    [card] = await signoff.cards.wait_for(1)
    await signoff.decide(card.ticket_id, decision="allow", args={"amount": 120})
    state = await running

    assert ledger == [("refund", {"order": "A-3", "amount": 120})]
    assert [m.content for m in tool_messages(state)] == ["refunded 120 on A-3"]


async def test_two_calls_of_one_turn_get_their_cards_at_once_and_are_decided_each(
    signoff: Signoff,
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    calls = [("refund", {"order": "B-1", "amount": 10}), ("refund", {"order": "B-2", "amount": 20})]
    graph = refund_graph(calls, ledger, InMemorySaver())
    config: Any = {"configurable": {"thread_id": "conversation-4"}}
    async with AsyncSignoffClient(signoff.url, token=AGENT_TOKEN) as client:
        question = {"messages": [HumanMessage("Refund both")]}
        running = asyncio.create_task(
            arun_with_approvals(graph, question, config, client=client, agent="support")
        )
        # Both cards are out before anyone decides either.
        first, second = await signoff.cards.wait_for(2)
        by_order = {card.args["order"]: card for card in (first, second)}
        await signoff.decide(by_order["B-2"].ticket_id, decision="deny")
        await signoff.decide(by_order["B-1"].ticket_id, decision="allow")
        state = await running

    assert ledger == [("refund", {"order": "B-1", "amount": 10})]
    assert [m.content for m in tool_messages(state)] == ["refunded 10 on B-1", "Permission denied"]


async def test_a_grant_of_scope_run_allows_the_later_calls_of_the_session_without_a_card(
    signoff: Signoff,
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    async with AsyncSignoffClient(signoff.url, token=AGENT_TOKEN) as client:

        async def refund(thread_id: str, order: str) -> Any:
            graph = refund_graph(
                [("refund", {"order": order, "amount": 5})], ledger, InMemorySaver()
            )
            config: Any = {"configurable": {"thread_id": thread_id}}
            question = {"messages": [HumanMessage(f"Refund {order}")]}
            return await arun_with_approvals(
                graph, question, config, client=client, agent="support", session_id="customer-7"
            )

        first = asyncio.create_task(refund("thread-a", "E-1"))
        [card] = await signoff.cards.wait_for(1)
        await signoff.decide(card.ticket_id, decision="allow", grant={"scope": "run"})
        await first
        state = await refund("thread-b", "E-2")

    assert ledger == [
        ("refund", {"order": "E-1", "amount": 5}),
        ("refund", {"order": "E-2", "amount": 5}),
    ]
    assert [m.content for m in tool_messages(state)] == ["refunded 5 on E-2"]
    by_order = {
        a["arguments"]["order"]: a for a in await signoff.approvals(session_id="customer-7")
    }
    assert (by_order["E-1"]["status"], by_order["E-1"]["basis"]) == ("allowed", "decision")
    assert (by_order["E-2"]["status"], by_order["E-2"]["basis"]) == ("allowed", "grant")
    assert by_order["E-2"]["grant_id"] is not None
    assert len(signoff.cards.sent) == 1


async def test_an_approval_nobody_decides_expires_and_the_call_is_denied(
    signoff: Signoff,
) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    graph = refund_graph([("refund", {"order": "C-1", "amount": 70})], ledger, InMemorySaver())
    config: Any = {"configurable": {"thread_id": "conversation-5"}}
    async with AsyncSignoffClient(signoff.url, token=AGENT_TOKEN) as client:
        question = {"messages": [HumanMessage("Refund C-1")]}
        running = asyncio.create_task(
            arun_with_approvals(graph, question, config, client=client, agent="hurried")
        )
        [card] = await signoff.cards.wait_for(1)
        assert card.deadline is not None
        signoff.clock.advance(601)  # past the agent's ten-minute deadline
        state = await running

    assert ledger == []
    [answer] = tool_messages(state)
    assert str(answer.content).startswith("Permission denied")
    assert answer.status == "error"
    [approval] = await signoff.approvals(session_id="conversation-5")
    assert approval["status"] == "denied"
    assert approval["basis"] == "expiry"
    assert answer.content == f"Permission denied: {approval['reason']}"


# -- the docs' example, across a restart of the agent process ---------------------------------


@pytest.mark.crash
async def test_the_docs_example_finishes_the_same_thread_after_the_agent_process_restarts(
    signoff: Signoff, tmp_path: Path
) -> None:
    workdir = tmp_path / "agent"
    workdir.mkdir()
    script = workdir / "refund_graph.py"
    script.write_text(
        example_source(PAGE, "tests/clients/test_langgraph_adapter.py"), encoding="utf-8"
    )

    first = start_example(script, signoff.url)
    try:
        [card] = await signoff.cards.wait_for(1, seconds=60)
    finally:
        first.kill()
        await asyncio.to_thread(first.communicate)
    assert signoff.count("tickets") == 1
    assert not (workdir / "refunds.txt").exists()

    second = start_example(script, signoff.url)
    try:
        await signoff.decide(card.ticket_id, decision="allow")
        out, err = await asyncio.to_thread(second.communicate, timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
            await asyncio.to_thread(second.communicate)
    assert second.returncode == 0, err
    assert out.strip() == "Done: refunded 50 on A-1"
    assert (workdir / "refunds.txt").read_text(encoding="utf-8") == "A-1 50\n"
    # The restarted process asked again with the same key: the same approval, one card.
    assert signoff.count("runs") == 1
    assert signoff.count("tickets") == 1
    [approval] = await signoff.approvals(session_id="conversation-42")
    assert approval["status"] == "allowed"
    assert approval["approval_id"] == card.run_id


# -- the node and the answers, without signoff ----------------------------------------------


def interrupted(graph: Pregel[Any, Any, Any, Any], config: Any) -> Any:
    """Start the graph on a question and return its one interrupt."""
    graph.invoke({"messages": [HumanMessage("Refund")]}, config)
    [item] = graph.get_state(config).interrupts
    return item


def test_an_ignored_call_is_skipped_and_the_model_reads_so() -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    graph = refund_graph([("refund", {"order": "D-1", "amount": 5})], ledger, InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    item = interrupted(graph, config)

    state = graph.invoke(Command(resume={item.id: [{"type": "ignore", "args": None}]}), config)

    assert ledger == []
    [answer] = tool_messages(state)
    assert (answer.content, answer.status) == ("The call was skipped.", "error")


@pytest.mark.parametrize(
    "resume",
    [
        [],
        [{"type": "accept", "args": None}, {"type": "accept", "args": None}],
        [{"type": "approve"}],
        [{"type": "edit", "args": {"action": "refund"}}],
        [{"type": "response", "args": None}],
        {"type": "accept", "args": None},
    ],
)
def test_a_resume_that_does_not_answer_each_request_runs_nothing(resume: Any) -> None:
    ledger: list[tuple[str, dict[str, Any]]] = []
    graph = refund_graph([("refund", {"order": "D-2", "amount": 5})], ledger, InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    item = interrupted(graph, config)

    with pytest.raises(ValueError, match="HumanResponse"):
        graph.invoke(Command(resume={item.id: resume}), config)

    assert ledger == []


def decision(status: str, arguments: dict[str, Any], **more: Any) -> Decision:
    return Decision.from_json(
        {
            "approval_id": "run_1",
            "status": status,
            "agent": "support",
            "tool": "refund",
            "arguments": arguments,
            "requested_arguments": {"order": "A-1", "amount": 50},
            **more,
        }
    )


def test_a_decision_becomes_the_agent_inbox_answer() -> None:
    asked = HumanInterrupt(
        action_request=ActionRequest(action="refund", args={"order": "A-1", "amount": 50}),
        config=HumanInterruptConfig(
            allow_ignore=True, allow_respond=True, allow_edit=True, allow_accept=True
        ),
        description=None,
    )
    no_edits = HumanInterrupt(**{**asked, "config": {**asked["config"], "allow_edit": False}})
    edited = decision("allowed", {"order": "A-1", "amount": 20})

    assert human_response(decision("allowed", {"order": "A-1", "amount": 50}), asked) == {
        "type": "accept",
        "args": None,
    }
    assert human_response(edited, asked) == {
        "type": "edit",
        "args": {"action": "refund", "args": {"order": "A-1", "amount": 20}},
    }
    assert human_response(edited, no_edits) == {
        "type": "response",
        "args": "Permission denied: edited arguments not allowed",
    }
    assert human_response(decision("denied", {}, reason="no"), asked) == {
        "type": "response",
        "args": "Permission denied: no",
    }
    assert human_response(decision("denied", {}), asked) == {
        "type": "response",
        "args": "Permission denied",
    }
    with pytest.raises(ValueError, match="pending"):
        human_response(decision("pending", {"order": "A-1", "amount": 50}), asked)
