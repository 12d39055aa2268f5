"""A crash-test worker for delegation: a parent agent that hands a refund to a sub-agent.

Run as a real subprocess by ``tests/crash/test_crash_delegation.py``::

    python tests/crash/delegation_worker.py --db PATH|URL --ledger PATH \
        --phase start|approve|recover [--kill-at POINT] [--kill-count N]

``ops`` (the parent) calls ``delegate_to_billing`` with the task key ``refund-A1`` on its
first turn and answers ``ops: <the tool result>`` on its second. ``billing`` (the child)
calls its ``ask`` tool ``refund`` (replay policy ``manual``) and then answers.

Phases (each meant to run in a fresh process):

* ``start``   start an ``ops`` run (it parks on billing's request), then approve that
  request with ``resume=True``;
* ``approve`` approve the one pending entry of the ``ops`` run with ``resume=True``;
* ``recover`` wait until no ``running`` run holds a live lease, then ``Runtime.recover()``.

``--kill-at`` names a runtime checkpoint where the process SIGKILLs itself (the handover's
``child_created``, ``child_parked``, ``parent_parked``, ``child_finished``,
``parent_resuming``, or any other such as ``decision_committed``), the N-th time it is
reached. The ledger gets one fsynced JSON line per real execution of ``refund`` and per
model call. A surviving process prints one JSON line: every run in the database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker import Killer, append_ledger, wait_for_expired_leases

from runtime import (
    Agent,
    ModelRequest,
    Runtime,
    ScriptedModel,
    current_tool_context,
    delegate_tool_name,
    final_reply,
    tool_call_reply,
)
from runtime.store.sql import SQLStore

REQUESTER = "U1"
TASK_KEY = "refund-A1"


def _results(request: ModelRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


def build(ledger: Path, phase: str) -> Agent:
    """The parent agent, listing its sub-agent."""

    def billing_reply(request: ModelRequest) -> dict[str, Any]:
        results = _results(request)
        append_ledger(ledger, {"kind": "model", "agent": "billing", "turn": len(results)})
        if not results:
            return tool_call_reply(("refund", {"order": "A1", "amount": 250}))
        return final_reply(f"billing: {results[0]}")

    billing = Agent("billing", "Refund orders.", ScriptedModel(billing_reply))

    @billing.tool(permission="ask", replay_policy="manual")
    async def refund(order: str, amount: float) -> str:
        ctx = current_tool_context()
        append_ledger(
            ledger,
            {
                "kind": "tool",
                "run_id": ctx.run_id,
                "execution_key": ctx.execution_key,
                "pid": os.getpid(),
                "phase": phase,
            },
        )
        return f"refunded {amount} on {order}"

    def ops_reply(request: ModelRequest) -> dict[str, Any]:
        results = _results(request)
        append_ledger(ledger, {"kind": "model", "agent": "ops", "turn": len(results)})
        if not results:
            arguments = {"task_key": TASK_KEY, "task": "refund order A1 (250)"}
            return tool_call_reply((delegate_tool_name("billing"), arguments))
        return final_reply(f"ops: {results[0]}")

    return Agent("ops", "Operate.", ScriptedModel(ops_reply), subagents=[billing])


async def top_run_id(store: SQLStore) -> str:
    async with store.transaction() as tx:
        runs = [r for r in await tx.list_runs(limit=100) if r.parent_run_id is None]
    if len(runs) != 1:
        raise SystemExit(f"expected one top-level run, found {len(runs)}")
    return runs[0].run_id


async def describe(runtime: Runtime, store: SQLStore) -> list[dict[str, Any]]:
    async with store.transaction() as tx:
        runs = await tx.list_runs(limit=100)
    described = []
    for run in sorted(runs, key=lambda r: r.depth):
        result = await runtime.get(run.run_id)
        async with store.transaction() as tx:
            calls = await tx.calls_for_run(run.run_id)
            tickets = await tx.tickets_for_run(run.run_id)
        described.append(
            {
                "run_id": run.run_id,
                "agent": run.agent,
                "parent_run_id": run.parent_run_id,
                "task_key": run.task_key,
                "status": str(result.status),
                "text": result.text,
                "turns": result.turns,
                "pending": [p.run_id for p in result.pending],
                "children_runs": result.children_totals.runs,
                "calls": [{"tool": c.tool, "state": str(c.state)} for c in calls],
                "tickets": [{"kind": t.target.kind, "status": str(t.status)} for t in tickets],
                "events": [e["kind"] for e in await runtime.events(run.run_id)],
            }
        )
    return described


async def main(args: argparse.Namespace) -> dict[str, Any]:
    ledger = Path(args.ledger)
    killer = Killer(args.kill_at, args.kill_count)
    url = args.db if "://" in args.db else f"sqlite+aiosqlite:///{args.db}"
    store = SQLStore.from_url(url, busy_timeout_ms=750, synchronous="full")
    await store.migrate()
    runtime = Runtime(
        store, [build(ledger, args.phase)], lease_seconds=args.lease, checkpoint=killer.checkpoint
    )
    output: dict[str, Any] = {"phase": args.phase}
    try:
        if args.phase == "start":
            parked = await runtime.start("ops", "refund order A1", requester=REQUESTER)
            await runtime.approve(parked.pending[0], resume=True)
        elif args.phase == "approve":
            parked = await runtime.get(await top_run_id(store))
            await runtime.approve(parked.pending[0], resume=True)
        elif args.phase == "recover":
            await wait_for_expired_leases(runtime, patience=args.wait)
            await runtime.recover()
        output["runs"] = await describe(runtime, store)
    finally:
        await runtime.aclose()
        await store.close()
    return output


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--phase", choices=["start", "approve", "recover"], required=True)
    parser.add_argument("--kill-at", default=None)
    parser.add_argument("--kill-count", type=int, default=1)
    parser.add_argument("--lease", type=float, default=0.5)
    parser.add_argument("--wait", type=float, default=15.0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if "://" not in arguments.db:
        arguments.db = str(Path(arguments.db).resolve())
    print(json.dumps(asyncio.run(main(arguments)), default=str), flush=True)
