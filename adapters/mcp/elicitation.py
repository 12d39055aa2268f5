"""MCP elicitation as typed input: a server's ``elicitation/create`` during a tool call
becomes a durable typed-input ticket that a person answers from Slack, Discord or the
console.

How it works. While an MCP tool call of a run is in flight, its server may ask for input
(form mode: a message and a flat object schema of primitive properties). The process
holding the call starts an *input run*: a run of the calling agent's input agent
(``<agent>.elicitation``, registered by `McpHub.attach`), whose deterministic model calls
one tool, named like the MCP tool, that returns an `InputRequest` with the server's
message and schema. That run parks on an ordinary typed-input ticket: cards and forms on
every edge, answers validated against the schema, decided exactly once on any replica.
Who may answer is who may decide the MCP tool (its approvers, else the run's requester);
the ticket's deadline is the tool's, else the server's ``timeout``.

The holding process polls the ticket (doubling pauses up to a second, as for external
approvals' waits) and hands the server an `mcp_types.ElicitResult`: ``accept`` with the
answer, ``decline`` for a Deny, ``cancel`` for an expiry or a voided ticket. When the call
ends before the answer (it timed out, the connection went away), the input run is
cancelled and its ticket voided. When the process holding the call dies, the call is left
dispatched: whoever recovers the run applies its replay policy (``manual``: uncertain),
and the sweep (`InputDesk.sweep`, every few seconds on every process with the hub
attached) cancels the input run whose call is no longer in flight, saying why.

Through the MCP gateway (`adapters.mcp.gateway`), a call's elicitation goes to the MCP
client that made the call instead, when that client declared the elicitation capability
(`forwarding`): the client's answer is the server's. A client without the capability, or
a call dispatched by a process other than the one serving the client, gets ``cancel``
(gateway agents have no input agent); so does a question the client leaves unanswered for
the gateway's ``question_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mcp_types

from runtime import (
    Agent,
    Deny,
    ExpiryAction,
    InputData,
    InputRequest,
    ModelRequest,
    ModelResponse,
    Permission,
    ReplayPolicy,
    RunStatus,
    SignoffError,
    TicketStatus,
    Tool,
    ToolCallRequest,
    ToolContext,
    current_tool_context,
)
from runtime.edges import REQUESTER_GROUPS

if TYPE_CHECKING:
    from runtime import Runtime

log = logging.getLogger("signoff.mcp")

SUFFIX = ".elicitation"
"""An input agent's name is its agent's name with this suffix."""

ORIGIN_KEY = "mcp_elicitation"
"""The origin key of an input run: the run, call, attempt, server and tool that asked."""

MODEL_NAME = "signoff:mcp-elicitation"
"""The model name input runs record."""

ENDED_REASON = "the MCP tool call that asked for this input ended before it was answered"
HOLDER_GONE_REASON = (
    "the process holding the MCP tool call that asked for this input stopped; the call "
    "follows its replay policy"
)

_ORIGIN_KEPT = frozenset(
    {"platform", "channel", "channel_id", "guild_id", "thread_ts", "team_id", REQUESTER_GROUPS}
)
_PRIMITIVES = frozenset({"string", "number", "integer", "boolean"})
_FIRST_POLL = 0.05
_LONGEST_POLL = 1.0
_SWEEP_SECONDS = 5.0
_SWEEP_LIMIT = 500


def input_agent_name(agent: str) -> str:
    """The name of `agent`'s input agent."""
    return agent + SUFFIX


def check_schema(schema: Mapping[str, Any]) -> str | None:
    """Why a requested schema is not a flat object of primitive properties (None: it is)."""
    if schema.get("type") != "object":
        return "the requested schema is not an object"
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return "the requested schema has no properties"
    for name, spec in properties.items():
        if not isinstance(spec, Mapping):
            return f"property {name!r} is not a schema"
        kind = spec.get("type")
        if kind == "array":
            items = spec.get("items")
            if isinstance(items, Mapping) and (items.get("enum") or items.get("anyOf")):
                continue  # a multi-select of strings
            return f"property {name!r} is an array of other than choices"
        if kind not in _PRIMITIVES:
            return f"property {name!r} is not a string, number, integer or boolean"
    return None


class _InputModel:
    """The deterministic model of input runs: the opening message holds the request; the
    first turn calls the input tool, the next one ends the run."""

    name = MODEL_NAME

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the input tool once, then end the run."""
        opening = next((m for m in request.messages if m.get("role") == "user"), {})
        if any(m.get("role") == "assistant" for m in request.messages):
            results = [
                str(m.get("content") or "") for m in request.messages if m.get("role") == "tool"
            ]
            last = results[-1] if results else ""
            return ModelResponse(
                text="Declined." if last.startswith("Permission denied") else "Answered."
            )
        try:
            asked = json.loads(str(opening.get("content") or ""))
            tool = str(asked["tool"])
            arguments = {"message": str(asked["message"]), "schema": dict(asked["schema"])}
        except (ValueError, KeyError, TypeError):
            return ModelResponse(text="Not an input request; nothing to ask.")
        return ModelResponse(
            text=None,
            tool_calls=(ToolCallRequest(id="call_1", name=tool, arguments=json.dumps(arguments)),),
        )


async def _ask(args: dict[str, Any]) -> Any:
    context = current_tool_context()
    if context.answer is not None:
        return {"action": "accept", "content": context.answer}
    return InputRequest(str(args.get("message") or ""), dict(args.get("schema") or {}))


_ANY_OBJECT: dict[str, Any] = {"type": "object"}


class _Catalog(dict[str, Tool]):
    """Tools built by name when first asked for (``get``, ``in`` and ``[]``)."""

    def __init__(self, build: Callable[[str], Tool | None]) -> None:
        super().__init__()
        self._build = build

    def get(self, name: str, default: Any = None) -> Any:
        found = super().get(name)
        if found is None and isinstance(name, str) and name:
            found = self._build(name)
            if found is not None:
                self[name] = found
        return found if found is not None else default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> Tool:
        found: Tool | None = self.get(name)
        if found is None:
            raise KeyError(name)
        return found


class InputAgent(Agent):
    """The input agent of an agent with MCP servers that may elicit.

    Its tools are named like the agent's tools and built when first asked for: each asks
    for typed input, decided by whoever may decide the agent's tool of that name.

    Args:
        agent: The agent whose MCP tool calls may elicit.
        deadline: The deadline of tools without one (the server's call timeout).
    """

    internal = True
    """Started by signoff itself, never by a person: the edges neither offer it nor start
    it by hand."""

    def __init__(self, agent: Agent, deadlines: Mapping[str, float]) -> None:
        super().__init__(
            input_agent_name(agent.name),
            instructions="",
            model=_InputModel(),
            version=agent.version,
            max_turns=3,
            description=f"Typed input MCP servers ask for during {agent.name}'s tool calls",
        )
        self.parent = agent
        self._deadlines = dict(deadlines)
        self.tools = _Catalog(self._build)

    def _build(self, name: str) -> Tool | None:
        parent = self.parent
        found = parent.tools.get(name)
        if not isinstance(found, Tool) or found.server is None:
            return None  # only the agent's MCP tools ask for input
        deadline: Any = parent.deadline_for(found)
        if deadline is None:
            deadline = self._deadlines.get(found.server)
        return Tool.from_schema(
            name,
            f"Input asked for by {name}",
            _ANY_OBJECT,
            _ask,
            permission=Permission.ALLOW,
            replay_policy=ReplayPolicy.SAFE,
            approvers=parent.approvers_for(found),
            four_eyes=False,
            deadline=deadline,
            on_expiry=ExpiryAction.DENY,
            grants=(),
            editable=False,
            server=found.server,
            decide_in=found.decide_in,
            sso=found.sso,
        )

    @property
    def catalog_fingerprint(self) -> str:
        """The agent's own fingerprint: a ticket is stale once the agent's tools changed."""
        return self.parent.catalog_fingerprint


Forward = Callable[[str, dict[str, Any]], Awaitable[mcp_types.ElicitResult]]
"""Asks an MCP client for input (message, requested schema) and returns its answer."""

_FORWARD: ContextVar[Forward | None] = ContextVar("signoff_mcp_forward", default=None)
_FORWARDS: dict[str, Forward] = {}  # by the run whose calls forward


@contextlib.contextmanager
def forwarding(forward: Forward) -> Iterator[Callable[[str], None]]:
    """Within the block, the elicitations of MCP tool calls made by this task (and the
    tasks it starts) go to `forward`; so do those of the runs named to the function it
    yields (calls a worker of this process dispatches later)."""
    token = _FORWARD.set(forward)
    named: list[str] = []

    def also(run_id: str) -> None:
        _FORWARDS[run_id] = forward
        named.append(run_id)

    try:
        yield also
    finally:
        _FORWARD.reset(token)
        for run_id in named:
            if _FORWARDS.get(run_id) is forward:
                del _FORWARDS[run_id]


@dataclass(frozen=True)
class Asking:
    """One MCP tool call in flight that may elicit.

    Attributes:
        context: The call's tool context.
        server: The MCP server.
        tool: The tool's name in the agent's catalog (with the server's prefix).
        forward: The MCP client the call's elicitations go to (`forwarding`), if any.
    """

    context: ToolContext
    server: str
    tool: str
    forward: Forward | None = field(default_factory=_FORWARD.get)


def asking_now(in_flight: Mapping[str, Asking]) -> Asking | None:
    """The call an elicitation belongs to: the current tool call's, else the only call in
    flight on the connection (a server's request arrives outside the call's task on
    protocols before 2026-07-28); None when that is ambiguous."""
    try:
        context = current_tool_context()
    except SignoffError:
        context = None
    if context is not None and context.call_id in in_flight:
        return in_flight[context.call_id]
    if len(in_flight) == 1:
        return next(iter(in_flight.values()))
    return None


class InputDesk:
    """Turns elicitations into input runs and their answers into `ElicitResult`s.

    Args:
        runtime: The runtime input runs are started on.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._sweeper: asyncio.Task[None] | None = None

    async def elicit(
        self, asking: Asking | None, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """Ask a person for what the server asks, and wait for the answer."""
        if not isinstance(params, mcp_types.ElicitRequestFormParams):
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_PARAMS, message="signoff answers form elicitations only"
            )
        if asking is None:
            log.warning("an MCP elicitation came with no single tool call in flight: cancelled")
            return mcp_types.ElicitResult(action="cancel")
        requested: Any = params.requested_schema
        schema: dict[str, Any] = (
            dict(requested)
            if isinstance(requested, Mapping)
            else requested.model_dump(mode="json", by_alias=True, exclude_none=True)
        )
        forward = asking.forward or _FORWARDS.get(asking.context.run_id)
        if forward is not None:
            return await forward(params.message, schema)
        problem = check_schema(schema)
        if problem is not None:
            return mcp_types.ErrorData(code=mcp_types.INVALID_PARAMS, message=problem)
        context = asking.context
        name = input_agent_name(context.agent)
        if name not in self._runtime.agents:
            return mcp_types.ElicitResult(action="cancel")
        parent = await self._runtime.get(context.run_id)
        origin = {k: v for k, v in parent.origin.items() if k in _ORIGIN_KEPT}
        origin[ORIGIN_KEY] = {
            "run_id": context.run_id,
            "call_id": context.call_id,
            "attempt": context.attempt,
            "server": asking.server,
            "tool": asking.tool,
        }
        opening = json.dumps(
            {"tool": asking.tool, "message": params.message, "schema": schema}, sort_keys=True
        )
        started = await self._runtime.start(
            name, opening, requester=context.requester, origin=origin, wait=True
        )
        settled = False
        try:
            result = await self._answer(started.run_id, started.pending)
            settled = True
            return result
        finally:
            if not settled:
                await self._void(started.run_id, ENDED_REASON)

    async def _answer(self, run_id: str, pending: Any) -> mcp_types.ElicitResult:
        """Wait for the input run's ticket (a worker of this process may be driving the run
        still) and then for its decision."""
        pause = _FIRST_POLL
        ticket_id = next((p.ticket_id for p in pending if p.ticket_id), None)
        while ticket_id is None:
            # Read before the events: a run that ended before its ticket opened never will.
            ended = (await self._runtime.get(run_id)).status.finished
            events = await self._runtime.events(run_id)
            opened = [e for e in events if e["kind"] == "ticket_opened"]
            if opened:
                ticket_id = str((opened[0].get("data") or {}).get("ticket_id"))
            elif ended:
                return mcp_types.ElicitResult(action="cancel")
            else:
                await asyncio.sleep(pause)
                pause = min(pause * 2, _LONGEST_POLL)
        pause = _FIRST_POLL
        while True:
            ticket = await self._runtime.ticket(ticket_id)
            if ticket.status is not TicketStatus.OPEN:
                break
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LONGEST_POLL)
        decision = ticket.decision
        if ticket.status is TicketStatus.DECIDED and isinstance(decision, InputData):
            return mcp_types.ElicitResult(action="accept", content=dict(decision.data))
        if ticket.status is TicketStatus.DECIDED and isinstance(decision, Deny):
            return mcp_types.ElicitResult(action="decline")
        return mcp_types.ElicitResult(action="cancel")  # expired or voided

    async def _void(self, run_id: str, reason: str) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(self._runtime.cancel(run_id, reason=reason))

    # -- the sweep -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sweep."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="mcp-elicitation")

    async def stop(self) -> None:
        """Stop the sweep."""
        task, self._sweeper = self._sweeper, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                log.exception("the sweep of MCP input runs failed")
            await asyncio.sleep(_SWEEP_SECONDS)

    async def sweep(self) -> list[str]:
        """Cancel the input runs whose MCP tool call is no longer in flight (its process
        stopped, and the call was recovered by its replay policy or its run ended); the
        ids of the runs cancelled."""
        voided = []
        runs = await self._runtime.list_runs(statuses=(RunStatus.AWAITING,), limit=_SWEEP_LIMIT)
        for run in runs:
            asked = run.origin.get(ORIGIN_KEY)
            if not run.agent.endswith(SUFFIX) or not isinstance(asked, Mapping):
                continue
            if await self._in_flight(asked):
                continue
            await self._void(run.run_id, HOLDER_GONE_REASON)
            voided.append(run.run_id)
        return voided

    async def _in_flight(self, asked: Mapping[str, Any]) -> bool:
        """Whether the call that asked is still dispatched on the attempt that asked."""
        try:
            events = await self._runtime.events(str(asked.get("run_id")))
        except SignoffError:
            return False
        call_id = asked.get("call_id")
        last = None
        for event in events:
            data = event.get("data") or {}
            if data.get("call_id") == call_id and str(event.get("kind", "")).startswith("tool_"):
                last = event
        if last is None or last.get("kind") != "tool_dispatched":
            return False
        return (last.get("data") or {}).get("attempt") == asked.get("attempt")
