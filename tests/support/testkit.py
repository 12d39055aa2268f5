"""Helpers shared by the test suites: scripted agents and a `signoff serve` subprocess."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from runtime import ModelRequest, Runtime, ScriptedModel, final_reply, tool_call_reply
from runtime.domain.notifications import Delivery, read_notification
from runtime.services.delivery import Notifier, delivery_of
from runtime.store.base import Store
from runtime.store.records import OutboxRecord
from runtime.worker import Worker

ROOT = Path(__file__).resolve().parents[2]


class Crash(BaseException):
    """Stands in for the process dying at a checkpoint."""


def _this_run(request: ModelRequest) -> list[dict[str, Any]]:
    start = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
    return request.messages[start:]


def echo_model(*calls: tuple[str, dict[str, Any]], name: str = "scripted") -> ScriptedModel:
    """Turn 1 asks for `calls` in one batch; turn 2 reports every tool result it saw."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        messages = _this_run(request)
        if not any(m.get("role") == "assistant" for m in messages):
            return tool_call_reply(*calls, content="I need these tools for the task.")
        results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        return final_reply("Finished. " + " | ".join(results))

    return ScriptedModel(reply, name=name)


class RollbackPlan(BaseModel):
    """How to undo a deploy."""

    previous_version: str = Field(min_length=1, description="The version to go back to.")
    strategy: Literal["redeploy_previous", "disable_feature_flag"]
    max_minutes: int = Field(default=15, ge=1, le=240)
    notify_team: bool = False


class Served:
    """One `signoff serve` subprocess. Start it with `Served.start`."""

    def __init__(self, env: dict[str, str]) -> None:
        self.url = ""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    @classmethod
    async def start(cls, env: dict[str, str]) -> Served:
        """Start and wait until it serves; fakes in this event loop keep answering."""
        served = cls(env)
        try:
            await asyncio.wait_for(asyncio.to_thread(served._wait_ready), timeout=60)
        except BaseException:
            served.process.kill()
            served.process.wait(timeout=10)
            raise
        return served

    def _wait_ready(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("signoff serving at "):
                self.url = line.split("signoff serving at ", 1)[1].strip()
                return
        raise AssertionError("signoff serve did not start")

    def kill(self) -> None:
        """SIGKILL the process and check it died of it."""
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(timeout=10) == -signal.SIGKILL
        self._close()

    async def stop(self) -> None:
        """SIGTERM the process and wait for it to exit."""
        self.process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(self.process.wait, 30)
        self._close()

    def _close(self) -> None:
        if self.process.stdout is not None:
            self.process.stdout.close()


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Read a SQLite file directly (WAL readers never block the server)."""
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


async def until(check: Any, what: str, seconds: float = 20.0) -> Any:
    """Poll `check` until it is truthy; return its value."""
    for _ in range(int(seconds / 0.05)):
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"never saw {what}")


async def settled(
    runtime: Runtime,
    worker: Worker | None = None,
    *,
    outbox: bool = True,
    seconds: float = 10.0,
) -> None:
    """Wait until nothing is left to do: no stored click waits to be applied, no
    notification is due (when an outbox loop delivers them: `outbox`), no run is ready to
    claim or being driven.

    The positive signal to wait for before asserting that a refused request changed
    nothing (instead of sleeping and hoping the work would have happened by then).
    """
    deadline = asyncio.get_running_loop().time() + seconds
    calm = 0
    while calm < 2:  # twice in a row: work that was in flight has had its chance
        async with runtime.store.transaction() as tx:
            busy = bool(
                await tx.pending_received(1)
                or (outbox and await tx.due_outbox(runtime.clock.now(), 1))
                or await tx.claimable_runs(runtime.clock.now(), 1)
            )
        busy = busy or (worker is not None and worker.active > 0)
        calm = 0 if busy else calm + 1
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the runtime never settled (work kept coming)")
        await asyncio.sleep(0.02)


async def deliver_item(
    notifier: Notifier, item: OutboxRecord, store: Store | None = None
) -> dict[str, Any] | None:
    """Hand one stored outbox item to `notifier` as the outbox loop would.

    With `store`, the `Delivery` knows what the loop would look up (the ticket, the card
    an outcome edits); without, only where the item goes.
    """
    note = read_notification(item.kind, item.payload)
    if store is None:
        delivery = Delivery(item.outbox_id, dict(item.destination), item.attempts + 1)
    else:
        async with store.transaction() as tx:
            delivery = await delivery_of(tx, item, note)
    return await notifier.deliver(note, delivery)


def received_state(db: Path, clicks: int) -> str:
    """The state of the newest stored click, checking that every click was stored."""
    states = query(db, "SELECT state FROM received_commands ORDER BY received_at")
    assert len(states) == clicks, states  # stored before the platform got its answer
    return str(states[-1][0])


def ledger_entries(ledger: Path) -> list[Any]:
    """The side-effect ledger a test tool appends one JSON line to per execution."""
    return [json.loads(line) for line in ledger.read_text().splitlines()]


async def restart_and_check_applied_once(
    env: dict[str, str], db: Path, ledger: Path, runs: int
) -> None:
    """Restart `signoff serve`; the stored click must be applied and each tool run once."""
    again = await Served.start(env)
    try:
        await until(
            lambda: query(db, "SELECT count(*) FROM runs WHERE status='done'")[0][0] == runs,
            "the run finishing after the restart",
        )
    finally:
        await again.stop()
    assert query(db, "SELECT state FROM received_commands")[-1] == ("applied",)
    assert len(ledger_entries(ledger)) == runs  # each approved transfer ran exactly once
    decided = query(db, "SELECT count(*) FROM events WHERE kind='ticket_decided'")[0][0]
    assert decided == runs
