"""Who is calling: bearer tokens for the JSON API, signed session cookies for the console.

- `TokenAuth` maps configured tokens to `runtime.Actor`\\ s. Every lookup compares the
  presented token with *every* configured one using `hmac.compare_digest`, so the time
  taken does not reveal how much of a token matched or which one.
- `SessionCodec` signs small JSON payloads with HMAC-SHA256. A console session is one
  such payload in an HttpOnly, SameSite=Lax cookie: the actor, a fingerprint of the token
  that signed in (so removing the token ends its sessions), a random session id (signing
  out revokes it in the database, so a copied cookie stops working everywhere), a
  per-session CSRF token and an expiry. Before sign-in the session is anonymous but
  already carries a CSRF token, so the login form is protected too.
- With an `adapters.web.oidc.OidcVerifier`, `TokenAuth` also accepts JWT access tokens
  of one OpenID Connect issuer on the API (not for console sign-in): a bearer token that
  is not a configured one and has a JWT's shape is verified against the issuer's cached
  keys, and stands for the user ``oidc:<claim>``.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from adapters.web.oidc import ACTOR_PREFIX, INVALID_TOKEN, OidcVerifier, looks_like_jwt
from runtime import Actor

SESSION_COOKIE = "signoff_session"
CSRF_FIELD = "csrf"


@dataclass(frozen=True, slots=True)
class ApiToken:
    """One configured token and who it stands for.

    Attributes:
        token: The secret bearer token.
        actor_id: The user id decisions are recorded under (e.g. ``U123`` or ``ops:alice``).
        operator: Operators may decide any ticket (four-eyes still applies to them).
        name: A display name.
        groups: Approver groups the token's user belongs to (matched by ``group:<name>``
            approver entries, e.g. ``release-managers``).
        on_behalf_of: User ids, or glob patterns (``U*``), an approval request made with
            this token may name as its requester (``POST /api/approvals``).
        auditor: Auditors may read every run's events (``GET /api/audit``), and nothing
            more than other users otherwise.
    """

    token: str
    actor_id: str
    operator: bool = False
    name: str | None = None
    groups: frozenset[str] = frozenset()
    on_behalf_of: tuple[str, ...] = ()
    auditor: bool = False

    def may_act_for(self, user_id: str) -> bool:
        """Whether a request made with this token may name `user_id` as its requester.

        The token's own user always may; others only when an ``on_behalf_of`` entry
        matches (case-sensitive glob).
        """
        if user_id == self.actor_id:
            return True
        return any(fnmatch.fnmatchcase(user_id, pattern) for pattern in self.on_behalf_of)

    @property
    def fingerprint(self) -> str:
        """A one-way digest naming this token in a session cookie (never the token)."""
        return hashlib.sha256(self.token.encode()).hexdigest()[:32]

    def actor(self, platform: str) -> Actor:
        """The actor this token authenticates, on `platform` (``api`` or ``console``)."""
        return Actor(
            id=self.actor_id,
            groups=self.groups,
            operator=self.operator,
            platform=platform,
            name=self.name,
        )


class TokenAuth:
    """Authenticates bearer tokens (constant-time) against a fixed set, and JWT access
    tokens of one OpenID Connect issuer when `jwt` is given.

    Args:
        tokens: The configured tokens; an empty or blank token is refused at once.
        jwt: Verifies JWT access tokens (None: only the configured tokens are accepted).

    Raises:
        ValueError: A token is blank, or (with `jwt`) a configured token's user id starts
            with ``oidc:``, which only JWT users have.
    """

    def __init__(self, tokens: Iterable[ApiToken], *, jwt: OidcVerifier | None = None) -> None:
        self._tokens = tuple(tokens)
        self.jwt = jwt
        for item in self._tokens:
            if not item.token.strip():
                raise ValueError(f"the token of {item.actor_id!r} is empty")
            if jwt is not None and item.actor_id.startswith(ACTOR_PREFIX):
                raise ValueError(
                    f"the token of {item.actor_id!r}: user ids starting with "
                    f"{ACTOR_PREFIX!r} are those of JWT users"
                )

    def lookup(self, token: str) -> ApiToken | None:
        """The configured token equal to `token`, or None."""
        return _find(self._tokens, token, lambda item: item.token)

    def by_fingerprint(self, fingerprint: str) -> ApiToken | None:
        """The configured token with this fingerprint, or None (e.g. it was removed)."""
        return _find(self._tokens, fingerprint, lambda item: item.fingerprint)

    def actor_for(self, token: str, platform: str = "api") -> Actor | None:
        """The actor `token` authenticates, or None."""
        found = self.lookup(token)
        return found.actor(platform) if found is not None else None

    def bearer(self, request: web.BaseRequest) -> Actor | None:
        """The actor of the request's ``Authorization: Bearer <token>`` header, or None."""
        found = self.bearer_token(request)
        return found.actor("api") if found is not None else None

    def bearer_token(self, request: web.BaseRequest) -> ApiToken | None:
        """The token of the request's ``Authorization: Bearer`` header, or None.

        A configured token, else (with `jwt`) a valid JWT as a token of its user: no
        ``on_behalf_of``, operator (auditor) only through an operator (auditor) group.
        Reads cached keys
        only; an invalid JWT marks the request so its 401 says ``error="invalid_token"``.
        """
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        found = self.lookup(token)
        if found is not None or self.jwt is None or not looks_like_jwt(token):
            return found
        cached: ApiToken | None = request.get(_JWT_TOKEN)
        if cached is not None:
            return cached
        if request.get(INVALID_TOKEN):
            return None
        verified = self.jwt.verify(token)
        if verified is None:
            request[INVALID_TOKEN] = True
            return None
        found = ApiToken(
            token,
            verified.actor_id,
            operator=verified.operator,
            name=verified.name,
            groups=verified.groups,
            auditor=verified.auditor,
        )
        request[_JWT_TOKEN] = found
        return found


_JWT_TOKEN = web.RequestKey("signoff_jwt_token", ApiToken)


def _find(
    items: tuple[ApiToken, ...], wanted: str, key: Callable[[ApiToken], str]
) -> ApiToken | None:
    # Compare against every item without stopping early.
    presented = wanted.encode()
    found = None
    for item in items:
        if hmac.compare_digest(key(item).encode(), presented) and found is None:
            found = item
    return found


def csrf_matches(expected: str, presented: str | None) -> bool:
    """Whether a form's CSRF token equals the session's (constant-time)."""
    if not presented or not expected:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


@dataclass(frozen=True, slots=True)
class Session:
    """A console session as read from its cookie.

    Attributes:
        csrf: The token every POST form must carry.
        expires: Unix time after which the cookie is refused.
        actor_id: The signed-in user, or None before sign-in.
        token_fp: Fingerprint of the token that signed in.
        session_id: A random id naming a signed-in session, so that signing out can
            revoke it on the server (every replica refuses its cookie afterwards).
        sso: Signed in through single sign-on; `token_fp` then names the provider and
            client (`adapters.web.sso.SsoConfig.fingerprint`), and the identity the
            provider vouched for is kept here (`name`, `groups`, `operator`).
        name: The single sign-on user's display name.
        groups: The single sign-on user's approver groups.
        operator: Whether the single sign-on user is in an operator group.
    """

    csrf: str
    expires: float
    actor_id: str | None = None
    token_fp: str | None = None
    session_id: str | None = None
    sso: bool = False
    name: str | None = None
    groups: tuple[str, ...] = ()
    operator: bool = False

    @property
    def signed_in(self) -> bool:
        """Whether someone signed in with this session."""
        return (
            self.actor_id is not None and self.token_fp is not None and self.session_id is not None
        )


class SessionCodec:
    """Signs and verifies cookie payloads (HMAC-SHA256 over compact JSON).

    Args:
        secret: The signing key; at least 32 bytes.
        ttl_seconds: How long a session lasts.
        secure: Set the cookie's ``Secure`` flag (serve the console over HTTPS).
        now: Time source in Unix seconds (tests inject one).
    """

    def __init__(
        self,
        secret: bytes,
        *,
        ttl_seconds: float = 12 * 3600,
        secure: bool = False,
        now: Callable[[], float] = time.time,
    ) -> None:
        if len(secret) < 32:
            raise ValueError("the cookie secret must be at least 32 bytes")
        self._secret = secret
        self._ttl = ttl_seconds
        self._secure = secure
        self._now = now

    # -- generic signing -------------------------------------------------------------
    def sign(self, payload: Mapping[str, Any]) -> str:
        """``base64url(json).base64url(hmac)``."""
        body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        return f"{body}.{_b64(self._mac(body))}"

    def unsign(self, value: str | None) -> dict[str, Any] | None:
        """The payload of a value made by `sign`, or None if it was forged or mangled."""
        if not value or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        try:
            presented = _unb64(mac)
        except ValueError:
            return None
        if not hmac.compare_digest(self._mac(body), presented):
            return None
        try:
            payload = json.loads(_unb64(body))
        except ValueError:
            return None
        return payload if isinstance(payload, dict) else None

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._secret, b"signoff-session:" + body.encode(), hashlib.sha256).digest()

    # -- sessions --------------------------------------------------------------------
    def new_session(self, token: ApiToken | None = None) -> Session:
        """A fresh session (anonymous without `token`) with a new CSRF token."""
        return Session(
            csrf=secrets.token_urlsafe(32),
            expires=self._now() + self._ttl,
            actor_id=token.actor_id if token is not None else None,
            token_fp=token.fingerprint if token is not None else None,
            session_id=secrets.token_urlsafe(24) if token is not None else None,
        )

    def new_sso_session(self, actor: Actor, fingerprint: str) -> Session:
        """A fresh signed-in session for `actor`, vouched for by single sign-on."""
        return Session(
            csrf=secrets.token_urlsafe(32),
            expires=self._now() + self._ttl,
            actor_id=actor.id,
            token_fp=fingerprint,
            session_id=secrets.token_urlsafe(24),
            sso=True,
            name=actor.name,
            groups=tuple(sorted(actor.groups)),
            operator=actor.operator,
        )

    def read(self, request: web.BaseRequest) -> Session | None:
        """The request's valid, unexpired session, or None."""
        payload = self.unsign(request.cookies.get(SESSION_COOKIE))
        if payload is None:
            return None
        try:
            session = Session(
                csrf=str(payload["csrf"]),
                expires=float(payload["exp"]),
                actor_id=_optional_str(payload.get("actor")),
                token_fp=_optional_str(payload.get("tok")),
                session_id=_optional_str(payload.get("sid")),
                sso=payload.get("sso") is True,
                name=_optional_str(payload.get("name")),
                groups=tuple(_strings(payload.get("groups", []))),
                operator=payload.get("op") is True,
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        if session.expires <= self._now():
            return None
        return session

    def store(self, response: web.StreamResponse, session: Session) -> None:
        """Set the session cookie on `response`."""
        value = self.sign(session_payload(session))
        response.set_cookie(
            SESSION_COOKIE,
            value,
            max_age=max(int(session.expires - self._now()), 0),
            path="/",
            httponly=True,
            samesite="Lax",
            secure=self._secure,
        )

    def store_signed(
        self,
        response: web.StreamResponse,
        name: str,
        payload: Mapping[str, Any],
        *,
        path: str,
        expires: float,
    ) -> None:
        """Set cookie `name` to `payload`, signed, HttpOnly and SameSite=Lax, on `path`
        until `expires` (Unix time)."""
        response.set_cookie(
            name,
            self.sign(payload),
            max_age=max(int(expires - self._now()), 0),
            path=path,
            httponly=True,
            samesite="Lax",
            secure=self._secure,
        )

    def clear(self, response: web.StreamResponse) -> None:
        """Remove the session cookie."""
        response.del_cookie(SESSION_COOKIE, path="/")

    def set_flash(self, response: web.StreamResponse, kind: str, text: str) -> None:
        """Leave a one-time message for the next page (signed, so it cannot be forged)."""
        response.set_cookie(
            FLASH_COOKIE,
            self.sign({"kind": kind, "text": text[:500], "exp": self._now() + 60}),
            path="/",
            httponly=True,
            samesite="Lax",
            secure=self._secure,
        )

    def take_flash(self, request: web.BaseRequest) -> tuple[str, str] | None:
        """The pending one-time message, if any (the caller clears the cookie)."""
        payload = self.unsign(request.cookies.get(FLASH_COOKIE))
        if payload is None or float(payload.get("exp", 0)) <= self._now():
            return None
        return str(payload.get("kind", "info")), str(payload.get("text", ""))


FLASH_COOKIE = "signoff_flash"


def session_payload(session: Session) -> dict[str, Any]:
    """What a session's cookie holds (signed by `SessionCodec.store`)."""
    payload: dict[str, Any] = {
        "actor": session.actor_id,
        "tok": session.token_fp,
        "sid": session.session_id,
        "csrf": session.csrf,
        "exp": session.expires,
    }
    if session.sso:
        payload.update(
            sso=True, name=session.name, groups=list(session.groups), op=session.operator
        )
    return payload


def _optional_str(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError("expected a list of strings")
    return value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64url") from exc
