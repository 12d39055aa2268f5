"""Handing a run straight to a local worker, claimed in the commit that made it ready.

Without a hand-off a run started without waiting, or made ready by its last decision,
is stored ``queued``; a worker then finds it and claims it in a transaction of its own.
When a worker of this process has a free slot, the start's (or the decision's) own
transaction claims the run for this process instead, and the worker drives it at once:
one transaction and one commit fewer per step, with the same lease and fence as any claim
(a crash leaves the run to recovery once the lease expires, like any claimed run).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol


class Slot(Protocol):
    """One place in a worker, reserved before the transaction that may claim a run."""

    def use(self, run_id: str, work: Coroutine[Any, Any, object]) -> None:
        """Drive the run (`work` drives it; it was claimed for this process)."""

    def release(self) -> None:
        """Give the place back unused (a no-op once used)."""


class Slots(Protocol):
    """Where a runtime hands claimed runs: a worker of the same process."""

    def reserve(self) -> Slot | None:
        """A free place, or None when every place is taken (the run is then queued)."""


__all__ = ["Slot", "Slots"]
