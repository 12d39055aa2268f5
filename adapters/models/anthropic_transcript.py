"""The run's OpenAI-shaped transcript as Anthropic Messages, and Anthropic's answer back.

Pure functions, so the translation is tested on recorded payloads:

- ``system`` messages become the request's ``system`` prompt;
- an assistant message becomes ``text`` and ``tool_use`` blocks (arguments parsed back
  into the ``input`` object; arguments that were never valid JSON become ``{}``, the
  error the model got for them follows as the tool result);
- ``tool`` messages become ``tool_result`` blocks of a user turn, and consecutive turns
  of one role are merged (the API wants the results of one turn in one user message);
  the results the runtime writes for a failed or refused call (``Error: ...``,
  ``Permission denied...``) carry ``is_error``;
- tool call ids are kept, with characters Anthropic does not accept replaced, the same
  way on both sides;
- with extended thinking, the answer's ``thinking`` and ``redacted_thinking`` blocks
  (signature and data included) are kept as the assistant message's
  `runtime.edges.PROVIDER_STATE` (``{"provider": "anthropic", "blocks": [...]}``) and
  open that assistant turn again, unchanged, on every later request: the API checks
  them against their signatures when the turn has tool calls. Interleaved thinking
  (blocks between tool calls) also records after which call each block came
  (``"after"``: tool call ids, ``null`` for the opening) and goes back there.
"""

from __future__ import annotations

import json
import re
from typing import Any

from adapters.models.tool_images import split
from runtime import ModelResponse, StopReason, ToolCallRequest, Usage
from runtime.edges import provider_state

PROVIDER = "anthropic"

# The fields of each thinking block kind, as the API sends them and wants them back.
_THINKING_FIELDS = {
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}

_ID_FORBIDDEN = re.compile(r"[^a-zA-Z0-9_-]")

# How the runtime begins the results of calls that failed or were refused.
_ERROR_PREFIXES = ("Error: ", "Permission denied")

# Anthropic's stop reasons; unknown future ones read as an ordinary end of turn.
_STOPS: dict[str, StopReason] = {
    "end_turn": StopReason.END,
    "stop_sequence": StopReason.END,
    "pause_turn": StopReason.END,
    "tool_use": StopReason.TOOL_CALLS,
    "max_tokens": StopReason.LENGTH,
    "model_context_window_exceeded": StopReason.LENGTH,
    "refusal": StopReason.REFUSAL,
}


def tool_id(value: Any) -> str:
    """A tool call id Anthropic accepts (``^[a-zA-Z0-9_-]+$``)."""
    cleaned = _ID_FORBIDDEN.sub("_", str(value or ""))
    return cleaned or "call"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return json.dumps(content, default=str)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def to_messages(
    transcript: list[dict[str, Any]], *, images: bool = True
) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt and the Messages API ``messages`` for a transcript (without
    `images`, a tool result's images are lines of text)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in transcript:
        role = message.get("role")
        if role in ("system", "developer"):
            text = _text(message.get("content")).strip()
            if text:
                system.append(text)
        elif role == "user":
            text = _text(message.get("content"))
            add("user", [{"type": "text", "text": text}] if text.strip() else [])
        elif role == "assistant":
            thinking = _thinking_by_place(provider_state(message, PROVIDER) or {})
            blocks: list[dict[str, Any]] = list(thinking.get(None, []))
            text = _text(message.get("content"))
            if text.strip():
                blocks.append({"type": "text", "text": text})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tool_id(call.get("id")),
                        "name": str(function.get("name", "")),
                        "input": _arguments(function.get("arguments")),
                    }
                )
                # Interleaved thinking goes back where it was: after the call before it.
                blocks.extend(thinking.get(str(call.get("id")), []))
            add("assistant", blocks)
        elif role == "tool":
            content = _text(message.get("content")) or "(no output)"
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": tool_id(message.get("tool_call_id")),
                "content": content,
            }
            found = split(message.get("content"), keep=images)
            if found is not None and not found[1]:
                result["content"] = found[0]
            elif found is not None:  # images go in the tool_result's content, as blocks
                result["content"] = [
                    {"type": "text", "text": found[0]},
                    *(
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": i.mime_type, "data": i.data},
                        }
                        for i in found[1]
                    ),
                ]
            if content.startswith(_ERROR_PREFIXES):
                result["is_error"] = True
            add("user", [result])
    return "\n\n".join(system), turns


def _thinking_by_place(state: dict[str, Any]) -> dict[str | None, list[dict[str, Any]]]:
    """The kept thinking blocks by the tool call they followed (``None``: the turn's
    opening)."""
    places = state.get("after") or []
    found: dict[str | None, list[dict[str, Any]]] = {}
    for index, block in enumerate(state.get("blocks") or []):
        if not isinstance(block, dict) or block.get("type") not in _THINKING_FIELDS:
            continue
        place = places[index] if index < len(places) else None
        found.setdefault(place if isinstance(place, str) else None, []).append(dict(block))
    return found


def to_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-style function definitions as Anthropic tools."""
    converted = []
    for spec in tools:
        function = spec.get("function", spec)
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        converted.append(
            {
                "name": function["name"],
                "description": function.get("description") or "",
                "input_schema": schema,
            }
        )
    return converted


def from_message(payload: dict[str, Any]) -> ModelResponse:
    """Read an Anthropic ``Message`` (as JSON) into a `ModelResponse`.

    Raises:
        ValueError: The payload is not a message with content blocks, or a thinking
            block lacks its signature or data.
    """
    blocks = payload.get("content")
    if not isinstance(blocks, list):
        raise ValueError("the message has no content blocks")
    texts: list[str] = []
    thoughts: list[str] = []
    kept: list[dict[str, Any]] = []
    after: list[str | None] = []
    calls: list[ToolCallRequest] = []
    for block in blocks:
        kind = block.get("type")
        fields = _THINKING_FIELDS.get(str(kind))
        if fields is not None:
            kept.append({name: block[name] for name in fields})
            after.append(calls[-1].id if calls else None)
            if kind == "thinking" and str(block.get("thinking") or "").strip():
                thoughts.append(str(block["thinking"]).strip())
        elif kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            calls.append(
                ToolCallRequest(
                    id=str(block["id"]),
                    name=str(block["name"]),
                    arguments=json.dumps(block.get("input", {})),
                )
            )
    usage = payload.get("usage") or {}
    read = int(usage.get("cache_read_input_tokens") or 0)
    written = int(usage.get("cache_creation_input_tokens") or 0)
    stop = _STOPS.get(str(payload.get("stop_reason")))
    if stop is None or (stop is StopReason.END and calls):
        stop = StopReason.TOOL_CALLS if calls else StopReason.END
    text = "\n".join(t for t in texts if t) or None
    return ModelResponse(
        text=text,
        tool_calls=tuple(calls),
        usage=Usage(
            # Anthropic counts cache reads and writes apart from input_tokens.
            prompt_tokens=int(usage.get("input_tokens") or 0) + read + written,
            completion_tokens=int(usage.get("output_tokens") or 0),
            cached_tokens=read,
            cache_write_tokens=written,
        ),
        stop=stop,
        refusal=text if stop is StopReason.REFUSAL else None,
        # The readable thinking only: never a signature or redacted data.
        reasoning="\n\n".join(thoughts) or None,
        provider_state=_state(kept, after),
    )


def _state(kept: list[dict[str, Any]], after: list[str | None]) -> dict[str, Any] | None:
    if not kept:
        return None
    state: dict[str, Any] = {"provider": PROVIDER, "blocks": kept}
    if any(place is not None for place in after):
        # Interleaved thinking (between tool calls): where each block goes back.
        state["after"] = after
    return state
