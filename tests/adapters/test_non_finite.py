"""NaN and Infinity are no numbers: every JSON surface and typed form refuses them.

``wires`` (tests/adapters/conftest.py) denies amounts over 1000; ``nan > 1000`` is false,
so a NaN that got through would pass the rule and the tool would run with it.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime import Allow, InputData, InvalidAnswer, Resolve
from runtime.domain.forms import parse_number, parse_result, parse_typed, read_typed, schema_fields
from runtime.domain.jsontext import NonFiniteNumber, loads_strict, non_finite_path

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"]


async def decide_raw(service: Any, ticket_id: str, raw: str) -> tuple[int, Any]:
    status, body = await service.api(
        "POST", f"/api/tickets/{ticket_id}/decision", data=raw.encode()
    )
    return status, body


async def post(service: Any, path: str, data: Any, status: int) -> str:
    response = await service.client.post(path, data=data, allow_redirects=False)
    text = str(await response.text())
    assert response.status == status, text
    return text


# -- the strict loader -----------------------------------------------------------------


@pytest.mark.parametrize("number", NON_FINITE)
def test_loads_strict_refuses_non_finite_numbers(number: str) -> None:
    with pytest.raises(NonFiniteNumber):
        loads_strict(f'{{"amount": [1, {number}]}}')


def test_loads_strict_reads_ordinary_json() -> None:
    assert loads_strict(b'{"a": 1.5, "b": [1e308, -0.0, "NaN"]}') == {
        "a": 1.5,
        "b": [1e308, -0.0, "NaN"],
    }


def test_non_finite_path_names_where_the_value_sits() -> None:
    assert non_finite_path({"a": [1, {"b": math.nan}]}) == "a/1/b"
    assert non_finite_path(math.inf) == "(root)"
    assert non_finite_path({"a": [1.0, "inf"]}) is None


# -- the JSON API ------------------------------------------------------------------------


@pytest.mark.parametrize("number", NON_FINITE)
async def test_api_refuses_an_edit_with_a_non_finite_amount(service: Any, number: str) -> None:
    parked = await service.park("wires")
    ticket_id = parked.pending[0].ticket_id
    before = await service.snapshot(parked.run_id)

    status, body = await decide_raw(
        service, ticket_id, f'{{"decision": "allow", "args": {{"amount": {number}}}}}'
    )
    assert status == 400, body
    assert body["error"] == "bad_request"
    assert "finite" in body["message"] or "too large" in body["message"]
    assert await service.snapshot(parked.run_id) == before

    status, body = await decide_raw(service, ticket_id, '{"decision": "allow"}')
    assert status == 200, body
    await service.finished(parked.run_id)
    assert service.ledger == [("wire", {"amount": 99.0})]


async def test_api_refuses_non_finite_answers_and_results(service: Any) -> None:
    parked = await service.park("release")
    before = await service.snapshot(parked.run_id)
    status, body = await decide_raw(
        service, parked.pending[0].ticket_id, '{"answer": {"max_minutes": Infinity}}'
    )
    assert status == 400, body
    assert await service.snapshot(parked.run_id) == before

    uncertain = await service.uncertain()
    before = await service.snapshot(uncertain.run_id)
    status, body = await decide_raw(
        service,
        uncertain.pending[0].ticket_id,
        '{"resolution": "result", "result": {"paged": NaN}}',
    )
    assert status == 400, body
    assert await service.snapshot(uncertain.run_id) == before


async def test_api_start_refuses_a_body_with_nan(service: Any) -> None:
    raw = b'{"agent": "wires", "input": "go", "priority": NaN}'
    status, body = await service.api("POST", "/api/runs", data=raw)
    assert status == 400, body
    assert "NaN" in body["message"]
    assert await service.runtime.list_runs() == []


async def test_api_batch_refuses_a_body_with_infinity(service: Any) -> None:
    parked = await service.park("wires")
    before = await service.snapshot(parked.run_id)
    ticket_id = parked.pending[0].ticket_id
    raw = (
        f'{{"decisions": [{{"ticket_id": "{ticket_id}", "decision": "allow", '
        '"args": {"amount": -Infinity}}]}'
    )
    status, body = await service.api("POST", "/api/decisions", data=raw.encode())
    assert status == 400, body
    assert await service.snapshot(parked.run_id) == before


@pytest.mark.parametrize("hours", ["true", "false", '"5"', "[1]", "NaN"])
async def test_api_refuses_a_grant_whose_hours_are_not_a_number(service: Any, hours: str) -> None:
    parked = await service.park("wires")
    ticket_id = parked.pending[0].ticket_id
    before = await service.snapshot(parked.run_id)
    status, body = await decide_raw(
        service,
        ticket_id,
        f'{{"decision": "allow", "grant": {{"scope": "run", "hours": {hours}}}}}',
    )
    assert status == 400, body
    assert body["error"] == "bad_request"
    assert await service.snapshot(parked.run_id) == before
    assert await service.runtime.grants(run_id=parked.run_id) == []

    status, body = await decide_raw(
        service, ticket_id, '{"decision": "allow", "grant": {"scope": "run", "hours": 2}}'
    )
    assert status == 200, body
    assert body["grant"]["expires_at"] is not None


# -- the console ----------------------------------------------------------------------


@pytest.mark.parametrize("number", ["nan", "NaN", "inf", "-Infinity", "1e999"])
async def test_console_edit_refuses_a_non_finite_amount(service: Any, number: str) -> None:
    parked = await service.park("wires")
    ticket_id = parked.pending[0].ticket_id
    csrf = await service.login()
    before = await service.snapshot(parked.run_id)
    html = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "edit", "field.amount": number, "next": "/tickets"},
        status=422,
    )
    assert 'data-field="amount"' in html
    assert "finite number" in html
    assert await service.snapshot(parked.run_id) == before


async def test_console_resolve_refuses_a_non_finite_result(service: Any) -> None:
    parked = await service.uncertain()
    ticket_id = parked.pending[0].ticket_id
    csrf = await service.login()
    before = await service.snapshot(parked.run_id)
    html = await post(
        service,
        f"/tickets/{ticket_id}/decide",
        {"csrf": csrf, "action": "resolve", "result": '{"paged": NaN}'},
        status=422,
    )
    assert 'data-field="result">Numbers must be finite' in html
    assert await service.snapshot(parked.run_id) == before


# -- typed input (every chat and console form) ---------------------------------------------


SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "extra": {"type": "object"}},
    "required": ["amount"],
}


@pytest.mark.parametrize("number", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_typed_numbers_must_be_finite(number: str) -> None:
    with pytest.raises(ValueError, match="finite"):
        parse_number(number)
    data, errors = read_typed(schema_fields(SCHEMA), {"amount": number})
    assert data == {} and "finite" in errors["amount"]


def test_typed_json_must_hold_finite_numbers() -> None:
    extra = next(f for f in schema_fields(SCHEMA) if f.name == "extra")
    with pytest.raises(ValueError, match="finite"):
        parse_typed(extra, '{"limit": Infinity}')
    assert parse_typed(extra, '{"limit": 5}') == {"limit": 5}


def test_a_recorded_result_that_is_not_json_stays_text() -> None:
    assert parse_result("NaN") == "NaN"
    assert parse_result('{"n": 1}') == {"n": 1}


# -- the library ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        Allow(args={"amount": math.nan}),
        Allow(args={"amount": [1.0, math.inf]}),
    ],
)
async def test_the_runtime_refuses_non_finite_edits_from_python(service: Any, answer: Any) -> None:
    parked = await service.park("wires")
    ticket_id = parked.pending[0].ticket_id
    before = await service.snapshot(parked.run_id)
    with pytest.raises(InvalidAnswer, match="finite"):
        await service.runtime.decide(ticket_id, answer, _actor())
    assert await service.snapshot(parked.run_id) == before


async def test_the_runtime_refuses_non_finite_input_and_results_from_python(
    service: Any,
) -> None:
    parked = await service.park("release")
    before = await service.snapshot(parked.run_id)
    answer = InputData(
        data={"previous_version": "1", "strategy": "redeploy_previous", "max_minutes": math.inf}
    )
    with pytest.raises(InvalidAnswer, match="finite"):
        await service.runtime.decide(parked.pending[0].ticket_id, answer, _actor())
    assert await service.snapshot(parked.run_id) == before

    uncertain = await service.uncertain()
    before = await service.snapshot(uncertain.run_id)
    with pytest.raises(InvalidAnswer, match="finite"):
        await service.runtime.decide(
            uncertain.pending[0].ticket_id, Resolve(result=-math.inf), _actor()
        )
    assert await service.snapshot(uncertain.run_id) == before


def _actor() -> Any:
    from runtime import Actor

    return Actor(id="U1", platform="console")


# -- the command line -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "option"), [("approve", "--args"), ("answer", "--data"), ("resolve", "--result")]
)
def test_cli_refuses_non_finite_json(tmp_path: Path, command: str, option: str) -> None:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    db = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "bot", command, "tk_none", option, '{"amount": NaN}'],
        cwd=ROOT,
        env={**env, "SIGNOFF_DATABASE_URL": db},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "NaN is not a JSON number" in done.stderr
