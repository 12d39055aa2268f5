"""Signed completion callbacks for webhook-started runs, delivered through the outbox.

When a run finishes the runtime writes a ``run_finished`` outbox item whose
``destination`` is the run's origin; for a hook run that origin holds ``hook`` and, when
the hook has a callback, ``callback_url``. `CallbackNotifier` POSTs::

    {"run_id": ..., "status": "done" | "failed" | "cancelled", "text": ..., "error": ...,
     "hook": ...}

to the URL *configured on the hook now* (the stored URL only says that a callback was
wanted), refusing any host not in the hook's ``callback_hosts``. The request is signed
with the hook's secret under the `adapters.webhook.signing.CALLBACK` purpose label (so
it is never also a valid request to the hook) and carries ``Idempotency-Key: <outbox
id>``, stable across retries, so a receiver can drop a duplicate. Outcomes: 2xx
delivered; 408, 429, 5xx, timeouts and connection errors are retried with backoff
(``Retry-After`` honoured); redirects and other 4xx are permanent (the outbox marks the
item failed and records ``notification_failed`` on the run).

One outbox item, one effect
--------------------------
The runtime writes the callback as its own outbox item (kind ``run_callback``, platform
``callback``) next to the ``run_finished`` item for the chat or console, so each is
delivered and retried on its own and a retry never repeats the other. Route platform
``callback`` to `CallbackNotifier` in a `runtime.services.delivery.RoutingNotifier`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

from adapters.webhook.config import HookConfig
from adapters.webhook.signing import CALLBACK, signed_headers
from runtime import Clock, SystemClock
from runtime.edges import Delivery, DeliveryError, Notification, RunCallback, RunFinished

log = logging.getLogger("signoff.webhook.callback")

RUN_CALLBACK = "run_callback"
USER_AGENT = "signoff-webhook/1"
_MAX_RETRY_AFTER = 24 * 3600.0
_TRANSIENT_STATUSES = frozenset({408, 425, 429})

SessionFactory = Callable[[], aiohttp.ClientSession]


def _default_session() -> aiohttp.ClientSession:
    # trust_env=False: a callback goes to the configured host, never through a proxy
    # picked up from the environment.
    return aiohttp.ClientSession(trust_env=False)


def callback_payload(
    note: RunCallback | RunFinished, destination: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON body of the completion callback of a finished run."""
    # A cancelled run's reason is its error, as `runtime.RunResult.error` reports it.
    error = note.error
    if error is None and note.status == "cancelled":
        error = note.reason
    return {
        "run_id": note.run_id,
        "status": note.status,
        "text": note.text,
        "error": error,
        "hook": destination.get("hook"),
    }


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """The seconds a ``Retry-After`` header value asks to wait (seconds or an HTTP date),
    at most a day; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), _MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max((when - now).total_seconds(), 0.0), _MAX_RETRY_AFTER)


class CallbackNotifier:
    """Delivers completion callbacks of hook runs (a `runtime.services.delivery.Notifier`).

    Args:
        hooks: The hook configurations by name; the URL, allowed hosts, secret and
            timeout are read from here at delivery time.
        session_factory: Makes the aiohttp client session for one delivery; the
            notifier closes it afterwards. Default: a plain session ignoring proxy
            environment variables.
        clock: The time source for signature timestamps and ``Retry-After`` dates.
    """

    def __init__(
        self,
        hooks: Mapping[str, HookConfig],
        session_factory: SessionFactory | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._hooks = hooks
        self._session_factory = session_factory or _default_session
        self._clock = clock or SystemClock()

    def _target(self, note: Notification, delivery: Delivery) -> tuple[HookConfig, str]:
        name = delivery.destination.get("hook")
        if not isinstance(note, RunCallback) or not name:
            raise DeliveryError(
                f"outbox item {delivery.outbox_id} ({note.kind}) is not a hook run's completion",
                permanent=True,
            )
        hook = self._hooks.get(str(name))
        if hook is None:
            raise DeliveryError(f"hook {name!r} is no longer configured", permanent=True)
        url = hook.callback_url
        if not url:
            raise DeliveryError(f"hook {name!r} no longer has a callback_url", permanent=True)
        if not hook.allows_callback_to(url):
            raise DeliveryError(
                f"hook {name!r}: callback host of {url!r} is not in callback_hosts",
                permanent=True,
            )
        return hook, url

    async def deliver(self, note: Notification, delivery: Delivery) -> dict[str, Any] | None:
        """POST the signed completion callback `note` stands for.

        Returns:
            ``{"callback_url": ..., "status": <HTTP status>}`` once the receiver accepted.

        Raises:
            DeliveryError: Permanent for a refused URL, a redirect or a 4xx answer;
                transient (with ``retry_after`` when given) for 408/425/429/5xx and
                network failures.
        """
        hook, url = self._target(note, delivery)
        assert isinstance(note, RunCallback)
        payload = callback_payload(note, delivery.destination)
        body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": delivery.outbox_id,
            **signed_headers(hook.secret, body, self._clock.now().timestamp(), purpose=CALLBACK),
        }
        status = await post_callback(
            self._session_factory,
            url,
            body,
            headers,
            timeout_seconds=hook.callback_timeout_seconds,
            clock=self._clock,
            what="callback",
        )
        log.info("callback for run %s delivered to %s", note.run_id, url)
        return {"callback_url": url, "status": status}


async def post_callback(
    session_factory: SessionFactory,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout_seconds: float,
    clock: Clock,
    what: str,
) -> int:
    """POST a signed callback once, without following redirects.

    Args:
        session_factory: Makes the HTTP session.
        url: Where to.
        body: The signed body.
        headers: Its headers, signature included.
        timeout_seconds: The whole request's bound.
        clock: Reads the time a ``Retry-After`` date is counted from.
        what: Names the callback in errors (``callback``, ``approval callback``).

    Returns:
        The receiver's 2xx status.

    Raises:
        DeliveryError: Permanent for a redirect or a 4xx answer; transient (with
            ``retry_after`` when given) for 408/425/429/5xx and network failures.
    """
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    try:
        async with (
            session_factory() as session,
            session.post(
                url, data=body, headers=dict(headers), timeout=timeout, allow_redirects=False
            ) as response,
        ):
            status = response.status
            retry_after = response.headers.get("Retry-After")
            # Read (and drop) a little of the answer so the connection can be reused.
            await response.content.read(4096)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DeliveryError(
            f"{what} to {url} failed: {type(exc).__name__}: {exc}".rstrip(": ")
        ) from exc
    if 200 <= status < 300:
        return status
    message = f"{what} to {url} answered HTTP {status}"
    if status >= 500 or status in _TRANSIENT_STATUSES:
        raise DeliveryError(
            message,
            retry_after=retry_after_seconds(retry_after, clock.now()),
            rate_limited=status == 429,
        )
    if 300 <= status < 400:
        message += " (redirects are not followed)"
    raise DeliveryError(message, permanent=True)
