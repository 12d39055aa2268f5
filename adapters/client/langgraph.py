"""LangGraph: tool calls that wait for a person's sign-off in signoff.

Two halves, joined by LangGraph's own interrupts and checkpoints:

- `approval_tool_node` is a tool node for a graph. Before it runs the calls of the last
  AI message, it stops the graph with one `interrupt` carrying a `HumanInterrupt` (the
  shape Agent Inbox shows) for each call that needs approval. Resumed with a
  `HumanResponse` per request, it runs accepted calls as asked, edited calls with the
  edited arguments, and answers the model with the text of a `response` (a denial) or
  a skip note (an `ignore`) in place of running the tool.
- `run_with_approvals` (and `arun_with_approvals`) drives a graph on a checkpointer: for
  each such interrupt it asks signoff for approvals, keyed by the thread and the
  interrupt (so an agent process that restarts and asks again gets the same approvals,
  never second cards), waits for the decisions and resumes with `Command(resume=...)`.

LangGraph is imported here only (the client's ``langgraph`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal, TypedDict, cast

from langchain_core.messages import AIMessage, AnyMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as as_tool
from langgraph.pregel import Pregel
from langgraph.types import Command, Interrupt, interrupt

from adapters.client import AsyncSignoffClient, Decision, SignoffClient, derive_key

__all__ = [
    "ActionRequest",
    "HumanInterrupt",
    "HumanInterruptConfig",
    "HumanResponse",
    "approval_requests",
    "approval_tool_node",
    "arun_with_approvals",
    "human_response",
    "idempotency_key",
    "run_with_approvals",
]


class ActionRequest(TypedDict):
    """The call a person is asked about: the tool's name and its arguments."""

    action: str
    args: dict[str, Any]


class HumanInterruptConfig(TypedDict):
    """What a person may answer: accept, edit, respond with text, ignore."""

    allow_ignore: bool
    allow_respond: bool
    allow_edit: bool
    allow_accept: bool


class HumanInterrupt(TypedDict):
    """One request for a person, as Agent Inbox shows it."""

    action_request: ActionRequest
    config: HumanInterruptConfig
    description: str | None


class HumanResponse(TypedDict):
    """A person's answer to one `HumanInterrupt`.

    ``type`` is ``accept`` (``args`` None), ``edit`` (``args`` the `ActionRequest` to run),
    ``response`` (``args`` the text the model gets in place of the tool's result) or
    ``ignore`` (``args`` None; the call is skipped).
    """

    type: Literal["accept", "ignore", "response", "edit"]
    args: str | ActionRequest | None


SKIPPED = "The call was skipped."
"""What the model reads for a call a person ignored."""

DENIED = "Permission denied"
"""What the model reads for a denied call, followed by the reason when one was given."""

NeedsApproval = Collection[str] | Callable[[ToolCall], bool]
"""Which calls ask first: tool names, or a test on the call."""

Describe = Callable[[ToolCall], str | None]
"""The description shown with a call's request (the "why" on the card)."""


def approval_tool_node(
    tools: Sequence[BaseTool | Callable[..., Any]],
    *,
    needs_approval: NeedsApproval | None = None,
    allow_edit: bool = True,
    describe: Describe | None = None,
    messages_key: str = "messages",
    name: str = "tools",
) -> RunnableLambda[Any, dict[str, list[ToolMessage]]]:
    """A tool node whose calls wait for approval where asked.

    The node reads the tool calls of the last AI message in ``state[messages_key]``.
    When some need approval it calls `interrupt` once, with a list of `HumanInterrupt`
    (one per such call, in order) and expects a list of `HumanResponse` in the same
    order on resume; nothing runs before every answer is in, so resuming never runs a
    tool twice. It then runs the calls (sync or async, as the graph is invoked) and
    returns one `ToolMessage` each.

    Args:
        tools: LangChain tools, or plain functions made into tools.
        needs_approval: Tool names that ask first, or a test on the call (default:
            every call asks).
        allow_edit: Whether a person may change the arguments (``config.allow_edit``).
        describe: The description of a call's request (default: none).
        messages_key: The state key holding the messages.
        name: The node's name.

    Returns:
        A runnable to add to a graph with ``builder.add_node(node.name, node)``.
    """
    by_name: dict[str, BaseTool] = {}
    for given in tools:
        made = given if isinstance(given, BaseTool) else as_tool(given)
        by_name[made.name] = made

    def asks(call: ToolCall) -> bool:
        if needs_approval is None:
            return True
        if callable(needs_approval):
            return needs_approval(call)
        return call["name"] in needs_approval

    def request_for(call: ToolCall) -> HumanInterrupt:
        return HumanInterrupt(
            action_request=ActionRequest(action=call["name"], args=dict(call["args"])),
            config=HumanInterruptConfig(
                allow_ignore=True, allow_respond=True, allow_edit=allow_edit, allow_accept=True
            ),
            description=describe(call) if describe is not None else None,
        )

    def plan(state: dict[str, Any]) -> list[tuple[ToolCall, HumanResponse | None]]:
        calls = _last_tool_calls(state[messages_key])
        asking = [index for index, call in enumerate(calls) if asks(call)]
        answers: dict[int, HumanResponse] = {}
        if asking:
            given = interrupt([request_for(calls[index]) for index in asking])
            responses = _check_responses(given, len(asking), allow_edit=allow_edit)
            answers = dict(zip(asking, responses, strict=True))
        return [(call, answers.get(index)) for index, call in enumerate(calls)]

    def run(state: dict[str, Any]) -> dict[str, list[ToolMessage]]:
        out: list[ToolMessage] = []
        for call, answer in plan(state):
            match _to_run(call, answer, by_name):
                case ToolMessage() as message:
                    out.append(message)
                case tool, args:
                    try:
                        result = tool.invoke(_invocation(call, args))
                    except Exception as exc:
                        out.append(_failed(call, exc))
                    else:
                        out.append(_as_message(call, result))
        return {messages_key: out}

    async def arun(state: dict[str, Any]) -> dict[str, list[ToolMessage]]:
        out: list[ToolMessage] = []
        for call, answer in plan(state):
            match _to_run(call, answer, by_name):
                case ToolMessage() as message:
                    out.append(message)
                case tool, args:
                    try:
                        result = await tool.ainvoke(_invocation(call, args))
                    except Exception as exc:
                        out.append(_failed(call, exc))
                    else:
                        out.append(_as_message(call, result))
        return {messages_key: out}

    return RunnableLambda(run, afunc=arun, name=name)


def _last_tool_calls(messages: Sequence[AnyMessage]) -> list[ToolCall]:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return list(message.tool_calls)
    raise ValueError("the tool node found no AI message with tool calls in the state")


def _check_responses(given: Any, count: int, *, allow_edit: bool) -> list[HumanResponse]:
    """The answers a graph was resumed with, checked against what was asked.

    Raises:
        ValueError: Not a list of one `HumanResponse` per request, or an edit where
            editing is not allowed.
    """
    if not isinstance(given, list) or len(given) != count:
        raise ValueError(f"resume with a list of {count} HumanResponse, got {given!r}")
    for answer in given:
        kind = answer.get("type") if isinstance(answer, dict) else None
        args = answer.get("args") if isinstance(answer, dict) else None
        match kind:
            case "accept" | "ignore":
                pass
            case "response" if isinstance(args, str):
                pass
            case "edit" if isinstance(args, dict) and isinstance(args.get("args"), dict):
                if not allow_edit:
                    raise ValueError("this tool node does not allow edits")
            case _:
                raise ValueError(f"not a HumanResponse: {answer!r}")
    return cast(list[HumanResponse], given)


def _to_run(
    call: ToolCall, answer: HumanResponse | None, by_name: dict[str, BaseTool]
) -> ToolMessage | tuple[BaseTool, dict[str, Any]]:
    """The message answering a call that does not run, or the tool and arguments to run."""
    if answer is not None and answer["type"] == "response":
        return _message(call, str(answer["args"]), status="error")
    if answer is not None and answer["type"] == "ignore":
        return _message(call, SKIPPED, status="error")
    tool = by_name.get(call["name"])
    if tool is None:
        return _message(call, f"Error: no tool named {call['name']!r}", status="error")
    args = dict(call["args"])
    if answer is not None and answer["type"] == "edit":
        edited = cast(ActionRequest, answer["args"])
        args = dict(edited["args"])
    return tool, args


def _invocation(call: ToolCall, args: dict[str, Any]) -> ToolCall:
    return ToolCall(name=call["name"], args=args, id=call["id"], type="tool_call")


def _as_message(call: ToolCall, result: Any) -> ToolMessage:
    if isinstance(result, ToolMessage):
        return result
    text = result if isinstance(result, str) else json.dumps(result, default=str)
    return _message(call, text)


def _failed(call: ToolCall, exc: Exception) -> ToolMessage:
    return _message(call, f"Error: {type(exc).__name__}: {exc}", status="error")


def _message(
    call: ToolCall, content: str, *, status: Literal["success", "error"] = "success"
) -> ToolMessage:
    return ToolMessage(
        content=content, tool_call_id=call["id"] or "", name=call["name"], status=status
    )


# -- the driver ------------------------------------------------------------------------


def approval_requests(item: Interrupt[Any]) -> list[HumanInterrupt] | None:
    """The approval requests an interrupt carries, or None when it is another kind."""
    value = item.value
    if not isinstance(value, list) or not value:
        return None
    for request in value:
        if not isinstance(request, dict):
            return None
        action = request.get("action_request")
        if not (
            isinstance(action, dict)
            and isinstance(action.get("action"), str)
            and isinstance(action.get("args"), dict)
            and isinstance(request.get("config"), dict)
        ):
            return None
    return cast(list[HumanInterrupt], value)


def idempotency_key(thread_id: str, interrupt_id: str, index: int) -> str:
    """The idempotency key of the approval for one request of one interrupt.

    The same on every attempt, in every process: a restarted agent asking again gets the
    approval it asked for before.
    """
    return derive_key("langgraph", thread_id, interrupt_id, str(index))


def human_response(decision: Decision, request: HumanInterrupt) -> HumanResponse:
    """The answer a graph resumes with for a decided approval.

    Allowed as asked is ``accept``; allowed with changed arguments is ``edit`` (or a
    denial, when the request does not allow edits); denied is ``response`` with
    ``Permission denied`` and the reason, which the model reads as the call's result.

    Raises:
        ValueError: The approval is still pending.
    """
    asked = request["action_request"]
    if decision.pending:
        raise ValueError(f"approval {decision.approval_id} is still pending")
    if decision.allowed:
        if not decision.edited:
            return HumanResponse(type="accept", args=None)
        if request["config"]["allow_edit"]:
            edited = ActionRequest(action=asked["action"], args=dict(decision.arguments))
            return HumanResponse(type="edit", args=edited)
        return HumanResponse(type="response", args=f"{DENIED}: edited arguments not allowed")
    reason = decision.reason
    return HumanResponse(type="response", args=f"{DENIED}: {reason}" if reason else DENIED)


def run_with_approvals(
    graph: Pregel[Any, Any, Any, Any],
    graph_input: Any,
    config: RunnableConfig,
    *,
    client: SignoffClient,
    agent: str,
    session_id: str | None = None,
    on_behalf_of: str | None = None,
    max_rounds: int = 100,
) -> Any:
    """Run a graph, or continue its thread, until no approval interrupt is left.

    Each approval interrupt becomes signoff approvals (all requested first, so every card
    is out at once, then waited for); the graph resumes with the answers. The graph needs
    a checkpointer and ``config`` a ``thread_id``. Pass ``graph_input=None`` to continue a
    thread as it was left, e.g. after the agent process restarted.

    Args:
        graph: The compiled graph.
        graph_input: The input of a new run, or None to continue the thread.
        config: The run's configuration, with ``configurable.thread_id``.
        client: The signoff client.
        agent: The agent name signoff knows these calls by.
        session_id: The session of the approvals (default: the thread id), which grants
            of scope ``run`` cover.
        on_behalf_of: The user the approvals are asked for, where the token may.
        max_rounds: How many times at most to resume.

    Returns:
        The thread's state values once no approval interrupt is pending (another kind of
        interrupt may be).

    Raises:
        ValueError: ``config`` names no thread, or ``max_rounds`` resumes were not enough.
    """
    thread_id = _thread_id(config)
    if graph_input is not None:
        graph.invoke(graph_input, config)
    for _ in range(max_rounds):
        snapshot = graph.get_state(config)
        asked = [(item, approval_requests(item)) for item in snapshot.interrupts]
        pending = [(item, requests) for item, requests in asked if requests is not None]
        if not pending:
            return snapshot.values
        asks = [
            (item.id, index, request)
            for item, requests in pending
            for index, request in enumerate(requests)
        ]
        decisions = [
            client.request_approval(
                **_approval_fields(request, agent, session_id or thread_id, on_behalf_of),
                idempotency_key=idempotency_key(thread_id, item_id, index),
                wait=False,
            )
            for item_id, index, request in asks
        ]
        decided = [d if not d.pending else client.wait(d.approval_id) for d in decisions]
        graph.invoke(Command(resume=_resume(asks, decided)), config)
    raise ValueError(f"still interrupted for approval after {max_rounds} resumes")


async def arun_with_approvals(
    graph: Pregel[Any, Any, Any, Any],
    graph_input: Any,
    config: RunnableConfig,
    *,
    client: AsyncSignoffClient,
    agent: str,
    session_id: str | None = None,
    on_behalf_of: str | None = None,
    max_rounds: int = 100,
) -> Any:
    """`run_with_approvals` for async graphs and the async client (same arguments)."""
    thread_id = _thread_id(config)
    if graph_input is not None:
        await graph.ainvoke(graph_input, config)
    for _ in range(max_rounds):
        snapshot = await graph.aget_state(config)
        asked = [(item, approval_requests(item)) for item in snapshot.interrupts]
        pending = [(item, requests) for item, requests in asked if requests is not None]
        if not pending:
            return snapshot.values
        asks = [
            (item.id, index, request)
            for item, requests in pending
            for index, request in enumerate(requests)
        ]
        decisions = [
            await client.request_approval(
                **_approval_fields(request, agent, session_id or thread_id, on_behalf_of),
                idempotency_key=idempotency_key(thread_id, item_id, index),
                wait=False,
            )
            for item_id, index, request in asks
        ]
        decided = [d if not d.pending else await client.wait(d.approval_id) for d in decisions]
        await graph.ainvoke(Command(resume=_resume(asks, decided)), config)
    raise ValueError(f"still interrupted for approval after {max_rounds} resumes")


def _thread_id(config: RunnableConfig) -> str:
    thread_id = config.get("configurable", {}).get("thread_id")
    if thread_id is None:
        raise ValueError('config needs {"configurable": {"thread_id": ...}} and a checkpointer')
    return str(thread_id)


def _approval_fields(
    request: HumanInterrupt, agent: str, session_id: str, on_behalf_of: str | None
) -> dict[str, Any]:
    return {
        "agent": agent,
        "tool": request["action_request"]["action"],
        "arguments": request["action_request"]["args"],
        "description": request.get("description"),
        "session_id": session_id,
        "on_behalf_of": on_behalf_of,
    }


def _resume(
    asks: list[tuple[str, int, HumanInterrupt]], decided: list[Decision]
) -> dict[str, list[HumanResponse]]:
    resume: dict[str, list[HumanResponse]] = {}
    for (item_id, _, request), decision in zip(asks, decided, strict=True):
        resume.setdefault(item_id, []).append(human_response(decision, request))
    return resume
