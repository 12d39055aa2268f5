"""Decision tokens: a signed statement that *this exact call* was allowed (or denied).

A tool's own server (a payments or deploy API) can check a decision without trusting the
agent that carries it. The token is a compact JWS signed with Ed25519 (``alg`` ``EdDSA``,
``typ`` ``signoff-decision+jwt``, ``kid`` the key's RFC 7638 thumbprint); its claims::

    iss          SIGNOFF_PUBLIC_URL, else "signoff"
    sub, jti     the approval id
    ticket_id    the ticket that was decided (null when a rule or grant decided)
    agent, tool  the call
    args_digest  "sha256:" + hex(sha256(RFC 8785 canonical JSON of the arguments to run with))
    decision     "allowed" | "denied"
    decided_by   who decided (null for a rule)
    session_id   the caller's session (null when none was given)
    iat, exp     decided at; decided at + SIGNOFF_DECISION_TOKEN_TTL_SECONDS

A token is deterministic: Ed25519 signatures are, and the claims are fixed by the
approval, so every read of a decided approval answers the same token. The public key is
served as a JWKS at ``/.well-known/jwks.json``.

The key is ``SIGNOFF_SIGNING_KEY`` (a PEM Ed25519 private key) or, unset, derived from the
console's cookie secret with HKDF-SHA256: replicas that share a cookie secret share the
key, and a SQLite install (whose made-up cookie secret is kept) keeps it across restarts.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import jwt
import rfc8785
from aiohttp import web
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from runtime import ConfigurationError

ALGORITHM = "EdDSA"
TOKEN_TYPE = "signoff-decision+jwt"
DEFAULT_ISSUER = "signoff"
DEFAULT_TTL_SECONDS = 3600
JWKS_PATH = "/.well-known/jwks.json"
_HKDF_INFO = b"signoff decision token signing key v1"
_HKDF_SALT = b"signoff-decision-tokens"


class NotCanonical(ValueError):
    """The value cannot be written as RFC 8785 canonical JSON (an integer beyond
    ±(2**53 - 1), a string that is not valid Unicode)."""


def canonical_json(value: Any) -> bytes:
    """`value` as RFC 8785 (JSON Canonicalization Scheme) bytes.

    Raises:
        NotCanonical: The value has no canonical form.
    """
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise NotCanonical(str(exc)) from None


def args_digest(arguments: dict[str, Any]) -> str:
    """``"sha256:" + hex(sha256(RFC 8785 canonical JSON of arguments))``.

    Raises:
        NotCanonical: The arguments have no canonical form.
    """
    return "sha256:" + hashlib.sha256(canonical_json(arguments)).hexdigest()


@dataclass(frozen=True, slots=True)
class DecisionClaims:
    """What a decision token states (the claims besides ``iss``, ``iat`` and ``exp``).

    Attributes:
        approval_id: The approval (``sub`` and ``jti``).
        ticket_id: The ticket that was decided, if one was opened.
        agent: The agent that asked.
        tool: The tool it may (or may not) call.
        arguments: The arguments to run with (edited ones when allowed with edits).
        decision: ``allowed`` or ``denied``.
        decided_by: Who decided (None when a rule or grant did).
        session_id: The caller's session, if it gave one.
        decided_at: When it was decided (``iat``).
    """

    approval_id: str
    ticket_id: str | None
    agent: str
    tool: str
    arguments: dict[str, Any]
    decision: Literal["allowed", "denied"]
    decided_by: str | None
    session_id: str | None
    decided_at: datetime


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class DecisionSigner:
    """Signs decision tokens with one Ed25519 key and publishes its public half.

    Args:
        key: The private key.
        issuer: The ``iss`` claim.
        ttl_seconds: How long a token is valid after the decision.
    """

    def __init__(
        self,
        key: Ed25519PrivateKey,
        *,
        issuer: str = DEFAULT_ISSUER,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._key = key
        self.issuer = issuer
        self.ttl = timedelta(seconds=ttl_seconds)
        raw = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self._x = _b64url(raw)
        # RFC 7638: the required members, in lexicographic order, without whitespace.
        members = json.dumps(
            {"crv": "Ed25519", "kty": "OKP", "x": self._x}, separators=(",", ":"), sort_keys=True
        )
        self.kid = _b64url(hashlib.sha256(members.encode()).digest())

    @classmethod
    def from_pem(cls, pem: str, *, issuer: str, ttl_seconds: int) -> DecisionSigner:
        """A signer with a configured PEM private key (PKCS#8 or OpenSSH).

        Raises:
            ConfigurationError: The text is not an unencrypted Ed25519 private key.
        """
        try:
            key = serialization.load_pem_private_key(pem.strip().encode(), password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                "SIGNOFF_SIGNING_KEY: not an unencrypted PEM private key (make one with "
                f"`openssl genpkey -algorithm ed25519`): {exc}"
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigurationError(
                f"SIGNOFF_SIGNING_KEY: expected an Ed25519 key, got {type(key).__name__}"
            )
        return cls(key, issuer=issuer, ttl_seconds=ttl_seconds)

    @classmethod
    def derived(cls, secret: bytes, *, issuer: str, ttl_seconds: int) -> DecisionSigner:
        """A signer whose key is derived from `secret` (the cookie secret) with HKDF.

        The same secret always gives the same key, so every replica sharing it signs
        alike and a restart keeps the key.
        """
        seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=_HKDF_INFO).derive(
            secret
        )
        return cls(
            Ed25519PrivateKey.from_private_bytes(seed), issuer=issuer, ttl_seconds=ttl_seconds
        )

    def public_jwk(self) -> dict[str, str]:
        """The public key as a JWK (RFC 8037 ``OKP``), with its ``kid``."""
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": self._x,
            "kid": self.kid,
            "alg": ALGORITHM,
            "use": "sig",
        }

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """The JWK Set served at ``/.well-known/jwks.json`` (public keys only)."""
        return {"keys": [self.public_jwk()]}

    def claims(self, decided: DecisionClaims) -> dict[str, Any]:
        """The token's claims, in a fixed order.

        Raises:
            NotCanonical: The arguments have no canonical form.
        """
        issued = int(decided.decided_at.timestamp())
        return {
            "iss": self.issuer,
            "sub": decided.approval_id,
            "jti": decided.approval_id,
            "ticket_id": decided.ticket_id,
            "agent": decided.agent,
            "tool": decided.tool,
            "args_digest": args_digest(decided.arguments),
            "decision": decided.decision,
            "decided_by": decided.decided_by,
            "session_id": decided.session_id,
            "iat": issued,
            "exp": issued + int(self.ttl.total_seconds()),
        }

    def sign(self, decided: DecisionClaims) -> str:
        """The compact JWS for a decision (the same text every time for one decision).

        Raises:
            NotCanonical: The arguments have no canonical form.
        """
        return jwt.encode(
            self.claims(decided),
            self._key,
            algorithm=ALGORITHM,
            headers={"kid": self.kid, "typ": TOKEN_TYPE},
        )


def add_jwks_route(app: web.Application, signer: DecisionSigner) -> None:
    """Serve ``GET /.well-known/jwks.json`` (no authentication: public keys only)."""
    body = signer.jwks()

    async def jwks(request: web.Request) -> web.StreamResponse:
        response = web.json_response(body)
        response.headers["Cache-Control"] = "public, max-age=300"
        return response

    app.router.add_get(JWKS_PATH, jwks)
