"""``signoff agents``: the loaded agents and their tools."""

from __future__ import annotations

import click

from bot.cli._options import cli_state, run_coroutine
from bot.cli._output import print_table
from bot.wiring import LoadedAgents, check_models, connected_agents
from runtime import Agent, Permission, Tool


def _permission(agent: Agent, name: str) -> tuple[str, str]:
    """The tool's permission, and a note describing a rule."""
    tool = agent.tools[name]
    if isinstance(tool.permission, Permission):
        return tool.permission.value, ""
    rule = tool.permission
    doc = (getattr(rule, "__doc__", None) or "").strip().splitlines()
    label = getattr(rule, "__name__", "rule")
    return "rule", f"{label}: {doc[0]}" if doc else label


def _approval_notes(agent: Agent, tool: Tool) -> list[str]:
    """What an approver of `tool` may do besides allowing the call as it is."""
    scopes = agent.grants_for(tool)
    notes = ["grants " + ", ".join(scopes) if scopes else "no grants"]
    match tool.editable:
        case True:
            pass
        case False:
            notes.append("no edits")
        case fields:
            notes.append("edits " + ", ".join(sorted(fields)))
    return notes


def _span(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{v}{u}" for v, u in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join(parts) or "0s"


@click.command(short_help="List loaded agents and their tools.")
def agents() -> None:
    """List the agents of SIGNOFF_APP and SIGNOFF_AGENTS with each tool's source,
    permission and replay policy.

    MCP servers of the agents file are connected to list their tools; a tool's source is
    python or mcp:SERVER (unavailable while the server cannot be reached). An MCP
    tool's notes say where its permission and replay policy came from: a rule, the
    server's annotations (trust_annotations) or the defaults. Each MCP server's
    resources and prompts are listed after the agents.

    \b
    Examples:
      signoff agents
      SIGNOFF_APP=myapp.agents:build signoff agents
      SIGNOFF_AGENTS=agents.toml signoff agents
    """
    settings = cli_state().settings()

    async def body() -> None:
        async with connected_agents(settings) as loaded:
            check_models(settings, loaded.agents)
            _print_agents(loaded)

    run_coroutine(body())


def _print_agents(loaded: LoadedAgents) -> None:
    count = len(loaded.agents)
    click.echo(f"{count} agent{'s' if count != 1 else ''} from {loaded.origin}")
    for agent in loaded.agents:
        click.echo("")
        click.echo(f"{agent.name} (version {agent.version}, model {agent.model_name})")
        if agent.description:
            click.echo(f"  {agent.description}")
        rows = []
        for name in sorted(agent.tools):
            tool = agent.tools[name]
            permission, rule = _permission(agent, name)
            notes = [rule] if rule else []
            approvers = agent.approvers_for(tool)
            if approvers:
                notes.append("approvers " + ", ".join(approvers))
            if agent.four_eyes_for(tool):
                notes.append("four-eyes")
            deadline = agent.deadline_for(tool)
            if deadline is not None:
                notes.append(f"deadline {_span(deadline.total_seconds())}")
            if tool.secret:
                notes.append("secret " + ", ".join(sorted(tool.secret)))
            if permission != "allow" and permission != "deny":
                notes.extend(_approval_notes(agent, tool))
            origins = loaded.origin_of(agent.name, name)
            if origins is not None:
                notes.append(f"permission by {origins[0]}, replay by {origins[1]}")
            source = loaded.source_of(agent.name, name)
            rows.append([f"  {name}", source, permission, tool.replay_policy, "; ".join(notes)])
        print_table(["  TOOL", "SOURCE", "PERMISSION", "REPLAY", "NOTES"], rows)
    for server, reason in sorted(loaded.mcp_unavailable().items()):
        click.echo("")
        click.echo(f"MCP server {server} is unavailable: {reason}")
    for server, (resources, prompts) in loaded.mcp_extras().items():
        if not resources and not prompts:
            continue
        click.echo("")
        click.echo(f"MCP server {server}: its resources and prompts")
        if resources:
            print_table(["  RESOURCE", "DESCRIPTION"], [[f"  {u}", d] for u, d in resources])
        if prompts:
            print_table(["  PROMPT", "DESCRIPTION"], [[f"  {n}", d] for n, d in prompts])
