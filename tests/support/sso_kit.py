"""Single sign-on test kit: OpenID Connect providers on 127.0.0.1 and a console to sign in
to.

- `MockProvider` runs `oidc_provider_mock` (a real provider made for tests: discovery,
  JWKS, authorization form, token endpoint, ID tokens signed by authlib) in a thread.
- `CodeIdp` is `fake_oidc.FakeIdp` with ``/authorize`` and ``/token``: it approves at once,
  checks the PKCE verifier against the challenge, and lets the test bend the ID token
  (nonce, issuer, audience, expiry) or answer with an error.
- `serve_console` runs `signoff serve`'s process (`bot.bootstrap.build_service`) in the
  test's event loop with single sign-on configured.
- `ConsoleClient` drives the console over HTTP with aiohttp, cookies kept.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import secrets
import socket
import threading
import warnings
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import aiohttp
import pytest
import werkzeug.serving
from aiohttp import web
from fake_oidc import FakeIdp, new_key
from yarl import URL

from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings
from runtime import Agent
from runtime.store.sql import SQLStore

with warnings.catch_warnings():
    # The provider imports authlib's deprecated jose module (authlib's own filter, set
    # when it is first imported, shows such warnings always: imported first, then
    # ignored here).
    import authlib.deprecate  # type: ignore[import-untyped]  # noqa: F401

    warnings.simplefilter("ignore")
    import oidc_provider_mock
    from oidc_provider_mock import User

PROVIDER_WARNINGS = [
    # The provider (a test dependency) uses authlib interfaces authlib now deprecates.
    pytest.mark.filterwarnings("ignore:authlib.jose module is deprecated"),
    pytest.mark.filterwarnings("ignore:get_jwt_config:DeprecationWarning"),
]
"""Marks for the tests of a module that runs `MockProvider`."""
CLIENT_ID = "signoff-console"
OPERATOR_TOKEN = "sso-operator-token-0123456789"
COOKIE_SECRET = "c" * 32


class MockProvider:
    """`oidc_provider_mock` on 127.0.0.1 (a free port), in a thread, with these users."""

    def __init__(self, users: Mapping[str, Mapping[str, Any]]) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            app = oidc_provider_mock.app(
                require_nonce=True,
                user_claims=[User(sub=sub, claims=dict(claims)) for sub, claims in users.items()],
            )
        self._server = werkzeug.serving.make_server("127.0.0.1", 0, app, threaded=True)
        self.issuer = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="oidc-provider-mock"
        )

    def __enter__(self) -> MockProvider:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._thread.join(10)
        self._server.server_close()
        assert not self._thread.is_alive()


class CodeIdp(FakeIdp):
    """A provider that approves every authorization request at once (no form).

    Attributes:
        error: Answer authorization requests with this error instead of a code.
        claims: Claims of the next ID tokens over the standard ones (None removes one).
        lifetime: Seconds the next ID tokens are valid (negative: already expired).
        pkce_checked: Codes redeemed with the right PKCE verifier.
    """

    def __init__(self) -> None:
        super().__init__([new_key("k1")])
        self.error: str | None = None
        self.claims: dict[str, Any] = {}
        self.lifetime = 300.0
        self.codes: dict[str, dict[str, str]] = {}
        self.pkce_checked = 0

    async def start(self) -> CodeIdp:
        """Serve on 127.0.0.1, a free port."""
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_get("/authorize", self._authorize)
        app.router.add_post("/token", self._token)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def _discovery(self, request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        return web.json_response(
            {
                "issuer": self.issuer,
                "jwks_uri": f"{self.url}/jwks",
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
            }
        )

    async def _authorize(self, request: web.Request) -> web.Response:
        query = request.query
        target = query["redirect_uri"]
        if self.error is not None:
            answer = {"error": self.error, "state": query["state"]}
        else:
            code = secrets.token_urlsafe(16)
            self.codes[code] = dict(query)
            answer = {"code": code, "state": query["state"]}
        return web.Response(status=302, headers={"Location": f"{target}?{urlencode(answer)}"})

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        asked = self.codes.pop(str(form.get("code")), None)
        if asked is None:
            return web.json_response({"error": "invalid_grant"}, status=400)
        verifier = str(form.get("code_verifier", ""))
        challenge = (
            base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
            .rstrip(b"=")
            .decode()
        )
        if asked.get("code_challenge_method") != "S256" or challenge != asked["code_challenge"]:
            return web.json_response({"error": "invalid_grant"}, status=400)
        if form.get("redirect_uri") != asked["redirect_uri"]:
            return web.json_response({"error": "invalid_grant"}, status=400)
        self.pkce_checked += 1
        claims: dict[str, Any] = {
            "aud": asked["client_id"],
            "nonce": asked.get("nonce"),
            "email": "alice@example.com",
            **self.claims,
        }
        id_token = self.token(lifetime=self.lifetime, **claims)
        return web.json_response(
            {
                "access_token": "at-" + secrets.token_urlsafe(8),
                "token_type": "Bearer",
                "id_token": id_token,
            }
        )


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the console's public URL must name it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Console:
    """A running console."""

    url: str
    service: Service
    db: Path


@contextlib.asynccontextmanager
async def serve_console(
    tmp_path: Path, issuer: str, agents: list[Agent], **settings: Any
) -> AsyncIterator[Console]:
    """`signoff serve` in this event loop, single sign-on with `issuer` configured."""
    path = tmp_path / "signoff.db"
    store = SQLStore.sqlite(path)
    await store.migrate()
    port = free_port()
    config = Settings.model_validate(
        {
            "database_url": f"sqlite+aiosqlite:///{path}",
            "operator_token": OPERATOR_TOKEN,
            "cookie_secret": COOKIE_SECRET,
            "bind_host": "127.0.0.1",
            "port": port,
            "public_url": f"http://127.0.0.1:{port}",
            "poll_seconds": 0.1,
            "oidc_issuer": issuer,
            "oidc_audience": "signoff-api",
            "oidc_client_id": CLIENT_ID,
            "oidc_user_claim": "email",
            "oidc_operator_groups": "sre",
            **settings,
        }
    )
    service = await build_service(
        config,
        agents=agents,
        store=store,
        parts=Parts(outbox=False, deadlines=False, wake_ups=False, discord=False),
    )
    url = await service.start()
    try:
        yield Console(url, service, path)
    finally:
        await service.stop(grace_seconds=5)
        await store.close()


@dataclass(frozen=True)
class Page:
    """Where a request ended: status, path and body."""

    status: int
    path: str
    text: str


_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The CSRF token of the page's first form."""
    found = _CSRF.search(html)
    assert found is not None, html
    return found.group(1)


class ConsoleClient:
    """A browser-like HTTP client of the console (cookies kept, IP hosts included)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))

    async def close(self) -> None:
        await self.http.close()

    async def leave_for_provider(self, next_page: str = "/runs") -> str:
        """Press "Sign in with ..." and return the provider URL it leads to."""
        async with self.http.get(self.url + "/login") as page:
            assert page.status == 200
            csrf = csrf_of(await page.text())
        async with self.http.post(
            self.url + "/login/sso",
            data={"csrf": csrf, "next": next_page},
            allow_redirects=False,
        ) as response:
            assert response.status == 303, await response.text()
            return response.headers["Location"]

    async def approve_at_mock(self, authorize_url: str, sub: str, action: str = "") -> str:
        """Submit the mock provider's form as `sub`; return the callback URL it sends to."""
        form = {"action": action} if action else {"sub": sub}
        async with self.http.post(authorize_url, data=form, allow_redirects=False) as answer:
            assert answer.status == 302, await answer.text()
            location = answer.headers["Location"]
        assert location.startswith(self.url + "/login/sso/callback?"), location
        return location

    async def come_back(self, callback_url: str) -> Page:
        """Follow the provider's redirect back to the console (and on)."""
        async with self.http.get(callback_url) as response:
            return Page(response.status, response.url.path_qs, await response.text())

    async def sign_in(self, sub: str, next_page: str = "/runs") -> Page:
        """The whole flow at the mock provider, as `sub`."""
        authorize = await self.leave_for_provider(next_page)
        return await self.come_back(await self.approve_at_mock(authorize, sub))

    def set_cookie(self, name: str, value: str) -> None:
        """Put a cookie of the console in this client's jar (a copied cookie)."""
        self.http.cookie_jar.update_cookies({name: value}, URL(self.url))

    async def page(self, path: str) -> Page:
        """GET `path`, following redirects."""
        async with self.http.get(self.url + path) as response:
            return Page(response.status, response.url.path_qs, await response.text())

    def cookie(self, name: str) -> str | None:
        found = [c.value for c in self.http.cookie_jar if c.key == name]
        return found[0] if found else None


def with_query(url: str, **changes: str) -> str:
    """`url` with some query parameters replaced."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update(changes)
    return parts._replace(query=urlencode(query)).geturl()
