"""``signoff mcp``: the MCP gateway over stdio, for MCP clients that start a command."""

from __future__ import annotations

import click

from bot.cli._options import actor_of, actor_options, cli_state, database_option, run_coroutine
from runtime import Actor, ConfigurationError


@click.command(short_help="Serve an agent's MCP tools to an MCP client over stdio.")
@click.argument("agent")
@click.option(
    "--session",
    metavar="KEY",
    help="The session key calls are matched in (default: one per start of the command).",
)
@actor_options
@database_option
def mcp(
    agent: str,
    session: str | None,
    as_user: str | None,
    operator: bool,
    database_url: str | None,
) -> None:
    """Serve the MCP tools of AGENT (an agents-file agent that uses MCP servers) over
    stdin and stdout, behind the agent's per-tool rules (see docs/mcp-gateway.md).

    Each call is an external approval of AGENT.mcp requested by --as USER: a call a rule
    allows runs at once, one that asks waits for a decision, a denied one is a tool
    error. The same call with the same arguments in the same --session gets the first
    call's outcome.

    \b
    Examples:
      signoff mcp infra
      signoff mcp infra --session release-42 --as U024BE7LH --no-operator
    """
    caller = actor_of(as_user, operator)
    run_coroutine(_serve(agent, session, caller, database_url))


async def _serve(agent: str, session: str | None, caller: Actor, database_url: str | None) -> None:
    import secrets

    from adapters.mcp.gateway import McpGateway, serve_stdio
    from bot.mcp_gateway import gateway_agents
    from bot.wiring import build_runtime, connected_agents

    settings = cli_state().settings(database_url)
    async with connected_agents(settings) as loaded:
        gateways = {source.name: (found, source) for found, source in gateway_agents(loaded)}
        if agent not in gateways:
            named = ", ".join(sorted(gateways)) or "none"
            raise ConfigurationError(
                f"agent {agent!r} uses no MCP servers of the agents file (those that do: {named})"
            )
        registered = [*loaded.agents, *(found for found, _ in gateways.values())]
        runtime, store = await build_runtime(settings, registered)
        loaded.attach(runtime)  # the servers' questions during a call: to the client
        try:
            gateway_of, source = gateways[agent]
            served = McpGateway(
                runtime,
                gateway_of,
                source,
                actor=caller,
                session=session or f"stdio-{secrets.token_hex(8)}",
                drive=True,
                question_seconds=settings.mcp_question_seconds,
            )
            await serve_stdio(served)
        finally:
            await runtime.aclose()
            await store.close()
