"""Slack's events while the database fails: 503 ``storage_unavailable`` with
``Retry-After`` (Slack delivers them again), never a 400 that tells Slack to give up."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from fake_slack import BOT_USER, event_body, signed_headers
from slackbed import SlackBed


def _rename(db: object, table: str) -> None:
    # Another connection takes the table away: every statement about it now fails.
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_gone")
        conn.commit()
    finally:
        conn.close()


async def _post(slack: SlackBed, body: str, content_type: str) -> tuple[int, str, Any]:
    headers = signed_headers(body, content_type=content_type)
    response = await slack.client.post("/slack/events", data=body.encode(), headers=headers)
    return response.status, response.headers.get("Retry-After"), await response.text()


async def test_a_mention_the_database_cannot_store_is_503(slack: SlackBed) -> None:
    _rename(slack.db_path, "idempotency_keys")
    event = {
        "type": "app_mention",
        "user": "U1",
        "text": f"<@{BOT_USER}> cache purge the CDN",
        "ts": "1700000000.000100",
        "channel": "C9",
        "event_ts": "1700000000.000100",
    }
    status, retry_after, text = await _post(
        slack, event_body(event, event_id="EvDown"), "application/json"
    )
    assert (status, retry_after) == (503, "2"), text
    assert json.loads(text)["error"] == "storage_unavailable"
