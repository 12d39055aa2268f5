"""The MCP demo: an agent whose tools come from an MCP server, behind sign-off.

``agents.toml`` (beside this file) defines the ``infra`` agent: its tools come from
``infra_server.py``, a small MCP server signoff starts over stdio, and its rules let
``service_status`` run at once, make ``deploy`` ask a person when the environment is
production, and deny every ``destroy_*`` tool. `infra_model` is its scripted model (no
network). ``make run`` loads this file besides the Python examples; by hand::

    SIGNOFF_APP=examples:demo_agents SIGNOFF_AGENTS=examples/mcp/agents.toml signoff serve

Then start the ``infra`` agent with "Deploy checkout 2.5.0 to production" (it asks) or
"... to staging" (it does not). Any other message gets a reply saying what the agent
does, and nothing runs.
"""

from __future__ import annotations

import re
from typing import Any

from examples._scripting import blocked, last_result, offer, turn, user_text
from runtime import ModelRequest, ScriptedModel, final_reply, tool_call_reply

DEMO_INPUT = "Deploy checkout 2.5.0 to production"
_ASK = re.compile(r"deploy\s+(\S+)\s+(\S+)\s+to\s+(staging|production)", re.IGNORECASE)


def _wanted(request: ModelRequest) -> tuple[str, str, str] | None:
    found = _ASK.search(user_text(request))
    if found is None:
        return None
    service, version, environment = found.groups()
    return service.lower(), version, environment.lower()


def _reply(request: ModelRequest) -> dict[str, Any]:
    wanted = _wanted(request)
    if wanted is None:
        return offer(
            "check a service and deploy a version of it to staging (at once) or production "
            "(after a person's OK) through the infra MCP server",
            [DEMO_INPUT, "Deploy checkout 2.5.0 to staging"],
        )
    service, version, environment = wanted
    result = last_result(request)
    match turn(request):
        case 0:
            return tool_call_reply(
                ("service_status", {"service": service}),
                content=f"Checking {service} before deploying it.",
            )
        case 1:
            if blocked(result):
                return final_reply(f"I could not check {service}: {result}")
            return tool_call_reply(
                ("deploy", {"service": service, "version": version, "environment": environment}),
                content=f"{result}. Deploying {version} to {environment}.",
            )
        case _:
            if blocked(result):
                return final_reply(f"The deploy did not happen: {result}")
            return final_reply(f"Done: {result}.")


def infra_model() -> ScriptedModel:
    """The scripted model of the ``infra`` agent."""
    return ScriptedModel(_reply, name="scripted-infra")


__all__ = ["DEMO_INPUT", "infra_model"]
