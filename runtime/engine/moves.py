"""Moving a call or a run to a new state through its state machine, and a new run claimed
as it is inserted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from runtime.domain.states import CallState, RunStatus, check_call_move, check_run_move
from runtime.engine.deps import Deps
from runtime.store.records import CallRecord, RunRecord


def move(call: CallRecord, new: CallState) -> None:
    """Move `call` to `new`, enforcing the call state machine."""
    check_call_move(call.state, new)
    call.state = new


def move_run(run: RunRecord, new: RunStatus) -> None:
    """Move `run` to `new`, enforcing the run state machine (`RUN_TRANSITIONS`).

    Every status change of a run goes through here; the store only ever claims a run
    (queued, or running with an expired lease -> running) in its own statement.
    """
    check_run_move(run.status, new)
    run.status = new


def claim_new(deps: Deps, run: RunRecord, now: datetime) -> None:
    """Make a run about to be inserted already claimed by this worker, its first model
    call marked in flight: the inserting commit is also the claim, and a crash leaves
    the run to recovery once the lease expires."""
    move_run(run, RunStatus.RUNNING)
    run.fence = 1
    run.lease_owner = deps.worker_id
    run.lease_expires_at = now + timedelta(seconds=deps.lease_seconds)
    run.model_attempt = 1
    run.model_in_flight = True
