"""`OpenAIResponsesModel` on the real ``openai`` SDK against the fake ``/v1/responses``.

The approval cycle with a reasoning model: the run parks on a ticket whose reason is the
reasoning summary, a decision resumes it, and the next request gives the reasoning item
back unchanged (the fake refuses a function call without it, as the API does). Strict
tool schemas, the options as sent, and provider errors as a failed run.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import Call, FakeLLM, Turn

from adapters.models import OpenAIResponsesModel
from runtime import (
    Agent,
    ConfigurationError,
    ModelError,
    ModelErrorKind,
    ModelRequest,
    RunResult,
    RunStatus,
    Runtime,
    tool,
    usage_of_events,
)
from runtime.store.sql import SQLStore

ModelFactory = Callable[..., Any]  # the `models` fixture

pytestmark = pytest.mark.timeout(60)

REASONING = {"reasoning_effort": "medium", "reasoning_summary": "auto"}


def bank(model: Any, ledger: list[dict[str, Any]]) -> Agent:
    @tool(permission="ask")
    async def transfer(account: str, amount: float, memo: str = "invoice") -> dict[str, Any]:
        """Move money to an account."""
        ledger.append({"account": account, "amount": amount, "memo": memo})
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


async def test_a_tool_cycle_gives_the_reasoning_item_back_unchanged(
    fake: FakeLLM, models: ModelFactory, store: SQLStore
) -> None:
    ledger: list[dict[str, Any]] = []
    model = models("responses", strict_tools=True, **REASONING)
    runtime = Runtime(store, [bank(model, ledger)])
    fake.script(
        Turn.ask(
            Call("balance", {"account": "ACME-1"}),
            thinking="First check the balance.",
            reasoning_tokens=40,
        ),
        Turn.ask(
            Call("transfer", {"account": "ACME-1", "amount": 250.0, "memo": None}),
            thinking="The invoice says 250.00 to ACME-1.",
        ),
        Turn.say("Paid 250.00 to ACME-1."),
    )

    parked = await runtime.start("bank", "Pay the ACME invoice.", requester="U1")
    assert parked.status is RunStatus.AWAITING
    [entry] = parked.pending
    # No text beside the call: the card shows the reasoning summary, nothing encrypted.
    assert entry.prompt == "The invoice says 250.00 to ACME-1."
    # The null strict mode made the model send for the optional memo is dropped: the
    # tool's default applies (a null would not be a valid memo).
    assert entry.call.arguments == {"account": "ACME-1", "amount": 250.0, "memo": "invoice"}

    done = await runtime.approve(entry, actor="U1", resume=True)
    assert done.status is RunStatus.DONE and done.text == "Paid 250.00 to ACME-1."
    assert ledger == [{"account": "ACME-1", "amount": 250.0, "memo": "invoice"}]
    assert all(r.problem is None for r in fake.requests)

    first, second, third = fake.requests
    assert first.path == "/v1/responses"
    assert first.system() == "You move money carefully."
    assert first.body["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert first.body["store"] is False
    assert first.body["include"] == ["reasoning.encrypted_content"]
    assert sorted(first.tool_names) == ["balance", "transfer"]
    [transfer] = [t for t in first.body["tools"] if t["name"] == "transfer"]
    assert transfer["strict"] is True
    assert transfer["parameters"]["required"] == ["account", "amount", "memo"]
    assert transfer["parameters"]["additionalProperties"] is False
    assert transfer["parameters"]["properties"]["memo"]["type"] == ["string", "null"]
    assert "default" not in transfer["parameters"]["properties"]["memo"]

    # Every reasoning item so far goes back exactly as it was issued, before its call.
    assert third.items("reasoning") == [fake.reasoning_items["rs_1"], fake.reasoning_items["rs_2"]]
    assert all(item["encrypted_content"] for item in third.items("reasoning"))
    kinds = [item.get("type", "message") for item in third.messages]
    assert kinds == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert third.tool_results()[-1] == '{"transferred": 250.0, "to": "ACME-1"}'
    assert second.items("reasoning") == [fake.reasoning_items["rs_1"]]

    events = await runtime.events(done.run_id)
    calls = [e["data"] for e in events if e["kind"] == "model_call"]
    assert calls[0]["model"] == "openai-responses:gpt-test"
    # Reasoning tokens are output tokens: counted (and priced) with the completion.
    assert calls[0]["completion_tokens"] >= 40
    assert usage_of_events(events).total_tokens == done.prompt_tokens + done.completion_tokens


async def test_the_fake_refuses_a_call_without_its_reasoning_item(
    fake: FakeLLM, models: ModelFactory
) -> None:
    """What the API does when a transcript loses the reasoning item (so the test above
    can fail)."""
    model = models("responses", **REASONING)
    fake.script(Turn.ask(Call("balance", {"account": "A"}), thinking="Check it."))
    request = ModelRequest(
        model=model.name,
        messages=[{"role": "user", "content": "Balance of A?"}],
        tools=[],
    )
    answer = await model.complete(request)
    assert answer.provider_state is not None
    message = answer.as_message()
    del message["provider_state"]  # a transcript that lost it
    later = ModelRequest(
        model=model.name,
        messages=[
            *request.messages,
            message,
            {"role": "tool", "tool_call_id": answer.tool_calls[0].id, "content": "1000"},
        ],
        tools=[],
    )
    with pytest.raises(ModelError) as caught:
        await model.complete(later)
    assert caught.value.kind is ModelErrorKind.BAD_REQUEST
    assert "without its required 'reasoning' item" in str(caught.value)


async def test_with_store_on_reasoning_goes_back_by_id_without_encrypted_content(
    fake: FakeLLM, models: ModelFactory, store: SQLStore
) -> None:
    ledger: list[dict[str, Any]] = []
    model = models(
        "responses",
        store=True,
        tool_choice="auto",
        parallel_tool_calls=False,
        max_tokens=2048,
        **REASONING,
    )
    runtime = Runtime(store, [bank(model, ledger)])
    fake.script(Turn.ask(Call("balance", {"account": "A"}), thinking="Look."), Turn.say("1000."))
    done = await runtime.start("bank", "Balance of A?", requester="U1")
    assert done.status is RunStatus.DONE
    first, second = fake.requests
    assert first.body["store"] is True and "include" not in first.body
    assert first.body["tool_choice"] == "auto" and first.body["parallel_tool_calls"] is False
    assert first.body["max_output_tokens"] == 2048
    [item] = second.items("reasoning")
    assert item == fake.reasoning_items["rs_1"] and "encrypted_content" not in item
    assert all(r.problem is None for r in fake.requests)


async def test_a_tool_strict_mode_cannot_express_fails_the_run_before_asking(
    fake: FakeLLM, models: ModelFactory, store: SQLStore
) -> None:
    @tool(permission="allow")
    async def tag(labels: dict[str, str]) -> str:
        """Set free-form labels."""
        return "ok"

    model = models("responses", strict_tools=True)
    runtime = Runtime(store, [Agent("tagger", "Tag things.", model, tools=[tag])])
    run = await runtime.start("tagger", "Tag it.", requester="U1")
    assert run.status is RunStatus.FAILED and run.error is not None
    assert "(openai, bad_request)" in run.error
    assert "tool 'tag' cannot have a strict schema at labels" in run.error
    assert "strict_tools" in run.error
    assert fake.requests == []  # nothing was sent


async def test_a_plain_model_sends_no_reasoning_options_and_keeps_no_state(
    fake: FakeLLM, models: ModelFactory
) -> None:
    model = models("responses", temperature=0.2)
    fake.script(Turn.say("Hello."))
    answer = await model.complete(
        ModelRequest(model=model.name, messages=[{"role": "user", "content": "Hi"}], tools=[])
    )
    assert answer.text == "Hello." and answer.provider_state is None
    [seen] = fake.requests
    assert seen.body == {
        "model": "gpt-test",
        "input": [{"role": "user", "content": "Hi"}],
        "store": False,
        "temperature": 0.2,
    }


def test_options_the_api_does_not_take_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="reasoning_effort must be one of"):
        OpenAIResponsesModel("gpt-test", api_key="k", reasoning_effort="ultra")
    with pytest.raises(ConfigurationError, match="tool_choice must be one of"):
        OpenAIResponsesModel("gpt-test", api_key="k", tool_choice="always")
    with pytest.raises(ConfigurationError, match="max_tokens must be at least 1"):
        OpenAIResponsesModel("gpt-test", api_key="k", max_tokens=0)


# -- provider errors, mapped as OpenAIModel's ------------------------------------------------


class Bed:
    def __init__(self, store: SQLStore, model: Any) -> None:
        @tool(permission="allow", replay_policy="safe")
        async def refund(order_id: str) -> str:
            """Refund an order."""
            return f"refunded {order_id}"

        self.runtime = Runtime(store, [Agent("shop", "Refund orders.", model, tools=[refund])])

    async def run(self) -> RunResult:
        return await self.runtime.start("shop", "Refund order A1.", requester="U1")

    async def failure(self, run: RunResult) -> dict[str, Any]:
        events = await self.runtime.events(run.run_id)
        [failed] = [e["data"] for e in events if e["kind"] == "model_failed"]
        assert isinstance(failed, dict)
        return failed


@pytest.mark.parametrize(
    ("turn", "status", "failure", "said"),
    [
        (Turn.too_long(), 400, "context_length", "maximum context length"),
        (Turn.fail(403, "this key may not use that model"), 403, "permission", "may not use"),
        (Turn.fail(404, "The model `gpt-test` does not exist"), 404, "not_found", "not exist"),
    ],
    ids=["context-length", "permission", "not-found"],
)
async def test_client_errors_fail_the_run_without_retrying(
    fake: FakeLLM,
    models: ModelFactory,
    store: SQLStore,
    turn: Turn,
    status: int,
    failure: str,
    said: str,
) -> None:
    bed = Bed(store, models("responses", max_retries=2))
    fake.script(turn, Turn.say("never reached"))
    run = await bed.run()
    assert run.status is RunStatus.FAILED and run.error is not None
    assert run.error.startswith(f"model call failed (openai {status}, {failure}): ")
    assert said in run.error
    event = await bed.failure(run)
    assert event["status"] == status and event["request_id"] == "req_1"
    assert len(fake.requests) == 1 and fake.pending == 1


async def test_rate_limits_and_server_errors_are_retried_then_fail(
    fake: FakeLLM, models: ModelFactory, store: SQLStore
) -> None:
    bed = Bed(store, models("responses", max_retries=1))
    fake.script(Turn.fail(429, "rate limit reached", retry_after=0.2), Turn.say("Done."))
    run = await bed.run()
    assert run.status is RunStatus.DONE and run.text == "Done."
    first, second = fake.requests
    assert second.at - first.at >= 0.2 and first.body == second.body

    fake.script(*[Turn.fail(500, "still broken", retry_after=0.05)] * 2)
    run = await bed.run()
    assert run.error is not None and "(openai 500, server): still broken" in run.error
    assert (await bed.failure(run))["retryable"] is True
    assert len(fake.requests) == 4


async def test_a_slow_reply_times_out(fake: FakeLLM, models: ModelFactory, store: SQLStore) -> None:
    bed = Bed(store, models("responses", timeout=0.3, max_retries=0))
    fake.script(Turn.say("too late").after(30))
    run = await bed.run()
    assert run.error is not None
    assert run.error.startswith("model call failed (openai, timeout): no answer within 0.3s")


async def test_an_unreachable_provider_is_a_connection_failure(
    models: ModelFactory, store: SQLStore
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bed = Bed(store, models("responses", base_url=f"http://127.0.0.1:{port}/v1"))
    run = await bed.run()
    assert run.error is not None and "(openai, connection)" in run.error


@pytest.mark.parametrize(
    "raw",
    [
        {"id": "resp_x", "object": "response", "status": "completed"},
        {
            "id": "resp_x",
            "object": "response",
            "status": "failed",
            "error": {"code": "server_error", "message": "the model crashed"},
            "output": [],
        },
    ],
    ids=["no-output", "failed"],
)
async def test_an_unreadable_answer_is_an_invalid_response(
    fake: FakeLLM, models: ModelFactory, store: SQLStore, raw: dict[str, Any]
) -> None:
    bed = Bed(store, models("responses"))
    fake.script(Turn(raw=json.dumps(raw)))
    run = await bed.run()
    assert run.status is RunStatus.FAILED and run.error is not None
    assert "(openai, invalid_response)" in run.error


async def test_a_cut_off_answer_and_a_refusal_fail_the_run(
    fake: FakeLLM, models: ModelFactory, store: SQLStore
) -> None:
    bed = Bed(store, models("responses"))
    fake.script(Turn(text="Refunding", calls=(Call("refund", {"order_id": "A1"}),), stop="length"))
    run = await bed.run()
    assert run.error is not None and run.error.startswith("the model's answer was cut off")
    fake.script(Turn(text="I can't help with refunds.", stop="refusal"))
    run = await bed.run()
    assert run.error == "the model refused to answer: I can't help with refunds."
