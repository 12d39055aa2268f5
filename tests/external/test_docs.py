"""The external approvals page's agents file loads and decides as the page says."""

from __future__ import annotations

import re
from pathlib import Path

from approvals_kit import RuntimeFactory, load_agents

from runtime import Actor, Allow, ApprovalRequest, GrantRequest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "external-approvals.md"


def page_toml() -> str:
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- run: tests/external/test_docs.py -->\n```toml\n(.*?)^```", text, re.S | re.M
    )
    assert found is not None
    return found.group(1)


async def test_the_page_example(runtime_factory: RuntimeFactory, tmp_path: Path) -> None:
    rt = runtime_factory(*load_agents(tmp_path, page_toml()))
    bot = Actor(id="support-app")
    finance = Actor(id="fiona", groups=frozenset({"finance"}))

    async def ask(tool: str, args: dict[str, object], session: str = "conv-7") -> object:
        return await rt.request_approval(
            ApprovalRequest("billing-bot", tool, args, session_id=session), actor=bot
        )

    assert (await ask("lookup_invoice", {"id": "I-1"})).status == "allowed"  # type: ignore[attr-defined]
    assert (await ask("refund", {"amount": 10})).status == "allowed"  # type: ignore[attr-defined]
    assert (await ask("refund", {"amount": 9000})).status == "denied"  # type: ignore[attr-defined]
    assert (await ask("drop_database", {})).status == "denied"  # type: ignore[attr-defined]
    assert (await ask("send_email", {"to": "x"})).status == "pending"  # type: ignore[attr-defined]
    asked = await ask("refund", {"amount": 200, "card_number": "4242"})
    assert asked.status == "pending"  # type: ignore[attr-defined]
    ticket = await rt.ticket(asked.ticket_id)  # type: ignore[attr-defined]
    assert ticket.approvers == ("group:finance",) and ticket.deadline is not None
    await rt.decide(
        ticket.ticket_id, Allow(args={"amount": 150}, grant=GrantRequest(scope="run")), finance
    )
    got = await rt.approval(asked.approval_id, viewer=bot)  # type: ignore[attr-defined]
    assert got.arguments == {"amount": 150, "card_number": "4242"} and got.secret == (
        "card_number",
    )
    # The grant covers the rest of the session, not another one.
    assert (await ask("refund", {"amount": 300})).basis == "grant"  # type: ignore[attr-defined]
    assert (await ask("refund", {"amount": 300}, "conv-8")).status == "pending"  # type: ignore[attr-defined]
