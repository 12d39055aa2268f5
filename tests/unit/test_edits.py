"""Approve with edits: an approver changes a call's arguments before allowing it.

The edit is validated against the tool's schema, its ``editable`` option and its
permission rule before anything changes; once applied the tool runs with the changed
arguments, the flight recorder and the notification say what changed, and the model reads
a note in front of the result.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    Allow,
    CallState,
    ConfigurationError,
    EditDenied,
    InputData,
    InputRequest,
    InvalidEdit,
    NotEditable,
    RefusalReason,
    Refused,
    ResolutionError,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    args_digest,
    classify,
    current_tool_context,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.domain.edits import check_edit, model_note

SECRET = "sk-live-123456"


def refund_rule(args: dict[str, Any]) -> str:
    """Over 5000 never; over 100 asks; the rest runs."""
    if args["amount"] > 5000:
        return "deny"
    return "ask" if args["amount"] > 100 else "allow"


def exploding_rule(args: dict[str, Any]) -> str:
    """Asks for the model's call, and cannot judge a memo of "boom"."""
    if args.get("memo") == "boom":
        raise KeyError("memo")
    return "ask"


class Refunds:
    """A `support` agent whose model asks for one refund, then repeats what it read."""

    def __init__(self, runtime_factory: Any, **options: Any) -> None:
        self.ran: list[dict[str, Any]] = []
        args = {"order_id": "A1001", "amount": 249.0, "memo": "dup", "api_key": SECRET}

        def reply(request: Any) -> dict[str, Any]:
            if not any(m["role"] == "assistant" for m in request.messages):
                return tool_call_reply(("refund", args))
            return final_reply(_results(request))

        self.model = ScriptedModel(reply)
        self.agent = Agent("support", "Refund.", self.model)
        settings = {"permission": refund_rule, "secret": ["api_key"], **options}

        @self.agent.tool(replay_policy="idempotent", **settings)
        async def refund(order_id: str, amount: float, memo: str, api_key: str) -> str:
            self.ran.append({"order_id": order_id, "amount": amount, "memo": memo, "key": api_key})
            return f"refunded {amount} on {order_id}"

        self.runtime = runtime_factory(self.agent)

    async def park(self) -> Any:
        result = await self.runtime.start("support", "refund A1001", requester="U1")
        assert result.status is RunStatus.AWAITING
        return result

    def tool_messages(self) -> list[str]:
        return [str(m["content"]) for m in self.model.calls[-1].messages if m["role"] == "tool"]


def _results(request: Any) -> str:
    return " | ".join(str(m["content"]) for m in request.messages if m["role"] == "tool")


async def _everything(store: Any, run_id: str) -> tuple[Any, ...]:
    async with store.transaction() as tx:
        run = await tx.get_run(run_id)
        return (
            run,
            await tx.calls_for_run(run_id),
            await tx.tickets_for_run(run_id),
            await tx.events(run_id),
            await tx.outbox_for_run(run_id),
        )


# -- an edit that fits ------------------------------------------------------------------


async def test_an_edited_call_runs_with_the_new_arguments_and_everyone_is_told(
    runtime_factory: Any, store: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    entry = parked.pending[0]
    assert entry.editable == ("order_id", "amount", "memo")  # never the secret one

    ana = Actor(id="U1", name="ana")
    done = await app.runtime.approve(entry, actor=ana, args={"amount": 200}, resume=True)

    assert done.status is RunStatus.DONE
    assert app.ran == [{"order_id": "A1001", "amount": 200.0, "memo": "dup", "key": SECRET}]
    # The model reads that the call ran with other arguments, and which.
    [result] = app.tool_messages()
    assert result.startswith("[Note: before allowing this call, ana changed its arguments")
    assert "amount 249.0 → 200.0" in result
    assert '"amount": 200.0' in result and SECRET not in result
    assert result.endswith("refunded 200.0 on A1001")

    async with store.transaction() as tx:
        [call] = await tx.calls_for_run(parked.run_id)
        [ticket] = await tx.tickets_for_run(parked.run_id)
        events = await tx.events(parked.run_id)
        outbox = await tx.outbox_for_run(parked.run_id)
    assert call.args["amount"] == 200.0 and call.args["api_key"] == SECRET
    assert call.edit is not None and call.edit["summary"] == "amount 249.0 → 200.0"
    assert call.edit["args"]["api_key"] == "••••••"
    assert ticket.decision == Allow(args={"amount": 200})
    original = {"order_id": "A1001", "amount": 249.0, "memo": "dup", "api_key": SECRET}
    [decided] = [e for e in events if e.kind == "ticket_decided"]
    assert decided.data["edit"]["changes"] == [{"name": "amount", "before": 249.0, "after": 200.0}]
    assert decided.data["edit"]["by"] == "ana"
    assert decided.data["edit"]["previous_digest"] == args_digest(original)
    assert decided.data["args_digest"] == args_digest({**original, "amount": 200.0})
    assert decided.data["edit"]["digest"] == decided.data["args_digest"]
    assert decided.data["args"]["amount"] == 200.0 and decided.data["args"]["api_key"] == "••••••"
    [note] = [o for o in outbox if o.kind == "decided"]
    assert note.payload["edit"]["summary"] == "amount 249.0 → 200.0"
    assert SECRET not in str([e.data for e in events]) + str([o.payload for o in outbox])


async def test_a_plain_allow_records_the_digest_of_the_arguments_it_binds(
    runtime_factory: Any,
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    await app.runtime.approve(parked.pending[0], resume=True)
    [decided] = [
        e for e in await app.runtime.events(parked.run_id) if e["kind"] == "ticket_decided"
    ]
    original = {"order_id": "A1001", "amount": 249.0, "memo": "dup", "api_key": SECRET}
    assert decided["data"]["args_digest"] == args_digest(original)
    assert "edit" not in decided["data"]
    assert app.tool_messages() == ["refunded 249.0 on A1001"]  # no note without an edit


async def test_an_edit_that_changes_nothing_is_a_plain_allow(runtime_factory: Any) -> None:
    app = Refunds(runtime_factory, editable=False)
    parked = await app.park()
    same = {"amount": 249.0, "api_key": "••••••", "order_id": "A1001"}
    await app.runtime.approve(parked.pending[0], args=same, resume=True)
    assert app.ran[0]["amount"] == 249.0 and app.ran[0]["key"] == SECRET
    assert app.tool_messages() == ["refunded 249.0 on A1001"]


async def test_the_rule_says_allow_or_ask_again_and_this_approval_stands(
    runtime_factory: Any,
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    # 50 would run at once, 300 would ask: either way this approval is the decision.
    await app.runtime.approve(parked.pending[0], args={"amount": 50, "memo": "partial"})
    result = await app.runtime.resume(parked.run_id)
    assert result.status is RunStatus.DONE
    assert app.ran[0]["amount"] == 50.0 and app.ran[0]["memo"] == "partial"

    other = Refunds(runtime_factory)
    again = await other.park()
    await other.runtime.approve(again.pending[0], args={"amount": 300}, resume=True)
    assert other.ran[0]["amount"] == 300.0
    async with other.runtime.store.transaction() as tx:
        tickets = await tx.tickets_for_run(again.run_id)
    assert [t.status for t in tickets] == [TicketStatus.DECIDED]  # no second ticket


# -- refusals: nothing changes --------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "changes", "error", "reason", "path"),
    [
        ({}, {"amount": "lots"}, InvalidEdit, RefusalReason.INVALID_EDIT, "amount"),
        ({}, {"amount": None}, InvalidEdit, RefusalReason.INVALID_EDIT, "amount"),
        ({}, {"currency": "EUR"}, InvalidEdit, RefusalReason.INVALID_EDIT, "currency"),
        ({}, {"amount": 9000}, EditDenied, RefusalReason.EDIT_DENIED, None),
        ({}, {"api_key": "sk-other"}, NotEditable, RefusalReason.NOT_EDITABLE, "api_key"),
        ({"editable": False}, {"amount": 200}, NotEditable, RefusalReason.NOT_EDITABLE, "amount"),
        (
            {"editable": ("amount",)},
            {"order_id": "A9"},
            NotEditable,
            RefusalReason.NOT_EDITABLE,
            "order_id",
        ),
        (
            {"permission": exploding_rule},
            {"memo": "boom"},
            EditDenied,
            RefusalReason.EDIT_DENIED,
            None,
        ),
    ],
)
async def test_a_refused_edit_changes_nothing(
    runtime_factory: Any,
    store: Any,
    options: dict[str, Any],
    changes: dict[str, Any],
    error: type[Exception],
    reason: RefusalReason,
    path: str | None,
) -> None:
    app = Refunds(runtime_factory, **options)
    parked = await app.park()
    before = await _everything(store, parked.run_id)
    with pytest.raises(error) as raised:
        await app.runtime.approve(parked.pending[0], args=changes, resume=True)
    assert await _everything(store, parked.run_id) == before
    assert app.ran == []
    refusal = classify(raised.value, parked.pending[0].ticket)  # type: ignore[arg-type]
    assert refusal.reason is reason
    if path is not None:
        assert [e["path"] for e in refusal.errors] == [path]
    assert SECRET not in str(raised.value)
    # The same ticket is still open and takes a good decision afterwards.
    await app.runtime.approve(parked.pending[0], resume=True)
    assert len(app.ran) == 1


async def test_only_permission_requests_take_edits(runtime_factory: Any, store: Any) -> None:
    model = ScriptedModel([tool_call_reply(("plan", {"service": "api"})), final_reply("ok")])
    agent = Agent("release", "Plan.", model)

    @agent.tool(permission="allow")
    async def plan(service: str) -> Any:
        if current_tool_context().answer is None:
            return InputRequest(
                "How?", {"type": "object", "properties": {"how": {"type": "string"}}}
            )
        return "planned"

    runtime = runtime_factory(agent)
    parked = await runtime.start("release", "plan", requester="U1")
    before = await _everything(store, parked.run_id)
    with pytest.raises(ResolutionError):
        await runtime.approve(parked.pending[0], args={"service": "db"})
    assert await _everything(store, parked.run_id) == before
    assert runtime.edit_form(parked.pending[0].ticket) is None
    await runtime.answer(parked.pending[0], {"how": "slowly"}, resume=True)
    assert (await runtime.get(parked.run_id)).status is RunStatus.DONE
    assert InputData(data={"how": "slowly"}).kind == "input"


# -- the chat path: checked when stored, checked again when applied ---------------------


async def test_a_stored_edit_is_checked_before_the_ack_and_applied_once(
    runtime_factory: Any,
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    ticket = parked.pending[0].ticket
    bad = await app.runtime.accept(
        ticket.ticket_id,
        Allow(args={"amount": 9000}),
        Actor(id="U1", platform="slack"),
        correlation=ticket.correlation,
        source="slack",
        delivery_id="d1",
    )
    assert isinstance(bad, Refused) and bad.refusal.reason is RefusalReason.EDIT_DENIED
    assert await app.runtime.apply_received() == []  # nothing was stored

    good = await app.runtime.accept(
        ticket.ticket_id,
        Allow(args={"amount": 120.5}),
        Actor(id="U1", platform="slack", name="ana"),
        correlation=ticket.correlation,
        source="slack",
        delivery_id="d2",
    )
    assert not isinstance(good, Refused)
    [outcome] = await app.runtime.apply_received()
    assert outcome.applied
    await app.runtime.resume(parked.run_id)
    assert [r["amount"] for r in app.ran] == [120.5]


# -- replays use the edited arguments ----------------------------------------------------


class Abandon(BaseException):
    """The worker vanished mid-call."""


async def test_a_replayed_call_runs_with_the_edited_arguments(
    runtime_factory: Any, clock: Any
) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    await app.runtime.approve(parked.pending[0], args={"amount": 180})

    def crash(point: str, info: dict[str, Any]) -> None:
        if point == "tool_returned":
            raise Abandon(point)

    doomed = runtime_factory(app.agent, checkpoint=crash, lease_seconds=30)
    with pytest.raises(Abandon):
        await doomed.resume(parked.run_id)
    clock.advance(31)
    [recovered] = await runtime_factory(app.agent, lease_seconds=30).recover()
    assert recovered.status is RunStatus.DONE
    assert [r["amount"] for r in app.ran] == [180.0, 180.0]  # idempotent: replayed as edited
    assert "amount 249.0 → 180.0" in app.tool_messages()[0]


# -- the form an edge shows ----------------------------------------------------------------


async def test_the_edit_form_prefills_current_values_and_never_a_secret(
    runtime_factory: Any,
) -> None:
    app = Refunds(runtime_factory, editable=("amount", "memo"))
    parked = await app.park()
    form = app.runtime.edit_form(parked.pending[0].ticket)
    assert form is not None
    assert [f.name for f in form.fields] == ["amount", "memo"]
    assert all(not f.required for f in form.fields)  # an empty field keeps its value
    assert form.values == {"amount": 249.0, "memo": "dup"}

    closed = Refunds(runtime_factory, editable=False)
    assert closed.runtime.edit_form((await closed.park()).pending[0].ticket) is None


def test_check_edit_is_pure_and_lists_every_change_in_schema_order() -> None:
    @tool(permission="ask")
    async def move(src: str, dst: str, count: int = 1) -> str:
        return "moved"

    from runtime import ToolPermission

    target = ToolPermission(call_id="c1", tool="move", args={"src": "a", "dst": "b", "count": 1})
    edit = check_edit(move, target, {"count": "3", "dst": "c"})
    assert edit.args == {"src": "a", "dst": "c", "count": 3}
    assert edit.summary == 'dst "b" → "c"; count 1 → 3'
    assert edit.previous_digest == args_digest(target.args)
    assert edit.digest == args_digest(edit.args) != edit.previous_digest
    note = model_note(edit.record("ana", edit.args))
    assert note == (
        '[Note: before allowing this call, ana changed its arguments (dst "b" → "c"; '
        'count 1 → 3); it ran with {"src": "a", "dst": "c", "count": 3}.]'
    )
    assert target.args == {"src": "a", "dst": "b", "count": 1}  # untouched


@pytest.mark.parametrize(
    ("editable", "secret", "message"),
    [
        (("nope",), (), "editable names unknown arguments nope"),
        (("token",), ("token",), "secret arguments cannot be editable: token"),
        ("amount", (), "editable must be True, False or a list"),
    ],
)
def test_bad_editable_options_are_configuration_errors(
    editable: Any, secret: tuple[str, ...], message: str
) -> None:
    async def pay(amount: float, token: str) -> str:
        return "paid"

    with pytest.raises(ConfigurationError, match=message):
        tool(permission="ask", editable=editable, secret=secret)(pay)


def test_schema_tools_take_editable_too() -> None:
    from runtime import Tool

    schema = {
        "type": "object",
        "properties": {"env": {"type": "string"}, "replicas": {"type": "integer"}},
        "required": ["env"],
    }

    async def invoke(args: dict[str, Any]) -> str:
        return "ok"

    deploy = Tool.from_schema("deploy", "Deploy.", schema, invoke, editable=["replicas"])
    assert deploy.editable_arguments() == ("replicas",)
    target_args = {"env": "prod", "replicas": 3}
    from runtime import ToolPermission

    target = ToolPermission(call_id="c", tool="deploy", args=target_args)
    with pytest.raises(InvalidEdit) as raised:
        check_edit(deploy, target, {"replicas": "many"})
    assert [e["path"] for e in raised.value.errors] == ["replicas"]
    assert check_edit(deploy, target, {"replicas": 5}).args == {"env": "prod", "replicas": 5}
    with pytest.raises(ConfigurationError):
        Tool.from_schema("deploy", "Deploy.", schema, invoke, editable=["nope"])


async def test_the_call_state_moves_as_for_any_allow(runtime_factory: Any, store: Any) -> None:
    app = Refunds(runtime_factory)
    parked = await app.park()
    await app.runtime.approve(parked.pending[0], args={"memo": "partial refund"})
    async with store.transaction() as tx:
        [call] = await tx.calls_for_run(parked.run_id)
    assert call.state is CallState.APPROVED
    assert call.args["memo"] == "partial refund"
