"""The scripted model of the ``crm`` agent in the OAuth tests: one lookup, then its result."""

from __future__ import annotations

from typing import Any

from examples._scripting import last_result, turn
from runtime import ModelRequest, ScriptedModel, final_reply, tool_call_reply


def _reply(request: ModelRequest) -> dict[str, Any]:
    if turn(request) == 0:
        return tool_call_reply(("lookup", {"customer": "acme"}))
    return final_reply(f"crm said: {last_result(request)}")


def crm_model() -> ScriptedModel:
    """Looks ``acme`` up and answers with what the tool said."""
    return ScriptedModel(_reply, name="scripted-crm")
