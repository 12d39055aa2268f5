"""The `tool` decorator, argument schemas, permission rules, secrets and bad arguments."""

from __future__ import annotations

import json
from datetime import date, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from runtime import (
    Agent,
    CallState,
    ConfigurationError,
    Permission,
    ReplayPolicy,
    RunStatus,
    ScriptedModel,
    Tool,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.domain.tools import ArgumentError


class Address(BaseModel):
    street: str
    city: str


async def ship(order: str, to: Address, express: bool = False, note: str | None = None) -> str:
    """Ship an order.

    Longer explanation that the model does not need.
    """
    return "shipped"


def tool_messages(model: ScriptedModel, request: int = -1) -> list[dict[str, Any]]:
    return [m for m in model.calls[request].messages if m.get("role") == "tool"]


# --- options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (Permission.ALLOW, Permission.ALLOW),
        (Permission.ASK, Permission.ASK),
        (Permission.DENY, Permission.DENY),
        ("allow", Permission.ALLOW),
        ("ask", Permission.ASK),
        ("deny", Permission.DENY),
    ],
)
def test_permission_accepts_enum_and_string(given: Any, expected: Permission) -> None:
    built = tool(ship, permission=given)
    assert built.permission is expected
    assert built.permission == expected.value
    assert built.permission_for({}) is expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (ReplayPolicy.MANUAL, "manual"),
        (ReplayPolicy.SAFE, "safe"),
        (ReplayPolicy.IDEMPOTENT, "idempotent"),
        ("manual", "manual"),
        ("safe", "safe"),
        ("idempotent", "idempotent"),
    ],
)
def test_replay_policy_is_stored_as_its_string(given: Any, expected: str) -> None:
    built = tool(ship, replay_policy=given)
    assert built.replay_policy == expected
    assert type(built.replay_policy) is str


def test_defaults() -> None:
    built = tool(ship)
    assert isinstance(built, Tool)
    assert built.name == "ship"
    assert built.description == "Ship an order."
    assert built.permission is Permission.ALLOW
    assert built.replay_policy == "manual"
    assert built.approvers is None
    assert built.four_eyes is None
    assert built.deadline is None
    assert built.secret == frozenset()


def test_options_are_kept() -> None:
    built = tool(
        ship,
        name="send",
        description="Send it.",
        permission="ask",
        approvers=["U9", "group:ops"],
        four_eyes=True,
        deadline=90,
        secret=["note"],
    )
    assert built.name == "send"
    assert built.description == "Send it."
    assert built.approvers == ("U9", "group:ops")
    assert built.four_eyes is True
    assert built.deadline == timedelta(seconds=90)
    assert built.secret == frozenset({"note"})
    assert built.spec()["function"]["name"] == "send"


def test_bare_and_called_decorator_forms() -> None:
    @tool
    async def ping() -> str:
        return "pong"

    @tool(permission="deny")
    async def pong() -> str:
        return "ping"

    assert isinstance(ping, Tool) and ping.permission is Permission.ALLOW
    assert isinstance(pong, Tool) and pong.permission is Permission.DENY


@pytest.mark.parametrize("bad", ["maybe", "ALLOWED", "", 3])
def test_bad_permission_raises(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        tool(ship, permission=bad)


@pytest.mark.parametrize("bad", ["sometimes", "SAFE!", ""])
def test_bad_replay_policy_raises(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        tool(ship, replay_policy=bad)


@pytest.mark.parametrize("bad", [0, -5, timedelta(0), timedelta(seconds=-1)])
def test_non_positive_deadline_raises(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        tool(ship, deadline=bad)


def test_secret_must_name_a_parameter() -> None:
    with pytest.raises(ConfigurationError):
        tool(ship, secret=["password"])


def test_var_args_are_refused() -> None:
    async def loose(*args: str, **kwargs: str) -> None:
        return None

    with pytest.raises(ConfigurationError):
        tool(loose)


def test_agent_rejects_duplicate_tool_names() -> None:
    agent = Agent("a", "i", ScriptedModel([final_reply("x")]), [tool(ship)])
    with pytest.raises(ConfigurationError):
        agent.add_tool(tool(ship))


# --- schema ----------------------------------------------------------------------------


def test_schema_from_type_hints() -> None:
    schema = tool(ship).parameters
    assert schema["type"] == "object"
    assert "title" not in schema
    assert schema["required"] == ["order", "to"]
    props = schema["properties"]
    assert props["order"]["type"] == "string"
    assert props["express"]["type"] == "boolean"
    assert props["express"]["default"] is False
    # Optional[str] is a string or null, defaulting to null.
    assert props["note"]["default"] is None
    assert {"type": "string"} in props["note"]["anyOf"]
    assert {"type": "null"} in props["note"]["anyOf"]
    # A pydantic model parameter is a referenced object with its own fields.
    ref = props["to"]["$ref"].rsplit("/", 1)[-1]
    address = schema["$defs"][ref]
    assert set(address["properties"]) == {"street", "city"}
    assert set(address["required"]) == {"street", "city"}
    assert schema.get("additionalProperties") is False


async def test_parse_arguments_validates_to_json_and_invoke_builds_models() -> None:
    got: list[Any] = []

    async def ship(order: str, to: Address, express: bool = False, note: str | None = None) -> str:
        got.append((to, express, note))
        return "shipped"

    built = tool(ship)
    args = built.parse_arguments({"order": "A1", "to": {"street": "Main", "city": "X"}})
    assert args == {
        "order": "A1",
        "to": {"street": "Main", "city": "X"},
        "express": False,
        "note": None,
    }
    assert json.loads(json.dumps(args)) == args  # stored as it is
    assert await built.invoke(args) == "shipped"
    assert got == [(Address(street="Main", city="X"), False, None)]
    with pytest.raises(ArgumentError) as info:
        built.parse_arguments({"order": "A1"})
    assert "to" in str(info.value)
    with pytest.raises(ArgumentError):
        built.parse_arguments({"order": "A1", "to": {"street": "s", "city": "c"}, "extra": 1})


# --- permission rules ------------------------------------------------------------------


async def _refund_run(runtime_factory: Any, amount: float) -> tuple[Any, list[float]]:
    ran: list[float] = []
    model = ScriptedModel(
        [tool_call_reply(("refund", {"order": "A1", "amount": amount})), final_reply("ok")]
    )
    agent = Agent("support", "Be helpful.", model)

    @agent.tool(permission=lambda a: "ask" if a["amount"] > 100 else "allow")
    async def refund(order: str, amount: float) -> str:
        ran.append(amount)
        return f"refunded {amount}"

    rt = runtime_factory(agent)
    result = await rt.start("support", "refund", requester="U1")
    return result, ran


async def test_rule_asks_above_one_hundred(runtime_factory: Any) -> None:
    result, ran = await _refund_run(runtime_factory, 250)
    assert result.status is RunStatus.AWAITING
    assert [p.call.name for p in result.pending] == ["refund"]
    assert result.pending[0].call.arguments == {"order": "A1", "amount": 250.0}
    assert ran == []


@pytest.mark.parametrize("amount", [100, 5.5])
async def test_rule_allows_up_to_one_hundred(runtime_factory: Any, amount: float) -> None:
    result, ran = await _refund_run(runtime_factory, amount)
    assert result.status is RunStatus.DONE
    assert result.pending == ()
    assert ran == [amount]


def test_rule_returning_nonsense_is_a_configuration_error() -> None:
    built = tool(ship, permission=lambda a: "perhaps")
    with pytest.raises(ConfigurationError):
        built.permission_for({})


def test_rule_may_return_the_enum() -> None:
    built = tool(ship, permission=lambda a: Permission.DENY if a["express"] else Permission.ALLOW)
    assert built.permission_for({"express": True}) is Permission.DENY
    assert built.permission_for({"express": False}) is Permission.ALLOW


# --- secrets ---------------------------------------------------------------------------


def test_masked_hides_only_secret_arguments() -> None:
    built = tool(ship, secret=["note"])
    args = {"order": "A1", "note": "hunter2"}
    shown = built.masked(args)
    assert shown["order"] == "A1"
    assert shown["note"] != "hunter2"
    assert "hunter2" not in json.dumps(shown)
    assert args["note"] == "hunter2", "masking must not change the real arguments"


async def test_secret_never_reaches_people_or_logs(runtime_factory: Any, store: Any) -> None:
    seen: list[str] = []
    model = ScriptedModel(
        [tool_call_reply(("login", {"user": "bob", "password": "hunter2"})), final_reply("in")]
    )
    agent = Agent("a", "i", model)

    @agent.tool(permission="ask", secret=["password"])
    async def login(user: str, password: str) -> str:
        seen.append(password)
        return "ok"

    rt = runtime_factory(agent)
    parked = await rt.start("a", "log in", requester="U1", origin={"channel": "C1"})
    entry = parked.pending[0]
    assert entry.call.arguments["user"] == "bob"
    assert entry.call.arguments["password"] != "hunter2"
    assert "hunter2" not in json.dumps([e.call.arguments for e in await rt.open_tickets()])
    done = await rt.approve(entry, actor="U1", resume=True)
    assert done.status is RunStatus.DONE
    assert seen == ["hunter2"], "the tool itself gets the real value"
    exported = await rt.export_events(parked.run_id)
    assert "bob" in exported
    assert "hunter2" not in exported
    async with store.transaction() as tx:
        outbox = await tx.outbox_for_run(parked.run_id)
    assert outbox
    assert "hunter2" not in json.dumps([o.payload for o in outbox], default=str)


# --- bad arguments from the model ------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"order": "A1"}, "amount"),
        ({"order": "A1", "amount": "lots"}, "amount"),
        ({"order": "A1", "amount": 5, "bogus": True}, "bogus"),
    ],
)
async def test_bad_arguments_become_a_model_visible_error(
    runtime_factory: Any, store: Any, arguments: dict[str, Any], needle: str
) -> None:
    ran: list[Any] = []
    model = ScriptedModel([tool_call_reply(("refund", arguments)), final_reply("sorry")])
    agent = Agent("support", "Be helpful.", model)

    @agent.tool(permission="allow")
    async def refund(order: str, amount: float) -> str:
        ran.append(amount)
        return "refunded"

    rt = runtime_factory(agent)
    result = await rt.start("support", "refund", requester="U1")
    assert result.status is RunStatus.DONE
    assert result.text == "sorry"
    assert ran == []
    assert len(model.calls) == 2
    (message,) = tool_messages(model)
    assert message["tool_call_id"] == "call_1"
    assert message["content"].startswith("Error:")
    assert "invalid arguments for refund" in message["content"]
    assert needle in message["content"]
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(result.run_id)
    assert call.state is CallState.FAILED
    assert call.attempts == 0


async def test_arguments_that_are_not_json_become_an_error(runtime_factory: Any) -> None:
    payload = tool_call_reply(("refund", {}))
    payload["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{not json"
    model = ScriptedModel([payload, final_reply("sorry")])
    agent = Agent("support", "Be helpful.", model)
    ran: list[Any] = []

    @agent.tool
    async def refund(order: str) -> str:
        ran.append(order)
        return "refunded"

    rt = runtime_factory(agent)
    result = await rt.start("support", "refund", requester="U1")
    assert result.status is RunStatus.DONE
    assert ran == []
    (message,) = tool_messages(model)
    assert "not valid JSON" in message["content"]


async def test_unknown_tool_becomes_an_error(runtime_factory: Any) -> None:
    model = ScriptedModel([tool_call_reply(("nuke", {})), final_reply("sorry")])
    agent = Agent("support", "Be helpful.", model, [tool(ship)])
    rt = runtime_factory(agent)
    result = await rt.start("support", "go", requester="U1")
    assert result.status is RunStatus.DONE
    (message,) = tool_messages(model)
    assert "no tool named 'nuke'" in message["content"]


async def test_deny_permission_never_runs_and_tells_the_model(runtime_factory: Any) -> None:
    ran: list[str] = []
    model = ScriptedModel([tool_call_reply(("wipe", {"disk": "sda"})), final_reply("ok")])
    agent = Agent("ops", "i", model)

    @agent.tool(permission="deny")
    async def wipe(disk: str) -> str:
        ran.append(disk)
        return "wiped"

    rt = runtime_factory(agent)
    result = await rt.start("ops", "wipe", requester="U1")
    assert result.status is RunStatus.DONE
    assert ran == []
    (message,) = tool_messages(model)
    assert message["content"].startswith("Permission denied")


async def test_tool_exception_is_shown_to_the_model(runtime_factory: Any, store: Any) -> None:
    model = ScriptedModel([tool_call_reply(("boom", {})), final_reply("handled")])
    agent = Agent("a", "i", model)

    @agent.tool
    async def boom() -> str:
        raise RuntimeError("disk on fire")

    rt = runtime_factory(agent)
    result = await rt.start("a", "go", requester="U1")
    assert result.status is RunStatus.DONE
    (message,) = tool_messages(model)
    assert "RuntimeError: disk on fire" in message["content"]
    async with store.transaction() as tx:
        (call,) = await tx.calls_for_run(result.run_id)
    assert call.state is CallState.FAILED


def test_spec_is_an_openai_function() -> None:
    spec = tool(ship).spec()
    assert spec["type"] == "function"
    assert spec["function"]["description"] == "Ship an order."
    assert spec["function"]["parameters"] == tool(ship).parameters


async def test_model_receives_tool_specs(runtime_factory: Any) -> None:
    model = ScriptedModel([final_reply("hi")])
    agent = Agent("a", "i", model, [tool(ship)])
    await runtime_factory(agent).start("a", "hello")
    (request,) = model.calls
    assert [t["function"]["name"] for t in request.tools] == ["ship"]
    assert request.messages[0] == {"role": "system", "content": "i"}
    assert request.messages[-1] == {"role": "user", "content": "hello"}


async def test_typed_arguments_reach_the_function_typed_before_and_after_a_restart(
    tmp_path: Any,
) -> None:
    """A model, a date and a tuple: stored as JSON (they used to fail the store), and
    handed to the function as its signature declares, run at once or after approval
    by another process."""
    from runtime import Runtime
    from runtime.store.sql import SQLStore

    got: list[tuple[str, Any, Any, Any]] = []

    def make_agent(permission: str) -> Agent:
        model = ScriptedModel(
            [
                tool_call_reply(
                    (
                        "book",
                        {
                            "to": {"street": "Main", "city": "X"},
                            "on": "2026-01-02",
                            "boxes": [1, "2"],
                        },
                    )
                ),
                final_reply("ok"),
            ]
        )
        agent = Agent("a", "i", model)

        @agent.tool(permission=permission)
        async def book(to: Address, on: date, boxes: tuple[int, ...]) -> str:
            got.append((permission, to, on, boxes))
            return "booked"

        return agent

    expected = (Address(street="Main", city="X"), date(2026, 1, 2), (1, 2))
    store = SQLStore.sqlite(tmp_path / "signoff.db")
    await store.migrate()
    try:
        done = await Runtime(store, [make_agent("allow")]).start("a", "go", requester="U1")
        assert done.status is RunStatus.DONE, done.error
        parked = await Runtime(store, [make_agent("ask")]).start("a", "go", requester="U1")
        assert parked.status is RunStatus.AWAITING, parked.error
        (entry,) = parked.pending
        assert entry.call.arguments == {
            "to": {"street": "Main", "city": "X"},
            "on": "2026-01-02",
            "boxes": [1, 2],
        }
        later = Runtime(store, [make_agent("ask")])  # another process decides and resumes
        finished = await later.approve(entry.ticket_id, resume=True)
        assert finished.status is RunStatus.DONE, finished.error
    finally:
        await store.close()
    assert got == [("allow", *expected), ("ask", *expected)]


async def test_stored_arguments_that_no_longer_fit_are_refused_without_quoting_secrets() -> None:
    ran: list[Any] = []

    async def login(user: str, token: int) -> str:
        ran.append((user, token))
        return "in"

    built = tool(login, secret=["token"])
    with pytest.raises(ArgumentError) as info:
        await built.invoke({"user": "ana", "token": "hunter2-not-a-number"})
    assert "token" in str(info.value)
    assert "hunter2" not in str(info.value)
    assert ran == []
