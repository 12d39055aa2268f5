"""The agent's rules decide an external approval as they decide any call: allow, ask,
deny, conditions on the arguments; undeclared agents, schemas and overrides."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from approvals_kit import RuntimeFactory, load_agents

from runtime import (
    Actor,
    ApprovalRefused,
    ApprovalRequest,
    ConfigurationError,
    InvalidApproval,
    Runtime,
)

BOT = Actor(id="bot")


@pytest.fixture
def rt(runtime_factory: RuntimeFactory, tmp_path: Path) -> Runtime:
    return runtime_factory(*load_agents(tmp_path))


async def ask(rt: Runtime, tool: str, args: dict[str, object], **more: object) -> object:
    return await rt.request_approval(
        ApprovalRequest("billing", tool, args, **more),  # type: ignore[arg-type]
        actor=BOT,
    )


@pytest.mark.parametrize(
    ("tool", "args", "status", "reason"),
    [
        ("lookup_invoice", {"id": "I-1"}, "allowed", "permission allow"),
        ("refund", {"amount": 5}, "allowed", "amount <= 10"),
        ("refund", {"amount": 50}, "pending", None),
        ("refund", {"amount": 5000}, "denied", "amount > 1000"),
        ("drop_db", {}, "denied", "permission deny"),
        ("wire", {"currency": "EUR"}, "allowed", None),
        ("wire", {"currency": "USD"}, "pending", None),
        ("anything_else", {"x": 1}, "pending", None),
    ],
)
async def test_rules_decide(
    rt: Runtime, tool: str, args: dict[str, object], status: str, reason: str | None
) -> None:
    answer = await ask(rt, tool, args)
    assert answer.status == status, answer  # type: ignore[attr-defined]
    if status == "pending":
        assert answer.ticket_id is not None and answer.basis is None  # type: ignore[attr-defined]
    else:
        assert answer.basis == "rule" and answer.ticket_id is None  # type: ignore[attr-defined]
        assert answer.decided_at is not None  # type: ignore[attr-defined]
    if reason is not None:
        assert reason in (answer.reason or ""), answer  # type: ignore[attr-defined]


async def test_answer_fields(rt: Runtime) -> None:
    answer = await rt.request_approval(
        ApprovalRequest(
            "billing",
            "refund",
            {"amount": 50, "card": "4242"},
            description="customer asked twice",
            session_id="conv-1",
            on_behalf_of="alice",
        ),
        actor=BOT,
        idempotency_key=None,
    )
    assert answer.status == "pending"
    assert (answer.agent, answer.tool, answer.session_id) == ("billing", "refund", "conv-1")
    assert (answer.requester, answer.requested_by) == ("alice", "bot")
    assert answer.arguments == answer.requested_arguments == {"amount": 50, "card": "4242"}
    assert answer.secret == ("card",)
    ticket = await rt.ticket(answer.ticket_id or "")
    assert ticket.requester == "alice"
    assert ticket.target.reason == "customer asked twice"  # type: ignore[union-attr]
    run = await rt.get(answer.approval_id)
    assert run.thread_id == "ext:billing:conv-1"
    # People never see the secret: not in the run's input, not on the card.
    assert "4242" not in run.input
    async with rt.store.transaction() as tx:
        outbox = await tx.outbox_for_run(answer.approval_id)
    card = next(item for item in outbox if item.kind == "approval_requested")
    assert card.payload["external"] is True
    assert card.payload["target"]["args"]["card"] != "4242"
    assert card.payload["target"]["reason"] == "customer asked twice"


async def test_request_secret_masks_more(rt: Runtime) -> None:
    answer = await ask(rt, "refund", {"amount": 50, "otp": "991"}, secret=("otp",))
    assert set(answer.secret) == {"card", "otp"}  # type: ignore[attr-defined]
    async with rt.store.transaction() as tx:
        outbox = await tx.outbox_for_run(answer.approval_id)  # type: ignore[attr-defined]
    card = next(item for item in outbox if item.kind == "approval_requested")
    assert card.payload["target"]["args"]["otp"] != "991"


async def test_undeclared_agents(runtime_factory: RuntimeFactory, tmp_path: Path) -> None:
    agents = load_agents(tmp_path)
    anyone = runtime_factory(*agents, undeclared_agents="any")
    answer = await anyone.request_approval(
        ApprovalRequest("helpdesk", "reset_password", {"user": "x"}), actor=BOT
    )
    # Every tool asks, and the requester decides, in the console.
    assert answer.status == "pending"
    ticket = await anyone.ticket(answer.ticket_id or "")
    assert ticket.approvers == () and ticket.may_decide(BOT)
    run = await anyone.get(answer.approval_id)
    assert run.origin["platform"] == "console"

    declared = runtime_factory(*agents, undeclared_agents="declared")
    with pytest.raises(ApprovalRefused):
        await declared.request_approval(ApprovalRequest("helpdesk", "x", {}), actor=BOT)
    # A declared one is served either way.
    ok = await declared.request_approval(ApprovalRequest("billing", "lookup_a", {}), actor=BOT)
    assert ok.status == "allowed"
    with pytest.raises(InvalidApproval):
        await anyone.request_approval(ApprovalRequest("bad name!", "x", {}), actor=BOT)


async def test_own_agents_are_not_external(runtime_factory: RuntimeFactory) -> None:
    from runtime import Agent, ScriptedModel, final_reply

    own = Agent("ops", "x", ScriptedModel([final_reply("ok")]))
    rt = runtime_factory(own, undeclared_agents="any")
    with pytest.raises(ApprovalRefused):
        await rt.request_approval(ApprovalRequest("ops", "deploy", {}), actor=BOT)


async def test_external_agents_do_not_start_runs(rt: Runtime) -> None:
    with pytest.raises(ConfigurationError, match="external"):
        await rt.start("billing", "hello")


SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1}, "card": {"type": "string"}},
    "required": ["amount"],
}


async def test_schema(rt: Runtime) -> None:
    fits = await ask(rt, "refund", {"amount": 50}, schema=SCHEMA)
    assert fits.status == "pending"  # type: ignore[attr-defined]
    with pytest.raises(InvalidApproval) as caught:
        await ask(rt, "refund", {"amount": 0, "card": 4242}, schema=SCHEMA)
    assert {p["path"] for p in caught.value.problems} == {"amount", "card"}
    # A secret value is never quoted back.
    assert "4242" not in str(caught.value)
    with pytest.raises(InvalidApproval, match="not a valid JSON schema"):
        await ask(rt, "refund", {"amount": 1}, schema={"type": "no-such-type"})
    async with rt.store.transaction() as tx:
        runs = await tx.list_runs(limit=10)
    assert len(runs) == 1, "a refused request starts nothing"


async def test_overrides(runtime_factory: RuntimeFactory, tmp_path: Path, clock: object) -> None:
    rt = runtime_factory(*load_agents(tmp_path))
    chosen = await ask(
        rt, "refund", {"amount": 50}, approvers=("dave",), deadline=timedelta(minutes=5)
    )
    ticket = await rt.ticket(chosen.ticket_id)  # type: ignore[attr-defined]
    assert ticket.approvers == ("dave",)
    assert ticket.deadline is not None
    assert ticket.deadline - ticket.created_at == timedelta(minutes=5)
    assert chosen.deadline == ticket.deadline  # type: ignore[attr-defined]
    # "strict" allows no overrides.
    for more in ({"approvers": ("dave",)}, {"deadline": timedelta(minutes=5)}):
        with pytest.raises(ApprovalRefused):
            await rt.request_approval(ApprovalRequest("strict", "x", {}, **more), actor=BOT)  # type: ignore[arg-type]
    with pytest.raises(InvalidApproval):
        await ask(rt, "refund", {"amount": 50}, deadline=timedelta(seconds=-1))
    with pytest.raises(InvalidApproval):
        await ask(rt, "refund", {"amount": 50}, approvers=())


async def test_bad_fields(rt: Runtime) -> None:
    for bad in (
        ApprovalRequest("billing", "", {}),
        ApprovalRequest("billing", "x" * 201, {}),
        ApprovalRequest("billing", "refund", [1, 2]),  # type: ignore[arg-type]
        ApprovalRequest("billing", "refund", {}, session_id=""),
        ApprovalRequest("billing", "refund", {}, session_id="s" * 201),
    ):
        with pytest.raises(InvalidApproval):
            await rt.request_approval(bad, actor=BOT)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[agents.x]\nexternal = true\nmodel = "openai:gpt-4.1"\n',
            "agents.x (line 1): an external agent runs elsewhere: it has no model",
        ),
        (
            '[agents.x]\nexternal = true\ninstructions = "hi"\ntools = ["a:b"]\n',
            "it has no instructions, tools",
        ),
        (
            '[agents.x]\nexternal = true\n[agents.x.rules.t]\nreplay_policy = "safe"\n',
            "replay_policy and hide do not apply",
        ),
        (
            '[agents.x]\nexternal = true\napprovals = { platform = "slack" }\n',
            "slack approvals need a 'channel' id",
        ),
        ('[agents.x]\nexternal = true\noverrides = ["model"]\n', "agents.x.overrides[0]"),
        ("[agents.x]\nexternal = true\nwhatever = 1\n", "agents.x.whatever (line 3): unknown key"),
    ],
)
def test_agents_file_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_agents(tmp_path, text)
    assert message in str(caught.value)
