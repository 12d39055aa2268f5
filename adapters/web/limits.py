"""Limits that keep slow or idle clients from holding the HTTP server's connections.

aiohttp closes a connection that sends no complete request head within its keep-alive
timeout (set by the server); this module bounds the body: a request whose body has not
fully arrived in time is answered 408 and its connection closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def body_deadline(seconds: float, *, skip: Sequence[str] = ()) -> Middleware:
    """A middleware reading every request body within `seconds` before its handler runs.

    Args:
        seconds: How long a body may take to arrive.
        skip: Path prefixes whose handlers read (and time) their bodies themselves.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.can_read_body and not request.path.startswith(tuple(skip)):
            try:
                async with asyncio.timeout(seconds):
                    await request.read()  # kept by aiohttp for the handler
            except TimeoutError:
                return request_timeout(seconds)
        return await handler(request)

    return middleware


def request_timeout(seconds: float) -> web.Response:
    """408, closing the connection: the body did not arrive within `seconds`."""
    response = web.json_response(
        {
            "error": "request_timeout",
            "message": f"the request body did not arrive within {seconds:g} s",
        },
        status=408,
    )
    response.force_close()
    return response
