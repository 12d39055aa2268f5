"""An agent whose tool's secret argument fails its schema (loaded with SIGNOFF_APP)."""

from __future__ import annotations

from typing import Any

from runtime import Agent, ScriptedModel, Tool, final_reply, tool_call_reply

SECRET_VALUE = "sk-live-never-quoted-7171"
SCHEMA = {
    "type": "object",
    "properties": {"user": {"type": "string"}, "token": {"type": "string", "pattern": "^tok_"}},
    "required": ["user", "token"],
}


async def _login(args: dict[str, Any]) -> str:
    return "logged in"


def agents() -> list[Agent]:
    """One agent: its ``login`` call carries a secret ``token`` that fails the pattern."""
    model = ScriptedModel(
        [
            tool_call_reply(("login", {"user": "ana", "token": SECRET_VALUE})),
            final_reply("I could not log in."),
        ]
    )
    login = Tool.from_schema("login", "Log in.", SCHEMA, _login, secret=["token"])
    return [Agent("vault", "Log in.", model, tools=[login])]
