"""`AnthropicModel` with extended thinking on the real ``anthropic`` SDK against the fake.

The answer's ``thinking`` and ``redacted_thinking`` blocks are kept with the transcript
and open their assistant turn again, unchanged, on every later request (the fake checks
their signatures and refuses a tool_use turn without exactly them, as the API does); the
approval card shows the thinking text, never a signature or redacted data.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import Call, FakeLLM, Turn

from adapters.models import AnthropicModel
from adapters.models.anthropic_transcript import from_message, to_messages
from runtime import (
    Agent,
    ConfigurationError,
    ModelError,
    ModelErrorKind,
    ModelRequest,
    RunStatus,
    Runtime,
    tool,
)
from runtime.store.sql import SQLStore

ModelFactory = Callable[..., Any]  # the `models` fixture

pytestmark = pytest.mark.timeout(60)

THINKING = {"thinking_budget": 2048, "max_tokens": 8192}


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


async def test_thinking_blocks_go_back_unchanged_across_tool_use_and_a_park(
    fake: FakeLLM, models: ModelFactory, store: SQLStore
) -> None:
    ledger: list[dict[str, Any]] = []
    runtime = Runtime(store, [bank(models("anthropic", **THINKING), ledger)])
    fake.script(
        Turn.ask(Call("balance", {"account": "ACME-1"}), thinking="Check the balance first."),
        Turn.ask(
            Call("transfer", {"account": "ACME-1", "amount": 250.0}),
            thinking="The invoice says 250.00 to ACME-1; the balance covers it.",
            redacted=True,
        ),
        Turn.say("Paid 250.00 to ACME-1.", thinking="Done."),
    )
    parked = await runtime.start("bank", "Pay the ACME invoice.", requester="U1")
    assert parked.status is RunStatus.AWAITING
    [entry] = parked.pending
    # The card's reason is the thinking text: no signature, no redacted data.
    assert entry.prompt == "The invoice says 250.00 to ACME-1; the balance covers it."

    done = await runtime.approve(entry, actor="U1", resume=True)
    assert done.status is RunStatus.DONE and done.text == "Paid 250.00 to ACME-1."
    assert ledger == [{"account": "ACME-1", "amount": 250.0}]
    assert all(r.problem is None for r in fake.requests)

    first, second, third = fake.requests
    assert first.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert first.body["max_tokens"] == 8192 and "temperature" not in first.body
    issued = [
        fake.thinking_of_use[u["id"]] for u in third.blocks("tool_use")
    ]  # what each tool_use turn was given
    turns = [m["content"] for m in third.messages if m["role"] == "assistant"]
    assert [t[: len(blocks)] for t, blocks in zip(turns, issued, strict=True)] == issued
    [redacted] = third.blocks("redacted_thinking")
    assert redacted == issued[1][1]
    assert [b["thinking"] for b in third.blocks("thinking")] == [
        "Check the balance first.",
        "The invoice says 250.00 to ACME-1; the balance covers it.",
    ]
    assert second.blocks("thinking") == issued[0][:1]

    events = await runtime.events(done.run_id)
    signatures = [b["signature"] for b in third.blocks("thinking")] + [redacted["data"]]
    assert "model_call" in {e["kind"] for e in events}
    for event in events:  # the flight recorder shows no signature or redacted data
        assert not any(s in str(event["data"]) for s in signatures)


async def test_the_fake_refuses_a_tool_use_turn_without_its_thinking(
    fake: FakeLLM, models: ModelFactory
) -> None:
    """What the API does with a lost or changed thinking block (so the test above can
    fail)."""
    model = models("anthropic", **THINKING)
    fake.script(Turn.ask(Call("balance", {"account": "A"}), thinking="Check it."))
    opening = [{"role": "user", "content": "Balance of A?"}]
    answer = await model.complete(ModelRequest(model=model.name, messages=opening, tools=[]))
    result = {"role": "tool", "tool_call_id": answer.tool_calls[0].id, "content": "1000"}

    lost = answer.as_message()
    del lost["provider_state"]
    assert answer.provider_state is not None
    [block] = answer.provider_state["blocks"]
    changed = answer.as_message()
    changed["provider_state"] = {
        "provider": "anthropic",
        "blocks": [{**block, "thinking": "Something else."}],
    }
    for message, said in ((lost, "Expected `thinking`"), (changed, "Invalid `signature`")):
        with pytest.raises(ModelError) as caught:
            await model.complete(
                ModelRequest(model=model.name, messages=[*opening, message, result], tools=[])
            )
        assert caught.value.kind is ModelErrorKind.BAD_REQUEST
        assert said in str(caught.value)


def test_the_transcript_keeps_thinking_blocks_and_opens_their_turn_with_them() -> None:
    answer = from_message(
        {
            "content": [
                {"type": "thinking", "thinking": "Why: the invoice.", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "text", "text": "Paying it."},
                {"type": "tool_use", "id": "toolu_1", "name": "pay", "input": {"n": 1}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )
    assert answer.text == "Paying it." and answer.reasoning == "Why: the invoice."
    assert answer.stated_reason == "Paying it."
    assert answer.provider_state == {
        "provider": "anthropic",
        "blocks": [
            {"type": "thinking", "thinking": "Why: the invoice.", "signature": "sig=="},
            {"type": "redacted_thinking", "data": "opaque=="},
        ],
    }
    message = answer.as_message()
    _, turns = to_messages([{"role": "user", "content": "Pay."}, message])
    assert [b["type"] for b in turns[1]["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
    ]
    # Another provider's state is not Anthropic's to send.
    message["provider_state"] = {"provider": "openai-responses", "items": []}
    _, turns = to_messages([{"role": "user", "content": "Pay."}, message])
    assert [b["type"] for b in turns[1]["content"]] == ["text", "tool_use"]


def test_a_thinking_block_without_its_signature_is_unreadable() -> None:
    with pytest.raises(KeyError):
        from_message(
            {"content": [{"type": "thinking", "thinking": "x"}], "stop_reason": "end_turn"}
        )


def test_thinking_budgets_the_api_refuses_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="at least 1024"):
        AnthropicModel("claude-test", api_key="k", thinking_budget=512)
    with pytest.raises(ConfigurationError, match="below max_tokens"):
        AnthropicModel("claude-test", api_key="k", thinking_budget=4096)
    with pytest.raises(ConfigurationError, match="takes no temperature"):
        AnthropicModel(
            "claude-test", api_key="k", thinking_budget=2048, max_tokens=8192, temperature=0.2
        )


def test_interleaved_thinking_goes_back_between_the_calls_it_came_between() -> None:
    content = [
        {"type": "thinking", "thinking": "First the balance.", "signature": "s1"},
        {"type": "tool_use", "id": "toolu_1", "name": "balance", "input": {}},
        {"type": "thinking", "thinking": "Then pay.", "signature": "s2"},
        {"type": "redacted_thinking", "data": "r1"},
        {"type": "tool_use", "id": "toolu_2", "name": "pay", "input": {"n": 1}},
    ]
    answer = from_message({"content": content, "stop_reason": "tool_use", "usage": {}})
    assert answer.provider_state is not None
    assert answer.provider_state["after"] == [None, "toolu_1", "toolu_1"]
    assert answer.reasoning == "First the balance.\n\nThen pay."
    _, turns = to_messages([{"role": "user", "content": "Pay."}, answer.as_message()])
    assert turns[1]["content"] == content
