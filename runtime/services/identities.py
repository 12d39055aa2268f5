"""Linking people's ids across edges (`Runtime.identities`).

A person's ids on Slack, Discord, the console and the API are linked to one person id
(see `runtime.domain.identity`), from the identities file, a verified e-mail or a
one-time link code a signed-in person gets in the console and sends from chat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta

from runtime.domain.identity import IdentityRules, LinkSource, Unlinked, code_digest
from runtime.domain.tickets import Actor
from runtime.engine.deps import Deps
from runtime.engine.people import as_person

_CODE_LENGTH = 16


class Identities:
    """Links each platform's user ids to people, and tells who an actor is."""

    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    @property
    def rules(self) -> IdentityRules:
        """How people's ids are treated now."""
        return self._deps.identity

    def configure(self, *, unlinked: Unlinked | None = None) -> None:
        """Change how people's ids are treated (at start-up).

        Args:
            unlinked: ``allow`` (decisions from chat users linked to nobody are checked
                under their chat id, the default) or ``refuse``.
        """
        if unlinked is not None:
            self._deps.identity = replace(self._deps.identity, unlinked=unlinked)

    async def link(self, identity: str, person: str, source: LinkSource = "api") -> None:
        """Link `identity` (a platform's user id) to `person`, replacing its old link."""
        if not identity or not person:
            raise ValueError("an identity link needs an identity and a person")
        now = self._deps.clock.now()
        async with self._deps.store.transaction() as tx:
            if await tx.person_of(identity) != person:
                await tx.link_identity(identity, person, source, now)

    async def link_all(
        self, people: Mapping[str, Sequence[str]], source: LinkSource, *, exact: bool = False
    ) -> int:
        """Link every id listed under each person (the identities file); how many.

        Args:
            people: Each person with the ids that are them.
            source: Where the links come from.
            exact: Also remove the links made from `source` earlier whose id `people`
                no longer lists (a line taken out of the identities file); links made
                another way stay.

        Returns:
            How many links were added, moved or removed.
        """
        now = self._deps.clock.now()
        count = 0
        listed = {identity for identities in people.values() for identity in identities}
        async with self._deps.store.transaction() as tx:
            if exact:
                for identity in await tx.links_from(source):
                    if identity not in listed:
                        await tx.unlink_identity(identity)
                        count += 1
            for person, identities in people.items():
                for identity in identities:
                    if identity != person and await tx.person_of(identity) != person:
                        await tx.link_identity(identity, person, source, now)
                        count += 1
        return count

    async def unlink(self, identity: str) -> bool:
        """Remove the link of `identity`; whether it had one."""
        async with self._deps.store.transaction() as tx:
            return await tx.unlink_identity(identity)

    async def person_of(self, identity: str) -> str | None:
        """The person `identity` is linked to, if any."""
        async with self._deps.store.transaction() as tx:
            return await tx.person_of(identity)

    async def identities_of(self, person: str) -> list[str]:
        """Every identity linked to `person`."""
        async with self._deps.store.transaction() as tx:
            return await tx.identities_of(person)

    async def as_person(self, actor: Actor) -> Actor:
        """`actor` with every other id of their person as `Actor.aliases`.

        The decision path does this itself; an edge calls it to show what a person may
        do (which buttons a page offers).

        Raises:
            Unauthorized: A chat user linked to nobody, when unlinked users are refused.
        """
        async with self._deps.store.transaction() as tx:
            return await as_person(tx, actor, self._deps.identity)

    async def new_link_code(self, person: str) -> str:
        """A one-time code that links whoever sends it from chat to `person`; it lasts
        `IdentityRules.code_seconds`."""
        deps = self._deps
        code = deps.ids.token()[:_CODE_LENGTH]
        expires_at = deps.clock.now() + timedelta(seconds=deps.identity.code_seconds)
        async with deps.store.transaction() as tx:
            await tx.forget_link_codes(deps.clock.now())
            await tx.insert_link_code(code_digest(code), person, expires_at)
        return code

    async def redeem_link_code(self, code: str, identity: str) -> str | None:
        """Link `identity` to the person a link code names, once.

        Returns:
            The person, or None when the code is unknown, used or expired.
        """
        deps = self._deps
        now = deps.clock.now()
        async with deps.store.transaction() as tx:
            person = await tx.take_link_code(code_digest(code), now)
            if person is not None and identity != person:
                await tx.link_identity(identity, person, "code", now)
        return person
