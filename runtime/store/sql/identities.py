"""Identity links and one-time link codes."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, func, insert, select

from runtime.store.schema import identity_links, link_codes
from runtime.store.sql.convert import to_micros
from runtime.store.sql.executing import TransactionCore

_PERSON_OF = select(identity_links.c.person).where(
    identity_links.c.identity == bindparam("identity")
)
_IDENTITIES_OF = (
    select(identity_links.c.identity)
    .where(identity_links.c.person == bindparam("person"))
    .order_by(identity_links.c.identity)
)
# The identities of the person `identity` is linked to, or of `identity` itself.
_PERSON_WITH_IDENTITIES = (
    select(identity_links.c.identity, identity_links.c.person)
    .where(
        identity_links.c.person
        == func.coalesce(_PERSON_OF.scalar_subquery(), bindparam("identity"))
    )
    .order_by(identity_links.c.identity)
)
_LINKS_FROM = (
    select(identity_links.c.identity, identity_links.c.person)
    .where(identity_links.c.source == bindparam("source"))
    .order_by(identity_links.c.identity)
)
_UNLINK = identity_links.delete().where(identity_links.c.identity == bindparam("identity"))
_LINK = insert(identity_links)
_INSERT_CODE = insert(link_codes)
_TAKE_CODE = link_codes.delete().where(link_codes.c.digest == bindparam("digest"))
_READ_CODE = select(link_codes.c.person, link_codes.c.expires_at).where(
    link_codes.c.digest == bindparam("digest")
)
_FORGET_CODES = link_codes.delete().where(link_codes.c.expires_at < bindparam("before"))


class IdentityStatements(TransactionCore):
    """The identity links part of `SQLTransaction`."""

    async def link_identity(self, identity: str, person: str, source: str, at: datetime) -> None:
        """Link `identity` to `person` (replacing any link it had)."""
        await self._execute(_UNLINK, {"identity": identity})
        values = {
            "identity": identity,
            "person": person,
            "source": source,
            "linked_at": to_micros(at),
        }
        await self._execute(_LINK, values)
        self.wrote = True

    async def unlink_identity(self, identity: str) -> bool:
        """Remove the link of `identity`; whether there was one."""
        count = (await self._execute(_UNLINK, {"identity": identity})).rowcount
        self.wrote = self.wrote or count > 0
        return count > 0

    async def person_of(self, identity: str) -> str | None:
        """The person `identity` is linked to, if any."""
        row = (await self._execute(_PERSON_OF, {"identity": identity})).first()
        return None if row is None else str(row.person)

    async def identities_of(self, person: str) -> list[str]:
        """Every identity linked to `person`, sorted."""
        rows = (await self._execute(_IDENTITIES_OF, {"person": person})).all()
        return [str(row.identity) for row in rows]

    async def person_with_identities(self, identity: str) -> tuple[str | None, list[str]]:
        """`person_of(identity)` and `identities_of` that person, in one statement."""
        rows = (await self._execute(_PERSON_WITH_IDENTITIES, {"identity": identity})).all()
        person = next((str(row.person) for row in rows if row.identity == identity), None)
        return person, [str(row.identity) for row in rows]

    async def links_from(self, source: str) -> dict[str, str]:
        """Every link made from `source` (``file``, ``email`` ...): identity to person."""
        rows = (await self._execute(_LINKS_FROM, {"source": source})).all()
        return {str(row.identity): str(row.person) for row in rows}

    async def insert_link_code(self, digest: str, person: str, expires_at: datetime) -> None:
        """Keep a link code (by its digest) that links its redeemer to `person`."""
        values = {"digest": digest, "person": person, "expires_at": to_micros(expires_at)}
        await self._execute(_INSERT_CODE, values)
        self.wrote = True

    async def take_link_code(self, digest: str, now: datetime) -> str | None:
        """Redeem a link code once (see `IdentityPort.take_link_code`)."""
        row = (await self._execute(_READ_CODE, {"digest": digest})).first()
        if row is None:
            return None
        # Deleted by whoever reads it first: two redeemers of one code race on the row,
        # and only the one whose delete removed it links.
        taken = (await self._execute(_TAKE_CODE, {"digest": digest})).rowcount
        self.wrote = self.wrote or taken > 0
        if taken == 0 or int(row.expires_at) <= to_micros(now):
            return None
        return str(row.person)

    async def forget_link_codes(self, before: datetime) -> int:
        """Forget link codes that expired before `before`; return how many."""
        count = (await self._execute(_FORGET_CODES, {"before": to_micros(before)})).rowcount
        self.wrote = self.wrote or count > 0
        return count
