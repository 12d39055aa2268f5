"""`DiscordNotifier`: the outbox's notifications as Discord messages, over Discord's REST API.

- ``approval_requested`` / ``input_requested`` / ``uncertain``: a card with buttons in
  the run's channel (or thread); the platform reference ``{"channel_id", "message_id"}``
  is stored with the outbox item.
- ``decided`` / ``expired`` / ``ticket_voided``: that card edited: buttons disabled, who
  decided and when. A card still waiting for its own delivery is waited for (the item is
  retried); a card that was never posted, or was deleted, gets the outcome as a new
  message instead.
- ``run_finished``: the final answer (or the error, or why it was cancelled);
  ``run_paused``: a short note.
- ``decision_refused``: a stored click that was refused when applied (the loser of two
  clicks): a follow-up to that click only its clicker sees.

The destination is the run's ``origin``: ``{"platform": "discord", "channel_id": "..."}``
(``"channel"`` is accepted too, as webhook approvals name it). The notifier needs no
gateway connection, so any process can deliver.

Errors: 429 becomes ``DeliveryError(retry_after=...)`` from Discord's ``retry_after``;
5xx, timeouts and connection errors are transient; Unknown Channel (10003), Missing
Access (50001), Missing Permissions (50013), a refused token (401) and any other 4xx are
permanent — the outbox gives up loudly and the run's flight recorder says why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from adapters.discord import cards, refusals
from adapters.discord.config import DiscordConfig
from runtime import Store
from runtime.outbox import DeliveryError
from runtime.store.records import OutboxRecord

log = logging.getLogger("signoff.discord")

UNKNOWN_CHANNEL = 10003
UNKNOWN_MESSAGE = 10008
MISSING_ACCESS = 50001
MISSING_PERMISSIONS = 50013
PERMANENT_CODES = frozenset({UNKNOWN_CHANNEL, MISSING_ACCESS, MISSING_PERMISSIONS})
"""Discord JSON error codes retrying cannot fix (any other 4xx is permanent too)."""

EPHEMERAL = 64
"""Message flag: only the interaction's user sees it."""

USER_AGENT = "DiscordBot (https://github.com/signoff/signoff, 0.1) signoff"


class _MessageGone(Exception):
    """The message to edit does not exist any more (10008)."""


class DiscordNotifier:
    """Posts outbox items to Discord channels and edits the cards it posted.

    Args:
        config: The bot token, REST base URL, role groups and console URL.
        store: Where the original card of a decided ticket (and the ticket) is found.
        session: An aiohttp session to use (default: one of its own, closed by `close`).
    """

    def __init__(
        self,
        config: DiscordConfig,
        store: Store,
        *,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._config = config
        self._store = store
        self._base = config.api_base_url.rstrip("/")
        self._session = session
        self._own_session = session is None

    async def close(self) -> None:
        """Close the HTTP session (if the notifier made it)."""
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def deliver(self, item: OutboxRecord) -> dict[str, Any] | None:
        """Post or edit the message of one outbox item.

        Returns:
            ``{"channel_id", "message_id"}`` of the message posted or edited.

        Raises:
            DeliveryError: Discord refused it (``permanent``), rate-limited it
                (``retry_after``) or could not be reached.
        """
        if item.kind == "decision_refused":
            return await self._tell_refused(item)
        channel = _channel_of(item.destination)
        if item.kind in cards.CARD_KINDS:
            return await self._post(channel, await self._card(item))
        if item.kind in cards.OUTCOME_KINDS:
            return await self._settle(item, channel)
        if item.kind == "run_finished":
            return await self._post(channel, cards.finished_message(item.payload))
        if item.kind == "run_paused":
            return await self._post(channel, cards.paused_message(item.payload))
        log.debug("no Discord message for notification kind %s", item.kind)
        return None

    async def _tell_refused(self, item: OutboxRecord) -> dict[str, Any]:
        """Tell the clicker, and only them, that their stored decision was refused.

        A follow-up to their click's interaction, visible to them alone (Discord accepts
        those for 15 minutes after the click).
        """
        destination = item.destination
        app, token = destination.get("application_id"), destination.get("interaction_token")
        if not app or not token:
            raise DeliveryError("a refused decision without its interaction", permanent=True)
        body = {
            "content": cards.clip_content(refusals.applied_refusal_text(item.payload)),
            "flags": EPHEMERAL,
            "allowed_mentions": cards.NO_MENTIONS,
        }
        message = await self._request("POST", f"/webhooks/{app}/{token}", body)
        return {"channel_id": str(destination.get("channel_id")), "message_id": message.get("id")}

    # -- cards -----------------------------------------------------------------------
    async def _card(self, item: OutboxRecord, outcome: cards.Outcome | None = None) -> Any:
        ticket_id = item.ticket_id or str(item.payload.get("ticket_id", ""))
        async with self._store.transaction() as tx:
            ticket = await tx.get_ticket(ticket_id)
        if ticket is None:
            raise DeliveryError(f"ticket {ticket_id} does not exist", permanent=True)
        try:
            return cards.card(
                item.kind,
                item.payload,
                ticket.correlation,
                role_groups=self._config.role_groups,
                console_url=self._config.console_url,
                outcome=outcome,
            )
        except ValueError as exc:  # ids too long for a custom_id
            raise DeliveryError(str(exc), permanent=True) from exc

    async def _settle(self, item: OutboxRecord, channel: str) -> dict[str, Any]:
        """Edit the ticket's card to show how it ended."""
        result = cards.outcome(item.kind, item.payload, self._config.role_groups)
        original = await self._original(item.ticket_id)
        if original is not None and original.state == "pending":
            raise DeliveryError("the ticket's card is not posted yet", retry_after=1.0)
        ref = original.platform_ref if original is not None else None
        if original is None or original.state != "delivered" or not ref:
            return await self._post(channel, cards.outcome_message(item.payload, result))
        body = await self._card(original, outcome=result)
        ref_channel, message = str(ref.get("channel_id")), str(ref.get("message_id"))
        try:
            await self._request("PATCH", f"/channels/{ref_channel}/messages/{message}", body)
        except _MessageGone:
            return await self._post(channel, cards.outcome_message(item.payload, result))
        return {"channel_id": ref_channel, "message_id": message}

    async def _original(self, ticket_id: str | None) -> OutboxRecord | None:
        if not ticket_id:
            return None
        async with self._store.transaction() as tx:
            for kind in cards.CARD_KINDS:
                found = await tx.find_outbox(ticket_id=ticket_id, kind=kind)
                if found is not None:
                    return found
        return None

    # -- REST --------------------------------------------------------------------------
    async def _post(self, channel: str, body: Mapping[str, Any]) -> dict[str, Any]:
        message = await self._request("POST", f"/channels/{channel}/messages", body)
        return {
            "channel_id": str(message.get("channel_id", channel)),
            "message_id": str(message["id"]),
        }

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._config.timeout_seconds)
            )
            self._own_session = True
        return self._session

    async def _request(self, method: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        what = f"{method} {path}"
        headers = {
            "Authorization": f"Bot {self._config.bot_token}",
            "User-Agent": USER_AGENT,
        }
        try:
            async with self._client().request(
                method, self._base + path, json=dict(body), headers=headers
            ) as response:
                status = response.status
                try:
                    data: Any = await response.json(content_type=None)
                except ValueError:
                    data = None
                retry_header = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(f"{what}: Discord could not be reached: {exc!r}") from exc
        if 200 <= status < 300 and isinstance(data, dict):
            return data
        raise _error(what, status, data if isinstance(data, dict) else {}, retry_header)


def _error(what: str, status: int, data: Mapping[str, Any], retry_header: str | None) -> Exception:
    code = data.get("code")
    message = f"{what}: Discord answered {status}" + (
        f" (code {code}: {data.get('message')})" if code is not None else ""
    )
    if status == 429:
        retry_after = _seconds(data.get("retry_after")) or _seconds(retry_header) or 1.0
        return DeliveryError(message, retry_after=retry_after)
    if code == UNKNOWN_MESSAGE and what.startswith("PATCH"):
        return _MessageGone(message)
    if 400 <= status < 500:
        # The request itself is wrong (or the token, channel or permissions are):
        # sending it again cannot help.
        return DeliveryError(message, permanent=True)
    return DeliveryError(message)  # 5xx, or a 2xx without a JSON message


def _seconds(value: Any) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def _channel_of(destination: Mapping[str, Any]) -> str:
    channel = destination.get("channel_id") or destination.get("channel")
    if channel is None or not str(channel).isdigit():
        raise DeliveryError(
            f"the run's origin names no Discord channel id: {dict(destination)!r}",
            permanent=True,
        )
    return str(channel)
