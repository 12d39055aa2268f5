"""When to try again: connection errors, 5xx and 429 answers, with capped backoff."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from adapters.client.errors import SignoffUnavailable


@dataclass(frozen=True)
class RetryPolicy:
    """How the client retries a request signoff did not answer.

    A request that fails with a connection error, a timeout, a 5xx or a 429 answer is
    sent again after a delay that doubles from `first_delay` up to `max_delay` (or what
    the answer's ``Retry-After`` says, if longer). Requesting an approval is safe to
    retry: it always carries an idempotency key.

    Attributes:
        first_delay: Seconds before the first retry.
        max_delay: The longest delay between two tries.
        give_up_after: Seconds of failures in a row after which `SignoffUnavailable` is
            raised; None retries for ever.
    """

    first_delay: float = 0.25
    max_delay: float = 5.0
    give_up_after: float | None = 300.0

    def start(self) -> Attempts:
        """Count the tries of one request."""
        return Attempts(self)


class Attempts:
    """The failures in a row of one request, and the delay before the next try."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._failures = 0
        self._since: float | None = None

    def failed(self, why: str, retry_after: float | None = None) -> float:
        """Record a failure and say how long to wait before trying again.

        Raises:
            SignoffUnavailable: Failures have lasted longer than the policy allows.
        """
        now = time.monotonic()
        if self._since is None:
            self._since = now
        backoff = min(self._policy.max_delay, self._policy.first_delay * 2.0**self._failures)
        self._failures += 1
        delay = max(backoff * random.uniform(0.5, 1.0), retry_after or 0.0)
        limit = self._policy.give_up_after
        if limit is not None and now + delay - self._since > limit:
            raise SignoffUnavailable(
                f"signoff did not answer for {now - self._since:.1f}s "
                f"({self._failures} tries): {why}"
            )
        return delay


def retry_after_seconds(header: str | None) -> float | None:
    """The delay of a ``Retry-After`` header in seconds (None when absent or a date)."""
    if header is None:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        return None
