"""On-call: an incident agent that finds who is on call and pages them, with a person's OK.

What it shows:

- ``page_engineer`` is ``ask`` with ``replay_policy="manual"``: paging wakes a person up,
  so it never runs twice on its own. If the process dies after the page was sent but
  before its result was recorded, the call becomes *uncertain* and an operator resolves
  it (``signoff resolve TICKET --result '"paged"'``, ``--retry`` or ``--abort``);
- ``who_is_on_call`` is ``allow`` and ``safe``: a read that may be repeated freely;
- a tool argument restricted to a closed set (``severity``), which becomes an ``enum`` in
  the JSON schema the model sees.

Try it: start a run with the input ``payments API returns 502s (team payments)``. A
message that names no team gets a reply saying what the agent does, and nothing runs.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from examples._scripting import blocked, last_json, last_result, offer, turn, user_text
from runtime import (
    Agent,
    ModelRequest,
    ScriptedModel,
    current_tool_context,
    final_reply,
    tool,
    tool_call_reply,
)

NAME = "oncall"
DEMO_INPUT = "payments API returns 502s for 5% of requests (team payments)"

ROTA = {"payments": "grace", "platform": "linus", "search": "margaret"}


@tool(permission="allow", replay_policy="safe")
async def who_is_on_call(team: str) -> dict[str, Any]:
    """Who is on call for `team` right now."""
    engineer = ROTA.get(team.lower())
    if engineer is None:
        return {"team": team, "error": f"no rota for {team}; known: {', '.join(sorted(ROTA))}"}
    return {"team": team.lower(), "engineer": engineer}


@tool(permission="ask", replay_policy="manual")
async def page_engineer(
    engineer: str, summary: str, severity: Literal["sev1", "sev2", "sev3"] = "sev2"
) -> dict[str, Any]:
    """Page `engineer` (phone call and push) about an incident."""
    key = current_tool_context().execution_key
    page_id = "pg_" + hashlib.sha256(key.encode()).hexdigest()[:10]
    return {"page_id": page_id, "engineer": engineer, "severity": severity, "status": "sent"}


def _team(text: str) -> str | None:
    found = re.search(r"team\s+([\w-]+)", text, re.IGNORECASE)
    if found:
        return found.group(1).lower()
    named = [team for team in ROTA if re.search(rf"\b{team}\b", text, re.IGNORECASE)]
    return named[0] if named else None


def _reply(request: ModelRequest) -> dict[str, Any]:
    text = user_text(request)
    team = _team(text)
    if team is None:
        return offer(
            "find who is on call for a team and page them after a person's OK (teams: "
            + ", ".join(sorted(ROTA))
            + ")",
            ["payments API returns 502s (team payments)"],
        )
    step = turn(request)
    if step == 0:
        return tool_call_reply(("who_is_on_call", {"team": team}))
    if step == 1:
        rota = last_json(request) or {}
        if "engineer" not in rota:
            return final_reply(f"I could not find who is on call: {rota.get('error', '?')}.")
        return tool_call_reply(
            (
                "page_engineer",
                {"engineer": rota["engineer"], "summary": text[:200], "severity": "sev2"},
            ),
            content=f"This looks customer-facing; paging {rota['engineer']} ({team}).",
        )
    result = last_result(request)
    if blocked(result):
        return final_reply(f"Nobody was paged. {result}.")
    page = last_json(request) or {}
    return final_reply(f"Paged {page.get('engineer', '?')} ({page.get('page_id', '?')}).")


def build_agent() -> Agent:
    """A fresh on-call agent with its scripted model."""
    return Agent(
        NAME,
        "You triage incidents and page the right on-call engineer when needed. "
        "When a call is denied, say that it did not happen.",
        ScriptedModel(_reply, name="scripted-oncall"),
        tools=[who_is_on_call, page_engineer],
        description=(
            "Finds who is on call and pages them after a person's OK. "
            'Try: "payments API returns 502s (team payments)"'
        ),
    )
