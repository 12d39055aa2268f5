"""Signed callbacks of external approvals (Standard Webhooks), delivered through the outbox.

An approval request may name a ``callback_url``. It is checked when the approval is asked
for (`ApprovalCallbacks.check`: a secret must be configured, and the URL must be http(s)
to a host of ``SIGNOFF_APPROVAL_CALLBACK_HOSTS``; otherwise the request is refused with
400), and kept in the run's origin. When the approval's run ends — allowed, denied,
expired or cancelled — the runtime queues one `ApprovalCallback` outbox item to platform
``approval_callback``; `ApprovalCallbackNotifier` POSTs the approval, as
``GET /api/approvals/{id}`` answers it (decision token included, secret arguments
masked), to the URL.

The request is signed with the `Standard Webhooks <https://www.standardwebhooks.com/>`_
scheme (the ``standardwebhooks`` library), so receivers in any language verify it with
their own library::

    webhook-id: <the outbox item's id: the same on every retry of one callback>
    webhook-timestamp: <unix seconds>
    webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<raw body>")>

where the key is ``SIGNOFF_APPROVAL_CALLBACK_SECRET`` (``whsec_<base64 key>``) decoded.
A receiver drops a ``webhook-id`` it has seen (a retry after its answer was lost) and
refuses timestamps more than five minutes off its clock.

Outcomes: 2xx delivered; 408, 425, 429, 5xx, timeouts and connection errors are retried
with backoff (``Retry-After`` honoured); redirects and other 4xx are permanent (the outbox
marks the item failed and records ``notification_failed`` on the run). The URL's host is
checked again at delivery, against the hosts configured then.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from standardwebhooks import Webhook

from adapters.webhook.callback import SessionFactory, post_callback
from adapters.webhook.config import callback_host_allowed
from runtime import Clock, InvalidApproval, SignoffError, SystemClock
from runtime.edges import (
    APPROVAL_CALLBACK_URL,
    ApprovalCallback,
    Delivery,
    DeliveryError,
    Notification,
)

log = logging.getLogger("signoff.webhook.approval_callback")

USER_AGENT = "signoff-approvals/1"
DEFAULT_TIMEOUT_SECONDS = 10.0

RenderApproval = Callable[[str], Awaitable[Mapping[str, Any]]]
"""The body of an approval's callback, by approval id: the approval as the API answers it."""


def _default_session() -> aiohttp.ClientSession:
    # trust_env=False: a callback goes to the allowed host, never through a proxy picked
    # up from the environment.
    return aiohttp.ClientSession(trust_env=False)


@dataclass(frozen=True)
class ApprovalCallbacks:
    """Whether, and where, external approvals may ask for a signed callback.

    Attributes:
        secret: The Standard Webhooks secret (``whsec_...``) signing them; None refuses
            every callback.
        hosts: The hosts a callback may go to (lower case, no trailing dot).
        timeout_seconds: How long one delivery attempt may take.
    """

    secret: str | None = None
    hosts: tuple[str, ...] = ()
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def refusal(self, url: object) -> str | None:
        """Why a callback to `url` is refused (None: it is allowed)."""
        if self.secret is None:
            return (
                "callbacks are off: set SIGNOFF_APPROVAL_CALLBACK_SECRET to sign them "
                "(and SIGNOFF_APPROVAL_CALLBACK_HOSTS to the hosts they may go to)"
            )
        if not isinstance(url, str) or not callback_host_allowed(url, self.hosts):
            return (
                f"callback_url must be an http(s) URL to one of the hosts in "
                f"SIGNOFF_APPROVAL_CALLBACK_HOSTS ({', '.join(self.hosts) or 'none'})"
            )
        return None

    def check(self, url: str) -> None:
        """Check a request's ``callback_url``.

        Raises:
            InvalidApproval: Callbacks are off, or the URL is not http(s) to an allowed
                host (HTTP 400).
        """
        problem = self.refusal(url)
        if problem is not None:
            raise InvalidApproval(problem)


class ApprovalCallbackNotifier:
    """Delivers the signed callbacks of external approvals (a
    `runtime.services.delivery.Notifier` for platform ``approval_callback``).

    Args:
        callbacks: The secret and allowed hosts, read at each delivery.
        render: The callback's body for an approval id (read at delivery, so it is the
            approval as it stands then, decision token included).
        session_factory: Makes the aiohttp client session for one delivery; the notifier
            closes it afterwards. Default: a plain session ignoring proxy variables.
        clock: The time source of ``webhook-timestamp``.
    """

    def __init__(
        self,
        callbacks: ApprovalCallbacks,
        render: RenderApproval,
        session_factory: SessionFactory | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._callbacks = callbacks
        self._render = render
        self._session_factory = session_factory or _default_session
        self._clock = clock or SystemClock()

    def _target(self, note: Notification, delivery: Delivery) -> tuple[ApprovalCallback, str]:
        if not isinstance(note, ApprovalCallback):
            raise DeliveryError(
                f"outbox item {delivery.outbox_id} ({note.kind}) is not an approval callback",
                permanent=True,
            )
        url = delivery.destination.get(APPROVAL_CALLBACK_URL)
        problem = self._callbacks.refusal(url)
        if problem is not None:
            raise DeliveryError(f"approval {note.run_id}: {problem}", permanent=True)
        assert isinstance(url, str)
        return note, url

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """POST the signed approval `note` stands for to its callback URL.

        Returns:
            ``{"callback_url": ..., "status": <HTTP status>}`` once the receiver accepted.

        Raises:
            DeliveryError: Permanent for a refused URL, an approval that cannot be read,
                a redirect or a 4xx answer; transient (with ``retry_after`` when given)
                for 408/425/429/5xx and network failures.
        """
        callback, url = self._target(note, delivery)
        assert self._callbacks.secret is not None  # `_target` refuses otherwise
        try:
            approval = await self._render(callback.run_id)
        except SignoffError as exc:
            raise DeliveryError(
                f"approval {callback.run_id} cannot be read: {exc}", permanent=True
            ) from exc
        body = json.dumps(approval, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        now = self._clock.now()
        message_id = delivery.outbox_id
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "webhook-id": message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(self._callbacks.secret).sign(message_id, now, body),
        }
        status = await post_callback(
            self._session_factory,
            url,
            body,
            headers,
            timeout_seconds=self._callbacks.timeout_seconds,
            clock=self._clock,
            what="approval callback",
        )
        log.info("callback of approval %s delivered to %s", callback.run_id, url)
        return {"callback_url": url, "status": status}
