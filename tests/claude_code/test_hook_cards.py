"""A Claude Code call whose rule asks becomes a card in Slack, in Discord or in the
console, and what a person does there reaches the waiting hook — the HTTP hook route and
the ``signoff hook claude-code`` command alike: Allow as ``allow``, Deny with a reason as
``deny`` with it, an edited command as ``allow`` with ``updatedInput``, a grant for the
rest of the session as ``allow`` for the session's next call without a card, and a
deadline nobody met as ``deny`` naming it. Someone who may not decide is refused and
changes nothing."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.claude_code.cardbed import (
    ALICE,
    DEADLINE_SECONDS,
    SLACK_APPROVER,
    Card,
    EdgeName,
    Entry,
    Served,
    serving,
)
from tests.claude_code.conftest import pre_tool_use

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0
"""The longest a test waits for the hook's answer once the card was decided."""
PUSH = "git push origin main"
APPROVERS: dict[str, str] = {
    "slack": f"<@{SLACK_APPROVER}>",
    "discord": f"<@{ALICE.id}>",
    "console": "U-carol",
}
"""How each edge names the approver who decided."""


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP clients honour proxy variables even for 127.0.0.1; no stray Slack settings."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith("SLACK_") or upper in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["slack", "discord", "console"])
def edge(request: pytest.FixtureRequest) -> EdgeName:
    name: EdgeName = request.param
    return name


@pytest.fixture(params=["route", "command"])
def entry(request: pytest.FixtureRequest) -> Entry:
    name: Entry = request.param
    return name


@pytest.fixture
async def signoff(edge: EdgeName, entry: Entry, tmp_path: Path) -> AsyncIterator[Served]:
    async with serving(edge, entry, tmp_path) as served:
        yield served


async def asked(
    signoff: Served, hook_input: dict[str, Any], **options: Any
) -> tuple[asyncio.Task[dict[str, Any]], Card]:
    """The hook asking about `hook_input` (waiting), and the card it made."""
    waiting = asyncio.create_task(signoff.hook(hook_input, **options))
    try:
        card = await signoff.edge.card()
    except BaseException:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        raise
    assert "Bash" in card.text, card.text
    assert hook_input["tool_input"]["command"] in card.text, card.text
    return waiting, card


async def answer_of(waiting: asyncio.Task[dict[str, Any]]) -> dict[str, Any]:
    return await asyncio.wait_for(waiting, WAIT)


async def test_allow_reaches_the_hook_and_a_stranger_cannot_decide(signoff: Served) -> None:
    hook_input = pre_tool_use(command=PUSH, description="Push the branch")
    waiting, card = await asked(signoff, hook_input)

    await signoff.edge.stranger_is_refused(card)
    await signoff.settled()  # a (wrong) apply would be done by now
    (pending,) = await signoff.approvals(hook_input["session_id"])
    assert pending["status"] == "pending" and not waiting.done()

    await signoff.edge.allow(card)
    answer = await answer_of(waiting)

    assert answer["permissionDecision"] == "allow", answer
    assert "updatedInput" not in answer
    assert pending["approval_id"] in answer["permissionDecisionReason"]
    (decided,) = await signoff.approvals(hook_input["session_id"])
    assert (decided["status"], decided["basis"]) == ("allowed", "decision")
    assert decided["decided_via"] == signoff.edge.name
    shown = await signoff.edge.outcome(card, decided["approval_id"])
    assert APPROVERS[signoff.edge.name] in shown, shown
    assert await signoff.edge.count() == 1


async def test_deny_with_a_reason_reaches_the_hook_with_the_reason(signoff: Served) -> None:
    hook_input = pre_tool_use(command="git push --force origin main")
    waiting, card = await asked(signoff, hook_input)

    await signoff.edge.deny(card, "no force pushes to main")
    answer = await answer_of(waiting)

    assert answer["permissionDecision"] == "deny", answer
    assert "no force pushes to main" in answer["permissionDecisionReason"]
    (decided,) = await signoff.approvals(hook_input["session_id"])
    assert (decided["status"], decided["reason"]) == ("denied", "no force pushes to main")
    shown = await signoff.edge.outcome(card, decided["approval_id"])
    assert "no force pushes to main" in shown, shown


async def test_an_edited_command_reaches_the_hook_as_updated_input(signoff: Served) -> None:
    hook_input = pre_tool_use(command="git push --force origin main", description="Push")
    waiting, card = await asked(signoff, hook_input)

    await signoff.edge.edit(card, "command", "git push origin main")
    answer = await answer_of(waiting)

    assert answer["permissionDecision"] == "allow", answer
    assert answer["updatedInput"] == {"command": "git push origin main", "description": "Push"}
    assert "changed arguments" in answer["permissionDecisionReason"]
    (decided,) = await signoff.approvals(hook_input["session_id"])
    shown = await signoff.edge.outcome(card, decided["approval_id"])
    assert "git push origin main" in shown, shown  # what the person changed it to


async def test_a_grant_allows_the_sessions_next_call_at_once_and_not_another_sessions(
    signoff: Served,
) -> None:
    session = "claude-session-granted"
    waiting, card = await asked(signoff, pre_tool_use(session=session, command=PUSH))

    await signoff.edge.grant(card)
    first = await answer_of(waiting)
    assert first["permissionDecision"] == "allow", first

    # Nobody is asked: without the grant, no wait and on_timeout=deny would say deny.
    later = pre_tool_use(session=session, command="git push origin release")
    second = await signoff.hook(later, wait=0, on_timeout="deny")
    assert second["permissionDecision"] == "allow", second
    elsewhere = pre_tool_use(session="claude-session-other", command="git push origin release")
    other = await signoff.hook(elsewhere, wait=0, on_timeout="defer")
    assert other["permissionDecision"] == "defer", other

    approvals = await signoff.approvals(session)
    assert sorted((a["status"], a["basis"]) for a in approvals) == [
        ("allowed", "decision"),
        ("allowed", "grant"),
    ]
    granted = next(a for a in approvals if a["basis"] == "grant")
    assert granted["ticket_id"] is None
    # The other session's call has a card of its own; the granted call has none.
    other_card = await signoff.edge.card(2)
    assert "git push origin release" in other_card.text
    await signoff.settled()
    assert await signoff.edge.count() == 2


async def test_a_deadline_nobody_meets_reaches_the_hook_as_a_denial_naming_it(
    signoff: Served,
) -> None:
    hook_input = pre_tool_use(command=PUSH)
    waiting, card = await asked(signoff, hook_input)
    assert "Deadline" in card.text, card.text

    signoff.clock.advance(DEADLINE_SECONDS + 1)
    assert len(await signoff.service.runtime.expire_overdue()) == 1
    answer = await answer_of(waiting)

    assert answer["permissionDecision"] == "deny", answer
    assert "deadline" in answer["permissionDecisionReason"]
    (expired,) = await signoff.approvals(hook_input["session_id"])
    assert (expired["status"], expired["basis"]) == ("denied", "expiry")
    shown = await signoff.edge.outcome(card, expired["approval_id"])
    assert "xpired" in shown, shown
