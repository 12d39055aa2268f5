"""MCP tools behind sign-off, against a real MCP server subprocess over stdio.

The hub starts ``fake_mcp_server.py`` with the SDK's stdio client; runs are driven by a
real worker over a SQLite store, decisions go through the console's HTTP routes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcpbed import McpBed, calls, kill_hanging, pids, stdio_server, until
from testkit import echo_model

from adapters.mcp import Binding, Condition, ToolKnobs
from runtime import Agent, Permission, ReplayPolicy, RunStatus, StaleTicket

pytestmark = pytest.mark.timeout(120)


def agent(name: str, *calls_: tuple[str, dict[str, Any]]) -> Agent:
    return Agent(name, "Operate.", echo_model(*calls_))


def allow(pattern: str, **options: Any) -> ToolKnobs:
    return ToolKnobs(pattern, where=f"rule {pattern}", permission=Permission.ALLOW, **options)


async def test_tools_are_listed_with_their_schemas_and_settings(make_bed: Any, state: Path) -> None:
    ops = agent("ops")
    knobs = (
        allow("infra.lookup", replay_policy=ReplayPolicy.SAFE),
        ToolKnobs("infra.merge", secret=("token",)),
    )
    await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",), knobs)])

    assert sorted(ops.tools) == ["deploy", "fail", "hang", "lookup", "merge"]
    deploy = ops.tools["deploy"]
    assert deploy.parameters["properties"]["environment"]["enum"] == ["staging", "production"]
    assert deploy.parameters["required"] == ["service", "environment"]
    assert deploy.description == "Deploy a service."
    assert deploy.permission is Permission.ASK and deploy.replay_policy == "manual"  # defaults
    lookup = ops.tools["lookup"]
    assert lookup.permission is Permission.ALLOW and lookup.replay_policy == "safe"
    assert ops.tools["merge"].masked({"branch": "x", "token": "t0k"})["token"] != "t0k"
    assert deploy.spec()["function"]["parameters"] is deploy.parameters  # as listed


async def test_an_allowed_call_runs_once_with_the_execution_key_in_meta(
    make_bed: Any, state: Path
) -> None:
    ops = agent("ops", ("lookup", {"service": "api"}))
    bed: McpBed = await make_bed(
        [ops], [stdio_server(state)], [Binding(ops, ("infra",), (allow("infra.lookup"),))]
    )

    done = await bed.finished(await bed.start("ops"))

    assert done.status is RunStatus.DONE
    assert done.text == "Finished. api is healthy"
    [dispatched] = await bed.events(done.run_id, "tool_dispatched")
    [call] = calls(state)
    assert call["tool"] == "lookup" and call["args"] == {"service": "api"}
    assert call["meta"]["signoff/execution_key"] == dispatched["data"]["execution_key"]


async def test_an_ask_call_parks_and_runs_once_approved_in_the_console(
    make_bed: Any, state: Path
) -> None:
    ops = agent("ops", ("deploy", {"service": "api", "environment": "production"}))
    bed: McpBed = await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",))])

    parked = await bed.parked(await bed.start("ops"))
    [entry] = parked.pending
    assert entry.call.name == "deploy" and entry.status == "approval"
    assert calls(state) == []  # nothing reached the server yet

    csrf = await bed.login()
    assert bed.client is not None
    response = await bed.client.post(
        f"/tickets/{entry.ticket_id}/decide",
        data={"csrf": csrf, "action": "allow"},
        allow_redirects=False,
    )
    assert response.status == 303, await response.text()

    done = await bed.finished(parked.run_id)
    assert done.status is RunStatus.DONE
    assert done.text == "Finished. deployed api to production"
    [call] = calls(state)
    assert call["tool"] == "deploy"
    assert call["meta"]["signoff/execution_key"] == entry.execution_key


async def test_a_denied_tool_never_reaches_the_server(make_bed: Any, state: Path) -> None:
    ops = agent("ops", ("fail", {}), ("lookup", {"service": "db"}))
    knobs = (ToolKnobs("infra.*", permission=Permission.DENY), allow("infra.lookup"))
    bed: McpBed = await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",), knobs)])

    done = await bed.finished(await bed.start("ops"))

    assert done.text == "Finished. Permission denied: this tool is not allowed | db is healthy"
    assert [c["tool"] for c in calls(state)] == ["lookup"]  # the exact name beats the glob


async def test_an_argument_rule_asks_only_for_production(make_bed: Any, state: Path) -> None:
    production = Condition.parse({"environment": "production"}, where="test")
    knobs = (allow("infra.deploy", ask_if=(production,)),)
    staging = agent("staging", ("deploy", {"service": "api", "environment": "staging"}))
    prod = agent("prod", ("deploy", {"service": "api", "environment": "production"}))
    bindings = [Binding(staging, ("infra",), knobs), Binding(prod, ("infra",), knobs)]
    bed: McpBed = await make_bed([staging, prod], [stdio_server(state)], bindings)

    done = await bed.finished(await bed.start("staging"))
    assert done.text == "Finished. deployed api to staging"
    parked = await bed.parked(await bed.start("prod"))
    [entry] = parked.pending
    assert entry.call.arguments == {"service": "api", "environment": "production"}
    [proposed] = await bed.events(parked.run_id, "tool_proposed")
    assert proposed["data"]["permission"] == "ask"
    assert [c["args"]["environment"] for c in calls(state)] == ["staging"]


async def test_invalid_arguments_an_error_result_and_a_timeout_reach_the_model(
    make_bed: Any, state: Path
) -> None:
    ops = agent(
        "ops",
        ("deploy", {"service": "api", "environment": "moon"}),
        ("fail", {}),
        ("hang", {}),
    )
    knobs = (allow("infra.*"),)
    bed: McpBed = await make_bed(
        [ops], [stdio_server(state, timeout=1.0)], [Binding(ops, ("infra",), knobs)]
    )

    done = await bed.finished(await bed.start("ops"))

    assert done.status is RunStatus.DONE
    bad, failed, timed_out = done.text.removeprefix("Finished. ").split(" | ")
    assert bad.startswith("Error: invalid arguments for deploy: environment: 'moon' is not one")
    assert failed == "Error: Error executing tool fail: the disk is full"
    assert timed_out == (
        "Error: hang got no answer from MCP server 'infra' within 1s; the request was cancelled"
    )
    errors = [e["data"]["error"] for e in await bed.events(done.run_id, "tool_failed")]
    assert errors[1:] == [failed.removeprefix("Error: "), timed_out.removeprefix("Error: ")]
    assert [c["tool"] for c in calls(state)] == ["fail", "hang"]  # bad arguments never sent


async def test_a_schema_change_while_parked_makes_the_decision_stale(
    make_bed: Any, state: Path
) -> None:
    ops = agent("ops", ("deploy", {"service": "api", "environment": "production"}))
    bed: McpBed = await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",))])
    parked = await bed.parked(await bed.start("ops"))
    [entry] = parked.pending
    before = ops.catalog_fingerprint
    assert entry.ticket.catalog_fingerprint == before

    # The server is upgraded: its deploy now needs a reason. It restarts under the bot.
    (state / "schema").write_text("v2")
    import os
    import signal

    os.kill(pids(state)[-1], signal.SIGKILL)
    await until(lambda: "reason" in ops.tools["deploy"].parameters["properties"], "relisting")
    assert ops.catalog_fingerprint != before

    snapshot = (await bed.runtime.get(parked.run_id), await bed.runtime.events(parked.run_id))
    with pytest.raises(StaleTicket):
        await bed.runtime.approve(entry, actor="U1")
    assert (await bed.runtime.get(parked.run_id), await bed.runtime.events(parked.run_id)) == (
        snapshot
    )
    assert calls(state) == []


async def test_a_server_killed_mid_call_leaves_the_call_uncertain_until_resolved(
    make_bed: Any, state: Path
) -> None:
    ops = agent("ops", ("hang", {}))
    bed: McpBed = await make_bed(
        [ops], [stdio_server(state)], [Binding(ops, ("infra",), (allow("infra.hang"),))]
    )
    run_id = await bed.start("ops")
    await until(lambda: (state / "hanging").exists(), "the call reaching the server")
    first = kill_hanging(state)

    parked = await bed.wait(
        run_id,
        lambda r: (
            r.status is RunStatus.AWAITING and any(p.status == "uncertain" for p in r.pending)
        ),
    )
    assert parked.status is RunStatus.AWAITING
    [entry] = parked.pending
    [uncertain] = await bed.events(run_id, "tool_uncertain")
    assert "went away before answering hang" in uncertain["data"]["reason"]
    assert uncertain["data"]["execution_key"] == entry.execution_key
    await until(lambda: len(pids(state)) == 2 and bed.hub.connections["infra"].up, "a restart")
    assert pids(state)[0] == first

    await bed.runtime.resolve_tool(entry, result="checked by hand: it ran", actor="U1")
    bed.worker.wake()
    done = await bed.finished(run_id)
    assert done.text == "Finished. checked by hand: it ran"
    assert [c["tool"] for c in calls(state)] == ["hang"]  # not run again on its own


async def test_a_server_down_at_start_up_gives_error_results_until_it_comes_up(
    make_bed: Any, state: Path
) -> None:
    (state / "down").write_text("")
    ops = agent("ops", ("deploy", {"service": "api", "environment": "staging"}))
    knobs = (ToolKnobs("infra.deploy", secret=("service",)), allow("infra.look*"))
    bed: McpBed = await make_bed([ops], [stdio_server(state)], [Binding(ops, ("infra",), knobs)])

    # Named tools are listed as unavailable; the glob's tools are absent.
    assert sorted(ops.tools) == ["deploy"]
    assert bed.hub.source_of("ops", "deploy") == "mcp:infra (unavailable)"
    done = await bed.finished(await bed.start("ops"))
    assert done.status is RunStatus.DONE
    assert done.text.startswith("Finished. Error: MCP server 'infra' is not available (")
    [failed] = await bed.events(done.run_id, "tool_failed")
    assert "MCP server 'infra' is not available" in failed["data"]["error"]
    assert await bed.events(done.run_id, "ticket_opened") == []  # nobody was asked

    (state / "down").unlink()
    await until(lambda: bed.hub.source_of("ops", "lookup") == "mcp:infra", "the server up")
    assert bed.hub.source_of("ops", "deploy") == "mcp:infra"
    parked = await bed.parked(await bed.start("ops"))
    [entry] = parked.pending
    assert entry.call.name == "deploy"
    assert json.dumps(entry.call.arguments).count("api") == 0  # the secret stays masked
