"""The fake Discord still speaks the protocol of the installed discord.py.

If a discord.py upgrade changes what it sends or expects (routes, gateway handshake,
interaction payload fields), this test fails first and says where.
"""

from __future__ import annotations

import discord
import pytest
from discord_harness import ALICE, Harness
from fake_discord import APP_ID, BOT_ID, GUILD_ID, TOKEN

pytestmark = pytest.mark.timeout(30)


async def test_fake_discord_still_speaks_discordpy_protocol(harness: Harness) -> None:
    fake = harness.fake
    bot = await harness.start_bot()
    client = bot.handle.client
    # REST: login read the bot user and the application, then synced the guild commands.
    assert client.is_ready(), "discord.py never became ready against the fake gateway"
    assert client.user is not None and client.user.id == BOT_ID
    assert client.application_id == APP_ID
    assert ("GET", "/users/@me") in fake.requests
    assert ("GET", "/oauth2/applications/@me") in fake.requests
    assert ("PUT", f"/applications/{APP_ID}/guilds/{GUILD_ID}/commands") in fake.requests
    agent, signoff = fake.commands[str(GUILD_ID)]
    assert agent["name"] == "agent"
    assert sorted(o["name"] for o in agent["options"]) == ["cancel", "pending", "run", "status"]
    assert signoff["name"] == "signoff"
    assert [o["name"] for o in signoff["options"]] == ["link"]
    # Gateway: one IDENTIFY with our token and the guilds intent only, then READY and
    # GUILD_CREATE made the guild and its roles known.
    [identify] = fake.identifies
    assert identify["token"] == TOKEN
    assert identify["intents"] == discord.Intents(guilds=True).value
    guild = client.get_guild(GUILD_ID)
    assert guild is not None and len(guild.roles) == 4
    # An INTERACTION_CREATE reaches the command tree, and the callback (token in the URL,
    # `with_response`) and the follow-up webhook come back to the fake.
    record = await fake.interact(fake.slash(ALICE, "status", run="run_nope"))
    text = await fake.answered(record)
    assert "No run" in text
    assert record.ephemeral
    assert any(path.startswith(f"/interactions/{record.id}/") for _, path in fake.requests)
    # Autocomplete answers with the loaded agents.
    complete = await fake.interact(fake.autocomplete(ALICE, "ban"))
    await fake.wait_for(lambda: complete.callbacks, what="autocomplete")
    [callback] = complete.callbacks
    assert callback["type"] == 8
    assert [c["value"] for c in callback["data"]["choices"]] == ["bank", "bigbank"]
