"""Listings see a person under every id linked to them, over every store: the runs one
of their ids started or may decide, the tickets one of them may decide and the grants one
of them gave, as the API, the console and the command line list them (with
`Identities.as_person`); a stranger sees none of it."""

from __future__ import annotations

from runtime import Actor, Allow, GrantRequest
from runtime.store.base import Store
from tests.contract.test_identities_contract import Deploys


async def test_a_person_lists_what_their_linked_ids_may(store: Store) -> None:
    app = Deploys(store, approvers=["U024BE7LH"])
    runtime = app.runtime
    mine = await app.park(requester="U024BE7LH")  # Ana's Slack id asked
    theirs = await app.park(requester="U9")  # Ana's Slack id may decide
    ana = await runtime.identities.as_person(Actor(id="oidc:ana@corp", platform="api"))
    assert ana.aliases == frozenset()
    assert await runtime.list_runs(viewer=ana) == []
    assert await runtime.open_tickets(viewer=ana) == []

    await runtime.identities.link("U024BE7LH", "oidc:ana@corp", "email")
    ana = await runtime.identities.as_person(Actor(id="oidc:ana@corp", platform="api"))
    assert ana.aliases == {"U024BE7LH"}
    runs = await runtime.list_runs(viewer=ana)
    assert [r.run_id for r in runs] == [theirs.run_id, mine.run_id]  # newest first
    assert [r.run_id for r in await runtime.list_runs(viewer=ana, limit=1)] == [theirs.run_id]
    assert {e.ticket_id for e in await runtime.open_tickets(viewer=ana)} == {
        mine.ticket_id,
        theirs.ticket_id,
    }

    await runtime.decide(
        theirs.ticket_id,
        Allow(grant=GrantRequest(scope="run")),
        Actor(id="U024BE7LH", platform="slack"),
        correlation=theirs.correlation,
    )
    [grant] = await runtime.grants(viewer=ana)
    assert grant.granted_by == "U024BE7LH"

    stranger = await runtime.identities.as_person(Actor(id="oidc:eve@corp", platform="api"))
    assert await runtime.list_runs(viewer=stranger) == []
    assert await runtime.open_tickets(viewer=stranger) == []
    assert await runtime.grants(viewer=stranger) == []
