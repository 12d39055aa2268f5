"""Who an actor is: every id of their person, read from the identity links.

The decision path gives an `Actor` its person's ids (`Actor.aliases`) before it checks
who may decide, so every edge gets the same answer without building aliases itself.
"""

from __future__ import annotations

from runtime.domain.errors import NotLinked
from runtime.domain.identity import CHAT_PLATFORMS, IdentityRules
from runtime.domain.tickets import Actor
from runtime.store.base import Transaction


async def as_person(tx: Transaction, actor: Actor, rules: IdentityRules) -> Actor:
    """`actor` with every other id of their person as aliases.

    An id linked to a person brings the person's id and every id linked to it; an id
    that is itself a person's (an ``oidc:`` identity others are linked to) brings the ids
    linked to it.

    Raises:
        NotLinked: A chat user linked to nobody, when `rules` refuse them.
    """
    person, linked = await tx.person_with_identities(actor.id)
    if person is None:
        if not linked:
            chat = actor.platform in CHAT_PLATFORMS
            if rules.unlinked == "refuse" and chat and not actor.operator:
                raise NotLinked(
                    f"{actor.id} is not linked to a person, and unlinked {actor.platform} "
                    "users may not decide: link the account first"
                )
            return actor
        person = actor.id
    aliases = (actor.aliases | {person, *linked}) - {actor.id}
    if aliases == actor.aliases:
        return actor
    return actor.model_copy(update={"aliases": frozenset(aliases)})
