"""A Discord user linked to nobody, while unlinked users are refused: their click is
refused with what to do (the console's Link page and ``/signoff link <code>``, or ask an
operator) and changes nothing, through the real discord.py against the fake Discord."""

from __future__ import annotations

from discord_harness import ALICE, Harness
from test_discord_identity import _link

CONSOLE = "https://signoff.example.com"


async def test_an_unlinked_user_is_told_how_to_link(harness: Harness) -> None:
    await harness.start_bot(console_url=CONSOLE)
    runtime = harness.bots[-1].runtime
    run_id, card = await harness.park(ALICE, "bank")
    runtime.identities.configure(unlinked="refuse")
    before = await harness.snapshot(run_id)
    refused = await harness.click(ALICE, card, "Allow")
    assert refused.ephemeral
    assert refused.text == (
        "🔗 Your Discord account is not linked to a person yet, so it may not decide here. "
        f"To link it, sign in to the console at {CONSOLE}/link, get a link code there and "
        "send `/signoff link <code>` here; or ask an operator to link it. Nothing was changed."
    )
    assert await harness.snapshot(run_id) == before
    await _link(harness, ALICE, await runtime.identities.new_link_code("oidc:alice@corp"))
    await harness.click(ALICE, card, "Allow")
    await harness.finished(run_id)
    assert harness.ledger[-1][0] == "transfer"


async def test_without_the_console_address_they_ask_an_operator(harness: Harness) -> None:
    await harness.start_bot(console_url=None)
    runtime = harness.bots[-1].runtime
    run_id, card = await harness.park(ALICE, "bank")
    runtime.identities.configure(unlinked="refuse")
    before = await harness.snapshot(run_id)
    refused = await harness.click(ALICE, card, "Allow")
    assert refused.ephemeral
    assert refused.text == (
        "🔗 Your Discord account is not linked to a person yet, so it may not decide here. "
        "Ask an operator to link it to you. Nothing was changed."
    )
    assert await harness.snapshot(run_id) == before
