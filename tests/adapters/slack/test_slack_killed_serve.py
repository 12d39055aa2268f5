"""A real `signoff serve` process SIGKILLed right after acking a Slack click.

The click is stored before Slack gets its 200; a process killed before applying it leaves
a pending command that the next process applies exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp
import pytest
from fake_slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    click_payload,
    command_body,
    interaction_body,
    signed_headers,
)
from slackbed import buttons
from testkit import ROOT, Served, received_state, restart_and_check_applied_once, until

pytestmark = [pytest.mark.timeout(120), pytest.mark.crash]


async def post(url: str, body: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/slack/events", data=body, headers=signed_headers(body)) as answer,
    ):
        await answer.read()
        return answer.status


async def test_a_click_acked_by_a_killed_process_is_applied_once_after_restart(
    fake: FakeSlack, tmp_path: Path
) -> None:
    db = tmp_path / "serve.db"
    ledger = tmp_path / "ledger.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("SIGNOFF_", "SLACK_"))}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
            "SIGNOFF_APP": "tests.e2e.serve_app:agents",
            "SIGNOFF_PORT": "0",
            "SIGNOFF_LEASE_SECONDS": "1",
            "SIGNOFF_OPERATOR_TOKEN": "operator-token-0123456789",
            "SIGNOFF_SLACK_MODE": "http",
            "SIGNOFF_SLACK_BOT_TOKEN": BOT_TOKEN,
            "SIGNOFF_SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SIGNOFF_SLACK_API_BASE_URL": f"{fake.url}/api/",
            "SIGNOFF_TEST_LEDGER": str(ledger),
        }
    )
    served = await Served.start(env | {"SIGNOFF_APP": "tests.e2e.held_app:agents"})
    assert await post(served.url, command_body("payments pay ACC-1", user="U1")) == 200
    card = await until(
        lambda: [m for m in fake.messages.values() if buttons(m)], "the approval card"
    )
    allow = next(v for k, v in buttons(card[0]).items() if "allow" in k)
    payload = click_payload("signoff_allow", allow, user="U1", message={"ts": card[0].ts})
    payload["actions"][0]["action_id"] = next(k for k in buttons(card[0]) if "allow" in k)
    assert await post(served.url, interaction_body(payload)) == 200
    served.kill()  # after Slack's 200, before the (held) apply
    assert received_state(db, clicks=1) == "pending"
    await restart_and_check_applied_once(env, db, ledger, runs=1)
