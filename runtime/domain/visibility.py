"""Who may see what: the read and thread-joining rules every edge applies.

- Operators see every run and ticket.
- Anyone else sees a run they requested, a run with an open ticket they may decide, and a
  run with a ticket they decided. Everything else does not exist for them: edges answer
  as if the run were unknown, so its existence is not revealed.
- Open tickets are listed only to those who may decide them.
- A run may be paused, cancelled or resumed only by an operator or its requester.
- A run may be started in an existing thread only by someone who takes part in it (the
  requester of one of its runs) or an operator. Chat threads (``slack:...``,
  ``discord:...``) follow their platform's visibility and can never be joined by naming
  their id elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from runtime.domain.states import TicketStatus
from runtime.domain.tickets import Actor, ResumeTicket

CHAT_THREAD_PREFIXES = ("slack:", "discord:")
"""Thread ids owned by a chat platform; only that platform's edge starts runs in them."""


def sees_ticket(viewer: Actor, ticket: ResumeTicket) -> bool:
    """Whether `viewer` may see `ticket`: an operator, whoever decided it, or (while it is
    open) someone who may decide it."""
    if viewer.operator or ticket.decided_by in viewer.ids:
        return True
    return ticket.status is TicketStatus.OPEN and ticket.may_decide(viewer)


def sees_run(viewer: Actor, requester: str | None, tickets: Iterable[ResumeTicket]) -> bool:
    """Whether `viewer` may see a run requested by `requester` with these tickets."""
    if viewer.operator or (requester is not None and requester in viewer.ids):
        return True
    return any(sees_ticket(viewer, ticket) for ticket in tickets)


def may_control(viewer: Actor, requester: str | None) -> bool:
    """Whether `viewer` may pause, cancel or resume a run requested by `requester`:
    operators control any run, anyone else only the runs they started."""
    return viewer.operator or (requester is not None and requester in viewer.ids)


def is_chat_thread(thread_id: str) -> bool:
    """Whether `thread_id` belongs to a chat platform."""
    return thread_id.startswith(CHAT_THREAD_PREFIXES)


def may_join_thread(viewer: Actor, requesters: Iterable[str | None]) -> bool:
    """Whether `viewer` may add a run to a thread whose runs were started by `requesters`.

    A thread without runs yet may be named freely (it becomes the viewer's own).
    """
    known = list(requesters)
    return not known or viewer.operator or viewer.id in known
