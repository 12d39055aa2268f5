"""Fuzzing ``POST /mcp/<agent>``: random JSON-RPC shapes, headers and bodies never get a
5xx; malformed input gets a 4xx or a JSON-RPC error; and nothing malformed or
unauthenticated creates a run, a ticket, a card or a call to the MCP server."""

from __future__ import annotations

import json
import re
import string
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gatewaybed import CALLER, STRANGER, ServedGateway, serve_gateway
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcpbed import calls
from testkit import query

pytestmark = pytest.mark.timeout(300)

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# No argument named like a real parameter of an asking or allowed tool, so no generated
# call fits a tool's input schema: every ``tools/call`` here is malformed.
_key = st.text(max_size=8).filter(lambda k: k not in ("service", "environment", "branch"))
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_key, children, max_size=3),
    max_leaves=12,
)
_methods = st.sampled_from(
    [
        "tools/call",
        "tools/list",
        "initialize",
        "ping",
        "notifications/initialized",
        "resources/list",
        "prompts/get",
        "",
    ]
) | st.text(max_size=16)
_params = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(["deploy", "lookup", "merge", "nope", ""]) | _json,
            "arguments": _json,
            "_meta": _json,
            "protocolVersion": st.sampled_from(["2025-06-18", "2026-07-28", "1"]) | _json,
            "capabilities": _json,
            "clientInfo": _json,
        },
    ),
    _json,
)
_message = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", ""]) | _json,
        "id": st.integers() | st.text(max_size=8) | _json,
        "method": _methods | _json,
        "params": _params,
    },
)
DEEP = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + b"[" * 50_000
_bodies = st.one_of(
    _message.map(lambda m: json.dumps(m).encode()),
    st.lists(_message, max_size=3).map(lambda m: json.dumps(m).encode()),
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.just(DEEP),
    st.just(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "deploy"'),
)
_header_text = st.text(
    alphabet=string.ascii_letters + string.digits + " -_./:;=,", max_size=40
).map(str.strip)
_headers = st.fixed_dictionaries(
    {},
    optional={
        "Accept": st.sampled_from(
            ["application/json, text/event-stream", "application/json", "text/event-stream", "*/*"]
        )
        | _header_text,
        "Content-Type": st.sampled_from(["application/json", "text/plain", ""]) | _header_text,
        "Mcp-Session-Id": _header_text,
        "Mcp-Protocol-Version": st.sampled_from(["2025-06-18", "2026-07-28"]) | _header_text,
        "Signoff-Session": _header_text,
    },
)
_tokens = st.sampled_from([CALLER, STRANGER, "not-a-token", None])


@pytest.fixture
async def served(tmp_path: Path, state: Path) -> AsyncIterator[ServedGateway]:
    async with serve_gateway(tmp_path, state, approver="U-approver") as found:
        yield found


def _created(served: ServedGateway) -> tuple[Any, ...]:
    """What a request may not have created: runs, tickets, notifications, events."""
    return tuple(
        query(served.database, f"SELECT count(*) FROM {table}")[0][0]
        for table in ("runs", "tickets", "outbox", "events")
    )


def _json_rpc_answers(body: bytes, content_type: str) -> list[Any]:
    """The JSON-RPC messages of a 2xx answer (plain JSON or server-sent events)."""
    if not body.strip():
        return []
    if content_type.startswith("text/event-stream"):
        # SSE ends lines with CR, LF or CRLF only (str.splitlines would also split at
        # U+2028 and the like, which a JSON string may hold as they are).
        lines = re.split(r"\r\n|\r|\n", body.decode())
        return [json.loads(line[5:]) for line in lines if line.startswith("data:") and line[5:]]
    found = json.loads(body)
    return found if isinstance(found, list) else [found]


@FUZZ
@given(body=_bodies, headers=_headers, token=_tokens)
async def test_no_input_gets_a_5xx_and_nothing_malformed_creates_anything(
    served: ServedGateway, state: Path, body: bytes, headers: dict[str, str], token: str | None
) -> None:
    before = _created(served)
    sent = {k: v for k, v in headers.items()}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with served.http.post(
        served.mcp_url, data=body, headers=sent, timeout=aiohttp.ClientTimeout(total=20)
    ) as answer:
        status = answer.status
        content_type = answer.headers.get("Content-Type", "")
        received = await answer.read()

    assert status < 500, (status, body[:80], received[:200])
    if token in (None, "not-a-token"):
        assert status == 401
    elif 200 <= status < 300:
        for message in _json_rpc_answers(received, content_type):
            assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
            if "result" in message and isinstance(message["result"], dict):
                # A tool call answered with a result can only be a refusal.
                if "content" in message["result"]:
                    assert message["result"].get("isError") is True, message
            else:
                assert "error" in message or "result" in message or "method" in message
    else:
        assert 400 <= status < 500
    assert _created(served) == before, body[:120]
    assert calls(state) == []


# Calls near a tool's schema that still do not fit it (a missing, mistyped or out-of-range
# parameter): each paired with its tool, since what misses one tool may fit another
# (``{"service": "api"}`` is a fine ``lookup``).
_near_misses = st.sampled_from(
    [
        ("deploy", {"service": "api"}),
        ("deploy", {"environment": "production"}),
        ("deploy", {"service": 1, "environment": "production"}),
        ("deploy", {"service": "api", "environment": "moon"}),
        ("deploy", {"service": None, "environment": "staging"}),
        ("deploy", {"service": ["api"], "environment": "staging"}),
        ("lookup", {"service": 1}),
        ("lookup", {"service": None}),
        ("lookup", {"service": ["api"]}),
        ("lookup", {"service": {"name": "api"}}),
        ("lookup", {"environment": "production"}),
        ("merge", {"branch": "main"}),
        ("merge", {"branch": 1, "token": "t"}),
        ("nope", {"service": "api"}),
        ("", {"service": "api"}),
    ]
)
# Not "fail" or "hang": they take no parameters, and their schemas let extra arguments
# through, so any call of them is well formed and really runs. Arbitrary arguments never
# name a parameter (`_key`), so they leave a required one out of every tool listed here.
_named = st.sampled_from(["deploy", "lookup", "merge", "nope", ""])
_meta = st.dictionaries(st.text(max_size=12), _json, max_size=2)
_call_params = st.one_of(
    st.tuples(_near_misses, st.none() | _meta).map(
        lambda drawn: (
            {"name": drawn[0][0], "arguments": drawn[0][1]}
            | ({"_meta": drawn[1]} if drawn[1] is not None else {})
        )
    ),
    st.fixed_dictionaries(
        {"name": _named},
        optional={"arguments": st.dictionaries(_key, _json, max_size=4), "_meta": _meta},
    ),
)
_calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "id": st.integers(min_value=2, max_value=10**6),
        "method": st.sampled_from(["tools/call"] * 4 + ["tools/list", "ping"]) | _methods,
        "params": _call_params | _call_params | _params,
    },
)


@pytest.fixture
async def mcp_session(served: ServedGateway) -> dict[str, str]:
    """The headers of an initialized MCP session of the caller (the handshake done raw)."""
    headers = {
        "Authorization": f"Bearer {CALLER}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"},
        },
    }
    async with served.http.post(served.mcp_url, json=hello, headers=headers) as answer:
        assert answer.status == 200, await answer.text()
        await answer.read()
        session = answer.headers["Mcp-Session-Id"]
    headers.update({"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-06-18"})
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with served.http.post(served.mcp_url, json=ready, headers=headers) as answer:
        assert answer.status == 202, await answer.text()
    return headers


@FUZZ
@given(
    message=_calls | _calls | _calls | st.lists(_calls, min_size=1, max_size=3),
    session=_header_text,
)
async def test_malformed_calls_in_a_session_are_refused_and_create_nothing(
    served: ServedGateway,
    state: Path,
    mcp_session: dict[str, str],
    message: Any,
    session: str,
) -> None:
    before = _created(served)
    headers = {**mcp_session, "Signoff-Session": session} if session else mcp_session
    async with served.http.post(
        served.mcp_url,
        data=json.dumps(message).encode(),
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=20),
    ) as answer:
        status = answer.status
        content_type = answer.headers.get("Content-Type", "")
        received = await answer.read()

    assert status < 500, (status, message, received[:200])
    if 200 <= status < 300:
        for reply in _json_rpc_answers(received, content_type):
            assert isinstance(reply, dict) and reply.get("jsonrpc") == "2.0", reply
            result = reply.get("result")
            if isinstance(result, dict) and "content" in result:
                assert result.get("isError") is True, reply  # a call can only be refused
            else:
                assert "error" in reply or "result" in reply, reply
    else:
        assert 400 <= status < 500
    assert _created(served) == before, message
    assert calls(state) == []
