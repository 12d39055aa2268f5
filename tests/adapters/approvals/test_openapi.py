"""The OpenAPI document of the JSON API: it is valid OpenAPI 3.1, it lists exactly the
``/api`` routes the application serves, and real answers validate against its schemas."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from approvals_harness import REFUND, Approvals
from openapi_spec_validator import validate

from adapters.web.openapi import openapi_document

METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


async def document(approvals: Approvals) -> dict[str, Any]:
    response = await approvals.client.get("/api/openapi.json")  # no token
    assert response.status == 200
    return dict(await response.json())


def check(doc: dict[str, Any], path: str, method: str, status: int, body: Any) -> None:
    """Validate `body` against the document's schema of that answer."""
    answer = doc["paths"][path][method]["responses"][str(status)]
    schema = answer["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator({**schema, "components": doc["components"]})
    errors = sorted(validator.iter_errors(body), key=str)
    assert not errors, f"{method} {path} {status}: {errors[0].message} at {list(errors[0].path)}"


async def test_the_document_is_valid_openapi_3_1(approvals: Approvals) -> None:
    served = await document(approvals)

    validate(served)
    assert served == openapi_document()
    assert served["openapi"] == "3.1.0"


async def test_it_lists_exactly_the_api_routes_the_app_serves(approvals: Approvals) -> None:
    served = set()
    for route in approvals.client.app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or ""
        if route.method in METHODS and (path.startswith("/api/") or path.startswith("/.well")):
            served.add((route.method.lower(), path))
    doc = await document(approvals)
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}

    assert served == documented


async def test_the_public_routes_need_no_token(approvals: Approvals) -> None:
    doc = await document(approvals)
    public = {
        (method, path)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if op.get("security") == []
    }

    assert public == {("get", "/api/openapi.json"), ("get", "/.well-known/jwks.json")}
    response = await approvals.client.get("/.well-known/jwks.json")
    check(doc, "/.well-known/jwks.json", "get", 200, await response.json())


async def test_approvals_answers_fit_the_document(approvals: Approvals) -> None:
    doc = await document(approvals)
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND, "session_id": "s-1"}
    key = {"Idempotency-Key": "fit-1"}

    status, asked = await approvals.call("POST", "/api/approvals", json=body, headers=key)
    check(doc, "/api/approvals", "post", status, asked)
    status, replayed = await approvals.call("POST", "/api/approvals", json=body, headers=key)
    check(doc, "/api/approvals", "post", status, replayed)
    status, refused = await approvals.call("POST", "/api/approvals", json={"agent": 1})
    check(doc, "/api/approvals", "post", status, refused)
    await approvals.call(
        "POST", f"/api/tickets/{asked['ticket_id']}/decision", json={"decision": "allow"}
    )
    path = "/api/approvals/{approval_id}"
    status, allowed = await approvals.call("GET", f"/api/approvals/{asked['approval_id']}?wait=1")
    check(doc, path, "get", status, allowed)
    assert allowed["decision_token"]
    status, missing = await approvals.call("GET", "/api/approvals/run_nope")
    check(doc, path, "get", status, missing)
    status, listed = await approvals.call("GET", "/api/approvals?limit=1")
    check(doc, "/api/approvals", "get", status, listed)
    status, reported = await approvals.call(
        "POST",
        f"/api/approvals/{asked['approval_id']}/outcome",
        json={"status": "succeeded", "summary": "refunded"},
    )
    check(doc, "/api/approvals/{approval_id}/outcome", "post", status, reported)
    assert reported["outcome"]["status"] == "succeeded"


async def test_run_ticket_and_grant_answers_fit_the_document(approvals: Approvals) -> None:
    doc = await document(approvals)

    status, agents = await approvals.call("GET", "/api/agents")
    check(doc, "/api/agents", "get", status, agents)
    status, started = await approvals.call(
        "POST", "/api/runs", json={"agent": "helper", "input": "note it"}
    )
    check(doc, "/api/runs", "post", status, started)
    approvals.worker.wake()
    asked = await approvals.ask(session_id="s-2")
    status, tickets = await approvals.call("GET", "/api/tickets")
    check(doc, "/api/tickets", "get", status, tickets)
    status, decided = await approvals.call(
        "POST",
        f"/api/tickets/{asked['ticket_id']}/decision",
        json={"decision": "allow", "grant": {"scope": "run", "hours": 1}},
    )
    check(doc, "/api/tickets/{ticket_id}/decision", "post", status, decided)
    run_id = asked["approval_id"]
    for path, template in (
        (f"/api/runs/{run_id}", "/api/runs/{run_id}"),
        (f"/api/runs/{run_id}/events", "/api/runs/{run_id}/events"),
        (f"/api/runs/{run_id}/grants", "/api/runs/{run_id}/grants"),
        ("/api/runs?limit=5", "/api/runs"),
        ("/api/grants", "/api/grants"),
        (f"/api/grants/{decided['grant']['grant_id']}", "/api/grants/{grant_id}"),
    ):
        status, answer = await approvals.call("GET", path)
        check(doc, template, "get", status, answer)
    status, revoked = await approvals.call(
        "POST", f"/api/grants/{decided['grant']['grant_id']}/revoke"
    )
    check(doc, "/api/grants/{grant_id}/revoke", "post", status, revoked)
    status, again = await approvals.call(
        "POST", f"/api/grants/{decided['grant']['grant_id']}/revoke"
    )
    check(doc, "/api/grants/{grant_id}/revoke", "post", status, again)
    assert status == 409


async def test_batch_and_control_answers_fit_the_document(approvals: Approvals) -> None:
    doc = await document(approvals)
    first, second = await approvals.ask(), await approvals.ask()
    batch = {
        "decisions": [
            {"ticket_id": first["ticket_id"], "decision": "deny", "reason": "no"},
            {"ticket_id": second["ticket_id"], "decision": "maybe"},
            {"decision": "allow"},
            {"ticket_id": "tk_nope", "decision": "allow"},
        ]
    }

    status, answer = await approvals.call("POST", "/api/decisions", json=batch)
    check(doc, "/api/decisions", "post", status, answer)
    assert answer["applied"] == 1
    status, cancelled = await approvals.call(
        "POST", f"/api/runs/{second['approval_id']}/cancel", json={"reason": "done"}
    )
    check(doc, "/api/runs/{run_id}/{action}", "post", status, cancelled)
    status, refused = await approvals.call(
        "POST", f"/api/runs/{second['approval_id']}/pause", token="tok-u2"
    )
    check(doc, "/api/runs/{run_id}/{action}", "post", status, refused)
    assert status == 404


@pytest.mark.parametrize(
    "name", ["ApprovalBody", "ApprovalAnswer", "OutcomeBody", "Run", "Pending", "Error"]
)
def test_the_main_bodies_are_named_schemas(name: str) -> None:
    assert name in openapi_document()["components"]["schemas"]
