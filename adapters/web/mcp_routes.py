"""``POST /api/mcp/servers/{name}/refresh``: list an MCP server's tools again, now.

Only an operator's token may (anyone else gets 403, nothing is listed). The route knows
no MCP: the bot gives it the servers' names and a function that lists one server again,
raising `LookupError` for a server it does not know and `ConnectionError` when the server
did not list its tools in time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from aiohttp import web

from adapters.web._refusals import Refusal
from adapters.web.api import error_response, json_response
from adapters.web.auth import TokenAuth

Refresh = Callable[[str], Awaitable[int]]
"""Lists a server's tools again; returns how many it has."""


def add_mcp_refresh_route(
    app: web.Application, auth: TokenAuth, refresh: Refresh, servers: Collection[str]
) -> None:
    """Add ``POST /api/mcp/servers/{name}/refresh`` to `app`.

    Args:
        app: The application to extend.
        auth: Who may call it (operators only).
        refresh: Lists one server's tools again.
        servers: The names of the servers it may refresh.
    """

    async def handler(request: web.Request) -> web.StreamResponse:
        actor = auth.bearer(request)
        if actor is None:
            response = error_response(
                Refusal(401, "unauthenticated", "a valid bearer token is required")
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="signoff"'
            return response
        if not actor.operator:
            return error_response(
                Refusal(403, "forbidden", "only an operator may refresh an MCP server's tools")
            )
        name = request.match_info["name"]
        if name not in servers:
            known = ", ".join(sorted(servers)) or "none"
            return error_response(
                Refusal(404, "not_found", f"no MCP server named {name!r} (servers: {known})")
            )
        try:
            count = await refresh(name)
        except LookupError:
            return error_response(Refusal(404, "not_found", f"no MCP server named {name!r}"))
        except ConnectionError as exc:
            return error_response(Refusal(503, "mcp_server_unavailable", str(exc)))
        return json_response({"server": name, "tools": count})

    app.router.add_post("/api/mcp/servers/{name}/refresh", handler)
