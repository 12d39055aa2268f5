"""The run's OpenAI-shaped transcript as Responses API input items, and the answer back.

Pure functions, so the translation is tested on recorded payloads:

- ``system`` and ``developer`` messages become the request's ``instructions``;
- a user message becomes a ``user`` input message;
- an assistant message becomes, in the order the model produced them, the reasoning
  items it kept as opaque state (given back unchanged: id, summary and encrypted
  content), an ``assistant`` message with its text, and one ``function_call`` item per
  tool call;
- a ``tool`` message becomes a ``function_call_output`` item;
- the answer's reasoning items go back into the transcript as the assistant message's
  `runtime.edges.PROVIDER_STATE` (``{"provider": "openai-responses", "items": [...]}``).

Strict tool schemas (`strict_parameters`) follow what the Responses API accepts with
``strict: true``: every object closed (``additionalProperties: false``) with every
property required, optional ones made nullable (a ``null`` the model sends for them is
dropped again before the tool sees the arguments, `drop_optional_nulls`).
"""

from __future__ import annotations

import json
from typing import Any

from adapters.models.tool_images import Image, images_message, split
from runtime import ConfigurationError, ModelResponse, StopReason, ToolCallRequest, Usage
from runtime.edges import provider_state

PROVIDER = "openai-responses"

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
"""The ``reasoning.effort`` values (which a model takes depends on the model)."""
SUMMARIES = ("auto", "concise", "detailed")
"""The ``reasoning.summary`` values."""
TOOL_CHOICES = ("auto", "required", "none")
"""The ``tool_choice`` values."""

# Keywords strict mode does not take that only narrow the values a schema allows: they
# are left out of what the model is shown; the tool still checks the arguments.
_NARROWING = frozenset(
    {
        "default",
        "minLength",
        "maxLength",
        "minProperties",
        "maxProperties",
        "uniqueItems",
        "minContains",
        "maxContains",
        "examples",
        "readOnly",
        "writeOnly",
        "deprecated",
        "$schema",
        "$id",
        "$comment",
        "contentEncoding",
        "contentMediaType",
        "discriminator",
    }
)
# Keywords that change which shapes are allowed in ways strict mode cannot express.
_UNSUPPORTED = (
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "if",
    "then",
    "else",
    "not",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "prefixItems",
    "contains",
)


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


def to_input(
    transcript: list[dict[str, Any]], *, stored_reasoning: bool = False, images: bool = True
) -> tuple[str, list[dict[str, Any]]]:
    """The ``instructions`` and the ``input`` items for a transcript.

    Args:
        transcript: The run's OpenAI-shaped messages.
        stored_reasoning: Whether the provider keeps responses (``store: true``), so a
            reasoning item without encrypted content can be given back by its id. With
            ``store: false`` such an item cannot be found again and is left out.
        images: Whether tool results' images are sent (else each is a line of text).
    """
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    pending: list[Image] = []
    for message in transcript:
        role = message.get("role")
        if pending and role != "tool":  # a batch's images, after its last output
            items.append(images_message(pending, responses=True))
            pending = []
        if role in ("system", "developer"):
            text = _text(message.get("content")).strip()
            if text:
                instructions.append(text)
        elif role == "user":
            items.append({"role": "user", "content": _text(message.get("content"))})
        elif role == "assistant":
            state = provider_state(message, PROVIDER) or {}
            for item in state.get("items") or []:
                if not isinstance(item, dict) or item.get("type") != "reasoning":
                    continue
                if item.get("encrypted_content") or stored_reasoning:
                    items.append(item)
            text = _text(message.get("content"))
            if text.strip():
                items.append({"role": "assistant", "content": text})
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                arguments = function.get("arguments", "{}")
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments)
                items.append(
                    {
                        "type": "function_call",
                        "call_id": str(call.get("id")),
                        "name": str(function.get("name", "")),
                        "arguments": arguments,
                    }
                )
        elif role == "tool":
            output = _text(message.get("content")) or "(no output)"
            found = split(message.get("content"), keep=images)
            if found is not None:
                output = found[0]
                pending.extend(found[1])
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id")),
                    "output": output,
                }
            )
    if pending:
        items.append(images_message(pending, responses=True))
    return "\n\n".join(instructions), items


def to_tools(tools: list[dict[str, Any]], *, strict: bool = False) -> list[dict[str, Any]]:
    """OpenAI-style function definitions as Responses API function tools.

    Raises:
        ConfigurationError: With `strict`, a tool whose parameters strict mode cannot
            express (`strict_parameters`).
    """
    converted = []
    for spec in tools:
        function = spec.get("function", spec)
        name = str(function["name"])
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        tool: dict[str, Any] = {
            "type": "function",
            "name": name,
            "description": function.get("description") or "",
            "parameters": strict_parameters(name, schema) if strict else schema,
            "strict": strict,
        }
        converted.append(tool)
    return converted


def strict_parameters(tool: str, schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as strict mode takes it, or a clear refusal.

    Every object is closed and lists every property as required; a property that was
    optional also accepts ``null``. Keywords that only narrow values (``maxLength``,
    ``default`` ...) are left out, since the tool still checks its arguments; ``oneOf``
    becomes ``anyOf``.

    Raises:
        ConfigurationError: The schema allows shapes strict mode cannot express: an
            object with properties not named in advance (``additionalProperties``, a
            bare ``{"type": "object"}``), a value of any type, ``patternProperties``,
            ``not``, ``if``/``then``, several ``allOf`` parts ...
    """
    if schema.get("type") != "object":
        raise _refuse(tool, "", "the parameters must be an object")
    strict = _strict(tool, schema, "", top=True)
    for key in ("$defs", "definitions"):
        defs = schema.get(key)
        if isinstance(defs, dict):
            strict[key] = {name: _strict(tool, sub, f"{key}.{name}") for name, sub in defs.items()}
    return strict


def _refuse(tool: str, path: str, why: str) -> ConfigurationError:
    where = f" at {path}" if path else ""
    return ConfigurationError(
        f"tool {tool!r} cannot have a strict schema{where}: {why} "
        "(turn strict_tools off for this model, or narrow the tool's parameters)"
    )


def _strict(tool: str, node: Any, path: str, *, top: bool = False) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise _refuse(tool, path, "a schema must be an object")
    for key in _UNSUPPORTED:
        if key in node:
            raise _refuse(tool, path, f"{key!r} is not supported")
    if "$ref" in node:
        return {"$ref": node["$ref"]}
    node = dict(node)
    all_of = node.pop("allOf", None)
    if all_of is not None:
        if not isinstance(all_of, list) or len(all_of) != 1:
            raise _refuse(tool, path, "'allOf' with several parts is not supported")
        merged = _strict(tool, all_of[0], f"{path}.allOf[0]")
        node = {**{k: v for k, v in node.items() if k not in _NARROWING}, **merged}
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _NARROWING or key in ("$defs", "definitions"):
            continue
        if key == "anyOf":
            if not isinstance(value, list) or not value:
                raise _refuse(tool, path, "'anyOf' needs a list of schemas")
            out[key] = [_strict(tool, sub, f"{path}.anyOf[{i}]") for i, sub in enumerate(value)]
        elif key == "items":
            out[key] = _strict(tool, value, f"{path}[]")
        elif key in ("properties", "required", "additionalProperties"):
            continue
        else:
            out[key] = value
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds or "properties" in node:
        properties = node.get("properties")
        extra = node.get("additionalProperties", False if top or properties else None)
        if extra is not False:
            raise _refuse(tool, path or "the parameters", "an object must name all its properties")
        properties = properties if isinstance(properties, dict) else {}
        required = set(node.get("required") or [])
        strict_props: dict[str, Any] = {}
        for name, sub in properties.items():
            converted = _strict(tool, sub, f"{path}.{name}" if path else name)
            strict_props[name] = converted if name in required else _nullable(converted)
        out["properties"] = strict_props
        out["required"] = list(properties)
        out["additionalProperties"] = False
    if "array" in kinds and "items" not in node:
        raise _refuse(tool, path, "an array must say what its items are")
    if not any(k in out for k in ("type", "anyOf", "enum", "const")):
        raise _refuse(tool, path or "the parameters", "a value of any type is not supported")
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return schema
    if any(sub.get("type") == "null" for sub in schema.get("anyOf") or []):
        return schema
    if "enum" in schema:
        if None in schema["enum"]:
            return schema
        return {"anyOf": [schema, {"type": "null"}]}
    if isinstance(kinds, str) and "const" not in schema:
        return {**schema, "type": [kinds, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def drop_optional_nulls(arguments: str, schema: dict[str, Any]) -> str:
    """`arguments` without the ``null`` values strict mode made the model send for
    properties `schema` (the tool's own) does not require; the tool then applies its
    defaults. Arguments that are not a JSON object are returned as they are."""
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return arguments
    if not isinstance(value, dict):
        return arguments
    cleaned = _drop(value, schema, schema)
    return arguments if cleaned == value else json.dumps(cleaned)


def _drop(value: Any, schema: Any, root: dict[str, Any]) -> Any:
    if not isinstance(schema, dict):
        return value
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return _drop(value, target, root)
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        required = set(schema.get("required") or [])
        properties = schema["properties"]
        return {
            key: _drop(item, properties.get(key), root)
            for key, item in value.items()
            if not (item is None and key in properties and key not in required)
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_drop(item, schema["items"], root) for item in value]
    return value


def from_response(
    payload: dict[str, Any], schemas: dict[str, dict[str, Any]] | None = None
) -> ModelResponse:
    """Read a Responses API ``Response`` (as JSON) into a `ModelResponse`.

    Args:
        payload: The response.
        schemas: The tools' own parameter schemas by name, when they were sent strict
            (their optional properties' ``null`` values are dropped).

    Raises:
        ValueError: The response failed, has no output list, or a function call lacks
            its id or name.
    """
    if payload.get("status") == "failed":
        error = payload.get("error") or {}
        raise ValueError(f"the response failed: {error.get('message') or 'no reason given'}")
    output = payload.get("output")
    if not isinstance(output, list):
        raise ValueError("the response has no output items")
    texts: list[str] = []
    refusals: list[str] = []
    summaries: list[str] = []
    reasoning: list[dict[str, Any]] = []
    calls: list[ToolCallRequest] = []
    for item in output:
        if not isinstance(item, dict):
            raise ValueError("an output item is not an object")
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
                elif part.get("type") == "refusal":
                    refusals.append(str(part.get("refusal") or ""))
        elif kind == "function_call":
            name = str(item["name"])
            arguments = item.get("arguments") or "{}"
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            if schemas and name in schemas:
                arguments = drop_optional_nulls(arguments, schemas[name])
            calls.append(ToolCallRequest(id=str(item["call_id"]), name=name, arguments=arguments))
        elif kind == "reasoning":
            reasoning.append(item)
            for part in item.get("summary") or []:
                if isinstance(part, dict) and part.get("text"):
                    summaries.append(str(part["text"]))
    usage = payload.get("usage") or {}
    details = usage.get("input_tokens_details") or {}
    incomplete = (payload.get("incomplete_details") or {}).get("reason")
    stop: StopReason
    if refusals or incomplete == "content_filter":
        stop = StopReason.REFUSAL
    elif payload.get("status") == "incomplete":
        stop = StopReason.LENGTH
    else:
        stop = StopReason.TOOL_CALLS if calls else StopReason.END
    text = "\n".join(t for t in texts if t) or None
    return ModelResponse(
        text=text,
        tool_calls=tuple(calls),
        usage=Usage(
            prompt_tokens=int(usage.get("input_tokens") or 0),
            # Reasoning tokens are billed as output and counted in output_tokens.
            completion_tokens=int(usage.get("output_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0),
        ),
        stop=stop,
        refusal="\n".join(refusals) or None,
        reasoning="\n\n".join(summaries) or None,
        provider_state={"provider": PROVIDER, "items": reasoning} if reasoning else None,
    )
