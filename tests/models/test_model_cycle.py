"""The approval cycle on real SDK models against the fake provider, through the runtime API.

Each test runs once per provider: the model asks for an ``ask`` tool, the run parks on a
ticket (with the model's stated reason), a decision resumes it, and what the model gets
next is checked on the request the fake received.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import Call, FakeLLM, Protocol, Turn

from runtime import Agent, RunStatus, Runtime, tool, usage_of_events
from runtime.store.sql import SQLStore

ModelFactory = Callable[..., Any]  # the `models` fixture

pytestmark = pytest.mark.timeout(60)


def bank(model: Any, ledger: list[dict[str, Any]]) -> Agent:
    @tool(permission="ask")
    async def transfer(account: str, amount: float) -> dict[str, Any]:
        """Move money to an account."""
        ledger.append({"account": account, "amount": amount})
        return {"transferred": amount, "to": account}

    @tool(permission="allow", replay_policy="safe")
    async def balance(account: str) -> dict[str, Any]:
        """Read an account's balance."""
        return {"account": account, "balance": 1000.0}

    return Agent("bank", "You move money carefully.", model, tools=[transfer, balance])


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    sql = SQLStore.sqlite(tmp_path / "signoff.db")
    await sql.migrate()
    try:
        yield sql
    finally:
        await sql.close()


async def test_approve_resumes_and_the_model_sees_the_result(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    ledger: list[dict[str, Any]] = []
    runtime = Runtime(store, [bank(models(provider), ledger)])
    fake.script(
        Turn.ask(
            Call("transfer", {"account": "ACME-1", "amount": 250.0}),
            text="The invoice says 250.00 to ACME-1.",
            prompt_tokens=100,
            completion_tokens=20,
        ),
        Turn.say("Paid 250.00 to ACME-1.", prompt_tokens=150, completion_tokens=10),
    )

    parked = await runtime.start("bank", "Pay the ACME invoice.", requester="U1")
    assert parked.status is RunStatus.AWAITING
    [entry] = parked.pending
    assert entry.call.name == "transfer"
    assert entry.call.arguments == {"account": "ACME-1", "amount": 250.0}
    assert entry.prompt == "The invoice says 250.00 to ACME-1."  # the model's reason
    assert (parked.prompt_tokens, parked.completion_tokens) == (100, 20)
    assert ledger == []

    done = await runtime.approve(entry, actor="U1", resume=True)
    assert done.status is RunStatus.DONE
    assert done.text == "Paid 250.00 to ACME-1."
    assert ledger == [{"account": "ACME-1", "amount": 250.0}]
    assert (done.turns, done.prompt_tokens, done.completion_tokens) == (2, 250, 30)

    first, second = fake.requests
    assert first.system() == "You move money carefully."
    assert sorted(first.tool_names) == ["balance", "transfer"]
    assert first.user_text() == "Pay the ACME invoice."
    assert second.tool_results() == ['{"transferred": 250.0, "to": "ACME-1"}']
    assert all(r.problem is None for r in fake.requests)


async def test_deny_with_a_reason_reaches_the_model(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    ledger: list[dict[str, Any]] = []
    runtime = Runtime(store, [bank(models(provider), ledger)])
    fake.script(
        Turn.ask(Call("transfer", {"account": "ACME-1", "amount": 9000.0})),
        Turn.say("I did not transfer anything: the transfer was denied."),
    )
    parked = await runtime.start("bank", "Pay it all.", requester="U1")
    done = await runtime.decline(
        parked.pending[0], actor="U1", reason="over the monthly budget", resume=True
    )
    assert done.status is RunStatus.DONE
    assert ledger == []
    assert fake.requests[-1].tool_results() == ["Permission denied: over the monthly budget"]


async def test_parallel_tool_calls_take_one_decision_each(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    ledger: list[dict[str, Any]] = []
    runtime = Runtime(store, [bank(models(provider), ledger)])
    fake.script(
        Turn.ask(
            Call("balance", {"account": "ACME-1"}),
            Call("transfer", {"account": "ACME-1", "amount": 10.0}),
            Call("transfer", {"account": "GLOBEX-2", "amount": 20.0}),
            Call("transfer", {"account": "INITECH-3", "amount": 30.0}),
            text="Three invoices are due.",
        ),
        Turn.say("Paid two of three."),
    )
    parked = await runtime.start("bank", "Pay the three invoices.", requester="U1")
    assert parked.status is RunStatus.AWAITING
    assert [p.call.arguments["account"] for p in parked.pending] == [
        "ACME-1",
        "GLOBEX-2",
        "INITECH-3",
    ]
    assert len({p.ticket_id for p in parked.pending}) == 3
    first, second, third = parked.pending

    still = await runtime.approve(first, actor="U1", resume=True)
    assert still.status is RunStatus.AWAITING and len(still.pending) == 2
    still = await runtime.decline(second, actor="U1", reason="not ours", resume=True)
    assert still.status is RunStatus.AWAITING and len(still.pending) == 1
    assert len(fake.requests) == 1  # the model waits for the whole batch
    done = await runtime.approve(third, actor="U1", resume=True)
    assert done.status is RunStatus.DONE

    assert ledger == [
        {"account": "ACME-1", "amount": 10.0},
        {"account": "INITECH-3", "amount": 30.0},
    ]
    assert fake.requests[-1].tool_results() == [
        '{"account": "ACME-1", "balance": 1000.0}',
        '{"transferred": 10.0, "to": "ACME-1"}',
        "Permission denied: not ours",
        '{"transferred": 30.0, "to": "INITECH-3"}',
    ]
    assert all(r.problem is None for r in fake.requests)


async def test_usage_grows_across_resumes_with_cached_tokens_and_cost(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    from adapters.models import Price

    price = Price(input=2.0, output=8.0, cached_input=0.5, cache_write=2.5)
    runtime = Runtime(store, [bank(models(provider, price=price), [])])
    fake.script(
        Turn.ask(
            Call("transfer", {"account": "A", "amount": 1.0}),
            prompt_tokens=1000,
            completion_tokens=100,
            cache_write_tokens=800,
        ),
        Turn.ask(
            Call("transfer", {"account": "B", "amount": 2.0}),
            prompt_tokens=1200,
            completion_tokens=50,
            cached_tokens=800,
        ),
        Turn.say("Both paid.", prompt_tokens=1300, completion_tokens=10, cached_tokens=1000),
    )
    run = await runtime.start("bank", "Pay A, then B.", requester="U1")
    seen = [(run.prompt_tokens, run.completion_tokens)]
    run = await runtime.approve(run.pending[0], actor="U1", resume=True)
    seen.append((run.prompt_tokens, run.completion_tokens))
    run = await runtime.approve(run.pending[0], actor="U1", resume=True)
    seen.append((run.prompt_tokens, run.completion_tokens))
    assert run.status is RunStatus.DONE
    assert seen == [(1000, 100), (2200, 150), (3500, 160)]
    assert not run.usage_incomplete

    events = await runtime.events(run.run_id)
    calls = [e["data"] for e in events if e["kind"] == "model_call"]
    # Only Anthropic reports cache writes (billed at their own price).
    written = 800 if provider == "anthropic" else 0
    assert [(c["cached_tokens"], c["cache_write_tokens"]) for c in calls] == [
        (0, written),
        (800, 0),
        (1000, 0),
    ]
    # Per million: (1000-written)*2 + written*2.5 + 100*8; 400*2 + 800*0.5 + 50*8;
    # 300*2 + 1000*0.5 + 10*8.
    first = 0.0032 if provider == "anthropic" else 0.0028
    assert [c["cost"] for c in calls] == [first, 0.0016, 0.00118]
    total = usage_of_events(events)
    assert (total.prompt_tokens, total.completion_tokens, total.cached_tokens) == (3500, 160, 1800)
    assert total.cost == pytest.approx(first + 0.0016 + 0.00118)
    assert {c["model"] for c in calls} == {
        "openai:gpt-test" if provider == "openai" else "anthropic:claude-test"
    }
