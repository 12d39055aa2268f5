"""The tool through which a model hands a task to a sub-agent.

An agent that lists sub-agents gets one tool per sub-agent, ``delegate_to_<name>``
(characters a model's tool name may not hold become ``_``), taking a ``task_key`` and
the ``task``. Calling it starts the sub-agent's own run (a child run) on the task; the
child's final answer is the call's result. The task key names the task within the
parent run: calling the tool again with a key that was used already returns that task's
answer (or waits for it), it never starts a second run.
"""

from __future__ import annotations

import re
from typing import Any

from runtime.domain.errors import ConfigurationError
from runtime.domain.tools import Permission, ReplayPolicy, Tool

DELEGATE_PREFIX = "delegate_to_"
"""Prefix of the delegating tools' names."""

MAX_TASK_KEY = 200
"""The longest task key a model may give."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_TOOL_NAME = 64  # the providers' limit on a tool's name

TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task_key": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_TASK_KEY,
            "description": (
                "A short name for this task that stays the same if you ask again, e.g. "
                "'refund-A1001'. The same key returns the same task's answer; use a new "
                "key for a new task."
            ),
        },
        "task": {
            "type": "string",
            "minLength": 1,
            "description": "What the sub-agent should do, with everything it needs to know.",
        },
    },
    "required": ["task_key", "task"],
    "additionalProperties": False,
}
"""The arguments of a delegating tool."""


def delegate_tool_name(agent: str) -> str:
    """The name of the tool that delegates to the agent named `agent`."""
    return (DELEGATE_PREFIX + _UNSAFE.sub("_", agent))[:_MAX_TOOL_NAME]


async def _not_invoked(args: dict[str, Any]) -> Any:
    # The runtime starts a child run instead of calling this.
    raise RuntimeError("a delegating tool is never invoked directly")


def delegate_tool(agent: str, description: str) -> Tool:
    """The delegating tool of the sub-agent named `agent`, described by `description`.

    It runs without asking (the sub-agent's own tools ask as they are configured), and
    needs no replay policy: starting the child run is one commit with the call's move.
    """
    what = description.strip() or f"the {agent} agent"
    return Tool.from_schema(
        delegate_tool_name(agent),
        (
            f"Hand a task to the sub-agent {agent!r} ({what}). It works on the task on its "
            "own, its risky steps waiting for a person's sign-off, and its final answer "
            "is this tool's result."
        ),
        TASK_SCHEMA,
        _not_invoked,
        permission=Permission.ALLOW,
        replay_policy=ReplayPolicy.SAFE,
    )


def check_no_cycle(name: str, subagents: dict[str, Any]) -> None:
    """Raise `ConfigurationError` if an agent is among its own sub-agents, at any depth.

    Args:
        name: The agent's name.
        subagents: Its sub-agents by name (objects with a ``subagents`` mapping alike).
    """
    path = [name]

    def visit(children: dict[str, Any]) -> None:
        for child_name, child in children.items():
            if child_name in path:
                chain = " -> ".join([*path, child_name])
                raise ConfigurationError(f"agent {name!r}: sub-agents form a cycle ({chain})")
            path.append(child_name)
            visit(child.subagents)
            path.pop()

    visit(subagents)
