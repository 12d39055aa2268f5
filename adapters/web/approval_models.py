"""What the approvals API reads and answers, as pydantic models, and an approval's answer.

The models are the single description of the bodies: the routes validate requests with
them and the OpenAPI document (`adapters.web.openapi`) is generated from them.
`approval_body` renders an `runtime.Approval` as the answer every approvals route (and
the signed callback) carries: secret arguments masked for whoever did not send them,
and the decision token once it is decided.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from adapters.web.decision_tokens import DecisionClaims, DecisionSigner, NotCanonical
from runtime import Approval, ApprovalOutcome, ApprovalRequest

MASKED = "***"
"""What a secret argument shows to a viewer who did not send it."""
MAX_NAME = 200
"""Longest agent, tool, session, user id or approver entry."""
MAX_TEXT = 4000
"""Longest description or summary."""
MAX_LIST = 50
"""Most approvers or secret names in one request."""
MAX_DEADLINE_SECONDS = 30 * 24 * 3600
MAX_URL = 2048

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]


class ApprovalBody(BaseModel):
    """``POST /api/approvals``: may this tool call run?"""

    model_config = ConfigDict(extra="forbid", strict=True, title="ApprovalRequest")

    agent: Name = Field(description="The agent (source) name, as the agents file knows it.")
    tool: Name = Field(description="The tool's name; the agent's rules for it decide.")
    arguments: dict[str, Any] = Field(description="The call's arguments (a JSON object).")
    description: str | None = Field(
        default=None, max_length=MAX_TEXT, description="Why the call is made (on the card)."
    )
    schema_: dict[str, Any] | None = Field(
        default=None,
        alias="schema",
        description="A JSON schema the arguments must satisfy (400 if they do not).",
    )
    session_id: Name | None = Field(
        default=None,
        description="The external run or conversation: grants of scope run cover it.",
    )
    on_behalf_of: Name | None = Field(
        default=None,
        description="The user the call is for (the requester); the token must allow it.",
    )
    approvers: list[Name] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LIST,
        description="Who may decide, where the agent allows this override.",
    )
    deadline_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEADLINE_SECONDS,
        description="How long a decision may take, where the agent allows this override.",
    )
    secret: list[Name] = Field(
        default_factory=list,
        max_length=MAX_LIST,
        description="More argument names to mask wherever a person or a log sees them.",
    )
    callback_url: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_URL,
        description="Where the decision is delivered, signed (Standard Webhooks).",
    )

    def request(self) -> ApprovalRequest:
        """The runtime's request for this body."""
        return ApprovalRequest(
            agent=self.agent,
            tool=self.tool,
            arguments=self.arguments,
            description=self.description,
            schema=self.schema_,
            session_id=self.session_id,
            on_behalf_of=self.on_behalf_of,
            approvers=tuple(self.approvers) if self.approvers is not None else None,
            deadline=(
                timedelta(seconds=self.deadline_seconds)
                if self.deadline_seconds is not None
                else None
            ),
            secret=tuple(self.secret),
            callback_url=self.callback_url,
        )


class OutcomeBody(BaseModel):
    """``POST /api/approvals/{approval_id}/outcome``: what happened when the call ran."""

    model_config = ConfigDict(extra="forbid", strict=True, title="OutcomeReport")

    status: Literal["succeeded", "failed", "unknown"]
    summary: str | None = Field(default=None, max_length=MAX_TEXT)


class OutcomeAnswer(BaseModel):
    """The outcome the caller reported, and how a person reconciled an unknown one."""

    model_config = ConfigDict(title="ApprovalOutcome")

    status: Literal["succeeded", "failed", "unknown"]
    summary: str | None
    reported_by: str
    reported_at: datetime
    resolution: Literal["resolved", "retry", "abort"] | None
    resolved_by: str | None


class ApprovalAnswer(BaseModel):
    """An approval as it stands (the answer of every approvals route)."""

    model_config = ConfigDict(title="Approval")

    approval_id: str
    status: Literal["pending", "allowed", "denied"]
    agent: str
    tool: str
    arguments: dict[str, Any] = Field(
        description="What to run with (an approver's edits once allowed with edits)."
    )
    requested_arguments: dict[str, Any]
    ticket_id: str | None
    reason: str | None
    basis: Literal["rule", "grant", "decision", "expiry", "cancelled"] | None
    grant_id: str | None
    decided_by: str | None
    decided_via: str | None
    decided_at: datetime | None
    session_id: str | None
    requester: str
    requested_by: str
    created_at: datetime
    deadline: datetime | None
    outcome: OutcomeAnswer | None
    deferred: bool = Field(
        default=False,
        description="The caller stopped waiting and is resumed once it is decided "
        "(Claude Code's deferred sessions).",
    )
    decision_token: str | None = Field(
        description="A compact JWS over the decision, once decided (see the JWKS)."
    )


class ApprovalList(BaseModel):
    """``GET /api/approvals``: the caller's approvals, newest first."""

    model_config = ConfigDict(title="ApprovalList")

    approvals: list[ApprovalAnswer]
    next_cursor: str | None


def _masked(arguments: dict[str, Any], secret: tuple[str, ...]) -> dict[str, Any]:
    return {k: (MASKED if k in secret else v) for k, v in arguments.items()}


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def outcome_body(outcome: ApprovalOutcome) -> dict[str, Any]:
    """An outcome as JSON."""
    return {
        "status": outcome.status,
        "summary": outcome.summary,
        "reported_by": outcome.reported_by,
        "reported_at": outcome.reported_at.isoformat(),
        "resolution": outcome.resolution,
        "resolved_by": outcome.resolved_by,
    }


def decision_token(approval: Approval, signer: DecisionSigner) -> str | None:
    """The signed decision of a decided approval (None while pending, and for arguments
    that have no RFC 8785 form, which a request cannot carry)."""
    if approval.status == "pending":
        return None
    try:
        return signer.sign(
            DecisionClaims(
                approval_id=approval.approval_id,
                ticket_id=approval.ticket_id,
                agent=approval.agent,
                tool=approval.tool,
                arguments=approval.arguments,
                decision=approval.status,
                decided_by=approval.decided_by,
                session_id=approval.session_id,
                decided_at=approval.decided_at or approval.created_at,
            )
        )
    except NotCanonical:
        return None


def approval_body(
    approval: Approval, *, reveal_secrets: bool, signer: DecisionSigner
) -> dict[str, Any]:
    """An approval as the API answers it.

    Args:
        approval: The approval.
        reveal_secrets: Show secret arguments as they are (to whoever sent them: the
            requester and the requesting token's identity); else they read ``***``.
        signer: Signs the decision token.
    """
    shown = (lambda args: args) if reveal_secrets else (lambda args: _masked(args, approval.secret))
    return {
        "approval_id": approval.approval_id,
        "status": approval.status,
        "agent": approval.agent,
        "tool": approval.tool,
        "arguments": shown(approval.arguments),
        "requested_arguments": shown(approval.requested_arguments),
        "ticket_id": approval.ticket_id,
        "reason": approval.reason,
        "basis": approval.basis,
        "grant_id": approval.grant_id,
        "decided_by": approval.decided_by,
        "decided_via": approval.decided_via,
        "decided_at": _time(approval.decided_at),
        "session_id": approval.session_id,
        "requester": approval.requester,
        "requested_by": approval.requested_by,
        "created_at": approval.created_at.isoformat(),
        "deadline": _time(approval.deadline),
        "outcome": outcome_body(approval.outcome) if approval.outcome is not None else None,
        "deferred": approval.deferred,
        "decision_token": decision_token(approval, signer),
    }


def reveals_secrets(approval: Approval, viewer_id: str) -> bool:
    """Whether `viewer_id` sent the call's arguments (the requester or the sender)."""
    return viewer_id in (approval.requester, approval.requested_by)
