"""Linking a Slack user to their identity provider identity by verified e-mail.

With ``SIGNOFF_SLACK_LINK_BY_EMAIL``, the first time a Slack user linked to nobody
decides, their profile is read with ``users.info``; Slack returns a profile's e-mail only
once it is confirmed (and only with the ``users:read.email`` scope), so when one is there
the user is linked to ``oidc:<e-mail>`` before the decision is checked.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from runtime import Runtime

log = logging.getLogger("signoff.slack")


class EmailLinker:
    """Links Slack users to ``oidc:<e-mail>``, looking each one up once per process.

    Args:
        runtime: Where the links are kept.
        client: The Web API client.
        timeout_seconds: Budget of one look-up (a click waits for it).
    """

    def __init__(self, runtime: Runtime, client: AsyncWebClient, timeout_seconds: float) -> None:
        self._runtime = runtime
        self._client = client
        self._timeout = timeout_seconds
        self._checked: set[str] = set()

    def needed(self, user: str) -> bool:
        """Whether `user` was not looked up yet by this process."""
        return user not in self._checked

    async def link(self, user: str) -> str | None:
        """Link `user` by their profile's e-mail unless they are linked already; the
        person they are linked to, if any. A failed look-up links nobody (and is tried
        again next time)."""
        identities = self._runtime.identities
        person = await identities.person_of(user)
        if person is not None:
            self._checked.add(user)
            return person
        try:
            async with asyncio.timeout(self._timeout):
                info = await self._client.users_info(user=user)
        except (SlackApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("users.info for %s failed (%s); not linked by e-mail", user, exc)
            return None
        self._checked.add(user)
        found = info.get("user")
        profile = found.get("profile") if isinstance(found, dict) else None
        email = profile.get("email") if isinstance(profile, dict) else None
        if not isinstance(email, str) or not email:
            return None
        person = f"oidc:{email}"
        await identities.link(user, person, "email")
        return person
