"""A grant for "the same arguments" covers exactly those arguments: no argument more, and
nested values with their types, on Python-function tools and on JSON-schema tools."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    GrantRequest,
    ModelRequest,
    RunStatus,
    ScriptedModel,
    Tool,
    final_reply,
    tool_call_reply,
)
from runtime.domain.constraints import describe, exactly, holds

Call = tuple[str, dict[str, Any]]
ANA = Actor(id="U1", name="Ana", platform="slack")


def turns_model(*turns: list[Call]) -> ScriptedModel:
    """Turn N asks for the calls of ``turns[N]``; then it reports the results."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        done = sum(1 for m in request.messages if m.get("role") == "assistant")
        if done < len(turns):
            return tool_call_reply(*turns[done])
        results = [str(m["content"]) for m in request.messages if m.get("role") == "tool"]
        return final_reply(" | ".join(results))

    return ScriptedModel(reply)


DEPLOY_SCHEMA = {
    "type": "object",
    "properties": {
        "service": {"type": "string"},
        "options": {"type": "object"},
        "replicas": {"type": "integer"},
        "force": {"type": "boolean"},
    },
    "required": ["service"],
}
GRANTED = {"service": "api", "options": {"flag": True}}


class Deploys:
    """An agent whose ``deploy`` asks; its three turns: the granted call, the same call
    again, then `later`. Every real deploy is recorded in `ran`."""

    def __init__(self, runtime_factory: Any, kind: str, later: dict[str, Any]) -> None:
        self.ran: list[dict[str, Any]] = []
        turns = [[("deploy", GRANTED)], [("deploy", GRANTED)], [("deploy", later)]]
        self.agent = Agent("ops", "Deploy.", turns_model(*turns), version="1")
        if kind == "schema":

            async def invoke(args: dict[str, Any]) -> str:
                self.ran.append(args)
                return "deployed"

            self.agent.add_tool(
                Tool.from_schema("deploy", "Deploy.", DEPLOY_SCHEMA, invoke, permission="ask")
            )
        else:

            @self.agent.tool(permission="ask")
            async def deploy(service: str, options: dict[str, Any]) -> str:
                self.ran.append({"service": service, "options": options})
                return "deployed"

        self.runtime = runtime_factory(self.agent)

    async def granted(self) -> Any:
        """Run, allow the first call with a same-arguments grant, and go on."""
        parked = await self.runtime.start("ops", "deploy", requester="U1")
        assert parked.status is RunStatus.AWAITING
        return await self.runtime.approve(
            parked.pending[0], actor=ANA, resume=True, grant=GrantRequest(args="same")
        )

    async def applied(self, run_id: str) -> int:
        return sum(1 for e in await self.runtime.events(run_id) if e["kind"] == "grant_applied")


@pytest.mark.parametrize(
    "later",
    [
        {**GRANTED, "force": True},
        {**GRANTED, "replicas": 50},
        {**GRANTED, "unknown": "x"},
        {"service": "api", "options": {"flag": 1}},
        {"service": "api", "options": {"flag": True, "also": False}},
        {"service": "api", "options": {"flag": [True]}},
        {"service": "api"},
    ],
    ids=["force", "replicas", "unknown", "flag-1", "nested-extra", "flag-list", "fewer"],
)
async def test_a_same_grant_on_a_schema_tool_asks_for_any_other_arguments(
    runtime_factory: Any, later: dict[str, Any]
) -> None:
    app = Deploys(runtime_factory, "schema", later)
    result = await app.granted()

    assert app.ran == [GRANTED, GRANTED]  # the allowed call, then the same one by the grant
    assert result.status is RunStatus.AWAITING
    [entry] = result.pending
    assert entry.call.arguments == later
    assert await app.applied(result.run_id) == 1


async def test_a_same_grant_on_a_python_tool_compares_nested_values_with_their_types(
    runtime_factory: Any,
) -> None:
    later = {"service": "api", "options": {"flag": 1}}
    app = Deploys(runtime_factory, "python", later)
    result = await app.granted()

    assert app.ran == [GRANTED, GRANTED]
    assert result.status is RunStatus.AWAITING
    assert result.pending[0].call.arguments == later
    [grant] = await app.runtime.grants()
    assert grant.covers == (
        "deploy for the rest of this run (service == 'api', options == {'flag': True}, "
        "no other arguments)"
    )


async def test_a_python_tool_never_runs_a_call_with_an_argument_more(
    runtime_factory: Any,
) -> None:
    app = Deploys(runtime_factory, "python", {**GRANTED, "force": True})
    result = await app.granted()

    assert result.status is RunStatus.DONE
    assert app.ran == [GRANTED, GRANTED]
    assert result.text is not None and "force" in result.text  # the model is told why
    assert await app.applied(result.run_id) == 1


async def test_a_same_grant_still_covers_the_identical_call_on_both_kinds(
    runtime_factory: Any,
) -> None:
    for kind in ("schema", "python"):
        app = Deploys(runtime_factory, kind, {"service": "api", "options": {"flag": True}})
        result = await app.granted()
        assert result.status is RunStatus.DONE, kind
        assert app.ran == [GRANTED, GRANTED, GRANTED]
        assert await app.applied(result.run_id) == 2


def test_exactly_pins_names_and_typed_values() -> None:
    pinned = exactly({"n": 2, "tags": ["a", True], "o": {"k": None}})
    assert holds(pinned, {"n": 2, "tags": ["a", True], "o": {"k": None}})
    assert holds(pinned, {"n": 2.0, "tags": ["a", True], "o": {"k": None}})  # one JSON number
    for other in (
        {"n": 2, "tags": ["a", 1], "o": {"k": None}},
        {"n": True, "tags": ["a", True], "o": {"k": None}},
        {"n": "2", "tags": ["a", True], "o": {"k": None}},
        {"n": 2, "tags": ["a", True, 1], "o": {"k": None}},
        {"n": 2, "tags": ["a", True], "o": {"k": None, "x": 0}},
        {"n": 2, "tags": ["a", True], "o": {}},
        {"n": 2, "tags": ["a", True], "o": {"k": None}, "more": 0},
        {"n": 2, "tags": ["a", True]},
    ):
        assert not holds(pinned, other), other
    assert holds(exactly({}), {})
    assert not holds(exactly({}), {"x": 1})
    assert describe(exactly({})) == "no arguments"
    assert describe(exactly({"n": 2})) == "n == 2, no other arguments"
