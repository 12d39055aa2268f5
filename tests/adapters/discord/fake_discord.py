"""A local Discord: enough REST and gateway for the real discord.py client and our notifier.

REST under ``/api/v10``: ``/users/@me``, ``/oauth2/applications/@me``, ``/gateway(/bot)``,
command sync (global and per guild), channel messages (post, edit, get), interaction
callbacks ``/interactions/{id}/{token}/callback`` (no ``Authorization``: the token is in
the URL; ``?with_response=`` accepted) and follow-up webhooks ``/webhooks/{app}/{token}``.
Every answer is JSON with ``Content-Type: application/json`` exactly — discord.py parses a
body only then.

Gateway at ``/gateway``: HELLO (op 10), IDENTIFY (op 2, token checked), READY with one
unavailable guild followed by its GUILD_CREATE (roles, a channel), heartbeats (op 1 ->
op 11), RESUME answered with INVALID_SESSION, and INTERACTION_CREATE dispatches pushed by
the test (`FakeDiscord.interact`), each with ``attachment_size_limit``.

Tests read what the bot did from `messages` (channel messages by id), `interactions`
(each one's callbacks and follow-ups) and `requests`; `fail_next` makes the next matching
REST call fail (429, 403 ...).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

TOKEN = "fake-bot-token"
APP_ID = 900000000000000001
BOT_ID = 900000000000000002
GUILD_ID = 800000000000000001
CHANNEL_ID = 800000000000000002
THREAD_ID = 800000000000000003
ATTACHMENT_SIZE_LIMIT = 26_214_400
MANAGE_GUILD = 1 << 5


@dataclass(frozen=True)
class User:
    """A person in the fake guild."""

    id: int
    name: str
    roles: tuple[int, ...] = ()
    permissions: int = 0

    def payload(self) -> dict[str, Any]:
        """The Discord user object."""
        return {
            "id": str(self.id),
            "username": self.name,
            "global_name": self.name.capitalize(),
            "discriminator": "0",
            "avatar": None,
            "bot": False,
            "public_flags": 0,
        }

    def member(self) -> dict[str, Any]:
        """The Discord guild member object (as interactions carry it)."""
        return {
            "user": self.payload(),
            "nick": None,
            "avatar": None,
            "roles": [str(role) for role in self.roles],
            "joined_at": "2025-01-01T00:00:00+00:00",
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "flags": 0,
            "pending": False,
            "permissions": str(self.permissions),
            "communication_disabled_until": None,
        }


@dataclass
class InteractionRecord:
    """One interaction the test pushed, and how the bot answered it."""

    payload: dict[str, Any]
    callbacks: list[dict[str, Any]] = field(default_factory=list)
    followups: list[dict[str, Any]] = field(default_factory=list)
    original: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        """The interaction id."""
        return str(self.payload["id"])

    @property
    def token(self) -> str:
        """The interaction token."""
        return str(self.payload["token"])

    def texts(self) -> list[str]:
        """Every message text the bot answered with (callback, or original, and follow-ups)."""
        found: list[str] = []

        def read(message: dict[str, Any]) -> None:
            if message.get("content"):
                found.append(str(message["content"]))
            found.extend(str(e.get("description", "")) for e in message.get("embeds") or [])

        deferred = bool(self.callbacks) and self.callbacks[0]["type"] == 5
        for callback in self.callbacks:
            if callback["type"] in (4, 7):
                read(callback.get("data") or {})
        if deferred and self.original is not None:
            read(self.original)
        for message in self.followups:
            if message is not self.original:
                read(message)
        return found

    @property
    def text(self) -> str:
        """All answer texts joined."""
        return "\n".join(self.texts())

    @property
    def answered(self) -> bool:
        """Whether the bot sent a callback."""
        return bool(self.callbacks)

    @property
    def ephemeral(self) -> bool:
        """Whether the first visible answer was ephemeral."""
        for callback in self.callbacks:
            flags = int((callback.get("data") or {}).get("flags") or 0)
            if callback["type"] in (4, 5):
                return bool(flags & 64)
        return False

    @property
    def modal(self) -> dict[str, Any] | None:
        """The modal the bot opened, if it answered with one."""
        for callback in self.callbacks:
            if callback["type"] == 9:
                data: dict[str, Any] = callback["data"]
                return data
        return None


@dataclass
class _Failure:
    method: str
    path: re.Pattern[str]
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


class _Session:
    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.seq = 0
        self.ready = False
        self.session_id = secrets.token_hex(8)

    async def dispatch(self, event: str, data: Any) -> None:
        self.seq += 1
        await self.ws.send_str(json.dumps({"op": 0, "t": event, "s": self.seq, "d": data}))


class FakeDiscord:
    """The fake Discord: start it, point the bot at `api_base_url` and `gateway_url`."""

    def __init__(self, *, roles: dict[int, str] | None = None) -> None:
        self.roles = roles or {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.channel_log: list[dict[str, Any]] = []
        self.interactions: dict[str, InteractionRecord] = {}
        self.commands: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[tuple[str, str]] = []
        self.identifies: list[dict[str, Any]] = []
        self._failures: list[_Failure] = []
        self._sessions: list[_Session] = []
        self._ids = itertools.count(1_000_000_000_000_000_000)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.refuse_gateway = 0
        """How many coming websocket handshakes to answer 503."""
        self.refused_handshakes = 0

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on 127.0.0.1, a free port."""
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        """Close every gateway connection and stop listening."""
        for session in list(self._sessions):
            await session.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_base_url(self) -> str:
        """The REST base, as ``SIGNOFF_DISCORD_API_BASE_URL``."""
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        """The gateway, as ``SIGNOFF_DISCORD_GATEWAY_URL``."""
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def connected(self) -> int:
        """Gateway sessions that identified."""
        return sum(1 for s in self._sessions if s.ready and not s.ws.closed)

    def fail_next(
        self,
        method: str,
        path: str,
        status: int,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Make the next `method` request whose path matches the regex `path` fail."""
        self._failures.append(_Failure(method, re.compile(path), status, body or {}, headers or {}))

    # -- what the bot posted -------------------------------------------------------------
    def channel_messages(self, channel_id: int = CHANNEL_ID) -> list[dict[str, Any]]:
        """Non-ephemeral messages in a channel, oldest first (current versions)."""
        return [
            self.messages[m["id"]] for m in self.channel_log if m["channel_id"] == str(channel_id)
        ]

    def cards(self, channel_id: int = CHANNEL_ID) -> list[dict[str, Any]]:
        """Channel messages with buttons (approval, input and uncertain cards)."""
        return [m for m in self.channel_messages(channel_id) if m.get("components")]

    async def wait_for(
        self, check: Callable[[], Any], *, seconds: float = 10.0, what: str = "condition"
    ) -> Any:
        """Poll until `check()` is truthy; return its value."""
        deadline = time.monotonic() + seconds
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    # -- interactions --------------------------------------------------------------------
    def _base(self, kind: int, user: User, channel_id: int = CHANNEL_ID) -> dict[str, Any]:
        interaction_id = str(next(self._ids))
        return {
            "id": interaction_id,
            "application_id": str(APP_ID),
            "type": kind,
            "token": "itok-" + secrets.token_urlsafe(24),
            "version": 1,
            "guild_id": str(GUILD_ID),
            "guild": {"id": str(GUILD_ID), "locale": "en-US", "features": []},
            "channel_id": str(channel_id),
            "channel": self._channel(channel_id),
            "member": user.member(),
            "app_permissions": str((1 << 11) | (1 << 14) | (1 << 16)),
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(GUILD_ID)},
            "context": 0,
            "attachment_size_limit": ATTACHMENT_SIZE_LIMIT,
        }

    def slash(
        self, user: User, sub: str, channel_id: int = CHANNEL_ID, **options: str
    ) -> dict[str, Any]:
        """An ``/agent <sub> ...`` command interaction."""
        payload = self._base(2, user, channel_id)
        payload["data"] = {
            "id": self._command_id("agent"),
            "name": "agent",
            "type": 1,
            "guild_id": str(GUILD_ID),
            "options": [
                {
                    "type": 1,
                    "name": sub,
                    "options": [
                        {"type": 3, "name": key, "value": value} for key, value in options.items()
                    ],
                }
            ],
        }
        return payload

    def autocomplete(self, user: User, focused: str) -> dict[str, Any]:
        """The autocomplete interaction of ``/agent run agent:<focused>``."""
        payload = self._base(4, user)
        payload["data"] = {
            "id": self._command_id("agent"),
            "name": "agent",
            "type": 1,
            "guild_id": str(GUILD_ID),
            "options": [
                {
                    "type": 1,
                    "name": "run",
                    "options": [{"type": 3, "name": "agent", "value": focused, "focused": True}],
                }
            ],
        }
        return payload

    def click(
        self, user: User, message: dict[str, Any], label: str, *, custom_id: str | None = None
    ) -> dict[str, Any]:
        """A click on the button labelled `label` of a posted message.

        With `custom_id`, the button is given that id first, as if the message itself had
        been forged (Discord only delivers ids of components the message really has).
        """
        current = copy.deepcopy(self.messages[message["id"]])
        button = next(
            (
                c
                for row in current.get("components", [])
                for c in row.get("components", [])
                if c.get("label") == label
            ),
            None,
        )
        assert button is not None, f"no button {label!r} on message {message['id']}"
        if custom_id is not None:
            button["custom_id"] = custom_id
        payload = self._base(3, user, int(current["channel_id"]))
        payload["message"] = current
        payload["data"] = {"custom_id": button["custom_id"], "component_type": 2}
        return payload

    def submit(self, user: User, modal: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
        """Submit a modal the bot opened, with `values` by input custom_id."""
        rows = []
        for row in modal.get("components", []):
            for component in row.get("components", []):
                custom_id = component["custom_id"]
                rows.append(
                    {
                        "type": 1,
                        "components": [
                            {"type": 4, "custom_id": custom_id, "value": values.get(custom_id, "")}
                        ],
                    }
                )
        payload = self._base(5, user)
        payload["data"] = {"custom_id": modal["custom_id"], "components": rows}
        return payload

    async def interact(self, payload: dict[str, Any]) -> InteractionRecord:
        """Push an INTERACTION_CREATE to every identified session (a redelivery too)."""
        record = self.interactions.get(str(payload["id"]))
        if record is None:
            record = InteractionRecord(payload)
            self.interactions[record.id] = record
        sessions = [s for s in self._sessions if s.ready and not s.ws.closed]
        assert sessions, "no bot is connected to the fake gateway"
        for session in sessions:
            await session.dispatch("INTERACTION_CREATE", payload)
        return record

    async def answered(self, record: InteractionRecord, *, seconds: float = 10.0) -> str:
        """Wait until the bot's answer has text (a follow-up after a deferral too)."""
        await self.wait_for(
            lambda: record.texts() or record.modal, seconds=seconds, what="an answer"
        )
        return record.text

    # -- REST ------------------------------------------------------------------------------
    def _json(
        self, body: Any, status: int = 200, headers: dict[str, str] | None = None
    ) -> web.Response:
        # Exactly `application/json`: discord.py only parses a body with that content type.
        return web.Response(
            body=json.dumps(body).encode(),
            status=status,
            headers={"Content-Type": "application/json", **(headers or {})},
        )

    def _error(self, status: int, code: int, message: str) -> web.Response:
        return self._json({"message": message, "code": code}, status)

    async def _rest(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        method = request.method
        self.requests.append((method, path))
        for failure in list(self._failures):
            if failure.method == method and failure.path.search(path):
                self._failures.remove(failure)
                return self._json(failure.body, failure.status, failure.headers)
        body: Any = None
        if request.can_read_body:
            body = json.loads(await request.read() or b"null")
        public = path.startswith(("/interactions/", "/webhooks/"))
        if not public and request.headers.get("Authorization") != f"Bot {TOKEN}":
            return self._error(401, 0, "401: Unauthorized")
        for pattern, handler in self._routes():
            found = re.fullmatch(pattern, f"{method} {path}")
            if found:
                return await handler(request, body, *found.groups())
        return self._error(404, 0, f"404: Not Found ({method} {path})")

    def _routes(self) -> list[tuple[str, Any]]:
        return [
            (r"GET /users/@me", self._me),
            (r"GET /oauth2/applications/@me", self._application),
            (r"GET /gateway(?:/bot)?", self._gateway_info),
            (r"(PUT|GET) /applications/\d+/commands", self._commands),
            (r"(PUT|GET) /applications/\d+/guilds/(\d+)/commands", self._guild_commands),
            (r"POST /channels/(\d+)/messages", self._post_message),
            (r"PATCH /channels/(\d+)/messages/(\d+)", self._edit_message),
            (r"GET /channels/(\d+)/messages/(\d+)", self._get_message),
            (r"POST /interactions/(\d+)/([^/]+)/callback", self._callback),
            (r"POST /webhooks/\d+/([^/]+)", self._followup),
            (r"(PATCH|GET) /webhooks/\d+/([^/]+)/messages/@original", self._original),
        ]

    def bot_user(self) -> dict[str, Any]:
        """The bot's user object."""
        return {
            "id": str(BOT_ID),
            "username": "signoff",
            "global_name": "signoff",
            "discriminator": "0",
            "avatar": None,
            "bot": True,
            "verified": True,
            "mfa_enabled": False,
            "flags": 0,
            "public_flags": 0,
        }

    async def _me(self, request: web.Request, body: Any) -> web.Response:
        return self._json(self.bot_user())

    async def _application(self, request: web.Request, body: Any) -> web.Response:
        return self._json(
            {
                "id": str(APP_ID),
                "name": "signoff",
                "icon": None,
                "description": "signoff test application",
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": {**self.bot_user(), "id": "700000000000000001", "bot": False},
                "verify_key": "0" * 64,
                "flags": 0,
                "team": None,
                "summary": "",
                "rpc_origins": [],
                "interactions_endpoint_url": None,
            }
        )

    async def _gateway_info(self, request: web.Request, body: Any) -> web.Response:
        return self._json(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 1000,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    def _stored_commands(self, key: str, body: Any, guild: str | None) -> list[dict[str, Any]]:
        stored = []
        for command in body or []:
            stored.append(
                {
                    "id": self._command_id(command["name"]),
                    "application_id": str(APP_ID),
                    "version": str(next(self._ids)),
                    "type": 1,
                    "default_member_permissions": None,
                    "nsfw": False,
                    "options": [],
                    **command,
                    **({"guild_id": guild} if guild else {}),
                }
            )
        self.commands[key] = stored
        return stored

    def _command_id(self, name: str) -> str:
        for commands in self.commands.values():
            for command in commands:
                if command["name"] == name and "id" in command:
                    return str(command["id"])
        return str(abs(hash(name)) % 10**18)

    async def _commands(self, request: web.Request, body: Any, method: str) -> web.Response:
        if method == "PUT":
            return self._json(self._stored_commands("global", body, None))
        return self._json(self.commands.get("global", []))

    async def _guild_commands(
        self, request: web.Request, body: Any, method: str, guild: str
    ) -> web.Response:
        if method == "PUT":
            return self._json(self._stored_commands(guild, body, guild))
        return self._json(self.commands.get(guild, []))

    def _message(self, channel_id: str, body: dict[str, Any], *, flags: int = 0) -> dict[str, Any]:
        return {
            "id": str(next(self._ids)),
            "channel_id": channel_id,
            "guild_id": str(GUILD_ID),
            "type": 0,
            "author": self.bot_user(),
            "content": body.get("content") or "",
            "embeds": body.get("embeds") or [],
            "components": body.get("components") or [],
            "attachments": [],
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "pinned": False,
            "tts": False,
            "timestamp": datetime.now(UTC).isoformat(),
            "edited_timestamp": None,
            "flags": flags | int(body.get("flags") or 0),
            "allowed_mentions": body.get("allowed_mentions"),
        }

    def _channel(self, channel_id: int) -> dict[str, Any]:
        if channel_id == THREAD_ID:
            return {
                "id": str(THREAD_ID),
                "type": 11,
                "guild_id": str(GUILD_ID),
                "name": "release thread",
                "parent_id": str(CHANNEL_ID),
                "owner_id": "700000000000000001",
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": "2025-01-01T00:00:00+00:00",
                    "locked": False,
                },
                "message_count": 0,
                "member_count": 1,
                "rate_limit_per_user": 0,
                "flags": 0,
            }
        return {
            "id": str(channel_id),
            "type": 0,
            "guild_id": str(GUILD_ID),
            "name": "approvals",
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "rate_limit_per_user": 0,
            "topic": None,
            "last_message_id": None,
            "flags": 0,
        }

    async def _post_message(self, request: web.Request, body: Any, channel: str) -> web.Response:
        if int(channel) not in (CHANNEL_ID, THREAD_ID):
            return self._error(404, 10003, "Unknown Channel")
        message = self._message(channel, body)
        self.messages[message["id"]] = message
        self.channel_log.append({"id": message["id"], "channel_id": channel})
        return self._json(message)

    async def _edit_message(
        self, request: web.Request, body: Any, channel: str, message_id: str
    ) -> web.Response:
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel:
            return self._error(404, 10008, "Unknown Message")
        for key in ("content", "embeds", "components", "flags", "allowed_mentions"):
            if key in body:
                message[key] = body[key]
        message["edited_timestamp"] = datetime.now(UTC).isoformat()
        message.setdefault("edits", 0)
        message["edits"] += 1
        return self._json(message)

    async def _get_message(
        self, request: web.Request, body: Any, channel: str, message_id: str
    ) -> web.Response:
        message = self.messages.get(message_id)
        if message is None:
            return self._error(404, 10008, "Unknown Message")
        return self._json(message)

    async def _callback(
        self, request: web.Request, body: Any, interaction_id: str, token: str
    ) -> web.Response:
        record = self.interactions.get(interaction_id)
        if record is None or record.token != token:
            return self._error(404, 10062, "Unknown interaction")
        if record.callbacks:
            return self._error(400, 40060, "Interaction has already been acknowledged.")
        record.callbacks.append(body)
        kind = int(body["type"])
        data = body.get("data") or {}
        flags = int(data.get("flags") or 0)
        resource: dict[str, Any] = {"type": kind}
        response_message_id = None
        if kind == 4:
            message = self._message(record.payload["channel_id"], data, flags=flags)
            record.original = message
            if not flags & 64:
                self.messages[message["id"]] = message
                self.channel_log.append({"id": message["id"], "channel_id": message["channel_id"]})
            resource["message"] = message
            response_message_id = message["id"]
        elif kind == 5:
            record.original = self._message(record.payload["channel_id"], {}, flags=flags | 128)
            response_message_id = record.original["id"]
        elif kind == 7 and "message" in record.payload:
            message = self.messages[record.payload["message"]["id"]]
            for key in ("content", "embeds", "components"):
                if key in data:
                    message[key] = data[key]
            resource["message"] = message
        answer = {
            "interaction": {
                "id": interaction_id,
                "type": record.payload["type"],
                "response_message_id": response_message_id,
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(flags & 64),
            },
            "resource": resource,
        }
        if request.query.get("with_response") in ("1", "true", "True"):
            return self._json(answer)
        return web.Response(status=204)

    def _record_by_token(self, token: str) -> InteractionRecord | None:
        return next((r for r in self.interactions.values() if r.token == token), None)

    async def _followup(self, request: web.Request, body: Any, token: str) -> web.Response:
        record = self._record_by_token(token)
        if record is None or not record.callbacks:
            return self._error(404, 10015, "Unknown Webhook")
        flags = int((body or {}).get("flags") or 0)
        deferred = record.callbacks[0]["type"] == 5
        if (
            deferred
            and record.original is not None
            and not record.original.get("content")
            and (not record.original.get("embeds"))
            and not record.followups
        ):
            # The first follow-up after a "thinking" deferral replaces the loading message.
            record.original.update(
                content=body.get("content") or "", embeds=body.get("embeds") or []
            )
            message = record.original
        else:
            message = self._message(record.payload["channel_id"], body, flags=flags)
        record.followups.append(message)
        if not (flags & 64) and not (int(message.get("flags") or 0) & 64):
            self.messages[message["id"]] = message
            self.channel_log.append({"id": message["id"], "channel_id": message["channel_id"]})
        return self._json(message)

    async def _original(
        self, request: web.Request, body: Any, method: str, token: str
    ) -> web.Response:
        record = self._record_by_token(token)
        if record is None or record.original is None:
            return self._error(404, 10008, "Unknown Message")
        if method == "PATCH":
            for key in ("content", "embeds", "components"):
                if key in body:
                    record.original[key] = body[key]
        return self._json(record.original)

    # -- gateway ---------------------------------------------------------------------------
    def guild(self) -> dict[str, Any]:
        """The GUILD_CREATE payload of the one guild."""
        roles = [
            {
                "id": str(GUILD_ID),
                "name": "@everyone",
                "permissions": "0",
                "position": 0,
                "color": 0,
                "hoist": False,
                "managed": False,
                "mentionable": False,
                "flags": 0,
            }
        ] + [
            {
                "id": str(role_id),
                "name": name,
                "permissions": "0",
                "position": index + 1,
                "color": 0,
                "hoist": False,
                "managed": False,
                "mentionable": True,
                "flags": 0,
            }
            for index, (role_id, name) in enumerate(self.roles.items())
        ]
        return {
            "id": str(GUILD_ID),
            "name": "signoff test server",
            "icon": None,
            "owner_id": "700000000000000001",
            "unavailable": False,
            "large": False,
            "member_count": 3,
            "joined_at": "2025-01-01T00:00:00+00:00",
            "roles": roles,
            "channels": [self._channel(CHANNEL_ID)],
            "threads": [],
            "members": [],
            "voice_states": [],
            "presences": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "system_channel_flags": 0,
        }

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_gateway > 0:
            # A load balancer in trouble: the handshake is answered 503, not upgraded.
            self.refuse_gateway -= 1
            self.refused_handshakes += 1
            return web.Response(status=503, text="service unavailable")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        session = _Session(ws)
        self._sessions.append(session)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 45000}}))
        try:
            async for message in ws:
                if message.type is not WSMsgType.TEXT:
                    continue
                frame = json.loads(message.data)
                op = frame.get("op")
                if op == 1:
                    await ws.send_str(json.dumps({"op": 11}))
                elif op == 2:
                    await self._identify(session, frame["d"])
                elif op == 6:
                    # No resumes here: the client identifies again.
                    await ws.send_str(json.dumps({"op": 9, "d": False}))
        finally:
            self._sessions.remove(session)
        return ws

    async def _identify(self, session: _Session, data: dict[str, Any]) -> None:
        self.identifies.append(data)
        if data.get("token") != TOKEN:
            await session.ws.close(code=4004, message=b"Authentication failed.")
            return
        await session.dispatch(
            "READY",
            {
                "v": 10,
                "user": self.bot_user(),
                "guilds": [{"id": str(GUILD_ID), "unavailable": True}],
                "session_id": session.session_id,
                "resume_gateway_url": self.gateway_url,
                "application": {"id": str(APP_ID), "flags": 0},
                "private_channels": [],
                "relationships": [],
                "presences": [],
                "_trace": ["fake-discord"],
            },
        )
        await session.dispatch("GUILD_CREATE", self.guild())
        session.ready = True
