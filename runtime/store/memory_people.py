"""The memory store's tables of people and sign-ins: identity links, link codes and MCP
servers' OAuth records (a part of `runtime.store.memory.MemoryTransaction`)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class PeopleTables(Protocol):
    """The memory store's tables these methods read and write."""

    links: dict[str, str]
    link_sources: dict[str, str]
    link_codes: dict[str, tuple[str, datetime]]
    mcp_oauth: dict[str, str]


class MemoryPeople:
    """`IdentityPort` and `McpOAuthPort` over the memory store's tables."""

    _t: PeopleTables
    wrote: bool

    # MCP sign-ins (McpOAuthPort) ------------------------------------------------------------
    async def read_mcp_oauth(self, server: str) -> str | None:
        return self._t.mcp_oauth.get(server)

    async def write_mcp_oauth(self, server: str, sealed: str, at: datetime) -> None:
        self.wrote = True
        self._t.mcp_oauth[server] = sealed

    async def delete_mcp_oauth(self, server: str) -> bool:
        found = self._t.mcp_oauth.pop(server, None) is not None
        self.wrote = self.wrote or found
        return found

    # identity links (IdentityPort) ---------------------------------------------------------
    async def link_identity(self, identity: str, person: str, source: str, at: datetime) -> None:
        self.wrote = True
        self._t.links[identity] = person
        self._t.link_sources[identity] = source

    async def unlink_identity(self, identity: str) -> bool:
        found = self._t.links.pop(identity, None) is not None
        self._t.link_sources.pop(identity, None)
        self.wrote = self.wrote or found
        return found

    async def person_of(self, identity: str) -> str | None:
        return self._t.links.get(identity)

    async def identities_of(self, person: str) -> list[str]:
        return sorted(i for i, p in self._t.links.items() if p == person)

    async def person_with_identities(self, identity: str) -> tuple[str | None, list[str]]:
        person = self._t.links.get(identity)
        return person, await self.identities_of(person if person is not None else identity)

    async def links_from(self, source: str) -> dict[str, str]:
        return {i: self._t.links[i] for i, s in sorted(self._t.link_sources.items()) if s == source}

    async def insert_link_code(self, digest: str, person: str, expires_at: datetime) -> None:
        if digest in self._t.link_codes:
            raise ValueError("link code exists")
        self.wrote = True
        self._t.link_codes[digest] = (person, expires_at)

    async def take_link_code(self, digest: str, now: datetime) -> str | None:
        found = self._t.link_codes.pop(digest, None)
        if found is None:
            return None
        self.wrote = True
        person, expires_at = found
        return person if now < expires_at else None

    async def forget_link_codes(self, before: datetime) -> int:
        old = [k for k, (_, until) in self._t.link_codes.items() if until < before]
        for key in old:
            del self._t.link_codes[key]
        self.wrote = self.wrote or bool(old)
        return len(old)
