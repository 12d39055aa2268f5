"""What a tool learns from its context; counters across resumes; thread follow-ups."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    RunStatus,
    ScriptedModel,
    SignoffError,
    ToolContext,
    current_tool_context,
    final_reply,
    tool_call_reply,
)


def test_context_outside_a_tool_raises() -> None:
    with pytest.raises(SignoffError, match="only available inside a running tool"):
        current_tool_context()


async def test_context_fields(runtime_factory: Any, store: Any) -> None:
    seen: list[ToolContext] = []
    model = ScriptedModel(
        [
            tool_call_reply(("note", {"text": "a"}), ("note", {"text": "b"}), ("risky", {})),
            final_reply("ok"),
        ]
    )
    agent = Agent("helper", "Help.", model)

    @agent.tool
    async def note(text: str) -> str:
        seen.append(current_tool_context())
        return text

    @agent.tool(permission="ask", approvers=["U2"])
    async def risky() -> str:
        seen.append(current_tool_context())
        return "done"

    rt = runtime_factory(agent)
    parked = await rt.start("helper", "go", requester="U1")
    assert len(seen) == 2
    approver = Actor(id="U2", platform="slack", name="Bea", groups=frozenset({"ops"}))
    done = await rt.approve(parked.pending[0], actor=approver, resume=True)
    assert done.status is RunStatus.DONE
    assert len(seen) == 3
    async with store.transaction() as tx:
        calls = await tx.calls_for_run(parked.run_id)
    for ctx, call in zip(seen, calls, strict=True):
        assert ctx.run_id == parked.run_id
        assert ctx.thread_id == parked.thread_id
        assert ctx.agent == "helper"
        assert ctx.call_id == call.call_id
        assert ctx.execution_key == call.execution_key
        assert ctx.requester == "U1"
        assert ctx.attempt == 1
        assert ctx.answer is None
    assert len({c.execution_key for c in seen}) == 3, "execution keys are unique per call"
    assert len({c.call_id for c in seen}) == 3
    assert seen[0].actor is None and seen[1].actor is None, "allow tools have no approver"
    assert seen[2].actor == approver
    assert parked.pending[0].execution_key == seen[2].execution_key


async def test_context_is_gone_after_the_tool_returns(runtime_factory: Any) -> None:
    model = ScriptedModel([tool_call_reply(("probe", {})), final_reply("ok")])
    agent = Agent("a", "i", model)

    @agent.tool
    async def probe() -> str:
        return current_tool_context().call_id

    await runtime_factory(agent).start("a", "go")
    with pytest.raises(SignoffError):
        current_tool_context()


async def test_plain_functions_get_a_context_too(runtime_factory: Any) -> None:
    keys: list[str] = []
    model = ScriptedModel([tool_call_reply(("sync", {})), final_reply("ok")])
    agent = Agent("a", "i", model)

    @agent.tool
    def sync() -> str:
        keys.append(current_tool_context().execution_key)
        return "ok"

    result = await runtime_factory(agent).start("a", "go")
    assert result.status is RunStatus.DONE
    assert len(keys) == 1 and keys[0]


# --- counters ------------------------------------------------------------------------------

REPLIES = [
    tool_call_reply(("step", {"n": 1}), prompt_tokens=100, completion_tokens=10),
    tool_call_reply(("step", {"n": 2}), prompt_tokens=200, completion_tokens=20),
    final_reply("finished", prompt_tokens=300, completion_tokens=30),
]


def _usage(reply: dict[str, Any]) -> tuple[int, int]:
    return reply["usage"]["prompt_tokens"], reply["usage"]["completion_tokens"]


async def test_counters_only_grow_and_report_lifetime_totals(runtime_factory: Any) -> None:
    model = ScriptedModel(REPLIES)
    agent = Agent("a", "i", model)

    @agent.tool(permission="ask")
    async def step(n: int) -> str:
        return f"step {n}"

    rt = runtime_factory(agent)
    results = [await rt.start("a", "go", requester="U1")]
    while results[-1].status is RunStatus.AWAITING:
        results.append(await rt.approve(results[-1].pending[0], actor="U1", resume=True))
    assert [r.status for r in results] == [RunStatus.AWAITING, RunStatus.AWAITING, RunStatus.DONE]
    for earlier, later in itertools.pairwise(results):
        assert later.turns > earlier.turns
        assert later.prompt_tokens > earlier.prompt_tokens
        assert later.completion_tokens > earlier.completion_tokens
    for count, result in enumerate(results, start=1):
        prompt = sum(_usage(r)[0] for r in REPLIES[:count])
        completion = sum(_usage(r)[1] for r in REPLIES[:count])
        assert result.turns == count
        assert result.prompt_tokens == prompt
        assert result.completion_tokens == completion
        assert result.total_tokens == prompt + completion
        assert result.usage_incomplete is False
    final = await rt.get(results[0].run_id)
    assert (final.turns, final.total_tokens) == (results[-1].turns, results[-1].total_tokens)
    assert final.text == "finished"


async def test_counters_survive_a_fresh_runtime(runtime_factory: Any) -> None:
    model = ScriptedModel(REPLIES[1:])
    agent = Agent("a", "i", model)

    @agent.tool(permission="ask")
    async def step(n: int) -> str:
        return f"step {n}"

    parked = await runtime_factory(agent).start("a", "go", requester="U1")
    fresh = runtime_factory(agent)
    done = await fresh.approve(parked.pending[0].execution_key, actor="U1", resume=True)
    assert done.turns == 2
    assert done.prompt_tokens == _usage(REPLIES[1])[0] + _usage(REPLIES[2])[0]
    assert done.completion_tokens == _usage(REPLIES[1])[1] + _usage(REPLIES[2])[1]


# --- threads ---------------------------------------------------------------------------------


async def test_follow_up_in_the_same_thread_sees_the_first_run(runtime_factory: Any) -> None:
    answers = iter(["The order shipped on Monday.", "It should arrive Thursday."])
    model = ScriptedModel(lambda request: final_reply(next(answers)))
    rt = runtime_factory(Agent("support", "Be helpful.", model))
    first = await rt.start("support", "Where is order A1?", requester="U1")
    assert first.status is RunStatus.DONE
    second = await rt.start(
        "support", "When will it arrive?", requester="U1", thread_id=first.thread_id
    )
    assert second.status is RunStatus.DONE
    assert second.thread_id == first.thread_id
    assert second.run_id != first.run_id
    messages = model.calls[-1].messages
    assert messages[0]["role"] == "system"
    assert messages[1:] == [
        {"role": "user", "content": "Where is order A1?"},
        {"role": "assistant", "content": "The order shipped on Monday."},
        {"role": "user", "content": "When will it arrive?"},
    ]


async def test_a_new_thread_starts_empty(runtime_factory: Any) -> None:
    model = ScriptedModel([final_reply("hi")])
    rt = runtime_factory(Agent("support", "Be helpful.", model))
    first = await rt.start("support", "first", requester="U1")
    second = await rt.start("support", "second", requester="U1")
    assert second.thread_id != first.thread_id
    assert [m["content"] for m in model.calls[-1].messages[1:]] == ["second"]


async def test_follow_up_after_a_parked_run_uses_the_script_from_its_start(
    runtime_factory: Any,
) -> None:
    model = ScriptedModel([tool_call_reply(("lookup", {})), final_reply("found it")])
    agent = Agent("support", "Be helpful.", model)

    @agent.tool(permission="ask")
    async def lookup() -> str:
        return "A1: shipped"

    rt = runtime_factory(agent)
    first = await rt.start("support", "look A1 up", requester="U1")
    done = await rt.approve(first.pending[0], actor="U1", resume=True)
    assert done.text == "found it"
    follow = await rt.start("support", "and A2?", requester="U1", thread_id=first.thread_id)
    # The follow-up is its own run: it asks for the tool again rather than finishing.
    assert follow.status is RunStatus.AWAITING
    history = model.calls[-1].messages
    assert {"role": "user", "content": "look A1 up"} in history
    assert {"role": "assistant", "content": "found it"} in history
    assert history[-1] == {"role": "user", "content": "and A2?"}


@pytest.mark.parametrize("seconds_between", [60, 0])
async def test_a_long_thread_keeps_its_order(
    runtime_factory: Any, clock: Any, seconds_between: int
) -> None:
    # Follow-ups may arrive within one clock tick; the history still reads in order.
    model = ScriptedModel(lambda request: final_reply(f"answer {len(model.calls)}"))
    rt = runtime_factory(Agent("support", "Be helpful.", model))
    first = await rt.start("support", "question 1", requester="U1")
    for n in range(2, 13):
        clock.advance(seconds_between)
        await rt.start("support", f"question {n}", requester="U1", thread_id=first.thread_id)
    users = [m["content"] for m in model.calls[-1].messages if m["role"] == "user"]
    assert users == [f"question {n}" for n in range(1, 13)]
    replies = [m["content"] for m in model.calls[-1].messages if m["role"] == "assistant"]
    assert replies == [f"answer {n}" for n in range(1, 12)]
