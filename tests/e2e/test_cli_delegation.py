"""``signoff`` on a run that delegated to a sub-agent (real subprocesses, a SQLite file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

START = """
import asyncio, json
from bot.settings import load_settings
from bot.wiring import build_runtime

async def main():
    runtime, store = await build_runtime(load_settings())
    try:
        r = await runtime.start("support", "Order A1001 was charged twice.", requester="U1")
        print(json.dumps({"run": r.run_id, "child": r.pending[0].run_id}))
    finally:
        await store.close()

asyncio.run(main())
"""


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_runs_show_names_the_parent_and_the_sub_agents(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        SIGNOFF_APP="examples.support:agents",
        PYTHONPATH=str(REPO),
    )
    started = _run([sys.executable, "-c", START], env)
    assert started.returncode == 0, started.stderr
    ids = json.loads(started.stdout)

    tickets = _run([sys.executable, "-m", "bot", "tickets", "--json"], env)
    assert tickets.returncode == 0, tickets.stderr
    (ticket,) = json.loads(tickets.stdout)  # the refund's; the parent's wait has no ticket
    assert ticket["run_id"] == ids["child"]

    approved = _run([sys.executable, "-m", "bot", "approve", ticket["ticket_id"]], env)
    assert approved.returncode == 0, approved.stderr

    parent = _run([sys.executable, "-m", "bot", "runs", "show", ids["run"]], env)
    assert parent.returncode == 0, parent.stderr
    assert "status     done" in parent.stdout
    assert "Sorted: Refunded 249.00 on order A1001" in parent.stdout
    assert f"sub-agents {ids['child']} refunds refund-A1001 done" in parent.stdout
    assert "sub-usage  3 model calls" in parent.stdout

    child = _run([sys.executable, "-m", "bot", "runs", "show", ids["child"]], env)
    assert child.returncode == 0, child.stderr
    assert f"parent     {ids['run']} (task refund-A1001; support > refunds)" in child.stdout
