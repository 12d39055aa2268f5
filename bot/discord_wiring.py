"""Wiring of the Discord edge into `signoff serve`: its configuration, start and stop.

The edge is on when ``SIGNOFF_DISCORD_BOT_TOKEN`` is set; its other settings are the
``discord_*`` fields of `bot.settings.Settings`, and `discord_config` turns them into the
adapter's plain `adapters.discord.DiscordConfig`.

Several replicas: one at a time holds the gateway (a named lease in the database,
`DiscordEdge`); when it dies another takes over once the lease expires. Every replica
delivers the outbox's Discord messages over REST, and clicks answered by the holder are
applied by whichever replica claims them first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import aiohttp

from bot.settings import Settings
from runtime import ConfigurationError, Runtime
from runtime.services.delivery import Notifier
from runtime.worker import Worker

if TYPE_CHECKING:  # discord.py is an optional extra: imported when Discord is started
    from adapters.discord import DiscordBot, DiscordConfig, DiscordNotifier

log = logging.getLogger("signoff.discord")


@dataclass
class DiscordHandle:
    """A running Discord edge: the gateway client, its task and the notifier."""

    client: DiscordBot
    notifier: DiscordNotifier
    task: asyncio.Task[None]


def discord_config(settings: Settings) -> DiscordConfig:
    """The adapter's configuration from the ``discord_*`` settings.

    Raises:
        ConfigurationError: discord.py is not installed.
    """
    try:
        from adapters.discord import DiscordConfig, SyncMode
    except ImportError as exc:
        raise ConfigurationError(
            f"SIGNOFF_DISCORD_BOT_TOKEN is set but discord.py is missing ({exc}); "
            "install the discord extra (pip install -e '.[discord]')"
        ) from exc
    token = settings.discord_bot_token
    roles = settings.discord_approver_roles
    return DiscordConfig(
        bot_token=token.get_secret_value() if token is not None else "",
        api_base_url=settings.discord_api_base_url,
        gateway_url=settings.discord_gateway_url,
        sync=SyncMode(settings.discord_sync),
        guild_id=settings.discord_guild_id,
        role_groups={group: tuple(ids) for group, ids in roles.items()},
        console_url=settings.discord_console_url,
        guild_ready_timeout=settings.discord_guild_ready_timeout,
        ack_budget_seconds=settings.discord_ack_budget,
    )


async def start_discord(
    runtime: Runtime,
    worker: Worker,
    settings: Settings,
    *,
    backoff: tuple[float, float] = (1.0, 60.0),
    acked: Callable[[str, float], None] | None = None,
) -> DiscordHandle:
    """Log in, register the commands and connect the gateway; return once it is ready,
    or after ``settings.discord_ready_timeout`` while it goes on connecting.

    Only a refusal is a configuration error: a refused token, or commands Discord will
    not register. A Discord that cannot be reached (nothing listening, a 5xx on the
    login or the websocket handshake, a dropped connection) is retried in the background
    with growing delays (`backoff`: first and largest, in seconds), while the rest of the
    server serves.

    Raises:
        ConfigurationError: discord.py is not installed, Discord refused the token, or
            the commands could not be registered.
    """
    import discord

    from adapters.discord import DiscordBot, DiscordNotifier, Handlers, configure_endpoints

    config = discord_config(settings)
    configure_endpoints(config.api_base_url, config.gateway_url)
    client = DiscordBot(Handlers(runtime, worker.wake, config, acked=acked), config)
    logged_in = False
    try:
        await client.login(config.bot_token)
        logged_in = True
    except discord.LoginFailure as exc:
        await client.close()
        raise ConfigurationError(f"SIGNOFF_DISCORD_BOT_TOKEN: Discord refused it ({exc})") from exc
    except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
        if isinstance(exc, discord.HTTPException) and exc.status < 500 and exc.status != 429:
            await client.close()
            raise ConfigurationError(
                f"Discord at {config.api_base_url} refused the login: {exc}"
            ) from exc
        log.warning("cannot reach Discord at %s yet (%s); retrying", config.api_base_url, exc)
    except BaseException:
        await client.close()
        raise
    task = asyncio.create_task(
        _keep_connected(client, config.bot_token, logged_in, backoff), name="discord-gateway"
    )
    ready = asyncio.create_task(client.wait_until_ready(), name="discord-ready")
    done, _ = await asyncio.wait(
        {task, ready}, timeout=settings.discord_ready_timeout, return_when=asyncio.FIRST_COMPLETED
    )
    if task in done:
        ready.cancel()
        await client.close()
        error = task.exception()
        if isinstance(error, ConfigurationError):
            raise error
        raise ConfigurationError(f"the Discord gateway connection ended: {error!r}")
    if ready not in done:
        ready.cancel()
        log.warning(
            "the Discord gateway is not ready after %ss; going on while it connects",
            settings.discord_ready_timeout,
        )
    task.add_done_callback(_gateway_ended)
    notifier = DiscordNotifier(config)
    return DiscordHandle(client=client, notifier=notifier, task=task)


async def _keep_connected(
    client: DiscordBot, token: str, logged_in: bool, backoff: tuple[float, float]
) -> None:
    """Log in (if not yet) and hold the gateway connection until the client is closed.

    discord.py reconnects a connection that dropped; a first connection that could not be
    made at all (or a login that could not reach Discord) ends its attempt, so this loop
    tries again with growing delays. A refused token ends it: that is a configuration
    error.
    """
    import discord

    delay, most = backoff
    while not client.is_closed():
        try:
            if not logged_in:
                await client.login(token)
                logged_in = True
            await client.connect(reconnect=True)
            return  # closed on purpose
        except discord.LoginFailure as exc:
            raise ConfigurationError(
                f"SIGNOFF_DISCORD_BOT_TOKEN: Discord refused it ({exc})"
            ) from exc
        except ConfigurationError:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if client.is_closed():
                return
            log.warning("the Discord gateway is not connected (%r); retrying in %.0fs", exc, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, most)


def _gateway_ended(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error("the Discord gateway connection ended: %r", error, exc_info=error)


async def stop_discord(handle: DiscordHandle) -> None:
    """Close the gateway connection and the notifier's HTTP session."""
    await handle.client.close()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(handle.task, timeout=5.0)
    await handle.notifier.close()


GATEWAY_LEASE = "discord-gateway"
"""The named lease whose holder connects the Discord gateway."""


class DiscordEdge:
    """The Discord edge of one replica: REST delivery always, the gateway while it holds it.

    Only one process at a time may hold the gateway connection (Discord would send each
    interaction to one of them, and two bots would race to answer). The holder keeps a
    named lease in the database (`GATEWAY_LEASE`) and renews it a few times per lease
    period; the others try to take it just as often, so when the holder dies another
    replica connects within about the lease time. Cards posted by a replica that died
    keep working: their buttons carry only the ticket.

    Args:
        runtime: The runtime (its store holds the lease).
        worker: Woken when a click was stored.
        settings: The process settings (its ``discord_*`` fields).
        acked: Told how long each decision took to acknowledge (edge, seconds).
    """

    def __init__(
        self,
        runtime: Runtime,
        worker: Worker,
        settings: Settings,
        *,
        acked: Callable[[str, float], None] | None = None,
    ) -> None:
        self._acked = acked
        self._runtime = runtime
        self._worker = worker
        self._settings = settings
        self._owner = runtime.worker_id
        self._lease = settings.discord_gateway_lease_seconds
        self.gateway: DiscordHandle | None = None
        self._notifier: DiscordNotifier | None = None

    @property
    def notifier(self) -> Notifier:
        """The REST notifier for ``{"platform": "discord"}`` items (after `start`)."""
        assert self._notifier is not None, "start the edge first"
        notifier: Notifier = self._notifier
        return notifier

    @property
    def holding(self) -> bool:
        """Whether this process holds the gateway now."""
        return self.gateway is not None

    async def start(self) -> None:
        """Build the REST notifier, and connect the gateway if nobody else holds it.

        Raises:
            ConfigurationError: discord.py is missing, or (when this process connects)
                Discord refused the token.
        """
        from adapters.discord import DiscordNotifier

        self._notifier = DiscordNotifier(discord_config(self._settings))
        if await self._take():
            try:
                self.gateway = await start_discord(
                    self._runtime, self._worker, self._settings, acked=self._acked
                )
            except BaseException:
                await self._drop()
                raise
        else:
            log.info("another replica holds the Discord gateway; this one delivers over REST")

    async def hold(self, stop: asyncio.Event) -> None:
        """Renew the lease while holding; take the gateway over when it is free."""
        interval = self._lease / 5
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
            if stop.is_set():
                return
            try:
                await self._turn()
            except Exception:
                log.exception("keeping the Discord gateway lease failed; retrying")

    async def _turn(self) -> None:
        gateway = self.gateway
        if gateway is not None and gateway.task.done():
            log.warning("the Discord gateway connection ended; letting another replica try")
            await self._let_go()
            return
        try:
            held = await self._take()
        except Exception:
            if self.gateway is not None:
                # Without a renewed lease another replica may connect: step back first.
                log.exception("cannot renew the Discord gateway lease; disconnecting")
                await self._let_go()
            raise
        if held and self.gateway is None:
            log.warning("taking over the Discord gateway")
            try:
                self.gateway = await start_discord(
                    self._runtime, self._worker, self._settings, acked=self._acked
                )
            except Exception:
                await self._drop()
                raise
        elif not held and self.gateway is not None:
            log.warning("the Discord gateway lease was taken by another replica; disconnecting")
            gateway, self.gateway = self.gateway, None
            await stop_discord(gateway)

    async def _take(self) -> bool:
        now = self._runtime.clock.now()
        until = now + timedelta(seconds=self._lease)
        async with self._runtime.store.transaction() as tx:
            fence = await tx.take_lease(GATEWAY_LEASE, owner=self._owner, now=now, until=until)
        return fence is not None

    async def _drop(self) -> None:
        with contextlib.suppress(Exception):
            async with self._runtime.store.transaction() as tx:
                await tx.drop_lease(GATEWAY_LEASE, owner=self._owner)

    async def _let_go(self) -> None:
        gateway, self.gateway = self.gateway, None
        if gateway is not None:
            await stop_discord(gateway)
        await self._drop()

    async def close(self) -> None:
        """Disconnect the gateway, give the lease up (so another replica takes over at
        once) and close the REST notifier."""
        await self._let_go()
        if self._notifier is not None:
            await self._notifier.close()


def discord_notifier(handle: DiscordHandle) -> Notifier:
    """The notifier to route ``{"platform": "discord"}`` outbox items to."""
    notifier: Notifier = handle.notifier
    return notifier


__all__ = [
    "GATEWAY_LEASE",
    "DiscordEdge",
    "DiscordHandle",
    "discord_notifier",
    "start_discord",
    "stop_discord",
]
