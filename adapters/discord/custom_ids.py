"""The ``custom_id`` of every button and modal: which ticket, which token, what to do.

A button says ``so:<action>:<ticket id>:<correlation token>``; a modal it opens says
``so:m:<action>:<ticket id>:<correlation token>``; a batch message's "Allow all N" and
"Deny all N" say ``so:b:<allow|deny>:<first ticket id>:<batch token>``
(`runtime.services.batches`). Everything else about the ticket is
read from the database when the click arrives, so no view has to live in memory and the
buttons keep working after a restart. Discord caps a ``custom_id`` at 100 characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

PREFIX = "so:"
MAX_LENGTH = 100
_ID = r"[A-Za-z0-9_-]{1,32}"
_TOKEN = r"[A-Za-z0-9_-]{1,48}"


class Action(StrEnum):
    """What a button does."""

    ALLOW = "allow"
    DENY = "deny"
    REASON = "reason"  # opens the deny-with-reason modal
    INPUT = "input"  # opens the typed-input modal
    RESULT = "result"  # opens the record-result modal
    RETRY = "retry"
    ABORT = "abort"
    GRANT_RUN = "grun"  # allow, and for the rest of the run
    GRANT_THREAD = "gthread"  # opens the allow-in-this-thread modal (hours)
    EDIT = "edit"  # opens the allow-with-changes modal


MODAL_ACTIONS = frozenset(
    {Action.REASON, Action.INPUT, Action.RESULT, Action.GRANT_THREAD, Action.EDIT}
)

BUTTON_TEMPLATE = (
    rf"so:(?P<action>{'|'.join(a.value for a in Action)}):(?P<ticket>{_ID}):(?P<token>{_TOKEN})"
)
"""The `discord.ui.DynamicItem` template of every signoff button."""
MODAL_TEMPLATE = (
    rf"so:m:(?P<action>{'|'.join(a.value for a in sorted(MODAL_ACTIONS))})"
    rf":(?P<ticket>{_ID}):(?P<token>{_TOKEN})"
)
BATCH_TEMPLATE = rf"so:b:(?P<decision>allow|deny):(?P<ticket>{_ID}):(?P<token>{_TOKEN})"
"""The `discord.ui.DynamicItem` template of a batch message's buttons."""
_BUTTON = re.compile(BUTTON_TEMPLATE)
_MODAL = re.compile(MODAL_TEMPLATE)
_BATCH = re.compile(BATCH_TEMPLATE)


@dataclass(frozen=True, slots=True)
class TicketClick:
    """What a button or modal names: an action on one ticket, with its token."""

    action: Action
    ticket_id: str
    correlation: str

    @property
    def button_id(self) -> str:
        """The button's ``custom_id``."""
        return _checked(f"{PREFIX}{self.action.value}:{self.ticket_id}:{self.correlation}")

    @property
    def modal_id(self) -> str:
        """The ``custom_id`` of the modal this button opens."""
        return _checked(f"{PREFIX}m:{self.action.value}:{self.ticket_id}:{self.correlation}")


@dataclass(frozen=True, slots=True)
class BatchClick:
    """What a batch button names: allow or deny every call of a batch, by its first
    ticket and the batch's token."""

    decision: str
    ticket_id: str
    token: str

    @property
    def button_id(self) -> str:
        """The button's ``custom_id``."""
        return _checked(f"{PREFIX}b:{self.decision}:{self.ticket_id}:{self.token}")


def parse_batch(custom_id: str) -> BatchClick | None:
    """The batch a button's ``custom_id`` names, or None if it is no batch button."""
    found = _BATCH.fullmatch(custom_id)
    if found is None:
        return None
    return BatchClick(found["decision"], found["ticket"], found["token"])


def _checked(custom_id: str) -> str:
    if len(custom_id) > MAX_LENGTH or not (
        _BUTTON.fullmatch(custom_id) or _MODAL.fullmatch(custom_id) or _BATCH.fullmatch(custom_id)
    ):
        raise ValueError(f"ticket id or token does not fit a Discord custom_id: {custom_id!r}")
    return custom_id


def parse_button(custom_id: str) -> TicketClick | None:
    """The click a button's ``custom_id`` names, or None if it is not a signoff button."""
    found = _BUTTON.fullmatch(custom_id)
    if found is None:
        return None
    return TicketClick(Action(found["action"]), found["ticket"], found["token"])


def parse_modal(custom_id: str) -> TicketClick | None:
    """The click a modal's ``custom_id`` names, or None if it is not a signoff modal."""
    found = _MODAL.fullmatch(custom_id)
    if found is None:
        return None
    return TicketClick(Action(found["action"]), found["ticket"], found["token"])


def is_ours(custom_id: str) -> bool:
    """Whether a ``custom_id`` claims to be signoff's (it may still be malformed)."""
    return custom_id.startswith(PREFIX)
