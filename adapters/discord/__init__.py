"""Discord: slash commands, approval cards with buttons that survive restarts, modals.

- `config`: `DiscordConfig`, `SyncMode`, `configure_endpoints` (REST and gateway URLs)
  and `actor_of` (a Discord user as a runtime `Actor`, roles as groups);
- `custom_ids`: what a button's or modal's ``custom_id`` carries (ticket id and token,
  or a batch's first ticket and token);
- `cards`, `forms`, `refusals`: pure builders of messages, modal fields and refusals;
- `modals`: the deny-with-reason, typed-input, record-result and allow-with-changes
  modals;
- `handlers`: check -> store -> acknowledge, for every click, form and slash command;
- `bot`: `DiscordBot`, the gateway client with ``/agent`` and the persistent buttons;
- `notifier`: `DiscordNotifier`, the outbox's notifications as Discord messages.

Depends on the runtime and discord.py only.
"""

from adapters.discord import _quiet  # noqa: F401  (imports discord.py quietly, first)
from adapters.discord.bot import (
    AgentCommands,
    BatchButton,
    DiscordBot,
    TicketButton,
    sync_commands,
)
from adapters.discord.config import (
    DEFAULT_API_BASE_URL,
    DEFAULT_GATEWAY_URL,
    DiscordConfig,
    Endpoints,
    SyncMode,
    actor_of,
    configure_endpoints,
)
from adapters.discord.custom_ids import (
    Action,
    BatchClick,
    TicketClick,
    parse_batch,
    parse_button,
    parse_modal,
)
from adapters.discord.handlers import Handlers, Reply
from adapters.discord.notifier import DiscordNotifier

__all__ = [
    "DEFAULT_API_BASE_URL",
    "DEFAULT_GATEWAY_URL",
    "Action",
    "AgentCommands",
    "BatchButton",
    "BatchClick",
    "DiscordBot",
    "DiscordConfig",
    "DiscordNotifier",
    "Endpoints",
    "Handlers",
    "Reply",
    "SyncMode",
    "TicketButton",
    "TicketClick",
    "actor_of",
    "configure_endpoints",
    "parse_batch",
    "parse_button",
    "parse_modal",
    "sync_commands",
]
