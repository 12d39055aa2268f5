"""Errors raised by the runtime.

One root, split by who must act::

    SignoffError
    ├── ConfigurationError          the developer: a bad agent, tool or setting
    ├── ResumeError                 the caller: a decision that cannot be applied
    │   ├── NotAwaiting             no open ticket (already decided, voided or unknown)
    │   │   └── UnknownTicket       no ticket with that id exists at all
    │   ├── Expired                 the ticket's deadline has passed
    │   ├── Unauthorized            the actor may not decide this ticket
    │   │   └── NotLinked           a chat user linked to no person, when those are refused
    │   ├── StaleTicket             the agent or its tool catalog changed since parking
    │   ├── UnknownExecutionKey     no pending call with that execution key or ticket id
    │   └── ResolutionError         the answer does not fit what the ticket waits for
    │       ├── InvalidAnswer       typed input that fails the requested schema
    │       ├── GrantNotAllowed     a standing grant the tool does not allow
    │       └── EditRefused         an approver's change of the arguments was refused
    │           ├── InvalidEdit     the changed arguments fail the tool's schema
    │           ├── NotEditable     the tool (or that argument) may not be changed
    │           └── EditDenied      the tool's permission rule denies the changed call
    ├── GrantError                  the caller: a standing grant that cannot be acted on
    │   ├── UnknownGrant            no such grant (or none the caller may see)
    │   └── GrantNotActive          it was revoked or has expired already
    ├── IdempotencyConflict         the caller: a reused idempotency key with another body
    ├── AccessDenied                the caller: may not do this (e.g. join another's thread)
    │   └── ApprovalRefused         configuration refuses this external agent, tool or override
    ├── InvalidApproval             the caller: an approval request that cannot be taken as sent
    ├── OutcomeConflict             the caller: an outcome of a call not allowed, or another
    │                               than the one already reported
    ├── ToolOutcomeUnknown          raised by a tool: its effect may or may not have happened
    ├── RunError                    the run itself
    │   ├── RunNotFound
    │   ├── ModelError              a model call failed (bad key, context length, rate limit ...)
    │   ├── IllegalTransition       a state machine was asked for a move it does not allow
    │   └── LeaseLost               a worker's claim was taken over; its writes are refused
    └── StorageError                the database failed; the outcome of the write is unknown

Every `ResumeError` leaves the ticket and the run exactly as they were.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class SignoffError(Exception):
    """Root of every error the runtime raises on purpose."""


class ConfigurationError(SignoffError):
    """An agent, tool or setting is invalid; the developer must fix it."""


class ResumeError(SignoffError):
    """A resume command was refused. Nothing was changed."""

    code = "resume_refused"


class NotAwaiting(ResumeError):
    """The ticket is not open: it was already decided, expired, voided, or never existed."""

    code = "not_awaiting"


class UnknownTicket(NotAwaiting):
    """No ticket with the given id exists at all."""

    code = "unknown_ticket"


class Expired(ResumeError):
    """The ticket's decision deadline has passed."""

    code = "expired"


class Unauthorized(ResumeError):
    """The actor is not allowed to decide this ticket."""

    code = "unauthorized"


class NotLinked(Unauthorized):
    """A Slack or Discord user linked to no person decides while unlinked users are
    refused (``SIGNOFF_IDENTITY_UNLINKED=refuse``): they must link their account first."""

    code = "not_linked"


class StaleTicket(ResumeError):
    """The agent version or tool catalog changed since the run parked."""

    code = "stale_ticket"


class UnknownExecutionKey(ResumeError):
    """No pending call of this runtime has the given execution key or ticket id."""

    code = "unknown_execution_key"


class ResolutionError(ResumeError):
    """The answer does not fit the ticket's target or the call's state."""

    code = "resolution_error"


class InvalidAnswer(ResolutionError):
    """Typed input failed validation against the requested schema.

    Attributes:
        errors: One entry per problem, each with a JSON ``path`` and a ``message``.
    """

    code = "invalid_answer"

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors: list[dict[str, Any]] = errors or []


class GrantNotAllowed(ResolutionError):
    """The allow asks for a standing grant the tool does not permit (a scope it does not
    allow, a four-eyes tool, a constraint on arguments it does not take)."""

    code = "grant_not_allowed"


class GrantError(SignoffError):
    """A standing grant cannot be read or revoked. Nothing was changed."""

    code = "grant_refused"


class UnknownGrant(GrantError):
    """No grant has that id, or the caller may not see it."""

    code = "unknown_grant"


class GrantNotActive(GrantError):
    """The grant was already revoked, or it expired."""

    code = "grant_not_active"


class EditRefused(ResolutionError):
    """An approver's change of a call's arguments cannot be accepted (see `runtime.domain.edits`).

    Attributes:
        errors: One entry per problem, each with a JSON ``path`` and a ``message``.
    """

    code = "edit_refused"

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors: list[dict[str, Any]] = errors or []


class InvalidEdit(EditRefused):
    """The changed arguments do not fit the tool's argument schema."""

    code = "invalid_edit"


class NotEditable(EditRefused):
    """The tool forbids edits, or one of the changed arguments may not be changed
    (not among its ``editable`` ones, or secret)."""

    code = "not_editable"


class EditDenied(EditRefused):
    """The tool's permission rule answers ``deny`` for the changed arguments."""

    code = "edit_denied"


class IdempotencyConflict(SignoffError):
    """An idempotency key was reused with a different request body."""


class AccessDenied(SignoffError):
    """The caller may not do this, e.g. start a run in a thread they do not take part in."""

    code = "forbidden"


class ApprovalRefused(AccessDenied):
    """Configuration refuses an external approval request: an undeclared agent where only
    declared ones may ask, or an override the agent does not allow."""

    code = "approval_refused"


class InvalidApproval(SignoffError):
    """An external approval request cannot be taken as sent: its arguments fail the given
    JSON schema, the schema itself is invalid, or an override is malformed."""

    code = "invalid_approval"

    def __init__(self, message: str, problems: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])
        """One ``{"path", "message"}`` per problem with the arguments."""


class OutcomeConflict(SignoffError):
    """An external approval's outcome cannot be recorded: the approval is not allowed
    (pending or denied), or a different outcome was reported for it already."""

    code = "outcome_conflict"


class ToolOutcomeUnknown(SignoffError):
    """Raised by a tool that cannot tell whether its call took effect.

    For example, the connection to the system it called broke after the request was
    sent and before the answer came back. The runtime treats it like a crash between
    dispatch and result, by the call's replay policy: ``manual`` makes the call
    *uncertain* (a person resolves it); ``safe`` and ``idempotent`` run it once more
    (with the same execution key), then give the model an error result.
    """


class RunError(SignoffError):
    """A problem with a run itself."""


class RunNotFound(RunError):
    """No run has the given id."""


class ModelErrorKind(StrEnum):
    """What went wrong with a model call, as a closed set."""

    AUTHENTICATION = "authentication"
    """The provider refused the API key (401)."""
    PERMISSION = "permission"
    """The key may not use this model or endpoint (403)."""
    NOT_FOUND = "not_found"
    """No such model or endpoint (404): check the model name and base URL."""
    CONTEXT_LENGTH = "context_length"
    """The transcript is longer than the model's context window."""
    BAD_REQUEST = "bad_request"
    """The provider rejected the request (another 4xx)."""
    RATE_LIMITED = "rate_limited"
    """Still rate limited (429) after the client's retries."""
    SERVER = "server"
    """Still failing on the provider's side (5xx, overloaded) after the client's retries."""
    TIMEOUT = "timeout"
    """No answer within the timeout, after the client's retries."""
    CONNECTION = "connection"
    """The provider could not be reached, after the client's retries."""
    INVALID_RESPONSE = "invalid_response"
    """The provider's answer could not be read."""

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed later (a passing condition on their side)."""
        return self in _RETRYABLE_MODEL_ERRORS


_RETRYABLE_MODEL_ERRORS = frozenset(
    {
        ModelErrorKind.RATE_LIMITED,
        ModelErrorKind.SERVER,
        ModelErrorKind.TIMEOUT,
        ModelErrorKind.CONNECTION,
    }
)


class ModelError(RunError):
    """A model call failed; the run fails with this message in its error and recorder.

    Provider models raise it after their client's own bounded retries, with the
    provider's error translated (``raise ModelError(...) from exc``).

    Attributes:
        kind: What went wrong (`ModelErrorKind`).
        provider: Who answered, e.g. ``openai`` or ``anthropic``.
        status: The HTTP status, when there was an answer.
        request_id: The provider's request id, for a support ticket.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ModelErrorKind,
        provider: str,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.provider = provider
        self.status = status
        self.request_id = request_id

    @property
    def retryable(self) -> bool:
        """Whether trying again later may succeed (rate limits, outages, timeouts)."""
        return self.kind.retryable

    @property
    def permanent(self) -> bool:
        """Whether the same request will fail again (a bad key, a too long transcript)."""
        return not self.kind.retryable


class IllegalTransition(RunError):
    """A state machine was asked for a move its transition table does not allow."""


class LeaseLost(RunError):
    """This worker no longer holds the run's lease; its write was refused."""


class StorageError(SignoffError):
    """The database failed. The outcome of the write is unknown, not proof of failure."""
