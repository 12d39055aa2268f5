"""Webhook-triggered runs against real libraries: `signoff serve`'s process
(`bot.bootstrap.build_service`) listening on 127.0.0.1 over a SQLite `SQLStore`, its
worker and outbox loop running, and a local aiohttp receiver for completion callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import shutil
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from testkit import deliver_item, settled

from adapters.webhook import (
    CALLBACK,
    CallbackNotifier,
    HookConfig,
    add_hook_routes,
    sign,
    verify,
)
from adapters.webhook.callback import callback_payload
from bot.app import hook_configs
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import (
    Agent,
    ConfigurationError,
    MemoryStore,
    RunStatus,
    Runtime,
    ScriptedModel,
    final_reply,
    tool,
    tool_call_reply,
)
from runtime.domain.notifications import RunCallback, read_notification
from runtime.services.delivery import DeliveryError, NullNotifier, RetryPolicy
from runtime.store.records import IdempotencyRecord, OutboxRecord
from runtime.store.sql import SQLStore
from runtime.worker import Worker

SECRET = "whsec-refunds-0123456789"
OTHER_SECRET = "whsec-other-9876543210"
SMALL_SECRET = "whsec-small-5555555555"
BODY = {"order_id": "A-1", "amount": 25}
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
FAST_RETRY = RetryPolicy(max_attempts=5, base_delay=0.05, max_delay=0.2)


# -- helpers (kept in this file: tests/adapters/conftest.py belongs to other suites) ------


def sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def encode(payload: object) -> bytes:
    return json.dumps(payload).encode()


def signed(body: bytes, *, secret: str = SECRET, at: float | None = None) -> dict[str, str]:
    timestamp = str(int(time.time() if at is None else at))
    return {
        "Content-Type": "application/json",
        "X-Signoff-Timestamp": timestamp,
        "X-Signoff-Signature": sign(secret, timestamp, body),
    }


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@dataclass
class Receiver:
    """A local callback endpoint that records requests and can fail the first N."""

    fail_first: int = 0
    fail_status: int = 500
    fail_headers: dict[str, str] = field(default_factory=dict)
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.read()))
        if len(self.requests) <= self.fail_first:
            return web.json_response(
                {"error": "try later"}, status=self.fail_status, headers=self.fail_headers
            )
        return web.json_response({"ok": True})


@dataclass
class Harness:
    """Everything one test talks to."""

    url: str
    http: aiohttp.ClientSession
    store: SQLStore
    runtime: Runtime
    hooks: dict[str, HookConfig]
    callback_hooks: dict[str, HookConfig]
    receiver: Receiver
    changes: list[int]

    async def post(
        self, name: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any], Any]:
        async with self.http.post(f"{self.url}/hooks/{name}", data=body, headers=headers) as r:
            assert r.content_type == "application/json"
            return r.status, await r.json(), r.headers

    async def counts(self) -> dict[str, int]:
        async with self.store.engine.connect() as conn:
            return {
                table: (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
                for table in ("runs", "events", "outbox", "idempotency_keys")
            }

    async def finished(self, run_id: str) -> Any:
        async def done() -> bool:
            return (await self.runtime.get(run_id)).status.finished

        await eventually(done)
        return await self.runtime.get(run_id)

    async def outbox(self, run_id: str, kind: str = "run_callback") -> OutboxRecord:
        async with self.store.transaction() as tx:
            items = [o for o in await tx.outbox_for_run(run_id) if o.kind == kind]
        assert len(items) == 1
        return items[0]


def refunds_agent() -> Agent:
    @tool
    async def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: paid"

    model = ScriptedModel(
        [
            tool_call_reply(("lookup_order", {"order_id": "A-1"})),
            final_reply("Refunded A-1"),
        ]
    )
    return Agent("refunds", "You refund orders.", model, [lookup_order])


@pytest.fixture
def receiver() -> Receiver:
    return Receiver()


class WakeCounting(Worker):
    """The serving worker, counting the wake-ups for ready runs the edges ask for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changes: list[int] = []

    def wake_runs(self) -> None:
        self.changes.append(1)
        super().wake_runs()


@pytest.fixture
async def harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> AsyncIterator[Harness]:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()

    receiver_app = web.Application()
    receiver_app.router.add_post("/callback", receiver.handle)
    receiver_runner = web.AppRunner(receiver_app)
    await receiver_runner.setup()
    receiver_site = web.TCPSite(receiver_runner, "127.0.0.1", 0)
    await receiver_site.start()
    receiver.url = f"http://127.0.0.1:{receiver_runner.addresses[0][1]}/callback"

    template = "Refund order {body[order_id]} for {body[amount]}"
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "hooks-operator-0123456789",
            "cookie_secret": "hooks-cookie-secret-0123456789abcdef",
            "bind_host": "127.0.0.1",
            "port": 0,
            "lease_seconds": 5,
            "poll_seconds": 0.02,
            "hooks": {
                "refunds": {
                    "secret": SECRET,
                    "agent": "refunds",
                    "input_template": template,
                    "callback_url": receiver.url,
                    "callback_hosts": ["127.0.0.1"],
                },
                "quiet": {
                    "secret": OTHER_SECRET,
                    "agent": "refunds",
                    "input_template": template,
                    "approvals": {"platform": "slack", "channel": "C123"},
                    "requester": "U-ops",
                },
                "small": {
                    "secret": SMALL_SECRET,
                    "agent": "refunds",
                    "input_template": "{raw}",
                    "max_body_bytes": 64,
                },
            },
        }
    )
    # The notifier reads its own mapping, so a test can change what delivery sees.
    callback_hooks = hook_configs(settings)
    service = await build_service(
        settings,
        agents=[refunds_agent()],
        store=store,
        # Slack is off: its notifications are marked delivered without a post.
        notifiers={"slack": NullNotifier(), "callback": CallbackNotifier(callback_hooks)},
        outbox_policy=FAST_RETRY,
        worker_type=WakeCounting,
        parts=Parts(deadlines=False, discord=False),
    )
    assert isinstance(service.worker, WakeCounting)
    changes = service.worker.changes
    url = await service.start()
    http = aiohttp.ClientSession()
    try:
        yield Harness(
            url,
            http,
            store,
            service.runtime,
            hook_configs(settings),
            callback_hooks,
            receiver,
            changes,
        )
    finally:
        await service.stop(grace_seconds=5)
        await http.close()
        await receiver_runner.cleanup()
        await store.close()


# -- starting runs --------------------------------------------------------------------------


async def test_valid_request_starts_exactly_one_run_which_finishes(harness: Harness) -> None:
    body = encode(BODY)
    status, answer, headers = await harness.post("refunds", body, signed(body))

    assert status == 202, answer
    # The serving worker has a free place: the start's own commit claimed the run for it.
    assert answer["status"] == "running"
    assert answer["status_url"] == f"/api/runs/{answer['run_id']}"
    assert "Idempotent-Replayed" not in headers
    assert harness.changes == [1]
    assert (await harness.counts())["runs"] == 1

    run = await harness.finished(answer["run_id"])
    assert run.status is RunStatus.DONE
    assert run.text == "Refunded A-1"
    assert run.requester == "hook:refunds"
    events = await harness.runtime.events(run.run_id)
    started = events[0]
    assert started["kind"] == "run_started"
    assert started["data"]["input"] == "Refund order A-1 for 25"
    assert started["data"]["origin"] == {
        "platform": "console",
        "hook": "refunds",
        "callback_url": harness.receiver.url,
    }
    assert (await harness.counts())["runs"] == 1


async def test_hook_routes_approvals_and_requester_from_its_config(harness: Harness) -> None:
    body = encode(BODY)
    status, answer, _ = await harness.post("quiet", body, signed(body, secret=OTHER_SECRET))
    assert status == 202, answer
    run = await harness.finished(answer["run_id"])
    assert run.requester == "U-ops"

    async def delivered() -> bool:
        return (await harness.outbox(run.run_id, "run_finished")).state == "delivered"

    await eventually(delivered)
    item = await harness.outbox(run.run_id, "run_finished")
    # No callback configured: the item goes to the platform notifier, not a receiver.
    assert item.destination == {"platform": "slack", "channel": "C123", "hook": "quiet"}
    assert harness.receiver.requests == []


def _valid(body: bytes) -> dict[str, str]:
    return signed(body)


REFUSALS: list[tuple[str, str, bytes, Callable[[bytes], dict[str, str]], int, str, str]] = [
    # id, hook, body, headers(body), status, error code, words in the message
    ("no-headers", "refunds", encode(BODY), lambda b: {}, 401, "missing_signature", "missing"),
    (
        "no-signature",
        "refunds",
        encode(BODY),
        lambda b: {"X-Signoff-Timestamp": str(int(time.time()))},
        401,
        "missing_signature",
        "X-Signoff-Signature header is missing",
    ),
    (
        "no-timestamp",
        "refunds",
        encode(BODY),
        lambda b: {"X-Signoff-Signature": sign(SECRET, int(time.time()), b)},
        401,
        "missing_signature",
        "X-Signoff-Timestamp header is missing",
    ),
    (
        "garbage-signature",
        "refunds",
        encode(BODY),
        lambda b: {**signed(b), "X-Signoff-Signature": "v1=" + "0" * 64},
        401,
        "bad_signature",
        "does not match",
    ),
    (
        "wrong-secret",
        "refunds",
        encode(BODY),
        lambda b: signed(b, secret=OTHER_SECRET),
        401,
        "bad_signature",
        "does not match",
    ),
    (
        "tampered-body",
        "refunds",
        encode({**BODY, "amount": 2500}),
        lambda b: signed(encode(BODY)),
        401,
        "bad_signature",
        "does not match",
    ),
    (
        "stale",
        "refunds",
        encode(BODY),
        lambda b: signed(b, at=time.time() - 301),
        401,
        "stale_timestamp",
        "s old",
    ),
    (
        "future",
        "refunds",
        encode(BODY),
        lambda b: signed(b, at=time.time() + 360),
        401,
        "stale_timestamp",
        "in the future",
    ),
    ("unknown-hook", "nope", encode(BODY), _valid, 404, "unknown_hook", "no hook named 'nope'"),
    (
        "too-large",
        "small",
        encode({"pad": "x" * 100}),
        _valid,
        413,
        "body_too_large",
        "limit of 64 bytes",
    ),
    ("malformed-json", "refunds", b'{"order_id": ', _valid, 400, "malformed_json", "not valid"),
    ("nan-json", "refunds", b'{"amount": NaN}', _valid, 400, "malformed_json", "NaN"),
    ("huge-number", "refunds", b'{"amount": 1e999}', _valid, 400, "malformed_json", "too large"),
    ("not-utf8", "refunds", b'{"a": "\xff"}', _valid, 400, "malformed_json", "UTF-8"),
    ("array-json", "refunds", b"[1, 2]", _valid, 400, "not_an_object", "not an array"),
    ("string-json", "refunds", b'"hi"', _valid, 400, "not_an_object", "not a string"),
    (
        "template-field-missing",
        "refunds",
        encode({"order_id": "A-1"}),
        _valid,
        422,
        "template_failed",
        "no field 'amount'",
    ),
    (
        "bad-idempotency-key",
        "refunds",
        encode(BODY),
        lambda b: {**signed(b), "Idempotency-Key": "x" * 300},
        400,
        "bad_idempotency_key",
        "Idempotency-Key",
    ),
]


@pytest.mark.parametrize(
    ("hook", "body", "make_headers", "status", "code", "words"),
    [r[1:] for r in REFUSALS],
    ids=[r[0] for r in REFUSALS],
)
async def test_refusals_answer_4xx_and_start_nothing(
    harness: Harness,
    hook: str,
    body: bytes,
    make_headers: Callable[[bytes], dict[str, str]],
    status: int,
    code: str,
    words: str,
) -> None:
    before = await harness.counts()
    got, answer, headers = await harness.post(hook, body, make_headers(body))
    assert got == status, answer
    assert answer["error"] == code
    assert words in answer["message"]
    if status == 401:
        assert headers["WWW-Authenticate"].startswith("Signoff-HMAC-SHA256")
    assert (
        await harness.counts()
        == before
        == {
            "runs": 0,
            "events": 0,
            "outbox": 0,
            "idempotency_keys": 0,
        }
    )
    assert harness.changes == []


async def test_chunked_body_over_the_limit_is_refused_without_reading_it_all(
    harness: Harness,
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b"x" * 1024  # 64 KiB without a Content-Length, to a 64-byte hook

    async with harness.http.post(f"{harness.url}/hooks/small", data=chunks()) as response:
        assert response.status == 413
        assert (await response.json())["error"] == "body_too_large"
    assert (await harness.counts())["runs"] == 0


@pytest.mark.parametrize("path", ["/hooks/", "/hooks/refunds/extra"])
async def test_odd_paths_under_hooks_get_a_json_404(harness: Harness, path: str) -> None:
    body = encode(BODY)
    async with harness.http.post(f"{harness.url}{path}", data=body, headers=signed(body)) as r:
        assert r.status == 404
        assert (await r.json())["error"] == "unknown_hook"
    assert (await harness.counts())["runs"] == 0


async def test_a_failing_on_change_still_answers_202(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    store = SQLStore.sqlite(tmp_path / "signoff.db")
    await store.migrate()
    runtime = Runtime(store, [refunds_agent()])
    hook = HookConfig(name="h", secret=SECRET, agent="refunds", input_template="{raw}")

    def broken() -> None:
        raise RuntimeError("wake-up failed")

    app = web.Application()
    add_hook_routes(app, runtime, {"h": hook}, broken)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    body = encode(BODY)
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"http://127.0.0.1:{runner.addresses[0][1]}/hooks/h",
                data=body,
                headers=signed(body),
            ) as r,
        ):
            assert r.status == 202
            run_id = (await r.json())["run_id"]
        assert (await runtime.get(run_id)).status is RunStatus.QUEUED
    finally:
        await runner.cleanup()
        await store.close()


async def test_other_methods_get_a_json_405(harness: Harness) -> None:
    async with harness.http.get(f"{harness.url}/hooks/refunds") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "POST"
        assert (await response.json())["error"] == "method_not_allowed"


# -- idempotency ----------------------------------------------------------------------------


async def test_idempotent_replay_returns_the_same_run_and_starts_nothing(
    harness: Harness,
) -> None:
    body = encode(BODY)
    key = {"Idempotency-Key": "order-A-1"}
    earlier = signed(body, at=time.time() - 10)
    status, first, headers = await harness.post("refunds", body, {**earlier, **key})
    assert status == 202, first
    assert "Idempotent-Replayed" not in headers
    run = await harness.finished(first["run_id"])

    # The sender retries: signed anew, with the same key.
    status, again, headers = await harness.post("refunds", body, {**signed(body), **key})
    assert status == 202, again
    assert again["run_id"] == first["run_id"]
    assert again["status"] == "done"
    assert again["status_url"] == first["status_url"]
    assert headers["Idempotent-Replayed"] == "true"
    assert harness.changes == [1]
    counts = await harness.counts()
    assert counts["runs"] == 1
    assert counts["idempotency_keys"] == 3  # the key, and both requests' signatures
    assert len(await harness.runtime.events(run.run_id)) == len(
        await harness.runtime.events(first["run_id"])
    )


async def test_same_key_with_another_body_is_a_409(harness: Harness) -> None:
    body = encode(BODY)
    key = {"Idempotency-Key": "order-A-1"}
    status, first, _ = await harness.post("refunds", body, {**signed(body), **key})
    assert status == 202, first
    before = await harness.counts()

    other = encode({**BODY, "amount": 2500})
    status, answer, _ = await harness.post("refunds", other, {**signed(other), **key})
    assert status == 409
    assert answer["error"] == "idempotency_conflict"
    assert "different request body" in answer["message"]
    after = await harness.counts()
    assert after["runs"] == before["runs"] == 1
    assert after["idempotency_keys"] == before["idempotency_keys"] == 2


async def test_the_same_signed_request_without_a_key_starts_one_run(harness: Harness) -> None:
    body = encode(BODY)
    headers = signed(body)
    answers = [await harness.post("refunds", body, headers) for _ in range(3)]
    assert [status for status, _, _ in answers] == [202, 202, 202]
    assert len({answer["run_id"] for _, answer, _ in answers}) == 1
    assert "Idempotent-Replayed" not in answers[0][2]
    assert [h.get("Idempotent-Replayed") for _, _, h in answers[1:]] == ["true", "true"]
    assert harness.changes == [1]
    assert (await harness.counts())["runs"] == 1


async def test_a_replayed_signature_with_a_new_key_is_still_a_replay(harness: Harness) -> None:
    # Idempotency-Key is not signed: an eavesdropper could change it. The signature alone
    # names the request.
    body = encode(BODY)
    headers = signed(body)
    _, first, _ = await harness.post("refunds", body, {**headers, "Idempotency-Key": "k1"})
    replays = await asyncio.gather(
        *(
            harness.post("refunds", body, {**headers, "Idempotency-Key": f"k{n}"})
            for n in range(2, 6)
        )
    )
    assert {answer["run_id"] for _, answer, _ in replays} == {first["run_id"]}
    assert (await harness.counts())["runs"] == 1


async def test_the_same_body_signed_again_later_is_a_new_request(harness: Harness) -> None:
    body = encode(BODY)
    _, one, _ = await harness.post("refunds", body, signed(body, at=time.time() - 10))
    _, two, _ = await harness.post("refunds", body, signed(body))
    assert one["run_id"] != two["run_id"]
    assert (await harness.counts())["runs"] == 2


async def test_signatures_are_forgotten_once_their_window_has_passed(harness: Harness) -> None:
    old = IdempotencyRecord(
        "hook:refunds:signature",
        "1.0",
        "x",
        "run_gone",
        datetime.now(UTC) - timedelta(hours=1),
    )
    async with harness.store.transaction() as tx:
        await tx.insert_idempotency(old)
    body = encode(BODY)
    headers = signed(body)
    _, answer, _ = await harness.post("refunds", body, headers)
    async with harness.store.transaction() as tx:
        assert await tx.get_idempotency(old.scope, old.key) is None
        key = f"{headers['X-Signoff-Timestamp']}.{sha256(body)}"
        remembered = await tx.get_idempotency(old.scope, key)
    assert remembered is not None and remembered.run_id == answer["run_id"]


async def test_a_database_that_cannot_store_the_run_is_503_with_retry_after(
    harness: Harness, tmp_path: Path
) -> None:
    body = encode(BODY)
    # Another process holds the write lock for longer than the busy timeout.
    with contextlib.closing(sqlite3.connect(tmp_path / "signoff.db", timeout=0.05)) as other:
        await _take_write_lock(other)
        status, answer, headers = await harness.post("refunds", body, signed(body))
        other.rollback()
    assert (status, answer["error"]) == (503, "storage_unavailable")
    assert headers["Retry-After"] == "2"
    assert (await harness.counts())["runs"] == 0
    # The caller retries the same request once the database answers: one run.
    status, answer, _ = await harness.post("refunds", body, signed(body))
    assert status == 202


async def _take_write_lock(db: sqlite3.Connection) -> None:
    # The server's loops take the lock often and briefly: try until it is ours.
    for _ in range(400):
        try:
            db.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError:
            await asyncio.sleep(0.01)
    raise AssertionError("never got the write lock")


def test_two_hooks_may_not_share_a_secret() -> None:
    runtime = Runtime(MemoryStore(), [refunds_agent()])
    hooks = {
        name: HookConfig(name=name, secret=SECRET, agent="refunds", input_template="{raw}")
        for name in ("one", "two")
    }
    with pytest.raises(ConfigurationError, match="'one' and 'two' share a secret"):
        add_hook_routes(web.Application(), runtime, hooks, lambda: None)


async def test_keys_are_scoped_per_hook(harness: Harness) -> None:
    body = encode(BODY)
    key = {"Idempotency-Key": "same-key"}
    _, one, _ = await harness.post("refunds", body, {**signed(body), **key})
    status, two, headers = await harness.post(
        "quiet", body, {**signed(body, secret=OTHER_SECRET), **key}
    )
    assert status == 202
    assert two["run_id"] != one["run_id"]
    assert "Idempotent-Replayed" not in headers
    assert (await harness.counts())["runs"] == 2


async def test_concurrent_requests_with_one_key_start_one_run(harness: Harness) -> None:
    body = encode(BODY)
    headers = {**signed(body), "Idempotency-Key": "burst"}
    answers = await asyncio.gather(*(harness.post("refunds", body, headers) for _ in range(5)))
    assert {status for status, _, _ in answers} == {202}
    assert len({answer["run_id"] for _, answer, _ in answers}) == 1
    assert (await harness.counts())["runs"] == 1


# -- completion callbacks ---------------------------------------------------------------------


async def _start(harness: Harness) -> str:
    body = encode(BODY)
    status, answer, _ = await harness.post("refunds", body, signed(body))
    assert status == 202, answer
    return str(answer["run_id"])


def _check_signed(headers: dict[str, str], body: bytes) -> None:
    verify(
        SECRET,
        headers.get("X-Signoff-Timestamp"),
        headers.get("X-Signoff-Signature"),
        body,
        now=time.time(),
        purpose=CALLBACK,
    )


async def test_completion_callback_is_signed_and_delivered(harness: Harness) -> None:
    run_id = await _start(harness)
    await harness.finished(run_id)

    async def delivered() -> bool:
        return (await harness.outbox(run_id)).state == "delivered"

    await eventually(delivered)
    assert len(harness.receiver.requests) == 1
    headers, body = harness.receiver.requests[0]
    _check_signed(headers, body)
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {
        "run_id": run_id,
        "status": "done",
        "text": "Refunded A-1",
        "error": None,
        "hook": "refunds",
    }
    item = await harness.outbox(run_id)
    assert headers["Idempotency-Key"] == item.outbox_id
    assert item.platform_ref == {"callback_url": harness.receiver.url, "status": 200}


async def test_completion_callback_is_retried_after_a_failure(
    harness: Harness, receiver: Receiver
) -> None:
    receiver.fail_first = 1
    run_id = await _start(harness)
    await harness.finished(run_id)

    async def delivered() -> bool:
        return (await harness.outbox(run_id)).state == "delivered"

    await eventually(delivered)
    assert len(receiver.requests) == 2
    for headers, body in receiver.requests:
        _check_signed(headers, body)
    (first_headers, first_body), (second_headers, second_body) = receiver.requests
    assert first_body == second_body
    assert first_headers["Idempotency-Key"] == second_headers["Idempotency-Key"]
    item = await harness.outbox(run_id)
    assert item.attempts == 2
    assert item.last_error is None
    kinds = [e["kind"] for e in await harness.runtime.events(run_id)]
    assert "notification_failed" not in kinds


async def test_callback_to_a_host_not_allowed_is_refused_permanently(harness: Harness) -> None:
    # HookConfig refuses such a URL when it is built; this checks the notifier's own
    # guard, for a config that skipped validation.
    tampered = harness.callback_hooks["refunds"]
    object.__setattr__(tampered, "callback_hosts", ("callbacks.example.com",))
    run_id = await _start(harness)
    await harness.finished(run_id)

    async def failed() -> bool:
        return (await harness.outbox(run_id)).state == "failed"

    await eventually(failed)
    assert harness.receiver.requests == []
    item = await harness.outbox(run_id)
    assert item.attempts == 1
    events = await harness.runtime.events(run_id)
    failures = [e for e in events if e["kind"] == "notification_failed"]
    assert len(failures) == 1
    assert failures[0]["data"]["notification"] == "run_callback"
    assert failures[0]["data"]["platform"] == "callback"
    assert "not in callback_hosts" in failures[0]["data"]["error"]


async def test_callback_answered_with_a_4xx_is_not_retried(
    harness: Harness, receiver: Receiver
) -> None:
    receiver.fail_first = 10
    receiver.fail_status = 410
    run_id = await _start(harness)
    await harness.finished(run_id)

    async def failed() -> bool:
        return (await harness.outbox(run_id)).state == "failed"

    await eventually(failed)
    await settled(harness.runtime)  # nothing is due any more: nothing more will be sent
    assert len(receiver.requests) == 1
    failures = [
        e for e in await harness.runtime.events(run_id) if e["kind"] == "notification_failed"
    ]
    assert len(failures) == 1
    assert "HTTP 410" in failures[0]["data"]["error"]


async def test_callback_for_a_hook_removed_from_config_is_refused(harness: Harness) -> None:
    del harness.callback_hooks["refunds"]
    run_id = await _start(harness)
    await harness.finished(run_id)

    async def failed() -> bool:
        return (await harness.outbox(run_id)).state == "failed"

    await eventually(failed)
    assert "no longer configured" in str((await harness.outbox(run_id)).last_error)
    assert harness.receiver.requests == []


# -- the notifier on its own ----------------------------------------------------------------


def _finished_item(url: str, **payload: Any) -> OutboxRecord:
    now = datetime.now(UTC)
    return OutboxRecord(
        outbox_id="ob_1",
        run_id="run_1",
        kind="run_callback",
        payload={"run_id": "run_1", "agent": "refunds", **payload},
        destination={"platform": "callback", "hook": "refunds", "callback_url": url},
        created_at=now,
        next_attempt_at=now,
    )


async def test_429_is_transient_and_honours_retry_after(
    harness: Harness, receiver: Receiver
) -> None:
    receiver.fail_first = 1
    receiver.fail_status = 429
    receiver.fail_headers = {"Retry-After": "7"}
    notifier = CallbackNotifier(harness.callback_hooks)
    item = _finished_item(receiver.url, status="done", text="ok")
    with pytest.raises(DeliveryError) as caught:
        await deliver_item(notifier, item)
    assert not caught.value.permanent
    assert caught.value.retry_after == 7
    assert caught.value.rate_limited
    assert await deliver_item(notifier, item) == {"callback_url": receiver.url, "status": 200}


async def test_connection_errors_are_transient(harness: Harness) -> None:
    # A port nobody listens on: bind one, then close it.
    probe = web.AppRunner(web.Application())
    await probe.setup()
    site = web.TCPSite(probe, "127.0.0.1", 0)
    await site.start()
    port = probe.addresses[0][1]
    await probe.cleanup()
    url = f"http://127.0.0.1:{port}/callback"
    hook = HookConfig(
        name="refunds",
        secret=SECRET,
        agent="refunds",
        input_template="{raw}",
        callback_url=url,
        callback_hosts=["127.0.0.1"],
        callback_timeout_seconds=2,
    )
    with pytest.raises(DeliveryError) as caught:
        await deliver_item(CallbackNotifier({"refunds": hook}), _finished_item(url, status="done"))
    assert not caught.value.permanent


async def test_a_finished_hook_run_gets_a_chat_item_and_a_separate_callback_item(
    harness: Harness,
) -> None:
    run_id = await _start(harness)
    await harness.finished(run_id)
    async with harness.store.transaction() as tx:
        items = await tx.outbox_for_run(run_id)
    finished = [i for i in items if i.kind in ("run_finished", "run_callback")]
    assert sorted(i.kind for i in finished) == ["run_callback", "run_finished"]
    callback = next(i for i in finished if i.kind == "run_callback")
    chat = next(i for i in finished if i.kind == "run_finished")
    assert callback.destination["platform"] == "callback"
    assert chat.destination["platform"] == "console"
    assert callback.outbox_id != chat.outbox_id


async def test_items_that_are_not_callbacks_are_refused_by_the_callback_notifier(
    harness: Harness,
) -> None:
    item = _finished_item(harness.receiver.url, status="done")
    item.kind = "run_finished"  # the chat's copy, not the callback
    with pytest.raises(DeliveryError) as caught:
        await deliver_item(CallbackNotifier(harness.callback_hooks), item)
    assert caught.value.permanent
    assert harness.receiver.requests == []


def test_cancelled_run_reports_its_reason_as_the_error() -> None:
    item = _finished_item("http://127.0.0.1/cb", status="cancelled", reason="stopped by ops")
    note = read_notification(item.kind, item.payload)
    assert isinstance(note, RunCallback)
    assert callback_payload(note, item.destination) == {
        "run_id": "run_1",
        "status": "cancelled",
        "text": None,
        "error": "stopped by ops",
        "hook": "refunds",
    }


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"name": "bad name"}, "hook name"),
        ({"secret": ""}, "secret"),
        ({"input_template": "{user}"}, "must start with 'body'"),
        ({"input_template": "{body"}, "malformed"),
        ({"approvals": {"platform": "teams"}}, "not one of"),
        ({"approvals": {"platform": "slack"}}, "need a 'channel'"),
        ({"approvals": {"platform": "console", "hook": "x"}}, "may not set hook"),
        ({"callback_url": "https://evil.example/cb"}, "not in callback_hosts"),
        (
            {"callback_url": "ftp://hooks.example.com/cb", "callback_hosts": ["hooks.example.com"]},
            "http(s)",
        ),
        ({"max_body_bytes": 0}, "max_body_bytes"),
    ],
)
def test_invalid_hook_config_is_a_configuration_error(options: dict[str, Any], words: str) -> None:
    values: dict[str, Any] = {
        "name": "refunds",
        "secret": SECRET,
        "agent": "refunds",
        "input_template": "{body[order_id]}",
        **options,
    }
    with pytest.raises(ConfigurationError) as caught:
        HookConfig(**values)
    assert words in str(caught.value)


def test_hook_config_defaults() -> None:
    hook = HookConfig(
        name="refunds",
        secret=SECRET,
        agent="refunds",
        input_template="{raw}",
        callback_url="https://Hooks.Example.com./done",
        callback_hosts=["HOOKS.example.com"],
    )
    assert hook.requester == "hook:refunds"
    assert hook.approvals == {"platform": "console"}
    assert hook.max_body_bytes == 64 * 1024
    assert SECRET not in repr(hook)


def test_routes_refuse_a_hook_whose_agent_is_not_loaded(tmp_path: Path) -> None:
    runtime = Runtime(SQLStore.sqlite(tmp_path / "unused.db"), [refunds_agent()])
    hook = HookConfig(name="h", secret=SECRET, agent="deploys", input_template="{raw}")
    with pytest.raises(ConfigurationError, match="no agent named 'deploys'"):
        add_hook_routes(web.Application(), runtime, {"h": hook}, lambda: None)


# -- the documented shell recipe ----------------------------------------------------------


@pytest.mark.skipif(
    shutil.which("openssl") is None or shutil.which("curl") is None,
    reason="needs openssl and curl",
)
async def test_documented_openssl_curl_recipe_starts_a_run(harness: Harness) -> None:
    recipe = """
body='{"order_id": "A-1", "amount": 25}'
ts=$(date +%s)
sig=$(printf '%s.%s' "$ts" "$body" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
curl -sS -X POST "$URL/hooks/refunds" \\
  -H 'Content-Type: application/json' \\
  -H "X-Signoff-Timestamp: $ts" -H "X-Signoff-Signature: v1=$sig" \\
  -H 'Idempotency-Key: order-A-1' --data-binary "$body"
"""
    env = {"SECRET": SECRET, "URL": harness.url, "PATH": "/usr/bin:/bin"}
    process = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        recipe,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err
    answer = json.loads(out)
    assert answer["status"] == "running", answer
    run = await harness.finished(answer["run_id"])
    assert run.status is RunStatus.DONE


# -- fuzzing ------------------------------------------------------------------------------

_fuzz_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["order_id", "amount", "x", ""]), children, max_size=3)
    ),
    max_leaves=10,
)
_fuzz_bodies = st.one_of(
    _fuzz_json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=80),
    st.just(b"[" * 100_000),
    st.just(b'{"order_id": ' + b"[" * 5_000),
)
_fuzz_headers = st.dictionaries(
    st.sampled_from(
        ["X-Signoff-Timestamp", "X-Signoff-Signature", "Idempotency-Key", "Content-Type"]
    ),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
    max_size=3,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hook=st.sampled_from(["refunds", "small", "nope"]),
    body=_fuzz_bodies,
    sign_it=st.booleans(),
    extra=_fuzz_headers,
)
async def test_fuzzed_requests_never_5xx_and_refusals_start_nothing(
    harness: Harness, hook: str, body: bytes, sign_it: bool, extra: dict[str, str]
) -> None:
    secret = SMALL_SECRET if hook == "small" else SECRET
    headers = {**extra, **signed(body, secret=secret)} if sign_it else extra
    before = (await harness.counts())["runs"]
    status, answer, reply_headers = await harness.post(hook, body, headers)
    assert status < 500, answer
    started = status == 202 and reply_headers.get("Idempotent-Replayed") != "true"
    assert (await harness.counts())["runs"] == before + (1 if started else 0)
    if not sign_it:
        assert status in (401, 404, 413), answer


async def test_deeply_nested_json_is_400(harness: Harness) -> None:
    body = b"[" * 60_000  # within the hook's 64 KiB, far past any parser's depth
    status, answer, _ = await harness.post("refunds", body, signed(body))
    assert (status, answer["error"]) == (400, "malformed_json")
    assert "nested too deeply" in answer["message"]
    assert (await harness.counts())["runs"] == 0
