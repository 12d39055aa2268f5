"""``/claude-code/mcp`` on ``signoff serve``, started at its first request.

The permission prompt tool (`adapters.claude_code.permission_prompt`) runs on the MCP SDK,
an optional extra. Mounted with `add_lazy_permission_prompt_routes`, a server that nobody
asks through it neither imports the SDK nor runs its session manager: both start at the
first request with a valid bearer token, and stop with the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from runtime import Actor, Runtime

if TYPE_CHECKING:
    from adapters.claude_code.permission_prompt import PromptEndpoint

PATH = "/claude-code/mcp"
"""Where ``signoff serve`` serves the permission prompt tool over Streamable HTTP."""


def add_lazy_permission_prompt_routes(
    app: web.Application,
    runtime: Runtime,
    *,
    authenticate: Callable[[web.Request], Actor | None],
    may_act_for: Callable[[web.Request, str], bool],
    on_change: Callable[[], None],
    path: str = PATH,
) -> None:
    """Serve the permission prompt tool at `path` of `app`, as
    `adapters.claude_code.permission_prompt.add_permission_prompt_routes` does, starting
    it at the first authenticated request."""
    started: list[PromptEndpoint] = []
    starting = asyncio.Lock()
    stopping = asyncio.Event()

    async def endpoint() -> PromptEndpoint:
        async with starting:
            if not started:
                from adapters.claude_code.permission_prompt import PromptEndpoint

                made = PromptEndpoint(
                    runtime,
                    authenticate=authenticate,
                    may_act_for=may_act_for,
                    on_change=on_change,
                )
                await made.start()
                started.append(made)
            return started[0]

    async def handle(request: web.Request) -> web.StreamResponse:
        if authenticate(request) is None:
            return web.json_response(
                {"error": "unauthenticated", "message": "a valid bearer token is required"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="signoff"'},
            )
        if stopping.is_set():
            return web.json_response(
                {"error": "stopping", "message": "signoff is stopping; ask again shortly"},
                status=503,
            )
        return await (await endpoint()).handle(request)

    async def stop_waiting(_app: web.Application) -> None:
        stopping.set()
        for made in started:
            made.stop_waiting()

    async def close(_app: web.Application) -> None:
        for made in started:
            await made.close()

    app.on_shutdown.append(stop_waiting)
    app.on_cleanup.append(close)
    for method in ("GET", "POST", "DELETE"):
        app.router.add_route(method, path, handle)


__all__ = ["PATH", "add_lazy_permission_prompt_routes"]
