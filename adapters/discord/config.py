"""`DiscordConfig`: what the Discord edge needs to know, built by the composition root.

Also `configure_endpoints`, the one place that points discord.py at another REST base
URL and gateway (a test fake, a proxy in front of Discord).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

import discord
import discord.gateway
import discord.http
import yarl

from runtime import Actor, ConfigurationError

DEFAULT_API_BASE_URL = "https://discord.com/api/v10"
"""Discord's REST API, version 10 (what discord.py 2.x speaks)."""
DEFAULT_GATEWAY_URL = "wss://gateway.discord.gg/"
"""Discord's gateway (a plain `discord.Client` connects here without asking ``/gateway``)."""


class SyncMode(StrEnum):
    """Where the ``/agent`` commands are registered when the bot starts.

    ``off``: never (someone registered them before); ``global``: for every server the bot
    is in; ``guild``: for one server only (instant, handy while trying the bot out).
    """

    OFF = "off"
    GLOBAL = "global"
    GUILD = "guild"


@dataclass(frozen=True, slots=True)
class DiscordConfig:
    """The bot's credentials and options.

    Attributes:
        bot_token: The bot token every REST call and the gateway use.
        api_base_url: REST base URL including the version (``.../api/v10``).
        gateway_url: Gateway websocket URL.
        sync: Where to register the slash commands at start-up.
        guild_id: The server of ``sync=guild``.
        role_groups: Group names usable in tool approvers (``group:<name>``) mapped to
            the Discord role ids whose members belong to them.
        console_url: Public base URL of the web console, for links to forms too large
            for a Discord modal (``<console_url>/runs/<run_id>``).
        guild_ready_timeout: Seconds discord.py waits for more servers before ``ready``.
        ack_budget_seconds: How long a click may take to be checked and stored before
            the bot defers its answer (Discord wants one within 3 seconds).
        timeout_seconds: Timeout of one REST call of the notifier.
    """

    bot_token: str
    api_base_url: str = DEFAULT_API_BASE_URL
    gateway_url: str = DEFAULT_GATEWAY_URL
    sync: SyncMode = SyncMode.GLOBAL
    guild_id: int | None = None
    role_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    console_url: str | None = None
    guild_ready_timeout: float = 2.0
    ack_budget_seconds: float = 2.0
    timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        if not self.bot_token:
            raise ConfigurationError("the Discord bot token is empty")
        if self.sync is SyncMode.GUILD and self.guild_id is None:
            raise ConfigurationError("command sync mode 'guild' needs a guild id")
        if not self.api_base_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"Discord API base URL {self.api_base_url!r}: not http(s)")
        if not self.gateway_url.startswith(("ws://", "wss://")):
            raise ConfigurationError(f"Discord gateway URL {self.gateway_url!r}: not ws(s)")


class Endpoints(NamedTuple):
    """discord.py's REST base URL and default gateway."""

    api_base_url: str
    gateway_url: str


def configure_endpoints(api_base_url: str, gateway_url: str) -> Endpoints:
    """Point discord.py's REST calls and gateway connection at the given URLs.

    discord.py has no per-client option for this: every REST route, interaction
    callbacks and follow-up webhooks included, is built from the class attribute
    ``discord.http.Route.BASE``, and a plain `discord.Client` connects to
    ``DiscordWebSocket.DEFAULT_GATEWAY`` (it never asks ``/gateway/bot``; resumes use the
    ``resume_gateway_url`` of READY). Both are process-wide, so one process talks to one
    Discord — which is what a signoff process does.

    Returns:
        The previous endpoints, to restore them (tests do).
    """
    previous = Endpoints(
        discord.http.Route.BASE, str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    )
    discord.http.Route.BASE = api_base_url.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
    return previous


def actor_of(user: discord.User | discord.Member, config: DiscordConfig) -> Actor:
    """The runtime actor of a Discord user, with the groups Discord vouches for.

    A server member belongs to ``role:<role id>`` for each of their roles (matched by
    approver entries ``group:role:<id>``) and to each configured group name whose roles
    they have (matched by ``group:<name>``). Roles come from the bot's cache of the
    server, kept by the ``guilds`` intent; a role the bot does not know counts as not held.
    """
    roles: set[str] = set()
    if isinstance(user, discord.Member):
        roles = {str(role.id) for role in user.roles}
    groups = {f"role:{role}" for role in roles}
    groups |= {name for name, ids in config.role_groups.items() if roles.intersection(ids)}
    return Actor(
        id=str(user.id),
        groups=frozenset(groups),
        platform="discord",
        name=user.display_name,
    )
