"""Images in tool results, for models that take them.

A tool result recorded as a list of content blocks (an MCP tool's result, see
`adapters.mcp.images`) may hold images::

    [{"type": "text", "text": "the dashboard"},
     {"type": "image", "mimeType": "image/png", "data": "<base64>"}]

The transcript keeps a tool message's content as text (that list as JSON). `split` finds
the images again, so each provider's translation can send them the way its API takes
them; the text left for the tool result names each image in its place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ANTHROPIC_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The image types Anthropic's Messages API takes (OpenAI takes the same ones)."""


@dataclass(frozen=True)
class Image:
    """One image of a tool result.

    Attributes:
        mime_type: E.g. ``image/png``.
        data: The image, base64.
    """

    mime_type: str
    data: str

    @property
    def data_url(self) -> str:
        """``data:<type>;base64,<data>``."""
        return f"data:{self.mime_type};base64,{self.data}"


def _blocks(content: str) -> tuple[str, list[Any]] | None:
    """A note line (an approver's edit) and the blocks, if `content` is a JSON list."""
    candidates = [("", content)]
    if "\n" in content:
        note, body = content.split("\n", 1)
        candidates.append((note, body))
    for note, body in candidates:
        if not body.lstrip().startswith("["):
            continue
        try:
            value = json.loads(body)
        except ValueError:
            continue
        if isinstance(value, list):
            return note, value
    return None


def split(content: Any, *, keep: bool = True) -> tuple[str, list[Image]] | None:
    """The text and the images of a tool message's content; None when it has no image.

    An image of a type no provider takes (not in `ANTHROPIC_TYPES`) stays a line of text;
    so does every image when not `keep` (a model that takes no images).
    """
    if not isinstance(content, str) or '"image"' not in content:
        return None
    found = _blocks(content)
    if found is None:
        return None
    note, blocks = found
    lines = [note] if note else []
    images: list[Image] = []
    dropped = 0
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            lines.append(block["text"])
        elif kind == "image" and not keep:
            dropped += 1
            lines.append(f"[image {dropped}: {block.get('mimeType')}, not shown to this model]")
        elif (
            kind == "image"
            and isinstance(block.get("data"), str)
            and block.get("mimeType") in ANTHROPIC_TYPES
        ):
            images.append(Image(str(block["mimeType"]), block["data"]))
            lines.append(f"[image {len(images)}: {block['mimeType']}]")
        elif kind == "image":
            lines.append(f"[image of type {block.get('mimeType')!r}: not shown to the model]")
        else:
            lines.append(json.dumps(block, default=str))
    if not images and not dropped:
        return None
    return "\n".join(lines), images


def images_message(images: list[Image], *, responses: bool = False) -> dict[str, Any]:
    """The user message that shows a batch's tool-result images to an OpenAI model (a
    tool message takes text only): Chat Completions ``image_url`` parts, or with
    `responses` the Responses API's ``input_image`` parts."""
    intro = "The images of the tool results above, in order."
    if responses:
        return {
            "role": "user",
            "content": [
                {"type": "input_text", "text": intro},
                *({"type": "input_image", "image_url": i.data_url} for i in images),
            ],
        }
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": intro},
            *({"type": "image_url", "image_url": {"url": i.data_url}} for i in images),
        ],
    }


def with_chat_images(
    messages: list[dict[str, Any]], *, images: bool = True
) -> list[dict[str, Any]]:
    """Chat Completions messages with each batch's tool-result images in a user message
    after its last tool message (`messages` itself when there are none); without
    `images`, each image is a line of text instead."""
    out: list[dict[str, Any]] = []
    pending: list[Image] = []
    changed = False
    for message in messages:
        if message.get("role") != "tool" and pending:
            out.append(images_message(pending))
            pending = []
        found = (
            split(message.get("content"), keep=images) if message.get("role") == "tool" else None
        )
        if found is None:
            out.append(message)
            continue
        changed = True
        text, kept = found
        out.append({**message, "content": text})
        pending.extend(kept)
    if pending:
        out.append(images_message(pending))
    return out if changed else messages
