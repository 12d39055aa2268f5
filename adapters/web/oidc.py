"""JWT access tokens from one OpenID Connect issuer, as bearer tokens of the API.

`OidcVerifier` keeps the issuer's signing keys (its JWKS) in memory and checks tokens
against them *synchronously*: verifying a request never waits for the network. The keys
are fetched with aiohttp when the server starts (`OidcVerifier.start`), refreshed in the
background on a timer (the JWKS answer's ``Cache-Control: max-age``, kept within
`MIN_REFRESH_SECONDS` .. `MAX_REFRESH_SECONDS`), and refreshed early when a token names a
key id the cache does not know. That token is refused; the early refresh runs at most
once per `UNKNOWN_KID_COOLDOWN_SECONDS`, so forged key ids cannot make the server
hammer the identity provider.

A verified token stands for the user ``oidc:<claim value>`` (`ACTOR_PREFIX`): static
tokens may not use that prefix while JWTs are on, so a JWT can never pass for a static
token's user or for the built-in ``operator``. Its groups claim gives approver groups;
membership of an operator group makes the user an operator, of an auditor group an
auditor. A JWT never carries ``on_behalf_of``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt
from aiohttp import web

log = logging.getLogger("signoff.web.oidc")

ACTOR_PREFIX = "oidc:"
"""The prefix of the user ids of JWT users (``oidc:alice@example.com``)."""
DEFAULT_ALGORITHMS = ("RS256", "ES256", "EdDSA")
ALLOWED_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""Asymmetric algorithms only: ``none`` and the HMAC ones (``HS*``) are never accepted."""
DEFAULT_REFRESH_SECONDS = 600.0
MIN_REFRESH_SECONDS = 60.0
MAX_REFRESH_SECONDS = 3600.0
UNKNOWN_KID_COOLDOWN_SECONDS = 30.0
LEEWAY_SECONDS = 30.0
"""Clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
FETCH_TIMEOUT_SECONDS = 10.0
MAX_DOCUMENT_BYTES = 512 * 1024
MAX_TOKEN_CHARS = 16 * 1024
MAX_USER_CHARS = 200
_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d{1,9})\"?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class OidcConfig:
    """Which JWTs the API accepts.

    Attributes:
        issuer: The ``iss`` tokens must carry, exactly (e.g. ``https://idp.example.com``).
        audience: The ``aud`` tokens must name.
        jwks_url: Where the signing keys are (None: the ``jwks_uri`` of
            ``<issuer>/.well-known/openid-configuration``).
        user_claim: The claim naming the user (``sub``, ``email`` ...).
        groups_claim: The claim listing the user's groups (approver groups).
        operator_groups: Members of these groups are operators.
        auditor_groups: Members of these groups are auditors (they may read every run's
            events).
        algorithms: The signature algorithms accepted (asymmetric only).
        leeway_seconds: Clock skew allowed on ``exp``, ``nbf`` and ``iat``.
    """

    issuer: str
    audience: str
    jwks_url: str | None = None
    user_claim: str = "sub"
    groups_claim: str = "groups"
    operator_groups: frozenset[str] = frozenset()
    auditor_groups: frozenset[str] = frozenset()
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    leeway_seconds: float = LEEWAY_SECONDS

    def __post_init__(self) -> None:
        unsafe = [alg for alg in self.algorithms if alg not in ALLOWED_ALGORITHMS]
        if unsafe or not self.algorithms:
            raise ValueError(
                f"JWT algorithms must be some of {', '.join(sorted(ALLOWED_ALGORITHMS))} "
                f"(got {', '.join(unsafe) or 'none'})"
            )
        if not self.issuer or not self.audience:
            raise ValueError("a JWT issuer and audience are required")

    @property
    def discovery_url(self) -> str:
        """The issuer's OpenID Connect discovery document."""
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


@dataclass(frozen=True, slots=True)
class VerifiedJwt:
    """Who a valid JWT stands for.

    Attributes:
        actor_id: ``oidc:<user claim>``.
        name: The ``name`` claim, else the user claim.
        groups: The user's groups (from the groups claim).
        operator: Whether one of those groups is an operator group.
        auditor: Whether one of those groups is an auditor group.
    """

    actor_id: str
    name: str
    groups: frozenset[str] = frozenset()
    operator: bool = False
    auditor: bool = False


@dataclass
class _Keys:
    # (kid, alg) -> key; kid is "" for a key without one.
    by_kid: dict[tuple[str, str], jwt.PyJWK] = field(default_factory=dict)
    kids: frozenset[str] = frozenset()


class JwksError(Exception):
    """The issuer's discovery document or key set could not be fetched or read."""


class OidcVerifier:
    """Verifies JWT access tokens against the issuer's cached keys.

    Args:
        config: Which tokens are accepted.
        now: Wall-clock time in Unix seconds (the tokens' ``exp``, ``nbf``, ``iat``).
        monotonic: A monotonic clock (the rate limit of early refreshes).
        unknown_kid_cooldown: Seconds between two refreshes triggered by unknown key ids.
    """

    def __init__(
        self,
        config: OidcConfig,
        *,
        now: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        unknown_kid_cooldown: float = UNKNOWN_KID_COOLDOWN_SECONDS,
    ) -> None:
        self.config = config
        self._now = now
        self._monotonic = monotonic
        self._cooldown = unknown_kid_cooldown
        self._keys = _Keys()
        self._jwks_url = config.jwks_url
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._wanted: asyncio.Event | None = None
        self._last_triggered: float | None = None
        self._next_seconds = DEFAULT_REFRESH_SECONDS
        self.fetches = 0
        """How many key sets were fetched and installed (tests and metrics read it)."""

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Fetch the keys once, then keep them fresh in the background until `close`.

        A failed first fetch is logged, not raised: static tokens keep working and the
        keys are fetched again soon.
        """
        if self._task is not None:
            return
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
        )
        self._wanted = asyncio.Event()
        await self._refresh()
        self._task = asyncio.create_task(self._refresh_loop(), name="oidc-jwks")

    async def close(self) -> None:
        """Stop the background refresh and close the HTTP session."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    @property
    def kids(self) -> frozenset[str]:
        """The key ids currently cached."""
        return self._keys.kids

    @property
    def refresh_pending(self) -> bool:
        """Whether a token with an unknown key id asked for a refresh not yet made."""
        return self._wanted is not None and self._wanted.is_set()

    @property
    def refresh_in(self) -> float:
        """Seconds between the last fetch and the next timed one."""
        return self._next_seconds

    async def refresh(self) -> None:
        """Fetch the key set now (raises nothing; a failure is logged)."""
        await self._refresh()

    async def _refresh_loop(self) -> None:
        assert self._wanted is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), timeout=self._next_seconds)
            self._wanted.clear()
            try:
                await self._refresh()
            except Exception:  # the loop must outlive any one bad answer
                log.exception("JWT signing keys of %s not refreshed", self.config.issuer)
                self._next_seconds = MIN_REFRESH_SECONDS

    async def _refresh(self) -> None:
        try:
            keys, max_age = await self._fetch()
        except JwksError as exc:
            log.warning("JWT signing keys of %s not refreshed: %s", self.config.issuer, exc)
            # Try again soon, not after a whole period.
            self._next_seconds = MIN_REFRESH_SECONDS
            return
        self._keys = keys
        self.fetches += 1
        self._next_seconds = min(
            max(max_age if max_age is not None else DEFAULT_REFRESH_SECONDS, MIN_REFRESH_SECONDS),
            MAX_REFRESH_SECONDS,
        )

    async def _fetch(self) -> tuple[_Keys, float | None]:
        if self._jwks_url is None:
            document, _ = await self._get_json(self.config.discovery_url)
            issuer = document.get("issuer")
            if issuer != self.config.issuer:
                raise JwksError(
                    f"the discovery document names issuer {issuer!r}, not "
                    f"{self.config.issuer!r} (SIGNOFF_OIDC_ISSUER must match it exactly)"
                )
            uri = document.get("jwks_uri")
            if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
                raise JwksError("the discovery document has no jwks_uri")
            self._jwks_url = uri
        key_set, max_age = await self._get_json(self._jwks_url)
        return self._read_keys(key_set), max_age

    async def _get_json(self, url: str) -> tuple[dict[str, Any], float | None]:
        if self._session is None:
            raise JwksError("not started")
        try:
            async with self._session.get(url) as response:
                if response.status != 200:
                    raise JwksError(f"GET {url} answered {response.status}")
                body = await response.content.read(MAX_DOCUMENT_BYTES + 1)
                cache_control = response.headers.get("Cache-Control", "")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise JwksError(f"GET {url} failed: {exc or type(exc).__name__}") from exc
        if len(body) > MAX_DOCUMENT_BYTES:
            raise JwksError(f"GET {url}: the answer is larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            document = json.loads(body)
        except ValueError as exc:
            raise JwksError(f"GET {url}: not JSON") from exc
        if not isinstance(document, dict):
            raise JwksError(f"GET {url}: not a JSON object")
        found = _MAX_AGE.search(cache_control)
        return document, float(found.group(1)) if found else None

    def _read_keys(self, key_set: Mapping[str, Any]) -> _Keys:
        entries = key_set.get("keys")
        if not isinstance(entries, list):
            raise JwksError("the key set has no keys list")
        keys = _Keys()
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            kid = entry.get("kid", "")
            if not isinstance(kid, str):
                continue
            for alg in self.config.algorithms:
                if entry.get("alg", alg) != alg:
                    continue
                try:
                    keys.by_kid[(kid, alg)] = jwt.PyJWK(entry, algorithm=alg)
                except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                    continue  # this key is not of this algorithm's kind
        if not keys.by_kid:
            raise JwksError("the key set has no usable signing key")
        keys.kids = frozenset(kid for kid, _ in keys.by_kid)
        return keys

    # -- verification (sync: reads the cache only) -------------------------------------
    def verify(self, token: str) -> VerifiedJwt | None:
        """Who `token` stands for, or None when it is not a valid JWT of the issuer.

        A token naming an unknown key id is refused and asks for an early refresh.
        """
        if len(token) > MAX_TOKEN_CHARS:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.config.algorithms:
            return None
        key = self._key_for(header.get("kid"), alg)
        if key is None:
            return None
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=self.config.audience,
                issuer=self.config.issuer,
                leeway=self.config.leeway_seconds,
                options={"require": ["exp", "iss", "aud"], "enforce_minimum_key_length": True},
            )
        except jwt.PyJWTError:
            return None
        return self._identity(claims)

    def _key_for(self, kid: Any, alg: str) -> jwt.PyJWK | None:
        keys = self._keys
        if kid is None:
            # Without a key id, only an issuer with one key leaves no doubt.
            candidates = [k for (_, a), k in keys.by_kid.items() if a == alg]
            return candidates[0] if len(keys.kids) == 1 and len(candidates) == 1 else None
        if not isinstance(kid, str):
            return None
        found = keys.by_kid.get((kid, alg))
        if found is None and kid not in keys.kids:
            self._want_refresh()
        return found

    def _want_refresh(self) -> None:
        if self._wanted is None:
            return
        now = self._monotonic()
        if self._last_triggered is not None and now - self._last_triggered < self._cooldown:
            return
        self._last_triggered = now
        self._wanted.set()

    def _identity(self, claims: Mapping[str, Any]) -> VerifiedJwt | None:
        user = claims.get(self.config.user_claim)
        if not isinstance(user, str) or not user.strip() or len(user) > MAX_USER_CHARS:
            return None
        if not user.isprintable():
            return None
        raw = claims.get(self.config.groups_claim)
        listed = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        groups = frozenset(g for g in listed if isinstance(g, str) and g)
        name = claims.get("name")
        return VerifiedJwt(
            actor_id=ACTOR_PREFIX + user,
            name=name if isinstance(name, str) and name.strip() else user,
            groups=groups,
            operator=bool(groups & self.config.operator_groups),
            auditor=bool(groups & self.config.auditor_groups),
        )


def looks_like_jwt(token: str) -> bool:
    """Whether `token` has the shape of a JWS compact serialisation (three parts)."""
    return token.count(".") == 2


def keep_keys_fresh(
    verifier: OidcVerifier,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An aiohttp cleanup context: the keys are fetched when the server starts and the
    background refresh ends (its session closed) when it stops."""

    async def lifetime(_app: web.Application) -> AsyncIterator[None]:
        await verifier.start()
        try:
            yield
        finally:
            await verifier.close()

    return lifetime


INVALID_TOKEN = web.RequestKey("signoff_invalid_token", bool)
"""Set on a request whose bearer token was a JWT that failed verification."""


@web.middleware
async def invalid_token_challenge(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Add ``error="invalid_token"`` (RFC 6750) to the challenge of a 401 answered to a
    request whose JWT was present but invalid."""
    response = await handler(request)
    if response.status == 401 and request.get(INVALID_TOKEN) and not response.prepared:
        challenge = response.headers.get("WWW-Authenticate", "")
        if challenge.startswith("Bearer") and "error=" not in challenge:
            response.headers["WWW-Authenticate"] = challenge + ', error="invalid_token"'
    return response
