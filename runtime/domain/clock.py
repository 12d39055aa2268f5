"""Injected time and ids: the core never reads the wall clock or makes ids by itself."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Protocol


class Clock(Protocol):
    """A source of the current time (timezone-aware, UTC)."""

    def now(self) -> datetime:
        """The current time."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)


class ManualClock:
    """A clock tests move by hand.

    Args:
        start: The initial time (default 2026-01-01T00:00Z).
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        """The clock's time."""
        return self._now

    def advance(self, seconds: float = 0.0, **delta: float) -> datetime:
        """Move the clock forward and return the new time."""
        self._now += timedelta(seconds=seconds, **delta)
        return self._now


class IdSource(Protocol):
    """Makes ids and secrets."""

    def new_id(self, prefix: str) -> str:
        """A new unique id starting with ``prefix_``."""
        ...

    def token(self) -> str:
        """A new unguessable one-use token."""
        ...


class RandomIds:
    """Random ids: unique across processes and replicas."""

    def new_id(self, prefix: str) -> str:
        """``prefix_`` plus 20 random base32-ish characters."""
        return f"{prefix}_{secrets.token_hex(10)}"

    def token(self) -> str:
        """A 256-bit url-safe random token."""
        return secrets.token_urlsafe(32)


class SequentialIds:
    """Predictable ids for tests: ``run_1``, ``run_2``, ...; tokens stay random unless seeded.

    Args:
        seed: A prefix that keeps ids from two instances apart.
    """

    def __init__(self, seed: str = "") -> None:
        self._counter = count(1)
        self._seed = seed

    def new_id(self, prefix: str) -> str:
        """The next id."""
        return f"{prefix}_{self._seed}{next(self._counter)}"

    def token(self) -> str:
        """A predictable token (tests only)."""
        return f"tok{self._seed}{next(self._counter)}"
