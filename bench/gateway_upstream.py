"""The MCP server behind `bench/gateway.py`: one tool, ``echo``, on the MCP SDK's server.

Usage::

    python bench/gateway_upstream.py http      # Streamable HTTP on 127.0.0.1, a free port
    python bench/gateway_upstream.py stdio

Over HTTP it prints ``READY <port>`` once it accepts connections (the endpoint is
``/mcp``), as the SDK's own ``run("streamable-http")`` would. ``echo`` answers with its
``text`` and does nothing else, so a call costs the MCP protocol and the transport.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

server: MCPServer[Any] = MCPServer("bench-upstream", log_level="ERROR")


@server.tool()
def echo(text: str) -> str:
    """Answer with the text it was given."""
    return text


async def serve_http() -> None:
    import uvicorn

    # asyncio turns Nagle off (TCP_NODELAY) only on connections whose socket says
    # IPPROTO_TCP, as it makes them for a host and port; with ``socket.socket()`` (proto 0)
    # each response's body would wait for the client's delayed ACK of its headers: ~40 ms
    # per call on Linux.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(server.streamable_http_app(), log_level="error", lifespan="on")
    http = uvicorn.Server(config)
    task = asyncio.create_task(http.serve(sockets=[sock]))
    while not http.started:  # uvicorn has no event for it
        if task.done():
            await task
        await asyncio.sleep(0.01)
    print(f"READY {sock.getsockname()[1]}", flush=True)
    await task


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        asyncio.run(serve_http())
    else:
        server.run()
