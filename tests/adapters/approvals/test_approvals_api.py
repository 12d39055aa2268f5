"""The approvals API over HTTP, end to end on the application `signoff serve` builds:
requests, rules, decisions through the JSON API, long polls, idempotency, who sees what,
secret masking and decision tokens."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jwt
import pytest
from approvals_harness import REFUND, Approvals, start_approvals

from adapters.web.decision_tokens import args_digest

pytestmark = pytest.mark.asyncio


def verify(token: str, jwks: dict[str, Any]) -> dict[str, Any]:
    """Verify a decision token as a tool server does: the JWKS, the issuer, the expiry."""
    header = jwt.get_unverified_header(token)
    [jwk] = [key for key in jwks["keys"] if key["kid"] == header["kid"]]
    return jwt.decode(token, jwt.PyJWK(jwk), algorithms=["EdDSA"], issuer="signoff")


async def jwks(approvals: Approvals) -> dict[str, Any]:
    response = await approvals.client.get("/.well-known/jwks.json")
    assert response.status == 200
    return dict(await response.json())


async def decide(approvals: Approvals, ticket_id: str, token: str, **body: Any) -> None:
    status, answer = await approvals.call(
        "POST", f"/api/tickets/{ticket_id}/decision", token=token, json=body
    )
    assert status == 200, answer


# -- asking ----------------------------------------------------------------------------


async def test_a_risky_call_waits_on_a_ticket_and_a_decision_reaches_the_caller(
    approvals: Approvals,
) -> None:
    asked = await approvals.ask(session_id="conv-1", description="Customer asked twice")

    assert asked["status"] == "pending"
    assert asked["ticket_id"] and asked["decision_token"] is None
    assert (asked["requester"], asked["requested_by"]) == ("U1", "U1")
    assert asked["arguments"] == REFUND == asked["requested_arguments"]

    await decide(approvals, asked["ticket_id"], "tok-u1", decision="allow")
    status, allowed = await approvals.call("GET", f"/api/approvals/{asked['approval_id']}")

    assert status == 200
    assert (allowed["status"], allowed["basis"], allowed["decided_by"]) == (
        "allowed",
        "decision",
        "U1",
    )
    claims = verify(allowed["decision_token"], await jwks(approvals))
    assert claims["sub"] == asked["approval_id"]
    assert claims["decision"] == "allowed"
    assert claims["args_digest"] == args_digest(REFUND)
    assert claims["ticket_id"] == asked["ticket_id"]
    assert claims["session_id"] == "conv-1"


async def test_rules_answer_at_once(approvals: Approvals) -> None:
    allowed = await approvals.ask(tool="lookup_order", arguments={"order": "A-1"})
    denied = await approvals.ask(tool="drop_table", arguments={"table": "orders"})

    assert (allowed["status"], allowed["basis"], allowed["ticket_id"]) == ("allowed", "rule", None)
    assert (denied["status"], denied["basis"]) == ("denied", "rule")
    keys = await jwks(approvals)
    assert verify(allowed["decision_token"], keys)["decision"] == "allowed"
    assert verify(denied["decision_token"], keys)["decision"] == "denied"


async def test_an_allow_with_edits_gives_the_edited_arguments_and_signs_them(
    approvals: Approvals,
) -> None:
    asked = await approvals.ask()
    await decide(approvals, asked["ticket_id"], "tok-u1", decision="allow", args={"amount": 10.0})

    _, allowed = await approvals.call("GET", f"/api/approvals/{asked['approval_id']}")

    assert allowed["status"] == "allowed"
    assert allowed["arguments"] == {**REFUND, "amount": 10.0}
    assert allowed["requested_arguments"] == REFUND
    claims = verify(allowed["decision_token"], await jwks(approvals))
    assert claims["args_digest"] == args_digest({**REFUND, "amount": 10.0})
    assert claims["args_digest"] != args_digest(REFUND)


async def test_a_denial_carries_its_reason_and_a_denied_token(approvals: Approvals) -> None:
    asked = await approvals.ask()
    await decide(approvals, asked["ticket_id"], "tok-u1", decision="deny", reason="too late")

    _, denied = await approvals.call("GET", f"/api/approvals/{asked['approval_id']}")

    assert (denied["status"], denied["basis"], denied["decided_by"]) == (
        "denied",
        "decision",
        "U1",
    )
    assert "too late" in denied["reason"]
    assert denied["decided_via"] == "api" and denied["decided_at"]
    claims = verify(denied["decision_token"], await jwks(approvals))
    assert (claims["decision"], claims["decided_by"]) == ("denied", "U1")


async def test_every_read_of_a_decision_gives_the_same_token(approvals: Approvals) -> None:
    asked = await approvals.ask()
    await decide(approvals, asked["ticket_id"], "tok-u1", decision="allow")
    path = f"/api/approvals/{asked['approval_id']}"

    _, first = await approvals.call("GET", path)
    _, again = await approvals.call("GET", path, token="tok-ops")
    _, listed = await approvals.call("GET", "/api/approvals?status=allowed")

    assert first["decision_token"] == again["decision_token"]
    assert [a["decision_token"] for a in listed["approvals"]] == [first["decision_token"]]


async def test_a_token_decided_long_ago_has_expired(approvals: Approvals) -> None:
    approvals.clock.advance(-2 * 3600)  # the decision is made two hours back
    asked = await approvals.ask()
    await decide(approvals, asked["ticket_id"], "tok-u1", decision="allow")

    _, allowed = await approvals.call("GET", f"/api/approvals/{asked['approval_id']}")

    with pytest.raises(jwt.ExpiredSignatureError):
        verify(allowed["decision_token"], await jwks(approvals))


async def test_a_grant_for_the_session_allows_its_later_calls(approvals: Approvals) -> None:
    first = await approvals.ask(session_id="conv-7")
    await decide(approvals, first["ticket_id"], "tok-u1", decision="allow", grant={"scope": "run"})

    later = await approvals.ask(session_id="conv-7", arguments={**REFUND, "order": "A-2"})
    elsewhere = await approvals.ask(session_id="conv-8")

    assert (later["status"], later["basis"]) == ("allowed", "grant")
    assert later["grant_id"] and later["ticket_id"] is None
    assert verify(later["decision_token"], await jwks(approvals))["ticket_id"] is None
    assert elsewhere["status"] == "pending"


# -- long polls ------------------------------------------------------------------------


async def test_a_long_poll_returns_as_soon_as_the_decision_lands(approvals: Approvals) -> None:
    asked = await approvals.ask()
    waiting = approvals.points["approval_waiting"]
    poll = asyncio.create_task(
        approvals.call("GET", f"/api/approvals/{asked['approval_id']}?wait=30")
    )
    await asyncio.wait_for(waiting.wait(), timeout=10)  # the poll waits in the server
    assert not poll.done()

    await decide(approvals, asked["ticket_id"], "tok-u1", decision="allow")
    status, answer = await asyncio.wait_for(poll, timeout=10)

    assert status == 200
    assert answer["status"] == "allowed" and answer["decision_token"]


async def test_a_long_poll_on_a_decided_approval_answers_at_once(approvals: Approvals) -> None:
    decided = await approvals.ask(tool="lookup_order", arguments={"order": "A-1"})

    status, answer = await asyncio.wait_for(
        approvals.call("GET", f"/api/approvals/{decided['approval_id']}?wait=60"), timeout=10
    )

    assert (status, answer["status"]) == (200, "allowed")
    assert not approvals.points["approval_waiting"].is_set()


async def test_a_long_poll_that_times_out_answers_pending(approvals: Approvals) -> None:
    asked = await approvals.ask()

    status, answer = await approvals.call("GET", f"/api/approvals/{asked['approval_id']}?wait=0.1")

    assert (status, answer["status"], answer["ticket_id"]) == (200, "pending", asked["ticket_id"])


@pytest.mark.parametrize("wait", ["-1", "61", "60.5", "abc", "1e1", "nan", "inf", " 5"])
async def test_a_bad_wait_is_refused(approvals: Approvals, wait: str) -> None:
    asked = await approvals.ask()

    status, answer = await approvals.call(
        "GET", f"/api/approvals/{asked['approval_id']}?wait={wait}"
    )

    assert (status, answer["error"]) == (400, "bad_request")
    assert "wait" in answer["message"]


# -- idempotency -------------------------------------------------------------------------


async def test_the_same_key_and_body_give_the_same_approval(approvals: Approvals) -> None:
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND, "session_id": "s"}
    key = {"Idempotency-Key": "order-A-1-refund"}
    first_status, first = await approvals.call("POST", "/api/approvals", json=body, headers=key)
    before = await approvals.counts()

    again_status, again = await approvals.call("POST", "/api/approvals", json=body, headers=key)

    assert (first_status, again_status) == (201, 200)
    assert again["approval_id"] == first["approval_id"]
    assert again["ticket_id"] == first["ticket_id"]
    assert await approvals.counts() == before


async def test_the_same_key_with_another_body_is_a_conflict(approvals: Approvals) -> None:
    key = {"Idempotency-Key": "order-A-1-refund"}
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND}
    await approvals.call("POST", "/api/approvals", json=body, headers=key)
    before = await approvals.counts()

    changed = {**body, "arguments": {**REFUND, "amount": 99.0}}
    status, answer = await approvals.call("POST", "/api/approvals", json=changed, headers=key)

    assert (status, answer["error"]) == (409, "idempotency_conflict")
    assert await approvals.counts() == before


async def test_keys_belong_to_their_sender(approvals: Approvals) -> None:
    key = {"Idempotency-Key": "k-1"}
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND}

    _, mine = await approvals.call("POST", "/api/approvals", json=body, headers=key)
    status, theirs = await approvals.call(
        "POST", "/api/approvals", token="tok-u2", json=body, headers=key
    )

    assert status == 201 and theirs["approval_id"] != mine["approval_id"]


@pytest.mark.parametrize("key", ["", " ", "x" * 256, "naïve", "tab\there"])
async def test_a_malformed_key_is_refused(approvals: Approvals, key: str) -> None:
    before = await approvals.counts()
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND}

    status, answer = await approvals.call(
        "POST", "/api/approvals", json=body, headers={"Idempotency-Key": key}
    )

    assert (status, answer["error"]) == (400, "bad_request")
    assert await approvals.counts() == before


# -- who sees what -----------------------------------------------------------------------


async def test_strangers_get_404_and_never_see_it_listed(approvals: Approvals) -> None:
    asked = await approvals.ask()
    path = f"/api/approvals/{asked['approval_id']}"

    assert (await approvals.call("GET", path, token="tok-u3"))[0] == 404
    assert (await approvals.call("GET", path + "?wait=5", token="tok-u3"))[0] == 404
    status, answer = await approvals.call(
        "POST", path + "/outcome", token="tok-u3", json={"status": "succeeded"}
    )
    assert (status, answer["error"]) == (404, "not_found")
    _, listed = await approvals.call("GET", "/api/approvals", token="tok-u3")
    assert listed == {"approvals": [], "next_cursor": None}
    unknown = await approvals.call("GET", "/api/approvals/run_nope", token="tok-u3")
    assert unknown[0] == 404 and unknown[1] == answer | {"message": unknown[1]["message"]}


async def test_deciders_and_operators_see_it(approvals: Approvals) -> None:
    asked = await approvals.ask(agent="deployer", tool="deploy", arguments={"service": "api"})
    path = f"/api/approvals/{asked['approval_id']}"

    for token in ("tok-u1", "tok-u2", "tok-ops"):
        status, seen = await approvals.call("GET", path, token=token)
        assert (status, seen["approval_id"]) == (200, asked["approval_id"]), token
        _, listed = await approvals.call("GET", "/api/approvals?status=pending", token=token)
        assert [a["approval_id"] for a in listed["approvals"]] == [asked["approval_id"]], token


async def test_the_listing_filters_and_pages(approvals: Approvals) -> None:
    made = []
    for session in ("a", "b", "a", "a"):
        made.append((await approvals.ask(session_id=session))["approval_id"])
        approvals.clock.advance(1)  # newest first is by the time they were asked
    lookup = await approvals.ask(tool="lookup_order", arguments={"order": "A-1"}, session_id="a")

    _, allowed = await approvals.call("GET", "/api/approvals?status=allowed")
    assert [a["approval_id"] for a in allowed["approvals"]] == [lookup["approval_id"]]
    seen: list[str] = []
    cursor = ""
    while True:
        status, page = await approvals.call(
            "GET", f"/api/approvals?agent=billing&session_id=a&status=pending&limit=2{cursor}"
        )
        assert status == 200
        seen += [a["approval_id"] for a in page["approvals"]]
        if page["next_cursor"] is None:
            break
        cursor = f"&cursor={page['next_cursor']}"
    assert seen == [made[3], made[2], made[0]]


@pytest.mark.parametrize(
    "query",
    ["status=open", "limit=0", "limit=501", "limit=x", "cursor=bogus", f"agent={'a' * 201}"],
)
async def test_a_bad_listing_query_is_refused(approvals: Approvals, query: str) -> None:
    status, answer = await approvals.call("GET", f"/api/approvals?{query}")

    assert (status, answer["error"]) == (400, "bad_request")


async def test_without_a_token_nothing_is_answered(approvals: Approvals) -> None:
    for method, path in (
        ("POST", "/api/approvals"),
        ("GET", "/api/approvals"),
        ("GET", "/api/approvals/run_x"),
    ):
        status, answer = await approvals.call(method, path, token=None)
        assert (status, answer["error"]) == (401, "unauthenticated")
        status, _ = await approvals.call(method, path, token="not-a-token")
        assert status == 401


# -- on behalf of ------------------------------------------------------------------------


async def test_a_token_may_ask_on_behalf_of_the_users_it_lists(approvals: Approvals) -> None:
    asked = await approvals.ask(token="tok-bot", on_behalf_of="U1")
    path = f"/api/approvals/{asked['approval_id']}"

    assert (asked["requester"], asked["requested_by"]) == ("U1", "svc:bot")
    assert (await approvals.call("GET", path, token="tok-u1"))[0] == 200
    assert (await approvals.call("GET", path, token="tok-bot"))[0] == 200
    assert (await approvals.call("GET", path, token="tok-u2"))[0] == 404
    await decide(approvals, asked["ticket_id"], "tok-u1", decision="allow")
    _, allowed = await approvals.call("GET", path, token="tok-bot")
    assert (allowed["status"], allowed["decided_by"]) == ("allowed", "U1")


@pytest.mark.parametrize(
    ("token", "user"), [("tok-u1", "U2"), ("tok-bot", "W1"), ("tok-bot", "u1")]
)
async def test_asking_for_someone_the_token_may_not_act_for_is_refused(
    approvals: Approvals, token: str, user: str
) -> None:
    before = await approvals.counts()
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND, "on_behalf_of": user}

    status, answer = await approvals.call("POST", "/api/approvals", token=token, json=body)

    assert (status, answer["error"]) == (403, "forbidden")
    assert user in answer["message"]
    assert await approvals.counts() == before


# -- secrets -------------------------------------------------------------------------------


async def test_secret_arguments_are_masked_for_all_but_who_sent_them(
    approvals: Approvals,
) -> None:
    asked = await approvals.ask(token="tok-bot", on_behalf_of="U1", secret=["order"])
    path = f"/api/approvals/{asked['approval_id']}"
    masked = {**REFUND, "card": "***", "order": "***"}

    for token in ("tok-bot", "tok-u1"):
        _, seen = await approvals.call("GET", path, token=token)
        assert seen["arguments"] == REFUND == seen["requested_arguments"], token
    _, operator = await approvals.call("GET", path, token="tok-ops")
    _, listed = await approvals.call("GET", "/api/approvals", token="tok-ops")
    assert operator["arguments"] == masked == operator["requested_arguments"]
    assert listed["approvals"][0]["arguments"] == masked


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({}, "agent"),
        ({"agent": "billing", "tool": "refund"}, "arguments"),
        ({"agent": "billing", "tool": "refund", "arguments": [1]}, "arguments"),
        ({"agent": "billing", "tool": "refund", "arguments": {}, "colour": "red"}, "colour"),
        ({"agent": 7, "tool": "refund", "arguments": {}}, "agent"),
        ({"agent": "billing", "tool": "", "arguments": {}}, "tool"),
        ({"agent": "billing", "tool": "refund", "arguments": {}, "deadline_seconds": 0}, None),
        ({"agent": "billing", "tool": "refund", "arguments": {}, "deadline_seconds": True}, None),
        ({"agent": "billing", "tool": "refund", "arguments": {"n": 2**53}}, "arguments"),
        ({"agent": "billing", "tool": "refund", "arguments": {}, "approvers": []}, None),
        ({"agent": "billing", "tool": "refund", "arguments": {}, "secret": "card"}, "secret"),
    ],
)
async def test_a_malformed_request_is_refused_and_changes_nothing(
    approvals: Approvals, body: dict[str, Any], path: str | None
) -> None:
    before = await approvals.counts()

    status, answer = await approvals.call("POST", "/api/approvals", json=body)

    assert (status, answer["error"]) == (400, "invalid_approval"), answer
    if path is not None:
        assert path in [problem["path"] for problem in answer["errors"]], answer
    assert await approvals.counts() == before


async def test_an_unknown_field_is_named_with_the_known_ones(approvals: Approvals) -> None:
    body = {"agent": "billing", "tool": "refund", "arguments": {}, "args": {}}

    _, answer = await approvals.call("POST", "/api/approvals", json=body)

    assert (
        "args: unknown field (known: agent, tool, arguments, description, schema"
        in (answer["message"])
    )


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"{", "bad_request"),
        (b"[]", "bad_request"),
        (b'{"agent": NaN}', "bad_request"),
        (b'{"a":' * 40 + b"1" + b"}" * 40, "bad_request"),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_refused(
    approvals: Approvals, data: bytes, error: str
) -> None:
    before = await approvals.counts()

    status, answer = await approvals.call("POST", "/api/approvals", data=data)

    assert (status, answer["error"]) == (400, error)
    assert await approvals.counts() == before


async def test_a_huge_body_is_refused_with_413(approvals: Approvals) -> None:
    before = await approvals.counts()
    body = {"agent": "billing", "tool": "refund", "arguments": {"blob": "x" * 300_000}}

    status, answer = await approvals.call("POST", "/api/approvals", json=body)

    assert status == 413, answer
    assert await approvals.counts() == before


async def test_a_schema_the_arguments_fail_is_refused(approvals: Approvals) -> None:
    before = await approvals.counts()
    schema = {"type": "object", "properties": {"amount": {"type": "number", "maximum": 10}}}
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND, "schema": schema}

    status, answer = await approvals.call("POST", "/api/approvals", json=body)

    assert (status, answer["error"]) == (400, "invalid_approval")
    assert await approvals.counts() == before


async def test_overrides_the_agent_does_not_allow_are_refused(approvals: Approvals) -> None:
    before = await approvals.counts()
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND, "approvers": ["U3"]}

    status, answer = await approvals.call("POST", "/api/approvals", json=body)

    assert (status, answer["error"]) == (403, "approval_refused")
    assert await approvals.counts() == before


async def test_an_undeclared_agent_asks_by_default(approvals: Approvals) -> None:
    asked = await approvals.ask(agent="stranger", tool="anything")

    assert (asked["status"], asked["agent"]) == ("pending", "stranger")


async def test_an_undeclared_agent_is_refused_where_configuration_says_so(
    tmp_path: Path,
) -> None:
    async with start_approvals(tmp_path, external_agents="declared") as approvals:
        before = await approvals.counts()
        body = {"agent": "stranger", "tool": "refund", "arguments": REFUND}

        status, answer = await approvals.call("POST", "/api/approvals", json=body)

        assert (status, answer["error"]) == (403, "approval_refused")
        assert await approvals.counts() == before
        assert (await approvals.ask())["status"] == "pending"


async def test_a_callback_url_without_callbacks_configured_is_refused(
    approvals: Approvals,
) -> None:
    before = await approvals.counts()
    body = {"agent": "billing", "tool": "refund", "arguments": REFUND}
    body["callback_url"] = "https://hooks.example.com/decided"

    status, answer = await approvals.call("POST", "/api/approvals", json=body)

    assert (status, answer["error"]) == (400, "invalid_approval")
    assert await approvals.counts() == before


async def test_overrides_apply_where_the_agent_allows_them(approvals: Approvals) -> None:
    asked = await approvals.ask(
        agent="deployer",
        tool="deploy",
        arguments={"service": "api"},
        approvers=["U3"],
        deadline_seconds=60,
    )
    path = f"/api/approvals/{asked['approval_id']}"

    assert asked["deadline"] is not None
    assert (await approvals.call("GET", path, token="tok-u3"))[0] == 200
    approvals.clock.advance(120)
    await approvals.runtime.expire_overdue()
    _, expired = await approvals.call("GET", path)
    assert (expired["status"], expired["basis"]) == ("denied", "expiry")
