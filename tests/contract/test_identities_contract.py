"""One person across edges, over every store: identity links, link codes, and four-eyes
and approver checks that see every id of the person deciding."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runtime import (
    Actor,
    Agent,
    Allow,
    ManualClock,
    RunStatus,
    Runtime,
    ScriptedModel,
    SequentialIds,
    TicketStatus,
    ToolPermission,
    Unauthorized,
    final_reply,
    tool_call_reply,
)
from runtime.domain.identity import code_digest
from runtime.store.base import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def test_links_round_trip_and_replace(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.link_identity("slack:U1", "oidc:ana@corp", "email", at(0))
        await tx.link_identity("discord:42", "oidc:ana@corp", "code", at(1))
        await tx.link_identity("slack:U2", "oidc:bo@corp", "file", at(2))
    async with store.transaction() as tx:
        assert await tx.person_of("slack:U1") == "oidc:ana@corp"
        assert await tx.person_of("oidc:ana@corp") is None
        assert await tx.identities_of("oidc:ana@corp") == ["discord:42", "slack:U1"]
        await tx.link_identity("slack:U1", "oidc:bo@corp", "file", at(3))
    async with store.transaction() as tx:
        assert await tx.identities_of("oidc:ana@corp") == ["discord:42"]
        assert await tx.identities_of("oidc:bo@corp") == ["slack:U1", "slack:U2"]
        assert await tx.unlink_identity("slack:U1") is True
        assert await tx.unlink_identity("slack:U1") is False
    async with store.transaction() as tx:
        assert await tx.person_of("slack:U1") is None


async def test_a_person_and_their_identities_are_read_together(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.link_identity("slack:U1", "oidc:ana@corp", "email", at(0))
        await tx.link_identity("discord:42", "oidc:ana@corp", "code", at(1))
        await tx.link_identity("slack:U2", "oidc:bo@corp", "file", at(2))
    async with store.transaction() as tx:
        linked = ["discord:42", "slack:U1"]
        assert await tx.person_with_identities("slack:U1") == ("oidc:ana@corp", linked)
        assert await tx.person_with_identities("discord:42") == ("oidc:ana@corp", linked)
        assert await tx.person_with_identities("oidc:ana@corp") == (None, linked)
        assert await tx.person_with_identities("slack:U2") == ("oidc:bo@corp", ["slack:U2"])
        assert await tx.person_with_identities("slack:U9") == (None, [])


async def test_a_link_code_is_redeemed_once_and_not_after_it_expires(store: Store) -> None:
    async with store.transaction() as tx:
        await tx.insert_link_code(code_digest("c1"), "oidc:ana@corp", at(60))
        await tx.insert_link_code(code_digest("c2"), "oidc:ana@corp", at(60))
    async with store.transaction() as tx:
        assert await tx.take_link_code(code_digest("c1"), at(59)) == "oidc:ana@corp"
    async with store.transaction() as tx:
        assert await tx.take_link_code(code_digest("c1"), at(59)) is None
        assert await tx.take_link_code(code_digest("c2"), at(60)) is None
    async with store.transaction() as tx:
        # The expired code is gone too: a later clock cannot bring it back.
        assert await tx.take_link_code(code_digest("c2"), at(0)) is None
        await tx.insert_link_code(code_digest("c3"), "oidc:bo@corp", at(10))
        assert await tx.forget_link_codes(at(11)) == 1
        assert await tx.take_link_code(code_digest("c3"), at(0)) is None


class Deploys:
    """A `deploys` agent whose one `deploy` call asks, four-eyes or with approvers."""

    def __init__(self, store: Store, **options: Any) -> None:
        self.ran: list[str] = []
        model = ScriptedModel(
            [tool_call_reply(("deploy", {"service": "checkout"})), final_reply("ok")]
        )
        self.agent = Agent("deploys", "Deploy.", model)

        @self.agent.tool(permission="ask", **options)
        async def deploy(service: str) -> str:
            self.ran.append(service)
            return "deployed"

        self.clock = ManualClock()
        self.runtime = Runtime(store, [self.agent], clock=self.clock, ids=SequentialIds())

    async def park(self, requester: str) -> Any:
        parked = await self.runtime.start("deploys", "deploy checkout", requester=requester)
        assert parked.status is RunStatus.AWAITING
        return parked.pending[0].ticket

    async def refused(self, ticket: Any, actor: Actor) -> str:
        with pytest.raises(Unauthorized) as refused:
            await self.runtime.decide(
                ticket.ticket_id, Allow(), actor, correlation=ticket.correlation
            )
        current = await self.runtime.ticket(ticket.ticket_id)
        assert current.status is TicketStatus.OPEN
        assert self.ran == []
        return str(refused.value)


async def test_a_four_eyes_requester_is_refused_under_every_linked_id(store: Store) -> None:
    app = Deploys(store, four_eyes=True, approvers=["*"])
    ids = app.runtime.identities
    await ids.link("U024BE7LH", "oidc:ana@corp", "email")
    code = await ids.new_link_code("oidc:ana@corp")
    assert await ids.redeem_link_code(code, "1234567890") == "oidc:ana@corp"
    ticket = await app.park(requester="U024BE7LH")  # started in Slack
    await app.refused(ticket, Actor(id="oidc:ana@corp", platform="console"))
    await app.refused(ticket, Actor(id="oidc:ana@corp", platform="api"))
    await app.refused(ticket, Actor(id="1234567890", platform="discord"))
    await app.refused(ticket, Actor(id="U024BE7LH", platform="slack"))
    await app.refused(ticket, Actor(id="oidc:ana@corp", platform="console", operator=True))
    # Someone else decides.
    await app.runtime.decide(
        ticket.ticket_id, Allow(), Actor(id="oidc:bo@corp"), correlation=ticket.correlation
    )
    assert (await app.runtime.ticket(ticket.ticket_id)).decided_by == "oidc:bo@corp"


async def test_a_requester_in_the_console_is_refused_in_slack(store: Store) -> None:
    app = Deploys(store, four_eyes=True, approvers=["*"])
    await app.runtime.identities.link_all({"oidc:ana@corp": ["U024BE7LH"]}, "file")
    ticket = await app.park(requester="oidc:ana@corp")
    message = await app.refused(ticket, Actor(id="U024BE7LH", platform="slack"))
    assert "not the requester" in message


async def test_an_approver_listed_by_slack_id_decides_in_the_console_once_linked(
    store: Store,
) -> None:
    app = Deploys(store, approvers=["U024BE7LH"])
    ticket = await app.park(requester="U9")
    console = Actor(id="oidc:ana@corp", platform="console")
    await app.refused(ticket, console)
    await app.runtime.identities.link("U024BE7LH", "oidc:ana@corp", "email")
    await app.runtime.decide(ticket.ticket_id, Allow(), console, correlation=ticket.correlation)
    decided = await app.runtime.ticket(ticket.ticket_id)
    assert (decided.status, decided.decided_by) == (TicketStatus.DECIDED, "oidc:ana@corp")


async def test_unlinked_chat_users_keep_todays_behaviour_unless_refused(store: Store) -> None:
    app = Deploys(store, approvers=["U2", "W7"])
    first = await app.park(requester="U1")
    await app.runtime.decide(
        first.ticket_id, Allow(), Actor(id="U2", platform="slack"), correlation=first.correlation
    )
    app.runtime.identities.configure(unlinked="refuse")
    second = await app.park(requester="U1")
    message = await app.refused(second, Actor(id="W7", platform="slack"))
    assert "not linked" in message
    # Linked, the same user decides; the console and API are not chat edges.
    await app.runtime.identities.link("W7", "oidc:wu@corp", "file")
    await app.runtime.decide(
        second.ticket_id, Allow(), Actor(id="W7", platform="slack"), correlation=second.correlation
    )
    third = await app.park(requester="U1")
    await app.runtime.decide(
        third.ticket_id, Allow(), Actor(id="U2", platform="api"), correlation=third.correlation
    )


async def test_an_expired_link_code_links_nobody(store: Store) -> None:
    app = Deploys(store)
    ids = app.runtime.identities
    code = await ids.new_link_code("oidc:ana@corp")
    app.clock.advance(ids.rules.code_seconds)
    assert await ids.redeem_link_code(code, "42") is None
    assert await ids.person_of("42") is None
    assert await ids.redeem_link_code("not-a-code", "42") is None


async def test_a_step_up_ticket_round_trips(store: Store, make: Any) -> None:
    async with store.transaction() as tx:
        await tx.insert_run(make.run("run_1"))
        await tx.insert_ticket(make.ticket("tk_1", decide_in=("console", "api"), sso=True))
        await tx.insert_ticket(
            make.ticket("tk_2", target=ToolPermission(call_id="call_2", tool="refund", args={}))
        )
    async with store.transaction() as tx:
        stepped = await tx.get_ticket("tk_1")
        plain = await tx.get_ticket("tk_2")
    assert stepped is not None and plain is not None
    assert (stepped.decide_in, stepped.sso) == (("console", "api"), True)
    assert (plain.decide_in, plain.sso) == ((), False)
