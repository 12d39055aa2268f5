"""A real `signoff serve` process SIGKILLed right after answering a Discord click.

The click is stored before Discord gets its answer; a process killed before applying it
leaves a pending command that the next process applies exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from discord_harness import ALICE
from fake_discord import FakeDiscord
from testkit import ROOT, Served, received_state, restart_and_check_applied_once, until

pytestmark = [pytest.mark.timeout(120), pytest.mark.crash]


async def test_a_click_answered_by_a_killed_process_is_applied_once_after_restart(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    db = tmp_path / "serve.db"
    ledger = tmp_path / "ledger.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("SIGNOFF_")}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
            "SIGNOFF_APP": "tests.e2e.serve_app:agents",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_LEASE_SECONDS": "1",
            "SIGNOFF_OPERATOR_TOKEN": "operator-token-0123456789",
            "SIGNOFF_DISCORD_BOT_TOKEN": "fake-bot-token",
            "SIGNOFF_DISCORD_API_BASE_URL": fake.api_base_url,
            "SIGNOFF_DISCORD_GATEWAY_URL": fake.gateway_url,
            "SIGNOFF_DISCORD_GUILD_READY_TIMEOUT": "0.1",
            "SIGNOFF_TEST_LEDGER": str(ledger),
        }
    )
    held = env | {"SIGNOFF_APP": "tests.e2e.held_app:agents"}
    served = await Served.start(held)
    await fake.wait_for(lambda: fake.connected == 1, seconds=30, what="the bot on the gateway")
    started = await fake.interact(fake.slash(ALICE, "run", agent="payments", prompt="pay"))
    await fake.answered(started)
    card = await until(lambda: fake.cards(), "the approval card")
    click = await fake.interact(fake.click(ALICE, card[0], "Allow"))
    await fake.answered(click)
    assert "recorded" in click.text.lower(), click.text
    served.kill()  # after the answer, before the (held) apply
    assert received_state(db, clicks=1) == "pending"
    await restart_and_check_applied_once(env, db, ledger, runs=1)
