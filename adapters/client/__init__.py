"""A Python client of signoff's approvals API, for agents that run elsewhere.

It needs httpx, PyJWT and rfc8785 and imports nothing of the server; an agent process
installs it alone as ``signoff-client`` (``pip install ./deploy/client``). See
``docs/client.md``.

- `SignoffClient` / `AsyncSignoffClient`: ask whether a tool call may run
  (``request_approval``), read and wait for the decision, report the outcome.
- `gate`: a decorator that asks before a function runs and reports after.
- `derive_key`: idempotency keys from the caller's own ids.
- `verify_decision_token` / `args_digest`: for tool servers, check that signoff
  decided *this exact call*.

Framework adapters live next to it and import their framework only themselves:
``adapters.client.openai_agents``, ``adapters.client.langgraph``,
``adapters.client.pydantic_ai``.
"""

from adapters.client.async_client import AsyncSignoffClient
from adapters.client.decision import ApprovalDenied, ApprovalTimeout, Decision, Outcome
from adapters.client.errors import (
    ApprovalError,
    ApprovalRequestError,
    DecisionTokenError,
    SignoffUnavailable,
)
from adapters.client.gate import gate
from adapters.client.keys import derive_key
from adapters.client.retry import RetryPolicy
from adapters.client.sync_client import SignoffClient
from adapters.client.tokens import args_digest, verify_decision_token

__all__ = [
    "ApprovalDenied",
    "ApprovalError",
    "ApprovalRequestError",
    "ApprovalTimeout",
    "AsyncSignoffClient",
    "Decision",
    "DecisionTokenError",
    "Outcome",
    "RetryPolicy",
    "SignoffClient",
    "SignoffUnavailable",
    "args_digest",
    "derive_key",
    "gate",
    "verify_decision_token",
]
