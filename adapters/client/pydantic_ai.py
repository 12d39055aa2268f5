"""Pydantic AI: deferred tool approvals decided by a person in signoff.

A Pydantic AI agent whose tools need approval (``requires_approval=True``, or a tool
raising `ApprovalRequired`) ends its run with `DeferredToolRequests` when the model
calls them. `run_with_approvals` (and `run_with_approvals_sync`) turns each of
``requests.approvals`` into a signoff approval, keyed by the conversation and the call
(its place in the history and its id), waits for the decisions and continues the run
with `DeferredToolResults`:
`ToolApproved()` as asked, `ToolApproved(override_args=...)` with a person's edits,
`ToolDenied(message)` with ``Permission denied`` and the reason, which the model reads.

The message history, serialised with `dump_history` (Pydantic AI's
`ModelMessagesTypeAdapter`) each time the run stops for approvals, is all an agent
process needs to survive a restart: run again with the saved history and no prompt, and
the same approvals are asked for again (the same ones, never second cards).

Pydantic AI is imported here only (the client's ``pydantic-ai`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.agent import AbstractAgent, AgentRunResult
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)

from adapters.client import AsyncSignoffClient, Decision, SignoffClient, derive_key

__all__ = [
    "approval_result",
    "approval_results",
    "approval_results_sync",
    "dump_history",
    "idempotency_key",
    "load_history",
    "pending_approvals",
    "run_with_approvals",
    "run_with_approvals_sync",
]

DENIED = "Permission denied"
"""What the model reads for a denied call, followed by the reason when one was given."""

Save = Callable[[bytes], None]
"""Keeps the serialised message history (see `dump_history`)."""


def idempotency_key(conversation_id: str, position: int, tool_call_id: str) -> str:
    """The idempotency key of the approval for one tool call of one conversation.

    The same on every attempt, in every process: a restarted agent asking again gets the
    approval it asked for before. The position of the model response holding the call in
    the history tells apart two calls with the same id (models that number their calls).

    Args:
        conversation_id: The conversation.
        position: The index of the model response holding the call in the history.
        tool_call_id: The call's id.
    """
    return derive_key("pydantic-ai", conversation_id, position, tool_call_id)


def approval_result(decision: Decision) -> ToolApproved | ToolDenied:
    """The deferred tool result of a decided approval.

    Raises:
        ValueError: The approval is still pending.
    """
    if decision.pending:
        raise ValueError(f"approval {decision.approval_id} is still pending")
    if decision.allowed:
        if not decision.edited:
            return ToolApproved()
        return ToolApproved(override_args=dict(decision.arguments))
    reason = decision.reason
    return ToolDenied(message=f"{DENIED}: {reason}" if reason else DENIED)


def dump_history(messages: Sequence[ModelMessage]) -> bytes:
    """A run's message history as JSON (Pydantic AI's own format)."""
    return ModelMessagesTypeAdapter.dump_json(list(messages))


def load_history(data: bytes | str) -> list[ModelMessage]:
    """A message history from `dump_history`'s JSON."""
    return ModelMessagesTypeAdapter.validate_json(data)


def pending_approvals(messages: Sequence[ModelMessage]) -> list[ToolCallPart]:
    """The calls a history that stopped for approvals still waits on.

    These are the last model response's tool calls that no later request answers: in a
    history saved when a run ended in approvals only, the calls asking for approval.
    """
    answered: set[str] = set()
    for message in reversed(messages):
        match message:
            case ModelRequest():
                for part in message.parts:
                    # Returns, retries and denials of a call all name it.
                    tool_call_id = getattr(part, "tool_call_id", None)
                    if isinstance(tool_call_id, str):
                        answered.add(tool_call_id)
            case ModelResponse():
                return [call for call in message.tool_calls if call.tool_call_id not in answered]
    return []


def _fields(
    call: ToolCallPart,
    messages: Sequence[ModelMessage],
    *,
    agent: str,
    conversation_id: str,
    on_behalf_of: str | None,
) -> dict[str, Any]:
    """What to ask signoff about `call`, found in the history `messages`.

    Raises:
        ValueError: No model response of `messages` holds the call.
    """
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if isinstance(message, ModelResponse) and call in message.tool_calls:
            # What the model said next to the call: the card shows it as the reason.
            said = " ".join(p.content for p in message.parts if isinstance(p, TextPart))
            return {
                "agent": agent,
                "tool": call.tool_name,
                "arguments": call.args_as_dict(raise_if_invalid=True),
                "description": said.strip() or None,
                "session_id": conversation_id,
                "on_behalf_of": on_behalf_of,
                "idempotency_key": idempotency_key(conversation_id, position, call.tool_call_id),
            }
    raise ValueError(f"no model response of the history holds call {call.tool_call_id!r}")


async def approval_results(
    calls: Sequence[ToolCallPart],
    *,
    client: AsyncSignoffClient,
    agent: str,
    conversation_id: str,
    messages: Sequence[ModelMessage],
    on_behalf_of: str | None = None,
) -> DeferredToolResults:
    """Ask signoff about each call, wait for every decision, and answer them all.

    Every approval is requested before any is waited for, so all cards are out at once.

    Args:
        calls: The calls to approve (``DeferredToolRequests.approvals``).
        client: The signoff client.
        agent: The agent name signoff knows these calls by.
        conversation_id: The conversation: the approvals' session (grants of scope
            ``run`` cover it) and part of their idempotency keys.
        messages: The run's history (``all_messages()``), which holds the calls; the
            model's text next to a call is shown on its card as the reason.
        on_behalf_of: The user the approvals are asked for, where the token may.

    Raises:
        ValueError: A call is not in `messages`.

    Returns:
        One result per call, keyed by tool call id.
    """
    decisions = [
        await client.request_approval(
            **_fields(
                call,
                messages,
                agent=agent,
                conversation_id=conversation_id,
                on_behalf_of=on_behalf_of,
            ),
            wait=False,
        )
        for call in calls
    ]
    decided = [d if not d.pending else await client.wait(d.approval_id) for d in decisions]
    return _results(calls, decided)


def approval_results_sync(
    calls: Sequence[ToolCallPart],
    *,
    client: SignoffClient,
    agent: str,
    conversation_id: str,
    messages: Sequence[ModelMessage],
    on_behalf_of: str | None = None,
) -> DeferredToolResults:
    """`approval_results` with the sync client (same arguments)."""
    decisions = [
        client.request_approval(
            **_fields(
                call,
                messages,
                agent=agent,
                conversation_id=conversation_id,
                on_behalf_of=on_behalf_of,
            ),
            wait=False,
        )
        for call in calls
    ]
    decided = [d if not d.pending else client.wait(d.approval_id) for d in decisions]
    return _results(calls, decided)


def _results(calls: Sequence[ToolCallPart], decided: Sequence[Decision]) -> DeferredToolResults:
    return DeferredToolResults(
        approvals={
            call.tool_call_id: approval_result(decision)
            for call, decision in zip(calls, decided, strict=True)
        }
    )


def _approvals_only(output: Any) -> list[ToolCallPart] | None:
    """The calls to approve when a run stopped for approvals only, else None."""
    if isinstance(output, DeferredToolRequests) and output.approvals and not output.calls:
        return list(output.approvals)
    return None


async def run_with_approvals(
    pydantic_agent: AbstractAgent[Any, Any],
    user_prompt: str | None = None,
    *,
    client: AsyncSignoffClient,
    agent: str,
    conversation_id: str,
    message_history: Sequence[ModelMessage] | None = None,
    save: Save | None = None,
    on_behalf_of: str | None = None,
    max_rounds: int = 100,
    **run_options: Any,
) -> AgentRunResult[Any]:
    """Run a Pydantic AI agent, asking signoff for each tool call that needs approval.

    The agent's ``output_type`` must include `DeferredToolRequests`. Each time the run
    stops for approvals, its history is handed to ``save`` (as `dump_history` bytes), the
    approvals are decided in signoff, and the run continues with the results.

    To continue after the agent process restarted, pass the saved history (`load_history`)
    as ``message_history`` and no prompt: the calls it waits on are asked for again with
    the same idempotency keys, so signoff answers with the same approvals.

    Args:
        pydantic_agent: The Pydantic AI agent.
        user_prompt: The prompt, or None to continue ``message_history``.
        client: The signoff client.
        agent: The agent name signoff knows these calls by.
        conversation_id: The conversation (see `approval_results`).
        message_history: The history to continue.
        save: Keeps the history each time the run stops for approvals.
        on_behalf_of: The user the approvals are asked for, where the token may.
        max_rounds: How many times at most to continue the run.
        **run_options: Passed on to ``pydantic_agent.run`` (``deps``, ``model`` ...).

    Returns:
        The result of the run's last leg: its output is the agent's answer, or
        `DeferredToolRequests` when calls other than approvals (external calls) wait.

    Raises:
        ValueError: ``max_rounds`` legs were not enough.
    """
    history = list(message_history) if message_history else None
    results: DeferredToolResults | None = None
    if user_prompt is None and history and (waiting := pending_approvals(history)):
        results = await approval_results(
            waiting,
            client=client,
            agent=agent,
            conversation_id=conversation_id,
            on_behalf_of=on_behalf_of,
            messages=history,
        )
    for _ in range(max_rounds):
        run = await pydantic_agent.run(
            user_prompt, message_history=history, deferred_tool_results=results, **run_options
        )
        history, user_prompt = run.all_messages(), None
        calls = _approvals_only(run.output)
        if calls is None:
            return run
        if save is not None:
            save(dump_history(history))
        results = await approval_results(
            calls,
            client=client,
            agent=agent,
            conversation_id=conversation_id,
            on_behalf_of=on_behalf_of,
            messages=history,
        )
    raise ValueError(f"still waiting for approvals after {max_rounds} legs")


def run_with_approvals_sync(
    pydantic_agent: AbstractAgent[Any, Any],
    user_prompt: str | None = None,
    *,
    client: SignoffClient,
    agent: str,
    conversation_id: str,
    message_history: Sequence[ModelMessage] | None = None,
    save: Save | None = None,
    on_behalf_of: str | None = None,
    max_rounds: int = 100,
    **run_options: Any,
) -> AgentRunResult[Any]:
    """`run_with_approvals` with the sync client and ``run_sync`` (same arguments)."""
    history = list(message_history) if message_history else None
    results: DeferredToolResults | None = None
    if user_prompt is None and history and (waiting := pending_approvals(history)):
        results = approval_results_sync(
            waiting,
            client=client,
            agent=agent,
            conversation_id=conversation_id,
            on_behalf_of=on_behalf_of,
            messages=history,
        )
    for _ in range(max_rounds):
        run = pydantic_agent.run_sync(
            user_prompt, message_history=history, deferred_tool_results=results, **run_options
        )
        history, user_prompt = run.all_messages(), None
        calls = _approvals_only(run.output)
        if calls is None:
            return run
        if save is not None:
            save(dump_history(history))
        results = approval_results_sync(
            calls,
            client=client,
            agent=agent,
            conversation_id=conversation_id,
            on_behalf_of=on_behalf_of,
            messages=history,
        )
    raise ValueError(f"still waiting for approvals after {max_rounds} legs")
