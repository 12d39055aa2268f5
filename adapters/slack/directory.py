"""Who a Slack user is, for the runtime: an `Actor` whose groups Slack itself verified.

Approver entries on a tool or agent name people the runtime matches against the actor:

- ``U0123ABCD``: that Slack user;
- ``group:S0123ABCD``: members of a Slack user group (``usergroups.users.list``);
- ``group:C0123ABCD``: members of a channel, public or private (``conversations.members``);
- ``group:<name>``: members of the user groups and channels the name is mapped to
  (``SIGNOFF_SLACK_APPROVER_GROUPS``);
- ``*``: anyone who can click.

Only the groups named by the ticket being decided are looked up, and memberships are
cached briefly (a minute by default), so a click costs at most a few Web API calls.
A failed look-up counts as "not a member": the click is refused with a message saying
who may decide, and nothing changes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from runtime import Actor

log = logging.getLogger("signoff.slack")

GROUP_PREFIX = "group:"
MAX_MEMBER_PAGES = 20


class Directory:
    """Resolves the ``group:`` approver entries of a ticket for one Slack user.

    Args:
        client: The Slack Web API client.
        ttl: Seconds a group's member list is reused.
        monotonic: The time source of the cache (tests inject one).
        named: Named approver groups mapped to Slack user group and channel ids.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        ttl: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
        named: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self._client = client
        self._named = {name: tuple(ids) for name, ids in (named or {}).items()}
        self._ttl = ttl
        self._monotonic = monotonic
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def known(
        self, user_id: str, approvers: Iterable[str], *, name: str | None = None
    ) -> Actor | None:
        """The `Actor` from what is known without asking Slack, or None if a group's
        members must be looked up first (`actor` does)."""
        groups = set()
        now = self._monotonic()
        for group, slack_ids in self._groups(approvers):
            for slack_id in slack_ids:
                cached = self._cache.get(slack_id)
                if cached is None or cached[0] <= now:
                    return None
                if user_id in cached[1]:
                    groups.add(group)
                    break
        return Actor(id=user_id, groups=frozenset(groups), platform="slack", name=name)

    async def actor(
        self, user_id: str, approvers: Iterable[str], *, name: str | None = None
    ) -> Actor:
        """The `Actor` for `user_id`, with the approver groups Slack says they are in.

        A ``group:<name>`` entry mapped in `named` (``SIGNOFF_SLACK_APPROVER_GROUPS``)
        counts when the user is in any user group or channel it maps to; an unmapped
        ``group:S...`` or ``group:C...`` entry is that user group or channel itself.
        """
        groups = set()
        for group, slack_ids in self._groups(approvers):
            for slack_id in slack_ids:
                if user_id in await self.members(slack_id):
                    groups.add(group)
                    break
        return Actor(id=user_id, groups=frozenset(groups), platform="slack", name=name)

    def _groups(self, approvers: Iterable[str]) -> Iterator[tuple[str, Sequence[str]]]:
        """Each ``group:`` approver entry once: the group and the Slack ids it stands for."""
        for entry in dict.fromkeys(approvers):
            if entry.startswith(GROUP_PREFIX):
                group = entry[len(GROUP_PREFIX) :]
                yield group, self._named.get(group) or (group,)

    async def members(self, group: str) -> frozenset[str]:
        """The members of a user group (``S...``) or channel (``C...``/``G...``), cached."""
        now = self._monotonic()
        cached = self._cache.get(group)
        if cached is not None and cached[0] > now:
            return cached[1]
        lock = self._locks.setdefault(group, asyncio.Lock())
        async with lock:
            cached = self._cache.get(group)
            if cached is not None and cached[0] > self._monotonic():
                return cached[1]
            try:
                members = await self._fetch(group)
            except (SlackApiError, OSError, TimeoutError) as exc:
                log.warning("cannot list the members of %s: %s", group, exc)
                return frozenset()
            self._cache[group] = (self._monotonic() + self._ttl, members)
            return members

    async def _fetch(self, group: str) -> frozenset[str]:
        if group.startswith("S"):
            response = await self._client.usergroups_users_list(usergroup=group)
            return frozenset(str(u) for u in response.get("users") or ())
        if group[:1] in ("C", "G"):
            found: set[str] = set()
            cursor: str | None = None
            for _page in range(MAX_MEMBER_PAGES):
                arguments: dict[str, Any] = {"channel": group, "limit": 1000}
                if cursor:
                    arguments["cursor"] = cursor
                response = await self._client.conversations_members(**arguments)
                found.update(str(u) for u in response.get("members") or ())
                metadata = response.get("response_metadata") or {}
                cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
                if not cursor:
                    break
            return frozenset(found)
        # Not a Slack id (e.g. group:release-managers): Slack cannot vouch for it.
        return frozenset()
