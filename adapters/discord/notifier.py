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
- ``batch_offered``: once every card of the batch is posted (the item waits for them), a
  message listing the turn's open calls with "Allow all N" and "Deny all N"; nothing when
  fewer than two are still open.

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
from typing import Any, assert_never

import aiohttp

from adapters.discord import cards, refusals
from adapters.discord.config import DiscordConfig
from runtime.edges import (
    ApprovalCallback,
    ApprovalRequested,
    BatchOffered,
    Decided,
    DecisionRefused,
    Delivery,
    DeliveryError,
    InputRequested,
    Notification,
    OutcomeNotification,
    RunCallback,
    RunFinished,
    RunPaused,
    TicketExpired,
    TicketNotification,
    TicketVoided,
    UncertainCall,
    batch_open_ids,
    refusal_of,
)

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
    """Posts notifications to Discord channels and edits the cards it posted.

    Args:
        config: The bot token, REST base URL, role groups and console URL.
        session: An aiohttp session to use (default: one of its own, closed by `close`).
    """

    def __init__(
        self,
        config: DiscordConfig,
        *,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._config = config
        self._base = config.api_base_url.rstrip("/")
        self._session = session
        self._own_session = session is None

    async def close(self) -> None:
        """Close the HTTP session (if the notifier made it)."""
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """Post or edit the message of one notification.

        Returns:
            ``{"channel_id", "message_id"}`` of the message posted or edited.

        Raises:
            DeliveryError: Discord refused it (``permanent``), rate-limited it
                (``retry_after``) or could not be reached.
        """
        if isinstance(note, DecisionRefused):
            return await self._tell_refused(note, delivery)
        if isinstance(note, RunCallback | ApprovalCallback):
            return None  # for a callback, not for Discord
        channel = _channel_of(delivery.destination)
        match note:
            case ApprovalRequested() | InputRequested() | UncertainCall():
                return await self._post(channel, self._card(note, delivery))
            case Decided() | TicketExpired() | TicketVoided():
                return await self._settle(note, delivery, channel)
            case RunFinished():
                return await self._post(channel, cards.finished_message(note))
            case RunPaused():
                return await self._post(channel, cards.paused_message(note))
            case BatchOffered():
                open_ids = batch_open_ids(note, delivery)
                if len(open_ids) < 2:
                    return None  # decided one by one meanwhile: nothing to decide at once
                try:
                    body = cards.batch_message(note, open_ids)
                except ValueError as exc:  # ids too long for a custom_id
                    raise DeliveryError(str(exc), permanent=True) from exc
                return await self._post(channel, body)
            case _:
                assert_never(note)

    async def _tell_refused(self, note: DecisionRefused, delivery: Delivery) -> dict[str, Any]:
        """Tell the clicker, and only them, that their stored decision was refused.

        A follow-up to their click's interaction, visible to them alone (Discord accepts
        those for 15 minutes after the click).
        """
        destination = delivery.destination
        app, token = destination.get("application_id"), destination.get("interaction_token")
        if not app or not token:
            raise DeliveryError("a refused decision without its interaction", permanent=True)
        body = {
            "content": refusals.applied_refusal_text(
                refusal_of(note, delivery.ticket), self._config.role_groups
            ),
            "flags": EPHEMERAL,
            "allowed_mentions": cards.NO_MENTIONS,
        }
        message = await self._request("POST", f"/webhooks/{app}/{token}", body)
        return {"channel_id": str(destination.get("channel_id")), "message_id": message.get("id")}

    # -- cards -----------------------------------------------------------------------
    def _card(
        self,
        note: TicketNotification,
        delivery: Delivery,
        outcome: cards.Outcome | None = None,
    ) -> Any:
        ticket = delivery.ticket
        if ticket is None:
            raise DeliveryError(f"ticket {note.ticket_id} does not exist", permanent=True)
        try:
            return cards.card(
                note,
                ticket.correlation,
                role_groups=self._config.role_groups,
                console_url=self._config.console_url,
                outcome=outcome,
            )
        except ValueError as exc:  # ids too long for a custom_id
            raise DeliveryError(str(exc), permanent=True) from exc

    async def _settle(
        self, note: OutcomeNotification, delivery: Delivery, channel: str
    ) -> dict[str, Any]:
        """Edit the ticket's card to show how it ended."""
        result = cards.outcome(note, self._config.role_groups)
        card = delivery.card
        if card is not None and card.state == "pending":
            raise DeliveryError("the ticket's card is not posted yet", retry_after=1.0)
        ref = card.ref if card is not None else None
        if card is None or card.state != "delivered" or not ref or isinstance(card.note, RunPaused):
            return await self._post(channel, cards.outcome_message(note, result))
        body = self._card(card.note, delivery, outcome=result)
        ref_channel, message = str(ref.get("channel_id")), str(ref.get("message_id"))
        try:
            await self._request("PATCH", f"/channels/{ref_channel}/messages/{message}", body)
        except _MessageGone:
            return await self._post(channel, cards.outcome_message(note, result))
        return {"channel_id": ref_channel, "message_id": message}

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
        return DeliveryError(message, retry_after=retry_after, rate_limited=True)
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
