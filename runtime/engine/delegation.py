"""Delegation: sub-agent runs started by a parent's call, and the handover between them.

A call of a delegating tool (`runtime.domain.subagents`) starts a **child run** of the sub-agent
on the call's task, keyed by its ``task_key`` (unique per parent run). The handover is a
sequence of commits, each of which a crash may follow; nothing is lost or doubled:

1. **child created** — the parent's call moves to ``awaiting_child``, the child run is
   inserted (claimed by the same worker) and a `Child` ticket opened on the parent, in
   one commit. A parent replayed after a crash, or asking again with the same key, finds
   that child by its key and waits on it: a task key never starts a second run.
2. **child parked / parent parking** — the child waits on its own tickets like any run;
   the parent parks on its `Child` ticket. People see the child's requests (they name
   the chain of agents); the parent's pending entries are its children's.
3. **child finished / parent resuming** — the commit that ends the child (done, failed or
   cancelled) also settles the parent's `Child` ticket and delegating call (the child's
   final answer is the call's result; a failed or cancelled child is an error result)
   and, when nothing else is open, makes the parent ready. A worker then continues the
   parent.

Locks: a transaction that ends a child locks the parent's row before it writes anything
of the child's, and run control locks a run's ancestors before the run (`lock_run`), so
on PostgreSQL two transactions never wait on each other's rows in opposite orders.

Cancel and pause go down the tree: a cancelled run cancels its children (a running one is
asked to), a paused run pauses them, and resuming a run resumes them. Whoever may see a
run sees its children (`runtime.services.queries`), and a child run's requester is its parent's,
so its tools' approvers and the requester rule are the same as for the parent's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, assert_never

from runtime.domain.agent import Agent
from runtime.domain.notifications import DescribedTicket
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import Child, ChildDecision, ChildFinished, ResumeTicket, fit
from runtime.engine.deps import Deps
from runtime.engine.journal import chain_of, describe_ticket, record
from runtime.engine.moves import claim_new, move, move_run
from runtime.engine.results import Totals
from runtime.engine.traces import start_trace
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, RunRecord

MAX_DEPTH = 8
"""How deep sub-agents may nest (a top-level run is at depth 0)."""


@dataclass(frozen=True, slots=True)
class Started:
    """What dispatching a delegating call did.

    Attributes:
        child: The child run (new, or found by its task key).
        claimed: The child is new and claimed by this worker (drive it now).
    """

    child: RunRecord
    claimed: bool


def task_of(call: CallRecord) -> tuple[str, str]:
    """The ``(task_key, task)`` of a delegating call's validated arguments."""
    return str(call.args["task_key"]), str(call.args["task"])


def outcome_of(child: RunRecord) -> ChildFinished:
    """How a finished child run ended, as the answer that settles its parent's call."""
    status: Literal["done", "failed", "cancelled"]
    match child.status:
        case RunStatus.DONE:
            status = "done"
        case RunStatus.FAILED:
            status = "failed"
        case RunStatus.CANCELLED:
            status = "cancelled"
        case RunStatus.QUEUED | RunStatus.RUNNING | RunStatus.AWAITING | RunStatus.PAUSED:
            raise ValueError(f"run {child.run_id} has not finished")
        case _:
            assert_never(child.status)
    return ChildFinished(status=status, text=child.final_text, error=child.error)


def settle_call(call: CallRecord, decided: ChildDecision) -> None:
    """Move a delegating call as its child's outcome says: its answer is the result; a
    failed or cancelled child is an error result the model sees."""
    answer = decided.answer
    agent = decided.target.agent
    match answer.status:
        case "done":
            move(call, CallState.COMPLETED)
            call.result = answer.text or ""
        case "failed":
            move(call, CallState.FAILED)
            call.error = f"sub-agent {agent!r} failed: {answer.error or 'unknown error'}"
            call.result = f"Error: {call.error}"
        case "cancelled":
            move(call, CallState.FAILED)
            why = f": {answer.error}" if answer.error else ""
            call.error = f"sub-agent {agent!r} was cancelled{why}"
            call.result = f"Error: {call.error}"
        case _:
            assert_never(answer.status)


def check_delegation(deps: Deps, run: RunRecord, sub_name: str) -> str | None:
    """Why a delegating call to `sub_name` cannot be made from `run` (None: it can)."""
    if sub_name not in deps.agents:
        return f"Error: the sub-agent {sub_name!r} is not loaded"
    if run.depth + 1 > MAX_DEPTH:
        return f"Error: sub-agents may nest at most {MAX_DEPTH} deep"
    return None


async def check_task_key(tx: Transaction, run: RunRecord, sub_name: str, key: str) -> str | None:
    """Why `key` cannot name a task of `sub_name` in `run` (used for another agent)."""
    existing = await tx.child_run(run.run_id, key)
    if existing is not None and existing.agent != sub_name:
        return (
            f"Error: task key {key!r} already names a task of the sub-agent "
            f"{existing.agent!r}; use another key for a new task"
        )
    return None


def _child_origin(origin: dict[str, Any]) -> dict[str, Any]:
    # The child's cards go where the parent's go; only the top-level run calls back.
    return {k: v for k, v in origin.items() if k != "callback_url"}


async def start_child(
    deps: Deps, tx: Transaction, parent: RunRecord, call: CallRecord, sub: Agent
) -> Started:
    """Dispatch a delegating call inside `tx`: start the child (or find it by its task
    key) and wait on it, or settle the call at once when that child has finished.

    The caller saves `parent` (with its fence) in the same transaction.
    """
    now = deps.clock.now()
    key, task = task_of(call)
    move(call, CallState.AWAITING_CHILD)
    call.attempts += 1
    call.updated_at = now
    existing = await tx.child_run(parent.run_id, key)
    if existing is None:
        child = RunRecord(
            run_id=deps.ids.new_id("run"),
            thread_id=deps.ids.new_id("th"),
            agent=sub.name,
            agent_version=sub.version,
            status=RunStatus.QUEUED,
            input=task,
            requester=parent.requester,
            created_at=now,
            updated_at=now,
            origin=_child_origin(parent.origin),
            messages=[{"role": "user", "content": task}],
            parent_run_id=parent.run_id,
            parent_call_id=call.call_id,
            task_key=key,
            depth=parent.depth + 1,
            lineage=[*parent.lineage, {"run_id": parent.run_id, "agent": parent.agent}],
        )
        # In the parent's trace: started while the parent's stretch is the current span.
        child.trace_context = start_trace(deps, child)
        # This worker drives it next, as a start that waits does.
        claim_new(deps, child, now)
        await tx.insert_run(child)
        await record(
            tx,
            child.run_id,
            now,
            "run_started",
            by=child.requester,
            agent=child.agent,
            input=child.input,
            thread_id=child.thread_id,
            origin=child.origin,
            parent_run_id=parent.run_id,
            task_key=key,
            depth=child.depth,
        )
        await record(
            tx,
            parent.run_id,
            now,
            "child_started",
            call_id=call.call_id,
            child_run_id=child.run_id,
            agent=sub.name,
            task_key=key,
        )
        await _open_child_ticket(deps, tx, parent, call, child)
        await tx.update_call(call)
        return Started(child, claimed=True)
    await record(
        tx,
        parent.run_id,
        now,
        "child_reattached",
        call_id=call.call_id,
        child_run_id=existing.run_id,
        agent=existing.agent,
        task_key=key,
        status=existing.status.value,
    )
    if existing.status.finished:
        target = Child(
            call_id=call.call_id,
            child_run_id=existing.run_id,
            task_key=key,
            agent=existing.agent,
        )
        decided = ChildDecision(target, outcome_of(existing))
        settle_call(call, decided)
        await _record_settled(tx, parent, target, decided.answer, now)
    else:
        await _open_child_ticket(deps, tx, parent, call, existing)
    await tx.update_call(call)
    return Started(existing, claimed=False)


async def _open_child_ticket(
    deps: Deps, tx: Transaction, parent: RunRecord, call: CallRecord, child: RunRecord
) -> ResumeTicket:
    """The parent's ticket on `child` (no card: people see the child's own requests)."""
    now = deps.clock.now()
    agent = deps.agents.get(parent.agent)
    ticket = ResumeTicket(
        ticket_id=deps.ids.new_id("tk"),
        correlation=deps.ids.token(),
        run_id=parent.run_id,
        thread_id=parent.thread_id,
        agent=parent.agent,
        agent_version=agent.version if agent is not None else parent.agent_version,
        catalog_fingerprint=agent.catalog_fingerprint if agent is not None else "",
        target=Child(
            call_id=call.call_id,
            child_run_id=child.run_id,
            task_key=child.task_key or "",
            agent=child.agent,
        ),
        requester=parent.requester,
        created_at=now,
        chain=chain_of(parent),
    )
    await tx.insert_ticket(ticket)
    opened = describe_ticket(DescribedTicket, parent, ticket, agent)
    await record(tx, parent.run_id, now, "ticket_opened", **opened.details())
    return ticket


async def _record_settled(
    tx: Transaction, parent: RunRecord, target: Child, answer: ChildFinished, at: Any
) -> None:
    extra = {"error": answer.error} if answer.error else {}
    await record(
        tx,
        parent.run_id,
        at,
        "child_finished",
        call_id=target.call_id,
        child_run_id=target.child_run_id,
        agent=target.agent,
        task_key=target.task_key,
        status=answer.status,
        **extra,
    )


async def settle_parent(deps: Deps, tx: Transaction, child: RunRecord) -> RunRecord | None:
    """Settle what the parent of `child` (which has just ended) waits on it for.

    Called inside the transaction that ends the child, before anything of the child's is
    written: the parent's row is locked first (see the module docstring). The parent's
    `Child` tickets on this child are decided with its outcome and their calls settled;
    a parent parked with nothing else open becomes ready (``queued``).

    Returns:
        The parent when it became ready, else None.
    """
    if child.parent_run_id is None:
        return None
    parent = await tx.get_run(child.parent_run_id, for_update=True)
    if parent is None:
        return None
    answer = outcome_of(child)
    now = deps.clock.now()
    settled = False
    for ticket in await tx.tickets_for_run(parent.run_id, status=TicketStatus.OPEN):
        decided = fit(ticket.target, answer)
        if not isinstance(decided, ChildDecision):
            continue
        if decided.target.child_run_id != child.run_id:
            continue
        if not await tx.close_ticket(
            ticket.ticket_id, status=TicketStatus.DECIDED, at=now, decision=answer
        ):
            continue
        call = await tx.get_call(decided.target.call_id)
        if call is not None and call.state is CallState.AWAITING_CHILD:
            settle_call(call, decided)
            call.updated_at = now
            await tx.update_call(call)
        await _record_settled(tx, parent, decided.target, answer, now)
        settled = True
    if not settled or parent.status is not RunStatus.AWAITING:
        # A running parent (driving this child, or recovering) reads its calls again; a
        # paused one becomes ready when it is resumed.
        return None
    if await tx.tickets_for_run(parent.run_id, status=TicketStatus.OPEN):
        return None
    move_run(parent, RunStatus.QUEUED)
    parent.updated_at = now
    await record(tx, parent.run_id, now, "run_ready", by=None, child_run_id=child.run_id)
    await tx.update_run(parent)
    return parent


async def lock_run(tx: Transaction, run_id: str) -> RunRecord | None:
    """Lock `run_id`'s row for the transaction, its ancestors' rows first (top first).

    For transactions that may end a run, and so settle its parent: locking in this order
    everywhere keeps two transactions from waiting on each other.
    """
    run = await tx.get_run(run_id)
    if run is None or not run.lineage:
        return await tx.get_run(run_id, for_update=True) if run is not None else None
    for ancestor in run.lineage:
        await tx.get_run(ancestor["run_id"], for_update=True)
    return await tx.get_run(run_id, for_update=True)


async def lock_parent(tx: Transaction, run: RunRecord) -> None:
    """Lock the parent of `run`, first thing in a transaction that may end `run`."""
    if run.parent_run_id is not None:
        await tx.get_run(run.parent_run_id, for_update=True)


async def descendants(tx: Transaction, run_id: str) -> list[RunRecord]:
    """Every sub-agent run under `run_id`, depth first, parents before their children."""
    found: list[RunRecord] = []
    for child in await tx.child_runs(run_id):
        found.append(child)
        found.extend(await descendants(tx, child.run_id))
    return found


def totals(runs: Sequence[RunRecord]) -> Totals:
    """The counters of `runs` added up."""
    return Totals(
        runs=len(runs),
        turns=sum(r.turns for r in runs),
        prompt_tokens=sum(r.prompt_tokens for r in runs),
        completion_tokens=sum(r.completion_tokens for r in runs),
        usage_incomplete=any(r.usage_incomplete for r in runs),
    )


__all__ = [
    "MAX_DEPTH",
    "Started",
    "check_delegation",
    "check_task_key",
    "descendants",
    "lock_parent",
    "lock_run",
    "outcome_of",
    "settle_call",
    "settle_parent",
    "start_child",
    "task_of",
    "totals",
]
