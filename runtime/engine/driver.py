"""Driving one claimed run: model turns, tool batches, parking, recovery.

A driver holds the run's lease (a fence number). Every write it makes goes through
`update_run(..., fence=...)`, so a worker whose lease was taken over cannot write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import timedelta
from typing import Any, assert_never

from runtime.domain.agent import Agent
from runtime.domain.context import ToolContext, _enter, _leave
from runtime.domain.edits import model_note
from runtime.domain.errors import LeaseLost, ModelError, ToolOutcomeUnknown
from runtime.domain.external import agent_for_run
from runtime.domain.model import ModelRequest, ModelResponse, StopReason
from runtime.domain.notifications import (
    ApprovalRequested,
    InputRequested,
    RunPaused,
    UncertainCall,
)
from runtime.domain.states import CallState, RunStatus, TicketStatus
from runtime.domain.tickets import Actor, Child, Pause, RemoteInput, ResumeTicket, Uncertain
from runtime.domain.tools import (
    ArgumentError,
    InputRequest,
    Permission,
    ReplayPolicy,
    describe_permission,
)
from runtime.engine import delegation, grants, measure
from runtime.engine.batching import offer_batch
from runtime.engine.cancelling import cancel_in
from runtime.engine.deps import Deps, ResultMiddlewareInput
from runtime.engine.journal import (
    content_of,
    notify_finished,
    open_ticket,
    permission_target,
    record,
    to_jsonable,
)
from runtime.engine.moves import move, move_run
from runtime.engine.policies import judge
from runtime.engine.traces import drive_span, invoke_tool, traced_model, turn_span
from runtime.engine.turns import (
    batch_open,
    blocked_text,
    failure_text,
    mark_model_call,
    record_model_marked,
)
from runtime.store.base import Transaction
from runtime.store.records import CallRecord, RunFlags, RunRecord

# How many times a safe or idempotent call whose outcome came back unknown is run again
# at once, before the model is told.
_LIVE_REPLAYS = 1


class Driver:
    """Runs one claimed run until it parks, pauses, finishes or loses its lease."""

    def __init__(
        self,
        deps: Deps,
        run: RunRecord,
        *,
        calls: list[CallRecord] | None = None,
        model_marked: bool = False,
    ) -> None:
        """Prepare to drive `run`, claimed with fence ``run.fence``.

        Args:
            deps: Shared dependencies.
            run: The claimed run as stored.
            calls: The current batch's calls, when the claiming transaction read them.
            model_marked: The claim already recorded the next model call as in flight.
        """
        self.deps = deps
        self.run = run
        self.fence = run.fence
        self.agent: Agent | None = agent_for_run(deps.agents, run.agent, run.origin)
        # The current batch's calls when already read (by the claim, or just proposed).
        self._calls: tuple[int, list[CallRecord]] | None = (
            (run.batch, calls) if calls is not None else None
        )
        self._model_marked = model_marked
        self._flags = RunFlags(run.pause_requested, run.cancel_requested)
        self.parked_on: tuple[list[ResumeTicket], list[CallRecord]] | None = None
        """When a model turn parked the run: the tickets it opened (then the run's only
        open ones about a call: a turn comes once every earlier call is settled) and
        the calls it proposed, as that turn's transaction committed them."""
        self.delegated = False
        """Whether this drive started (or joined) a sub-agent's run."""

    # -- helpers -------------------------------------------------------------------
    def _now(self) -> Any:
        return self.deps.clock.now()

    async def _save(self, tx: Transaction) -> None:
        self.run.updated_at = self._now()
        self._flags = await tx.update_run(self.run, fence=self.fence)

    def _release(self, status: RunStatus) -> None:
        move_run(self.run, status)
        self.run.lease_owner = None
        self.run.lease_expires_at = None

    async def _heartbeat(self) -> None:
        period = max(self.deps.lease_seconds / 3, 0.05)
        while True:
            await asyncio.sleep(period)
            until = self._now() + timedelta(seconds=self.deps.lease_seconds)
            async with self.deps.store.transaction() as tx:
                held = await tx.renew_lease(self.run.run_id, fence=self.fence, until=until)
            if not held:
                return

    # -- entry -----------------------------------------------------------------------
    async def drive(self) -> None:
        """Run until the run parks or finishes. Raises `LeaseLost` if taken over."""
        beat = asyncio.create_task(self._heartbeat())
        try:
            if self.agent is None:
                await self._fail(f"agent {self.run.agent!r} is not loaded")
                return
            with drive_span(self.deps, self.run):
                await self._loop(self.agent)
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _loop(self, agent: Agent) -> None:
        recovered = False
        while True:
            if self._batch_open():
                known, self._calls = self._calls, None
                if known is not None and known[0] == self.run.batch:
                    calls = known[1]
                else:
                    calls = await self._batch_calls()
                if not recovered:
                    calls = await self._recover_dispatched(agent, calls)
                recovered = True
                for index, call in enumerate(calls):
                    if call.state is not CallState.APPROVED:
                        continue
                    if await self._stop_requested(agent):
                        return
                    if call.tool in agent.delegates:
                        calls[index] = await self._delegate(agent, call)
                        continue
                    others = calls[:index] + calls[index + 1 :]
                    last = all(c.state.settled for c in others)
                    calls[index] = await self._dispatch(agent, call, calls if last else None)
                if any(not c.state.settled for c in calls):
                    if await self._park():
                        return
                    continue  # decided while the batch ran: read the calls again
                if self._batch_open():
                    self._fold_batch(calls)
            recovered = True
            if await self._stop_requested(agent):
                return
            if self.run.turns >= agent.max_turns:
                await self._fail(f"the agent used all {agent.max_turns} turns without finishing")
                return
            with turn_span(self.deps, self.run):
                if not await self._model_turn(agent):
                    return

    def _batch_open(self) -> bool:
        return batch_open(self.run)

    async def _batch_calls(self) -> list[CallRecord]:
        async with self.deps.store.transaction() as tx:
            return await tx.calls_for_run(self.run.run_id, batch=self.run.batch)

    # -- recovery ------------------------------------------------------------------------
    async def _recover_dispatched(self, agent: Agent, calls: list[CallRecord]) -> list[CallRecord]:
        """Apply replay policies to calls that were dispatched but never recorded."""
        orphaned = [c for c in calls if c.state is CallState.DISPATCHED]
        if not orphaned:
            return calls
        now = self._now()
        async with self.deps.store.transaction() as tx:
            for call in orphaned:
                if call.replay_policy == ReplayPolicy.MANUAL:
                    await self._make_uncertain(tx, agent, call, now)
                else:
                    await self._replay(tx, call, now)
            await self._save(tx)
        measure.recovered(self.deps, self.run.run_id, orphaned)
        return calls

    async def _save_call(
        self, tx: Transaction, call: CallRecord, now: Any, kind: str, **data: Any
    ) -> None:
        """Write `call` as it stands and record the event `kind` of it."""
        await tx.update_call(call)
        await record(tx, self.run.run_id, now, kind, call_id=call.call_id, tool=call.tool, **data)

    async def _make_uncertain(
        self, tx: Transaction, agent: Agent, call: CallRecord, now: Any, reason: str | None = None
    ) -> None:
        """Mark a dispatched call whose outcome is unknown uncertain, and open its ticket."""
        move(call, CallState.UNCERTAIN)
        call.updated_at = now
        extra = {"reason": reason} if reason is not None else {}
        await self._save_call(
            tx,
            call,
            now,
            "tool_uncertain",
            attempts=call.attempts,
            execution_key=call.execution_key,
            **extra,
        )
        target = Uncertain(
            call_id=call.call_id,
            tool=call.tool,
            args=call.args,
            execution_key=call.execution_key,
        )
        await open_ticket(
            self.deps, tx, self.run, agent, target, agent.tools.get(call.tool), UncertainCall
        )

    async def _replay(
        self, tx: Transaction, call: CallRecord, now: Any, reason: str | None = None
    ) -> None:
        """Approve a dispatched call whose outcome is unknown to run again (safe, idempotent)."""
        move(call, CallState.APPROVED)
        call.updated_at = now
        extra = {"reason": reason} if reason is not None else {}
        await self._save_call(
            tx,
            call,
            now,
            "tool_replayed",
            policy=call.replay_policy,
            execution_key=call.execution_key,
            attempts=call.attempts,
            **extra,
        )

    # -- tools ------------------------------------------------------------------------
    async def _dispatch(
        self, agent: Agent, call: CallRecord, batch: list[CallRecord] | None
    ) -> CallRecord:
        """Commit the dispatch intent, run the tool, commit its raw result.

        When `batch` is given this is the batch's last unsettled call: if it settles, the
        same commit folds the batch into the transcript and marks the next model call
        as in flight, saving a commit per turn.
        """
        now = self._now()
        move(call, CallState.DISPATCHED)
        call.attempts += 1
        call.updated_at = now
        async with self.deps.store.transaction() as tx:
            await self._save_call(
                tx,
                call,
                now,
                "tool_dispatched",
                attempt=call.attempts,
                execution_key=call.execution_key,
            )
            await self._save(tx)
        self.deps.reach("dispatch_committed", call_id=call.call_id, tool=call.tool)
        mark = measure.started()
        tool = agent.tools.get(call.tool)
        outcome: Any
        failed: str | None = None
        unknown: str | None = None
        if tool is None:
            failed = f"tool {call.tool!r} is not available any more"
        else:
            actor = Actor.model_validate(call.decided_by) if call.decided_by else None
            context = ToolContext(
                run_id=self.run.run_id,
                thread_id=self.run.thread_id,
                agent=agent.name,
                call_id=call.call_id,
                execution_key=call.execution_key,
                attempt=call.attempts,
                answer=call.answer,
                actor=actor,
                requester=self.run.requester,
            )
            token = _enter(context)
            try:
                outcome = await invoke_tool(self.deps, tool, call)
            except asyncio.CancelledError:
                raise
            except ToolOutcomeUnknown as exc:
                unknown = str(exc) or type(exc).__name__
                if call.replay_policy != ReplayPolicy.MANUAL and call.attempts >= _LIVE_REPLAYS + 1:
                    failed = f"the outcome is unknown after {call.attempts} attempts: {unknown}"
                    unknown = None
            except Exception as exc:  # a tool's failure is the model's to see
                failed = failure_text(exc)
            finally:
                _leave(token)
        measure.tool_returned(self.deps, call, mark, failed, unknown)
        if failed is not None:
            self.deps.reach("tool_failed", call_id=call.call_id, tool=call.tool)

        now = self._now()
        call.updated_at = now
        async with self.deps.store.transaction() as tx:
            if unknown is not None:
                # As if the process had died between dispatch and result.
                if call.replay_policy == ReplayPolicy.MANUAL:
                    await self._make_uncertain(tx, agent, call, now, reason=unknown)
                else:
                    await self._replay(tx, call, now, reason=unknown)
            elif failed is not None:
                move(call, CallState.FAILED)
                call.error = failed
                call.result = f"Error: {failed}"
                await self._save_call(tx, call, now, "tool_failed", error=failed)
            elif isinstance(outcome, InputRequest):
                move(call, CallState.AWAITING_INPUT)
                await self._save_call(tx, call, now, "input_requested", prompt=outcome.prompt)
                target = RemoteInput(
                    call_id=call.call_id,
                    tool=call.tool,
                    prompt=outcome.prompt,
                    schema=outcome.json_schema(),
                )
                await open_ticket(self.deps, tx, self.run, agent, target, tool, InputRequested)
            else:
                move(call, CallState.COMPLETED)
                call.result = to_jsonable(outcome)
                await self._save_call(tx, call, now, "tool_completed", result=call.result)
            if batch is not None and call.state.settled:
                self._fold_batch([call if c.call_id == call.call_id else c for c in batch])
                self._mark_model_call()
            await self._save(tx)
        measure.result_committed(self.deps, call)
        return call

    async def _delegate(self, agent: Agent, call: CallRecord) -> CallRecord:
        """Start the sub-agent's run for a delegating call (or join the one its task key
        names), drive a new one here until it parks or ends, and return the call as it
        stands then: settled by the child's end, or still waiting on the child."""
        sub = self.deps.agents.get(agent.delegates[call.tool])
        if sub is None:
            return await self._not_delegated(call, f"the sub-agent {call.tool!r} is not loaded")
        self.delegated = True
        async with self.deps.store.transaction() as tx:
            started = await delegation.start_child(self.deps, tx, self.run, call, sub)
            await self._save(tx)
        child = started.child
        self.deps.reach("child_created", run_id=self.run.run_id, child_run_id=child.run_id)
        if started.claimed:
            inner = Driver(self.deps, child, model_marked=True)
            # LeaseLost: another worker took the child over; its end settles this call.
            with contextlib.suppress(LeaseLost):
                await inner.drive()
            if not inner.run.status.finished:
                self.deps.reach("child_parked", run_id=self.run.run_id, child_run_id=child.run_id)
        if not started.claimed:
            return call  # settled at once, or waiting on a child driven elsewhere
        # The child ran for a while: its end may have settled the call, and a pause or
        # cancel may have been asked of this run meanwhile (its flags come back from
        # fenced writes, and there was none).
        async with self.deps.store.transaction() as tx:
            current = await tx.get_call(call.call_id)
            stored = await tx.get_run(self.run.run_id)
        if stored is not None:
            self._flags = RunFlags(stored.pause_requested, stored.cancel_requested)
        return current if current is not None else call

    async def _not_delegated(self, call: CallRecord, error: str) -> CallRecord:
        now = self._now()
        move(call, CallState.AWAITING_CHILD)
        move(call, CallState.FAILED)
        call.error = error
        call.result = f"Error: {error}"
        call.updated_at = now
        async with self.deps.store.transaction() as tx:
            await self._save_call(tx, call, now, "tool_failed", error=error)
            await self._save(tx)
        return call

    def _fold_batch(self, calls: list[CallRecord]) -> None:
        """Append the settled batch's results to the transcript, in call order."""
        for call in calls:
            content = content_of(call.result)
            for middleware in self.deps.result_middleware:
                content = str(middleware(ResultMiddlewareInput(call=call, content=content)))
            if call.edit is not None:
                content = f"{model_note(call.edit)}\n{content}"
            self.run.messages.append(
                {"role": "tool", "tool_call_id": call.model_call_id, "content": content}
            )

    # -- model --------------------------------------------------------------------------
    def _mark_model_call(self) -> None:
        """Record (in the next save) that a model call is about to be made."""
        mark_model_call(self.run)
        self._model_marked = True

    def _unmark_model_call(self) -> None:
        """The marked model call will not be made (the run pauses or stops first)."""
        if self._model_marked:
            self.run.model_attempt -= 1
            self.run.model_in_flight = self.run.model_attempt > 0
            self._model_marked = False

    async def _model_turn(self, agent: Agent) -> bool:
        """One model call; returns False when the run parked or ended."""
        if self._model_marked:
            self._model_marked = False
            return await self._call_model(agent)
        self._mark_model_call()
        self._model_marked = False
        now = self._now()
        async with self.deps.store.transaction() as tx:
            await record_model_marked(tx, self.run, now)
            await self._save(tx)
        return await self._call_model(agent)

    async def _call_model(self, agent: Agent) -> bool:
        model = traced_model(self.deps.model_of(agent), self.deps, self.run)
        request = ModelRequest(
            model=model.name,
            messages=[{"role": "system", "content": agent.instructions}, *self.run.messages],
            tools=[t.spec() for t in agent.offered()],
            attempt=self.run.model_attempt,
            on_text=measure.text_sink(self.deps, self.run),
        )
        try:
            response = await measure.complete(self.deps, model, request)
        except asyncio.CancelledError:
            raise
        except ModelError as exc:
            await self._model_failed(model.name, exc)
            return False
        except Exception as exc:
            await self._fail(f"model call failed: {type(exc).__name__}: {exc}")
            return False
        return await self._apply_response(agent, model.name, response)

    async def _model_failed(self, model: str, exc: ModelError) -> None:
        """Fail the run on a model error, recording what the provider said."""
        status = f" {exc.status}" if exc.status is not None else ""
        error = f"model call failed ({exc.provider}{status}, {exc.kind.value}): {exc}"
        await self._fail(
            error,
            "model_failed",
            {
                "turn": self.run.turns + 1,
                "attempt": self.run.model_attempt,
                "model": model,
                "provider": exc.provider,
                "failure": exc.kind.value,
                "status": exc.status,
                "retryable": exc.retryable,
                "request_id": exc.request_id,
                "message": str(exc),
            },
        )

    async def _apply_response(self, agent: Agent, model: str, response: ModelResponse) -> bool:
        now = self._now()
        run = self.run
        usage = response.usage
        stop = response.stop_reason
        run.turns += 1
        run.prompt_tokens += usage.prompt_tokens
        run.completion_tokens += usage.completion_tokens
        run.model_in_flight = False
        attempt = run.model_attempt
        run.model_attempt = 0
        unusable: str | None = None
        match stop:
            case StopReason.END | StopReason.TOOL_CALLS:
                run.messages.append(response.as_message())
            case StopReason.LENGTH:
                unusable = (
                    "the model's answer was cut off at its output token limit "
                    "(nothing it asked for was run; raise the model's max_tokens)"
                )
            case StopReason.REFUSAL:
                said = response.refusal or response.text
                unusable = "the model refused to answer" + (f": {said}" if said else "")
            case _:
                assert_never(stop)
        ends = unusable is not None or not response.tool_calls
        waits = runnable = False
        opened: list[ResumeTicket] = []
        proposed: list[CallRecord] = []
        async with self.deps.store.transaction() as tx:
            if ends:
                await delegation.lock_parent(tx, run)
            await record(
                tx,
                run.run_id,
                now,
                "model_call",
                turn=run.turns,
                attempt=attempt,
                model=model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cached_tokens=usage.cached_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost=usage.cost,
                stop=stop.value,
                tool_calls=[c.name for c in response.tool_calls],
                text=response.text,
            )
            if unusable is not None:
                # A truncated or refused answer is never acted on: its tool calls may be
                # cut short, and a refusal is not an answer to report as done.
                await self._fail_in(tx, unusable)
                await self._save(tx)
            elif not response.tool_calls:
                run.final_text = response.text or ""
                self._release(RunStatus.DONE)
                await delegation.settle_parent(self.deps, tx, run)
                await record(tx, run.run_id, now, "run_done", text=run.final_text)
                await notify_finished(self.deps, tx, run)
                await self._save(tx)
            else:
                run.batch += 1
                self._calls = (run.batch, proposed)
                why = response.stated_reason
                for seq, request in enumerate(response.tool_calls):
                    call = await self._propose(
                        tx, agent, seq, request.id, request.name, request.arguments, why, opened
                    )
                    proposed.append(call)
                    settled = call.state.settled or call.state is CallState.APPROVED
                    waits = waits or not settled
                    runnable = runnable or call.state is CallState.APPROVED
                # Two or more approvals in one turn: chat offers "Allow all N" once all are
                # shown.
                await offer_batch(self.deps, tx, run, proposed)
                if waits and not runnable:
                    self._release(RunStatus.AWAITING)
                    await record(tx, run.run_id, now, "run_awaiting")
                await self._save(tx)
        # Reached once the transaction committed, whichever way the turn went.
        self.deps.reach("model_call_committed", run_id=run.run_id)
        if ends:
            self._reach_child_finished()
            return False
        if waits and not runnable:
            self.parked_on = (opened, proposed)
            return False
        return True

    async def _propose(
        self,
        tx: Transaction,
        agent: Agent,
        seq: int,
        model_call_id: str,
        name: str,
        raw_arguments: str,
        stated_reason: str | None,
        opened: list[ResumeTicket],
    ) -> CallRecord:
        """Judge and store one tool call the model asked for; a ticket it opens is
        added to `opened`."""
        now = self._now()
        call = CallRecord(
            call_id=self.deps.ids.new_id("call"),
            run_id=self.run.run_id,
            batch=self.run.batch,
            seq=seq,
            model_call_id=model_call_id,
            tool=name,
            args={},
            state=CallState.PROPOSED,
            replay_policy=ReplayPolicy.MANUAL.value,
            execution_key=self.deps.ids.new_id("xk"),
            created_at=now,
            updated_at=now,
        )
        tool = agent.tools.get(name)
        problem: str | None = None
        permission = Permission.DENY
        if tool is None:
            problem = f"Error: there is no tool named {name!r}"
        else:
            call.replay_policy = tool.replay_policy
            try:
                raw = json.loads(raw_arguments or "{}")
                if not isinstance(raw, dict):
                    raise ArgumentError(f"arguments for {name} must be a JSON object")
                call.args = tool.parse_arguments(raw)
                permission = tool.permission_for(call.args)
                sub_name = agent.delegates.get(name)
                if sub_name is not None:
                    problem = delegation.check_delegation(
                        self.deps, self.run, sub_name
                    ) or await delegation.check_task_key(
                        tx, self.run, sub_name, delegation.task_of(call)[0]
                    )
            except json.JSONDecodeError as exc:
                problem = f"Error: arguments for {name} are not valid JSON: {exc}"
                call.args = {"_raw": raw_arguments}
            except ArgumentError as exc:
                problem = f"Error: {exc}"
                call.args = raw if isinstance(raw, dict) else {"_raw": raw_arguments}
        shown = tool.masked(call.args) if tool is not None else call.args
        asked = agent.policy if problem is None else None
        judged = await judge(asked, agent, self.run, name, call.args, now, permission)
        permission = judged.permission
        if problem is not None:
            move(call, CallState.FAILED)
            call.result = problem
            call.error = problem
            await tx.insert_call(call)
            await record(
                tx,
                self.run.run_id,
                now,
                "tool_failed",
                call_id=call.call_id,
                tool=name,
                error=problem,
            )
            return call
        await tx.insert_call(call)
        await record(
            tx,
            self.run.run_id,
            now,
            "tool_proposed",
            call_id=call.call_id,
            tool=name,
            args=shown,
            permission=permission.value,
            execution_key=call.execution_key,
            # Where the permission came from, so a call that runs without asking says
            # what let it through.
            **({"rule": describe_permission(tool.permission)} if tool is not None else {}),
            **judged.fields(),
        )
        await judged.record_failure(tx, self.run.run_id, now, call.call_id)
        # A standing grant, read from the database now, may stand in for the person.
        if (
            permission is Permission.ASK
            and tool is not None
            and not judged.wants_person
            and await grants.allow_by_grant(tx, self.deps, self.run, agent, tool, call)
        ):
            permission = Permission.ALLOW
        if permission is Permission.ALLOW:
            move(call, CallState.APPROVED)
        elif permission is Permission.DENY:
            move(call, CallState.DENIED)
            told, reason = judged.denial()
            call.result = blocked_text(told)
            await record(
                tx,
                self.run.run_id,
                now,
                "tool_denied",
                call_id=call.call_id,
                tool=name,
                reason=reason,
            )
        else:
            move(call, CallState.AWAITING_DECISION)
            assert tool is not None
            target, approvers, deadline = judged.for_ticket(permission_target(call, stated_reason))
            ticket = await open_ticket(
                self.deps,
                tx,
                self.run,
                agent,
                target,
                tool,
                ApprovalRequested,
                approvers=approvers,
                deadline=deadline,
            )
            opened.append(ticket)
        await tx.update_call(call)
        return call

    # -- endings -----------------------------------------------------------------------
    async def _park(self) -> bool:
        """Park the run if a ticket is still open; False if none is (decided meanwhile).

        The run row is locked before the tickets are read, as the decision path does, so
        a decision committed while this batch ran is never missed.
        """
        now = self._now()
        async with self.deps.store.transaction() as tx:
            await delegation.lock_parent(tx, self.run)
            stored = await tx.get_run(self.run.run_id, for_update=True)
            tickets = await tx.tickets_for_run(self.run.run_id, status=TicketStatus.OPEN)
            if not tickets:
                return False
            cancelling = stored is not None and stored.cancel_requested
            pausing = stored is not None and stored.pause_requested and not cancelling
            if cancelling:
                # Asked to cancel while its last step ran: cancel rather than park, so
                # no ticket stays open to be decided (a cancelled parent's child).
                self._unmark_model_call()
                await cancel_in(self.deps, tx, self.run, actor=None, reason="cancel requested")
                await tx.set_run_flags(self.run.run_id, cancel=False, pause=False)
            elif pausing and self.agent is not None:
                # Asked to pause while its last step ran (e.g. while its sub-agent ran):
                # paused, its tickets stay open; resuming makes it wait on them again.
                self._unmark_model_call()
                self._release(RunStatus.PAUSED)
                await tx.set_run_flags(self.run.run_id, pause=False)
                await open_ticket(self.deps, tx, self.run, self.agent, Pause(), None, RunPaused)
                await record(tx, self.run.run_id, now, "run_paused")
            else:
                self._release(RunStatus.AWAITING)
                await record(tx, self.run.run_id, now, "run_awaiting")
            await self._save(tx)
        if cancelling:
            self._reach_child_finished()
        elif any(isinstance(t.target, Child) for t in tickets):
            self.deps.reach("parent_parked", run_id=self.run.run_id)
        return True

    async def _fail(
        self, error: str, kind: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        """Fail the run; `kind` and `details` add an event before ``run_failed``."""
        async with self.deps.store.transaction() as tx:
            await delegation.lock_parent(tx, self.run)
            if kind is not None:
                await record(tx, self.run.run_id, self._now(), kind, **(details or {}))
            await self._fail_in(tx, error)
            await self._save(tx)
        self._reach_child_finished()

    def _reach_child_finished(self) -> None:
        if self.run.parent_run_id is not None and self.run.status.finished:
            self.deps.reach(
                "child_finished", run_id=self.run.parent_run_id, child_run_id=self.run.run_id
            )

    async def _fail_in(self, tx: Transaction, error: str) -> None:
        """Fail the run inside `tx`; the caller saves it (having locked the parent)."""
        now = self._now()
        self.run.error = error
        self.run.model_in_flight = False
        self._release(RunStatus.FAILED)
        await delegation.settle_parent(self.deps, tx, self.run)
        await record(tx, self.run.run_id, now, "run_failed", error=error)
        await notify_finished(self.deps, tx, self.run)

    async def _stop_requested(self, agent: Agent) -> bool:
        """Honour a pause or cancel request at a step boundary.

        The flags come back from the run's last fenced write, so checking costs no read.
        """
        flags = self._flags
        if flags.cancel_requested or flags.pause_requested:
            self._unmark_model_call()
        if flags.cancel_requested:
            async with self.deps.store.transaction() as tx:
                await delegation.lock_parent(tx, self.run)
                await cancel_in(self.deps, tx, self.run, actor=None, reason="cancel requested")
                await tx.set_run_flags(self.run.run_id, cancel=False, pause=False)
                await self._save(tx)
            self._reach_child_finished()
            return True
        if flags.pause_requested:
            now = self._now()
            self._release(RunStatus.PAUSED)
            async with self.deps.store.transaction() as tx:
                await tx.set_run_flags(self.run.run_id, pause=False)
                await open_ticket(self.deps, tx, self.run, agent, Pause(), None, RunPaused)
                await record(tx, self.run.run_id, now, "run_paused")
                await self._save(tx)
            return True
        return False
