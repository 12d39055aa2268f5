"""The modals a card's buttons open: deny with reason, typed input, record a result,
allow with changes.

Each modal's ``custom_id`` names its ticket and token (`custom_ids.TicketClick.modal_id`),
so a submission is handled from the id alone, even by a bot that restarted while the
person was typing.
"""

from __future__ import annotations

from collections.abc import Sequence

import discord

from adapters.discord.custom_ids import TicketClick
from adapters.discord.forms import LABEL_LENGTH, MAX_FIELDS, VALUE_LENGTH, FormField, clip

TITLE_LENGTH = 45
REASON_FIELD = "reason"
RESULT_FIELD = "result"
HOURS_FIELD = "hours"


def _modal(title: str, click: TicketClick) -> discord.ui.Modal:
    return discord.ui.Modal(title=clip(title, TITLE_LENGTH), custom_id=click.modal_id, timeout=None)


def reason_modal(click: TicketClick) -> discord.ui.Modal:
    """Deny with a reason the model will read."""
    modal = _modal("Deny with reason", click)
    modal.add_item(
        discord.ui.TextInput(
            label="Why is this denied?",
            custom_id=REASON_FIELD,
            style=discord.TextStyle.paragraph,
            required=True,
            max_length=1000,
            placeholder="The agent sees this reason.",
        )
    )
    return modal


def result_modal(click: TicketClick, tool: str) -> discord.ui.Modal:
    """Record what an uncertain call really did."""
    modal = _modal(f"What did {tool} do?", click)
    modal.add_item(
        discord.ui.TextInput(
            label="Verified result (JSON or text)",
            custom_id=RESULT_FIELD,
            style=discord.TextStyle.paragraph,
            required=True,
            max_length=VALUE_LENGTH,
            placeholder='e.g. "paged by phone" or {"refund_id": "re_123"}',
        )
    )
    return modal


def input_modal(click: TicketClick, prompt: str, fields: Sequence[FormField]) -> discord.ui.Modal:
    """One text input per schema property (at most five)."""
    modal = _modal(prompt or "Input needed", click)
    for field in fields[:5]:
        modal.add_item(
            discord.ui.TextInput(
                label=clip(field.label, LABEL_LENGTH),
                custom_id=field.name,
                style=(
                    discord.TextStyle.paragraph if field.kind == "json" else discord.TextStyle.short
                ),
                required=field.required,
                default=field.initial,
                placeholder=field.placeholder or None,
                max_length=VALUE_LENGTH,
            )
        )
    return modal


def grant_modal(click: TicketClick, tool: str) -> discord.ui.Modal:
    """Allow now, and the tool's later calls in this thread for some hours."""
    modal = _modal(f"Allow {tool} in this thread", click)
    modal.add_item(
        discord.ui.TextInput(
            label="For how many hours",
            custom_id=HOURS_FIELD,
            style=discord.TextStyle.short,
            required=True,
            default="8",
            max_length=10,
            placeholder="e.g. 8 or 0.5; later calls by the requester in this thread go ahead",
        )
    )
    return modal


def edit_modal(
    click: TicketClick, tool: str, fields: Sequence[FormField], total: int
) -> discord.ui.Modal:
    """The call's editable arguments (at most five), pre-filled with their values.

    Every input is optional: one left empty keeps its value. With more than five
    editable arguments the title says how many are shown; the others keep their values.
    """
    title = f"Change {tool}" if total <= MAX_FIELDS else f"Change {tool} ({MAX_FIELDS} of {total})"
    modal = _modal(title, click)
    for field in fields[:MAX_FIELDS]:
        initial = field.initial
        modal.add_item(
            discord.ui.TextInput(
                label=clip(field.label, LABEL_LENGTH),
                custom_id=field.name,
                style=(
                    discord.TextStyle.paragraph if field.kind == "json" else discord.TextStyle.short
                ),
                required=False,
                default=initial if initial is not None and len(initial) <= VALUE_LENGTH else None,
                placeholder=field.placeholder or None,
                max_length=VALUE_LENGTH,
            )
        )
    return modal
