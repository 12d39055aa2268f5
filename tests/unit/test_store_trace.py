"""The golden trace of store transactions: which transactions each scenario opens, in
which order, reading and writing what, at the level of the store port.

Each scenario drives the runtime through the entry points an edge uses, step by step (no
background loops, no wall clock), over a `TracingStore` wrapping a real SQLite file and
again over a `MemoryStore`: both traces must be equal, equal again on a second run, and
equal to ``tests/golden/store_trace/<scenario>.txt``. The first line of each file sums
it up: transactions, writing transactions and `get_ticket` reads per ticket; every
phase's header does the same for its own step (a chat click is ``accept`` plus
``apply``).

Moving code must leave the files unchanged. A change that deliberately removes (or adds)
store work rewrites them with ``SIGNOFF_UPDATE_GOLDEN=1``; the commit says which read or
transaction it removed.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Awaitable, Callable
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from store_trace import TracingStore

from adapters.slack import SlackNotifier
from runtime import (
    Accepted,
    Actor,
    Agent,
    Allow,
    GrantRequest,
    ManualClock,
    MemoryStore,
    ModelRequest,
    ResumeCommand,
    ResumeTicket,
    RunStatus,
    Runtime,
    ScriptedModel,
    Store,
    delegate_tool_name,
    final_reply,
    tool_call_reply,
)
from runtime.domain.notifications import Delivery, Notification
from runtime.services.delivery import deliver_due
from runtime.store.sql import SQLStore

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "store_trace"
UPDATE = os.environ.get("SIGNOFF_UPDATE_GOLDEN") == "1"
ANA = Actor(id="U1", name="Ana", platform="slack")
SLACK = {"platform": "slack", "channel": "C1"}
Call = tuple[str, dict[str, Any]]


class Crash(BaseException):
    """Stands in for the process dying at a checkpoint."""


class PostingNotifier:
    """A chat notifier that posts every notification and edits cards in place.

    Each post answers with a message reference, as a platform does; an outcome that
    finds its card (`Delivery.card`) edits that message instead. It reads the ticket
    when Slack's notifier does (`SlackNotifier.needs_ticket`).
    """

    needs_ticket = staticmethod(SlackNotifier.needs_ticket)

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        if delivery.card is not None:
            self.sent.append(f"edit {delivery.card.ref.get('ts')}")
            return dict(delivery.card.ref)
        self.sent.append(f"post {type(note).__name__}")
        return {"channel": "C1", "ts": f"{len(self.sent)}.0"}


def turns_model(*turns: list[Call]) -> ScriptedModel:
    """Turn N of each run asks for the calls of ``turns[N]``; then it reports the results."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
        done = sum(1 for m in request.messages[start:] if m.get("role") == "assistant")
        if done < len(turns):
            return tool_call_reply(*turns[done])
        results = [str(m["content"]) for m in request.messages[start:] if m.get("role") == "tool"]
        return final_reply(" | ".join(results))

    return ScriptedModel(reply)


def refund(order: str) -> Call:
    return ("refund", {"order": order, "amount": 50.0})


def shop(*turns: list[Call]) -> Agent:
    """An agent whose `refund` asks a person."""
    agent = Agent("shop", "Refund.", turns_model(*turns), version="1")

    @agent.tool(permission="ask")
    async def refund(order: str, amount: float) -> str:
        return f"refunded {amount} on {order}"

    return agent


class PaddedIds:
    """Sequential ids of one width (``run_001``), so that sorting them by text, as SQL
    breaks a tie of equal times, keeps the order they were made in, as memory does."""

    def __init__(self) -> None:
        self._counter = count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter):03d}"

    def token(self) -> str:
        return f"tok{next(self._counter):03d}"


def runtime_over(
    store: Store, clock: ManualClock, ids: PaddedIds, *agents: Agent, **options: Any
) -> Runtime:
    return Runtime(store, agents, clock=clock, ids=ids, worker_id="w1", **options)


# --- scenarios ----------------------------------------------------------------------------


async def start_park_allow(store: TracingStore, clock: ManualClock, ids: PaddedIds) -> None:
    """Start, park on an `ask` tool, allow it directly and resume at once, done."""
    runtime = runtime_over(store, clock, ids, shop([refund("A1")]))
    store.phase("start")
    parked = await runtime.start("shop", "refund A1", requester="U1", origin=SLACK)
    assert parked.status is RunStatus.AWAITING
    store.phase("allow")
    done = await runtime.approve(parked.pending[0], actor=ANA, resume=True)
    assert done.status is RunStatus.DONE


async def chat_click(store: TracingStore, clock: ManualClock, ids: PaddedIds) -> None:
    """A Slack click: accepted and stored, applied by the worker, the card edited by the
    outbox, the run driven by the worker and its result posted."""
    runtime = runtime_over(store, clock, ids, shop([refund("A1")]))
    notifier = PostingNotifier()
    store.phase("start")
    parked = await runtime.start("shop", "refund A1", requester="U1", origin=SLACK)
    store.phase("outbox posts the card")
    await deliver_due(store, clock, notifier)
    ticket = parked.pending[0].ticket
    clock.advance(5)

    def clicker(found: ResumeTicket | None) -> Actor:
        return ANA  # the directory knows the clicker: no look-up

    store.sum_up("the click", "accept", "apply")
    store.sum_up("the click with its card edit", "accept", "apply", "outbox edits the card")
    store.phase("accept")
    outcome = await runtime.accept(
        ticket.ticket_id,
        Allow(),
        clicker,
        correlation=ticket.correlation,
        source="slack",
        delivery_id="delivery-1",
        reply={"channel": "C1", "user": "U1"},
    )
    assert isinstance(outcome, Accepted) and outcome.stored
    store.phase("apply")
    (applied,) = await runtime.apply_received(limit=50)
    assert applied.applied
    store.phase("outbox edits the card")
    await deliver_due(store, clock, notifier)
    assert notifier.sent[-1].startswith("edit "), notifier.sent
    store.phase("worker drives")
    assert await runtime.work_once() == 1
    store.phase("outbox posts the result")
    await deliver_due(store, clock, notifier)
    with store.untraced():
        assert (await runtime.get(parked.run_id)).status is RunStatus.DONE


async def api_decision(store: TracingStore, clock: ManualClock, ids: PaddedIds) -> None:
    """The JSON API's decide: the ticket read for the viewer, a submitted command, and
    the run driven by the worker."""
    runtime = runtime_over(store, clock, ids, shop([refund("A1")]))
    store.phase("start")
    parked = await runtime.start("shop", "refund A1", requester="U1", origin=SLACK)
    clock.advance(5)
    store.sum_up("the decision", "decide")
    store.phase("decide")
    ticket = await runtime.ticket(parked.pending[0].ticket.ticket_id, viewer=ANA)
    command = ResumeCommand.from_ticket(ticket, Allow(), ANA, clock.now())
    decided = await runtime.submit(command)
    assert decided.status is RunStatus.QUEUED
    store.phase("worker drives")
    assert await runtime.work_once() == 1
    with store.untraced():
        assert (await runtime.get(parked.run_id)).status is RunStatus.DONE


async def webhook_start(store: TracingStore, clock: ManualClock, ids: PaddedIds) -> None:
    """A signed webhook request starts a queued run; the same request again is a replay;
    the worker drives the run."""
    agent = Agent("notes", "Take notes.", ScriptedModel(lambda _r: final_reply("noted")))
    runtime = runtime_over(store, clock, ids, agent)
    keys = [
        ("hook-signature:deploys", "1767225600.digest-1", "digest-1"),
        ("hook:deploys", "key-1", "digest-1"),
    ]
    store.phase("start")
    run = await runtime.start(
        "notes",
        "deploy finished",
        requester="hook:deploys",
        origin=SLACK,
        wait=False,
        idempotency=keys,
    )
    assert run.status is RunStatus.QUEUED and not run.replayed
    await runtime.forget_idempotency("hook-signature:deploys", clock.now())
    store.phase("replay")
    again = await runtime.start(
        "notes",
        "deploy finished",
        requester="hook:deploys",
        origin=SLACK,
        wait=False,
        idempotency=keys,
    )
    assert again.replayed and again.run_id == run.run_id
    store.phase("worker drives")
    assert await runtime.work_once() == 1
    with store.untraced():
        assert (await runtime.get(run.run_id)).status is RunStatus.DONE


async def crash_recovery(store: TracingStore, clock: ManualClock, ids: PaddedIds) -> None:
    """A worker dies after dispatching a safe tool; once its lease expired, a fresh
    runtime reclaims the run, runs the tool again and finishes."""
    agent = Agent("ops", "Operate.", turns_model([("ping", {"host": "db"})]))

    @agent.tool(replay_policy="safe")
    async def ping(host: str) -> str:
        return f"{host} is up"

    def die(point: str, info: dict[str, Any]) -> None:
        if point == "dispatch_committed":
            raise Crash

    dying = runtime_over(store, clock, ids, agent, checkpoint=die, lease_seconds=30)
    store.phase("start, dies after dispatch")
    with pytest.raises(Crash):
        await dying.start("ops", "check db", requester="U1", origin=SLACK)
    clock.advance(31)
    fresh = runtime_over(store, clock, ids, agent, lease_seconds=30)
    store.phase("recover")
    (recovered,) = await fresh.recover()
    assert recovered.status is RunStatus.DONE


async def grant(store: TracingStore, clock: ManualClock, ids: PaddedIds) -> None:
    """An allow that gives a run grant; the run's next call is allowed by it."""
    runtime = runtime_over(store, clock, ids, shop([refund("A1")], [refund("A2")]))
    store.phase("start")
    parked = await runtime.start("shop", "refund", requester="U1", origin=SLACK)
    store.phase("allow with a run grant, the next call allowed by it")
    done = await runtime.approve(
        parked.pending[0], actor=ANA, resume=True, grant=GrantRequest(scope="run")
    )
    assert done.status is RunStatus.DONE


async def delegation(store: TracingStore, clock: ManualClock, ids: PaddedIds) -> None:
    """`ops` delegates to `billing`, whose `refund` asks; allowed, billing finishes and
    ops continues with its answer."""
    billing = Agent("billing", "Refund.", turns_model([refund("A1")]), description="refunds")

    @billing.tool(name="refund", permission="ask")
    async def refund_tool(order: str, amount: float) -> str:
        return f"refunded {amount} on {order}"

    delegate = delegate_tool_name("billing")
    ops = Agent(
        "ops",
        "Operate.",
        turns_model([(delegate, {"task_key": "refund-A1", "task": "refund A1"})]),
        subagents=[billing],
    )
    runtime = runtime_over(store, clock, ids, ops)
    store.phase("start, the child parks")
    parked = await runtime.start("ops", "refund A1", requester="U1", origin=SLACK)
    (entry,) = parked.pending
    assert entry.run_id != parked.run_id
    store.phase("allow the child's call")
    await runtime.approve(entry, actor=ANA, resume=True)
    with store.untraced():
        assert (await runtime.get(parked.run_id)).status is RunStatus.DONE


SCENARIOS: dict[str, Callable[[TracingStore, ManualClock, PaddedIds], Awaitable[None]]] = {
    "start_park_allow": start_park_allow,
    "chat_click": chat_click,
    "api_decision": api_decision,
    "webhook_start": webhook_start,
    "crash_recovery": crash_recovery,
    "grant": grant,
    "delegation": delegation,
}


# --- the test ---------------------------------------------------------------------------


async def _trace(name: str, store: Store) -> str:
    clock = ManualClock()
    traced = TracingStore(store, clock.now())
    try:
        await traced.migrate()
        await SCENARIOS[name](traced, clock, PaddedIds())
    finally:
        await traced.close()
    return traced.text()


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_store_transactions_match_the_golden_trace(name: str, tmp_path: Path) -> None:
    on_sqlite = await _trace(name, SQLStore.sqlite(tmp_path / "a.db"))
    again = await _trace(name, SQLStore.sqlite(tmp_path / "b.db"))
    in_memory = await _trace(name, MemoryStore())
    assert again == on_sqlite, "the trace changed between two runs: something is not deterministic"
    assert in_memory == on_sqlite, "the memory store and SQLite saw different transactions"
    golden = GOLDEN / f"{name}.txt"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(on_sqlite)
        return
    expected = golden.read_text() if golden.exists() else ""
    if on_sqlite != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                on_sqlite.splitlines(keepends=True),
                fromfile=f"{golden.relative_to(ROOT)} (golden)",
                tofile="now",
            )
        )
        pytest.fail(
            f"store transactions of {name!r} changed:\n{diff}\n"
            "If the change is deliberate (a read or transaction removed), rewrite the golden "
            "files with SIGNOFF_UPDATE_GOLDEN=1 and say in the commit what it removed.",
            pytrace=False,
        )
