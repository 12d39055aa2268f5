"""SIGKILL during a model call on a real SDK model, then recovery in a fresh process.

The worker (``model_worker.py``) runs turn 1 (a ``lookup`` tool call, run and recorded),
then asks the fake provider for turn 2, which the fake holds. The test kills the worker
once the fake has that request, lets its lease expire in a second process and recovers:
turn 2 is asked again as a new attempt (same transcript), the tool is not run again, the
run finishes, and its usage is marked incomplete (the killed call may have been charged).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_llm import API_KEY, Call, FakeLLM, Protocol, Turn

pytestmark = [pytest.mark.crash, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("model_worker.py")


async def worker(
    tmp_path: Path, fake: FakeLLM, provider: Protocol, phase: str
) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
    env["PYTHONPATH"] = str(ROOT)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        "--db",
        str(tmp_path / "signoff.db"),
        "--ledger",
        str(tmp_path / "ledger.jsonl"),
        "--provider",
        provider,
        "--base-url",
        fake.base_url(provider),
        "--api-key",
        API_KEY,
        "--phase",
        phase,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_sigkill_during_a_model_call_then_recovery(
    tmp_path: Path, fake: FakeLLM, provider: Protocol
) -> None:
    fake.script(
        Turn.ask(Call("lookup", {"order_id": "A1"}), prompt_tokens=100, completion_tokens=10),
        Turn(hold=True),  # turn 2: the process dies while waiting for it
        Turn.say("Order A1 totals 249.00.", prompt_tokens=130, completion_tokens=12),
    )
    first = await worker(tmp_path, fake, provider, "start")
    await fake.wait_requests(2, seconds=30)  # turn 2 is in flight
    first.send_signal(signal.SIGKILL)
    await first.communicate()
    assert first.returncode == -signal.SIGKILL

    second = await worker(tmp_path, fake, provider, "recover")
    out, err = await second.communicate()
    assert second.returncode == 0, err.decode()
    run: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])

    assert run["status"] == "done" and run["text"] == "Order A1 totals 249.00."
    assert run["usage_incomplete"] is True
    # The killed call's usage is unknown; the two answered calls are counted.
    assert (run["turns"], run["prompt_tokens"], run["completion_tokens"]) == (2, 230, 22)
    kinds = [e["kind"] for e in run["events"]]
    assert kinds.count("tool_dispatched") == 1 and kinds.count("run_done") == 1
    [interrupted] = [e["data"] for e in run["events"] if e["kind"] == "model_interrupted"]
    assert interrupted == {"turn": 2, "attempt": 2}
    calls = [e["data"] for e in run["events"] if e["kind"] == "model_call"]
    assert [(c["turn"], c["attempt"]) for c in calls] == [(1, 1), (2, 2)]

    ledger = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert len(ledger) == 1  # the recorded tool result was reused, not run again
    first_turn, killed, retried = fake.requests
    assert killed.body == retried.body  # the same turn asked again
    assert retried.tool_results() == ['{"order_id": "A1", "total": 249.0}']
    assert first_turn.tool_results() == []
