"""Support desk: a triage agent that hands refunds to the refunds agent (a sub-agent).

What it shows:

- ``Agent(..., subagents=[...])``: the triage agent's model gets a tool
  ``delegate_to_refunds`` taking a ``task_key`` and the ``task``;
- a call of it starts a **child run** of the refunds agent (`examples.refunds`), whose own
  risky call (a refund over 100) waits for a person; the triage run waits on it, and the
  card people see is the refund's, naming the chain ``support → refunds``;
- when the child run finishes, its answer is the delegating call's result and the triage
  run goes on; a failed or cancelled child is an error result the triage model reads;
- the task key names the task inside the triage run: asking again with the same key
  (after a crash, or by a model that repeats itself) returns the same task's answer,
  never a second refund run.

Try it: ``SIGNOFF_APP=examples.support:agents signoff serve``, start a run of ``support``
in the console with "Order A1001 was charged twice", and approve the refund it asks for.
"""

from __future__ import annotations

import re
from typing import Any

from examples import refunds
from examples._scripting import blocked, last_result, turn, user_text
from runtime import (
    Agent,
    ModelRequest,
    ScriptedModel,
    delegate_tool_name,
    final_reply,
    tool_call_reply,
)

NAME = "support"
DEMO_INPUT = refunds.DEMO_INPUT


def _order_id(text: str) -> str:
    found = re.search(r"\b([A-Z]\d{3,})\b", text.upper())
    return found.group(1) if found else "unknown"


def _reply(request: ModelRequest) -> dict[str, Any]:
    text = user_text(request)
    if turn(request) == 0:
        order_id = _order_id(text)
        return tool_call_reply(
            (
                delegate_tool_name(refunds.NAME),
                {"task_key": f"refund-{order_id}", "task": text},
            ),
            content="This is a refund request; handing it to the refunds agent.",
        )
    result = last_result(request)
    # An error result (the refunds run failed or was cancelled), or its own "did not".
    if blocked(result) or result.startswith(("I did not", "I could not")):
        return final_reply(f"The refund did not go through. {result}")
    return final_reply(f"Sorted: {result}")


def build_agent() -> Agent:
    """A fresh support agent, with a fresh refunds agent as its sub-agent."""
    return Agent(
        NAME,
        "You triage support requests. Hand refund requests to the refunds agent with a "
        "task key naming the order (refund-<order id>), then tell the customer the outcome.",
        ScriptedModel(_reply, name="scripted-support"),
        subagents=[refunds.build_agent()],
        description="Triages support requests; refunds go to the refunds agent.",
    )


def agents() -> list[Agent]:
    """The support agent (its refunds sub-agent is registered with it)."""
    return [build_agent()]


__all__ = ["DEMO_INPUT", "NAME", "agents", "build_agent"]
