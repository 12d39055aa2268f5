"""The MCP gateway on `signoff serve`: one Streamable HTTP endpoint per agent of the agents
file that uses MCP servers (`adapters.mcp.gateway`).

The agent ``infra`` gets ``/mcp/infra``, whose calls are external approvals of the
gateway agent ``infra.mcp`` (registered with the runtime like any agent, so any replica
resumes them), authenticated with the API's bearer tokens. An external agent the agents
file declares under that name configures the gateway agent: where its cards go, its
default approvers, four-eyes, deadline and expiry; the tools' rules stay the source
agent's.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from runtime import Agent, ConfigurationError, ExternalAgent, Runtime

if TYPE_CHECKING:
    from adapters.web import TokenAuth
    from bot.wiring import LoadedAgents

Gateways = list[tuple[ExternalAgent, Agent]]
"""Gateway agents with their source agents."""


def gateway_agents(loaded: LoadedAgents) -> Gateways:
    """A gateway agent for every agent of the agents file that uses MCP servers.

    An external agent the file declares as ``<agent>.mcp`` becomes that gateway agent
    (the same object, so listing it with the file's agents registers it once).

    Raises:
        ConfigurationError: ``<agent>.mcp`` is declared as an agent of its own, or with
            rules of its own.
    """
    if loaded.file is None or not loaded.file.bindings:
        return []
    from adapters.mcp.gateway import gateway_agent, serve_as_gateway

    named = {agent.name: agent for agent in loaded.agents}
    found: Gateways = []
    for binding in loaded.file.bindings:
        source = binding.agent
        if isinstance(source, ExternalAgent):
            continue
        name = f"{source.name}.mcp"
        declared = named.get(name)
        if declared is None:
            found.append((gateway_agent(source), source))
            continue
        where = f"SIGNOFF_AGENTS={loaded.file.path}: [agents.{json.dumps(name)}]"
        if not isinstance(declared, ExternalAgent):
            raise ConfigurationError(
                f"{where}: {name} is the gateway agent of {source.name}'s MCP tools; "
                "declare it with external = true (or name the agent otherwise)"
            )
        if _declares_rules(loaded.file.path, name):
            raise ConfigurationError(
                f"{where}: a gateway agent takes the rules of its source agent's tools; "
                f"give them under [agents.{source.name}.rules]"
            )
        found.append((serve_as_gateway(declared, source), source))
    return found


def _declares_rules(path: Path, name: str) -> bool:
    """Whether the agents file gives the agent `name` rules (the built agent keeps none)."""
    with path.open("rb") as handle:
        agents = tomllib.load(handle).get("agents") or {}
    spec = agents.get(name) if isinstance(agents, dict) else None
    return isinstance(spec, dict) and bool(spec.get("rules"))


def mount_gateways(
    app: web.Application,
    runtime: Runtime,
    auth: TokenAuth,
    wake: Callable[[], None],
    gateways: Gateways,
    *,
    question_seconds: float,
) -> None:
    """Serve each gateway at ``/mcp/<source agent>`` of `app`; an upstream server's
    question waits `question_seconds` for the calling client's answer."""
    if not gateways:
        return
    from adapters.mcp.gateway import McpGateway, add_gateway_routes

    for agent, source in gateways:
        served = McpGateway(runtime, agent, source, wake, question_seconds=question_seconds)
        add_gateway_routes(app, served, auth.bearer, path=f"/mcp/{source.name}")
