"""Tools built from a JSON schema, argument rules without code, and `ToolOutcomeUnknown`."""

from __future__ import annotations

from typing import Any

import pytest
from testkit import echo_model

from adapters.mcp import ArgumentRules, Condition, ToolKnobs, apply_to_tool, settle
from runtime import (
    Agent,
    ConfigurationError,
    MemoryStore,
    Permission,
    RunStatus,
    Runtime,
    Tool,
    ToolOutcomeUnknown,
    tool,
)
from runtime.domain.tools import ArgumentError

SCHEMA = {
    "type": "object",
    "properties": {
        "branch": {"type": "string"},
        "count": {"type": "integer", "minimum": 1},
    },
    "required": ["branch"],
    "additionalProperties": False,
}


async def _echo(args: dict[str, Any]) -> dict[str, Any]:
    return {"got": args}


# -- Tool.from_schema -------------------------------------------------------------------


async def test_a_schema_tool_uses_its_schema_as_is_and_validates_with_it() -> None:
    item = Tool.from_schema("merge", "Merge a branch.", SCHEMA, _echo, permission="ask")

    assert item.parameters is SCHEMA
    assert item.spec()["function"] == {
        "name": "merge",
        "description": "Merge a branch.",
        "parameters": SCHEMA,
    }
    assert item.parse_arguments({"branch": "main", "count": 2}) == {"branch": "main", "count": 2}
    with pytest.raises(ArgumentError) as bad:
        item.parse_arguments({"count": 0, "extra": 1})
    message = str(bad.value)
    assert message.startswith("invalid arguments for merge: ")
    assert "'branch' is a required property" in message
    assert "count: 0 is less than the minimum of 1" in message
    assert "'extra' was unexpected" in message
    assert await item.invoke({"branch": "x"}) == {"got": {"branch": "x"}}
    assert item.permission_for({"branch": "x"}) is Permission.ASK


def test_the_schema_is_part_of_the_fingerprint() -> None:
    first = Agent("a", "x", echo_model(), tools=[Tool.from_schema("merge", "", SCHEMA, _echo)])
    changed = {**SCHEMA, "required": ["branch", "count"]}
    second = Agent("a", "x", echo_model(), tools=[Tool.from_schema("merge", "", changed, _echo)])
    same = Agent("a", "x", echo_model(), tools=[Tool.from_schema("merge", "", SCHEMA, _echo)])

    assert first.catalog_fingerprint != second.catalog_fingerprint
    assert first.catalog_fingerprint == same.catalog_fingerprint


@pytest.mark.parametrize(
    ("schema", "secret", "message"),
    [
        ({"type": "objekt"}, (), "invalid input schema"),
        (SCHEMA, ("token",), "secret names unknown arguments"),
    ],
)
def test_bad_schema_tools_are_configuration_errors(
    schema: dict[str, Any], secret: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Tool.from_schema("merge", "", schema, _echo, secret=secret)


# -- argument rules ---------------------------------------------------------------------


def test_rules_deny_beats_ask_beats_allow_beats_the_base() -> None:
    rules = ArgumentRules(
        Permission.ALLOW,
        deny_if=[Condition.parse({"count": {"gt": 100}}, where="t")],
        ask_if=[
            Condition.parse({"branch": "main"}, where="t"),
            Condition.parse({"branch": {"glob": "release/*"}, "count": {"ge": 2}}, where="t"),
        ],
    )
    assert rules({"branch": "dev", "count": 1}) is Permission.ALLOW
    assert rules({"branch": "main", "count": 1}) is Permission.ASK
    assert rules({"branch": "release/2.4", "count": 2}) is Permission.ASK
    assert rules({"branch": "release/2.4", "count": 1}) is Permission.ALLOW
    assert rules({"branch": "main", "count": 101}) is Permission.DENY
    assert rules({"count": "101"}) is Permission.ALLOW  # another type never matches
    assert rules.describe() == (
        "deny if count > 100; ask if branch == 'main' or branch matches 'release/*' and "
        "count >= 2; else allow"
    )


def test_matchers_compare_plain_values_without_confusing_bools_and_numbers() -> None:
    def holds(table: dict[str, Any], args: dict[str, Any]) -> bool:
        return Condition.parse(table, where="t").holds(args)

    assert holds({"force": True}, {"force": True})
    assert not holds({"force": True}, {"force": 1})
    assert holds({"env": {"in": ["prod", "eu-prod"]}}, {"env": "eu-prod"})
    assert holds({"env": {"not_in": ["prod"]}}, {"env": "dev"})
    assert not holds({"env": {"ne": "prod"}}, {})  # a missing argument matches nothing
    assert holds({"target.branch": "main"}, {"target": {"branch": "main"}})
    assert not holds({"n": {"lt": 3}}, {"n": True})


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "a condition is a table"),
        ({"n": {"between": 3}}, "unknown operator 'between'"),
        ({"n": {"gt": "3"}}, "t.n.gt: expected a number"),
        ({"n": {"in": "a"}}, "t.n.in: expected a list"),
        ({"n": {"gt": 1, "lt": 3}}, "give exactly one operator"),
        ({"n": ["a", "b"]}, "use { in = [...] }"),
        ({"a..b": 1}, "empty parts"),
    ],
)
def test_invalid_conditions_are_refused(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Condition.parse(table, where="t")
    assert message in str(refused.value)


def test_knobs_apply_globs_first_then_exact_names() -> None:
    @tool(permission="allow", replay_policy="safe")
    def merge(branch: str, token: str) -> str:
        """Merge."""
        return branch

    knobs = [
        ToolKnobs("merge", permission=Permission.ASK, secret=("token",)),
        ToolKnobs("mer*", permission=Permission.DENY, approvers=("U9",)),
    ]
    changed = apply_to_tool(merge, settle("merge", knobs))
    assert changed.permission is Permission.ASK  # the exact entry wins
    assert changed.approvers == ("U9",) and changed.secret == frozenset({"token"})
    assert changed.replay_policy == "safe"  # untouched
    assert apply_to_tool(merge, settle("other", knobs)) is merge


def test_knobs_set_editable_arguments_and_refuse_secret_ones() -> None:
    @tool(permission="ask", secret=("token",))
    def merge(branch: str, token: str) -> str:
        """Merge."""
        return branch

    changed = apply_to_tool(merge, settle("merge", [ToolKnobs("mer*", editable=("branch",))]))
    assert changed.editable_arguments() == ("branch",)
    closed = apply_to_tool(merge, settle("merge", [ToolKnobs("merge", editable=False)]))
    assert closed.editable_arguments() == ()
    with pytest.raises(ConfigurationError, match="secret arguments cannot be editable: token"):
        apply_to_tool(merge, settle("merge", [ToolKnobs("merge", editable=("token",))]))


# -- ToolOutcomeUnknown in the engine ----------------------------------------------------


async def test_an_unknown_outcome_under_manual_parks_an_uncertain_call() -> None:
    attempts: list[str] = []

    @tool(permission="allow", replay_policy="manual")
    async def wire(amount: float) -> str:
        """Wire money."""
        attempts.append("wire")
        raise ToolOutcomeUnknown("the bank hung up after the request")

    agent = Agent("bank", "Pay.", echo_model(("wire", {"amount": 5.0})), tools=[wire])
    runtime = Runtime(MemoryStore(), [agent])
    parked = await runtime.start("bank", "pay", requester="U1")

    assert parked.status is RunStatus.AWAITING and attempts == ["wire"]
    [entry] = parked.pending
    assert entry.status == "uncertain" and entry.call.attempts == 1
    [event] = [e for e in await runtime.events(parked.run_id) if e["kind"] == "tool_uncertain"]
    assert event["data"]["reason"] == "the bank hung up after the request"

    done = await runtime.resolve_tool(entry, result="wired, says the bank", resume=True)
    assert done.text == "Finished. wired, says the bank" and attempts == ["wire"]


@pytest.mark.parametrize("policy", ["safe", "idempotent"])
async def test_an_unknown_outcome_is_replayed_once_then_reported(policy: str) -> None:
    keys: list[str] = []

    @tool(permission="allow", replay_policy=policy)
    async def ping(host: str) -> str:
        """Ping."""
        from runtime import current_tool_context

        keys.append(current_tool_context().execution_key)
        if len(keys) < 3:
            raise ToolOutcomeUnknown("no answer")
        return "pong"

    agent = Agent("net", "Ping.", echo_model(("ping", {"host": "a"})), tools=[ping])
    runtime = Runtime(MemoryStore(), [agent])
    done = await runtime.start("net", "ping", requester="U1")

    assert done.status is RunStatus.DONE
    assert len(keys) == 2 and keys[0] == keys[1]  # replayed once, same execution key
    assert done.text == "Finished. Error: the outcome is unknown after 2 attempts: no answer"
    kinds = [e["kind"] for e in await runtime.events(done.run_id)]
    assert kinds.count("tool_dispatched") == 2 and "tool_replayed" in kinds
