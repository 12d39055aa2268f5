"""``POST /hooks/{name}``: start a run from a signed webhook request.

The checks run in this order, and each refusal starts nothing:

1. unknown hook -> 404;
2. body larger than the hook's ``max_body_bytes`` -> 413 (``Content-Length`` is checked
   first; at most ``max_body_bytes + 1`` bytes are ever read);
3. signature and timestamp over the *raw* body, before any parsing -> 401, saying
   which: ``missing_signature``, ``bad_signature`` or ``stale_timestamp``;
4. malformed ``Idempotency-Key`` header, body not UTF-8 JSON, or not an object -> 400;
5. input template failing on this body (a missing field) -> 422;
6. ``Idempotency-Key`` reused with another body -> 409.

A started run answers 202 ``{"run_id", "status", "status_url"}``. A replay answers the
same with ``Idempotent-Replayed: true`` and starts nothing: a reused ``Idempotency-Key``,
and also the same signed request sent again (same timestamp and body) with or without a
key, since every accepted signature is remembered in the database for its time window
(so replicas share it). Every answer is JSON ``{"error": <code>, "message": <text>}``
when it is a refusal; ``503`` answers carry ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, NoReturn

from aiohttp import web

from adapters.webhook.config import HookConfig, TemplateError
from adapters.webhook.signing import SignatureError, verify_headers
from runtime import (
    Clock,
    ConfigurationError,
    IdempotencyConflict,
    RunResult,
    Runtime,
    StorageError,
)
from runtime.edges import loads_strict

log = logging.getLogger("signoff.webhook")

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_IDEMPOTENCY_KEY = 255
AUTH_CHALLENGE = 'Signoff-HMAC-SHA256 headers="X-Signoff-Timestamp X-Signoff-Signature"'
_READ_CHUNK = 16 * 1024
BUSY_RETRY_AFTER = 5
STORAGE_RETRY_AFTER = 2
_FORGET_EVERY_SECONDS = 60.0


def _answer(status: int, payload: dict[str, Any], **headers: str) -> web.Response:
    return web.json_response(payload, status=status, headers=headers or None)


def _refuse(status: int, code: str, message: str) -> web.Response:
    return _answer(status, {"error": code, "message": message})


class _Refused(Exception):
    """Internal: stop handling a request with this answer."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def _stop(status: int, code: str, message: str) -> NoReturn:
    raise _Refused(_refuse(status, code, message))


async def _read_limited(request: web.Request, limit: int) -> bytes:
    """The body, or a 413 refusal once more than `limit` bytes are seen."""
    too_large = f"the body is larger than this hook's limit of {limit} bytes"
    declared = request.content_length
    if declared is not None and declared > limit:
        _stop(413, "body_too_large", too_large)
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await request.content.read(min(_READ_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        _stop(413, "body_too_large", too_large)
    return b"".join(chunks)


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    key = key.strip()
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isascii() or not key.isprintable():
        _stop(
            400,
            "bad_idempotency_key",
            f"{IDEMPOTENCY_HEADER} must be 1-{MAX_IDEMPOTENCY_KEY} printable ASCII characters",
        )
    return key


def _parse_object(body: bytes) -> tuple[dict[str, Any], str]:
    try:
        raw = body.decode("utf-8")
    except UnicodeDecodeError:
        _stop(400, "malformed_json", "the body is not UTF-8 text")
    try:
        parsed = loads_strict(raw)
    except ValueError as exc:
        _stop(400, "malformed_json", f"the body is not valid JSON: {exc}")
    except RecursionError:
        _stop(400, "malformed_json", "the body is nested too deeply")
    if not isinstance(parsed, dict):
        _stop(400, "not_an_object", f"the body must be a JSON object, not {_json_type(parsed)}")
    return parsed, raw


def _storage_unavailable() -> NoReturn:
    raise _Refused(
        _answer(
            503,
            {
                "error": "storage_unavailable",
                "message": "the run could not be stored; retry later",
            },
            **{"Retry-After": str(STORAGE_RETRY_AFTER)},
        )
    )


def signature_scope(hook: HookConfig) -> str:
    """Where a hook's accepted signatures are remembered (as idempotency keys)."""
    return f"{hook.scope}:signature"


def _json_type(value: object) -> str:
    match value:
        case list():
            return "an array"
        case str():
            return "a string"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case None:
            return "null"
        case _:
            return type(value).__name__


def _accepted(run: RunResult, *, replayed: bool) -> web.Response:
    status_url = f"/api/runs/{run.run_id}"
    headers = {"Location": status_url}
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    return _answer(
        202,
        {"run_id": run.run_id, "status": str(run.status), "status_url": status_url},
        **headers,
    )


class HookHandler:
    """Serves ``/hooks/{name}`` for a fixed set of hooks. Built by `add_hook_routes`."""

    def __init__(
        self,
        runtime: Runtime,
        hooks: Mapping[str, HookConfig],
        on_change: Callable[[], None],
        clock: Clock,
        max_queued: int | None = None,
        body_timeout: float | None = None,
    ) -> None:
        self._runtime = runtime
        self._hooks = hooks
        self._on_change = on_change
        self._clock = clock
        self._max_queued = max_queued
        self._body_timeout = body_timeout
        self._queued_seen: tuple[float, int] = (float("-inf"), 0)
        self._forgotten_at: dict[str, float] = {}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one request; never raises for a caller's mistake."""
        try:
            return await self._handle(request)
        except _Refused as refused:
            return refused.response

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        hook = self._hooks.get(name)
        if hook is None:
            _stop(404, "unknown_hook", f"there is no hook named {name!r}")
        if request.method != "POST":
            return _answer(
                405,
                {"error": "method_not_allowed", "message": "send the request with POST"},
                Allow="POST",
            )
        try:
            async with asyncio.timeout(self._body_timeout):
                body = await _read_limited(request, hook.max_body_bytes)
        except TimeoutError:
            response = _refuse(
                408,
                "request_timeout",
                f"the request body did not arrive within {self._body_timeout:g} s",
            )
            response.force_close()
            raise _Refused(response) from None
        try:
            timestamp = verify_headers(
                hook.secret,
                request.headers,
                body,
                self._clock.now().timestamp(),
                hook.tolerance_seconds,
            )
        except SignatureError as exc:
            log.info("hook %s refused a request: %s", name, exc)
            raise _Refused(
                _answer(
                    401,
                    {"error": exc.code, "message": str(exc)},
                    **{"WWW-Authenticate": AUTH_CHALLENGE},
                )
            ) from None
        key = _idempotency_key(request)
        payload, raw = _parse_object(body)
        try:
            run_input = hook.render(payload, raw)
        except TemplateError as exc:
            _stop(422, "template_failed", f"cannot build the run's input: {exc}")
        digest = hashlib.sha256(body).hexdigest()
        # The signature covers the timestamp and the body, so those two name the request:
        # the same signed request again is a replay, whatever Idempotency-Key it carries
        # (that header is not signed).
        signed = (signature_scope(hook), f"{timestamp}.{digest}", digest)
        idempotency = [signed]
        if key is not None:
            idempotency.append((hook.scope, key, digest))
        # A replay gets its run's answer even while the queue is full; otherwise
        # `Runtime.start` itself tells a replay (no read of the keys beforehand).
        if await self._too_busy() and not await self._key_used(
            (signed[0], signed[1]), *([(hook.scope, key)] if key is not None else [])
        ):
            log.warning("hook %s refused a request: too many runs are waiting for a worker", name)
            raise _Refused(
                _answer(
                    503,
                    {
                        "error": "busy",
                        "message": "too many runs are waiting to be worked on; retry later",
                    },
                    **{"Retry-After": str(BUSY_RETRY_AFTER)},
                )
            )
        try:
            run = await self._runtime.start(
                hook.agent,
                run_input,
                requester=hook.run_requester,
                origin=hook.origin(),
                wait=False,
                idempotency=idempotency,
            )
        except IdempotencyConflict as exc:
            _stop(409, "idempotency_conflict", str(exc))
        except ConfigurationError as exc:
            log.error("hook %s cannot start its agent: %s", name, exc)
            _stop(500, "hook_misconfigured", f"hook {name!r} is misconfigured: {exc}")
        except StorageError as exc:
            log.error("hook %s could not store its run: %s", name, exc)
            _storage_unavailable()
        replayed = run.replayed
        if not replayed:
            log.info("hook %s started run %s", name, run.run_id, extra={"run_id": run.run_id})
            self._notify_change()
            await self._forget_old_signatures(hook)
        return _accepted(run, replayed=replayed)

    async def _forget_old_signatures(self, hook: HookConfig) -> None:
        """Drop remembered signatures whose window has passed (at most once a minute)."""
        now = time.monotonic()
        if now - self._forgotten_at.get(hook.name, float("-inf")) < _FORGET_EVERY_SECONDS:
            return
        self._forgotten_at[hook.name] = now
        # Twice the window: a timestamp is accepted that far in the future as well.
        before = self._clock.now() - timedelta(seconds=2 * hook.tolerance_seconds)
        try:
            await self._runtime.forget_idempotency(signature_scope(hook), before)
        except StorageError as exc:
            log.warning("hook %s could not forget old signatures: %s", hook.name, exc)

    def _notify_change(self) -> None:
        # The run is committed: a failing wake-up must not turn the answer into a 500
        # (the caller would retry and, without an Idempotency-Key, start a second run).
        # Workers poll anyway, so the run is still picked up.
        try:
            self._on_change()
        except Exception:
            log.exception("on_change failed after a hook started a run")

    async def _too_busy(self) -> bool:
        """Whether the queue of runs waiting for a worker is full (read at most 2x/s)."""
        if self._max_queued is None:
            return False
        seen_at, queued = self._queued_seen
        now = time.monotonic()
        if now - seen_at > 0.5:
            counts = await self._runtime.run_counts()
            queued = counts.get("queued", 0)
            self._queued_seen = (now, queued)
        return queued >= self._max_queued

    async def _key_used(self, first: tuple[str, str], *more: tuple[str, str]) -> bool:
        # Only decides whether a request met by a full queue is a replay; `Runtime.start`
        # is what enforces the key.
        try:
            return await self._runtime.started_by(*first, *more) is not None
        except StorageError as exc:
            log.error("hook could not read idempotency key: %s", exc)
            _storage_unavailable()


def add_hook_routes(
    app: web.Application,
    runtime: Runtime,
    hooks: Mapping[str, HookConfig],
    on_change: Callable[[], None],
    *,
    clock: Clock | None = None,
    max_queued: int | None = None,
    body_timeout: float | None = None,
) -> HookHandler:
    """Serve ``/hooks/{name}`` on `app` for `hooks`.

    Args:
        app: The aiohttp application (the bot's server).
        runtime: Starts the runs (queued for the workers, never driven in the request).
        hooks: Hook configurations by name.
        on_change: Called after a run was started (e.g. `runtime.worker.Worker.wake`).
        clock: The time source for the signature window (default: the runtime's clock).
        max_queued: Refuse new runs with 503 and ``Retry-After`` while this many runs
            wait for a worker (None: never refuse). Replays of a used key still answer.
        body_timeout: Seconds a request body may take to arrive (408 after; None: no
            limit).

    Returns:
        The handler (for tests and metrics).

    Raises:
        ConfigurationError: A hook is filed under another name than its own, names an
            agent the runtime does not know, or shares its secret with another hook.
    """
    secrets: dict[str, str] = {}
    for key, hook in hooks.items():
        if key != hook.name:
            raise ConfigurationError(f"hook {hook.name!r} is filed under the name {key!r}")
        # A signature proves the secret, not the hook: with one secret on two hooks, a
        # request signed for one would be accepted by the other.
        shared = secrets.setdefault(hook.secret, hook.name)
        if shared != hook.name:
            raise ConfigurationError(
                f"hooks {shared!r} and {hook.name!r} share a secret; give each hook its own"
            )
        if hook.agent not in runtime.agents:
            known = ", ".join(sorted(runtime.agents)) or "none"
            raise ConfigurationError(
                f"hook {hook.name!r}: no agent named {hook.agent!r} (loaded: {known})"
            )
    handler = HookHandler(
        runtime,
        dict(hooks),
        on_change,
        clock or runtime.clock,
        max_queued=max_queued,
        body_timeout=body_timeout,
    )
    # Any name (even empty or with a slash) reaches the handler, so every answer under
    # /hooks/ is JSON, including 404 and 405.
    app.router.add_route("*", r"/hooks/{name:.*}", handler.handle)
    return handler
