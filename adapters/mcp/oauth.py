"""OAuth for remote MCP servers, as the MCP authorization specification has it.

A server with ``auth = "oauth"`` in the agents file is signed in to by a person, from the
console: `SignIns.begin` discovers the server's authorization server (protected resource
metadata, then authorization server metadata), registers signoff as a client where the
server offers dynamic client registration (else the configured ``client_id``) and returns
the authorization URL (Authorization Code with PKCE); `SignIns.finish` takes the code the
browser brings back to the console and exchanges it for tokens.

Everything one server's sign-in needs (its client, tokens, metadata and any sign-in under
way) is one JSON record, sealed with Fernet (`SecretBox`) and kept by the store
(`Records`), so every replica uses the same sign-in and the database holds no token in the
clear. Connections authenticate with `SignIns.auth`: the SDK's `OAuthClientProvider`,
loading the shared record, refreshing an expired access token (and once more when the
server answers 401) and, when there is no token or the refresh is refused, failing the
connection with `SignInNeeded`, so the server's tools are unavailable until someone
signs in again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlencode

import httpx2
from cryptography.fernet import Fernet, InvalidToken
from mcp.client.auth import OAuthClientProvider, PKCEParameters, TokenStorage
from mcp.client.auth.oauth2 import OAuthContext, check_registration_usable
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import resource_url_from_server_url
from pydantic import AnyUrl, ValidationError

from adapters.mcp.config import HttpServer, redact_urls

CALLBACK_PATH = "/mcp/oauth/callback"
"""The console route the authorization server sends the browser back to."""

PENDING_SECONDS = 600.0
"""How long a started sign-in waits for the browser to come back."""

_REFRESH_MARGIN = 30.0  # refresh an access token this many seconds before it expires


class SignInNeeded(Exception):
    """The server uses OAuth and nobody is signed in to it (or its sign-in ended)."""

    shown_as_is = True  # its message is the reason a connection shows


class SignInRefused(ValueError):
    """A sign-in could not start or finish; the message says why, for people."""


class Records(Protocol):
    """Where sealed records are kept, one per server (the store, shared by replicas)."""

    async def read(self, server: str) -> str | None:
        """The sealed record of `server`, if any."""
        ...

    async def write(self, server: str, sealed: str) -> None:
        """Keep `sealed` as the record of `server`."""
        ...


class SecretBox:
    """Seals and opens records with Fernet (AES-128-CBC with HMAC-SHA256).

    Args:
        key: A Fernet key (``Fernet.generate_key()``) or any secret of 32 characters or
            more (its SHA-256 is the key).

    Raises:
        ValueError: The key is too short.
    """

    def __init__(self, key: str) -> None:
        try:
            self._fernet = Fernet(key.encode())
        except ValueError:
            if len(key) < 32:
                raise ValueError("must be a Fernet key or at least 32 characters") from None
            derived = base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest())
            self._fernet = Fernet(derived)

    def seal(self, value: dict[str, Any]) -> str:
        """`value` as JSON, encrypted and authenticated."""
        return self._fernet.encrypt(json.dumps(value).encode()).decode()

    def open(self, sealed: str) -> dict[str, Any] | None:
        """The value `sealed` holds; None when it was sealed with another key or altered."""
        try:
            value = json.loads(self._fernet.decrypt(sealed.encode()))
        except (InvalidToken, ValueError):
            return None
        return value if isinstance(value, dict) else None


@dataclass
class _Record:
    """What one server's sealed record holds."""

    client: OAuthClientInformationFull | None = None
    tokens: OAuthToken | None = None
    expires_at: float | None = None
    metadata: OAuthMetadata | None = None
    resource: ProtectedResourceMetadata | None = None
    signed_in_by: str | None = None
    signed_in_at: float | None = None
    ended: str | None = None  # why the last sign-in ended
    pending: dict[str, Any] | None = None  # state, verifier, by, at

    def dump(self) -> dict[str, Any]:
        def model(value: Any) -> Any:
            return None if value is None else value.model_dump(mode="json", exclude_none=True)

        return {
            "client": model(self.client),
            "tokens": model(self.tokens),
            "expires_at": self.expires_at,
            "metadata": model(self.metadata),
            "resource": model(self.resource),
            "signed_in_by": self.signed_in_by,
            "signed_in_at": self.signed_in_at,
            "ended": self.ended,
            "pending": self.pending,
        }

    @classmethod
    def load(cls, value: dict[str, Any]) -> _Record:
        def model(kind: Any, key: str) -> Any:
            found = value.get(key)
            return None if found is None else kind.model_validate(found)

        return cls(
            client=model(OAuthClientInformationFull, "client"),
            tokens=model(OAuthToken, "tokens"),
            expires_at=value.get("expires_at"),
            metadata=model(OAuthMetadata, "metadata"),
            resource=model(ProtectedResourceMetadata, "resource"),
            signed_in_by=value.get("signed_in_by"),
            signed_in_at=value.get("signed_in_at"),
            ended=value.get("ended"),
            pending=value.get("pending"),
        )


@dataclass(frozen=True)
class SignInStatus:
    """Where one OAuth server's sign-in stands, for the console and the command line.

    Attributes:
        server: The server's name.
        signed_in: Whether it has tokens.
        by: Who signed in (None: nobody yet).
        at: When.
        reason: Why someone must sign in (None when signed in).
    """

    server: str
    signed_in: bool
    by: str | None = None
    at: datetime | None = None
    reason: str | None = None


class SignIns:
    """The sign-ins of every MCP server that uses OAuth.

    Args:
        servers: The agents file's servers (those without ``oauth`` are left out).
        records: Where the sealed records are kept.
        box: Seals and opens them.
        redirect_uri: The console's callback URL (``<public URL>/mcp/oauth/callback``).
        clock: Seconds since the epoch.
        http: Makes the HTTP client for discovery, registration and token requests.
    """

    def __init__(
        self,
        servers: Sequence[HttpServer],
        records: Records,
        box: SecretBox,
        redirect_uri: str,
        *,
        clock: Callable[[], float] = time.time,
        http: Callable[[], httpx2.AsyncClient] | None = None,
    ) -> None:
        self.servers = {s.name: s for s in servers if s.oauth is not None}
        self.records = records
        self.box = box
        self.redirect_uri = redirect_uri
        self.clock = clock
        self._http = http or (lambda: httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)))
        self.on_signed_in: list[Callable[[str], None]] = []

    # -- records ---------------------------------------------------------------------------
    async def load(self, server: str) -> _Record:
        """The record of `server` (empty when none, or sealed with another key)."""
        sealed = await self.records.read(server)
        opened = self.box.open(sealed) if sealed is not None else None
        if opened is None:
            return _Record()
        try:
            return _Record.load(opened)
        except ValidationError:
            return _Record()

    async def save(self, server: str, record: _Record) -> None:
        """Seal and keep the record of `server`."""
        await self.records.write(server, self.box.seal(record.dump()))

    async def status(self) -> list[SignInStatus]:
        """Every OAuth server's sign-in, by name."""
        found = []
        for name in sorted(self.servers):
            record = await self.load(name)
            if record.tokens is not None:
                at = record.signed_in_at
                moment = datetime.fromtimestamp(at, UTC) if at is not None else None
                found.append(SignInStatus(name, True, record.signed_in_by, moment))
            else:
                found.append(SignInStatus(name, False, reason=_needs(name, record.ended)))
        return found

    # -- signing in ------------------------------------------------------------------------
    async def begin(self, server: str, by: str) -> str:
        """Start a sign-in to `server` for `by`; the URL to send their browser to.

        Raises:
            LookupError: No OAuth server has that name.
            SignInRefused: Discovery or registration failed (the message says why).
        """
        config = self.servers.get(server)
        if config is None or config.oauth is None:
            raise LookupError(server)
        record = await self.load(server)
        try:
            async with self._http() as http:
                resource, metadata, challenged = await self._discover(http, config.url)
                client = await self._client(http, config, record, metadata)
        except (httpx2.HTTPError, ValidationError, ValueError) as exc:
            raise SignInRefused(
                f"Cannot sign in to MCP server {server!r}: {redact_urls(str(exc))}"
            ) from None
        if metadata.authorization_endpoint is None:
            raise SignInRefused(f"MCP server {server!r}: the authorization server has no endpoint")
        pkce = PKCEParameters.generate()
        state = f"{server}.{secrets.token_urlsafe(24)}"
        params = {
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": self.redirect_uri,
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
            "resource": _resource(config.url, resource),
        }
        scope = " ".join(config.oauth.scopes) or challenged or _scopes(resource)
        if scope:
            params["scope"] = scope
        record.client, record.metadata, record.resource = client, metadata, resource
        record.pending = {
            "state": state,
            "verifier": pkce.code_verifier,
            "by": by,
            "at": self.clock(),
        }
        await self.save(server, record)
        return f"{metadata.authorization_endpoint}?{urlencode(params)}"

    async def finish(self, state: str, code: str | None, by: str, error: str | None = None) -> str:
        """Finish the sign-in `state` names with the authorization server's `code`.

        Returns:
            The server's name.

        Raises:
            SignInRefused: An unknown, expired or someone else's sign-in, an error from the
                authorization server, or a refused code.
        """
        server = state.split(".", 1)[0]
        if server not in self.servers:
            raise SignInRefused("This sign-in is not known: start it again.")
        record = await self.load(server)
        pending = record.pending
        if pending is None or not secrets.compare_digest(str(pending.get("state")), state):
            raise SignInRefused("This sign-in is not known or was replaced: start it again.")
        if pending.get("by") != by:
            raise SignInRefused("Someone else started this sign-in: start your own.")
        if self.clock() - float(pending.get("at", 0)) > PENDING_SECONDS:
            raise SignInRefused("This sign-in took too long: start it again.")
        record.pending = None
        if error is not None or not code:
            await self.save(server, record)
            raise SignInRefused(
                f"The authorization server did not sign you in to {server!r}: {error or 'no code'}."
            )
        assert record.client is not None and record.metadata is not None
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "client_id": record.client.client_id,
            "code_verifier": str(pending["verifier"]),
            "resource": _resource(self.servers[server].url, record.resource),
        }
        context = _context(self.servers[server], record)
        data, headers = context.prepare_token_auth(
            data, {"Content-Type": "application/x-www-form-urlencoded"}
        )
        try:
            async with self._http() as http:
                response = await http.post(
                    str(record.metadata.token_endpoint), data=data, headers=headers
                )
                if response.status_code != 200:
                    raise SignInRefused(
                        f"The authorization server refused the code for {server!r} "
                        f"(HTTP {response.status_code})."
                    )
                tokens = OAuthToken.model_validate_json(response.content)
        except (httpx2.HTTPError, ValidationError) as exc:
            await self.save(server, record)
            raise SignInRefused(f"No tokens for {server!r}: {redact_urls(str(exc))}") from None
        except SignInRefused:
            await self.save(server, record)
            raise
        record.tokens = tokens
        record.expires_at = _expiry(tokens, self.clock())
        record.signed_in_by, record.signed_in_at, record.ended = by, self.clock(), None
        await self.save(server, record)
        for listener in self.on_signed_in:
            listener(server)
        return server

    async def sign_out(self, server: str, why: str) -> None:
        """Forget the tokens of `server` (its client stays registered)."""
        record = await self.load(server)
        record.tokens, record.expires_at, record.ended = None, None, why
        await self.save(server, record)

    async def _discover(
        self, http: httpx2.AsyncClient, url: str
    ) -> tuple[ProtectedResourceMetadata | None, OAuthMetadata, str | None]:
        """The resource's metadata (RFC 9728), its authorization server's (RFC 8414) and
        the scope its 401 challenge names."""
        probe = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        challenged = extract_scope_from_www_auth(probe) if probe.status_code == 401 else None
        hinted = (
            extract_resource_metadata_from_www_auth(probe) if probe.status_code == 401 else None
        )
        resource = None
        for candidate in build_protected_resource_metadata_discovery_urls(hinted, url):
            found = await handle_protected_resource_response(
                await http.send(create_oauth_metadata_request(candidate))
            )
            if found is not None:
                resource = found
                break
        issuer = str(resource.authorization_servers[0]) if resource is not None else None
        for candidate in build_oauth_authorization_server_metadata_discovery_urls(issuer, url):
            ok, metadata = await handle_auth_metadata_response(
                await http.send(create_oauth_metadata_request(candidate))
            )
            if metadata is not None:
                return resource, metadata, challenged
            if not ok:
                break
        raise ValueError("the server publishes no authorization server metadata")

    async def _client(
        self,
        http: httpx2.AsyncClient,
        config: HttpServer,
        record: _Record,
        metadata: OAuthMetadata,
    ) -> OAuthClientInformationFull:
        """The configured client, the one registered before, or a new registration."""
        oauth = config.oauth
        assert oauth is not None
        if oauth.client_id is not None:
            return OAuthClientInformationFull(
                client_id=oauth.client_id,
                client_secret=oauth.client_secret,
                redirect_uris=[AnyUrl(self.redirect_uri)],
                token_endpoint_auth_method=(
                    "client_secret_basic" if oauth.client_secret else "none"
                ),
                grant_types=["authorization_code", "refresh_token"],
            )
        issuer = str(metadata.issuer)
        known = record.client
        if (
            known is not None
            and known.issuer == issuer
            and [str(u) for u in known.redirect_uris or []] == [self.redirect_uri]
        ):
            return known
        if metadata.registration_endpoint is None:
            raise ValueError(
                "the authorization server offers no dynamic client registration: "
                "set client_id (and client_secret_file) for this server"
            )
        request = create_client_registration_request(
            metadata, _client_metadata(self.redirect_uri, oauth.scopes), issuer
        )
        client = await handle_registration_response(await http.send(request))
        check_registration_usable(client)
        client.issuer = issuer
        return client

    # -- connections -----------------------------------------------------------------------
    def auth(self, server: str) -> httpx2.Auth:
        """Authentication for one connection to `server`: its shared tokens, refreshed
        when they expire; `SignInNeeded` when there are none."""
        return _SharedProvider(self, self.servers[server])


def _needs(server: str, ended: str | None) -> str:
    why = f" ({ended})" if ended else ""
    return (
        f"MCP server {server!r} needs an operator to sign in{why}: "
        "the console's MCP sign-in page (/mcp)"
    )


def _expiry(tokens: OAuthToken, now: float) -> float | None:
    return now + tokens.expires_in if tokens.expires_in is not None else None


def _resource(url: str, resource: ProtectedResourceMetadata | None) -> str:
    return str(resource.resource) if resource is not None else resource_url_from_server_url(url)


def _scopes(resource: ProtectedResourceMetadata | None) -> str | None:
    if resource is None or not resource.scopes_supported:
        return None
    return " ".join(resource.scopes_supported)


def _client_metadata(redirect_uri: str, scopes: Sequence[str]) -> OAuthClientMetadata:
    return OAuthClientMetadata(
        redirect_uris=[AnyUrl(redirect_uri)],
        client_name="signoff",
        grant_types=["authorization_code", "refresh_token"],
        token_endpoint_auth_method="none",
        scope=" ".join(scopes) or None,
        application_type="web",
    )


def _context(config: HttpServer, record: _Record) -> OAuthContext:
    return OAuthContext(
        server_url=config.url,
        client_metadata=_client_metadata("https://unused.invalid/", ()),
        storage=_NoStorage(),
        redirect_handler=None,
        callback_handler=None,
        client_info=record.client,
    )


class _NoStorage:
    async def get_tokens(self) -> OAuthToken | None:
        return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        return None

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        return None


class _Storage(TokenStorage):
    """The SDK's token storage over one server's shared record."""

    def __init__(self, sign_ins: SignIns, server: str) -> None:
        self.sign_ins = sign_ins
        self.server = server
        self.record = _Record()

    async def reload(self) -> _Record:
        self.record = await self.sign_ins.load(self.server)
        return self.record

    async def get_tokens(self) -> OAuthToken | None:
        return self.record.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        record = await self.sign_ins.load(self.server)
        record.tokens = tokens
        record.expires_at = _expiry(tokens, self.sign_ins.clock())
        await self.sign_ins.save(self.server, record)
        self.record = record

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.record.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        raise SignInNeeded(_needs(self.server, None))  # registration is the console's


class _SharedProvider(OAuthClientProvider):
    """The SDK's provider, on the shared record: never starts a sign-in itself."""

    def __init__(self, sign_ins: SignIns, config: HttpServer) -> None:
        self._storage = _Storage(sign_ins, config.name)
        self._sign_ins = sign_ins
        self._server = config.name
        self._connected = False  # a request went through with a token
        self.ended: str | None = None
        super().__init__(
            config.url,
            _client_metadata(sign_ins.redirect_uri, ()),
            self._storage,
            redirect_handler=self._no_redirect,
        )

    async def _no_redirect(self, url: str) -> None:
        raise SignInNeeded(_needs(self._server, None))

    async def _initialize(self) -> None:
        record = await self._storage.reload()
        context = self.context
        context.current_tokens = record.tokens
        context.client_info = record.client
        context.oauth_metadata = record.metadata
        context.protected_resource_metadata = record.resource
        if record.resource is not None and record.resource.authorization_servers:
            context.auth_server_url = str(record.resource.authorization_servers[0])
        context.token_expiry_time = (
            record.expires_at - _REFRESH_MARGIN if record.expires_at is not None else None
        )
        self._initialized = True

    async def _refreshed(self, held: OAuthToken | None, response: httpx2.Response) -> str | None:
        """Take a refresh's answer: None when there is a valid token now (another
        replica's, when it refreshed first); else why the sign-in ended (it is forgotten)."""
        if await self._handle_refresh_response(response):
            return None
        await self._initialize()  # another replica may have refreshed (and rotated) it
        tokens = self.context.current_tokens
        if (
            tokens is not None
            and held is not None
            and tokens.access_token != held.access_token
            and self.context.is_token_valid()
        ):
            return None
        why = f"the authorization server refused to refresh the token (HTTP {response.status_code})"
        await self._sign_ins.sign_out(self._server, why)
        return why

    def _ended(self, why: str | None) -> None:
        """Nobody is signed in any more. Before the connection is up, it fails with the
        reason; afterwards the request goes without a token (the server refuses it) and
        `ended` tells the call why."""
        reason = _needs(self._server, why)
        if not self._connected:
            raise SignInNeeded(reason)
        self.ended = reason

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        async with self.context.lock:
            if not self._initialized or self.context.current_tokens is None:
                await self._initialize()  # someone may have signed in since
            if self.context.current_tokens is None:
                self._ended(self._storage.record.ended)
            elif not self.context.is_token_valid() and self.context.can_refresh_token():
                held = self.context.current_tokens
                why = await self._refreshed(held, (yield await self._refresh_token()))
                if why is not None:
                    self._ended(why)
            if self.context.current_tokens is not None:
                self._add_auth_header(request)
        response = yield request
        if response.status_code != 401:
            self._connected = True
            return
        if self.ended is not None:
            return
        async with self.context.lock:
            if not self.context.can_refresh_token():
                why = "the MCP server refused the token"
                await self._sign_ins.sign_out(self._server, why)
                self._ended(why)
                return
            stale = self.context.current_tokens
            why = await self._refreshed(stale, (yield await self._refresh_token()))
            if why is not None:
                self._ended(why)
                return
            self._add_auth_header(request)
        yield request
