"""The external approvals part of `Runtime`: an agent that runs elsewhere asks whether one
tool call may run, reads the answer and reports what became of the call.

`Runtime` takes these methods from `ExternalApprovals`; they hand each operation to the
services of `runtime.services.approvals` and `runtime.services.outcomes`, which
`Runtime.__init__` builds with the others.
"""

from __future__ import annotations

import asyncio

from runtime.domain.approvals import Approval, ApprovalRequest, ApprovalStatus, OutcomeStatus
from runtime.domain.errors import OutcomeConflict, RunNotFound
from runtime.domain.tickets import Actor
from runtime.services.approvals import Approvals
from runtime.services.outcomes import Outcomes
from runtime.services.queries import Page


class ExternalApprovals:
    """External approvals: request one, read it, wait for it, list them, report outcomes."""

    _approvals: Approvals
    _outcomes: Outcomes

    async def request_approval(
        self, request: ApprovalRequest, *, actor: Actor, idempotency_key: str | None = None
    ) -> Approval:
        """Ask whether an external agent's tool call may run.

        The request becomes one run of the external agent: its rules decide at once
        (``allowed`` by an allow rule or a standing grant, ``denied`` by a deny rule), or
        the call waits on an ordinary ticket (``pending``), with its cards.

        Args:
            request: The call, and what the caller asks of it.
            actor: Who sends it (the token's identity, recorded as ``requested_by``). The
                requester is ``request.on_behalf_of`` when given (the edge checked the
                sender may act for them), else the sender.
            idempotency_key: The same key from the same sender returns the approval it
                created first (``replayed`` set), never a second ticket.

        Raises:
            ApprovalRefused: The agent is undeclared where only declared ones may ask, runs
                inside signoff, or the request overrides what the agent does not allow.
            InvalidApproval: The arguments fail the request's schema, or a field is bad.
            IdempotencyConflict: The key was used with a different request.
        """
        return await self._approvals.request(request, actor, idempotency_key)

    async def approval(self, approval_id: str, *, viewer: Actor | None) -> Approval:
        """An external approval as it stands.

        Raises:
            RunNotFound: No such approval, or `viewer` may not see it (only the requester,
                the sender, whoever may decide or decided its ticket, and operators may).
        """
        return await self._approvals.get(approval_id, viewer)

    async def wait_approval(
        self,
        approval_id: str,
        *,
        viewer: Actor,
        timeout: float,  # noqa: ASYNC109 (a long poll's bound, as the API's ?wait=N)
        stop: asyncio.Event | None = None,
    ) -> Approval:
        """An external approval once it is decided, or as it stands after `timeout` seconds
        (at once when it is decided already), or as it stands once `stop` is set (the
        server shutting down ends its long polls).

        Raises:
            RunNotFound: As for `approval`.
        """
        return await self._approvals.wait(approval_id, viewer, timeout, stop)

    async def approval_page(
        self,
        *,
        viewer: Actor,
        status: ApprovalStatus | None = None,
        agent: str | None = None,
        session_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[Approval]:
        """A page of the external approvals `viewer` may see, newest first.

        Raises:
            InvalidCursor: `cursor` is not one this listing gave `viewer`.
        """
        return await self._approvals.page(viewer, status, agent, session_id, limit, cursor)

    async def defer_approval(self, approval_id: str, *, actor: Actor) -> Approval:
        """The caller stops waiting for a pending approval and is to be resumed once it is
        decided.

        The approval must have been requested with a resume destination
        (`ApprovalRequest.resume`). When its run ends, the runtime queues an
        `runtime.edges.ApprovalCallback` to that destination, whose notifier resumes the
        caller if the approval reads `Approval.deferred`. An approval decided already is
        returned as it is and nothing is recorded: the caller answers it at once.

        Args:
            approval_id: The approval.
            actor: Its requester or its sender.

        Raises:
            RunNotFound: No such approval, or `actor` is neither its requester nor its
                sender.
            InvalidApproval: It was requested without a resume destination.
        """
        return await self._approvals.stop_waiting(approval_id, actor, defer=True, reason=None)

    async def withdraw_approval(
        self, approval_id: str, *, actor: Actor, reason: str | None = None
    ) -> Approval:
        """The caller stops waiting for a pending approval and will not act on it: its run
        is cancelled and its ticket voided (the cards say so), so nobody decides what
        will not run. A decided approval is returned as it is.

        Args:
            approval_id: The approval.
            actor: Its requester or its sender.
            reason: Why, for the flight recorder and the cards.

        Raises:
            RunNotFound: No such approval, or `actor` is neither its requester nor its
                sender.
        """
        return await self._approvals.stop_waiting(approval_id, actor, defer=False, reason=reason)

    async def report_outcome(
        self,
        approval_id: str,
        status: OutcomeStatus,
        summary: str | None = None,
        *,
        actor: Actor,
    ) -> Approval:
        """Record what became of an allowed external call, once.

        It goes into the approval's flight recorder and `Approval.outcome`. An
        ``unknown`` outcome opens a reconciliation run in the approval's session, parked
        on an uncertain ticket a person answers from chat or the console (record the
        verified result, retry, or abort); the answer becomes the outcome's
        ``resolution`` (`runtime.services.outcomes`).

        Args:
            approval_id: The approval.
            status: ``succeeded``, ``failed`` or ``unknown``.
            summary: What happened, in the caller's words.
            actor: Who reports: the approval's requester or its sender.

        Returns:
            The approval, with its outcome.

        Raises:
            RunNotFound: No such approval, or `actor` is neither its requester nor its
                sender.
            OutcomeConflict: The approval is not allowed, or another outcome was reported
                for it already (the same one again changes nothing).
        """
        approval = await self._approvals.get(approval_id, actor)
        if actor.id not in (approval.requester, approval.requested_by):
            raise RunNotFound(f"no approval {approval_id!r}")
        if approval.status != "allowed":
            raise OutcomeConflict(
                f"approval {approval_id} is {approval.status}: only an allowed call has an outcome"
            )
        await self._outcomes.report(approval_id, status, summary, actor)
        return await self._approvals.get(approval_id, actor)
