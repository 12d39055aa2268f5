"""Identity links and one-time link codes: the store port's people."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class IdentityPort(Protocol):
    """Which person each user id belongs to, and link codes waiting to be redeemed."""

    async def link_identity(self, identity: str, person: str, source: str, at: datetime) -> None:
        """Link `identity` to `person` (replacing any link it had)."""
        ...

    async def unlink_identity(self, identity: str) -> bool:
        """Remove the link of `identity`; whether there was one."""
        ...

    async def person_of(self, identity: str) -> str | None:
        """The person `identity` is linked to, if any."""
        ...

    async def identities_of(self, person: str) -> list[str]:
        """Every identity linked to `person`, sorted."""
        ...

    async def person_with_identities(self, identity: str) -> tuple[str | None, list[str]]:
        """`person_of(identity)`, and `identities_of` that person (of `identity` itself
        when it is linked to nobody), in one read."""
        ...

    async def links_from(self, source: str) -> dict[str, str]:
        """Every link made from `source` (``file``, ``email`` ...): identity to person."""
        ...

    async def insert_link_code(self, digest: str, person: str, expires_at: datetime) -> None:
        """Keep a link code (by its digest) that links its redeemer to `person`."""
        ...

    async def take_link_code(self, digest: str, now: datetime) -> str | None:
        """Redeem a link code once: the person it names if it exists and has not expired
        by `now`; it is gone afterwards either way."""
        ...

    async def forget_link_codes(self, before: datetime) -> int:
        """Forget link codes that expired before `before`; return how many."""
        ...
