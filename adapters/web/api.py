"""The JSON API: list and show runs, read their flight recorder, decide tickets.

Every route needs ``Authorization: Bearer <token>``. A token that is not an operator's
sees only what `runtime.domain.visibility` gives it: others' runs and tickets answer 404, as if
they did not exist. Decisions go through
`Runtime.decide`, i.e. the same `validate_resume` as every other channel; refusals change
nothing and are mapped to HTTP the usual way (see `adapters.web._refusals`).

Routes::

    GET  /api/agents
    GET  /api/runs?status=awaiting,running&limit=50&cursor=...   -> {"runs", "next_cursor"}
    POST /api/runs                              {"agent", "input", "thread_id"?} -> 202
    GET  /api/runs/{run_id}
    GET  /api/runs/{run_id}/events[?format=jsonl]
    POST /api/runs/{run_id}/cancel|pause|resume
    GET  /api/tickets?limit=100&cursor=...      -> {"tickets", "next_cursor"}
    POST /api/tickets/{ticket_id}/decision      {"decision": "allow", "args"?: {...}} |
         {"decision": "deny", "reason"?} | {"answer": {...}} | {"resolution": "result",
         "result": ...} | {"resolution": "retry"} | {"resolution": "abort", "reason"?}
         An allow may carry {"grant": {"scope": "run" | "thread", "hours"?, "args"?}}.
    GET  /api/grants?state=active|all&run=...&thread=...&limit=...
    GET  /api/grants/{grant_id}
    POST /api/grants/{grant_id}/revoke
    GET  /api/runs/{run_id}/grants?state=active|all
    POST /api/decisions                         {"decisions": [{"ticket_id", <decision>},
         ...]} -> 200 {"results": [one per item, in order], "applied", "refused"}
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from adapters.web._refusals import Refusal, explain, http_refusal
from adapters.web.auth import TokenAuth
from runtime import (
    Abort,
    Actor,
    Agent,
    Allow,
    Answer,
    BatchItem,
    BatchOutcome,
    ConfigurationError,
    Deny,
    Grant,
    GrantError,
    GrantNotActive,
    GrantRequest,
    InputData,
    PendingEntry,
    RefusalReason,
    Resolve,
    ResumeCommand,
    Retry,
    RunResult,
    RunStatus,
    Runtime,
    SignoffError,
)
from runtime.edges import MAX_BATCH, InvalidCursor, is_number, loads_strict
from runtime.edges import may_control as may_control_run

Handler = Callable[[web.Request, Actor], Awaitable[web.StreamResponse]]

MAX_LIMIT = 500
STORAGE_RETRY_AFTER = 2
"""Seconds a client is told to wait (``Retry-After``) when the database failed."""
_dumps = functools.partial(json.dumps, default=str)


class BadRequest(Exception):
    """The request body or query is malformed (400)."""


def json_response(data: Any, status: int = 200) -> web.Response:
    """A JSON response (datetimes and enums become strings)."""
    return web.json_response(data, status=status, dumps=_dumps)


def error_response(refusal: Refusal) -> web.Response:
    """A refusal as a JSON error body (with ``Retry-After`` when the database failed)."""
    response = json_response(refusal.body(), status=refusal.status)
    if refusal.code == RefusalReason.STORAGE.value:
        response.headers["Retry-After"] = str(STORAGE_RETRY_AFTER)
    return response


# -- what the API shows ---------------------------------------------------------------


def pending_json(entry: PendingEntry) -> dict[str, Any]:
    """One pending entry: the ticket, the exact call and who may decide it."""
    ticket = entry.ticket
    return {
        "ticket_id": ticket.ticket_id,
        "kind": entry.status,
        "run_id": ticket.run_id,
        "thread_id": ticket.thread_id,
        "agent": ticket.agent,
        "tool": entry.call.name,
        "call_id": entry.call.call_id,
        "arguments": entry.call.arguments,
        "execution_key": entry.call.execution_key,
        "attempts": entry.call.attempts,
        "prompt": entry.prompt,
        "schema": entry.schema,
        "editable": list(entry.editable),
        "requester": ticket.requester,
        "approvers": list(ticket.approvers),
        "four_eyes": ticket.four_eyes,
        "who_may_decide": ticket.who_may_decide(),
        "deadline": ticket.deadline.isoformat() if ticket.deadline else None,
        "created_at": ticket.created_at.isoformat(),
        "grants": list(entry.grants),
        "chain": list(ticket.chain),
    }


def run_json(result: RunResult) -> dict[str, Any]:
    """A run as it stands, with its counters and what it waits on."""
    return {
        "run_id": result.run_id,
        "thread_id": result.thread_id,
        "agent": result.agent,
        "status": result.status.value,
        "text": result.text,
        "error": result.error,
        "requester": result.requester,
        "counters": {
            "turns": result.turns,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.total_tokens,
            "usage_incomplete": result.usage_incomplete,
        },
        "pending": [pending_json(entry) for entry in result.pending],
        **delegation_json(result),
    }


def delegation_json(result: RunResult) -> dict[str, Any]:
    """A run's place in a delegation tree: its parent and task, its sub-agents' runs and
    their counters added up (the run's own are under ``counters``)."""
    totals = result.children_totals
    return {
        "parent_run_id": result.parent_run_id,
        "task_key": result.task_key,
        "depth": result.depth,
        "chain": [{"run_id": link.run_id, "agent": link.agent} for link in result.chain],
        "children": [
            {
                "run_id": link.run_id,
                "agent": link.agent,
                "task_key": link.task_key,
                "status": link.status.value if link.status else None,
            }
            for link in result.children
        ],
        "children_counters": {
            "runs": totals.runs,
            "turns": totals.turns,
            "prompt_tokens": totals.prompt_tokens,
            "completion_tokens": totals.completion_tokens,
            "total_tokens": totals.total_tokens,
            "usage_incomplete": totals.usage_incomplete,
        },
    }


def run_summary(run: RunResult) -> dict[str, Any]:
    """A run in a listing."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "agent": run.agent,
        "status": run.status.value,
        "requester": run.requester,
        "input": run.input,
        "text": run.text,
        "error": run.error,
        "turns": run.turns,
        "created_at": run.created_at.isoformat() if run.created_at else None,
        "updated_at": run.updated_at.isoformat() if run.updated_at else None,
    }


def grant_json(grant: Grant) -> dict[str, Any]:
    """A standing grant: what it covers, who gave it, and whether it still applies."""
    return {
        "grant_id": grant.grant_id,
        "state": grant.state,
        "agent": grant.agent,
        "tool": grant.tool,
        "scope": grant.scope,
        "run_id": grant.run_id,
        "thread_id": grant.thread_id,
        "requester": grant.requester,
        "args": grant.constraint,
        "covers": grant.covers,
        "granted_by": grant.granted_by,
        "granted_by_name": grant.granted_by_name,
        "platform": grant.platform,
        "ticket_id": grant.ticket_id,
        "created_at": grant.created_at.isoformat(),
        "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
        "revoked_at": grant.revoked_at.isoformat() if grant.revoked_at else None,
        "revoked_by": grant.revoked_by,
    }


def agent_json(agent: Agent) -> dict[str, Any]:
    """A loaded agent and its tools."""
    return {
        "name": agent.name,
        "description": agent.description,
        "version": agent.version,
        "tools": [
            {"name": tool.name, "description": tool.description} for tool in agent.tools.values()
        ],
    }


# -- parsing ----------------------------------------------------------------------------


async def read_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object (an empty body is an empty object)."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = loads_strict(raw)
    except ValueError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise BadRequest("the body is nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _optional_text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{key!r} must be a string")
    return value or None


def answer_from_json(body: dict[str, Any]) -> Answer:
    """Turn a decision body into a typed answer.

    Raises:
        BadRequest: Not exactly one of ``decision``, ``answer``, ``resolution``, or a
            value of the wrong shape.
    """
    given = [key for key in ("decision", "answer", "resolution") if key in body]
    if len(given) != 1:
        raise BadRequest('give exactly one of "decision", "answer" or "resolution"')
    reason = _optional_text(body, "reason")
    if "grant" in body and body.get("decision") != "allow":
        raise BadRequest('"grant" goes with {"decision": "allow"} only')
    if "args" in body and body.get("decision") != "allow":
        raise BadRequest('"args" (changed arguments) goes with "decision": "allow"')
    match given[0], body[given[0]]:
        case "decision", "allow":
            args = body.get("args")
            if args is not None and not isinstance(args, dict):
                raise BadRequest('"args" must be a JSON object of the arguments to change')
            return Allow(grant=grant_from_json(body.get("grant")), args=args)
        case "decision", "deny":
            return Deny(reason=reason)
        case "answer", dict() as data:
            return InputData(data=data)
        case "answer", _:
            raise BadRequest('"answer" must be a JSON object')
        case "resolution", "result":
            if "result" not in body:
                raise BadRequest('a "result" resolution needs the verified "result"')
            return Resolve(result=body["result"])
        case "resolution", "retry":
            return Retry()
        case "resolution", "abort":
            return Abort(reason=reason)
        case "decision", _:
            raise BadRequest('"decision" must be "allow" or "deny"')
        case _:
            raise BadRequest('"resolution" must be "result", "retry" or "abort"')


def grant_from_json(raw: Any) -> GrantRequest | None:
    """The ``grant`` of an allow: None when absent.

    Raises:
        BadRequest: Not an object of ``scope`` (``run`` or ``thread``), ``hours`` (a
            positive number, at most 720) and ``args`` (``"same"`` or an object of
            argument tests).
    """
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadRequest('"grant" must be an object such as {"scope": "run"}')
    hours = raw.get("hours")
    # Pydantic would read true as 1 hour and "5" as 5 hours; JSON says what a number is.
    if hours is not None and not is_number(hours):
        raise BadRequest(f"invalid grant: hours: must be a number, not {json.dumps(hours)}")
    try:
        return GrantRequest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'grant'}: "
            f"{str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise BadRequest(f"invalid grant: {problems}") from None


def parse_grant_state(raw: str | None) -> bool:
    """``state=active`` (the default) -> True, ``state=all`` -> False."""
    if raw in (None, "", "active"):
        return True
    if raw == "all":
        return False
    raise BadRequest('state must be "active" or "all"')


def grant_refusal(exc: GrantError) -> Refusal:
    """An unknown grant is 404; one revoked or expired already is 409."""
    if isinstance(exc, GrantNotActive):
        return Refusal(409, exc.code, str(exc))
    return Refusal(404, exc.code, str(exc))


def batch_from_json(body: dict[str, Any]) -> list[tuple[str | None, BatchItem | Refusal]]:
    """The items of a ``POST /api/decisions`` body: each one's ticket id (if it names one)
    and its decision, or why it is malformed.

    Raises:
        BadRequest: ``decisions`` is not a list of 1 to `MAX_BATCH` items.
    """
    items = body.get("decisions")
    if not isinstance(items, list) or not items:
        raise BadRequest('"decisions" must be a non-empty list of {"ticket_id", "decision", ...}')
    if len(items) > MAX_BATCH:
        raise BadRequest(f"at most {MAX_BATCH} decisions per request")
    parsed: list[tuple[str | None, BatchItem | Refusal]] = []
    for item in items:
        named = item.get("ticket_id") if isinstance(item, dict) else None
        ticket_id = named if isinstance(named, str) and named else None
        try:
            if not isinstance(item, dict) or ticket_id is None:
                raise BadRequest('each decision needs a "ticket_id" (a string)')
            decision = {k: v for k, v in item.items() if k != "ticket_id"}
            parsed.append((ticket_id, BatchItem(ticket_id, answer_from_json(decision))))
        except BadRequest as exc:
            parsed.append((ticket_id, Refusal(400, "bad_request", str(exc))))
    return parsed


def outcome_json(outcome: BatchOutcome) -> dict[str, Any]:
    """One decision of a batch: applied (with where its run stands) or refused (why)."""
    shown: dict[str, Any] = {"ticket_id": outcome.ticket_id, "decision": outcome.answer.kind}
    if outcome.refusal is not None:
        refused = http_refusal(outcome.refusal, outcome.ticket_id)
        return {**shown, "status": refused.status, "applied": False, **refused.body()}
    result = outcome.result
    shown.update(status=200, applied=True)
    if result is not None:
        shown.update(run_id=result.run_id, run_status=result.status.value)
    return shown


def parse_statuses(raw: str) -> list[RunStatus]:
    """``awaiting,running`` -> statuses (BadRequest for an unknown one)."""
    statuses = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            statuses.append(RunStatus(item))
        except ValueError:
            known = ", ".join(s.value for s in RunStatus)
            raise BadRequest(f"unknown status {item!r} (known: {known})") from None
    return statuses


def parse_limit(raw: str | None, default: int = 50) -> int:
    """A positive page size up to `MAX_LIMIT`."""
    if raw is None or raw == "":
        return default
    try:
        limit = int(raw)
    except ValueError:
        raise BadRequest("limit must be an integer") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


def may_control(actor: Actor, result: RunResult) -> bool:
    """Operators control any run; other people only the runs they started
    (`runtime.domain.visibility.may_control`)."""
    return may_control_run(actor, result.requester)


# -- routes ---------------------------------------------------------------------------


@web.middleware
async def _json_http_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Under ``/api/`` only: aiohttp's own errors (404, 405, 413 ...) as JSON bodies too."""
    if not request.path.startswith("/api/"):
        return await handler(request)
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = exc.reason.lower().replace(" ", "_")
        return error_response(Refusal(exc.status, code, exc.text or exc.reason))


def add_api_routes(
    app: web.Application,
    runtime: Runtime,
    auth: TokenAuth,
    on_change: Callable[[], None],
) -> None:
    """Add the ``/api`` routes to `app`.

    Args:
        app: The application to extend.
        runtime: The runtime whose runs and tickets are served.
        auth: The configured bearer tokens.
        on_change: Called after a run became ready (wakes the worker).
    """

    def guarded(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
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
                # Every id of the person: what they may see and decide under any of them.
                return await handler(request, await runtime.identities.as_person(actor))
            except BadRequest as exc:
                return error_response(Refusal(400, "bad_request", str(exc)))
            except GrantError as exc:
                return error_response(grant_refusal(exc))
            except SignoffError as exc:
                ticket_id = request.match_info.get("ticket_id")
                return error_response(await explain(runtime, exc, ticket_id))

        return wrapper

    async def agents(request: web.Request, actor: Actor) -> web.StreamResponse:
        loaded = runtime.agents
        offered = sorted(n for n, a in loaded.items() if not getattr(a, "internal", False))
        return json_response({"agents": [agent_json(loaded[name]) for name in offered]})

    async def runs(request: web.Request, actor: Actor) -> web.StreamResponse:
        statuses = parse_statuses(request.query.get("status", ""))
        limit = parse_limit(request.query.get("limit"))
        try:
            page = await runtime.run_page(
                statuses=statuses, limit=limit, viewer=actor, cursor=request.query.get("cursor")
            )
        except InvalidCursor as exc:
            raise BadRequest(str(exc)) from None
        return json_response(
            {"runs": [run_summary(run) for run in page.items], "next_cursor": page.next_cursor}
        )

    async def start(request: web.Request, actor: Actor) -> web.StreamResponse:
        body = await read_object(request)
        agent, text = body.get("agent"), body.get("input")
        if not isinstance(agent, str) or not agent:
            raise BadRequest('"agent" (a loaded agent\'s name) is required')
        if not isinstance(text, str) or not text.strip():
            raise BadRequest('"input" (the message to the agent) is required')
        thread_id = _optional_text(body, "thread_id")
        if agent not in runtime.agents:
            known = ", ".join(sorted(runtime.agents)) or "none"
            return error_response(
                Refusal(422, "unknown_agent", f"no agent {agent!r} is loaded (loaded: {known})")
            )
        if getattr(runtime.agents[agent], "internal", False):
            return error_response(
                Refusal(
                    422,
                    "unknown_agent",
                    f"agent {agent!r} is started by signoff itself, not by hand",
                )
            )
        try:
            result = await runtime.start(
                agent,
                text,
                requester=actor.id,
                thread_id=thread_id,
                origin={"platform": "console"},
                wait=False,
                joining_as=actor,
            )
        except ConfigurationError as exc:
            return error_response(Refusal(422, "unknown_agent", str(exc)))
        on_change()
        response = json_response(
            {**run_json(result), "url": f"/api/runs/{result.run_id}"}, status=202
        )
        response.headers["Location"] = f"/api/runs/{result.run_id}"
        return response

    async def show(request: web.Request, actor: Actor) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        return json_response(run_json(await runtime.get(run_id, viewer=actor)))

    async def events(request: web.Request, actor: Actor) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        fmt = request.query.get("format", "json")
        if fmt not in ("json", "jsonl"):
            raise BadRequest('format must be "json" or "jsonl"')
        if fmt == "jsonl":
            exported = await runtime.export_events(run_id, viewer=actor)
            return web.Response(text=exported, content_type="application/x-ndjson")
        found = await runtime.events(run_id, viewer=actor)
        return json_response({"run_id": run_id, "events": found})

    async def tickets(request: web.Request, actor: Actor) -> web.StreamResponse:
        limit = parse_limit(request.query.get("limit"), default=100)
        try:
            page = await runtime.ticket_page(
                limit, viewer=actor, cursor=request.query.get("cursor")
            )
        except InvalidCursor as exc:
            raise BadRequest(str(exc)) from None
        return json_response(
            {
                "tickets": [pending_json(entry) for entry in page.items],
                "next_cursor": page.next_cursor,
            }
        )

    async def decide(request: web.Request, actor: Actor) -> web.StreamResponse:
        ticket_id = request.match_info["ticket_id"]
        # A stranger's request ends here, whatever its body: the ticket does not exist
        # for them (404), and nothing about its shape is checked for them.
        ticket = await runtime.ticket(ticket_id, viewer=actor)
        answer = answer_from_json(await read_object(request))
        # The ticket as just read names the run; `submit` checks it again, locked.
        command = ResumeCommand.from_ticket(ticket, answer, actor, runtime.clock.now())
        result = await runtime.submit(command)
        on_change()
        body: dict[str, Any] = {
            "ticket_id": ticket_id,
            "decision": answer.kind,
            "run": run_json(result),
        }
        if isinstance(answer, Allow) and answer.grant is not None:
            given = await runtime.grants(run_id=result.run_id, viewer=actor, limit=MAX_LIMIT)
            body["grant"] = next((grant_json(g) for g in given if g.ticket_id == ticket_id), None)
        return json_response(body)

    async def grants(request: web.Request, actor: Actor) -> web.StreamResponse:
        active = parse_grant_state(request.query.get("state"))
        limit = parse_limit(request.query.get("limit"), default=100)
        run_id = request.query.get("run") or None
        if run_id is not None:
            await runtime.get(run_id, viewer=actor)  # 404 for a run they may not see
        found = await runtime.grants(
            viewer=actor,
            run_id=run_id,
            thread_id=request.query.get("thread") or None,
            active=active,
            limit=limit,
        )
        return json_response({"grants": [grant_json(g) for g in found]})

    async def run_grants(request: web.Request, actor: Actor) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        active = parse_grant_state(request.query.get("state"))
        found = await runtime.grants_of_run(run_id, viewer=actor, active=active)
        return json_response({"run_id": run_id, "grants": [grant_json(g) for g in found]})

    async def grant(request: web.Request, actor: Actor) -> web.StreamResponse:
        found = await runtime.grant(request.match_info["grant_id"], viewer=actor)
        return json_response(grant_json(found))

    async def revoke(request: web.Request, actor: Actor) -> web.StreamResponse:
        grant_id = request.match_info["grant_id"]
        # A stranger's request ends here (404), whatever its body.
        await runtime.grant(grant_id, viewer=actor)
        await read_object(request)
        return json_response(grant_json(await runtime.revoke_grant(grant_id, actor=actor)))

    async def decide_many(request: web.Request, actor: Actor) -> web.StreamResponse:
        items = batch_from_json(await read_object(request))
        # Each ticket is checked for who may see and decide it, and applied, on its own.
        wanted = [item for _, item in items if isinstance(item, BatchItem)]
        outcomes = iter(await runtime.decide_batch(wanted, actor))
        results = []
        for ticket_id, item in items:
            if isinstance(item, BatchItem):
                results.append(outcome_json(next(outcomes)))
            else:
                results.append(
                    {"ticket_id": ticket_id, "status": 400, "applied": False, **item.body()}
                )
        applied = sum(1 for r in results if r["applied"])
        if applied:
            on_change()
        return json_response(
            {"results": results, "applied": applied, "refused": len(results) - applied}
        )

    async def control(request: web.Request, actor: Actor) -> web.StreamResponse:
        run_id, action = request.match_info["run_id"], request.match_info["action"]
        current = await runtime.get(run_id, viewer=actor)
        body = await read_object(request)
        if not may_control(actor, current):
            return error_response(
                Refusal(
                    403,
                    "unauthorized",
                    f"only an operator or the requester ({current.requester}) may {action} "
                    "this run",
                )
            )
        if action == "cancel":
            result = await runtime.cancel(
                run_id, actor=actor, reason=_optional_text(body, "reason")
            )
        elif action == "pause":
            result = await runtime.pause(run_id, actor=actor)
        else:
            # Only made ready here; a worker drives it (on_change wakes one).
            result = await runtime.resume(run_id, actor=actor, wait=False)
        on_change()
        return json_response(run_json(result))

    app.middlewares.append(_json_http_errors)
    app.router.add_get("/api/agents", guarded(agents))
    app.router.add_get("/api/runs", guarded(runs))
    app.router.add_post("/api/runs", guarded(start))
    app.router.add_get("/api/runs/{run_id}", guarded(show))
    app.router.add_get("/api/runs/{run_id}/events", guarded(events))
    app.router.add_post("/api/runs/{run_id}/{action:cancel|pause|resume}", guarded(control))
    app.router.add_get("/api/tickets", guarded(tickets))
    app.router.add_post("/api/tickets/{ticket_id}/decision", guarded(decide))
    app.router.add_get("/api/grants", guarded(grants))
    app.router.add_get("/api/grants/{grant_id}", guarded(grant))
    app.router.add_post("/api/grants/{grant_id}/revoke", guarded(revoke))
    app.router.add_get("/api/runs/{run_id}/grants", guarded(run_grants))
    app.router.add_post("/api/decisions", guarded(decide_many))
