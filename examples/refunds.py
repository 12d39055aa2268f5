"""Refunds: a support agent that looks an order up and refunds a double charge.

What it shows:

- a tool whose permission depends on its arguments: refunds over 100 wait for a person
  (``ask``), smaller ones run at once (``allow``);
- ``replay_policy="idempotent"``: after a crash the refund may run again, because it
  passes ``current_tool_context().execution_key`` to the payment provider as its
  idempotency key, so the provider refunds at most once;
- a read-only tool (``lookup_order``) that is ``allow`` and ``safe`` to repeat;
- a scripted model (no network) that reacts to a denial like a real one would.

Try it: ``signoff demo`` runs this agent on order A1001 (249.00, so it asks); order A1002
(42.50) is refunded without asking. A message about neither an order nor a refund gets a
reply saying what the agent does, and nothing runs.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any

from pydantic import Field

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

NAME = "refunds"
DEMO_INPUT = "Order A1001 was charged twice. Please refund the duplicate charge."
ASK_ABOVE = 100.0

# A tiny stand-in for the shop's order database.
ORDERS: dict[str, dict[str, Any]] = {
    "A1001": {"customer": "Ada Lovelace", "total": 249.0, "currency": "EUR", "charges": 2},
    "A1002": {"customer": "Alan Turing", "total": 42.5, "currency": "EUR", "charges": 2},
    "A1003": {"customer": "Grace Hopper", "total": 1200.0, "currency": "EUR", "charges": 1},
}


def refund_permission(args: dict[str, Any]) -> str:
    """Refunds over 100 wait for a person; smaller ones run at once."""
    return "ask" if args["amount"] > ASK_ABOVE else "allow"


@tool(permission="allow", replay_policy="safe")
async def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up: customer, total, currency and how often it was charged."""
    order = ORDERS.get(order_id.upper())
    if order is None:
        return {"order_id": order_id, "error": "no such order"}
    return {"order_id": order_id.upper(), **order}


@tool(permission=refund_permission, replay_policy="idempotent")
async def refund(order_id: str, amount: Annotated[float, Field(gt=0)]) -> dict[str, Any]:
    """Refund `amount` of an order to the card it was paid with."""
    context = current_tool_context()
    # A real payment API gets the execution key as its idempotency key (for Stripe, the
    # `Idempotency-Key` header): a replay after a crash returns the first refund instead
    # of paying twice. Here the refund id is derived from it to show that it is stable.
    refund_id = "re_" + hashlib.sha256(context.execution_key.encode()).hexdigest()[:12]
    return {
        "refund_id": refund_id,
        "order_id": order_id,
        "amount": amount,
        "idempotency_key": context.execution_key,
        "attempt": context.attempt,
    }


EXAMPLES = (DEMO_INPUT, "Order A1002 was charged twice")


def _order_id(text: str) -> str | None:
    found = re.search(r"\b([A-Z]-?\d+)\b", text.upper())
    if found:
        return found.group(1)
    # A refund asked for without naming the order: the demo's order.
    return "A1001" if re.search(r"refund|charge", text, re.IGNORECASE) else None


def _reply(request: ModelRequest) -> dict[str, Any]:
    order_id = _order_id(user_text(request))
    step = turn(request)
    if order_id is None:
        return offer("look an order up and refund a double charge (over 100 asks first)", EXAMPLES)
    if step == 0:
        return tool_call_reply(
            ("lookup_order", {"order_id": order_id}),
            content=f"Let me look order {order_id} up first.",
        )
    if step == 1:
        order = last_json(request) or {}
        if "error" in order or "total" not in order:
            return final_reply(f"I could not find order {order_id}, so I refunded nothing.")
        if order.get("charges", 1) < 2:
            return final_reply(f"Order {order_id} was charged once; there is nothing to refund.")
        amount = float(order["total"])
        return tool_call_reply(
            ("refund", {"order_id": order_id, "amount": amount}),
            content=(
                f"Order {order_id} was charged {order['charges']} times; refunding the "
                f"duplicate charge of {amount:.2f} {order['currency']}."
            ),
        )
    result = last_result(request)
    if blocked(result):
        return final_reply(f"I did not refund order {order_id}. {result}.")
    details = last_json(request) or {}
    return final_reply(
        f"Refunded {float(details.get('amount', 0)):.2f} on order {order_id} "
        f"(refund {details.get('refund_id', '?')})."
    )


def build_agent() -> Agent:
    """A fresh refunds agent with its scripted model."""
    return Agent(
        NAME,
        "You handle refund requests for a web shop. Look the order up before refunding. "
        "When a call is denied, say that it did not happen.",
        ScriptedModel(_reply, name="scripted-refunds"),
        tools=[lookup_order, refund],
        description=(
            "Looks orders up and refunds double charges (over 100 asks first). "
            f'Try: "{EXAMPLES[0]}"'
        ),
    )
