"""Step-up: a tool whose calls may only be decided in some places (``decide_in``), and
only after single sign-on in the console (``sso``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bot.agents_file import load_agents_file
from runtime import (
    Actor,
    Agent,
    Allow,
    ConfigurationError,
    RunStatus,
    ScriptedModel,
    TicketStatus,
    Unauthorized,
    final_reply,
    tool,
    tool_call_reply,
)


def _deploys(runtime_factory: Any, ran: list[str], **options: Any) -> Any:
    model = ScriptedModel([tool_call_reply(("deploy", {"service": "api"})), final_reply("ok")])

    @tool(permission="ask", approvers=["*"], **options)
    async def deploy(service: str) -> str:
        ran.append(service)
        return "deployed"

    return runtime_factory(Agent("deploys", "Deploy.", model, tools=[deploy]))


async def test_a_console_only_sso_ticket_is_refused_elsewhere(
    runtime_factory: Any, snapshot: Any
) -> None:
    ran: list[str] = []
    rt = _deploys(runtime_factory, ran, decide_in=["console"], sso=True)
    parked = await rt.start("deploys", "deploy", requester="U1")
    ticket = parked.pending[0].ticket
    assert (ticket.decide_in, ticket.sso) == (("console",), True)
    before = await snapshot(parked.run_id)
    refusals = {}
    for actor in (
        Actor(id="U2", platform="slack"),
        Actor(id="42", platform="discord"),
        Actor(id="oidc:bo@corp", platform="api", operator=True),
        Actor(id="cli:bo", platform="cli"),
        Actor(id="oidc:bo@corp", platform="console"),  # signed in with a token
    ):
        with pytest.raises(Unauthorized) as refused:
            await rt.decide(ticket.ticket_id, Allow(), actor, correlation=ticket.correlation)
        refusals[actor.platform] = str(refused.value)
    assert await snapshot(parked.run_id) == before and ran == []
    assert "may only be decided in the console" in refusals["slack"]
    assert "single sign-on" in refusals["console"]
    sso = Actor(id="oidc:bo@corp", platform="console", sso=True)
    await rt.decide(ticket.ticket_id, Allow(), sso, correlation=ticket.correlation, resume=True)
    assert (await rt.ticket(ticket.ticket_id)).status is TicketStatus.DECIDED
    assert (await rt.get(parked.run_id)).status is RunStatus.DONE and ran == ["api"]


async def test_decide_in_without_sso_takes_any_console_session(runtime_factory: Any) -> None:
    ran: list[str] = []
    rt = _deploys(runtime_factory, ran, decide_in=["console", "api"])
    parked = await rt.start("deploys", "deploy", requester="U1")
    ticket = parked.pending[0].ticket
    with pytest.raises(Unauthorized):
        await rt.decide(
            ticket.ticket_id,
            Allow(),
            Actor(id="U2", platform="slack"),
            correlation=ticket.correlation,
        )
    await rt.decide(
        ticket.ticket_id, Allow(), Actor(id="U2", platform="api"), correlation=ticket.correlation
    )
    assert (await rt.ticket(ticket.ticket_id)).decided_by == "U2"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"decide_in": ["email"]}, "unknown places"),
        ({"decide_in": "console"}, "list of places"),
        ({"decide_in": ["slack"], "sso": True}, "needs decide_in"),
        ({"sso": True}, "needs decide_in"),
    ],
)
def test_bad_step_up_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):

        @tool(permission="ask", **options)
        async def deploy(service: str) -> str:
            return service


def test_the_identity_pages_rule_gives_the_tool_step_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "identity.md").read_text()
    rule = re.findall(r"```toml\n(.*?)```", page.split("## Step-up", 1)[1], re.S)[0]
    (tmp_path / "stepup_tools.py").write_text(
        "from runtime import ScriptedModel, tool\n"
        "MODEL = ScriptedModel([])\n"
        "@tool\n"
        "async def drop_database(name: str) -> str:\n"
        "    return name\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "agents.toml"
    path.write_text(
        '[agents.dba]\ninstructions = "Drop."\nmodel = "stepup_tools:MODEL"\n'
        'tools = ["stepup_tools:drop_database"]\n\n' + rule,
        encoding="utf-8",
    )
    [agent] = [a for a in load_agents_file(path).agents if a.name == "dba"]
    drop = agent.tools["drop_database"]
    assert (drop.decide_in, drop.sso, drop.approvers) == (("console",), True, ("group:dba",))
