"""Pure parts: cards within Discord's limits, custom ids, form conversion, settings."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.discord import Action, SyncMode, TicketClick, parse_button, parse_modal
from adapters.discord.cards import (
    DESCRIPTION_LENGTH,
    EMBED_FIELDS,
    EMBED_TOTAL,
    FIELD_VALUE_LENGTH,
    card,
    embed_length,
    escape,
    fit_embed,
    outcome,
)
from adapters.discord.forms import form_fields, read_values, submitted_values
from bot.discord_wiring import discord_config
from bot.settings import load_settings
from runtime import ConfigurationError
from runtime.domain.notifications import ApprovalRequested, Decided, TicketExpired, TicketVoided

TICKET = "tk_0123456789abcdef0123"
TOKEN = "Ab-_" * 10 + "xyz"  # 43 characters, like RandomIds.token()


def payload(**target: Any) -> ApprovalRequested:
    return ApprovalRequested.model_validate(ticket_fields(**target))


def ticket_fields(**target: Any) -> dict[str, Any]:
    return {
        "run_id": "run_1",
        "agent": "bank",
        "ticket_id": TICKET,
        "target": {"kind": "tool_permission", "call_id": "c1", "tool": "transfer", **target},
        "requester": "710000000000000001",
        "approvers": [],
        "deciders": ["710000000000000001"],
        "four_eyes": False,
        "who_may_decide": "710000000000000001",
        "deadline": "2026-01-01T00:01:00+00:00",
    }


def test_huge_arguments_are_cut_within_every_embed_limit() -> None:
    args = {f"key{i}": "é" * 500 + "```" for i in range(40)}
    message = card(payload(args=args, reason="r" * 5000), TOKEN, role_groups={})
    [embed] = message["embeds"]
    assert len(embed["description"]) <= DESCRIPTION_LENGTH
    assert embed["description"].startswith("```json\n") and embed["description"].endswith("\n```")
    assert "more characters)" in embed["description"]
    assert "```" not in embed["description"][8:-4]  # backticks in values cannot close the block
    assert all(len(f["value"]) <= FIELD_VALUE_LENGTH for f in embed["fields"])
    assert embed_length(embed) <= EMBED_TOTAL
    assert len(message["content"]) <= 2000
    for button in message["components"][0]["components"]:
        assert len(button["custom_id"]) <= 100
        assert parse_button(button["custom_id"]) is not None


def test_fit_embed_keeps_the_total_and_field_count() -> None:
    fields = [{"name": f"f{i}", "value": "v" * 1500} for i in range(40)]
    fitted = fit_embed({"title": "t" * 300, "description": "d" * 5000, "fields": fields})
    assert len(fitted["title"]) == 256
    assert len(fitted["fields"]) <= EMBED_FIELDS
    assert embed_length(fitted) <= EMBED_TOTAL


def test_who_may_decide_uses_mentions_and_role_groups() -> None:
    entries = ["group:role:42", "group:finance", "group:ops", "*", "U7"]
    data = payload(args={}).model_copy(
        update={"approvers": entries, "deciders": entries, "four_eyes": True}
    )
    message = card(data, TOKEN, role_groups={"finance": ("43", "44")})
    who = next(f["value"] for f in message["embeds"][0]["fields"] if f["name"] == "Who may decide")
    assert who == "<@&42>, <@&43> / <@&44>, group `ops`, anyone, `U7` (not the requester)"


def test_decided_cards_disable_every_button_and_say_who_and_when() -> None:
    result = outcome(
        Decided(
            run_id="run_1",
            ticket_id=TICKET,
            decision="deny",
            actor="operator:alice",
            platform="cli",
            decided_at="2026-01-01T00:00:30+00:00",
            reason="*not* today",
        )
    )
    assert result.text == (
        "⛔ Denied by `operator:alice` via cli · <t:1767225630:f> (<t:1767225630:R>)\n"
        "Reason: \\*not\\* today"
    )
    message = card(payload(args={}), TOKEN, outcome=result)
    assert all(b["disabled"] for b in message["components"][0]["components"])
    assert message["allowed_mentions"] == {"parse": []}


def test_text_from_people_and_models_cannot_format_or_mention() -> None:
    assert escape("@everyone <@1> **x** `y`") == "@everyone \\<@1\\> \\*\\*x\\*\\* \\`y\\`"


def test_custom_ids_round_trip_and_refuse_what_does_not_fit() -> None:
    click = TicketClick(Action.REASON, TICKET, TOKEN)
    assert parse_button(click.button_id) == click
    assert parse_modal(click.modal_id) == click
    assert parse_button(click.modal_id) is None
    with pytest.raises(ValueError, match="custom_id"):
        _ = TicketClick(Action.ALLOW, "tk_" + "x" * 60, TOKEN).button_id
    with pytest.raises(ValueError, match="custom_id"):
        _ = TicketClick(Action.ALLOW, TICKET, "to:ken").button_id


def test_form_values_are_converted_to_the_schema_types() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "on": {"type": "boolean"},
            "mode": {"$ref": "#/$defs/Mode"},
            "extra": {"type": "object"},
        },
        "required": ["name", "mode"],
        "$defs": {"Mode": {"enum": ["a", "b"]}},
    }
    fields = form_fields(schema)
    assert [f.kind for f in fields] == ["text", "integer", "number", "boolean", "select", "json"]
    data, errors = read_values(
        fields,
        {"name": "x", "count": "3", "ratio": "0.5", "on": "no", "mode": "b", "extra": '{"k": 1}'},
    )
    assert data == {
        "name": "x",
        "count": 3,
        "ratio": 0.5,
        "on": False,
        "mode": "b",
        "extra": {"k": 1},
    }
    assert errors == {}
    data, errors = read_values(fields, {"count": "three", "mode": "c", "extra": "{"})
    assert set(errors) == {"name", "count", "mode", "extra"}


def test_submitted_values_reads_rows_and_labels() -> None:
    components = [
        {"type": 1, "components": [{"type": 4, "custom_id": "a", "value": "1"}]},
        {"type": 18, "component": {"type": 4, "custom_id": "b", "value": "2"}},
    ]
    assert submitted_values(components) == {"a": "1", "b": "2"}


def test_settings_are_checked_and_named_by_their_variables() -> None:
    with pytest.raises(ConfigurationError, match="SIGNOFF_DISCORD_GUILD_ID"):
        load_settings(overrides={"discord_bot_token": "t", "discord_sync": "guild"})
    # Discord off: its other settings are never used, so never refused.
    off = load_settings(overrides={"discord_gateway_url": "http://x", "discord_sync": "guild"})
    assert off.discord_bot_token is None
    settings = load_settings(
        overrides={
            "discord_bot_token": "t",
            "discord_sync": "guild",
            "discord_guild_id": 5,
            "discord_approver_roles": {"finance": [123]},
            "discord_api_base_url": "http://127.0.0.1:9/api/v10/",
        }
    )
    config = discord_config(settings)
    assert config.sync is SyncMode.GUILD and config.guild_id == 5
    assert config.role_groups == {"finance": ("123",)}
    assert config.api_base_url == "http://127.0.0.1:9/api/v10"
    assert config.gateway_url == "wss://gateway.discord.gg/"
    with pytest.raises(ConfigurationError) as raised:
        load_settings(
            overrides={
                "discord_bot_token": "t",
                "discord_gateway_url": "http://x",
                "discord_approver_roles": {"finance": ["ops"]},
            }
        )
    assert "SIGNOFF_DISCORD_GATEWAY_URL: expected a ws:// or wss:// URL" in str(raised.value)
    assert "SIGNOFF_DISCORD_APPROVER_ROLES: group 'finance': role ids are numbers" in str(
        raised.value
    )


def test_expiry_and_withdrawal_outcomes() -> None:
    escalated = outcome(
        TicketExpired(
            run_id="run_1",
            ticket_id=TICKET,
            action="escalate",
            escalated_to=["group:role:9", "5"],
        )
    )
    assert escalated.text == "⏰ Expired without a decision; escalated to <@&9>, <@5>"
    cancelled = TicketExpired(run_id="run_1", ticket_id=TICKET, action="cancel")
    assert outcome(cancelled).text.endswith("the run was cancelled")
    voided = TicketVoided(run_id="run_1", ticket_id=TICKET, reason="run cancelled")
    assert outcome(voided).text == "✖️ Withdrawn: run cancelled"


def test_the_tools_own_description_and_mcp_server_are_shown_cut_and_escaped() -> None:
    hostile = "Moves @everyone's *money* <@1> `now`.\n\n" + "x" * 2000
    shown = card(
        ApprovalRequested.model_validate(
            {
                **ticket_fields(args={"amount": 1}),
                "tool_description": hostile,
                "tool_server": "bank`api",
            }
        ),
        TOKEN,
    )
    [embed] = shown["embeds"]
    fields = {f["name"]: f["value"] for f in embed["fields"]}
    assert fields["Tool"] == "`transfer` (MCP server `bank\u02cbapi`)"
    about = fields["What it does"]
    assert about.startswith(r"Moves @everyone's \*money\* \<@1\> \`now\`. xxx")
    assert about.endswith("x…") and len(about) < 400
    assert shown["allowed_mentions"]["parse"] == []  # @everyone pings nobody
    assert embed_length(embed) <= EMBED_TOTAL

    plain = card(payload(args={}), TOKEN)
    names = [f["name"] for f in plain["embeds"][0]["fields"]]
    assert "What it does" not in names
    assert {f["name"]: f["value"] for f in plain["embeds"][0]["fields"]}["Tool"] == "`transfer`"
