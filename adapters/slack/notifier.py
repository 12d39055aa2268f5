"""`SlackNotifier`: the outbox's notifications as Slack messages, within Slack's limits.

- ``approval_requested`` / ``input_requested`` / ``uncertain``: ``chat.postMessage`` of a
  card with buttons in the run's channel and thread; the platform reference
  ``{"channel", "ts"}`` is stored with the outbox item.
- ``decided`` / ``expired`` / ``ticket_voided``: ``chat.update`` of that card: buttons
  gone, the outcome in their place. A card that was never posted is not waited for
  forever: once its own delivery failed, the outcome is posted as a new message.
- ``run_paused`` / ``run_finished``: a message in the thread (the final answer).
- ``decision_refused``: a click that was acknowledged and stored but refused when it was
  applied (e.g. the loser of two concurrent clicks): an ephemeral message to the clicker
  where they clicked, or a direct message when that is not possible.
- ``batch_offered``: once every card of the batch is posted (the item waits for them),
  a message in the thread listing the turn's open calls with "Allow all N" and "Deny all
  N"; nothing is posted when fewer than two of them are still open.

A run's thread is the Slack thread its origin names (``thread_ts``); a run started
elsewhere (a webhook routed to a channel) threads under its first posted message.

Delivery respects Slack's limits: about one message posted per second per channel
(`ChannelLimiter` within the process, and across processes the channel's slot in the
database, `Delivery.pace`, taken right before the post; edits and ephemeral replies are
not held back by them, Slack limits them per method), HTTP 429 becomes
``DeliveryError(retry_after=Retry-After)``, transient failures (5xx, timeouts,
connection errors) are retried by the outbox, and permanent ones (``channel_not_found``,
``not_in_channel``, ``invalid_auth`` ...) are given up loudly: the outbox marks the item
failed and writes the error to the run's flight recorder.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, assert_never

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import blocks
from adapters.slack.blocks import Block, TicketRef
from adapters.slack.refusals import applied_refusal_text
from runtime import ResumeTicket, TicketStatus
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
    PostedCard,
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

log = logging.getLogger("signoff.slack")

PERMANENT_ERRORS = frozenset(
    {
        "access_denied",
        "account_inactive",
        "as_user_not_supported",
        "channel_not_found",
        "ekm_access_denied",
        "enterprise_is_restricted",
        "invalid_arguments",
        "invalid_auth",
        "invalid_blocks",
        "invalid_blocks_format",
        "is_archived",
        "message_limit_exceeded",
        "missing_scope",
        "msg_too_long",
        "no_permission",
        "no_text",
        "not_allowed_token_type",
        "not_authed",
        "not_in_channel",
        "org_login_required",
        "restricted_action",
        "restricted_action_non_threadable_channel",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "team_access_not_granted",
        "token_expired",
        "token_revoked",
        "too_many_attachments",
        "user_is_bot",
    }
)
"""Slack error codes retrying cannot fix."""

TRANSIENT_ERRORS = frozenset(
    {"fatal_error", "internal_error", "ratelimited", "request_timeout", "service_unavailable"}
)
"""Slack error codes worth retrying."""

_GONE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})


class ChannelLimiter:
    """Spaces messages to one channel at least `interval` seconds apart.

    Slack allows about one message per second per channel; bursts beyond that are
    answered with 429. Each caller reserves the next free slot of its channel and sleeps
    until it comes, so concurrent deliveries queue in order.

    Args:
        interval: Seconds between two messages to one channel.
        monotonic: The time source (tests inject one).
        sleep: How to wait (tests inject one).
    """

    def __init__(
        self,
        interval: float = 1.0,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._interval = interval
        self._monotonic = monotonic
        self._sleep = sleep
        self._next: dict[str, float] = {}

    async def wait(self, channel: str) -> None:
        """Wait for the channel's next slot."""
        now = self._monotonic()
        slot = max(now, self._next.get(channel, now))
        self._next[channel] = slot + self._interval
        if len(self._next) > 10_000:  # forget channels quiet for a while
            self._next = {c: t for c, t in self._next.items() if t > now}
        if slot > now:
            await self._sleep(slot - now)

    def hold(self, channel: str, seconds: float) -> None:
        """Send nothing to `channel` for `seconds` (Slack answered 429)."""
        until = self._monotonic() + seconds
        self._next[channel] = max(self._next.get(channel, until), until)


def delivery_error(exc: Exception, what: str) -> DeliveryError:
    """Translate a Slack client failure into the outbox's `DeliveryError`."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = int(getattr(response, "status_code", 0) or 0)
        data = getattr(response, "data", None)
        code = str(data.get("error") or "") if isinstance(data, Mapping) else ""
        if status == 429 or code == "ratelimited":
            headers = getattr(response, "headers", None) or {}
            retry_after = _seconds(headers.get("Retry-After") or headers.get("retry-after"))
            return DeliveryError(
                f"{what}: rate limited by Slack (retry after {retry_after:g}s)",
                retry_after=retry_after,
                rate_limited=True,
            )
        if code in PERMANENT_ERRORS:
            return DeliveryError(f"{what}: Slack refused it: {code}", permanent=True)
        if status >= 500 or status == 408 or code in TRANSIENT_ERRORS:
            return DeliveryError(f"{what}: Slack failed ({status} {code or 'no error code'})")
        if code:
            return DeliveryError(f"{what}: Slack refused it: {code}", permanent=True)
        return DeliveryError(f"{what}: unexpected Slack answer (HTTP {status})")
    if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
        return DeliveryError(f"{what}: cannot reach Slack: {type(exc).__name__}: {exc}")
    return DeliveryError(f"{what}: {type(exc).__name__}: {exc}")


def _seconds(value: Any) -> float:
    try:
        return max(float(value), 0.0)
    except (TypeError, ValueError):
        return 1.0


def _error_code(exc: SlackApiError) -> str:
    data = getattr(exc.response, "data", None)
    return str(data.get("error") or "") if isinstance(data, Mapping) else ""


def closed_outcome(ticket: ResumeTicket) -> str:
    """The outcome line of a ticket that was closed before its card was posted."""
    match ticket.status:
        case TicketStatus.DECIDED:
            decision = ticket.decision
            return blocks.decided_line(
                Decided(
                    run_id=ticket.run_id,
                    agent=ticket.agent,
                    ticket_id=ticket.ticket_id,
                    decision=decision.kind if decision is not None else "",
                    actor=ticket.decided_by,
                    decided_at=ticket.decided_at.isoformat() if ticket.decided_at else None,
                    reason=getattr(decision, "reason", None),
                )
            )
        case TicketStatus.EXPIRED:
            return ":hourglass: Expired without a decision"
        case _:
            return blocks.voided_line(None)


class SlackNotifier:
    """Delivers notifications whose destination platform is ``slack``.

    Args:
        client: The Slack Web API client (its base URL may point at GovSlack or a fake).
        limiter: Spacing of messages posted to one channel (default: one per second);
            edits and ephemeral replies are not spaced (Slack limits them per method).
        groups: Named approver groups mapped to Slack ids, to word who may decide.
        console_url: The console's base URL, linked from step-up cards.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        limiter: ChannelLimiter | None = None,
        groups: blocks.Groups | None = None,
        console_url: str | None = None,
    ) -> None:
        self._groups = dict(groups or {})
        self._console_url = console_url
        self._client = client
        self._limiter = limiter or ChannelLimiter()

    @staticmethod
    def needs_ticket(note: Notification) -> bool:
        """Whether delivering `note` reads `Delivery.ticket`: an outcome's edit does not
        (its card and the outcome say all it shows), so the outbox does not read it."""
        return not isinstance(note, Decided | TicketExpired | TicketVoided)

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """Post or update the Slack message of one notification.

        Raises:
            DeliveryError: Slack refused it (``permanent``), rate-limited it
                (``retry_after``) or could not be reached.
        """
        if isinstance(note, DecisionRefused):
            return await self._tell_refused(note, delivery)
        if isinstance(note, RunCallback | ApprovalCallback):
            return None  # for a callback, not for Slack
        channel = delivery.destination.get("channel")
        if not isinstance(channel, str) or not channel:
            raise DeliveryError(
                f"outbox item {delivery.outbox_id} has no Slack channel in its destination",
                permanent=True,
            )
        match note:
            case ApprovalRequested() | InputRequested() | UncertainCall():
                return await self._post_card(note, delivery, channel)
            case Decided() | TicketExpired() | TicketVoided():
                return await self._update_card(note, delivery, channel)
            case RunFinished():
                text, shown = blocks.finished_message(note)
                return await self._post(note, delivery, channel, text, shown)
            case RunPaused():
                text, shown = blocks.paused_message(note)
                return await self._post(note, delivery, channel, text, shown)
            case BatchOffered():
                return await self._post_batch(note, delivery, channel)
            case _:
                assert_never(note)

    # -- posting ---------------------------------------------------------------------
    async def _post_card(
        self, note: TicketNotification, delivery: Delivery, channel: str
    ) -> dict[str, Any] | None:
        ticket = delivery.ticket
        if ticket is not None and ticket.status is TicketStatus.OPEN:
            ref = TicketRef(ticket.ticket_id, ticket.correlation)
            shown = blocks.card(note, ref, groups=self._groups, console_url=self._console_url)
        else:
            # Decided (or expired) before its card could be posted: show how, no buttons.
            outcome = closed_outcome(ticket) if ticket is not None else None
            shown = blocks.card(note, None, outcome, self._groups)
        text = blocks.card_text(note)
        return await self._post(note, delivery, channel, text, shown)

    async def _post_batch(
        self, note: BatchOffered, delivery: Delivery, channel: str
    ) -> dict[str, Any] | None:
        """Offer the batch once every one of its cards is posted (so each call is seen)."""
        open_ids = batch_open_ids(note, delivery)
        if len(open_ids) < 2:
            return None  # decided one by one meanwhile: nothing left to decide at once
        ref = TicketRef(note.ticket_ids[0], note.token)
        text, shown = blocks.batch_message(note, open_ids, ref)
        return await self._post(note, delivery, channel, text, shown)

    async def _post(
        self, note: Notification, delivery: Delivery, channel: str, text: str, shown: list[Block]
    ) -> dict[str, Any]:
        thread_ts = self._thread_of(delivery)
        arguments: dict[str, Any] = {
            "channel": channel,
            "text": text,
            "blocks": shown,
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if thread_ts:
            arguments["thread_ts"] = thread_ts
        response = await self._call(
            "chat_postMessage", channel, note, arguments, pace=delivery.pace
        )
        return {"channel": str(response.get("channel") or channel), "ts": str(response["ts"])}

    @staticmethod
    def _thread_of(delivery: Delivery) -> str | None:
        """The run's thread: its origin's, or else its first message posted there."""
        thread_ts = delivery.destination.get("thread_ts")
        if isinstance(thread_ts, str) and thread_ts:
            return thread_ts
        first = delivery.first_message or {}
        return str(first["ts"]) if first.get("ts") else None

    async def _tell_refused(
        self, note: DecisionRefused, delivery: Delivery
    ) -> dict[str, Any] | None:
        """Tell the clicker, and only them, that their stored decision was refused."""
        destination = delivery.destination
        user = destination.get("user")
        if not isinstance(user, str) or not user:
            raise DeliveryError("a refused decision without a user to tell", permanent=True)
        text = applied_refusal_text(refusal_of(note, delivery.ticket), self._groups)
        channel = destination.get("channel")
        if isinstance(channel, str) and channel:
            arguments: dict[str, Any] = {"channel": channel, "user": user, "text": text}
            if destination.get("thread_ts"):
                arguments["thread_ts"] = str(destination["thread_ts"])
            try:
                await self._call("chat_postEphemeral", channel, note, arguments)
                return {"channel": channel, "user": user}
            except DeliveryError as exc:
                if not exc.permanent:
                    raise
                log.info("ephemeral refusal to %s failed (%s); sending a DM", user, exc)
        # No channel (or not allowed there): a direct message from the bot.
        response = await self._call("chat_postMessage", user, note, {"channel": user, "text": text})
        return {"channel": str(response.get("channel") or user), "ts": str(response.get("ts"))}

    # -- updating ----------------------------------------------------------------------
    async def _update_card(
        self, note: OutcomeNotification, delivery: Delivery, channel: str
    ) -> dict[str, Any] | None:
        outcome = blocks.outcome_line(note)
        card = delivery.card
        if card is not None and card.state == "pending":
            # Update the card once it is posted (the outbox delivers it first, normally).
            raise DeliveryError(
                f"the card of ticket {note.ticket_id} is not posted yet", retry_after=1.0
            )
        ref = card.ref if card is not None else {}
        if card is not None and ref.get("ts"):
            shown = self._closed_card(card, outcome)
            target = str(ref.get("channel") or channel)
            arguments: dict[str, Any] = {
                "channel": target,
                "ts": str(ref["ts"]),
                "text": outcome,
                "blocks": shown,
            }
            try:
                response = await self._call("chat_update", target, note, arguments)
            except _Gone:
                log.warning(
                    "the card of ticket %s is gone from Slack; posting the outcome instead",
                    note.ticket_id,
                    extra={"run_id": note.run_id, "ticket_id": note.ticket_id},
                )
            else:
                return {
                    "channel": str(response.get("channel") or target),
                    "ts": str(response.get("ts") or ref["ts"]),
                }
        # No card to edit (its post failed for good, or it was deleted): say it anew.
        return await self._post(note, delivery, channel, outcome, [blocks.notice_section(outcome)])

    def _closed_card(self, card: PostedCard, outcome: str) -> list[Block]:
        if isinstance(card.note, RunPaused):
            _text, shown = blocks.paused_message(card.note)
            return [*shown, blocks.notice_section(outcome)]
        return blocks.card(card.note, None, outcome, self._groups)

    # -- the Web API -------------------------------------------------------------------
    async def _call(
        self,
        method: str,
        channel: str,
        note: Notification,
        arguments: dict[str, Any],
        *,
        pace: Callable[[], Awaitable[None]] | None = None,
    ) -> Mapping[str, Any]:
        what = f"Slack {method.replace('_', '.')} for {note.kind} of run {note.run_id}"
        # Slack's one message per second per channel is about posting; edits and
        # ephemeral replies have their own per-method limits (a 429 says so).
        paced = method == "chat_postMessage"
        if paced:
            await self._limiter.wait(channel)
        if pace is not None:
            # The channel's slot shared with other processes, held from this moment: the
            # pace holds where the message is posted, however long getting here took.
            await pace()
        try:
            response = await getattr(self._client, method)(**arguments)
        except SlackApiError as exc:
            if method == "chat_update" and _error_code(exc) in _GONE:
                raise _Gone(_error_code(exc)) from exc
            error = delivery_error(exc, what)
            if error.retry_after is not None and paced:
                self._limiter.hold(channel, error.retry_after)
            raise error from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise delivery_error(exc, what) from exc
        data = response.data
        if not isinstance(data, Mapping):
            raise DeliveryError(f"{what}: unexpected Slack answer")
        return data


class _Gone(Exception):
    """The message to update no longer exists (or can no longer be edited)."""
