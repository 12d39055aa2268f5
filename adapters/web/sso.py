"""Single sign-on for the console: OpenID Connect, Authorization Code flow with PKCE.

`SsoClient.begin` makes a sign-in attempt (`PendingSignIn`: a random ``state``, PKCE
code verifier and ``nonce``) and the identity provider's authorization URL; the console
keeps the attempt in a short-lived signed cookie. `SsoClient.finish` checks the
provider's answer against it (``state``), exchanges the code for tokens at the token
endpoint (with the code verifier) and verifies the ID token: its signature against the
issuer's cached keys (`adapters.web.oidc.OidcVerifier`), ``iss``, ``aud`` (the client
id), ``exp`` and ``nonce``. Any failure raises `SsoRefused` and signs nobody in.

The user is the same as with a JWT of the same issuer on the API: ``oidc:<user claim>``,
approver groups from the groups claim, operator through an operator group.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import jwt
from aiohttp import web
from authlib.common.security import generate_token  # type: ignore[import-untyped]
from authlib.oauth2.rfc6749.parameters import (  # type: ignore[import-untyped]
    prepare_grant_uri,
    prepare_token_request,
)
from authlib.oauth2.rfc7636 import create_s256_code_challenge  # type: ignore[import-untyped]

from adapters.web.oidc import (
    DEFAULT_ALGORITHMS,
    FETCH_TIMEOUT_SECONDS,
    MAX_DOCUMENT_BYTES,
    MAX_TOKEN_CHARS,
    OidcConfig,
    OidcVerifier,
    VerifiedJwt,
)

log = logging.getLogger("signoff.web.sso")

CALLBACK_PATH = "/login/sso/callback"
"""Where the identity provider sends the browser back (register ``<public URL>`` + this)."""
DEFAULT_SCOPES = ("openid", "email", "profile")
PENDING_SECONDS = 600.0
"""How long a sign-in attempt may take between leaving for the provider and coming back."""
KEY_REFRESH_COOLDOWN_SECONDS = 30.0


class SsoRefused(Exception):
    """A sign-in that did not succeed; `reason` is shown to the person (no secrets)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SsoConfig:
    """How the console signs people in with OpenID Connect.

    Attributes:
        issuer: The provider's exact issuer (``iss`` of its ID tokens).
        client_id: The console's client id at the provider (the ID token's ``aud``).
        redirect_uri: The callback URL registered at the provider
            (``<public URL>/login/sso/callback``).
        client_secret: The client secret (None: a public client, PKCE only).
        scopes: The scopes asked for (``openid`` is always among them).
        jwks_url: Where the signing keys are (None: from the discovery document).
        user_claim: The claim naming the user (the user id is ``oidc:<value>``).
        groups_claim: The claim listing the user's groups (approver groups).
        operator_groups: Members of these groups are operators.
        algorithms: The ID token signature algorithms accepted (asymmetric only).
        label: What the sign-in button names (default: the issuer's host).
    """

    issuer: str
    client_id: str
    redirect_uri: str
    client_secret: str | None = None
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    jwks_url: str | None = None
    user_claim: str = "sub"
    groups_claim: str = "groups"
    operator_groups: frozenset[str] = frozenset()
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    label: str | None = None

    def __post_init__(self) -> None:
        if not self.issuer or not self.client_id or not self.redirect_uri:
            raise ValueError("single sign-on needs an issuer, a client id and a redirect URI")
        if "openid" not in self.scopes:
            raise ValueError("the scopes of single sign-on must include openid")

    @property
    def fingerprint(self) -> str:
        """Names this provider and client in session cookies: changing either ends the
        sessions signed in through the old one."""
        digest = hashlib.sha256(f"{self.issuer}\n{self.client_id}".encode()).hexdigest()
        return "sso:" + digest[:32]

    @property
    def shown_name(self) -> str:
        """The provider's name on the sign-in button."""
        return self.label or urlsplit(self.issuer).netloc or self.issuer


@dataclass(frozen=True, slots=True)
class PendingSignIn:
    """One sign-in attempt, kept in a signed cookie until the provider answers.

    Attributes:
        state: Binds the provider's answer to this browser (CSRF).
        verifier: The PKCE code verifier (its S256 challenge went to the provider).
        nonce: Must come back inside the ID token (replay of an old ID token).
        next: The console page to return to.
        expires: Unix time after which the attempt is refused.
    """

    state: str
    verifier: str
    nonce: str
    next: str
    expires: float

    def payload(self) -> dict[str, Any]:
        """The cookie payload."""
        return {
            "st": self.state,
            "cv": self.verifier,
            "nn": self.nonce,
            "nx": self.next,
            "exp": self.expires,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any] | None) -> PendingSignIn | None:
        """The attempt a verified cookie payload holds, or None if malformed."""
        if payload is None:
            return None
        try:
            found = cls(
                state=_text(payload["st"]),
                verifier=_text(payload["cv"]),
                nonce=_text(payload["nn"]),
                next=_text(payload["nx"]),
                expires=float(payload["exp"]),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        return found


class SsoClient:
    """The console's OpenID Connect client.

    Args:
        config: The provider and client.
        now: Wall-clock time in Unix seconds (attempt expiry and ID token times).
    """

    def __init__(self, config: SsoConfig, *, now: Callable[[], float] = time.time) -> None:
        self.config = config
        self._now = now
        self.keys = OidcVerifier(
            OidcConfig(
                issuer=config.issuer,
                audience=config.client_id,
                jwks_url=config.jwks_url,
                user_claim=config.user_claim,
                groups_claim=config.groups_claim,
                operator_groups=config.operator_groups,
                algorithms=config.algorithms,
            ),
            now=now,
        )
        self._session: aiohttp.ClientSession | None = None
        self._endpoints: tuple[str, str] | None = None
        self._last_key_refresh = float("-inf")

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Open the HTTP session, fetch the signing keys and the provider's endpoints.

        A provider that cannot be reached is logged, not raised: sign-in is retried when
        someone next tries it, and static tokens keep working.
        """
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
            )
        await self.keys.start()
        try:
            await self.endpoints()
        except SsoRefused as exc:
            log.warning("single sign-on with %s not ready: %s", self.config.issuer, exc.reason)

    async def close(self) -> None:
        """Stop the key refresh and close the HTTP session."""
        await self.keys.close()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def lifetime(self, _app: web.Application) -> AsyncIterator[None]:
        """An aiohttp cleanup context: started with the server, closed when it stops."""
        await self.start()
        try:
            yield
        finally:
            await self.close()

    @property
    def authorize_origin(self) -> str:
        """The origin of the authorization endpoint (the issuer's before it is known)."""
        url = urlsplit(self._endpoints[0] if self._endpoints is not None else self.config.issuer)
        return f"{url.scheme}://{url.netloc}"

    async def endpoints(self) -> tuple[str, str]:
        """The authorization and token endpoints (from the discovery document, cached).

        Raises:
            SsoRefused: The discovery document could not be read or names another issuer.
        """
        if self._endpoints is not None:
            return self._endpoints
        url = self.config.issuer.rstrip("/") + "/.well-known/openid-configuration"
        status, document = await self._request("GET", url)
        if status != 200 or document is None:
            raise SsoRefused(f"the identity provider's configuration could not be read ({status})")
        if document.get("issuer") != self.config.issuer:
            raise SsoRefused("the identity provider's configuration names another issuer")
        authorize, token = (
            document.get("authorization_endpoint"),
            document.get("token_endpoint"),
        )
        if not all(
            isinstance(u, str) and u.startswith(("https://", "http://")) for u in (authorize, token)
        ):
            raise SsoRefused("the identity provider's configuration has no endpoints")
        assert isinstance(authorize, str) and isinstance(token, str)
        self._endpoints = (authorize, token)
        return self._endpoints

    # -- the flow ----------------------------------------------------------------------
    async def begin(self, next_page: str) -> tuple[str, PendingSignIn]:
        """A new sign-in attempt and the provider URL to send the browser to.

        Raises:
            SsoRefused: The provider's endpoints are unknown and could not be fetched.
        """
        authorize, _ = await self.endpoints()
        pending = PendingSignIn(
            state=generate_token(32),
            verifier=generate_token(64),
            nonce=generate_token(32),
            next=next_page,
            expires=self._now() + PENDING_SECONDS,
        )
        url: str = prepare_grant_uri(
            authorize,
            self.config.client_id,
            "code",
            redirect_uri=self.config.redirect_uri,
            scope=" ".join(self.config.scopes),
            state=pending.state,
            nonce=pending.nonce,
            code_challenge=create_s256_code_challenge(pending.verifier),
            code_challenge_method="S256",
        )
        return url, pending

    async def finish(
        self,
        answer: Mapping[str, str],
        pending: PendingSignIn | None,
        spend: Callable[[PendingSignIn], Awaitable[bool]],
    ) -> VerifiedJwt:
        """Who signed in, from the provider's answer (the callback's query) and the
        attempt it answers.

        Args:
            answer: The callback's query parameters.
            pending: The attempt kept in the browser's cookie (None: none or forged).
            spend: Records that the attempt came back; False when it already had (a
                replay). Called only once the state matched, so a forged answer cannot
                spend someone's attempt.

        Raises:
            SsoRefused: No attempt, an expired one, another state, a replay, an error
                from the provider, a refused code, or an ID token that is not valid.
        """
        if "error" in answer:
            # Shown whatever the state: refusing changes nothing, and it says why.
            error = answer.get("error", "")[:100]
            described = answer.get("error_description", "")[:300]
            raise SsoRefused(
                f"The identity provider refused the sign-in: {error}"
                + (f" ({described})" if described else "")
            )
        if pending is None:
            raise SsoRefused(
                "No sign-in was started in this browser, or it was already used. "
                "Start again from the sign-in page."
            )
        if pending.expires <= self._now():
            raise SsoRefused("The sign-in took too long. Start again from the sign-in page.")
        if not hmac.compare_digest(answer.get("state", "").encode(), pending.state.encode()):
            raise SsoRefused(
                "The identity provider's answer does not belong to the sign-in started in "
                "this browser (state mismatch). Start again from the sign-in page."
            )
        if not await spend(pending):
            raise SsoRefused(
                "This sign-in was already used once. Start again from the sign-in page."
            )
        code = answer.get("code", "")
        if not code:
            raise SsoRefused("The identity provider's answer has no authorization code.")
        id_token = await self._redeem(code, pending)
        return await self._verify(id_token, pending)

    async def _redeem(self, code: str, pending: PendingSignIn) -> str:
        _, token_url = await self.endpoints()
        fields: dict[str, str] = {}
        auth: str | None = None
        if self.config.client_secret is not None:
            # client_secret_basic: both parts form-encoded first (RFC 6749, 2.3.1).
            user, secret = self.config.client_id, self.config.client_secret
            pair = f"{quote(user, safe='')}:{quote(secret, safe='')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            fields["client_id"] = self.config.client_id
        body: str = prepare_token_request(
            "authorization_code",
            code=code,
            redirect_uri=self.config.redirect_uri,
            code_verifier=pending.verifier,
            **fields,
        )
        status, document = await self._request("POST", token_url, body=body, auth=auth)
        if status != 200 or document is None:
            error = document.get("error") if document is not None else None
            raise SsoRefused(
                "The identity provider did not accept the authorization code"
                + (f" ({str(error)[:100]})" if error else f" ({status})")
                + ". Start again from the sign-in page."
            )
        id_token = document.get("id_token")
        if not isinstance(id_token, str) or len(id_token) > MAX_TOKEN_CHARS:
            raise SsoRefused("The identity provider sent no ID token.")
        return id_token

    async def _verify(self, id_token: str, pending: PendingSignIn) -> VerifiedJwt:
        try:
            kid = jwt.get_unverified_header(id_token).get("kid")
        except jwt.PyJWTError:
            raise SsoRefused("The ID token is not a signed JWT.") from None
        # A rotated key: fetch the key set now (at most every 30 s), not in the
        # background, so this sign-in need not be retried.
        if (
            isinstance(kid, str)
            and kid not in self.keys.kids
            and self._now() - self._last_key_refresh >= KEY_REFRESH_COOLDOWN_SECONDS
        ):
            self._last_key_refresh = self._now()
            await self.keys.refresh()
        verified = self.keys.verify(id_token)
        if verified is None:
            raise SsoRefused(
                "The ID token was refused: its signature, issuer, audience or expiry is "
                "not valid, or it does not name a user."
            )
        # The signature is verified: the claims may be read as they are.
        claims = jwt.decode(id_token, options={"verify_signature": False})
        nonce = claims.get("nonce")
        if not isinstance(nonce, str) or not hmac.compare_digest(
            nonce.encode(), pending.nonce.encode()
        ):
            raise SsoRefused("The ID token was issued for another sign-in (nonce mismatch).")
        audience = claims.get("aud")
        if (
            isinstance(audience, list)
            and len(audience) > 1
            and claims.get("azp") != self.config.client_id
        ):
            raise SsoRefused("The ID token was issued to another client (azp).")
        return verified

    async def _request(
        self,
        method: str,
        url: str,
        *,
        body: str | None = None,
        auth: str | None = None,
    ) -> tuple[int, dict[str, Any] | None]:
        if self._session is None:
            raise SsoRefused("single sign-on is not started")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if auth is not None:
            headers["Authorization"] = auth
        try:
            async with self._session.request(
                method, url, data=body, headers=headers, allow_redirects=False
            ) as response:
                raw = await response.content.read(MAX_DOCUMENT_BYTES + 1)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("%s %s failed: %s", method, url, exc or type(exc).__name__)
            raise SsoRefused("The identity provider could not be reached.") from None
        if len(raw) > MAX_DOCUMENT_BYTES:
            return status, None
        try:
            document = json.loads(raw)
        except ValueError:
            return status, None
        return status, document if isinstance(document, dict) else None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("expected a string")
    return value
