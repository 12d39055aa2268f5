"""A completion callback is signed for receivers, never as a request to its own hook.

The hook's template reads ``{body[text]}``, which a callback body has too: were a
callback a valid request, posting it back would start a run on the last answer.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from sqlalchemy import text
from test_webhook import (
    FAST_RETRY,
    PROXY_VARS,
    SECRET,
    Receiver,
    encode,
    eventually,
    refunds_agent,
    signed,
)

from adapters.webhook import (
    CALLBACK,
    BadSignature,
    sign,
    signed_headers,
    verify,
)
from bot.bootstrap import Parts, build_service
from bot.settings import Settings
from runtime import Runtime
from runtime.store.sql import SQLStore

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_760_000_000
BODY = b'{"run_id":"run_1","status":"done","text":"hi","error":null,"hook":"echo"}'


@dataclass
class Echo:
    url: str
    http: aiohttp.ClientSession
    store: SQLStore
    runtime: Runtime
    receiver: Receiver

    async def runs(self) -> int:
        async with self.store.engine.connect() as conn:
            return int((await conn.execute(text("SELECT count(*) FROM runs"))).scalar_one())


@pytest.fixture
async def echo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Echo]:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    receiver = Receiver()
    receiver_app = web.Application()
    receiver_app.router.add_post("/callback", receiver.handle)
    receiver_runner = web.AppRunner(receiver_app)
    await receiver_runner.setup()
    await web.TCPSite(receiver_runner, "127.0.0.1", 0).start()
    receiver.url = f"http://127.0.0.1:{receiver_runner.addresses[0][1]}/callback"
    settings = Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": "echo-operator-0123456789",
            "cookie_secret": "echo-cookie-secret-0123456789abcdef",
            "bind_host": "127.0.0.1",
            "port": 0,
            "lease_seconds": 5,
            "poll_seconds": 0.02,
            "hooks": {
                "echo": {
                    "secret": SECRET,
                    "agent": "refunds",
                    "input_template": "{body[text]}",
                    "callback_url": receiver.url,
                    "callback_hosts": ["127.0.0.1"],
                }
            },
        }
    )
    service = await build_service(
        settings,
        agents=[refunds_agent()],
        store=store,
        outbox_policy=FAST_RETRY,
        parts=Parts(deadlines=False, discord=False),
    )
    url = await service.start()
    http = aiohttp.ClientSession()
    try:
        yield Echo(url, http, store, service.runtime, receiver)
    finally:
        await service.stop(grace_seconds=5)
        await http.close()
        await receiver_runner.cleanup()
        await store.close()


async def captured_callback(echo: Echo) -> tuple[dict[str, str], bytes]:
    """Start a run through the hook and return the callback the receiver got."""
    body = encode({"text": "refund A-1"})
    async with echo.http.post(f"{echo.url}/hooks/echo", data=body, headers=signed(body)) as r:
        assert r.status == 202, await r.text()

    async def called() -> bool:
        return bool(echo.receiver.requests)

    await eventually(called)
    return echo.receiver.requests[0]


def docs_webhooks() -> str:
    return (ROOT / "docs" / "webhooks.md").read_text(encoding="utf-8")


def documented(language: str, marker: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", docs_webhooks(), re.S)
    [block] = [b for b in blocks if marker in b]
    return str(block)


async def test_a_callback_posted_back_to_its_hook_is_refused_and_starts_nothing(
    echo: Echo,
) -> None:
    headers, body = await captured_callback(echo)
    assert b'"text":"Refunded A-1"' in body
    before = await echo.runs()

    replayed = {
        key: value
        for key, value in headers.items()
        if key.lower().startswith("x-signoff-")
        or key.lower() in ("content-type", "idempotency-key")
    }
    async with echo.http.post(f"{echo.url}/hooks/echo", data=body, headers=replayed) as r:
        assert r.status == 401, await r.text()
        assert (await r.json())["error"] == "bad_signature"
    assert await echo.runs() == before == 1


async def test_a_receiver_accepts_a_callback_with_the_documented_python_recipe(
    echo: Echo,
) -> None:
    headers, body = await captured_callback(echo)
    scope: dict[str, Any] = {}
    exec(documented("python", "def callback_is_authentic"), scope)
    check = scope["callback_is_authentic"]
    assert check(SECRET, headers, body) is True
    assert check("another-secret-0123456789", headers, body) is False
    assert check(SECRET, headers, body + b" ") is False
    # A request to a hook is not a callback either.
    request = encode({"text": "refund A-1"})
    assert check(SECRET, signed(request), request) is False
    verify(
        SECRET,
        headers["X-Signoff-Timestamp"],
        headers["X-Signoff-Signature"],
        body,
        now=time.time(),
        purpose=CALLBACK,
    )


async def test_a_receiver_accepts_a_callback_with_the_documented_openssl_recipe(
    echo: Echo,
) -> None:
    headers, body = await captured_callback(echo)
    sig = headers["X-Signoff-Signature"].removeprefix("v1=")
    env = {
        "SECRET": SECRET,
        "ts": headers["X-Signoff-Timestamp"],
        "sig": sig,
        "body": body.decode(),
        "PATH": "/usr/bin:/bin",
    }
    recipe = documented("sh", "callback.%s.%s")
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", recipe, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err
    assert out.decode().strip() == "authentic"


def test_request_and_callback_signatures_never_stand_for_each_other() -> None:
    callback = signed_headers(SECRET, BODY, NOW, purpose=CALLBACK)
    ts, sig = callback["X-Signoff-Timestamp"], callback["X-Signoff-Signature"]
    assert verify(SECRET, ts, sig, BODY, now=NOW, purpose=CALLBACK) == NOW
    with pytest.raises(BadSignature):
        verify(SECRET, ts, sig, BODY, now=NOW)
    request = sign(SECRET, NOW, BODY)
    assert verify(SECRET, str(NOW), request, BODY, now=NOW) == NOW
    with pytest.raises(BadSignature):
        verify(SECRET, str(NOW), request, BODY, now=NOW, purpose=CALLBACK)
