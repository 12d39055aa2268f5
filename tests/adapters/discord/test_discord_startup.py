"""Starting the bot: command sync modes and a refused token."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from discord_harness import Harness
from fake_discord import APP_ID, GUILD_ID

from bot.bootstrap import Parts, Service, build_service
from bot.discord_wiring import start_discord, stop_discord
from runtime import ConfigurationError

pytestmark = pytest.mark.timeout(30)

NOTHING_RUNS = Parts(
    listen=False, outbox=False, deadlines=False, wake_ups=False, discord=False, worker=False
)


@asynccontextmanager
async def built(harness: Harness) -> AsyncIterator[Service]:
    """`signoff serve`'s process on the harness's store, not started: the runtime and the
    worker the Discord edge is started with here."""
    service = await build_service(
        harness.settings(),
        agents=harness.agents,
        store=harness.store,
        clock=harness.clock,
        parts=NOTHING_RUNS,
    )
    try:
        yield service
    finally:
        await service.stop(grace_seconds=1)


@pytest.mark.parametrize(
    ("sync", "expected"),
    [
        ("global", ("PUT", f"/applications/{APP_ID}/commands")),
        ("guild", ("PUT", f"/applications/{APP_ID}/guilds/{GUILD_ID}/commands")),
        ("off", None),
    ],
)
async def test_commands_are_synced_as_configured(
    harness: Harness, sync: str, expected: tuple[str, str] | None
) -> None:
    await harness.start_bot(sync=sync)
    puts = [r for r in harness.fake.requests if r[0] == "PUT"]
    assert puts == ([expected] if expected else [])


async def test_a_refused_token_is_a_configuration_error(harness: Harness) -> None:
    async with built(harness) as service:
        with pytest.raises(ConfigurationError, match="SIGNOFF_DISCORD_BOT_TOKEN"):
            await start_discord(
                service.runtime, service.worker, harness.settings(bot_token="wrong")
            )
    assert harness.fake.connected == 0


async def test_refused_command_registration_is_a_configuration_error(harness: Harness) -> None:
    harness.fake.fail_next("PUT", r"/commands$", 403, {"message": "Missing Access", "code": 50001})
    async with built(harness) as service:
        with pytest.raises(ConfigurationError, match=r"applications\.commands"):
            await start_discord(service.runtime, service.worker, harness.settings())


async def test_a_gateway_that_refuses_handshakes_at_first_is_retried(harness: Harness) -> None:
    harness.fake.refuse_gateway = 2
    async with built(harness) as service:
        handle = await start_discord(
            service.runtime,
            service.worker,
            harness.settings(ready_timeout=20),
            backoff=(0.05, 0.2),
        )
        try:
            assert harness.fake.refused_handshakes == 2
            assert harness.fake.connected == 1
            assert not handle.task.done()
        finally:
            await stop_discord(handle)
    assert harness.fake.connected == 0


async def test_an_unreachable_gateway_is_not_a_configuration_error(harness: Harness) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = closed.getsockname()[1]
        async with built(harness) as service:
            handle = await start_discord(
                service.runtime,
                service.worker,
                harness.settings(ready_timeout=0.5, gateway_url=f"ws://127.0.0.1:{port}/"),
                backoff=(0.05, 0.2),
            )
            try:
                # Start-up went on after the ready timeout; the connection is still tried.
                assert not handle.task.done()
                assert harness.fake.connected == 0
            finally:
                await stop_discord(handle)
    assert handle.task.done() and handle.task.exception() is None
