"""Input agents (``<agent>.elicitation``) are started by signoff itself: the Slack command
neither lists them nor starts one, whoever asks."""

from __future__ import annotations

from typing import Any

import pytest
from slackbed import SlackBed, build_agents

from adapters.mcp.elicitation import InputAgent
from runtime import Agent


@pytest.fixture
def slack_agents(ledger: list[tuple[str, dict[str, Any]]]) -> list[Agent]:
    agents = build_agents(ledger)
    bank = next(a for a in agents if a.name == "bank")
    return [*agents, InputAgent(bank, {})]


async def test_the_command_neither_lists_nor_starts_an_input_agent(slack: SlackBed) -> None:
    assert "bank.elicitation" in slack.runtime.agents

    for user in ("U1", "U9"):  # a requester, and a stranger
        usage = (await slack.command("help", user=user)).json()["text"]
        assert "`bank`" in usage
        assert "elicitation" not in usage

        refused = (await slack.command("bank.elicitation answer 42", user=user)).json()["text"]
        assert "`bank.elicitation` is started by signoff itself, not by hand." in refused
        assert "elicitation`" not in refused.split("Agents:")[1]

    assert await slack.runtime.list_runs() == []
    assert slack.fake.posts("C1") == []
