"""An agent whose tool takes a secret argument (loaded with SIGNOFF_APP), for log tests."""

from __future__ import annotations

from runtime import Agent, ScriptedModel, final_reply, tool_call_reply

SECRET_VALUE = "sk-live-do-not-log-4242"


def agents() -> list[Agent]:
    """One agent: ``charge`` needs approval and its ``api_key`` is secret."""
    model = ScriptedModel(
        [
            tool_call_reply(("charge", {"card": "4242", "api_key": SECRET_VALUE})),
            final_reply("Charged."),
        ]
    )
    billing = Agent("billing", "Charge cards.", model)

    @billing.tool(permission="ask", secret=["api_key"])
    def charge(card: str, api_key: str) -> str:
        """Charge a card with the payment provider's key."""
        return f"charged {card}"

    return [billing]
