"""Images in MCP tool results: kept in the recorded result up to a size, else a note.

A tool result's ``image`` content, and an embedded resource whose ``mimeType`` is an
image, are recorded as MCP image blocks::

    {"type": "image", "mimeType": "image/png", "data": "<base64>"}

(an embedded one also has its ``uri``). An image whose decoded size is over the server's
``max_image_bytes`` is recorded as a text block saying so instead, as is audio. Model
adapters pass kept images on in their provider's format (`adapters.models.tool_images`);
the console's run page shows them; the gateway gives them to its MCP clients as images
(`content_blocks`).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types


def decoded_size(data: str) -> int:
    """The size in bytes of base64 `data` once decoded (without decoding it)."""
    length = len(data.rstrip("="))
    return length * 3 // 4


def kilobytes(size: int) -> str:
    """E.g. ``812 KB`` (at least 1 KB)."""
    return f"{max(1, round(size / 1024))} KB"


def image_block(
    mime_type: str, data: str, max_bytes: int, *, uri: str | None = None
) -> dict[str, Any]:
    """An image as recorded: the MCP image block, or a text block when it is too big."""
    size = decoded_size(data)
    if size > max_bytes:
        return {
            "type": "text",
            "text": f"[image {mime_type}, {kilobytes(size)}: not kept, over the "
            f"{kilobytes(max_bytes)} limit (max_image_bytes)]",
        }
    block: dict[str, Any] = {"type": "image", "mimeType": mime_type, "data": data}
    if uri is not None:
        block["uri"] = uri
    return block


def recorded_block(block: mcp_types.ContentBlock, max_bytes: int) -> dict[str, Any] | None:
    """An image or embedded image block as recorded; None for any other block."""
    if isinstance(block, mcp_types.ImageContent):
        return image_block(block.mime_type, block.data, max_bytes)
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if (
            isinstance(resource, mcp_types.BlobResourceContents)
            and (resource.mime_type or "").startswith("image/")
            and resource.mime_type is not None
        ):
            return image_block(resource.mime_type, resource.blob, max_bytes, uri=str(resource.uri))
    return None


def content_blocks(value: Any) -> list[mcp_types.ContentBlock] | None:
    """A recorded result holding image blocks as MCP content again (text blocks as text,
    images as images, anything else as JSON text), for an MCP client of the gateway; None
    when it holds no image."""
    if not isinstance(value, list) or not any(
        isinstance(b, dict) and b.get("type") == "image" and isinstance(b.get("data"), str)
        for b in value
    ):
        return None
    blocks: list[mcp_types.ContentBlock] = []
    for block in value:
        if isinstance(block, dict) and block.get("type") == "text":
            blocks.append(mcp_types.TextContent(type="text", text=str(block.get("text", ""))))
        elif (
            isinstance(block, dict)
            and block.get("type") == "image"
            and isinstance(block.get("data"), str)
        ):
            blocks.append(
                mcp_types.ImageContent(
                    type="image", data=block["data"], mime_type=str(block.get("mimeType"))
                )
            )
        else:
            blocks.append(mcp_types.TextContent(type="text", text=json.dumps(block, default=str)))
    return blocks
