"""``GET /api/audit``: every run's events as NDJSON, for auditors and operators.

Each line is one event: ``seq`` (global, one order across every run), ``run_id``,
``agent``, ``at``, ``kind``, ``actor`` and ``data`` (as the flight recorder holds it,
secret arguments masked). The last line is ``{"next_after": N}`` and the
``Signoff-Next-After`` header says the same: ask again with ``after=N`` to go on. Events
are handed out only up to the store's horizon, below which no event can still appear,
so a reader that resumes never misses one (see `runtime.store.sql.audit`).

A bearer token marked ``auditor`` (or a JWT user in an auditor group) or an operator's
may read it; anyone else gets 403, and no valid token 401.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from adapters.web._refusals import Refusal, http_refusal
from adapters.web.api import BadRequest, error_response
from adapters.web.auth import TokenAuth
from runtime import SignoffError, classify

NEXT_AFTER_HEADER = "Signoff-Next-After"
DEFAULT_AUDIT_LIMIT = 100
MAX_AUDIT_LIMIT = 1000
MAX_SEQ = 2**63 - 1
"""The largest sequence number a store can hold (a 64-bit integer)."""


class AuditPage(Protocol):
    """What a page of the audit holds (`runtime.services.audit.AuditPage`)."""

    @property
    def events(self) -> list[dict[str, Any]]: ...

    @property
    def next_after(self) -> int: ...


ReadPage = Callable[[int, int], Awaitable[AuditPage]]
"""Reads the events after a sequence number, at most so many."""


def parse_after(raw: str | None) -> int:
    """``after``: a sequence number, 0 (the start) when absent."""
    if raw is None or raw == "":
        return 0
    if not raw.isascii() or not raw.isdigit():
        raise BadRequest("after must be a sequence number (a non-negative integer)")
    value = int(raw)
    if value > MAX_SEQ:
        raise BadRequest(f"after must be at most {MAX_SEQ}")
    return value


def parse_audit_limit(raw: str | None) -> int:
    """``limit``: how many events, 1 to `MAX_AUDIT_LIMIT` (default `DEFAULT_AUDIT_LIMIT`)."""
    if raw is None or raw == "":
        return DEFAULT_AUDIT_LIMIT
    if not raw.isascii() or not raw.isdigit() or len(raw) > 6:
        raise BadRequest(f"limit must be an integer between 1 and {MAX_AUDIT_LIMIT}")
    value = int(raw)
    if not 1 <= value <= MAX_AUDIT_LIMIT:
        raise BadRequest(f"limit must be an integer between 1 and {MAX_AUDIT_LIMIT}")
    return value


def add_audit_route(app: web.Application, auth: TokenAuth, read_page: ReadPage) -> None:
    """Add ``GET /api/audit`` to `app`.

    Args:
        app: The application to extend.
        auth: Who the API lets in; the token's ``auditor`` or ``operator`` flag lets a
            caller read the audit.
        read_page: Reads one page of events.
    """

    async def audit(request: web.Request) -> web.StreamResponse:
        token = auth.bearer_token(request)
        if token is None:
            response = error_response(
                Refusal(401, "unauthenticated", "a valid bearer token is required")
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="signoff"'
            return response
        if not (token.auditor or token.operator):
            return error_response(
                Refusal(403, "forbidden", "only auditors and operators may read the audit")
            )
        try:
            after = parse_after(request.query.get("after"))
            limit = parse_audit_limit(request.query.get("limit"))
        except BadRequest as exc:
            return error_response(Refusal(400, "bad_request", str(exc)))
        try:
            page = await read_page(after, limit)
        except SignoffError as exc:
            return error_response(http_refusal(classify(exc, None)))
        stream = web.StreamResponse(
            headers={
                "Content-Type": "application/x-ndjson",
                "Cache-Control": "no-store",
                NEXT_AFTER_HEADER: str(page.next_after),
            }
        )
        await stream.prepare(request)
        for event in page.events:
            await stream.write(_line(event))
        await stream.write(_line({"next_after": page.next_after}))
        await stream.write_eof()
        return stream

    app.router.add_get("/api/audit", audit)


def _line(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, default=str, separators=(",", ":")) + "\n").encode()
