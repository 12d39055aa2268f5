"""`signoff serve` on PostgreSQL while the database refuses connections: every HTTP
surface answers 503 ``storage_unavailable`` with ``Retry-After``, never a bare 500."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy.engine import make_url

from adapters.webhook.signing import sign
from bot.serve import Service, build_service
from bot.settings import load_settings
from runtime import StorageError
from runtime.store.sql import SQLStore

TOKEN = "outage-test-token-0123456789"
HOOK_SECRET = "outage-hook-secret-0123456789"


class Gate:
    """A TCP forwarder in front of PostgreSQL that can be shut like a stopped server.

    While open it passes bytes both ways; `shut` aborts every forwarded connection and
    closes the listening socket, so the next connection attempt is refused.
    """

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self.port = 0

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            await self._forward(reader, writer)
        finally:
            self._handlers.discard(handler)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        self._writers.update((writer, upstream_writer))
        pumps = [
            asyncio.ensure_future(_pump(reader, upstream_writer)),
            asyncio.ensure_future(_pump(upstream_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for end in (writer, upstream_writer):
                end.transport.abort()
                self._writers.discard(end)
            self._tasks.difference_update(pumps)

    async def shut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._handlers:
            await asyncio.gather(*list(self._handlers), return_exceptions=True)


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()


@pytest.fixture
async def gated(database: str) -> AsyncIterator[tuple[str, Gate]]:
    """The test's database, and its URL through a `Gate`."""
    parsed = make_url(database)
    gate = Gate(parsed.host or "127.0.0.1", parsed.port or 5432)
    await gate.open()
    try:
        through = parsed.set(host="127.0.0.1", port=gate.port)
        yield through.render_as_string(hide_password=False), gate
    finally:
        await gate.shut()


@pytest.fixture
async def service(
    gated: tuple[str, Gate], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Service]:
    monkeypatch.setenv("SIGNOFF_TEST_LEDGER", str(tmp_path / "ledger.jsonl"))
    url, _gate = gated
    settings = load_settings(
        overrides={
            "database_url": url,
            "app": "tests.e2e.serve_app:agents",
            "port": 0,
            "operator_token": TOKEN,
            "secure_cookies": False,
            "cookie_secret": "outage-cookie-secret-0123456789abcdef",
            "hooks": {
                "pay": {"secret": HOOK_SECRET, "agent": "payments", "input_template": "{raw}"}
            },
        }
    )
    running = await build_service(settings)
    await running.start()
    try:
        yield running
    finally:
        await running.stop(grace_seconds=1)


async def _call(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, str | None]:
    async with http.request(method, url, data=body, headers=headers) as answer:
        return answer.status, await answer.text(), answer.headers.get("Retry-After")


async def test_connect_refused_is_a_storage_error(database: str) -> None:
    parsed = make_url(database)
    gate = Gate(parsed.host or "127.0.0.1", parsed.port or 5432)
    await gate.open()
    port = gate.port
    await gate.shut()
    store = SQLStore.from_url(parsed.set(host="127.0.0.1", port=port))
    try:
        with pytest.raises(StorageError, match="cannot open"):
            async with store.transaction() as tx:
                await tx.count_runs()
    finally:
        await store.close()


async def test_every_surface_answers_503_while_postgres_refuses(
    service: Service, gated: tuple[str, Gate]
) -> None:
    _url, gate = gated
    base = service.url
    bearer = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        status, text, _ = await _call(
            http,
            "POST",
            f"{base}/api/runs",
            body=json.dumps({"agent": "payments", "input": "pay ACC-1"}).encode(),
            headers=bearer,
        )
        assert status == 202, text
        run_id = json.loads(text)["run_id"]
        status, _, _ = await _call(http, "GET", f"{base}/readyz")
        assert status == 200
        # Signed in to the console (the session cookie stays in `http`).
        _, page, _ = await _call(http, "GET", f"{base}/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        async with http.post(
            f"{base}/login", data={"csrf": csrf.group(1), "token": TOKEN, "next": "/runs"}
        ) as answer:
            assert answer.status == 200 and "/runs" in str(answer.url)

        await gate.shut()

        hook_body = json.dumps({"text": "pay ACC-2"}).encode()
        stamp = str(int(time.time()))
        hook_headers = {
            "Content-Type": "application/json",
            "X-Signoff-Timestamp": stamp,
            "X-Signoff-Signature": sign(HOOK_SECRET, stamp, hook_body),
            "Idempotency-Key": "outage-1",
        }
        decision = json.dumps({"decision": "allow"}).encode()
        started = json.dumps({"agent": "payments", "input": "pay ACC-3"}).encode()
        requests: list[tuple[str, str, bytes | None, dict[str, str] | None]] = [
            ("GET", "/api/runs", None, bearer),
            ("GET", f"/api/runs/{run_id}", None, bearer),
            ("GET", "/api/tickets", None, bearer),
            ("POST", "/api/runs", started, bearer),
            ("POST", "/api/tickets/t-unknown/decision", decision, bearer),
            ("POST", "/hooks/pay", hook_body, hook_headers),
            ("GET", "/readyz", None, None),
            ("GET", "/runs", None, None),
            ("GET", f"/runs/{run_id}", None, None),
        ]
        for method, path, body, headers in requests:
            # Twice: once on pooled connections the gate cut, once on new ones refused.
            for _ in range(2):
                status, text, retry_after = await _call(
                    http, method, base + path, body=body, headers=headers
                )
                assert status == 503, (method, path, status, text)
                assert retry_after is not None and int(retry_after) > 0, (method, path)
                assert "storage_unavailable" in text, (method, path, text)
        # The process itself is alive.
        status, _, _ = await _call(http, "GET", f"{base}/healthz")
        assert status == 200
        # /metrics reads no database: it answers, and says the database is down (its
        # readiness check above failed) for the alert to fire.
        status, text, _ = await _call(http, "GET", f"{base}/metrics")
        assert status == 200
        assert "\nsignoff_database_up 0.0\n" in text
        assert "\nsignoff_storage_errors_total " in text
