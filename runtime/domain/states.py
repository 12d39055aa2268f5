"""Closed sets of states and the moves allowed between them."""

from __future__ import annotations

from enum import StrEnum

from runtime.domain.errors import IllegalTransition


class RunStatus(StrEnum):
    """Where a run is in its life."""

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING = "awaiting"
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """Whether the run can never move again."""
        return self in _FINISHED_RUN


_FINISHED_RUN = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED})

# `awaiting -> queued` happens when the last open ticket of a batch is decided: the run
# is ready to continue and waits for a worker (or an explicit `resume`).
RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.RUNNING,
            RunStatus.AWAITING,
            RunStatus.PAUSED,
            RunStatus.DONE,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.AWAITING: frozenset(
        {RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.CANCELLED}
    ),
    RunStatus.PAUSED: frozenset({RunStatus.QUEUED, RunStatus.AWAITING, RunStatus.CANCELLED}),
    RunStatus.DONE: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}


class CallState(StrEnum):
    """Where one tool call is in its life."""

    PROPOSED = "proposed"
    AWAITING_DECISION = "awaiting_decision"
    APPROVED = "approved"
    DENIED = "denied"
    DISPATCHED = "dispatched"
    AWAITING_INPUT = "awaiting_input"
    AWAITING_CHILD = "awaiting_child"
    COMPLETED = "completed"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    RESOLVED = "resolved"
    CANCELLED = "cancelled"

    @property
    def settled(self) -> bool:
        """Whether the call has a result the model can see."""
        return self in _SETTLED_CALL


_SETTLED_CALL = frozenset(
    {
        CallState.DENIED,
        CallState.COMPLETED,
        CallState.FAILED,
        CallState.RESOLVED,
        CallState.CANCELLED,
    }
)

# `dispatched -> approved` is a replay of a `safe` or `idempotent` call after a crash;
# `uncertain -> approved` is a person accepting a retry; `awaiting_input -> approved`
# is typed input arriving, after which the tool is called again with the answer.
# `approved -> awaiting_child` starts (or joins) a sub-agent's run in the same commit,
# so a delegating call never needs a replay policy; the child's end settles it.
CALL_TRANSITIONS: dict[CallState, frozenset[CallState]] = {
    CallState.PROPOSED: frozenset(
        {
            CallState.AWAITING_DECISION,
            CallState.APPROVED,
            CallState.DENIED,
            CallState.FAILED,
            CallState.CANCELLED,
        }
    ),
    CallState.AWAITING_DECISION: frozenset(
        {CallState.APPROVED, CallState.DENIED, CallState.CANCELLED}
    ),
    CallState.APPROVED: frozenset(
        {CallState.DISPATCHED, CallState.AWAITING_CHILD, CallState.CANCELLED}
    ),
    CallState.DENIED: frozenset(),
    CallState.DISPATCHED: frozenset(
        {
            CallState.COMPLETED,
            CallState.FAILED,
            CallState.AWAITING_INPUT,
            CallState.UNCERTAIN,
            CallState.APPROVED,
        }
    ),
    CallState.AWAITING_INPUT: frozenset(
        {CallState.APPROVED, CallState.DENIED, CallState.CANCELLED}
    ),
    CallState.AWAITING_CHILD: frozenset(
        {CallState.COMPLETED, CallState.FAILED, CallState.CANCELLED}
    ),
    CallState.COMPLETED: frozenset(),
    CallState.FAILED: frozenset(),
    CallState.UNCERTAIN: frozenset({CallState.RESOLVED, CallState.APPROVED, CallState.CANCELLED}),
    CallState.RESOLVED: frozenset(),
    CallState.CANCELLED: frozenset(),
}


class TicketStatus(StrEnum):
    """Whether a resume ticket can still be decided."""

    OPEN = "open"
    DECIDED = "decided"
    EXPIRED = "expired"
    VOIDED = "voided"


def check_run_move(current: RunStatus, new: RunStatus) -> None:
    """Raise `IllegalTransition` unless a run may move from `current` to `new`."""
    if new not in RUN_TRANSITIONS[current]:
        raise IllegalTransition(f"a run cannot move from {current} to {new}")


def check_call_move(current: CallState, new: CallState) -> None:
    """Raise `IllegalTransition` unless a tool call may move from `current` to `new`."""
    if new not in CALL_TRANSITIONS[current]:
        raise IllegalTransition(f"a tool call cannot move from {current} to {new}")
