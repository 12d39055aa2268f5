"""``POST /api/approvals/{approval_id}/outcome``: the caller reports what became of a call.

Body ``{"status": "succeeded" | "failed" | "unknown", "summary": "..."}``; the answer is
the approval, with its ``outcome``, as ``GET /api/approvals/{approval_id}`` gives it.
Only the approval's requester or its sender may report (others get 404, as for a
stranger), only for an ``allowed`` approval, and once: the same report again answers 200
and changes nothing, a different one is 409 (`runtime.OutcomeConflict`). An ``unknown``
outcome becomes an uncertain entry a person reconciles from chat or the console; the
outcome's ``resolution`` and ``resolved_by`` say how, once they did
(`runtime.Runtime.report_outcome`).

The approvals routes (`adapters.web.approvals`) register this one with their own
authentication, error mapping and rendering of the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from pydantic import ValidationError

from adapters.web.api import BadRequest, read_object
from adapters.web.approval_models import OutcomeBody
from runtime import Actor, Approval, Runtime

Handler = Callable[[web.Request, Actor], Awaitable[web.StreamResponse]]
"""A route's handler once its caller is authenticated."""
Guard = Callable[[Handler], Callable[[web.Request], Awaitable[web.StreamResponse]]]
"""Wraps a `Handler` with authentication and the API's error answers."""
Render = Callable[[Approval, Actor], web.Response]
"""The answer of an approvals route: the approval as `Actor` may see it."""

OUTCOME_PATH = "/api/approvals/{approval_id}/outcome"


def _problems(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error.get("loc", ())) or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def add_outcome_routes(
    app: web.Application, runtime: Runtime, guarded: Guard, render: Render
) -> None:
    """Add ``POST /api/approvals/{approval_id}/outcome`` to `app`.

    Args:
        app: The application serving the JSON API.
        runtime: Records the outcome.
        guarded: Authenticates the caller and maps errors to answers (`BadRequest` 400,
            `runtime.RunNotFound` 404, `runtime.OutcomeConflict` 409 ...).
        render: The approval as the caller may see it, as the answer.
    """

    async def report(request: web.Request, actor: Actor) -> web.StreamResponse:
        try:
            body = OutcomeBody.model_validate(await read_object(request))
        except ValidationError as exc:
            raise BadRequest(f"invalid outcome: {_problems(exc)}") from None
        approval = await runtime.report_outcome(
            request.match_info["approval_id"], body.status, body.summary, actor=actor
        )
        return render(approval, actor)

    app.router.add_post(OUTCOME_PATH, guarded(report))
