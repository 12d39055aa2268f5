"""`signoff serve` as a real process on a real model: ``SIGNOFF_MODEL`` and a base URL.

The bundled examples (the default ``SIGNOFF_APP``) run on ``SIGNOFF_MODEL`` with the
provider's base URL at the fake; the fake plays a model that looks the order up, asks
for the refund and reports what the tool result says. A run is started and decided
through the JSON API. Without a key, every command that loads agents stops with exit 3.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from fake_llm import API_KEY, Call, FakeLLM, Protocol, Request, Turn
from testkit import ROOT, Served

pytestmark = pytest.mark.timeout(120)

TOKEN = "api-token-for-model-tests"
SPECS = {"openai": "openai:gpt-4.1-mini", "anthropic": "anthropic:claude-sonnet-4-5"}


def refunds_model(request: Request) -> Turn:
    """A model for the refunds example: look up, refund, then say what happened."""
    results = request.tool_results()
    if not results:
        return Turn.ask(Call("lookup_order", {"order_id": "A1001"}), text="Looking A1001 up.")
    last = results[-1]
    if '"charges": 2' in last:
        return Turn.ask(
            Call("refund", {"order_id": "A1001", "amount": 249.0}),
            text="A1001 was charged twice; refunding the duplicate 249.00.",
        )
    if last.startswith("Permission denied"):
        return Turn.say(f"I did not refund A1001. {last}.")
    return Turn.say(f"Refunded 249.00 on A1001 ({json.loads(last)['refund_id']}).")


def environment(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(("SIGNOFF_", "OPENAI_", "ANTHROPIC_"))
        and not k.upper().endswith("_PROXY")
    }
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_API_TOKENS": json.dumps([{"token": TOKEN, "actor": "U-ops"}]),
        }
    )
    env.update(settings)
    return env


class Api:
    def __init__(self, served: Served, session: ClientSession) -> None:
        self.served = served
        self.session = session

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(
            method,
            self.served.url + path,
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as response:
            return response.status, await response.json()

    async def run_in(self, run_id: str, *statuses: str) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            status, run = await self.call("GET", f"/api/runs/{run_id}")
            return run if status == 200 and run["status"] in statuses else None

        for _ in range(600):
            found = await check()
            if found:
                return found
            await asyncio.sleep(0.05)  # the fake answers the server in the meantime
        raise AssertionError(f"run {run_id} never reached {statuses}")


@pytest.fixture
async def session() -> AsyncIterator[ClientSession]:
    async with ClientSession(trust_env=False) as client:
        yield client


async def test_serve_runs_the_examples_on_the_configured_model(
    tmp_path: Path, fake: FakeLLM, provider: Protocol, session: ClientSession
) -> None:
    fake.responder = refunds_model
    key = "SIGNOFF_OPENAI" if provider == "openai" else "SIGNOFF_ANTHROPIC"
    env = environment(
        tmp_path,
        SIGNOFF_MODEL=SPECS[provider],
        **{f"{key}_API_KEY": API_KEY, f"{key}_BASE_URL": fake.base_url(provider)},
        SIGNOFF_MODEL_MAX_RETRIES="0",
        SIGNOFF_MODEL_PRICES=json.dumps({SPECS[provider]: {"input": 1.0, "output": 4.0}}),
    )
    served = await Served.start(env)
    try:
        api = Api(served, session)
        status, started = await api.call(
            "POST", "/api/runs", {"agent": "refunds", "input": "Order A1001 was charged twice."}
        )
        assert status == 202, started
        parked = await api.run_in(started["run_id"], "awaiting", "failed")
        assert parked["status"] == "awaiting", parked
        [pending] = parked["pending"]
        assert pending["tool"] == "refund"
        assert pending["arguments"] == {"order_id": "A1001", "amount": 249.0}
        assert pending["prompt"] == "A1001 was charged twice; refunding the duplicate 249.00."
        status, decided = await api.call(
            "POST",
            f"/api/tickets/{pending['ticket_id']}/decision",
            {"decision": "deny", "reason": "the customer was refunded by phone"},
        )
        assert status == 200, decided
        done = await api.run_in(started["run_id"], "done", "failed")
        assert done["status"] == "done", done
        assert done["text"] == (
            "I did not refund A1001. Permission denied: the customer was refunded by phone."
        )
        status, events = await api.call("GET", f"/api/runs/{started['run_id']}/events")
        assert status == 200
    finally:
        await served.stop()

    assert [r.protocol for r in fake.requests] == [provider] * 3
    assert {r.body["model"] for r in fake.requests} == {SPECS[provider].split(":", 1)[1]}
    assert "lookup_order" in fake.requests[0].tool_names
    assert fake.requests[-1].tool_results()[-1] == (
        "Permission denied: the customer was refunded by phone"
    )
    calls = [e for e in events["events"] if e["kind"] == "model_call"]
    assert [c["data"]["model"] for c in calls] == [SPECS[provider]] * 3
    assert all(c["data"]["cost"] > 0 for c in calls)

    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bot", "runs", "show", started["run_id"]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    cost = sum(c["data"]["cost"] for c in calls)
    [usage] = [line for line in shown.stdout.splitlines() if line.startswith("usage")]
    assert usage.endswith(f"; cost {cost:.6f}"), usage
    assert usage.startswith("usage      3 model calls, ")


@pytest.mark.parametrize("command", [["serve"], ["agents"], ["runs", "list"], ["tickets"]])
def test_a_missing_key_stops_every_command_that_loads_agents(
    tmp_path: Path, provider: Protocol, command: list[str]
) -> None:
    env = environment(tmp_path, SIGNOFF_MODEL=SPECS[provider])
    done = subprocess.run(
        [sys.executable, "-m", "bot", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    setting = "SIGNOFF_OPENAI_API_KEY" if provider == "openai" else "SIGNOFF_ANTHROPIC_API_KEY"
    fallback = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    [line] = done.stderr.strip().splitlines()
    assert line == (
        f"signoff: configuration: agent 'refunds': {setting} is not set (nor {fallback}), "
        f"and the model {SPECS[provider]} needs it"
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "serve.db").exists()  # stopped before touching the database


def test_the_sdk_key_variable_is_the_fallback(tmp_path: Path, provider: Protocol) -> None:
    fallback = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    env = environment(tmp_path, SIGNOFF_MODEL=SPECS[provider], **{fallback: "sk-from-the-sdk"})
    done = subprocess.run(
        [sys.executable, "-m", "bot", "agents"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"refunds (version 1, model {SPECS[provider]})" in done.stdout
