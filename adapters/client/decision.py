"""The client's view of an approval: `Decision` (and the `Outcome` reported for it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from adapters.client.errors import ApprovalError

Status = Literal["pending", "allowed", "denied"]
OutcomeStatus = Literal["succeeded", "failed", "unknown"]
_STATUSES = ("pending", "allowed", "denied")


@dataclass(frozen=True)
class Outcome:
    """What the caller reported after running an approved call.

    Attributes:
        status: ``succeeded``, ``failed`` or ``unknown``.
        summary: The caller's words, if any.
        reported_by: Who reported it.
        reported_at: When.
        resolution: For ``unknown``, once a person reconciled it: ``resolved``, ``retry``
            or ``abort``.
        resolved_by: Who reconciled it.
    """

    status: OutcomeStatus
    summary: str | None
    reported_by: str | None
    reported_at: datetime | None
    resolution: str | None
    resolved_by: str | None


@dataclass(frozen=True)
class Decision:
    """signoff's answer about one tool call, as last read.

    Attributes:
        approval_id: The approval's id (``run_…``).
        status: ``pending``, ``allowed`` or ``denied``.
        agent: The agent that asked.
        tool: The tool it asked to call.
        arguments: The arguments to run with: the edited ones when a person allowed the call
            with changes. Secret arguments are masked (``"***"``) for viewers who did not
            send them.
        requested_arguments: The arguments as requested.
        ticket_id: The open ticket while pending.
        reason: Why it was denied, or which rule or grant allowed it.
        basis: ``rule``, ``grant``, ``decision``, ``expiry`` or ``cancelled``.
        decided_by: Who decided, once decided.
        decided_via: Where (``slack``, ``discord``, ``console``, ``api`` …).
        decided_at: When.
        session_id: The external session the call belongs to.
        deadline: When a pending approval expires, if it does.
        outcome: The outcome reported for it, if any.
        decision_token: The signed decision (a compact JWS) once decided, for tool servers
            to verify with `verify_decision_token`.
        raw: The JSON answer as received.
    """

    approval_id: str
    status: Status
    agent: str
    tool: str
    arguments: dict[str, Any]
    requested_arguments: dict[str, Any]
    ticket_id: str | None
    reason: str | None
    basis: str | None
    decided_by: str | None
    decided_via: str | None
    decided_at: datetime | None
    session_id: str | None
    deadline: datetime | None
    outcome: Outcome | None
    decision_token: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def allowed(self) -> bool:
        """Whether the call may run (with `arguments`)."""
        return self.status == "allowed"

    @property
    def denied(self) -> bool:
        """Whether the call must not run."""
        return self.status == "denied"

    @property
    def pending(self) -> bool:
        """Whether nobody has decided yet."""
        return self.status == "pending"

    @property
    def edited(self) -> bool:
        """Whether the arguments to run with differ from the requested ones."""
        return self.arguments != self.requested_arguments

    @classmethod
    def from_json(cls, body: Any) -> Decision:
        """Read an approval as the JSON API answers it.

        Raises:
            ApprovalError: The body is not an approval.
        """
        try:
            status = body["status"]
            if status not in _STATUSES:
                raise ValueError(f"unknown status {status!r}")
            arguments = body.get("arguments")
            requested = body.get("requested_arguments", arguments)
            if not isinstance(arguments, dict) or not isinstance(requested, dict):
                raise ValueError("arguments are not objects")
            return cls(
                approval_id=str(body["approval_id"]),
                status=cast(Status, status),
                agent=str(body["agent"]),
                tool=str(body["tool"]),
                arguments=arguments,
                requested_arguments=requested,
                ticket_id=body.get("ticket_id"),
                reason=body.get("reason"),
                basis=body.get("basis"),
                decided_by=body.get("decided_by"),
                decided_via=body.get("decided_via"),
                decided_at=_when(body.get("decided_at")),
                session_id=body.get("session_id"),
                deadline=_when(body.get("deadline")),
                outcome=_outcome(body.get("outcome")),
                decision_token=body.get("decision_token"),
                raw=body,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ApprovalError(
                f"signoff answered something that is not an approval: {exc}"
            ) from exc


def _when(raw: Any) -> datetime | None:
    if raw is None:
        return None
    return datetime.fromisoformat(str(raw))


def _outcome(raw: Any) -> Outcome | None:
    if raw is None:
        return None
    return Outcome(
        status=raw["status"],
        summary=raw.get("summary"),
        reported_by=raw.get("reported_by"),
        reported_at=_when(raw.get("reported_at")),
        resolution=raw.get("resolution"),
        resolved_by=raw.get("resolved_by"),
    )


class ApprovalDenied(ApprovalError):
    """The call was denied (by a person, a rule, an expiry or a cancellation).

    Attributes:
        decision: The denied decision; ``decision.reason`` says why.
    """

    def __init__(self, decision: Decision) -> None:
        reason = f": {decision.reason}" if decision.reason else ""
        super().__init__(f"{decision.tool} was denied{reason}")
        self.decision = decision


class ApprovalTimeout(ApprovalError):
    """The approval was still pending when the caller's time to wait ran out.

    Attributes:
        decision: The pending decision (its ``ticket_id`` is the open ticket).
    """

    def __init__(self, decision: Decision) -> None:
        super().__init__(f"approval {decision.approval_id} is still pending")
        self.decision = decision
