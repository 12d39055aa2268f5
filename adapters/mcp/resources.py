"""An MCP server's resources and prompts: listed with its tools, and its resources
readable by the agent through ``read_resource`` when the server allows it
(``resources = true`` in the agents file).

``<prefix>read_resource`` is a tool like the server's own (named ``<server>.read_resource``
in rules: allow, ask or deny, approvers, deadlines). It takes one ``uri``, one of the
server's listed resources (the schema's ``enum`` while the list is short; a URI not in the
list is refused either way), and returns the resource's text (a binary resource is shown
by its MIME type and size, not its bytes). Its default replay policy is ``safe``: reading
changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types
from mcp import Client

log = logging.getLogger("signoff.mcp")

TOOL_NAME = "read_resource"
"""The name of the resource-reading tool (after the server's prefix)."""

_PAGES = 20
_ENUM_LIMIT = 100


async def list_more(
    client: Client,
) -> tuple[list[mcp_types.Resource], list[mcp_types.Prompt]]:
    """The server's resources and prompts, each empty when it offers none (or the listing
    fails: they are not needed to serve its tools)."""
    capabilities = client.server_capabilities
    resources: list[mcp_types.Resource] = []
    prompts: list[mcp_types.Prompt] = []
    try:
        if capabilities.resources is not None:
            cursor: str | None = None
            for _ in range(_PAGES):
                page = await client.list_resources(cursor=cursor, cache_mode="refresh")
                resources.extend(page.resources)
                cursor = page.next_cursor
                if cursor is None:
                    break
        if capabilities.prompts is not None:
            cursor = None
            for _ in range(_PAGES):
                listed = await client.list_prompts(cursor=cursor, cache_mode="refresh")
                prompts.extend(listed.prompts)
                cursor = listed.next_cursor
                if cursor is None:
                    break
    except Exception as exc:  # the tools still work
        log.warning("MCP: listing resources or prompts failed: %s", type(exc).__name__)
    return resources, prompts


def resource_tool(resources: list[mcp_types.Resource]) -> mcp_types.Tool:
    """The listing entry of ``read_resource`` for a server with `resources`."""
    uri: dict[str, Any] = {"type": "string", "description": "The URI of a listed resource"}
    if 0 < len(resources) <= _ENUM_LIMIT:
        uri["enum"] = [r.uri for r in resources]
    listed = "; ".join(
        f"{r.uri}" + (f" ({r.description})" if r.description else "") for r in resources[:20]
    )
    return mcp_types.Tool(
        name=TOOL_NAME,
        description=(
            "Read one of this server's resources by its URI. "
            + (f"Resources: {listed}" if listed else "It lists no resources now.")
        ),
        input_schema={
            "type": "object",
            "properties": {"uri": uri},
            "required": ["uri"],
            "additionalProperties": False,
        },
    )


def contents_value(result: mcp_types.ReadResourceResult) -> str:
    """What the model reads of a resource: its text parts; a binary part by its type and
    size."""
    parts = []
    for item in result.contents:
        if isinstance(item, mcp_types.TextResourceContents):
            parts.append(item.text)
        else:
            kind = item.mime_type or "binary"
            parts.append(f"<{kind} content, {len(item.blob)} base64 characters>")
    return "\n".join(parts)
