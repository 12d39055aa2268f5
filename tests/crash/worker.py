"""A crash-test worker: one run of a one-tool agent on a database, killable at named points.

Run as a real subprocess by ``tests/crash/test_crash_recovery.py``::

    python tests/crash/worker.py --db PATH|URL --ledger PATH --policy manual|safe|idempotent \
        --kill-at POINT --phase start|park|approve|recover|resolve [--resolve result|retry|abort]

Every phase builds `signoff serve`'s process (`bot.bootstrap.build_service`) on the
database; only the ``serve`` phase starts its worker.

Phases (each is meant to run in a fresh process):

* ``start``   start the run (it parks on the ``ask`` tool), then approve it with ``resume=True``;
* ``serve``   as ``signoff serve`` drives runs: its worker loop runs, the run is started
              without waiting and approved without resuming, and the worker drives it (each
              time claimed for the worker in the start's or the decision's own commit);
* ``park``    only start the run (it parks);
* ``approve`` approve the parked run with ``resume=True``;
* ``recover`` wait until every ``running`` run's lease expired, then ``Runtime.recover()``;
* ``resolve`` resolve the run's uncertain pending entry (``--resolve``) with ``resume=True``.

``--kill-at`` names where the process SIGKILLs itself: any runtime checkpoint
(``dispatch_committed``, ``tool_returned``, ``result_committed``, ``model_call_committed``,
``decision_committed``), ``inside_tool`` (after the tool's ledger line is written and fsynced,
before the tool returns) or ``inside_model`` (inside the scripted model's reply callable on
turn 1, i.e. after the tool result was folded in and before the final answer is recorded).
``--kill-count N`` kills at the N-th time the point is reached (default 1).

The side-effect ledger is an append-only file with one JSON line per real execution of the
tool (``kind: tool``, with its execution key and attempt) and per model call
(``kind: model``, with turn and attempt), each flushed and fsynced before going on.

A surviving process prints one JSON line on stdout: the state of every run in the database
(status, pending entries, calls, flight-recorder event kinds) for the test to check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import (
    Agent,
    ModelRequest,
    RunResult,
    RunStatus,
    Runtime,
    ScriptedModel,
    current_tool_context,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.store.sql import SQLStore

AGENT = "crashy"
REQUESTER = "U1"
FINAL_TEXT = "Refund issued."


class Killer:
    """SIGKILLs this process the `count`-th time the named point is reached."""

    def __init__(self, point: str | None, count: int = 1) -> None:
        self.point = point
        self.remaining = count

    def reach(self, point: str) -> None:
        if point != self.point:
            return
        self.remaining -= 1
        if self.remaining <= 0:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def checkpoint(self, point: str, info: dict[str, Any]) -> None:
        self.reach(point)


def append_ledger(path: Path, entry: dict[str, Any]) -> None:
    """Append one JSON line and make it durable before returning."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def build_agent(policy: str, ledger: Path, killer: Killer, phase: str) -> Agent:
    """An agent with one `ask` tool of the given replay policy.

    Turn 0 calls the tool, turn 1 answers. The reply is chosen from the transcript, so a
    restarted process replays the same script.
    """

    def reply(request: ModelRequest) -> dict[str, Any]:
        turn = _turn_of(request.messages)
        append_ledger(
            ledger,
            {
                "kind": "model",
                "turn": turn,
                "attempt": request.attempt,
                "pid": os.getpid(),
                "phase": phase,
                "tool_results": [
                    m.get("content") for m in request.messages if m.get("role") == "tool"
                ],
            },
        )
        if turn == 0:
            return tool_call_reply(("refund", {"order": "A1", "amount": 250}))
        killer.reach("inside_model")
        return final_reply(FINAL_TEXT)

    @tool(permission="ask", replay_policy=policy)
    async def refund(order: str, amount: float) -> str:
        """Refund an order (the real side effect: one ledger line)."""
        ctx = current_tool_context()
        append_ledger(
            ledger,
            {
                "kind": "tool",
                "execution_key": ctx.execution_key,
                "attempt": ctx.attempt,
                "call_id": ctx.call_id,
                "run_id": ctx.run_id,
                "order": order,
                "pid": os.getpid(),
                "phase": phase,
            },
        )
        killer.reach("inside_tool")
        return f"refunded {amount} on {order}"

    return Agent(AGENT, "Refund what you are asked to.", ScriptedModel(reply), [refund])


def _turn_of(messages: list[dict[str, Any]]) -> int:
    start = 0
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            start = index
    return sum(1 for m in messages[start:] if m.get("role") == "assistant")


async def only_run_id(store: SQLStore) -> str:
    async with store.transaction() as tx:
        runs = await tx.list_runs(limit=10)
    if len(runs) != 1:
        raise SystemExit(f"expected exactly one run in the database, found {len(runs)}")
    return runs[0].run_id


async def wait_for_expired_leases(runtime: Runtime, patience: float) -> None:
    """Block until no `running` run still holds a live lease (its worker is dead)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        async with runtime.store.transaction() as tx:
            runs = await tx.list_runs(statuses=[RunStatus.RUNNING], limit=1000)
        now = runtime.clock.now()
        live = [r for r in runs if r.lease_expires_at is not None and r.lease_expires_at > now]
        if not live:
            return
        if loop.time() > deadline:
            raise SystemExit(f"leases still live after {patience}s: {[r.run_id for r in live]}")
        await asyncio.sleep(0.05)


async def describe(runtime: Runtime, store: SQLStore) -> list[dict[str, Any]]:
    async with store.transaction() as tx:
        runs = await tx.list_runs(limit=1000)
    described = []
    for run in runs:
        result = await runtime.get(run.run_id)
        async with store.transaction() as tx:
            calls = await tx.calls_for_run(run.run_id)
        events = await runtime.events(run.run_id)
        described.append(
            {
                **result_json(result),
                "calls": [
                    {
                        "call_id": c.call_id,
                        "state": str(c.state),
                        "attempts": c.attempts,
                        "execution_key": c.execution_key,
                        "replay_policy": c.replay_policy,
                        "result": c.result,
                    }
                    for c in calls
                ],
                "events": [{"kind": e["kind"], "data": e["data"]} for e in events],
            }
        )
    return described


def result_json(result: RunResult) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "status": str(result.status),
        "text": result.text,
        "turns": result.turns,
        "usage_incomplete": result.usage_incomplete,
        "error": result.error,
        "pending": [
            {
                "status": p.status,
                "tool": p.call.name,
                "execution_key": p.execution_key,
                "attempts": p.call.attempts,
                "ticket_id": p.ticket_id,
                "target": type(p.ticket.target).__name__,
            }
            for p in result.pending
        ],
    }


class Turns:
    """Signals each committed model call (the first parks the run, the second ends it)."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()

    def checkpoint(self, point: str, info: dict[str, Any]) -> None:
        if point == "model_call_committed":
            self.changed.set()

    async def until(self, runtime: Runtime, run_id: str, status: RunStatus) -> RunResult:
        """The run once it has `status` (looked at again after every model call)."""
        async with asyncio.timeout(30):
            while True:
                self.changed.clear()
                current = await runtime.get(run_id)
                if current.status is status:
                    return current
                await self.changed.wait()


async def serve(service: Service, turns: Turns) -> dict[str, Any]:
    """The ``serve`` phase: the process's worker loop drives what is started and decided."""
    runtime = service.runtime
    await service.start()
    await asyncio.sleep(0)  # the loop has begun: it takes runs from now on
    started = await runtime.start(AGENT, "refund order A1", requester=REQUESTER, wait=False)
    if started.status is not RunStatus.RUNNING:
        raise SystemExit(f"the start was not handed to the worker: {started.status}")
    parked = await turns.until(runtime, started.run_id, RunStatus.AWAITING)
    print(json.dumps({"parked": parked.run_id}), flush=True)
    decided = await runtime.approve(parked.pending[0], resume=False)
    if decided.status is not RunStatus.RUNNING:
        raise SystemExit(f"the decision was not handed to the worker: {decided.status}")
    return result_json(await turns.until(runtime, started.run_id, RunStatus.DONE))


ONLY_THE_WORKER = Parts(listen=False, outbox=False, deadlines=False, wake_ups=False)
"""What a phase runs of `signoff serve`'s process: its worker, in the ``serve`` phase."""


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run one phase; return the JSON-able state of the database afterwards."""
    ledger = Path(args.ledger)
    killer = Killer(args.kill_at, args.kill_count)
    agent = build_agent(args.policy, ledger, killer, args.phase)
    url = args.db if "://" in args.db else f"sqlite+aiosqlite:///{args.db}"
    store = SQLStore.from_url(url, busy_timeout_ms=750, synchronous="full")
    await store.migrate()
    turns = Turns()

    def checkpoint(point: str, info: dict[str, Any]) -> None:
        killer.checkpoint(point, info)
        turns.checkpoint(point, info)

    settings = Settings(
        database_url=url,
        lease_seconds=args.lease,
        poll_seconds=0.05,
        operator_token="crash-operator-0123456789",
        cookie_secret="crash-cookie-secret-0123456789abcdef",
    )
    service = await build_service(
        settings, agents=[agent], store=store, checkpoint=checkpoint, parts=ONLY_THE_WORKER
    )
    runtime = service.runtime
    output: dict[str, Any] = {"phase": args.phase, "pid": os.getpid()}
    try:
        if args.phase == "serve":
            output["result"] = await serve(service, turns)
        elif args.phase in ("start", "park"):
            result = await runtime.start(AGENT, "refund order A1", requester=REQUESTER)
            print(json.dumps({"parked": result.run_id}), flush=True)
            output["parked"] = result_json(result)
            if args.phase == "start":
                output["result"] = result_json(
                    await runtime.approve(result.pending[0], resume=True)
                )
        elif args.phase == "approve":
            parked = await runtime.get(await only_run_id(store))
            output["result"] = result_json(await runtime.approve(parked.pending[0], resume=True))
        elif args.phase == "recover":
            await wait_for_expired_leases(runtime, patience=args.wait)
            output["recovered"] = [result_json(r) for r in await runtime.recover()]
        elif args.phase == "resolve":
            current = await runtime.get(await only_run_id(store))
            entry = current.pending[0]
            options: dict[str, Any] = {
                "result": {"result": "verified: refunded 250 on A1"},
                "retry": {"retry": True},
                "abort": {"abort": True, "reason": "refunded by hand"},
            }[args.resolve]
            output["result"] = result_json(
                await runtime.resolve_tool(entry.execution_key, resume=True, **options)
            )
        output["runs"] = await describe(runtime, store)
        output["commits"] = store.commits
    finally:
        await service.stop(grace_seconds=5)
        await store.close()
    return output


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="a SQLite file, or a database URL")
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--policy", choices=["manual", "safe", "idempotent"], default="manual")
    parser.add_argument("--kill-at", default=None)
    parser.add_argument("--kill-count", type=int, default=1)
    parser.add_argument(
        "--phase",
        choices=["start", "serve", "park", "approve", "recover", "resolve"],
        required=True,
    )
    parser.add_argument("--resolve", choices=["result", "retry", "abort"], default="result")
    parser.add_argument("--lease", type=float, default=0.5, help="lease seconds")
    parser.add_argument("--wait", type=float, default=15.0, help="max seconds to wait for leases")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if "://" not in arguments.db:
        arguments.db = str(Path(arguments.db).resolve())
    print(json.dumps(asyncio.run(main(arguments)), default=str), flush=True)
