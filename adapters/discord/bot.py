"""`DiscordBot`: the gateway client — slash commands, persistent buttons, modal forms.

- ``/agent run|pending|status|cancel`` are an `app_commands.Group` registered at start-up
  according to `SyncMode` (never, globally, or in one server), and so is
  ``/signoff link <code>``, which links the caller's account to a person.
- Every card button is a `TicketButton`, a `discord.ui.DynamicItem` whose template
  matches any signoff ``custom_id``; it is registered once with ``add_dynamic_items``,
  so a click on a message posted before a restart (or by another process) is handled
  with no view in memory. A batch message's buttons are `BatchButton`s, alike.
- Modal submissions are handled in ``on_interaction`` from their ``custom_id`` alone.
"""

from __future__ import annotations

import logging
import re
from typing import Any, cast

import discord
from discord import app_commands

from adapters.discord.config import DiscordConfig, SyncMode
from adapters.discord.custom_ids import (
    BATCH_TEMPLATE,
    BUTTON_TEMPLATE,
    Action,
    BatchClick,
    TicketClick,
)
from adapters.discord.handlers import Handlers, Interaction
from runtime import ConfigurationError

log = logging.getLogger("signoff.discord")


class TicketButton(
    discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=BUTTON_TEMPLATE
):
    """Any signoff button: the action, ticket id and correlation token live in its custom_id."""

    def __init__(self, click: TicketClick) -> None:
        super().__init__(discord.ui.Button(custom_id=click.button_id, label=click.action.value))
        self.click = click

    @classmethod
    async def from_custom_id(
        cls,
        interaction: Interaction,
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> TicketButton:
        """Rebuild the button from a clicked custom_id."""
        return cls(TicketClick(Action(match["action"]), match["ticket"], match["token"]))

    async def callback(self, interaction: Interaction) -> None:
        """Hand the click to the bot's handlers."""
        client = interaction.client
        if isinstance(client, DiscordBot):
            await client.handlers.clicked(interaction, self.click)


class BatchButton(
    discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=BATCH_TEMPLATE
):
    """ "Allow all N" / "Deny all N" of a batch message: the batch's first ticket and its
    token live in its custom_id."""

    def __init__(self, click: BatchClick) -> None:
        super().__init__(discord.ui.Button(custom_id=click.button_id, label=click.decision))
        self.click = click

    @classmethod
    async def from_custom_id(
        cls,
        interaction: Interaction,
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> BatchButton:
        """Rebuild the button from a clicked custom_id."""
        return cls(BatchClick(match["decision"], match["ticket"], match["token"]))

    async def callback(self, interaction: Interaction) -> None:
        """Hand the click to the bot's handlers."""
        client = interaction.client
        if isinstance(client, DiscordBot):
            await client.handlers.batch_clicked(interaction, self.click)


class AgentCommands(app_commands.Group):
    """``/agent ...``: run agents and see what waits for a decision."""

    def __init__(self, handlers: Handlers) -> None:
        super().__init__(name="agent", description="Run signoff agents and decide their calls")
        self.signoff_handlers = handlers

    @app_commands.command(name="run", description="Start an agent on a prompt")
    @app_commands.describe(agent="The agent to run", prompt="What the agent should do")
    async def run(self, interaction: Interaction, agent: str, prompt: str) -> None:
        """Start a run."""
        await self.signoff_handlers.run(interaction, agent, prompt)

    @run.autocomplete("agent")
    async def _agent_names(
        self, interaction: Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        return [
            app_commands.Choice(name=name, value=name)
            for name in self.signoff_handlers.agent_names(current)
        ]

    @app_commands.command(name="pending", description="Requests waiting for your decision")
    async def pending(self, interaction: Interaction) -> None:
        """List the caller's open requests."""
        await self.signoff_handlers.pending(interaction)

    @app_commands.command(name="status", description="Where a run stands")
    @app_commands.describe(run="The run id, e.g. run_3f9a...")
    async def status(self, interaction: Interaction, run: str) -> None:
        """Show a run."""
        await self.signoff_handlers.status(interaction, run)

    @app_commands.command(name="cancel", description="Cancel a run (open requests are withdrawn)")
    @app_commands.describe(run="The run id, e.g. run_3f9a...")
    async def cancel(self, interaction: Interaction, run: str) -> None:
        """Cancel a run."""
        await self.signoff_handlers.cancel(interaction, run)


class SignoffCommands(app_commands.Group):
    """``/signoff link <code>``: link the caller's Discord account to a person."""

    def __init__(self, handlers: Handlers) -> None:
        super().__init__(name="signoff", description="Your signoff account")
        self.signoff_handlers = handlers

    @app_commands.command(name="link", description="Link your Discord account with a console code")
    @app_commands.describe(code="The one-time code the console's Link page showed you")
    async def link(self, interaction: Interaction, code: str) -> None:
        """Redeem a link code."""
        await self.signoff_handlers.link(interaction, code)


class DiscordBot(discord.Client):
    """The gateway client of signoff.

    Args:
        handlers: What to do with each interaction.
        config: Sync mode, guild and timeouts.
    """

    def __init__(self, handlers: Handlers, config: DiscordConfig) -> None:
        # Interactions arrive without any intent; `guilds` keeps the role cache that
        # role-based approvers are checked against. Neither is privileged.
        intents = discord.Intents.none()
        intents.guilds = True
        super().__init__(
            intents=intents,
            guild_ready_timeout=config.guild_ready_timeout,
            allowed_mentions=discord.AllowedMentions.none(),
        )
        self.handlers = handlers
        self.config = config
        self.tree: app_commands.CommandTree[DiscordBot] = app_commands.CommandTree(self)
        self.tree.add_command(AgentCommands(handlers))
        self.tree.add_command(SignoffCommands(handlers))

    async def setup_hook(self) -> None:
        """Register the persistent buttons and sync the commands (during login)."""
        self.add_dynamic_items(TicketButton, BatchButton)
        await sync_commands(self.tree, self.config)

    async def on_interaction(self, interaction: Interaction) -> None:
        """Modal submissions, and components no button template matches.

        Every component this bot can receive is on a message it posted, so one that is
        not a signoff button (a malformed or foreign ``custom_id``) still gets an answer
        instead of Discord's "This interaction failed".
        """
        data = cast(dict[str, Any], interaction.data or {})
        custom_id = str(data.get("custom_id", ""))
        if interaction.type is discord.InteractionType.modal_submit:
            await self.handlers.submitted(interaction)
        elif (
            interaction.type is discord.InteractionType.component
            and not TicketButton.__discord_ui_compiled_template__.fullmatch(custom_id)
            and not BatchButton.__discord_ui_compiled_template__.fullmatch(custom_id)
        ):
            await self.handlers.unrecognised(interaction)


async def sync_commands(tree: app_commands.CommandTree[DiscordBot], config: DiscordConfig) -> None:
    """Register ``/agent`` as `config.sync` says.

    Raises:
        ConfigurationError: Discord refused (the bot was invited without the
            ``applications.commands`` scope, or is not in the guild).
    """
    try:
        match config.sync:
            case SyncMode.OFF:
                return
            case SyncMode.GLOBAL:
                await tree.sync()
            case SyncMode.GUILD:
                guild = discord.Object(id=cast(int, config.guild_id))
                tree.copy_global_to(guild=guild)
                await tree.sync(guild=guild)
    except discord.Forbidden as exc:
        raise ConfigurationError(
            f"Discord refused to register the slash commands ({exc}); invite the bot with "
            "the applications.commands scope (and to the guild of SIGNOFF_DISCORD_GUILD_ID)"
        ) from exc
    log.info("synced the /agent commands (%s)", config.sync)
