"""Fuzzing the approvals API: no body, header or query answers 5xx, and a refusal stores
nothing (the runs and tickets are counted before and after)."""

from __future__ import annotations

import json
from typing import Any

from approvals_harness import REFUND, Approvals
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
DEEP = ("[" * 100_000).encode()

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
_json = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
_names = st.one_of(
    st.sampled_from(["billing", "deployer", "stranger", "", " ", "bad name!", "x" * 201]),
    st.text(max_size=12),
    _json,
)
_arguments = st.one_of(
    st.just(REFUND),
    st.dictionaries(st.text(max_size=8), _json, max_size=4),
    st.just({"n": 2**60}),
    _json,
)
_bodies = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "agent": _names,
            "tool": st.one_of(st.sampled_from(["refund", "lookup_x", "drop_x", "deploy"]), _names),
            "arguments": _arguments,
            "description": st.one_of(st.text(max_size=20), _json),
            "schema": st.one_of(
                st.just({"type": "object", "required": ["order"]}),
                st.just({"type": "nonsense"}),
                _json,
            ),
            "session_id": st.one_of(st.text(max_size=20), _json),
            "on_behalf_of": st.one_of(st.sampled_from(["U1", "U2", "W9"]), _json),
            "approvers": st.one_of(st.lists(st.sampled_from(["U2", "U3", ""]), max_size=3), _json),
            "deadline_seconds": st.one_of(
                st.floats(allow_nan=False, allow_infinity=False), st.integers(), _json
            ),
            "secret": st.one_of(st.lists(st.sampled_from(["card", "order"]), max_size=2), _json),
            "callback_url": st.one_of(st.just("https://hooks.example.com/x"), _json),
            "extra": _json,
        },
    ).map(lambda d: json.dumps(d).encode()),
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.just(DEEP),
    st.just(b'{"agent": "billing", "tool": "refund", "arguments": {"x": "\\ud800"}}'),
    st.just(b'{"agent": "billing", "tool": "refund", "arguments": {"a": NaN}}'),
)
_keys = st.one_of(st.none(), st.sampled_from(["k-1", "k-2", ""]), st.text(max_size=300))
_tokens = st.sampled_from(["tok-u1", "tok-u2", "tok-bot", "tok-ops", "nope"])


def _header_safe(text: str) -> bool:
    return all(32 <= ord(c) < 127 or c == "\t" for c in text)


@FUZZ
@given(body=_bodies, key=_keys.filter(lambda k: k is None or _header_safe(k)), token=_tokens)
async def test_approval_requests_never_5xx_and_refusals_store_nothing(
    approvals: Approvals, body: bytes, key: str | None, token: str
) -> None:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    before = await approvals.counts()

    response = await approvals.client.post("/api/approvals", data=body, headers=headers)
    answer = await response.json()

    assert response.status < 500, answer
    if response.status >= 400:
        assert set(answer) >= {"error", "message"}
        assert await approvals.counts() == before
    else:
        assert response.status in (200, 201)
        runs, _tickets = await approvals.counts()
        assert runs == before[0] + (1 if response.status == 201 else 0)


_ids = st.one_of(
    st.sampled_from(["run_x", "", "..", "%00", "run_" + "a" * 300]),
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40),
)
_waits = st.one_of(
    st.none(),
    st.sampled_from(["0", "0.05", "60.1", "-1", "1e3", "nan", "", "99999999999999999999"]),
    st.text(max_size=6),
)


@FUZZ
@given(approval_id=_ids, wait=_waits, token=_tokens, own=st.booleans())
async def test_approval_reads_never_5xx(
    approvals: Approvals, approval_id: str, wait: str | None, token: str, own: bool
) -> None:
    if own:
        if not hasattr(approvals, "fuzz_own"):
            approvals.fuzz_own = (await approvals.ask(tool="lookup_x"))["approval_id"]  # type: ignore[attr-defined]
        approval_id = approvals.fuzz_own  # type: ignore[attr-defined]
    before = await approvals.counts()
    params: dict[str, Any] = {} if wait is None else {"wait": wait}

    response = await approvals.client.get(
        f"/api/approvals/{approval_id}",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
    )
    await response.read()

    assert response.status < 500
    assert response.status in (200, 400, 401, 404, 405), response.status
    assert await approvals.counts() == before


@FUZZ
@given(
    query=st.dictionaries(
        st.sampled_from(["status", "agent", "session_id", "limit", "cursor", "x"]),
        st.text(max_size=30),
        max_size=4,
    ),
    token=_tokens,
)
async def test_approval_listings_never_5xx(
    approvals: Approvals, query: dict[str, str], token: str
) -> None:
    response = await approvals.client.get(
        "/api/approvals", params=query, headers={"Authorization": f"Bearer {token}"}
    )
    answer = await response.json()

    assert response.status in (200, 400, 401), answer
