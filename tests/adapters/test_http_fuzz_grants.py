"""Fuzzing the standing-grant routes of the JSON API and the console: no input answers
5xx, and a refusal changes nothing (no grant given or revoked, the run as it was)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_grants_web import shop_agent
from test_http_fuzz import DEEP
from testkit import settled

from runtime import RunResult, RunStatus

FUZZ = settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
TOKENS = st.sampled_from(["tok-u1", "tok-u2", "tok-u3", "tok-ops", "nope"])

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
_json = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
_numbers = st.one_of(
    st.floats(), st.integers(min_value=-10, max_value=10_000), st.sampled_from([0.5, 1, 720, 721])
)
_constraints = st.one_of(
    st.sampled_from(["same", "any", ""]),
    st.dictionaries(
        st.sampled_from(["order", "amount", "api_key", "nope"]),
        st.one_of(
            st.dictionaries(st.sampled_from(["eq", "max", "min", "in", "x"]), _json, max_size=2),
            _json,
        ),
        max_size=2,
    ),
    _json,
)
_grants = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "scope": st.one_of(st.sampled_from(["run", "thread", "forever", ""]), _json),
            "hours": st.one_of(_numbers, _json),
            "args": _constraints,
            "x": _json,
        },
    ),
    _json,
)
_decision_bodies = st.one_of(
    st.fixed_dictionaries(
        {
            "decision": st.sampled_from(["allow", "allow", "deny", "maybe"]),
            "grant": _grants,
        },
        optional={"reason": _json},
    ).map(lambda d: json.dumps(d).encode()),
    st.just(b'{"decision": "allow", "grant": ' + b"{" * 5000),
)
_revoke_bodies = st.one_of(
    _json.map(lambda v: json.dumps(v).encode()), st.binary(max_size=32), st.just(DEEP)
)
_queries = st.dictionaries(
    st.sampled_from(["state", "limit", "run", "thread", "x"]),
    st.one_of(st.sampled_from(["active", "all", "", "0", "-1", "99999"]), st.text(max_size=12)),
    max_size=4,
)


async def _raw(service: Any, method: str, path: str, body: bytes, token: str) -> int:
    response = await service.client.request(
        method,
        path,
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    await response.read()
    return response.status


async def _grants_shown(service: Any) -> list[Any]:
    return list(await service.runtime.grants(active=False, limit=1000))


async def _parked(service: Any) -> RunResult:
    """A `shop` run of U1 waiting on its first refund (a new one once it was decided)."""
    if "shop" not in service.runtime.agents:
        service.runtime.register(shop_agent(service.ledger))
    parked: RunResult | None = getattr(service, "fuzz_shop", None)
    if parked is None or (await service.runtime.get(parked.run_id)).status is not (
        RunStatus.AWAITING
    ):
        parked = await service.park("shop")
        service.fuzz_shop = parked
    return parked


async def _active_grant(service: Any) -> str:
    """An active run grant given in a run of U1 (a new one once it was revoked)."""
    found = await service.runtime.grants()
    if found:
        return str(found[0].grant_id)
    parked = await _parked(service)
    status, body = await service.api(
        "POST",
        f"/api/tickets/{parked.pending[0].ticket_id}/decision",
        json={"decision": "allow", "grant": {"scope": "run"}},
    )
    assert status == 200, body
    await settled(service.runtime, service.worker, outbox=False)
    return str(body["grant"]["grant_id"])


@FUZZ
@given(body=_decision_bodies, token=TOKENS)
async def test_allows_with_any_grant_never_5xx_and_refusals_grant_nothing(
    service: Any, body: bytes, token: str
) -> None:
    parked = await _parked(service)
    await settled(service.runtime, service.worker, outbox=False)
    before = await service.snapshot(parked.run_id)
    grants_before = await _grants_shown(service)
    status = await _raw(
        service, "POST", f"/api/tickets/{parked.pending[0].ticket_id}/decision", body, token
    )
    assert status < 500
    if status != 200:
        assert await service.snapshot(parked.run_id) == before
        assert await _grants_shown(service) == grants_before
    else:
        after = await _grants_shown(service)
        assert len(after) - len(grants_before) in (0, 1)  # a deny or plain allow: none


@FUZZ
@given(
    body=_revoke_bodies, token=TOKENS, which=st.sampled_from(["real", "gr_nope", "%00", "x" * 300])
)
async def test_revokes_never_5xx_and_refusals_revoke_nothing(
    service: Any, body: bytes, token: str, which: str
) -> None:
    grant_id = await _active_grant(service)
    target = grant_id if which == "real" else which
    before = await _grants_shown(service)
    status = await _raw(service, "POST", f"/api/grants/{target}/revoke", body, token)
    assert status < 500
    after = await _grants_shown(service)
    if status == 200:
        assert which == "real" and token in ("tok-u1", "tok-ops")  # the requester, operators
        assert [g.state for g in after if g.grant_id == grant_id] == ["revoked"]
    else:
        assert after == before


@FUZZ
@given(
    path=st.sampled_from(
        ["/api/grants", "/api/grants/{grant}", "/api/grants/gr_nope", "/api/runs/{run}/grants"]
    ),
    query=_queries,
    token=TOKENS,
)
async def test_grant_reads_with_any_query_never_5xx(
    service: Any, path: str, query: dict[str, str], token: str
) -> None:
    grant_id = await _active_grant(service)
    parked = await _parked(service)
    url = path.format(grant=grant_id, run=parked.run_id)
    response = await service.client.get(
        url, params=query, headers={"Authorization": f"Bearer {token}"}
    )
    await response.read()
    assert response.status < 500


@FUZZ
@given(
    form=st.dictionaries(
        st.sampled_from(["action", "grant", "hours", "same_args", "reason", "next", "x"]),
        st.one_of(
            st.sampled_from(["allow", "deny", "run", "thread", "on", "8", "0", "721", "nan", ""]),
            st.text(max_size=20),
        ),
        max_size=5,
    )
)
async def test_console_grant_forms_never_5xx_and_refusals_change_nothing(
    service: Any, form: dict[str, str]
) -> None:
    if not hasattr(service, "fuzz_grant_csrf"):
        service.fuzz_grant_csrf = await service.login("tok-u1")
    parked = await _parked(service)
    await settled(service.runtime, service.worker, outbox=False)
    before = await service.snapshot(parked.run_id)
    grants_before = await _grants_shown(service)
    response = await service.client.post(
        f"/tickets/{parked.pending[0].ticket_id}/decide",
        data={**form, "csrf": service.fuzz_grant_csrf},
        allow_redirects=False,
    )
    await response.read()
    assert response.status < 500
    if response.status != 303:
        assert await service.snapshot(parked.run_id) == before
        assert await _grants_shown(service) == grants_before


@FUZZ
@given(
    form=st.dictionaries(
        st.sampled_from(["next", "csrf", "x"]),
        st.one_of(st.sampled_from(["/grants", "//evil", ""]), st.text(max_size=20)),
        max_size=3,
    ),
    which=st.sampled_from(["real", "gr_nope"]),
    signed_in=st.booleans(),
)
async def test_console_revokes_never_5xx_and_refusals_revoke_nothing(
    service: Any, form: dict[str, str], which: str, signed_in: bool
) -> None:
    if not hasattr(service, "fuzz_revoke_csrf"):
        service.fuzz_revoke_csrf = await service.login("tok-u2")  # a stranger to U1's grants
    grant_id = await _active_grant(service)
    data = dict(form)
    if signed_in:
        data["csrf"] = service.fuzz_revoke_csrf
    before = await _grants_shown(service)
    response = await service.client.post(
        f"/grants/{grant_id if which == 'real' else which}/revoke",
        data=data,
        allow_redirects=False,
    )
    await response.read()
    assert response.status < 500
    assert await _grants_shown(service) == before  # U2 revokes nothing of U1's
