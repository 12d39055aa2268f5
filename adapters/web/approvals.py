"""The approvals API: agents built elsewhere ask whether one tool call may run.

Routes (``Authorization: Bearer <token>`` as for every ``/api`` route)::

    POST /api/approvals                    ApprovalBody, Idempotency-Key?  -> 201 | 200 (replay)
    GET  /api/approvals/{approval_id}?wait=N   (long poll, 0 <= N <= 60)   -> 200
    GET  /api/approvals?status=&agent=&session_id=&limit=&cursor=        -> 200 ApprovalList
    POST /api/approvals/{approval_id}/outcome  (`adapters.web.approval_outcomes`)

Every answer is an approval as `adapters.web.approval_models.approval_body` renders it.
An approval is visible to its requester, the identity that sent it, whoever may decide
(or decided) its ticket and operators; anyone else gets 404, as if it did not exist.
Bad input is refused (400, 403, 409, 413) before the runtime is asked anything, and a
refusal changes nothing.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from aiohttp import web
from pydantic import ValidationError

from adapters.web._refusals import Refusal, explain
from adapters.web.api import BadRequest, error_response, json_response, parse_limit, read_object
from adapters.web.approval_models import (
    ApprovalBody,
    approval_body,
    reveals_secrets,
)
from adapters.web.approval_outcomes import add_outcome_routes
from adapters.web.auth import TokenAuth
from adapters.web.decision_tokens import DecisionSigner, NotCanonical, canonical_json
from runtime import (
    Actor,
    Approval,
    ApprovalRefused,
    ConfigurationError,
    IdempotencyConflict,
    InvalidApproval,
    OutcomeConflict,
    RunNotFound,
    Runtime,
    SignoffError,
)
from runtime.edges import InvalidCursor

Handler = Callable[[web.Request, Actor], Awaitable[web.StreamResponse]]
Guarded = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_BODY_BYTES = 256 * 1024
"""Largest ``POST /api/approvals`` body; larger ones are refused with 413."""
MAX_DEPTH = 32
"""Deepest nesting of objects and lists in a body."""
MAX_WAIT_SECONDS = 60
"""Longest long poll (``?wait=N``)."""
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")
"""An ``Idempotency-Key``: 1 to 255 visible ASCII characters."""
Status = Literal["pending", "allowed", "denied"]
_WAIT = re.compile(r"\d{1,2}(\.\d{1,3})?")


def nesting_depth(value: Any) -> int:
    """How deeply objects and lists nest in `value` (a scalar is 0)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "body"


def body_problems(exc: ValidationError) -> list[dict[str, str]]:
    """A body's validation errors as ``{"path", "message"}`` pairs people can read."""
    known = ", ".join(field.alias or name for name, field in ApprovalBody.model_fields.items())
    problems = []
    for error in exc.errors():
        path = _where(tuple(error["loc"]))
        if error["type"] == "extra_forbidden":
            message = f"unknown field (known: {known})"
        elif error["type"] == "missing":
            message = "required"
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
        problems.append({"path": path, "message": message})
    return problems


async def read_approval_body(request: web.Request) -> ApprovalBody:
    """The request's body, checked: size, JSON, depth, fields, canonical arguments.

    Raises:
        web.HTTPRequestEntityTooLarge: Over `MAX_BODY_BYTES`.
        BadRequest: Anything else wrong with it (`InvalidApproval` for field errors).
    """
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(
            max_size=MAX_BODY_BYTES, actual_size=request.content_length
        )
    raw = await request.read()
    if len(raw) > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY_BYTES, actual_size=len(raw))
    data = await read_object(request)
    if nesting_depth(data) > MAX_DEPTH:
        raise BadRequest(f"the body is nested too deeply (at most {MAX_DEPTH} levels)")
    try:
        body = ApprovalBody.model_validate(data)
    except ValidationError as exc:
        problems = body_problems(exc)
        shown = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        raise InvalidApproval(f"invalid approval request: {shown}", problems) from None
    try:
        canonical_json(body.arguments)
    except NotCanonical as exc:
        raise InvalidApproval(
            "arguments: no RFC 8785 canonical form (integers must lie within "
            f"±(2**53 - 1), strings must be valid Unicode): {exc}",
            [{"path": "arguments", "message": str(exc)}],
        ) from None
    return body


def idempotency_key(request: web.Request) -> str | None:
    """The ``Idempotency-Key`` header, or None.

    Raises:
        BadRequest: It is given but empty, too long or not visible ASCII.
    """
    value = request.headers.get("Idempotency-Key")
    if value is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(value.strip()):
        raise BadRequest("Idempotency-Key must be 1 to 255 visible ASCII characters")
    return value.strip()


def parse_wait(raw: str | None) -> float:
    """``?wait=N``: seconds, 0 to `MAX_WAIT_SECONDS` (0 when absent).

    Raises:
        BadRequest: Not a plain number in that range.
    """
    if raw is None or raw == "":
        return 0.0
    if not _WAIT.fullmatch(raw) or float(raw) > MAX_WAIT_SECONDS:
        raise BadRequest(f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}")
    return float(raw)


def parse_status(raw: str | None) -> Status | None:
    """``?status=``: ``pending``, ``allowed`` or ``denied``; None (all) when absent."""
    match raw:
        case None | "":
            return None
        case "pending" | "allowed" | "denied":
            return raw
        case _:
            raise BadRequest("status must be pending, allowed or denied")


def _optional_query(request: web.Request, name: str) -> str | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    if len(value) > 200:
        raise BadRequest(f"{name} is longer than 200 characters")
    return value


def refusal_of(exc: SignoffError) -> Refusal | None:
    """The HTTP refusal of an error the approvals runtime raises (None: not one of them)."""
    match exc:
        case InvalidApproval():
            return Refusal(400, "invalid_approval", str(exc), list(exc.problems))
        case ApprovalRefused() | ConfigurationError():
            return Refusal(403, "approval_refused", str(exc))
        case IdempotencyConflict():
            return Refusal(409, "idempotency_conflict", str(exc))
        case OutcomeConflict():
            return Refusal(409, "outcome_conflict", str(exc))
        case RunNotFound():
            return Refusal(404, "not_found", "no such approval")
        case _:
            return None


def add_approval_routes(
    app: web.Application,
    runtime: Runtime,
    auth: TokenAuth,
    on_change: Callable[[], None],
    *,
    signer: DecisionSigner,
    check_callback: Callable[[str], None] | None = None,
) -> None:
    """Add the ``/api/approvals`` routes to `app` (after `adapters.web.add_api_routes`,
    whose middleware words aiohttp's own errors as JSON).

    Args:
        app: The application to extend.
        runtime: The runtime that decides.
        auth: The configured bearer tokens.
        on_change: Called after a request made a run ready (wakes the worker).
        signer: Signs decision tokens.
        check_callback: Checks a request's ``callback_url`` (raises `InvalidApproval`);
            None refuses every callback URL.
    """
    # Long polls end when the server shuts down, so a restart is not held up by them.
    stopping = asyncio.Event()

    async def stop_waiting(_app: web.Application) -> None:
        stopping.set()

    app.on_shutdown.append(stop_waiting)

    def guarded(handler: Handler) -> Guarded:
        @functools.wraps(handler)
        async def wrapper(request: web.Request) -> web.StreamResponse:
            actor = auth.bearer(request)
            if actor is None:
                response = error_response(
                    Refusal(401, "unauthenticated", "a valid bearer token is required")
                )
                response.headers["WWW-Authenticate"] = 'Bearer realm="signoff"'
                return response
            try:
                return await handler(request, actor)
            except BadRequest as exc:
                return error_response(Refusal(400, "bad_request", str(exc)))
            except SignoffError as exc:
                refused = refusal_of(exc)
                return error_response(refused or await explain(runtime, exc))

        return wrapper

    def render(approval: Approval, actor: Actor, status: int = 200) -> web.Response:
        shown = reveals_secrets(approval, actor.id)
        return json_response(
            approval_body(approval, reveal_secrets=shown, signer=signer), status=status
        )

    async def create(request: web.Request, actor: Actor) -> web.StreamResponse:
        key = idempotency_key(request)
        body = await read_approval_body(request)
        token = auth.bearer_token(request)
        if (
            body.on_behalf_of is not None
            and token is not None
            and not token.may_act_for(body.on_behalf_of)
        ):
            return error_response(
                Refusal(
                    403,
                    "forbidden",
                    f"this token may not request approvals on behalf of {body.on_behalf_of!r}",
                )
            )
        if body.callback_url is not None:
            if check_callback is None:
                raise InvalidApproval(
                    "callback_url: callbacks are not configured on this server",
                    [{"path": "callback_url", "message": "callbacks are not configured"}],
                )
            check_callback(body.callback_url)
        approval = await runtime.request_approval(body.request(), actor=actor, idempotency_key=key)
        if not approval.replayed:
            on_change()
        response = render(approval, actor, status=200 if approval.replayed else 201)
        response.headers["Location"] = f"/api/approvals/{approval.approval_id}"
        return response

    async def show(request: web.Request, actor: Actor) -> web.StreamResponse:
        approval_id = request.match_info["approval_id"]
        wait = parse_wait(request.query.get("wait"))
        approval = await runtime.approval(approval_id, viewer=actor)
        if wait > 0 and approval.status == "pending" and not stopping.is_set():
            approval = await runtime.wait_approval(
                approval_id, viewer=actor, timeout=wait, stop=stopping
            )
        return render(approval, actor)

    async def listing(request: web.Request, actor: Actor) -> web.StreamResponse:
        status = parse_status(request.query.get("status"))
        limit = parse_limit(request.query.get("limit"))
        try:
            page = await runtime.approval_page(
                viewer=actor,
                status=status,
                agent=_optional_query(request, "agent"),
                session_id=_optional_query(request, "session_id"),
                limit=limit,
                cursor=request.query.get("cursor") or None,
            )
        except InvalidCursor as exc:
            raise BadRequest(str(exc)) from None
        shown = [
            approval_body(a, reveal_secrets=reveals_secrets(a, actor.id), signer=signer)
            for a in page.items
        ]
        return json_response({"approvals": shown, "next_cursor": page.next_cursor})

    app.router.add_post("/api/approvals", guarded(create))
    app.router.add_get("/api/approvals", guarded(listing))
    app.router.add_get("/api/approvals/{approval_id}", guarded(show))
    add_outcome_routes(app, runtime, guarded, render)


__all__ = ["MAX_BODY_BYTES", "MAX_WAIT_SECONDS", "add_approval_routes"]
