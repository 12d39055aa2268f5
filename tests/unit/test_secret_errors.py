"""Problems with arguments are told without a secret's value: a secret argument that
fails its schema is named, never quoted, in the error the model, the flight recorder and
people read; and an approver's edit cannot probe a secret's value."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import AfterValidator

from runtime import (
    Agent,
    EditDenied,
    InvalidEdit,
    ModelRequest,
    NotEditable,
    RunStatus,
    ScriptedModel,
    Tool,
    ToolPermission,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.domain.edits import check_edit
from runtime.domain.tools import ArgumentError

SECRET = "sk-live-9f8e7d6c5b4a"
NUMBER = 987654321


def reporting_model(*calls: tuple[str, dict[str, Any]]) -> ScriptedModel:
    """Asks for `calls` once, then repeats every tool result it read."""

    def reply(request: ModelRequest) -> dict[str, Any]:
        if not any(m.get("role") == "assistant" for m in request.messages):
            return tool_call_reply(*calls)
        results = [str(m["content"]) for m in request.messages if m.get("role") == "tool"]
        return final_reply(" | ".join(results))

    return ScriptedModel(reply)


LOGIN_SCHEMA = {
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "token": {"type": "string", "pattern": "^tok_"},
    },
    "required": ["user", "token"],
}


async def _ok(args: dict[str, Any]) -> str:
    return "ok"


def _login(schema: dict[str, Any] = LOGIN_SCHEMA, **options: Any) -> Tool:
    return Tool.from_schema("login", "Log in.", schema, _ok, secret=["token"], **options)


async def test_a_secret_that_fails_its_schema_is_nowhere_in_what_people_and_the_model_read(
    runtime_factory: Any, store: Any
) -> None:
    model = reporting_model(("login", {"user": "ana", "token": SECRET}))
    agent = Agent("vault", "Log in.", model, tools=[_login()])
    runtime = runtime_factory(agent)

    done = await runtime.start("vault", "log in", requester="U1")

    assert done.status is RunStatus.DONE
    expected = "Error: invalid arguments for login: token: the secret value does not match '^tok_'"
    assert done.text == expected  # the model read the problem, and said it
    [failed] = [e for e in await runtime.events(done.run_id) if e["kind"] == "tool_failed"]
    assert failed["data"]["error"] == expected
    async with store.transaction() as tx:
        [call] = await tx.calls_for_run(done.run_id)
        run = await tx.get_run(done.run_id)
    assert call.result == expected and call.error == expected
    # What the model read back: its own call holds the value it sent, the result not.
    [read] = [m for m in model.calls[-1].messages if m.get("role") == "tool"]
    assert read["content"] == expected
    assert run is not None and SECRET not in f"{run.final_text} {run.error}"
    stored = [m for m in run.messages if m.get("role") in ("tool", "assistant")]
    assert stored[-1]["content"] == expected  # the model's reply quoted the result
    assert SECRET not in str([m for m in stored if m["role"] == "tool"])
    assert SECRET not in await runtime.export_events(done.run_id)
    assert SECRET not in str(await runtime.events(done.run_id))
    assert SECRET not in str(await runtime.get(done.run_id))


def starts_right(value: str) -> str:
    if not value.startswith("tok_"):
        raise ValueError(f"{value!r} is not a token")
    return value


def test_a_python_tools_own_validator_cannot_quote_a_secret() -> None:
    @tool(secret=["token"])
    async def login(user: str, token: Annotated[str, AfterValidator(starts_right)]) -> str:
        return "ok"

    with pytest.raises(ArgumentError) as raised:
        login.parse_arguments({"user": "ana", "token": SECRET})
    assert str(raised.value) == (
        "invalid arguments for login: token: the secret value is not valid (value_error)"
    )
    # A problem whose words come from the schema alone keeps them.
    _, [problem] = login.check_arguments({"user": "ana", "token": 5})
    assert problem == {"path": "token", "message": "Input should be a valid string"}


SECRET_SCHEMAS: list[tuple[dict[str, Any] | bool, Any, str, str]] = [
    ({"type": "integer"}, SECRET, "token", "is not of type 'integer'"),
    ({"enum": ["tok_a", "tok_b"]}, SECRET, "token", "is not one of ['tok_a', 'tok_b']"),
    ({"const": "tok_a"}, SECRET, "token", "is not 'tok_a'"),
    ({"maxLength": 4}, SECRET, "token", "is longer than 4 characters"),
    ({"minimum": 10**10}, NUMBER, "token", "is less than the minimum of 10000000000"),
    ({"multipleOf": 2}, NUMBER, "token", "is not a multiple of 2"),
    ({"not": {"type": "string"}}, SECRET, "token", "should not be valid under {'type': 'string'}"),
    (
        {"anyOf": [{"type": "integer"}, {"pattern": "^x"}]},
        SECRET,
        "token",
        "is not valid under any of the given schemas",
    ),
    (
        {"oneOf": [{"type": "string"}, {"minLength": 1}]},
        SECRET,
        "token",
        "is valid under more than one of the given schemas",
    ),
    ({"items": {"type": "integer"}}, [SECRET], "token.0", "is not of type 'integer'"),
    ({"uniqueItems": True}, [SECRET, SECRET], "token", "has non-unique elements"),
    ({"properties": {"k": {"pattern": "^x"}}}, {"k": SECRET}, "token.k", "does not match '^x'"),
]


@pytest.mark.parametrize(("token", "value", "path", "clause"), SECRET_SCHEMAS)
def test_a_secret_arguments_schema_problem_names_the_check_never_the_value(
    token: Any, value: Any, path: str, clause: str
) -> None:
    schema = {"type": "object", "properties": {"user": {"type": "string"}, "token": token}}
    parsed, problems = _login(schema).check_arguments({"user": "ana", "token": value})
    assert parsed is None
    assert problems == [{"path": path, "message": f"the secret value {clause}"}]
    # Without `secret` the same problem quotes the value, as jsonschema words it.
    plain = Tool.from_schema("login", "", schema, _ok)
    _, [quoted] = plain.check_arguments({"user": "ana", "token": value})
    assert quoted["path"] == path and quoted["message"] != problems[0]["message"]


def test_a_problem_that_lost_its_place_is_told_without_its_value() -> None:
    # jsonschema gives a false schema's error no path: it may be about any argument.
    schema = {"type": "object", "properties": {"user": {}, "token": False}}
    _, problems = _login(schema).check_arguments({"user": "ana", "token": SECRET})
    assert problems == [{"path": "", "message": "a value is not allowed here"}]


ROOT_SCHEMAS: list[tuple[dict[str, Any], str]] = [
    ({"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, "is not valid under any"),
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, "is not valid under any"),
    ({"not": {"required": ["token"]}}, "should not be valid under"),
    ({"maxProperties": 1}, "has more than 1 properties"),
    ({"minProperties": 5}, "has fewer than 5 properties"),
    ({"enum": [{"token": "tok_a"}]}, "is not one of"),
]


@pytest.mark.parametrize(("root", "clause"), ROOT_SCHEMAS)
def test_a_problem_with_the_whole_object_never_quotes_it_when_it_holds_a_secret(
    root: dict[str, Any], clause: str
) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {}, "token": {"type": "string"}},
        "additionalProperties": False,
        **root,
    }
    _, problems = _login(schema).check_arguments({"token": SECRET, "extra": 1})
    messages = sorted(p["message"] for p in problems)
    assert [p["path"] for p in problems] == ["", ""]
    assert messages[0] == "Additional properties are not allowed ('extra' was unexpected)"
    assert messages[1].startswith(f"the argument object {clause}")  # names, never values
    assert SECRET not in str(problems)


def test_a_refused_edit_of_a_schema_tool_with_a_root_any_of_does_not_quote_the_secret() -> None:
    schema = {
        "type": "object",
        "properties": {"env": {"type": "string"}, "token": {"type": "string"}},
        "anyOf": [{"properties": {"env": {"const": "staging"}}}, {"required": ["ticket"]}],
    }
    deploy = Tool.from_schema("deploy", "", schema, _ok, permission="ask", secret=["token"])
    target = ToolPermission(call_id="c1", tool="deploy", args={"env": "staging", "token": SECRET})
    with pytest.raises(InvalidEdit) as raised:
        check_edit(deploy, target, {"env": "production"})
    assert raised.value.errors == [
        {"path": "", "message": "the argument object is not valid under any of the given schemas"}
    ]
    assert SECRET not in str(raised.value)


# -- an edit cannot probe a secret -------------------------------------------------------

TOKEN = "tok_" + SECRET  # a secret that fits the schema
_GUESSES = [TOKEN, "tok_wrong-guess", "", None, 0]


@pytest.mark.parametrize("other", [{"user": 42}, {"user": "bo"}, {}], ids=["bad", "good", "none"])
def test_a_secret_given_in_an_edit_is_refused_the_same_whatever_the_guess(
    other: dict[str, Any],
) -> None:
    login = _login(permission="ask")
    target = ToolPermission(call_id="c1", tool="login", args={"user": "ana", "token": TOKEN})
    refusals = []
    for guess in _GUESSES:
        with pytest.raises(NotEditable) as raised:
            check_edit(login, target, {**other, "token": guess})
        refusals.append((str(raised.value), raised.value.errors))
    assert all(refusal == refusals[0] for refusal in refusals), refusals
    assert refusals[0][1] == [{"path": "token", "message": "secret: it is never shown or changed"}]
    # Its mask keeps it, as a form sends it back.
    if other != {"user": 42}:
        edit = check_edit(login, target, {**other, "token": "••••••"})
        assert edit.args["token"] == TOKEN


async def test_a_right_guess_through_approve_changes_nothing(runtime_factory: Any) -> None:
    ran: list[dict[str, Any]] = []

    async def invoke(args: dict[str, Any]) -> str:
        ran.append(args)
        return "ok"

    login = Tool.from_schema("login", "", LOGIN_SCHEMA, invoke, permission="ask", secret=["token"])
    args = {"user": "ana", "token": TOKEN}
    agent = Agent("vault", "Log in.", reporting_model(("login", args)), tools=[login])
    runtime = runtime_factory(agent)
    parked = await runtime.start("vault", "log in", requester="U1")
    for guess in (args["token"], "tok_wrong"):
        with pytest.raises(NotEditable):
            await runtime.approve(parked.pending[0], args={"user": "bo", "token": guess})
    assert ran == []
    done = await runtime.approve(parked.pending[0], resume=True)
    assert done.status is RunStatus.DONE and ran == [args]


def test_a_permission_rule_failing_on_an_edit_does_not_quote_a_secret() -> None:
    def rule(args: dict[str, Any]) -> str:
        if args["user"] == "bo":
            raise ValueError(f"no token {args['token']} for bo")
        return "ask"

    login = _login(permission=rule)
    target = ToolPermission(call_id="c1", tool="login", args={"user": "ana", "token": TOKEN})
    with pytest.raises(EditDenied) as raised:
        check_edit(login, target, {"user": "bo"})
    assert str(raised.value) == (
        "the permission rule of login failed on the changed arguments: ValueError"
    )
