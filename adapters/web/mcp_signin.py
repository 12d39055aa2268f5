"""The console's MCP sign-in page: operators sign signoff in to MCP servers that use OAuth.

``GET /mcp`` lists the servers and whether someone is signed in to each;
``GET /mcp/sign-in/{name}`` starts a sign-in (the browser goes to the server's
authorization server) and ``GET /mcp/oauth/callback`` finishes it. Only an operator may
do any of it: anyone else signed in sees a refusal and nothing starts; signed out, the
console's sign-in comes first. The routes know no MCP: the bot gives them a `SignInFlow`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from adapters.web.auth import Session
from runtime import Actor

if TYPE_CHECKING:
    from adapters.web.console import _Console


class ServerSignIn(Protocol):
    """Where one server's sign-in stands."""

    @property
    def server(self) -> str:
        """The server's name."""
        ...

    @property
    def signed_in(self) -> bool:
        """Whether someone is signed in to it."""
        ...

    @property
    def by(self) -> str | None:
        """Who signed in."""
        ...

    @property
    def at(self) -> datetime | None:
        """When."""
        ...

    @property
    def reason(self) -> str | None:
        """Why someone must sign in."""
        ...


class SignInFlow(Protocol):
    """Signs in to MCP servers (`adapters.mcp.oauth.SignIns`)."""

    async def status(self) -> Sequence[ServerSignIn]:
        """Every OAuth server's sign-in."""
        ...

    async def begin(self, server: str, by: str) -> str:
        """Start a sign-in; the authorization URL. `LookupError`: no such server;
        `ValueError`: it cannot start (the message says why)."""
        ...

    async def finish(self, state: str, code: str | None, by: str, error: str | None = None) -> str:
        """Finish a sign-in; the server's name. `ValueError`: refused (why)."""
        ...


PageHandler = Callable[[web.Request, Session, Actor], Awaitable[web.StreamResponse]]


def add_mcp_signin_routes(app: web.Application, console: _Console, flow: SignInFlow) -> None:
    """Add the MCP sign-in page and its routes to `app`.

    Args:
        app: The application to extend.
        console: The console whose sessions, pages and messages they use.
        flow: Starts and finishes sign-ins.
    """

    def operators_only(handler: PageHandler) -> PageHandler:
        async def page(request: web.Request, session: Session, actor: Actor) -> web.StreamResponse:
            if not actor.operator:
                return await console.refused(
                    request,
                    403,
                    "Operators only",
                    "Only an operator may see or sign in to the MCP servers that use OAuth.",
                )
            return await handler(request, session, actor)

        return page

    async def listing(request: web.Request, session: Session, actor: Actor) -> web.StreamResponse:
        servers = await flow.status()
        return console.render(
            request, "mcp_signin.html", session=session, actor=actor, servers=servers
        )

    async def begin(request: web.Request, session: Session, actor: Actor) -> web.StreamResponse:
        name = request.match_info["name"]
        try:
            url = await flow.begin(name, actor.id)
        except LookupError:
            return await console.refused(
                request, 404, "Not found", f"No MCP server named {name!r} signs in with OAuth."
            )
        except ValueError as exc:
            return console.done("/mcp", str(exc), "error")
        return web.Response(status=302, headers={"Location": url, "Cache-Control": "no-store"})

    async def callback(request: web.Request, session: Session, actor: Actor) -> web.StreamResponse:
        query = request.query
        try:
            server = await flow.finish(
                query.get("state", ""), query.get("code"), actor.id, query.get("error")
            )
        except ValueError as exc:
            return console.done("/mcp", str(exc), "error")
        return console.done("/mcp", f"Signed in to MCP server {server!r}.")

    app.router.add_get("/mcp", console.signed_in(operators_only(listing)))
    app.router.add_get("/mcp/sign-in/{name}", console.signed_in(operators_only(begin)))
    app.router.add_get("/mcp/oauth/callback", console.signed_in(operators_only(callback)))
