"""An MCP server with annotated tools and image results, on the MCP SDK's server side
(``python annotated_mcp_server.py``, over stdio).

Tools: ``get_status`` (``readOnlyHint``), ``put_config`` (``idempotentHint``), ``wipe``
(``readOnlyHint`` and ``destructiveHint``: contradictory), ``plain`` (no annotations),
``snapshot`` (an image of ``size`` bytes, and with ``embedded`` an embedded image resource
too). While the file ``$ANNOTATED_STATE/extra`` exists, the listing has ``search`` too.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import mcp_types
from mcp.server.mcpserver import MCPServer

STATE = Path(os.environ["ANNOTATED_STATE"])
PNG_HEAD = b"\x89PNG\r\n\x1a\n"


class _Server(MCPServer[Any]):
    async def list_tools(self) -> Any:
        listed = await super().list_tools()
        if not (STATE / "extra").exists():
            listed = [tool for tool in listed if tool.name != "search"]
        return listed


server: MCPServer[Any] = _Server("annotated", log_level="ERROR")


@server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
def get_status(service: str) -> str:
    """Read a service's status."""
    return f"{service} is up"


@server.tool(annotations=mcp_types.ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def put_config(key: str, value: str) -> str:
    """Set a configuration value."""
    return f"{key}={value}"


@server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True, destructive_hint=True))
def wipe(target: str) -> str:
    """Wipe a target (it says read-only and destructive)."""
    return f"wiped {target}"


@server.tool()
def plain(text: str) -> str:
    """No annotations."""
    return text


@server.tool()
def search(query: str) -> str:
    """Search (listed only while the state has ``extra``)."""
    return query


@server.tool()
def snapshot(size: int, embedded: bool = False) -> list[Any]:
    """A screenshot of `size` bytes."""
    data = base64.b64encode((PNG_HEAD + b"\0" * size)[:size]).decode()
    blocks: list[Any] = [
        mcp_types.TextContent(type="text", text="the dashboard"),
        mcp_types.ImageContent(type="image", data=data, mime_type="image/png"),
    ]
    if embedded:
        blocks.append(
            mcp_types.EmbeddedResource(
                type="resource",
                resource=mcp_types.BlobResourceContents(
                    uri="file:///chart.png", mime_type="image/png", blob=data
                ),
            )
        )
    return blocks


if __name__ == "__main__":
    server.run("stdio")
