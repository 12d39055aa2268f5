"""A small "infra" MCP server for the demo: look services up, deploy them (no network).

Written with the MCP SDK's server side; signoff starts it over stdio (see
``agents.toml`` beside this file). Its state lives in memory, so every start begins from
the same versions. ``deploy`` remembers the execution key signoff sends in each request's
``_meta`` (``signoff/execution_key``): a repeated key returns the first result instead of
deploying twice, as a real deploy API would with an idempotency key.

Run it by hand with ``python examples/mcp/infra_server.py`` (it speaks MCP on stdin and
stdout).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

EXECUTION_KEY_META = "signoff/execution_key"

SERVICES: dict[str, dict[str, Any]] = {
    "checkout": {"version": "2.4.1", "healthy": True, "replicas": 6},
    "search": {"version": "1.9.0", "healthy": True, "replicas": 4},
    "billing": {"version": "3.2.7", "healthy": False, "replicas": 2},
}

server: MCPServer[Any] = MCPServer("infra", log_level="WARNING")
_deploys: dict[str, dict[str, Any]] = {}


@server.tool()
def service_status(service: Annotated[str, Field(description="The service's name.")]) -> str:
    """Look a service up: its version, health and replicas (read-only)."""
    found = SERVICES.get(service)
    if found is None:
        return f"no service named {service!r} (known: {', '.join(sorted(SERVICES))})"
    state = "healthy" if found["healthy"] else "unhealthy"
    return f"{service} runs {found['version']} on {found['replicas']} replicas, {state}"


@server.tool()
def deploy(
    service: Annotated[str, Field(description="The service to deploy.")],
    version: Annotated[str, Field(description="The version to roll out, e.g. 2.5.0.")],
    environment: Literal["staging", "production"],
    ctx: Context,
) -> str:
    """Roll a version of a service out to an environment."""
    meta = ctx.request_context.meta or {}
    key = str(meta.get(EXECUTION_KEY_META, ""))
    if key and key in _deploys:
        earlier = _deploys[key]
        return f"already deployed {earlier['service']} {earlier['version']} (same execution key)"
    if service not in SERVICES:
        raise ValueError(f"no service named {service!r}")
    SERVICES[service]["version"] = version
    if key:
        _deploys[key] = {"service": service, "version": version}
    return f"deployed {service} {version} to {environment}"


@server.tool()
def destroy_environment(environment: Literal["staging", "production"]) -> str:
    """Tear a whole environment down."""
    return f"destroyed {environment}"


if __name__ == "__main__":
    server.run()
