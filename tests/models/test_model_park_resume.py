"""A run on a reasoning model parks, its process is killed, another process decides and
resumes it: the model's reasoning goes back unchanged.

The first worker (``park_worker.py``) runs turn 1 (a ``transfer`` that needs approval,
asked with reasoning) and parks; the test SIGKILLs it. A second process approves the
ticket and resumes the run from the database alone. The fake provider, which outlives
both, checks that the second request gives back the reasoning exactly as issued
(Responses: the reasoning item with its encrypted content; Anthropic: the signed
thinking and redacted_thinking blocks opening the tool_use turn).
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
WORKER = Path(__file__).with_name("park_worker.py")
REASON = "The invoice says 250.00 to ACME-1."


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


@pytest.mark.parametrize("provider", ["responses", "anthropic"])
async def test_park_kill_decide_elsewhere_and_resume_with_the_reasoning(
    tmp_path: Path, fake: FakeLLM, provider: Protocol
) -> None:
    fake.script(
        Turn.ask(
            Call("transfer", {"account": "ACME-1", "amount": 250.0}),
            thinking=REASON,
            redacted=True,
        ),
        Turn.say("Paid 250.00 to ACME-1."),
    )
    first = await worker(tmp_path, fake, provider, "start")
    assert first.stdout is not None
    line = await asyncio.wait_for(first.stdout.readline(), 60)
    if not line:
        _, err = await first.communicate()
        raise AssertionError(err.decode())
    parked: dict[str, Any] = json.loads(line)
    assert parked["status"] == "awaiting" and parked["prompt"] == REASON
    first.send_signal(signal.SIGKILL)
    await first.communicate()
    assert first.returncode == -signal.SIGKILL

    second = await worker(tmp_path, fake, provider, "decide")
    out, err = await second.communicate()
    assert second.returncode == 0, err.decode()
    done: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    assert done == {"run_id": parked["run_id"], "status": "done", "text": "Paid 250.00 to ACME-1."}
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 1

    asked, resumed = fake.requests
    assert asked.problem is None and resumed.problem is None
    if provider == "responses":
        [item] = resumed.items("reasoning")
        assert item == fake.reasoning_items["rs_1"] and item["encrypted_content"]
        assert [i.get("type", "message") for i in resumed.messages] == [
            "message",
            "reasoning",
            "function_call",
            "function_call_output",
        ]
    else:
        [use] = resumed.blocks("tool_use")
        issued = fake.thinking_of_use[use["id"]]
        assert [b["type"] for b in issued] == ["thinking", "redacted_thinking"]
        [turn] = [m["content"] for m in resumed.messages if m["role"] == "assistant"]
        assert turn[:2] == issued and turn[2]["type"] == "tool_use"
    assert resumed.tool_results() == ['{"transferred": 250.0, "to": "ACME-1"}']
