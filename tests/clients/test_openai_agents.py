"""The OpenAI Agents SDK adapter with the real SDK (a scripted model) and a real signoff."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Agent, FunctionTool, RunConfig, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from adapters.client import AsyncSignoffClient, Decision, derive_key
from adapters.client.openai_agents import KEY_PREFIX, FileStateStore, SignoffRunner
from tests.clients.conftest import QUICK_RETRY
from tests.clients.serving import AGENT_TOKEN, ROOT, Server

NO_TRACING = RunConfig(tracing_disabled=True)


@pytest.fixture
async def signoff(server: Server) -> AsyncIterator[AsyncSignoffClient]:
    async with (
        httpx.AsyncClient(trust_env=False) as http,
        AsyncSignoffClient(
            server.url, token=AGENT_TOKEN, retry=QUICK_RETRY, http_client=http
        ) as client,
    ):
        yield client


def refund_tool(ran: list[dict[str, Any]]) -> FunctionTool:
    @function_tool(needs_approval=True)
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        ran.append({"order": order, "amount": amount})
        return f"refunded {amount} on {order}"

    return refund


def billing(model: ScriptedModel, tools: Sequence[FunctionTool]) -> Agent[Any]:
    return Agent(name="billing", instructions="Refund orders.", model=model, tools=list(tools))


async def pending_refund(
    signoff: AsyncSignoffClient, run_id: str, call_id: str, arguments: dict[str, Any]
) -> Decision:
    """The approval the runner asks for (same key, same body): pending, with its ticket."""
    decision = await signoff.request_approval(
        agent="billing",
        tool="refund",
        arguments=arguments,
        session_id=run_id,
        idempotency_key=derive_key(KEY_PREFIX, run_id, call_id),
        wait=False,
    )
    assert decision.pending and decision.ticket_id is not None
    return decision


def outputs(model: ScriptedModel) -> list[str]:
    """The tool results the model was last shown."""
    last = model.last_call
    assert last is not None and isinstance(last.input, list)
    return [
        str(item["output"]) for item in last.input if item.get("type") == "function_call_output"
    ]


async def test_an_allowed_call_runs_and_the_run_continues(
    server: Server, signoff: AsyncSignoffClient
) -> None:
    run_id, ran = f"run-{uuid.uuid4().hex[:8]}", []
    model = ScriptedModel(
        [
            [function_call("refund", {"order": "A-1", "amount": 40}, call_id="call_1")],
            [assistant_message("Refunded.")],
        ]
    )
    runner = SignoffRunner(signoff, agent="billing", run_config=NO_TRACING)
    running = asyncio.create_task(
        runner.run(billing(model, [refund_tool(ran)]), "Refund A-1", run_id=run_id)
    )
    pending = await pending_refund(signoff, run_id, "call_1", {"order": "A-1", "amount": 40})
    await asyncio.to_thread(server.decide, pending.ticket_id or "", {"decision": "allow"})

    result = await running

    assert result.final_output == "Refunded."
    assert ran == [{"order": "A-1", "amount": 40}]
    assert outputs(model) == ["refunded 40 on A-1"]
    model.assert_complete()


async def test_a_denied_call_does_not_run_and_the_model_reads_why(
    server: Server, signoff: AsyncSignoffClient
) -> None:
    run_id, ran = f"run-{uuid.uuid4().hex[:8]}", []
    model = ScriptedModel(
        [
            [function_call("refund", {"order": "A-1", "amount": 40}, call_id="call_1")],
            [assistant_message("I could not refund it.")],
        ]
    )
    runner = SignoffRunner(signoff, agent="billing", run_config=NO_TRACING)
    running = asyncio.create_task(
        runner.run(billing(model, [refund_tool(ran)]), "Refund A-1", run_id=run_id)
    )
    pending = await pending_refund(signoff, run_id, "call_1", {"order": "A-1", "amount": 40})
    await asyncio.to_thread(
        server.decide, pending.ticket_id or "", {"decision": "deny", "reason": "already refunded"}
    )

    result = await running

    assert result.final_output == "I could not refund it."
    assert ran == []
    [told] = outputs(model)
    assert "denied" in told and "already refunded" in told


async def test_an_edited_call_runs_once_with_the_approved_arguments_without_a_second_card(
    server: Server, signoff: AsyncSignoffClient
) -> None:
    run_id, ran = f"run-{uuid.uuid4().hex[:8]}", []
    model = ScriptedModel(
        [
            [function_call("refund", {"order": "A-1", "amount": 40}, call_id="call_1")],
            [function_call("refund", {"amount": 10, "order": "A-1"}, call_id="call_2")],
            [assistant_message("Refunded 10.")],
        ]
    )
    runner = SignoffRunner(signoff, agent="billing", run_config=NO_TRACING)
    running = asyncio.create_task(
        runner.run(billing(model, [refund_tool(ran)]), "Refund A-1", run_id=run_id)
    )
    pending = await pending_refund(signoff, run_id, "call_1", {"order": "A-1", "amount": 40})
    await asyncio.to_thread(
        server.decide, pending.ticket_id or "", {"decision": "allow", "args": {"amount": 10}}
    )

    result = await running

    assert result.final_output == "Refunded 10."
    assert ran == [{"order": "A-1", "amount": 10}]
    told = model.calls[1].input
    assert isinstance(told, list)
    [edited] = [i["output"] for i in told if i.get("type") == "function_call_output"]
    assert '"amount": 10' in edited and "did not run" in edited
    status, listed = await asyncio.to_thread(
        server.call, "GET", f"/api/approvals?session_id={run_id}"
    )
    assert status == 200, listed
    assert [a["approval_id"] for a in listed["approvals"]] == [pending.approval_id]


async def test_a_call_a_rule_allows_runs_without_a_ticket(signoff: AsyncSignoffClient) -> None:
    looked: list[str] = []

    @function_tool(needs_approval=True)
    def lookup_order(order: str) -> str:
        """Look an order up."""
        looked.append(order)
        return f"{order}: paid"

    model = ScriptedModel(
        [
            [function_call("lookup_order", {"order": "A-1"}, call_id="call_1")],
            [assistant_message("It is paid.")],
        ]
    )
    runner = SignoffRunner(signoff, agent="billing", run_config=NO_TRACING)
    agent = Agent(name="billing", instructions="x", model=model, tools=[lookup_order])
    result = await runner.run(agent, "Is A-1 paid?", run_id=f"run-{uuid.uuid4().hex[:8]}")
    assert result.final_output == "It is paid."
    assert looked == ["A-1"]


def test_file_state_store_keeps_states_by_run(tmp_path: Path) -> None:
    store = FileStateStore(tmp_path / "states")
    assert store.load("conv/1") is None
    store.save("conv/1", "one")
    store.save("conv/2", "two")
    store.save("conv/1", "uno")
    assert (store.load("conv/1"), store.load("conv/2")) == ("uno", "two")
    store.delete("conv/1")
    store.delete("conv/1")
    assert store.load("conv/1") is None
    assert len(list((tmp_path / "states").iterdir())) == 1


class AgentProcess:
    """`tests.clients.openai_agent_process` as a subprocess, its lines read as they come."""

    def __init__(self, url: str, state: Path, ledger: Path) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.clients.openai_agent_process",
                url,
                str(state),
                str(ledger),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def line(self, prefix: str) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(prefix + " "):
                return line[len(prefix) + 1 :].strip()
        _out, err = self.process.communicate(timeout=30)
        raise AssertionError(f"the agent process never said {prefix!r}: {err[-3000:]}")

    def kill(self) -> None:
        self.process.kill()
        self.finish()

    def finish(self) -> int:
        self.process.communicate(timeout=60)
        return self.process.returncode


def test_a_restarted_agent_process_resumes_the_same_run_without_a_second_card(
    server: Server, tmp_path: Path
) -> None:
    state, ledger = tmp_path / "state", tmp_path / "ledger.jsonl"
    first = AgentProcess(server.url, state, ledger)
    asked = json.loads(first.line("asked"))
    assert asked["status"] == "pending"
    first.kill()
    assert not ledger.exists()
    assert len(list(state.iterdir())) == 1

    server.decide(asked["ticket_id"], {"decision": "allow"})

    second = AgentProcess(server.url, state, ledger)
    again = json.loads(second.line("asked"))
    assert second.line("final") == "Refund done."
    assert second.finish() == 0
    assert again["approval_id"] == asked["approval_id"]
    assert again["status"] == "allowed"
    assert [json.loads(line) for line in ledger.read_text().splitlines()] == [
        {"order": "A-1", "amount": 40}
    ]
    assert list(state.iterdir()) == []
    status, listed = server.call("GET", "/api/approvals?session_id=conv-restart")
    assert status == 200, listed
    assert [a["approval_id"] for a in listed["approvals"]] == [asked["approval_id"]]


def test_the_docs_example_runs_once_its_refund_is_allowed(server: Server, tmp_path: Path) -> None:
    text = (ROOT / "docs" / "openai-agents.md").read_text(encoding="utf-8")
    [code] = re.findall(r"^```python\n(# refund_agent\.py\n.*?)^```$", text, re.S | re.M)
    (tmp_path / "refund_agent.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update({"PYTHONPATH": str(ROOT), "SIGNOFF_URL": server.url, "SIGNOFF_TOKEN": AGENT_TOKEN})
    process = subprocess.Popen(
        [sys.executable, "refund_agent.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    waiting = process.stdout.readline()
    match = re.fullmatch(r"waiting for sign-off: refund \(ticket (\S+)\)\n", waiting)
    assert match, waiting + (process.stderr.read() if process.stderr else "")
    server.decide(match.group(1), {"decision": "allow"})
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out == "The refund is done.\n"
    assert (tmp_path / "refunds.txt").read_text() == "A-1 40\n"
    assert list((tmp_path / "runs").iterdir()) == []
