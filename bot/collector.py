"""How a signoff process uses Python's cyclic garbage collector.

Nearly everything signoff allocates is freed by reference counting the moment it is no
longer used; the cyclic collector only finds the few cycles left (tracebacks, some
aiohttp and SQLAlchemy internals). Its default pace (a young collection every 700 net
allocations, a full one scanning every live object) is tuned for small programs: in a
server answering a thousand clicks a second it ran ~80 young collections a second and a
full one of ~90 ms now and then, which is what the slowest answers waited for.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Net allocations of tracked objects between two young collections (Python's is 700)."""


def loading() -> None:
    """Pause the collector while modules load (they live as long as the process)."""
    gc.disable()


def loaded() -> None:
    """Freeze what loading made out of later collections; turn the collector back on."""
    gc.freeze()
    gc.enable()


def serving() -> None:
    """Tune the collector for a process that has started and now serves.

    What start-up built (the application, the store's engine and caches, the loaded
    agents) is frozen out of later collections, and the young generation is collected
    every `YOUNG_THRESHOLD` net allocations instead of 700: a request's objects are then
    freed by reference counting before a collection sees them, so they are not promoted
    and full collections scan little. Garbage that only a collection frees waits a
    little longer, at most a few megabytes.
    """
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
