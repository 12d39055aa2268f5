"""Input agents (``<agent>.elicitation``) are started by signoff itself: Discord's
``/agent run`` does not offer them and refuses to start one, whoever asks."""

from __future__ import annotations

from discord_harness import ALICE, MALLORY, Harness

from adapters.mcp.elicitation import InputAgent


async def test_run_neither_offers_nor_starts_an_input_agent(harness: Harness) -> None:
    bank = next(a for a in harness.agents if a.name == "bank")
    bot = await harness.start_bot(agents=[*harness.agents, InputAgent(bank, {})])
    assert "bank.elicitation" in bot.runtime.agents
    fake = harness.fake

    for user in (ALICE, MALLORY):  # someone, and a server manager
        complete = await fake.interact(fake.autocomplete(user, "bank"))
        await fake.wait_for(lambda c=complete: c.callbacks, what="autocomplete")
        [callback] = complete.callbacks
        assert [c["value"] for c in callback["data"]["choices"]] == ["bank", "bigbank"]

        record = await fake.interact(fake.slash(user, "run", agent="bank.elicitation", prompt="go"))
        text = await fake.answered(record)
        assert "`bank.elicitation` is started by signoff itself, not by hand." in text

    assert await bot.runtime.list_runs() == []
