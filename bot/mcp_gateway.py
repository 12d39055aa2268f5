"""The MCP gateway on `signoff serve`: one Streamable HTTP endpoint per agent of the agents
file that uses MCP servers (`adapters.mcp.gateway`).

The agent ``infra`` gets ``/mcp/infra``, whose calls are external approvals of the
gateway agent ``infra.mcp`` (registered with the runtime like any agent, so any replica
resumes them), authenticated with the API's bearer tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from runtime import Agent, ExternalAgent, Runtime

if TYPE_CHECKING:
    from adapters.web import TokenAuth
    from bot.wiring import LoadedAgents

Gateways = list[tuple[ExternalAgent, Agent]]
"""Gateway agents with their source agents."""


def gateway_agents(loaded: LoadedAgents) -> Gateways:
    """A gateway agent for every agent of the agents file that uses MCP servers."""
    if loaded.file is None or not loaded.file.bindings:
        return []
    from adapters.mcp.gateway import gateway_agent

    names = {agent.name for agent in loaded.agents}
    found: Gateways = []
    for binding in loaded.file.bindings:
        source = binding.agent
        if isinstance(source, ExternalAgent) or f"{source.name}.mcp" in names:
            continue
        found.append((gateway_agent(source), source))
    return found


def mount_gateways(
    app: web.Application,
    runtime: Runtime,
    auth: TokenAuth,
    wake: Callable[[], None],
    gateways: Gateways,
) -> None:
    """Serve each gateway at ``/mcp/<source agent>`` of `app`."""
    if not gateways:
        return
    from adapters.mcp.gateway import McpGateway, add_gateway_routes

    for agent, source in gateways:
        served = McpGateway(runtime, agent, source, wake)
        add_gateway_routes(app, served, auth.bearer, path=f"/mcp/{source.name}")
