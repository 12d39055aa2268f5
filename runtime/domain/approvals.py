"""External approvals as callers see them: the request, the approval and its outcome.

An external approval is one run of an external agent (`runtime.domain.external`): the
approval id is the run id, and its status, basis and decider are read from the run's one
call and its ticket (`runtime.services.approvals`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

ApprovalStatus = Literal["pending", "allowed", "denied"]
"""Whether the call may run: not decided yet, allowed, or denied."""

ApprovalBasis = Literal["rule", "grant", "decision", "expiry", "cancelled"]
"""What settled an approval: a rule of the agent, a standing grant, a person's decision,
the deadline passing, or the run being cancelled."""

OutcomeStatus = Literal["succeeded", "failed", "unknown"]
"""What the caller reports happened when it ran (or tried to run) the allowed call."""

Resolution = Literal["resolved", "retry", "abort"]
"""How a person reconciled an ``unknown`` outcome."""

OVERRIDES = ("approvers", "deadline")
"""The settings a request may override, where its agent allows it (``overrides``)."""


@dataclass(frozen=True)
class ApprovalRequest:
    """An external agent asks whether one tool call may run.

    Attributes:
        agent: The agent (source) name: declared in the agents file with ``external =
            true``, or any name where undeclared agents may ask.
        tool: The tool's name; the agent's rules for it apply (by name or glob).
        arguments: The call's arguments, a JSON object.
        description: Why the call is made, shown on the card.
        schema: A JSON schema the arguments must satisfy (`InvalidApproval` if not).
        session_id: The external run or conversation: approvals of one agent and session
            share a thread, so a standing grant given in it covers later calls of it.
        on_behalf_of: The user the call is made for (the requester); the edge checks the
            caller may act for them.
        approvers: Who may decide, instead of the agent's rule (only where the agent
            allows the ``approvers`` override).
        deadline: How long a decision may take, instead of the rule's (only where the
            agent allows the ``deadline`` override).
        secret: More argument names to mask wherever a person or a log sees them.
        callback_url: Where the decision is delivered, signed, once made.
        resume: Where a caller that stops waiting (`Runtime.defer_approval`) is resumed
            once the approval is decided: a destination whose ``platform`` names the
            notifier that resumes it (e.g. Claude Code's, with the session's directory).
            Without a deferral nothing is resumed.
    """

    agent: str
    tool: str
    arguments: dict[str, Any]
    description: str | None = None
    schema: dict[str, Any] | None = None
    session_id: str | None = None
    on_behalf_of: str | None = None
    approvers: tuple[str, ...] | None = None
    deadline: timedelta | None = None
    secret: tuple[str, ...] = ()
    callback_url: str | None = None
    resume: dict[str, Any] | None = None


@dataclass(frozen=True)
class ApprovalOutcome:
    """What the caller reported after running (or trying to run) an allowed call.

    Attributes:
        status: ``succeeded``, ``failed`` or ``unknown``.
        summary: The caller's words about it.
        reported_by: Who reported it.
        reported_at: When.
        resolution: For ``unknown``: how a person reconciled it, once they did.
        resolved_by: Who reconciled it.
    """

    status: OutcomeStatus
    summary: str | None
    reported_by: str
    reported_at: datetime
    resolution: Resolution | None = None
    resolved_by: str | None = None


@dataclass(frozen=True)
class Approval:
    """An external approval as it stands.

    Attributes:
        approval_id: Its id (the id of the run that holds it).
        status: ``pending``, ``allowed`` or ``denied``.
        agent: The agent that asked.
        tool: The tool it asked for.
        arguments: What to run with: the requested arguments, or those an approver
            changed when allowing with edits.
        requested_arguments: The arguments as requested.
        ticket_id: The open ticket while pending, else the ticket that was decided (None
            when a rule or grant settled it without one).
        reason: Why it was denied, or which rule or grant allowed it; ``expired`` when
            the deadline passed.
        basis: What settled it (None while pending).
        grant_id: The standing grant that allowed it.
        decided_by: Who decided (a user id; for a grant, who gave it).
        decided_via: Where they decided (``slack``, ``discord``, ``console``, ``api`` ...).
        decided_at: When it was settled.
        session_id: The external session it belongs to.
        requester: Who the call is for (may decide it unless four-eyes forbids).
        requested_by: Who sent the request (the token's identity).
        created_at: When it was requested.
        deadline: When an open ticket expires.
        outcome: What the caller reported after running it.
        replayed: The request reused an idempotency key: this is the approval the key
            created first, and nothing new was requested.
        deferred: The caller stopped waiting and asked to be resumed once it is decided
            (`Runtime.defer_approval`).
    """

    approval_id: str
    status: ApprovalStatus
    agent: str
    tool: str
    arguments: dict[str, Any]
    requested_arguments: dict[str, Any]
    ticket_id: str | None
    reason: str | None
    basis: ApprovalBasis | None
    grant_id: str | None
    decided_by: str | None
    decided_via: str | None
    decided_at: datetime | None
    session_id: str | None
    requester: str
    requested_by: str
    created_at: datetime
    deadline: datetime | None
    outcome: ApprovalOutcome | None = None
    replayed: bool = False
    deferred: bool = False
    secret: tuple[str, ...] = ()
    """The argument names that are secret in this call (its rule's and the request's):
    `arguments` and `requested_arguments` hold them unmasked, for the edge to mask for
    anyone but the requester and the sender."""

    @property
    def decided(self) -> bool:
        """Whether it is settled (allowed or denied)."""
        return self.status != "pending"
