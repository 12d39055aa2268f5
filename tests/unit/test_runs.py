"""Starting, reading and driving runs."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import (
    Agent,
    ConfigurationError,
    RunNotFound,
    RunStatus,
    Runtime,
    ScriptedModel,
    final_reply,
    tool_call_reply,
)


def _echo(reply: str = "hello") -> Agent:
    return Agent("echo", "Echo.", ScriptedModel([final_reply(reply)]))


async def test_a_run_without_tools_finishes(runtime_factory: Any) -> None:
    rt = runtime_factory(_echo("hi there"))
    result = await rt.start("echo", "hi", requester="U1")
    assert result.status is RunStatus.DONE
    assert result.text == "hi there"
    assert result.requester == "U1"
    assert result.agent == "echo"
    assert result.pending == ()
    assert (await rt.get(result.run_id)) == result


async def test_start_without_waiting_queues_for_a_worker(runtime_factory: Any) -> None:
    agent = _echo()
    rt = runtime_factory(agent)
    queued = await rt.start("echo", "hi", wait=False)
    assert queued.status is RunStatus.QUEUED
    assert isinstance(agent.model, ScriptedModel)
    assert agent.model.calls == []
    assert await runtime_factory(agent).work_once() == 1
    assert (await rt.get(queued.run_id)).status is RunStatus.DONE
    assert await rt.work_once() == 0


async def test_a_used_idempotency_key_returns_its_run_marked_replayed(
    runtime_factory: Any,
) -> None:
    rt = runtime_factory(_echo())
    key = ("hooks:orders", "key-1", "digest-a")
    first = await rt.start("echo", "hi", wait=False, idempotency=key)
    assert first.replayed is False
    again = await rt.start("echo", "hi", wait=False, idempotency=key)
    assert (again.run_id, again.replayed) == (first.run_id, True)
    # A new key beside the used one still names the first run, and is recorded for it.
    more = [key, ("hooks:orders", "key-2", "digest-a")]
    assert (await rt.start("echo", "hi", wait=False, idempotency=more)).replayed is True
    assert await rt.started_by("hooks:orders", "key-2") == first.run_id
    assert len(await rt.list_runs()) == 1


async def test_unknown_agent_and_run(runtime_factory: Any) -> None:
    rt = runtime_factory(_echo())
    with pytest.raises(ConfigurationError, match="echo"):
        await rt.start("nobody", "hi")
    for call in (rt.get, rt.resume, rt.pause, rt.cancel, rt.events):
        with pytest.raises(RunNotFound):
            await call("run_missing")


def test_two_agents_cannot_share_a_name(runtime_factory: Any) -> None:
    rt = runtime_factory(_echo())
    with pytest.raises(ConfigurationError):
        rt.register(_echo())


def test_lease_must_be_positive(store: Any) -> None:
    with pytest.raises(ConfigurationError):
        Runtime(store, lease_seconds=0)


async def test_max_turns_fails_the_run(runtime_factory: Any) -> None:
    model = ScriptedModel([tool_call_reply(("again", {}))])
    agent = Agent("loop", "Loop.", model, max_turns=3)

    @agent.tool
    async def again() -> str:
        return "again"

    result = await runtime_factory(agent).start("loop", "go")
    assert result.status is RunStatus.FAILED
    assert result.error is not None and "3 turns" in result.error
    assert result.turns == 3
    assert len(model.calls) == 3


async def test_model_failure_fails_the_run(runtime_factory: Any) -> None:
    def broken(request: Any) -> dict[str, Any]:
        raise ConnectionError("provider down")

    result = await runtime_factory(Agent("a", "i", ScriptedModel(broken))).start("a", "go")
    assert result.status is RunStatus.FAILED
    assert result.error is not None and "provider down" in result.error


async def test_agent_not_loaded_fails_a_queued_run(runtime_factory: Any) -> None:
    queued = await runtime_factory(_echo()).start("echo", "hi", wait=False)
    assert await runtime_factory().work_once() == 1
    failed = await runtime_factory().get(queued.run_id)
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and "not loaded" in failed.error


async def test_a_queued_run_driven_by_a_worker_runs_its_allowed_tools(
    runtime_factory: Any,
) -> None:
    """The claim reads the (empty) first batch; later batches must still run their tools."""
    ran: list[str] = []
    model = ScriptedModel(
        [
            tool_call_reply(("lookup", {"key": "a"})),
            tool_call_reply(("lookup", {"key": "b"})),
            final_reply("Looked both up."),
        ]
    )
    agent = Agent("finder", "Find things.", model)

    @agent.tool
    def lookup(key: str) -> str:
        """Look a key up."""
        ran.append(key)
        return f"value of {key}"

    rt = runtime_factory(agent)
    queued = await rt.start("finder", "find a and b", requester="U1", wait=False)
    assert queued.status is RunStatus.QUEUED
    assert await rt.drive(queued.run_id)
    done = await rt.get(queued.run_id)
    assert done.status is RunStatus.DONE
    assert ran == ["a", "b"]
    tool_messages = [m for m in model.calls[-1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["value of a", "value of b"]
