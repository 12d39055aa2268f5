"""Deploys: a release agent that asks for a rollback plan, then for a four-eyes approval.

What it shows:

- typed input: ``rollback_plan`` returns an `runtime.InputRequest` (a prompt plus a
  pydantic model); the run parks until someone answers with data that fits the schema,
  then the tool is called again with the answer in ``current_tool_context().answer``;
- ``four_eyes=True`` on ``deploy``: the person who asked for the deploy may not approve
  it; members of the ``release-managers`` group (verified by the chat edge) or an
  operator may;
- a decision ``deadline``: a deploy not approved within 30 minutes expires and the model
  is told it was not allowed;
- ``replay_policy="manual"`` (the default): if the process dies while a deploy runs, the
  call becomes *uncertain* and a person decides whether it happened.

Try it: start a run with the input ``deploy checkout 2.4.1``, answer the rollback-plan
request (``signoff answer TICKET --data '{"previous_version": "2.4.0",
"strategy": "redeploy_previous"}'``), then approve the deploy as someone else. Other
messages get a reply saying what the agent does, and nothing runs.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from examples._scripting import blocked, last_json, last_result, offer, turn, user_text
from runtime import (
    Agent,
    InputRequest,
    ModelRequest,
    ScriptedModel,
    current_tool_context,
    final_reply,
    tool,
    tool_call_reply,
)

NAME = "deploys"
DEMO_INPUT = "deploy checkout 2.4.1"
RELEASE_MANAGERS = "group:release-managers"


class RollbackPlan(BaseModel):
    """How to undo a deploy."""

    previous_version: str = Field(min_length=1, description="The version to go back to.")
    strategy: Literal["redeploy_previous", "disable_feature_flag", "restore_snapshot"]
    max_minutes: int = Field(default=15, ge=1, le=240, description="Time box for the rollback.")


@tool(permission="allow", replay_policy="safe")
async def rollback_plan(service: str) -> Any:
    """Ask a person how `service` would be rolled back; returns the plan."""
    answer = current_tool_context().answer
    if answer is None:
        return InputRequest(
            prompt=f"How do we roll {service} back if this deploy goes wrong?",
            schema=RollbackPlan,
        )
    plan = RollbackPlan.model_validate(answer)
    return {"service": service, **plan.model_dump()}


@tool(
    permission="ask",
    four_eyes=True,
    approvers=[RELEASE_MANAGERS],
    deadline=timedelta(minutes=30),
)
async def deploy(service: str, version: str) -> dict[str, Any]:
    """Roll `version` of `service` out to production."""
    context = current_tool_context()
    deployment = "dep_" + hashlib.sha256(context.execution_key.encode()).hexdigest()[:10]
    approved_by = context.actor.id if context.actor is not None else None
    return {
        "deployment_id": deployment,
        "service": service,
        "version": version,
        "status": "rolled out",
        "approved_by": approved_by,
    }


def _target(text: str) -> tuple[str, str] | None:
    found = re.search(r"deploy\s+([\w-]+)\s+(?:version\s+)?v?(\d[\w.+-]*)", text, re.IGNORECASE)
    return (found.group(1), found.group(2)) if found else None


def _reply(request: ModelRequest) -> dict[str, Any]:
    target = _target(user_text(request))
    if target is None:
        return offer(
            "deploy a service version to production, after a rollback plan and a second "
            "person's approval",
            [DEMO_INPUT],
        )
    service, version = target
    step = turn(request)
    if step == 0:
        return tool_call_reply(
            ("rollback_plan", {"service": service}),
            content=f"Before deploying {service} {version} I need a rollback plan.",
        )
    if step == 1:
        result = last_result(request)
        if blocked(result):
            return final_reply(f"Not deploying {service} {version} without a rollback plan.")
        plan = last_json(request) or {}
        return tool_call_reply(
            ("deploy", {"service": service, "version": version}),
            content=(
                f"Rollback plan: {plan.get('strategy', '?')} to "
                f"{plan.get('previous_version', '?')}. Deploying {service} {version} needs "
                "a second pair of eyes."
            ),
        )
    result = last_result(request)
    if blocked(result):
        return final_reply(f"{service} {version} was not deployed. {result}.")
    details = last_json(request) or {}
    return final_reply(
        f"Deployed {service} {version} ({details.get('deployment_id', '?')}), "
        f"approved by {details.get('approved_by') or 'nobody'}."
    )


def build_agent() -> Agent:
    """A fresh deploys agent with its scripted model."""
    return Agent(
        NAME,
        "You deploy services. Always get a rollback plan before deploying. "
        "When a call is denied, say that it did not happen.",
        ScriptedModel(_reply, name="scripted-deploys"),
        tools=[rollback_plan, deploy],
        description=(
            f'Deploys a service after a rollback plan and a four-eyes approval. Try: "{DEMO_INPUT}"'
        ),
    )
