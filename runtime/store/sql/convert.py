"""Values as the SQL store keeps them: times as microseconds since the epoch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from runtime.domain.states import RunStatus, TicketStatus

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


OPEN = TicketStatus.OPEN.value
RUNNING = RunStatus.RUNNING.value
QUEUED = RunStatus.QUEUED.value


def to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch of a timezone-aware datetime."""
    if value.utcoffset() is None:
        raise ValueError(f"the store needs timezone-aware datetimes, got {value!r}")
    return (value - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    """The UTC datetime `value` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(microseconds=value)


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def opt_micros(value: datetime | None) -> int | None:
    return None if value is None else to_micros(value)


def opt_datetime(value: int | None) -> datetime | None:
    return None if value is None else from_micros(value)


def without(values: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        del values[key]
    return values
