"""Provider errors through the real SDKs: retried where the SDK retries, else a failed run.

A run that fails on its model has a one-line ``error`` naming the provider, the status
and what went wrong, and a ``model_failed`` event in its flight recorder; unusable
answers (cut off by the token limit, refused) fail the run the same way and nothing they
asked for is run. Malformed tool arguments are the model's to see, not a failure.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import Call, FakeLLM, Protocol, Turn

from runtime import Agent, RunResult, RunStatus, Runtime, tool
from runtime.store.sql import SQLStore

ModelFactory = Callable[..., Any]  # the `models` fixture

pytestmark = pytest.mark.timeout(60)


class Bed:
    """A runtime over a SQLite file with one agent on the model under test."""

    def __init__(self, store: SQLStore, model: Any) -> None:
        self.ledger: list[dict[str, Any]] = []

        @tool(permission="allow", replay_policy="safe")
        async def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.ledger.append({"order_id": order_id, "amount": amount})
            return f"refunded {amount} on {order_id}"

        self.runtime = Runtime(store, [Agent("shop", "Refund orders.", model, tools=[refund])])

    async def run(self) -> RunResult:
        return await self.runtime.start("shop", "Refund order A1.", requester="U1")

    async def failure(self, run: RunResult) -> dict[str, Any]:
        """The run's ``model_failed`` event data (there must be exactly one)."""
        events = await self.runtime.events(run.run_id)
        [failed] = [e["data"] for e in events if e["kind"] == "model_failed"]
        assert [e["kind"] for e in events][-1] == "run_failed"
        return failed


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    sql = SQLStore.sqlite(tmp_path / "signoff.db")
    await sql.migrate()
    try:
        yield sql
    finally:
        await sql.close()


def assert_one_line(run: RunResult) -> None:
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "\n" not in run.error and "Traceback" not in run.error


@pytest.mark.parametrize(
    ("turn", "status", "failure", "said"),
    [
        (
            Turn.too_long(),
            400,
            "context_length",
            {"openai": "maximum context length", "anthropic": "prompt is too long"},
        ),
        (Turn.fail(400, "tools.0.name: invalid"), 400, "bad_request", "tools.0.name: invalid"),
        (Turn.fail(403, "this key may not use that model"), 403, "permission", "may not use"),
        (Turn.fail(404, "The model `gpt-test` does not exist"), 404, "not_found", "does not exist"),
    ],
    ids=["context-length", "bad-request", "permission", "not-found"],
)
async def test_client_errors_fail_the_run_without_retrying(
    fake: FakeLLM,
    models: ModelFactory,
    provider: Protocol,
    store: SQLStore,
    turn: Turn,
    status: int,
    failure: str,
    said: Any,
) -> None:
    bed = Bed(store, models(provider, max_retries=2))
    fake.script(turn, Turn.say("never reached"))
    run = await bed.run()
    assert_one_line(run)
    text = said[provider] if isinstance(said, dict) else said
    assert run.error is not None
    assert run.error.startswith(f"model call failed ({provider} {status}, {failure}): ")
    assert text in run.error
    event = await bed.failure(run)
    assert event["provider"] == provider and event["status"] == status
    assert event["failure"] == failure and event["retryable"] is False
    assert event["request_id"] == "req_1"
    assert len(fake.requests) == 1  # 4xx are not retried
    assert fake.pending == 1


async def test_a_bad_key_is_an_authentication_failure(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider, api_key="sk-wrong-key", max_retries=2))
    run = await bed.run()
    assert_one_line(run)
    assert run.error is not None and f"({provider} 401, authentication)" in run.error
    event = await bed.failure(run)
    assert event["failure"] == "authentication" and event["retryable"] is False
    assert len(fake.requests) == 1
    assert "sk-wrong-key" not in run.error


async def test_a_429_is_retried_after_retry_after_then_succeeds(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider, max_retries=2))
    fake.script(Turn.fail(429, "rate limit reached", retry_after=0.3), Turn.say("Done."))
    run = await bed.run()
    assert run.status is RunStatus.DONE and run.text == "Done."
    first, second = fake.requests
    assert second.at - first.at >= 0.3  # the SDK waited as Retry-After said
    assert first.headers.get("x-stainless-retry-count") == "0"
    assert second.headers.get("x-stainless-retry-count") == "1"
    assert first.body == second.body


async def test_a_429_that_persists_fails_after_the_bounded_retries(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider, max_retries=1))
    fake.script(*[Turn.fail(429, "rate limit reached", retry_after=0.05)] * 3)
    run = await bed.run()
    assert_one_line(run)
    assert run.error is not None and f"({provider} 429, rate_limited)" in run.error
    event = await bed.failure(run)
    assert event["retryable"] is True
    assert len(fake.requests) == 2  # one attempt and max_retries=1 retry
    assert fake.pending == 1


async def test_server_errors_are_retried(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider, max_retries=1))
    fake.script(Turn.fail(500, "internal error", retry_after=0.05), Turn.say("Recovered."))
    run = await bed.run()
    assert run.status is RunStatus.DONE and run.text == "Recovered."
    assert len(fake.requests) == 2

    fake.script(*[Turn.fail(500, "still broken", retry_after=0.05)] * 2)
    run = await bed.run()
    assert_one_line(run)
    assert run.error is not None and f"({provider} 500, server): still broken" in run.error
    assert (await bed.failure(run))["retryable"] is True
    assert len(fake.requests) == 4


async def test_a_slow_reply_times_out(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider, timeout=0.3, max_retries=1))
    fake.script(Turn.say("too late").after(30), Turn.say("On time."))
    run = await bed.run()  # the first attempt times out, the SDK's retry gets the answer
    assert run.status is RunStatus.DONE and run.text == "On time."

    fake.script(Turn.say("too late").after(30), Turn.say("too late").after(30))
    run = await bed.run()
    assert_one_line(run)
    assert run.error is not None
    assert run.error.startswith(f"model call failed ({provider}, timeout): no answer within 0.3s")
    assert (await bed.failure(run))["status"] is None
    assert len(fake.requests) == 4


async def test_an_unreachable_provider_is_a_connection_failure(
    models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")
    bed = Bed(store, models(provider, base_url=base))
    run = await bed.run()
    assert_one_line(run)
    assert run.error is not None and f"({provider}, connection)" in run.error
    assert (await bed.failure(run))["retryable"] is True


async def test_an_unreadable_answer_is_an_invalid_response(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider))
    fake.script(Turn(raw='{"id": "x", "object": "chat.completion", "choices": []}'))
    run = await bed.run()
    assert_one_line(run)
    assert run.error is not None and f"({provider}, invalid_response)" in run.error


async def test_arguments_that_are_not_json_are_an_error_the_model_sees(
    fake: FakeLLM, models: ModelFactory, store: SQLStore
) -> None:
    bed = Bed(store, models("openai"))  # the Messages API only sends JSON objects
    fake.script(
        Turn.ask(Call("refund", '{"order_id": "A1", "amount": 12.5')),
        Turn.ask(Call("refund", {"order_id": "A1", "amount": 12.5})),
        Turn.say("Refunded 12.50."),
    )
    run = await bed.run()
    assert run.status is RunStatus.DONE
    [error, result] = fake.requests[-1].tool_results()
    assert error.startswith("Error: arguments for refund are not valid JSON")
    assert result == "refunded 12.5 on A1"
    assert bed.ledger == [{"order_id": "A1", "amount": 12.5}]


async def test_arguments_of_the_wrong_type_are_an_error_the_model_sees(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider))
    fake.script(
        Turn.ask(Call("refund", {"order_id": "A1", "amount": "a lot"})),
        Turn.ask(Call("refund", {"order_id": ["A1"]})),
        Turn.say("I could not refund it."),
    )
    run = await bed.run()
    assert run.status is RunStatus.DONE
    assert bed.ledger == []
    first, second = fake.requests[-1].tool_results()
    assert first.startswith("Error: invalid arguments for refund: amount:")
    assert "order_id:" in second and "amount:" in second
    assert all(r.problem is None for r in fake.requests)


async def test_a_truncated_answer_fails_the_run_and_runs_nothing(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider))
    fake.script(
        Turn(
            text="Refunding A1 now",
            calls=(Call("refund", {"order_id": "A1", "amount": 5}),),
            stop="length",
        )
    )
    run = await bed.run()
    assert_one_line(run)
    assert run.error is not None
    assert run.error.startswith("the model's answer was cut off at its output token limit")
    assert bed.ledger == []
    events = await bed.runtime.events(run.run_id)
    [call] = [e["data"] for e in events if e["kind"] == "model_call"]
    assert call["stop"] == "length" and call["text"] == "Refunding A1 now"
    assert not [e for e in events if e["kind"] == "tool_proposed"]
    assert run.turns == 1 and run.prompt_tokens > 0  # what it cost is still counted


async def test_a_refusal_fails_the_run_with_the_refusal(
    fake: FakeLLM, models: ModelFactory, provider: Protocol, store: SQLStore
) -> None:
    bed = Bed(store, models(provider))
    fake.script(Turn(text="I can't help with refunds.", stop="refusal"))
    run = await bed.run()
    assert_one_line(run)
    assert run.error == "the model refused to answer: I can't help with refunds."
    events = await bed.runtime.events(run.run_id)
    assert [e["data"]["stop"] for e in events if e["kind"] == "model_call"] == ["refusal"]
