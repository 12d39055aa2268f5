"""The one accept step every chat edge takes for a click: check it and store it durably.

A click names a ticket and carries its one-use token. `accept` checks it against the
committed ticket and stores it as a received command in one transaction (the insert is
rolled back when the check refuses it); only then does the edge acknowledge the
platform. A worker applies stored commands later (`Runtime.apply_received`), exactly
once. `may_answer` is the same check without storing, for a button that opens a form.

Both answer with a typed outcome instead of raising: `Accepted`, `Decidable` or
`Refused` (whose `runtime.domain.refusals.Refusal` an edge only has to word).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runtime.domain.refusals import Refusal
from runtime.domain.tickets import Actor, ResumeTicket


@dataclass(frozen=True, slots=True)
class Accepted:
    """The click was checked and is stored; a worker applies it.

    Attributes:
        ticket: The ticket it decides, as committed when it was checked.
        stored: False when this delivery had been stored before (a platform's retry):
            nothing new was stored and the edge only acknowledges it again.
    """

    ticket: ResumeTicket | None
    stored: bool = True


@dataclass(frozen=True, slots=True)
class Decidable:
    """The actor may answer the ticket with that kind of answer now (a form may open)."""

    ticket: ResumeTicket


@dataclass(frozen=True, slots=True)
class Refused:
    """Nothing was stored or changed; `refusal` says why."""

    refusal: Refusal


AcceptOutcome = Accepted | Refused
"""What `Runtime.accept` did with a click."""
FormOutcome = Decidable | Refused
"""What `Runtime.may_answer` found."""

ActorSource = Actor | Callable[[ResumeTicket | None], Actor | Awaitable[Actor]]
"""The clicker, or how to find out who they are once the ticket is known (an edge that
verifies group memberships looks up only the groups the ticket names). The function
returns the `Actor` itself when it needs no look-up (the ticket is then read only once),
else an awaitable doing the look-up; it may use only what a ticket never changes
(approvers, agent, tool), as the ticket it is given can be older than the one checked."""


__all__ = [
    "AcceptOutcome",
    "Accepted",
    "ActorSource",
    "Decidable",
    "FormOutcome",
    "Refused",
]
