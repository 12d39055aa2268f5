"""The JSON API as the client speaks it: request bodies, paths, and reading answers.

Shared by the sync and the async client, which only differ in how they send.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from adapters.client.decision import OutcomeStatus
from adapters.client.errors import ApprovalError, ApprovalRequestError
from adapters.client.retry import retry_after_seconds

MAX_WAIT = 60
"""The longest long poll signoff holds (seconds)."""
OUTCOMES = ("succeeded", "failed", "unknown")
USER_AGENT = "signoff-client/0.1"


@dataclass(frozen=True)
class Transient:
    """An answer worth retrying (5xx, 429): why, and how long signoff asked us to wait."""

    why: str
    retry_after: float | None


@dataclass(frozen=True)
class Call:
    """One HTTP request to send (and to send again on a transient failure)."""

    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, str] | None = None
    headers: dict[str, str] | None = None
    wait: float = 0.0


def approval_call(
    *,
    agent: str,
    tool: str,
    arguments: Mapping[str, Any],
    idempotency_key: str | None,
    session_id: str | None,
    description: str | None,
    schema: Mapping[str, Any] | None,
    on_behalf_of: str | None,
    approvers: Sequence[str] | None,
    deadline_seconds: float | None,
    secret: Sequence[str] | None,
    callback_url: str | None,
) -> Call:
    """``POST /api/approvals``, with a fresh idempotency key when the caller gave none.

    The key is what makes sending it again after a lost answer safe: signoff answers the
    same approval instead of opening a second ticket.
    """
    body: dict[str, Any] = {"agent": agent, "tool": tool, "arguments": dict(arguments)}
    optional: dict[str, Any] = {
        "session_id": session_id,
        "description": description,
        "schema": dict(schema) if schema is not None else None,
        "on_behalf_of": on_behalf_of,
        "approvers": list(approvers) if approvers is not None else None,
        "deadline_seconds": deadline_seconds,
        "secret": list(secret) if secret is not None else None,
        "callback_url": callback_url,
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
    return Call("POST", "/api/approvals", json=body, headers={"Idempotency-Key": key})


def get_call(approval_id: str, wait: float) -> Call:
    """``GET /api/approvals/{id}?wait=N``.

    Raises:
        ValueError: `wait` is not between 0 and 60 seconds.
    """
    if not 0 <= wait <= MAX_WAIT:
        raise ValueError(f"wait must be between 0 and {MAX_WAIT} seconds, not {wait}")
    seconds = math.ceil(wait)
    params = {"wait": str(seconds)} if seconds else None
    return Call("GET", approval_path(approval_id), params=params, wait=seconds)


def outcome_call(approval_id: str, status: OutcomeStatus, summary: str | None) -> Call:
    """``POST /api/approvals/{id}/outcome``.

    Raises:
        ValueError: `status` is not one of ``succeeded``, ``failed``, ``unknown``.
    """
    if status not in OUTCOMES:
        raise ValueError(f"status must be one of {', '.join(OUTCOMES)}, not {status!r}")
    body: dict[str, Any] = {"status": status}
    if summary is not None:
        body["summary"] = summary
    return Call("POST", approval_path(approval_id) + "/outcome", json=body)


def approval_path(approval_id: str) -> str:
    """The path of one approval (its id escaped)."""
    if not approval_id:
        raise ValueError("approval_id must not be empty")
    return "/api/approvals/" + quote(approval_id, safe="")


def next_poll(remaining: float | None) -> float:
    """How long the next long poll may last, `remaining` seconds before the caller's limit."""
    if remaining is None:
        return MAX_WAIT
    return max(0.0, min(float(MAX_WAIT), remaining))


def read(response: httpx.Response) -> dict[str, Any] | Transient:
    """The JSON object of a successful answer, or what to retry.

    Raises:
        ApprovalRequestError: signoff refused the request (4xx other than 429).
        ApprovalError: A success that is not a JSON object.
    """
    status = response.status_code
    if status == 429 or status >= 500:
        return Transient(f"HTTP {status}", retry_after_seconds(response.headers.get("Retry-After")))
    body = _json(response)
    if status >= 400:
        code = body.get("error") if isinstance(body, dict) else None
        message = body.get("message") if isinstance(body, dict) else None
        raise ApprovalRequestError(
            status,
            str(code) if code is not None else None,
            str(message) if message is not None else response.reason_phrase,
            body if isinstance(body, dict) else None,
        )
    if not isinstance(body, dict):
        raise ApprovalError(f"signoff answered HTTP {status} without a JSON object")
    return body


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
