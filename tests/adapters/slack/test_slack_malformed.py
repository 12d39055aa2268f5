"""Whatever reaches ``POST /slack/events``, nothing answers 5xx and a refusal changes
nothing: the signature is checked on the raw bytes before any parsing (401), a signed body
that is not a Slack payload is 400."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

from fake_slack import SIGNING_SECRET, click_payload, interaction_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slackbed import SlackBed, buttons

from adapters.slack import blocks
from runtime import RunStatus

FORM = "application/x-www-form-urlencoded"
DEEP = "[" * 100_000


def _sign(body: bytes, secret: str = SIGNING_SECRET, stamp: int | None = None) -> str:
    at = int(time.time()) if stamp is None else stamp
    base = f"v0:{at}:".encode() + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


async def _post(
    slack: SlackBed, body: bytes, *, content_type: str = FORM, signed: bool = True
) -> tuple[int, str]:
    stamp = int(time.time())
    headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": str(stamp)}
    if signed:
        headers["X-Slack-Signature"] = _sign(body, stamp=stamp)
    response = await slack.client.post("/slack/events", data=body, headers=headers)
    return response.status, await response.text()


MALFORMED: list[tuple[bytes, str]] = [
    (b"payload=not-json{", FORM),
    (b"payload=" + b"%5B1%2C2%5D", FORM),  # [1,2]
    (b"{", "application/json"),
    (b"[1, 2]", "application/json"),
    (DEEP.encode(), "application/json"),
    (("payload=" + DEEP).encode(), FORM),
    (urlencode({"payload": json.dumps({"type": "block_actions", "actions": []})}).encode(), FORM),
    (urlencode({"payload": json.dumps({"type": "block_actions"})}).encode(), FORM),
    (urlencode({"payload": json.dumps({"type": "view_submission"})}).encode(), FORM),
    (urlencode({"payload": json.dumps({"type": "block_actions", "actions": [1]})}).encode(), FORM),
    (urlencode({"payload": json.dumps({"no": "type"})}).encode(), FORM),
    (urlencode({"payload": json.dumps({"type": "block_actions", "user": "U1"})}).encode(), FORM),
    (json.dumps({"type": "event_callback", "event": "x"}).encode(), "application/json"),
    (json.dumps({"type": "url_verification"}).encode(), "application/json"),
    (b"text=hello&user_id=U1", FORM),  # a form that is no command
    ("&".join(f"f{i}=1" for i in range(200)).encode() + b"&command=%2Fsignoff", FORM),
    (b"", FORM),
]


async def test_unsigned_or_badly_signed_malformed_bodies_are_401(slack: SlackBed) -> None:
    for body, content_type in MALFORMED:
        status, _ = await _post(slack, body, content_type=content_type, signed=False)
        assert status == 401, body[:40]
        stamp = int(time.time())
        response = await slack.client.post(
            "/slack/events",
            data=body,
            headers={
                "Content-Type": content_type,
                "X-Slack-Request-Timestamp": str(stamp),
                "X-Slack-Signature": _sign(body, secret="not-the-secret", stamp=stamp),
            },
        )
        assert response.status == 401, body[:40]
    await slack.settled()
    assert await slack.runtime.list_runs() == []
    assert slack.received() == []


async def test_signed_malformed_bodies_are_400_and_change_nothing(slack: SlackBed) -> None:
    for body, content_type in MALFORMED:
        status, text = await _post(slack, body, content_type=content_type)
        assert status == 400, (body[:40], text)
        assert json.loads(text)["error"] == "malformed_request"
    await slack.settled()
    assert await slack.runtime.list_runs() == []
    assert slack.received() == []
    assert slack.fake.called("chat.postMessage") == []


async def test_a_body_that_is_not_utf8_cannot_be_signed(slack: SlackBed) -> None:
    # Slack signs UTF-8 text; other bytes cannot carry a valid signature.
    for body in (bytes(range(256)), b"\xff\xfe\x00payload"):
        status, _ = await _post(slack, body, content_type="application/octet-stream")
        assert status == 401
    assert await slack.runtime.list_runs() == []


async def test_a_signed_click_still_works_after_the_checks(slack: SlackBed) -> None:
    await slack.command("bank go")
    card = await slack.card("transfer")
    run = await slack.commanded_run()
    await slack.wait_run(run.run_id, lambda r: r.status is RunStatus.AWAITING)
    body = interaction_body(
        click_payload(blocks.ACTION_ALLOW, buttons(card)[blocks.ACTION_ALLOW])
    ).encode()
    status, _ = await _post(slack, body)
    assert status == 200
    assert (await slack.finished(run.run_id)).status is RunStatus.DONE


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["type", "actions", "user", "view", "x"]), children)
    ),
    max_leaves=12,
)
_payload_objects = st.fixed_dictionaries(
    {"type": st.sampled_from(["block_actions", "view_submission", "shortcut", "x"])},
    optional={
        "actions": _json_values,
        "user": _json_values,
        "view": _json_values,
        "channel": _json_values,
        "trigger_id": st.text(max_size=8),
    },
)
_bodies = st.one_of(
    st.binary(max_size=200).map(lambda b: (b, FORM)),
    st.text(max_size=200).map(lambda t: (t.encode(), FORM)),
    _json_values.map(lambda v: (json.dumps(v).encode(), "application/json")),
    _payload_objects.map(lambda p: (urlencode({"payload": json.dumps(p)}).encode(), FORM)),
    _json_values.map(lambda v: (urlencode({"payload": json.dumps(v)}).encode(), FORM)),
)


@settings(
    max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=_bodies, signed=st.booleans())
async def test_fuzzed_bodies_never_5xx_and_change_nothing(
    slack: SlackBed, case: tuple[bytes, str], signed: bool
) -> None:
    body, content_type = case
    status, text = await _post(slack, body, content_type=content_type, signed=signed)
    assert status < 500, (body[:80], text)
    if not signed:
        assert status == 401
    assert await slack.runtime.list_runs() == []
    assert slack.received() == []


_button_payloads = st.fixed_dictionaries(
    {
        "type": st.just("block_actions"),
        "actions": st.lists(
            st.fixed_dictionaries(
                {"action_id": st.sampled_from([*sorted(blocks.ACTIONS), "signoff.x", "other"])},
                optional={"value": _json_values | st.text(max_size=60)},
            ),
            min_size=1,
            max_size=2,
        ),
    },
    optional={
        "user": st.fixed_dictionaries({}, optional={"id": _json_values, "name": _json_values})
        | st.text(max_size=4),
        "trigger_id": _json_values,
        "response_url": _json_values,
        "container": st.fixed_dictionaries({}, optional={"message_ts": _json_values}),
        "message": st.fixed_dictionaries({}, optional={"thread_ts": _json_values}),
    },
)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=_button_payloads)
async def test_fuzzed_signed_button_clicks_never_5xx_and_store_nothing(
    slack: SlackBed, payload: dict[str, object]
) -> None:
    # Signed clicks on signoff's buttons are answered without bolt's dispatch: whatever
    # their values, users or fields, none is a 5xx and none names a ticket that exists.
    body = urlencode({"payload": json.dumps(payload)}).encode()
    status, text = await _post(slack, body)
    assert status < 500, (payload, text)
    await slack.settled()
    assert slack.received() == []
    assert await slack.runtime.list_runs() == []
