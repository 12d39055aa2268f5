"""Fuzzing the JSON API and the console: no input answers 5xx, and a refusal changes
nothing (the run, its events, its tickets and every tool execution stay as they were)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit import settled

from runtime import RunStatus

FUZZ = settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
DEEP = ("[" * 100_000).encode()

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
_json = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
_decision_keys = st.sampled_from(
    ["decision", "answer", "resolution", "reason", "result", "args", "x"]
)
_decision_values = st.one_of(
    st.sampled_from(["allow", "deny", "result", "retry", "abort", "maybe", ""]), _json
)
_decision_bodies = st.one_of(
    st.dictionaries(_decision_keys, _decision_values, max_size=4).map(
        lambda d: json.dumps(d).encode()
    ),
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.just(DEEP),
    st.just(b'{"answer": ' + b"{" * 5000),
)
_start_bodies = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "agent": st.one_of(st.sampled_from(["bank", "nope", ""]), _json),
            "input": st.one_of(st.text(max_size=20), _json),
            "thread_id": st.one_of(st.text(max_size=20), _json),
        },
    ).map(lambda d: json.dumps(d).encode()),
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.just(DEEP),
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


@FUZZ
@given(body=_decision_bodies, token=st.sampled_from(["tok-u1", "tok-u2", "tok-ops", "nope"]))
async def test_decision_bodies_never_5xx_and_refusals_change_nothing(
    service: Any, body: bytes, token: str
) -> None:
    if not hasattr(service, "fuzz_parked"):
        service.fuzz_parked = await service.park("bank")
    parked = service.fuzz_parked
    await settled(
        service.runtime, service.worker, outbox=False
    )  # an earlier valid decision played out
    before = await service.snapshot(parked.run_id)
    status = await _raw(
        service, "POST", f"/api/tickets/{parked.pending[0].ticket_id}/decision", body, token
    )
    assert status < 500
    if status != 200:
        assert await service.snapshot(parked.run_id) == before
    else:
        # A valid decision; later examples meet a decided ticket and must get 409s.
        assert (await service.runtime.get(parked.run_id)).status is not RunStatus.AWAITING


@FUZZ
@given(body=_start_bodies, token=st.sampled_from(["tok-u1", "tok-u2", "nope"]))
async def test_start_bodies_never_5xx_and_refusals_start_nothing(
    service: Any, body: bytes, token: str
) -> None:
    before = len(await service.runtime.list_runs(limit=500))
    status = await _raw(service, "POST", "/api/runs", body, token)
    assert status < 500
    after = len(await service.runtime.list_runs(limit=500))
    assert after == before + (1 if status == 202 else 0)


@FUZZ
@given(
    path=st.sampled_from(
        ["/api/runs", "/api/runs/{run}", "/api/runs/{run}/events", "/api/tickets", "/api/agents"]
    ),
    query=st.dictionaries(
        st.sampled_from(["status", "limit", "format", "x"]), st.text(max_size=12), max_size=3
    ),
)
async def test_reads_with_any_query_never_5xx(
    service: Any, path: str, query: dict[str, str]
) -> None:
    if not hasattr(service, "fuzz_parked"):
        service.fuzz_parked = await service.park("bank")
    url = path.format(run=service.fuzz_parked.run_id)
    response = await service.client.get(
        url, params=query, headers={"Authorization": "Bearer tok-u1"}
    )
    await response.read()
    assert response.status < 500


@FUZZ
@given(
    form=st.dictionaries(
        st.sampled_from(["action", "reason", "result", "next", "x", *(f"f{n}" for n in range(3))]),
        st.one_of(
            st.sampled_from(["allow", "deny", "input", "resolve", "retry", "abort", "", "/runs"]),
            st.text(max_size=30),
            st.just("[" * 20_000),
        ),
        max_size=5,
    )
)
async def test_console_decision_forms_never_5xx_and_refusals_change_nothing(
    service: Any, form: dict[str, str]
) -> None:
    if not hasattr(service, "fuzz_csrf"):
        service.fuzz_parked = await service.park("bank")
        service.fuzz_csrf = await service.login("tok-u1")
    parked = service.fuzz_parked
    await settled(service.runtime, service.worker, outbox=False)
    before = await service.snapshot(parked.run_id)
    response = await service.client.post(
        f"/tickets/{parked.pending[0].ticket_id}/decide",
        data={**form, "csrf": service.fuzz_csrf},
        allow_redirects=False,
    )
    await response.read()
    assert response.status < 500
    if response.status != 303:
        assert await service.snapshot(parked.run_id) == before


@FUZZ
@given(
    form=st.dictionaries(
        st.sampled_from(["agent", "input", "token", "next", "csrf"]),
        st.one_of(st.sampled_from(["bank", "tok-u1", "/runs", "//evil"]), st.text(max_size=30)),
        max_size=5,
    ),
    path=st.sampled_from(["/start", "/login", "/logout"]),
)
async def test_console_forms_without_the_session_never_5xx(
    service: Any, form: dict[str, str], path: str
) -> None:
    before = await service.runtime.list_runs()
    response = await service.client.post(path, data=form, allow_redirects=False)
    await response.read()
    assert response.status < 500
    assert await service.runtime.list_runs() == before


async def test_deeply_nested_json_is_400_on_every_json_route(service: Any) -> None:
    parked = await service.park("bank")
    before = await service.snapshot(parked.run_id)
    for path in (
        f"/api/tickets/{parked.pending[0].ticket_id}/decision",
        "/api/runs",
        "/api/decisions",
    ):
        response = await service.client.post(
            path,
            data=DEEP,
            headers={"Authorization": "Bearer tok-u1", "Content-Type": "application/json"},
        )
        assert response.status == 400, path
        body = await response.json()
        assert body["error"] == "bad_request"
        assert "nested too deeply" in body["message"]
    assert await service.snapshot(parked.run_id) == before
    assert len(await service.runtime.list_runs()) == 1


# -- approve with edits and batch decisions ------------------------------------------------

_edit_args = st.dictionaries(
    st.sampled_from(["amount", "account", "api_key", "x", ""]),
    st.one_of(st.floats(), st.integers(), st.sampled_from(["200", "••••••", "sk-x"]), _json),
    max_size=3,
)


@FUZZ
@given(args=st.one_of(_edit_args, _json), token=st.sampled_from(["tok-u1", "tok-u2", "tok-ops"]))
async def test_edited_allows_never_5xx_and_refusals_change_nothing(
    service: Any, args: Any, token: str
) -> None:
    if not hasattr(service, "fuzz_parked"):
        service.fuzz_parked = await service.park("bank")
    parked = service.fuzz_parked
    await settled(service.runtime, service.worker, outbox=False)
    before = await service.snapshot(parked.run_id)
    body = json.dumps({"decision": "allow", "args": args}).encode()
    status = await _raw(
        service, "POST", f"/api/tickets/{parked.pending[0].ticket_id}/decision", body, token
    )
    assert status < 500
    if status != 200:
        assert await service.snapshot(parked.run_id) == before
    else:
        service.fuzz_parked = await service.park("bank")  # the next example gets a fresh one


_batch_items = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"ticket_id": st.sampled_from(["{a}", "{b}", "{c}", "tk_nope", ""])},
            optional={
                "decision": st.sampled_from(["allow", "deny", "maybe"]),
                "args": st.one_of(_edit_args, _json),
                "reason": _json,
            },
        ),
        _json,
    ),
    max_size=4,
)


@FUZZ
@given(items=st.one_of(_batch_items, _json), token=st.sampled_from(["tok-u1", "tok-u2", "nope"]))
async def test_batch_bodies_never_5xx_and_refused_items_change_nothing(
    service: Any, items: Any, token: str
) -> None:
    if not hasattr(service, "fuzz_pair"):
        service.fuzz_pair = await service.park("pair", requester="U2")
        service.fuzz_bank = await service.park("bank")
    await settled(service.runtime, service.worker, outbox=False)
    runs = (service.fuzz_pair.run_id, service.fuzz_bank.run_id)
    before = [await service.snapshot(run_id) for run_id in runs]
    ids = {
        "a": service.fuzz_pair.pending[0].ticket_id,
        "b": service.fuzz_pair.pending[1].ticket_id,
        "c": service.fuzz_bank.pending[0].ticket_id,
    }
    text = json.dumps({"decisions": items})
    for key, ticket_id in ids.items():
        text = text.replace("{" + key + "}", ticket_id)
    response = await service.client.post(
        "/api/decisions",
        data=text.encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    body = await response.json()
    assert response.status < 500
    if response.status != 200 or body["applied"] == 0:
        assert [await service.snapshot(run_id) for run_id in runs] == before
    else:
        # Something was decided: the next examples work on fresh runs.
        service.fuzz_pair = await service.park("pair", requester="U2")
        service.fuzz_bank = await service.park("bank")


@FUZZ
@given(
    form=st.dictionaries(
        st.sampled_from(["field.amount", "field.account", "field.api_key", "next", "x"]),
        st.one_of(
            st.sampled_from(["200", "-1", "nan", "1e999", "", "/runs"]), st.text(max_size=20)
        ),
        max_size=4,
    ),
    action=st.sampled_from(["edit", "allow", "", "x"]),
)
async def test_console_edit_forms_never_5xx_and_refusals_change_nothing(
    service: Any, form: dict[str, str], action: str
) -> None:
    if not hasattr(service, "fuzz_csrf"):
        service.fuzz_parked = await service.park("bank")
        service.fuzz_csrf = await service.login("tok-u1")
    parked = service.fuzz_parked
    await settled(service.runtime, service.worker, outbox=False)
    before = await service.snapshot(parked.run_id)
    response = await service.client.post(
        f"/tickets/{parked.pending[0].ticket_id}/decide",
        data={**form, "action": action, "csrf": service.fuzz_csrf},
        allow_redirects=False,
    )
    await response.read()
    assert response.status < 500
    if response.status != 303:
        assert await service.snapshot(parked.run_id) == before
    else:
        service.fuzz_parked = await service.park("bank")


@FUZZ
@given(
    form=st.lists(
        st.tuples(
            st.sampled_from(["ticket", "action", "next", "x"]),
            st.one_of(st.sampled_from(["{a}", "{b}", "allow", "deny", "/tickets"]), st.text()),
        ),
        max_size=6,
    )
)
async def test_console_batch_forms_never_5xx_and_refusals_change_nothing(
    service: Any, form: list[tuple[str, str]]
) -> None:
    if not hasattr(service, "fuzz_csrf"):
        service.fuzz_pair = await service.park("pair", requester="U2")
        service.fuzz_csrf = await service.login("tok-u2")
    await settled(service.runtime, service.worker, outbox=False)
    ids = {
        "{a}": service.fuzz_pair.pending[0].ticket_id,
        "{b}": service.fuzz_pair.pending[1].ticket_id,
    }
    before = await service.snapshot(service.fuzz_pair.run_id)
    data = [(k, ids.get(v, v)) for k, v in form] + [("csrf", service.fuzz_csrf)]
    response = await service.client.post("/tickets/batch", data=data, allow_redirects=False)
    await response.read()
    assert response.status < 500
    if response.status != 303:
        assert await service.snapshot(service.fuzz_pair.run_id) == before
    elif await service.snapshot(service.fuzz_pair.run_id) != before:
        service.fuzz_pair = await service.park("pair", requester="U2")
