"""A fake Slack on 127.0.0.1: the Web API, response URLs and a Socket Mode websocket.

The real slack_sdk / slack-bolt talk to it (their base URL points here). It records every
call, keeps the messages it was asked to post and update, and can be told to fail:
``fake.fail("chat.postMessage", status=429, retry_after=7)`` answers the next call that
way (HTTP 429 with ``Retry-After``), ``fake.fail("chat.postMessage", error="channel_not_found")``
answers ``{"ok": false, "error": ...}``.

Requests *to* the bot are built and signed the way Slack does it (`sign`, `signed_headers`,
`command_body`, `interaction_body`, `event_body`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import WSMsgType, web

T = TypeVar("T")

BOT_TOKEN = "xoxb-test-bot-token"
APP_TOKEN = "xapp-test-app-token"
SIGNING_SECRET = "test-signing-secret-0123456789"
BOT_USER = "UBOT"
TEAM = "T0TEST"


@dataclass
class Call:
    """One Web API call the fake received, and when (``time.perf_counter``)."""

    method: str
    args: dict[str, Any]
    token: str | None
    at: float = field(default_factory=time.perf_counter)


@dataclass
class Failure:
    """A scripted answer for the next call of a method."""

    status: int = 200
    error: str | None = None
    retry_after: float | None = None


@dataclass
class Message:
    """A message as the fake Slack keeps it."""

    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None = None
    updates: int = 0


@dataclass
class FakeSlack:
    """The fake's state; `start` serves it."""

    calls: list[Call] = field(default_factory=list)
    messages: dict[tuple[str, str], Message] = field(default_factory=dict)
    responses: list[dict[str, Any]] = field(default_factory=list)
    usergroups: dict[str, list[str]] = field(default_factory=dict)
    channel_members: dict[str, list[str]] = field(default_factory=dict)
    failures: dict[str, list[Failure]] = field(default_factory=dict)
    socket_acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    url: str = ""
    _runner: web.AppRunner | None = None
    _ts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _ack_waiters: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    _connected: asyncio.Event = field(default_factory=asyncio.Event)
    _called: asyncio.Event = field(default_factory=asyncio.Event)

    # -- serving -------------------------------------------------------------------------
    async def start(self) -> str:
        """Serve on 127.0.0.1 (a free port); returns the Web API base URL."""
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/response/{name}", self._response_url)
        app.router.add_get("/socket", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return f"{self.url}/api/"

    async def stop(self) -> None:
        """Close sockets and the server."""
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- scripting -------------------------------------------------------------------------
    def fail(
        self,
        method: str,
        *,
        status: int = 200,
        error: str | None = None,
        retry_after: float | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next `times` calls of `method` with a failure."""
        queue = self.failures.setdefault(method, [])
        queue.extend(Failure(status, error, retry_after) for _ in range(times))

    # -- reading what happened -------------------------------------------------------------
    def called(self, method: str) -> list[Call]:
        """The recorded calls of one method, in order."""
        return [c for c in self.calls if c.method == method]

    def posts(self, channel: str | None = None) -> list[Call]:
        """Successful and failed chat.postMessage calls (optionally to one channel)."""
        return [c for c in self.called("chat.postMessage") if channel in (None, c.args["channel"])]

    def cards(self) -> list[Message]:
        """Posted messages that carry signoff buttons (now or before an update)."""
        return [
            m
            for m in self.messages.values()
            if any(b.get("block_id", "").startswith("signoff:") for b in m.blocks) or m.updates
        ]

    async def wait_for(self, check: Callable[[], T | None], what: str, within: float = 20) -> T:
        """What `check` returns once it is truthy, looked at again after each Web API call
        this fake answers; AssertionError after `within` seconds."""
        try:
            async with asyncio.timeout(within):
                while True:
                    self._called.clear()
                    value = check()
                    if value:
                        return value
                    await self._called.wait()
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}") from None

    # -- the Web API ---------------------------------------------------------------------
    async def _api(self, request: web.Request) -> web.Response:
        try:
            return await self._answer(request)
        finally:
            self._called.set()

    async def _answer(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                args.update(await request.json())
            else:
                args.update(dict(await request.post()))
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        token = str(args.pop("token", None) or token or "") or None
        self.calls.append(Call(method, args, token))
        scripted = self.failures.get(method)
        if scripted:
            failure = scripted.pop(0)
            headers = {}
            if failure.retry_after is not None:
                headers["Retry-After"] = f"{failure.retry_after:g}"
            body = {"ok": False, "error": failure.error or "ratelimited"}
            if failure.status >= 500:
                return web.Response(status=failure.status, text="upstream broke", headers=headers)
            return web.json_response(body, status=failure.status, headers=headers)
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token != expected:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        result: dict[str, Any] = handler(args)
        return web.json_response(result)

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://test.slack.com/",
            "team": "Test",
            "user": "signoff",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": "BBOT",
        }

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args["channel"])
        ts = self._next_ts()
        blocks = args.get("blocks") or []
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        message = Message(channel, ts, str(args.get("text") or ""), blocks, args.get("thread_ts"))
        self.messages[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": {"text": message.text}}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        key = (str(args["channel"]), str(args["ts"]))
        message = self.messages.get(key)
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        message.text = str(args.get("text") or "")
        blocks = args.get("blocks") or []
        message.blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        message.updates += 1
        return {"ok": True, "channel": key[0], "ts": key[1]}

    def _chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        key = (str(args["channel"]), str(args["ts"]))
        if self.messages.pop(key, None) is None:
            return {"ok": False, "error": "message_not_found"}
        return {"ok": True, "channel": key[0], "ts": key[1]}

    def _chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "message_ts": self._next_ts()}

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        view = args.get("view")
        view = json.loads(view) if isinstance(view, str) else view
        return {"ok": True, "view": {**(view or {}), "id": f"V{next(self._ts)}"}}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        group = str(args.get("usergroup"))
        if group not in self.usergroups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": self.usergroups[group]}

    def _conversations_members(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel"))
        if channel not in self.channel_members:
            return {"ok": False, "error": "channel_not_found"}
        members = self.channel_members[channel]
        # Two pages, to exercise the cursor.
        if args.get("cursor") == "page2":
            return {"ok": True, "members": members[1:], "response_metadata": {"next_cursor": ""}}
        return {"ok": True, "members": members[:1], "response_metadata": {"next_cursor": "page2"}}

    def _apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": self.url.replace("http://", "ws://") + "/socket"}

    async def _response_url(self, request: web.Request) -> web.Response:
        self.responses.append({"name": request.match_info["name"], **(await request.json())})
        return web.json_response({"ok": True})

    # -- Socket Mode ---------------------------------------------------------------------
    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": 1, "debug_info": {}})
        self._connected.set()
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                data = json.loads(msg.data)
                envelope_id = data.get("envelope_id")
                if envelope_id:
                    self.socket_acks[envelope_id] = data
                    waiter = self._ack_waiters.pop(envelope_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(data)
        self._sockets.remove(ws)
        return ws

    async def wait_connected(self) -> None:
        """Wait (up to ten seconds) for a Socket Mode client to connect."""
        await asyncio.wait_for(self._connected.wait(), 10.0)

    async def envelope(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Send one Socket Mode envelope; return the client's acknowledgement."""
        envelope_id = f"env-{next(self._ts)}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._ack_waiters[envelope_id] = waiter
        await self._sockets[-1].send_json(
            {
                "envelope_id": envelope_id,
                "type": kind,
                "payload": payload,
                "accepts_response_payload": kind != "events_api",
                "retry_attempt": 0,
                "retry_reason": "",
            }
        )
        return await asyncio.wait_for(waiter, 10.0)


# -- requests to the bot, signed the way Slack signs them ----------------------------------


def sign(body: str, timestamp: int, secret: str = SIGNING_SECRET) -> str:
    """Slack's ``v0=`` signature: HMAC-SHA256 over ``v0:{timestamp}:{body}``."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(
    body: str,
    *,
    content_type: str = "application/x-www-form-urlencoded",
    timestamp: int | None = None,
    secret: str = SIGNING_SECRET,
) -> dict[str, str]:
    """The headers of a request Slack sends to the bot."""
    stamp = int(time.time()) if timestamp is None else timestamp
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": str(stamp),
        "X-Slack-Signature": sign(body, stamp, secret),
    }


_TRIGGERS = itertools.count(1)


def trigger_id() -> str:
    """A fresh trigger id (unique per interaction, like Slack's)."""
    return f"{next(_TRIGGERS)}.{TEAM}.{hashlib.sha1(str(time.time()).encode()).hexdigest()[:16]}"


def command_body(
    text: str,
    *,
    user: str = "U1",
    channel: str = "C1",
    command: str = "/signoff",
    response_url: str = "",
    trigger: str | None = None,
) -> str:
    """A slash command request body (form-encoded)."""
    return urllib.parse.urlencode(
        {
            "token": "legacy-verification-token",
            "team_id": TEAM,
            "team_domain": "test",
            "channel_id": channel,
            "channel_name": "general",
            "user_id": user,
            "user_name": user.lower(),
            "command": command,
            "text": text,
            "api_app_id": "A1",
            "response_url": response_url,
            "trigger_id": trigger or trigger_id(),
        }
    )


def click_payload(
    action_id: str,
    value: str,
    *,
    user: str = "U1",
    channel: str = "C1",
    message: dict[str, Any] | None = None,
    response_url: str = "",
    trigger: str | None = None,
) -> dict[str, Any]:
    """A ``block_actions`` payload for one button click."""
    message = message or {"ts": "1.000001", "text": "card"}
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM},
        "api_app_id": "A1",
        "token": "legacy-verification-token",
        "container": {
            "type": "message",
            "message_ts": message.get("ts"),
            "channel_id": channel,
            "is_ephemeral": False,
        },
        "trigger_id": trigger or trigger_id(),
        "team": {"id": TEAM, "domain": "test"},
        "channel": {"id": channel, "name": "general"},
        "message": message,
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": "signoff:x",
                "text": {"type": "plain_text", "text": "Allow"},
                "value": value,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def submission_payload(
    view: dict[str, Any], values: dict[str, dict[str, Any]], *, user: str = "U1"
) -> dict[str, Any]:
    """A ``view_submission`` payload for a modal the bot opened, with these state values."""
    return {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "test"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM},
        "api_app_id": "A1",
        "token": "legacy-verification-token",
        "trigger_id": trigger_id(),
        "view": {
            **view,
            "id": "V1",
            "team_id": TEAM,
            "hash": f"{time.time():.6f}",
            "state": {"values": values},
        },
    }


def interaction_body(payload: dict[str, Any]) -> str:
    """An interaction request body: form-encoded ``payload=<json>``."""
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def event_body(event: dict[str, Any], *, event_id: str = "Ev1") -> str:
    """An Events API request body (JSON)."""
    return json.dumps(
        {
            "token": "legacy-verification-token",
            "team_id": TEAM,
            "api_app_id": "A1",
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [
                {"team_id": TEAM, "user_id": BOT_USER, "is_bot": True, "enterprise_id": None}
            ],
        }
    )


def text_input(value: str) -> dict[str, Any]:
    """A ``plain_text_input`` state value."""
    return {"value": {"type": "plain_text_input", "value": value}}


def selected(value: str) -> dict[str, Any]:
    """A ``static_select`` state value (the option's value)."""
    return {"value": {"type": "static_select", "selected_option": {"value": value}}}
