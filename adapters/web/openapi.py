"""The OpenAPI 3.1 document of the JSON API, generated from the request and answer models.

Served at ``GET /api/openapi.json`` (no authentication). Every ``/api`` route is listed
in `OPERATIONS` with its body and answer models (`adapters.web.api_models`,
`adapters.web.approval_models`); their JSON schemas (pydantic's, JSON Schema 2020-12 as
OpenAPI 3.1 uses) go under ``components/schemas``. A test holds the document to the
routes the application really serves, and real answers to its schemas.

Routes mounted only where their part is configured (`OPTIONAL_OPERATIONS`: the MCP
servers' refresh) are listed when the serving application mounts them: the served
document describes the routes of that application.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.json_schema import models_json_schema

from adapters.web import api_models as m
from adapters.web.approval_models import (
    ApprovalAnswer,
    ApprovalBody,
    ApprovalList,
    OutcomeBody,
)

OPENAPI_PATH = "/api/openapi.json"
REF = "#/components/schemas/{model}"

Method = Literal["get", "post"]


@dataclass(frozen=True)
class Param:
    """A path or query parameter."""

    name: str
    where: Literal["path", "query", "header"]
    schema: dict[str, Any]
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class Operation:
    """One route: its body and its answers by status."""

    method: Method
    path: str
    summary: str
    answers: dict[int, type[BaseModel] | None]
    body: type[BaseModel] | Any = None
    params: tuple[Param, ...] = ()
    public: bool = False
    errors: tuple[int, ...] = (400, 401)
    extra_content: dict[int, dict[str, Any]] = field(default_factory=dict)
    error_words: dict[int, str] = field(default_factory=dict)


def _path(name: str, description: str, **schema: Any) -> Param:
    return Param(name, "path", {"type": "string", **schema}, description, required=True)


def _query(name: str, description: str, **schema: Any) -> Param:
    return Param(name, "query", {"type": "string", **schema}, description)


RUN_ID = _path("run_id", "The run.")
TICKET_ID = _path("ticket_id", "The ticket.")
GRANT_ID = _path("grant_id", "The grant.")
APPROVAL_ID = _path("approval_id", "The approval (its run's id).")
LIMIT = Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 500}, "Page size.")
CURSOR = _query("cursor", "The next_cursor of the previous page.")
GRANT_STATE = _query("state", "active (default) or all.", enum=["active", "all"])

OPERATIONS: tuple[Operation, ...] = (
    Operation("get", "/api/agents", "The loaded agents and their tools.", {200: m.AgentList}),
    Operation(
        "get",
        "/api/runs",
        "The runs the caller may see, newest first.",
        {200: m.RunList},
        params=(
            _query("status", "Comma-separated statuses, e.g. awaiting,running."),
            LIMIT,
            CURSOR,
        ),
    ),
    Operation(
        "post",
        "/api/runs",
        "Start a run (a worker drives it).",
        {202: m.StartedRun},
        body=m.StartRun,
        errors=(400, 401, 403, 422),
    ),
    Operation(
        "get",
        "/api/runs/{run_id}",
        "A run as it stands.",
        {200: m.Run},
        params=(RUN_ID,),
        errors=(401, 404),
    ),
    Operation(
        "get",
        "/api/runs/{run_id}/events",
        "A run's flight recorder (format=jsonl: JSON lines).",
        {200: m.RunEvents},
        params=(RUN_ID, _query("format", "json (default) or jsonl.", enum=["json", "jsonl"])),
        errors=(400, 401, 404),
        extra_content={200: {"application/x-ndjson": {"schema": {"type": "string"}}}},
    ),
    Operation(
        "get",
        "/api/audit",
        "Every run's events as NDJSON, in sequence order, for auditors and operators; "
        'the last line is {"next_after": N}.',
        {200: None},
        params=(
            _query(
                "after", "Only events after this sequence number (default 0).", pattern="^[0-9]+$"
            ),
            _query(
                "limit", "At most this many events, 1 to 1000 (default 100).", pattern="^[0-9]+$"
            ),
        ),
        errors=(400, 401, 403, 503),
        extra_content={200: {"application/x-ndjson": {"schema": {"type": "string"}}}},
    ),
    Operation(
        "post",
        "/api/runs/{run_id}/{action}",
        "Cancel, pause or resume a run (operators, or its requester).",
        {200: m.Run},
        body=m.ControlBody,
        params=(RUN_ID, _path("action", "What to do.", enum=["cancel", "pause", "resume"])),
        errors=(400, 401, 403, 404, 409),
    ),
    Operation(
        "get",
        "/api/runs/{run_id}/grants",
        "The standing grants given in a run.",
        {200: m.RunGrants},
        params=(RUN_ID, GRANT_STATE),
        errors=(400, 401, 404),
    ),
    Operation(
        "get",
        "/api/tickets",
        "The open tickets the caller may see.",
        {200: m.TicketList},
        params=(LIMIT, CURSOR),
    ),
    Operation(
        "post",
        "/api/tickets/{ticket_id}/decision",
        "Decide a ticket: allow (with edits, a grant), deny, answer, resolve.",
        {200: m.Decided},
        body=m.TicketDecision,
        params=(TICKET_ID,),
        errors=(400, 401, 403, 404, 409, 422, 503),
    ),
    Operation(
        "post",
        "/api/decisions",
        "Decide several tickets, each on its own.",
        {200: m.BatchAnswer},
        body=m.BatchBody,
    ),
    Operation(
        "get",
        "/api/grants",
        "The standing grants the caller may see.",
        {200: m.GrantList},
        params=(
            GRANT_STATE,
            _query("run", "Only those given in this run."),
            _query("thread", "Only those given in this thread."),
            LIMIT,
        ),
        errors=(400, 401, 404),
    ),
    Operation(
        "get",
        "/api/grants/{grant_id}",
        "A standing grant.",
        {200: m.Grant},
        params=(GRANT_ID,),
        errors=(401, 404),
    ),
    Operation(
        "post",
        "/api/grants/{grant_id}/revoke",
        "Revoke a standing grant.",
        {200: m.Grant},
        params=(GRANT_ID,),
        errors=(400, 401, 404, 409),
    ),
    Operation(
        "post",
        "/api/approvals",
        "Ask whether an external agent's tool call may run (201; 200 for a replayed key).",
        {201: ApprovalAnswer, 200: ApprovalAnswer},
        body=ApprovalBody,
        params=(
            Param(
                "Idempotency-Key",
                "header",
                {"type": "string", "pattern": "^[\\x21-\\x7e]{1,255}$"},
                "The same key and body answer the same approval; another body is 409.",
            ),
        ),
        errors=(400, 401, 403, 409, 413, 503),
    ),
    Operation(
        "get",
        "/api/approvals",
        "The approvals the caller may see, newest first.",
        {200: ApprovalList},
        params=(
            _query("status", "Only these.", enum=["pending", "allowed", "denied"]),
            _query("agent", "Only this agent's."),
            _query("session_id", "Only this session's."),
            LIMIT,
            CURSOR,
        ),
    ),
    Operation(
        "get",
        "/api/approvals/{approval_id}",
        "An approval; with wait=N, once decided or after N seconds (a long poll).",
        {200: ApprovalAnswer},
        params=(
            APPROVAL_ID,
            Param(
                "wait",
                "query",
                {"type": "number", "minimum": 0, "maximum": 60},
                "Seconds to wait for a decision (at most 60).",
            ),
        ),
        errors=(400, 401, 404),
    ),
    Operation(
        "post",
        "/api/approvals/{approval_id}/outcome",
        "Report what happened when the allowed call ran.",
        {200: ApprovalAnswer},
        body=OutcomeBody,
        params=(APPROVAL_ID,),
        errors=(400, 401, 404, 409),
    ),
    Operation(
        "get",
        OPENAPI_PATH,
        "This document.",
        {200: None},
        public=True,
        errors=(),
    ),
)


class McpRefreshed(BaseModel):
    """``POST /api/mcp/servers/{name}/refresh``: the server listed its tools again."""

    model_config = ConfigDict(extra="forbid")

    server: str = Field(description="The MCP server's name.")
    tools: int = Field(description="How many tools it lists now.")


OPTIONAL_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "post",
        "/api/mcp/servers/{name}/refresh",
        "List an MCP server's tools again, now (operators only; mounted when the agents "
        "file connects MCP servers).",
        {200: McpRefreshed},
        params=(_path("name", "The MCP server's name."),),
        errors=(401, 403, 404, 503),
        error_words={503: "The MCP server did not list its tools in time"},
    ),
)
"""Operations the application serves only when configured; listed when mounted."""

STATUS_WORDS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "Bad request: the body, a header or the query is malformed",
    401: "No valid bearer token",
    403: "Not the caller's to do",
    404: "No such thing, or none the caller may see",
    409: "A conflict with its current state",
    413: "The body is too large",
    422: "Well-formed, but it does not fit",
    503: "The database did not answer (Retry-After)",
}


Mode = Literal["validation", "serialization"]


def _schemas() -> tuple[dict[tuple[type[BaseModel], Mode], dict[str, Any]], dict[str, Any]]:
    models: list[tuple[type[BaseModel], Mode]] = []
    for op in (*OPERATIONS, *OPTIONAL_OPERATIONS):
        if isinstance(op.body, type) and issubclass(op.body, BaseModel):
            models.append((op.body, "validation"))
        for answer in op.answers.values():
            if answer is not None:
                models.append((answer, "serialization"))
    models += [(m.Error, "serialization"), (m.JWKS, "serialization")]
    unique = list(dict.fromkeys(models))
    refs, defs = models_json_schema(unique, ref_template=REF)
    found = {(model, mode): refs[(model, mode)] for model, mode in unique}
    return found, dict(defs.get("$defs", {}))


def _union_schema(body: Any, schemas: dict[str, Any]) -> dict[str, Any]:
    """The schema of a union body (its members added to `schemas`)."""
    found = TypeAdapter(body).json_schema(ref_template=REF, mode="validation")
    schemas.update(found.pop("$defs", {}))
    return found


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


@functools.cache
def openapi_document(optional: frozenset[tuple[str, str]] = frozenset()) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every ``/api`` route (and the JWKS).

    Args:
        optional: The ``(method, path)`` of the `OPTIONAL_OPERATIONS` to list (those the
            application mounts).
    """
    refs, schemas = _schemas()
    paths: dict[str, dict[str, Any]] = {}
    listed = [op for op in OPTIONAL_OPERATIONS if (op.method, op.path) in optional]
    for op in (*OPERATIONS, *listed):
        operation: dict[str, Any] = {
            "summary": op.summary,
            "operationId": _operation_id(op),
            "responses": {},
        }
        if op.public:
            operation["security"] = []
        if op.params:
            operation["parameters"] = [
                {
                    "name": p.name,
                    "in": p.where,
                    "required": p.required,
                    "schema": p.schema,
                    **({"description": p.description} if p.description else {}),
                }
                for p in op.params
            ]
        if op.body is not None:
            if isinstance(op.body, type) and issubclass(op.body, BaseModel):
                body_schema = refs[(op.body, "validation")]
            else:
                body_schema = _union_schema(op.body, schemas)
            operation["requestBody"] = {"required": True, "content": _json(body_schema)}
        for status, answer in sorted(op.answers.items()):
            content = _json(
                refs[(answer, "serialization")] if answer is not None else {"type": "object"}
            )
            content.update(op.extra_content.get(status, {}))
            operation["responses"][str(status)] = {
                "description": STATUS_WORDS[status],
                "content": content,
            }
        for status in op.errors:
            operation["responses"][str(status)] = {
                "description": op.error_words.get(status, STATUS_WORDS[status]),
                "content": _json(refs[(m.Error, "serialization")]),
            }
        paths.setdefault(op.path, {})[op.method] = operation
    paths["/.well-known/jwks.json"] = {
        "get": {
            "summary": "The public keys of decision tokens (a JWK Set).",
            "operationId": "getJwks",
            "security": [],
            "responses": {
                "200": {
                    "description": "OK",
                    "content": _json(refs[(m.JWKS, "serialization")]),
                }
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "signoff JSON API",
            "version": _version(),
            "description": "Runs, tickets, decisions, grants and external approvals. "
            "Every route but this document and the JWKS needs Authorization: Bearer <token>.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation_id(op: Operation) -> str:
    words = [
        part.strip("{}").replace("_", " ").replace(".", " ")
        for part in op.path.removeprefix("/api/").split("/")
    ]
    camel = "".join(word.title().replace(" ", "") for word in words)
    return op.method + camel


def _version() -> str:
    try:
        return metadata.version("signoff")
    except metadata.PackageNotFoundError:
        return "0"


def mounted_optional(app: web.Application) -> frozenset[tuple[str, str]]:
    """The `OPTIONAL_OPERATIONS` `app` mounts, as ``(method, path)``."""
    wanted = {(op.method, op.path) for op in OPTIONAL_OPERATIONS}
    found = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or ""
        if (route.method.lower(), path) in wanted:
            found.add((route.method.lower(), path))
    return frozenset(found)


def add_openapi_route(app: web.Application) -> None:
    """Serve ``GET /api/openapi.json`` (no authentication): the document of the routes
    `app` mounts (its router is frozen once it serves)."""

    async def document(request: web.Request) -> web.StreamResponse:
        return web.json_response(openapi_document(mounted_optional(request.app)))

    app.router.add_get(OPENAPI_PATH, document)
