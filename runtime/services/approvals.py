"""External approvals: asking whether an external agent's call may run, and reading the
answer.

A request starts one run of the external agent (`runtime.domain.external`), driven at once
so that a rule or a standing grant answers in the same call; otherwise it parks on an
ordinary ticket. What the approval says is read from the run's one call and its ticket.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from runtime.domain.agent import Agent
from runtime.domain.approvals import (
    Approval,
    ApprovalBasis,
    ApprovalRequest,
    ApprovalStatus,
)
from runtime.domain.errors import (
    ApprovalRefused,
    ConfigurationError,
    InvalidApproval,
    NotAwaiting,
    RunNotFound,
)
from runtime.domain.external import (
    ORIGIN_KEY,
    ExternalAgent,
    check_agent_name,
    extra_secret,
    request_message,
    request_of,
)
from runtime.domain.notifications import APPROVAL_RESUME
from runtime.domain.policies import REQUESTER_GROUPS
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import Actor, Deny, ResumeTicket
from runtime.domain.tools import Tool
from runtime.domain.visibility import sees_ticket
from runtime.engine.deps import Deps
from runtime.engine.journal import record
from runtime.services.control import RunControl
from runtime.services.outcomes import RECONCILES, outcome_of, reported_event
from runtime.services.queries import Page, decode_cursor, encode_cursor
from runtime.services.starting import Starter
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, EventRecord, Position, RunRecord, viewer_keys

CALLBACK_KEY = "approval_callback_url"
"""The origin key of the URL an approval's decision is delivered to."""

DEFERRED_EVENT = "approval_deferred"
"""The event recording that the caller stopped waiting and is to be resumed."""
WITHDRAWN_REASON = "withdrawn by its caller"

IDEMPOTENCY_SCOPE = "approvals"
"""Idempotency keys of approval requests are scoped per sender: ``approvals:<actor id>``."""

MAX_SESSION = 200
"""The longest session id a request may give."""
_MAX_TOOL = 200
_THREAD_LIMIT = 128
_FIRST_POLL = 0.05
_PARKING = 10.0
_LONGEST_POLL = 1.0
_SCAN = 200


def thread_of(agent: str, session_id: str | None) -> str | None:
    """The thread of an agent's session (None: a fresh thread per approval).

    ``ext:<agent>:<session>``, or a digest of both where that would be too long.
    """
    if session_id is None:
        return None
    readable = f"ext:{agent}:{session_id}"
    if len(readable) <= _THREAD_LIMIT:
        return readable
    digest = hashlib.sha256(f"{agent}\n{session_id}".encode()).hexdigest()[:40]
    return f"ext:{agent}:#{digest}"


def fingerprint_of(request: ApprovalRequest) -> str:
    """What an idempotency key is bound to: a digest of the whole request."""
    body = {
        "agent": request.agent,
        "tool": request.tool,
        "arguments": request.arguments,
        "description": request.description,
        "schema": request.schema,
        "session_id": request.session_id,
        "on_behalf_of": request.on_behalf_of,
        "approvers": list(request.approvers) if request.approvers is not None else None,
        "deadline": request.deadline.total_seconds() if request.deadline is not None else None,
        "secret": sorted(request.secret),
        "callback_url": request.callback_url,
        "resume": request.resume,
    }
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class Approvals:
    """Requests external approvals and reads them."""

    def __init__(self, deps: Deps, starter: Starter, control: RunControl) -> None:
        self._deps = deps
        self._starter = starter
        self._control = control

    # -- asking ------------------------------------------------------------------------
    def agent_for(self, name: str) -> ExternalAgent:
        """The external agent a request names.

        Raises:
            ApprovalRefused: It is an agent of signoff's own, or undeclared where only
                declared agents may ask.
        """
        found = self._deps.agents.get(name) if isinstance(name, str) else None
        if isinstance(found, ExternalAgent):
            return found
        if found is not None:
            raise ApprovalRefused(
                f"agent {name!r} runs inside signoff; only external agents ask for approvals"
            )
        if isinstance(name, str) and name and not check_agent_name(name):
            raise InvalidApproval(
                "an agent name is 1-64 letters, digits, '_', '.' or '-', starting with a "
                "letter or digit"
            )
        raise ApprovalRefused(
            f"agent {name!r} is not declared as an external agent, and only declared agents may ask"
        )

    async def request(
        self, request: ApprovalRequest, actor: Actor, idempotency_key: str | None
    ) -> Approval:
        """Ask whether a call may run (see `Runtime.request_approval`)."""
        agent = self.agent_for(request.agent)
        tool = _checked(agent, request)
        requester = request.on_behalf_of or actor.id
        asked: dict[str, Any] = {
            "requested_by": actor.id,
            "session_id": request.session_id,
            "description": request.description,
            "secret": sorted(set(request.secret)),
        }
        if request.on_behalf_of is not None:
            asked["on_behalf_of"] = request.on_behalf_of
        if request.approvers is not None:
            asked["approvers"] = list(request.approvers)
        if request.deadline is not None:
            asked["deadline_seconds"] = request.deadline.total_seconds()
        origin: dict[str, Any] = {**agent.approvals, ORIGIN_KEY: asked}
        if request.callback_url is not None:
            origin[CALLBACK_KEY] = request.callback_url
        if request.resume is not None:
            origin[APPROVAL_RESUME] = dict(request.resume)
        if request.on_behalf_of is None and actor.groups:
            origin[REQUESTER_GROUPS] = sorted(actor.groups)
        keys = None
        if idempotency_key is not None:
            scope = f"{IDEMPOTENCY_SCOPE}:{actor.id}"
            keys = (scope, idempotency_key, fingerprint_of(request))
        hidden = tool.secret | frozenset(request.secret)
        shown = {k: ("***" if k in hidden else v) for k, v in request.arguments.items()}
        result = await self._starter.start(
            agent,
            f"{request.tool} {json.dumps(shown, sort_keys=True, default=str)}",
            requester=requester,
            thread_id=thread_of(agent.name, request.session_id),
            origin=origin,
            wait=True,
            idempotency=keys,
            joining_as=None,
            opening=request_message(request.tool, request.arguments, request.description),
        )
        found = await self._parked(await self.get(result.run_id, None))
        return replace(found, replayed=result.replayed)

    async def _parked(self, found: Approval) -> Approval:
        """`found` once its call reached a ticket or was settled: a request answered while
        the approval's run is still being driven (the same key sent again meanwhile, to
        this process or another) waits for it, so that a pending answer names its ticket.
        After `_PARKING` seconds (a run left queued by a process that died, until a worker
        recovers it) it is answered as it stands."""
        loop = asyncio.get_running_loop()
        until = loop.time() + _PARKING
        pause = _FIRST_POLL
        while found.status == "pending" and found.ticket_id is None and loop.time() < until:
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LONGEST_POLL)
            found = await self.get(found.approval_id, None)
        return found

    # -- reading -----------------------------------------------------------------------
    async def get(self, approval_id: str, viewer: Actor | None) -> Approval:
        """The approval as it stands (see `Runtime.approval`).

        Raises:
            RunNotFound: No such approval, or `viewer` may not see it.
        """
        async with self._deps.store.transaction() as tx:
            run = await tx.get_run(approval_id)
            if run is None or not _is_approval(run):
                raise RunNotFound(f"no approval {approval_id!r}")
            tickets = await tx.tickets_for_run(run.run_id)
            if not _sees(viewer, run, tickets):
                raise RunNotFound(f"no approval {approval_id!r}")
            calls = await tx.calls_for_run(run.run_id)
            events = await tx.events(run.run_id)
            reported = reported_event(events)
            outcome = await outcome_of(tx, reported) if reported is not None else None
        deferred = any(e.kind == DEFERRED_EVENT for e in events)
        return replace(self._view(run, calls, tickets, events), outcome=outcome, deferred=deferred)

    async def stop_waiting(
        self, approval_id: str, actor: Actor, *, defer: bool, reason: str | None
    ) -> Approval:
        """The caller stops waiting for a pending approval: it is to be resumed once
        decided (`defer`), or withdrawn (its run cancelled, its ticket voided). A decided
        approval is returned as it is, and nothing is recorded (see
        `Runtime.defer_approval`, `Runtime.withdraw_approval`)."""
        found = await self.get(approval_id, actor)
        if actor.id not in (found.requester, found.requested_by):
            raise RunNotFound(f"no approval {approval_id!r}")
        if found.decided:
            return found
        if not defer:
            with contextlib.suppress(NotAwaiting):
                await self._control.cancel(approval_id, actor, reason or WITHDRAWN_REASON)
            return await self.get(approval_id, actor)
        deps = self._deps
        async with deps.store.transaction() as tx:
            # The run's row is the lock: the decision that ends the run either committed
            # before (the approval reads decided) or reads this event after it.
            run = await tx.get_run(approval_id, for_update=True)
            if run is None or run.status.finished:
                return await self.get(approval_id, actor)
            if APPROVAL_RESUME not in run.origin:
                raise InvalidApproval(
                    f"approval {approval_id} was requested without a resume destination: "
                    "there is nothing to resume it with"
                )
            if not any(e.kind == DEFERRED_EVENT for e in await tx.events(approval_id)):
                await record(tx, approval_id, deps.clock.now(), DEFERRED_EVENT, by=actor.id)
        return await self.get(approval_id, actor)

    async def wait(
        self, approval_id: str, viewer: Actor, seconds: float, stop: asyncio.Event | None
    ) -> Approval:
        """The approval once it is not pending, or as it stands after `seconds` or once
        `stop` is set (see `Runtime.wait_approval`)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + max(0.0, seconds)
        pause = _FIRST_POLL
        while True:
            found = await self.get(approval_id, viewer)
            left = until - loop.time()
            if found.decided or left <= 0 or (stop is not None and stop.is_set()):
                return found
            if pause == _FIRST_POLL:
                self._deps.reach("approval_waiting", approval_id=approval_id)
            if stop is None:
                await asyncio.sleep(min(pause, left))
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), min(pause, left))
            pause = min(pause * 2, _LONGEST_POLL)

    async def page(
        self,
        viewer: Actor,
        status: ApprovalStatus | None,
        agent: str | None,
        session_id: str | None,
        limit: int,
        cursor: str | None,
    ) -> Page[Approval]:
        """A page of the approvals `viewer` may see, newest first (see
        `Runtime.approval_page`)."""
        before = decode_cursor("approvals", viewer, cursor)
        thread = thread_of(agent, session_id) if agent is not None else None
        shown: list[Approval] = []
        last: Position | None = None
        scanned = 0
        while len(shown) < limit and scanned < _SCAN * 5:
            async with self._deps.store.transaction() as tx:
                found = await _visible_runs(tx, viewer, thread, _SCAN, before)
            if not found:
                last = None
                break
            for run in found:
                scanned += 1
                last = Position(run.created_at, run.run_id)
                if not _is_approval(run) or (agent is not None and run.agent != agent):
                    continue
                if session_id is not None and request_of(run.origin).get("session_id") != (
                    session_id
                ):
                    continue
                try:
                    item = await self.get(run.run_id, viewer)
                except RunNotFound:
                    continue
                if status is None or item.status == status:
                    shown.append(item)
                    if len(shown) >= limit:
                        break
            if len(found) < _SCAN and len(shown) < limit:
                last = None
                break
            before = last
        following = encode_cursor("approvals", viewer, last) if last is not None else None
        return Page(shown, following)

    def _view(
        self,
        run: RunRecord,
        calls: Sequence[CallRecord],
        tickets: Sequence[ResumeTicket],
        events: Sequence[EventRecord],
    ) -> Approval:
        agent = self._deps.agents.get(run.agent)
        asked = request_of(run.origin)
        opening = _opening(run)
        call = calls[0] if calls else None
        ticket = next(
            (t for t in reversed(tickets) if call is not None and t.call_id == call.call_id),
            None,
        )
        tool_name = call.tool if call is not None else str(opening.get("tool") or "")
        requested = dict(opening.get("arguments") or {})
        tool = agent.tools.get(tool_name) if isinstance(agent, Agent) and tool_name else None
        secret = (tool.secret if isinstance(tool, Tool) else frozenset()) | extra_secret(run.origin)
        verdict = _verdict(run, call, ticket, events)
        return Approval(
            approval_id=run.run_id,
            status=verdict.status,
            agent=run.agent,
            tool=tool_name,
            arguments=dict(call.args) if call is not None else requested,
            requested_arguments=requested,
            ticket_id=ticket.ticket_id if ticket is not None else None,
            reason=verdict.reason,
            basis=verdict.basis,
            grant_id=verdict.grant_id,
            decided_by=verdict.decided_by,
            decided_via=verdict.decided_via,
            decided_at=verdict.decided_at,
            session_id=asked.get("session_id"),
            requester=run.requester or "",
            requested_by=str(asked.get("requested_by") or run.requester or ""),
            created_at=run.created_at,
            deadline=(
                ticket.deadline
                if ticket is not None and ticket.status is TicketStatus.OPEN
                else None
            ),
            secret=tuple(sorted(secret)),
        )


class _Verdict:
    def __init__(
        self,
        status: ApprovalStatus,
        basis: ApprovalBasis | None = None,
        reason: str | None = None,
        *,
        grant_id: str | None = None,
        decided_by: str | None = None,
        decided_via: str | None = None,
        decided_at: datetime | None = None,
    ) -> None:
        self.status: ApprovalStatus = status
        self.basis: ApprovalBasis | None = basis
        self.reason = reason
        self.grant_id = grant_id
        self.decided_by = decided_by
        self.decided_via = decided_via
        self.decided_at = decided_at


_ALLOWED = frozenset(
    {CallState.APPROVED, CallState.DISPATCHED, CallState.COMPLETED, CallState.AWAITING_CHILD}
)
_RAN = frozenset({CallState.FAILED, CallState.UNCERTAIN, CallState.RESOLVED})
"""Where a call may end once dispatched: it was allowed, whatever became of it."""


def _was_allowed(call: CallRecord) -> bool:
    """Whether `call` was allowed: on its way, run, or dispatched and then failed or left
    uncertain (a gateway's tool that ran; a call that failed before it was judged, its
    arguments not fitting, was never dispatched)."""
    return call.state in _ALLOWED or (call.state in _RAN and call.attempts > 0)


def _verdict(
    run: RunRecord,
    call: CallRecord | None,
    ticket: ResumeTicket | None,
    events: Sequence[EventRecord],
) -> _Verdict:
    """Whether the call was allowed or denied, on what basis, by whom."""
    if call is None:
        if run.status.finished:
            # The run ended before proposing the call (e.g. cancelled while queued).
            basis: ApprovalBasis = "cancelled" if run.status is RunStatus.CANCELLED else "rule"
            return _Verdict("denied", basis, run.error or run.final_text, decided_at=run.updated_at)
        return _Verdict("pending")
    proposed = next(
        (e for e in events if e.kind == "tool_proposed" and e.data.get("call_id") == call.call_id),
        None,
    )
    rule = str(proposed.data.get("rule")) if proposed is not None and proposed.data else None
    said = proposed.data.get("policy") if proposed is not None else None
    if (
        isinstance(said, dict)
        and proposed is not None
        and proposed.data.get("ruled") != proposed.data.get("permission")
    ):
        # The agent's policy, not the rule, decided what the call got.
        rule = f"policy {said.get('id')}" + (f": {said['reason']}" if said.get("reason") else "")
    if call.state in (CallState.PROPOSED, CallState.AWAITING_DECISION):
        return _Verdict("pending")
    if ticket is not None and ticket.status is TicketStatus.EXPIRED and not _after(call):
        return _Verdict("denied", "expiry", "expired", decided_at=ticket.decided_at)
    decider = call.decided_by or {}
    if ticket is not None and ticket.status is TicketStatus.DECIDED:
        decision = ticket.decision
        via = decider.get("platform") if isinstance(decider, dict) else None
        if isinstance(decision, Deny) or call.state is CallState.DENIED:
            reason = decision.reason if isinstance(decision, Deny) else call.reason
            return _Verdict(
                "denied",
                "decision",
                reason,
                decided_by=ticket.decided_by,
                decided_via=via,
                decided_at=ticket.decided_at,
            )
        if _was_allowed(call):
            return _Verdict(
                "allowed",
                "decision",
                None,
                decided_by=ticket.decided_by,
                decided_via=via,
                decided_at=ticket.decided_at,
            )
    if call.state is CallState.CANCELLED or (
        not _was_allowed(call) and run.status is RunStatus.CANCELLED
    ):
        return _Verdict("denied", "cancelled", run.error or "cancelled", decided_at=call.updated_at)
    if _was_allowed(call):
        applied = next(
            (
                e
                for e in events
                if e.kind == "grant_applied" and e.data.get("call_id") == call.call_id
            ),
            None,
        )
        if applied is not None:
            return _Verdict(
                "allowed",
                "grant",
                f"grant {applied.data.get('grant_id')}",
                grant_id=str(applied.data.get("grant_id")),
                decided_by=str(applied.data.get("granted_by") or "") or None,
                decided_via="grant",
                decided_at=applied.at,
            )
        return _Verdict("allowed", "rule", rule, decided_at=call.created_at)
    if call.state is CallState.DENIED:
        return _Verdict("denied", "rule", rule or call.reason, decided_at=call.created_at)
    # A call that failed before it could be judged (its arguments did not fit).
    return _Verdict("denied", "rule", call.error, decided_at=call.updated_at)


def _after(call: CallRecord) -> bool:
    # An escalated ticket expired, and the call was decided on the next one.
    return _was_allowed(call) or call.decided_by is not None


def _opening(run: RunRecord) -> dict[str, Any]:
    for message in reversed(run.messages):
        if message.get("role") == "user":
            try:
                found = json.loads(str(message.get("content") or ""))
            except ValueError:
                return {}
            return found if isinstance(found, dict) else {}
    return {}


def _sees(viewer: Actor | None, run: RunRecord, tickets: Sequence[ResumeTicket]) -> bool:
    """Whether `viewer` may see an approval: the requester, its sender, whoever may decide
    (or decided) its ticket, operators (None: trusted host code)."""
    if viewer is None or viewer.operator or run.requester in viewer.ids:
        return True
    if viewer.id == request_of(run.origin).get("requested_by"):
        return True
    return any(sees_ticket(viewer, t) for t in tickets)


async def _visible_runs(
    tx: Transaction, viewer: Actor, thread: str | None, limit: int, before: Position | None
) -> list[RunRecord]:
    if viewer.operator:
        return await tx.list_runs(thread_id=thread, limit=limit, before=before)
    return await tx.list_runs(
        thread_id=thread,
        limit=limit,
        involving=viewer.id,
        deciders=viewer_keys(viewer.id, viewer.groups),
        before=before,
    )


def _is_approval(run: RunRecord) -> bool:
    """Whether `run` holds an external approval (a reconciliation run of one does not:
    `runtime.services.outcomes`)."""
    return ORIGIN_KEY in run.origin and RECONCILES not in run.origin


def _checked(agent: ExternalAgent, request: ApprovalRequest) -> Tool:
    """The tool a request names, once everything the request says was checked.

    Raises:
        InvalidApproval: Malformed fields, or arguments that fail the given schema.
        ApprovalRefused: An override the agent does not allow.
    """
    if not isinstance(request.tool, str) or not request.tool or len(request.tool) > _MAX_TOOL:
        raise InvalidApproval(f"a tool name is 1-{_MAX_TOOL} characters")
    if not isinstance(request.arguments, dict):
        raise InvalidApproval("arguments must be a JSON object")
    session = request.session_id
    if session is not None and not (isinstance(session, str) and 0 < len(session) <= MAX_SESSION):
        raise InvalidApproval(f"a session id is 1-{MAX_SESSION} characters")
    if request.approvers is not None:
        if "approvers" not in agent.overrides:
            raise ApprovalRefused(f"agent {agent.name!r} does not let requests choose approvers")
        if not request.approvers or not all(isinstance(a, str) and a for a in request.approvers):
            raise InvalidApproval("approvers must be a non-empty list of user ids or groups")
    if request.deadline is not None:
        if "deadline" not in agent.overrides:
            raise ApprovalRefused(f"agent {agent.name!r} does not let requests choose a deadline")
        if request.deadline.total_seconds() <= 0:
            raise InvalidApproval("the deadline must be positive")
    resume = request.resume
    if resume is not None and not (
        isinstance(resume, dict) and isinstance(resume.get("platform"), str) and resume["platform"]
    ):
        raise InvalidApproval("resume must be a destination naming its platform")
    if not all(isinstance(n, str) and n for n in request.secret):
        raise InvalidApproval("secret must list argument names")
    try:
        tool = agent.tools.get(request.tool)
    except ConfigurationError as exc:
        raise ApprovalRefused(str(exc)) from None
    if not isinstance(tool, Tool):
        raise ApprovalRefused(f"agent {agent.name!r} has no tool {request.tool!r}")
    # A tool with parameters of its own (a gateway's upstream tool) refuses arguments that
    # do not fit them before anything is recorded; an authorising tool takes any object.
    parsed, problems = tool.check_arguments(request.arguments)
    if parsed is None:
        listed = "; ".join(f"{p['path'] or 'arguments'}: {p['message']}" for p in problems)
        raise InvalidApproval(
            f"the arguments do not fit {request.tool}'s parameters: {listed}", problems
        )
    if request.schema is not None:
        _check_schema(request, tool)
    return tool


def _check_schema(request: ApprovalRequest, tool: Tool) -> None:
    schema = request.schema
    if not isinstance(schema, dict):
        raise InvalidApproval("schema must be a JSON object")
    properties = schema.get("properties")
    names = set(properties) if isinstance(properties, dict) else set()
    hidden = (tool.secret | frozenset(request.secret)) & names
    try:
        checker = Tool.from_schema(
            request.tool, "", schema, _never, secret=sorted(hidden), editable=False
        )
    except ConfigurationError as exc:
        raise InvalidApproval(f"the schema is not a valid JSON schema: {exc}") from None
    parsed, problems = checker.check_arguments(request.arguments)
    if parsed is None:
        listed = "; ".join(f"{p['path'] or 'arguments'}: {p['message']}" for p in problems)
        raise InvalidApproval(f"the arguments do not fit the schema: {listed}", problems)


async def _never(args: dict[str, Any]) -> None:
    raise AssertionError("a schema check never runs the tool")
