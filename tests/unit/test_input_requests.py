"""Tools that ask a person for typed input park the run like an approval."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from runtime import (
    Agent,
    CallState,
    InputRequest,
    InvalidAnswer,
    ResolutionError,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    Unauthorized,
    current_tool_context,
    final_reply,
    tool_call_reply,
)


class Target(BaseModel):
    environment: str
    replicas: int = Field(ge=1)


DICT_SCHEMA = {
    "type": "object",
    "properties": {"environment": {"type": "string"}, "replicas": {"type": "integer"}},
    "required": ["environment", "replicas"],
}


class Deploys:
    """A `deploy` tool that asks where to deploy unless it has an answer."""

    def __init__(self, runtime_factory: Any, schema: Any) -> None:
        self.seen: list[dict[str, Any]] = []
        self.model = ScriptedModel(
            [tool_call_reply(("deploy", {"version": "1.2"})), final_reply("Deployed.")]
        )
        self.agent = Agent("deployer", "Deploy.", self.model)

        @self.agent.tool(permission="allow", replay_policy="idempotent")
        async def deploy(version: str) -> Any:
            ctx = current_tool_context()
            self.seen.append(
                {"answer": ctx.answer, "attempt": ctx.attempt, "key": ctx.execution_key}
            )
            if ctx.answer is None:
                return InputRequest(f"Where should {version} go?", schema=schema)
            return f"deployed {version} to {ctx.answer['environment']} x{ctx.answer['replicas']}"

        self.runtime = runtime_factory(self.agent)

    async def park(self) -> Any:
        result = await self.runtime.start("deployer", "ship 1.2", requester="U1")
        assert result.status is RunStatus.AWAITING
        return result

    def tool_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.model.calls[-1].messages if m.get("role") == "tool"]


SCHEMAS = pytest.mark.parametrize("schema", [Target, DICT_SCHEMA], ids=["pydantic", "dict"])


@SCHEMAS
async def test_input_request_parks_with_an_input_entry(
    runtime_factory: Any, store: Any, schema: Any
) -> None:
    app = Deploys(runtime_factory, schema)
    parked = await app.park()
    (entry,) = parked.pending
    assert entry.status == "input"
    assert entry.prompt == "Where should 1.2 go?"
    assert entry.schema is not None
    assert set(entry.schema["properties"]) == {"environment", "replicas"}
    assert set(entry.schema["required"]) == {"environment", "replicas"}
    assert entry.ticket.target.kind == "remote_input"
    assert entry.call.attempts == 1
    assert len(app.seen) == 1
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(parked.run_id)
    assert call.state is CallState.AWAITING_INPUT
    kinds = [o.kind for o in await _outbox(store, parked.run_id)]
    assert "input_requested" in kinds


async def _outbox(store: Any, run_id: str) -> list[Any]:
    async with store.transaction() as tx:
        return await tx.outbox_for_run(run_id)


@SCHEMAS
@pytest.mark.parametrize(
    "data",
    [
        {},
        {"environment": "prod"},
        {"environment": 3, "replicas": 2},
        {"environment": "prod", "replicas": "two"},
    ],
)
async def test_invalid_answer_changes_nothing(
    runtime_factory: Any, snapshot: Any, store: Any, schema: Any, data: dict[str, Any]
) -> None:
    app = Deploys(runtime_factory, schema)
    parked = await app.park()
    before = await snapshot(parked.run_id)
    commits = store.commits
    with pytest.raises(InvalidAnswer) as info:
        await app.runtime.answer(parked.pending[0], data, actor="U1", resume=True)
    assert info.value.errors
    assert all("message" in e and "path" in e for e in info.value.errors)
    assert await snapshot(parked.run_id) == before
    assert store.commits == commits
    assert len(app.seen) == 1


async def test_pydantic_constraints_are_enforced(runtime_factory: Any) -> None:
    app = Deploys(runtime_factory, Target)
    parked = await app.park()
    with pytest.raises(InvalidAnswer) as info:
        await app.runtime.answer(parked.pending[0], {"environment": "prod", "replicas": 0})
    assert [e["path"] for e in info.value.errors] == ["replicas"]


@SCHEMAS
async def test_valid_answer_calls_the_tool_again_with_it(
    runtime_factory: Any, store: Any, schema: Any
) -> None:
    app = Deploys(runtime_factory, schema)
    parked = await app.park()
    done = await app.runtime.answer(
        parked.pending[0], {"environment": "prod", "replicas": 3}, actor="U1", resume=True
    )
    assert done.status is RunStatus.DONE
    assert done.text == "Deployed."
    assert [s["answer"] for s in app.seen] == [None, {"environment": "prod", "replicas": 3}]
    assert [s["attempt"] for s in app.seen] == [1, 2]
    assert app.seen[0]["key"] == app.seen[1]["key"]
    (message,) = app.tool_messages()
    assert message["content"] == "deployed 1.2 to prod x3"
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(parked.run_id)
        ticket = await tx.get_ticket(parked.pending[0].ticket_id)
    assert call.state is CallState.COMPLETED
    assert call.answer == {"environment": "prod", "replicas": 3}
    assert ticket is not None and ticket.status is TicketStatus.DECIDED


async def test_decline_of_an_input_request_blocks_the_call(
    runtime_factory: Any, store: Any
) -> None:
    app = Deploys(runtime_factory, Target)
    parked = await app.park()
    done = await app.runtime.decline(parked.pending[0], actor="U1", reason="not today", resume=True)
    assert done.status is RunStatus.DONE
    assert len(app.seen) == 1, "a declined input request is not called again"
    (message,) = app.tool_messages()
    assert message["content"] == "Permission denied: not today"
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(parked.run_id)
    assert call.state is CallState.DENIED


async def test_approve_does_not_fit_an_input_request(runtime_factory: Any, snapshot: Any) -> None:
    app = Deploys(runtime_factory, Target)
    parked = await app.park()
    before = await snapshot(parked.run_id)
    with pytest.raises(ResolutionError):
        await app.runtime.approve(parked.pending[0], actor="U1")
    assert await snapshot(parked.run_id) == before


async def test_only_authorised_people_answer(runtime_factory: Any, snapshot: Any) -> None:
    app = Deploys(runtime_factory, Target)
    parked = await app.park()
    before = await snapshot(parked.run_id)
    with pytest.raises(Unauthorized):
        await app.runtime.answer(parked.pending[0], {"environment": "p", "replicas": 1}, actor="U9")
    assert await snapshot(parked.run_id) == before
