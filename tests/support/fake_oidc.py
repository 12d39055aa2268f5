"""An OpenID Connect provider on 127.0.0.1 for the JWT tests: discovery and a JWKS over
real HTTP (aiohttp), signing keys made with `cryptography`, tokens signed with PyJWT.

The test decides which keys the JWKS publishes (`FakeIdp.publish`), mints tokens with
any claims and any of its keys (published or not), and reads how often each document
was fetched (`FakeIdp.hits`).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

AUDIENCE = "signoff-api"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@dataclass(frozen=True)
class SigningKey:
    """One of the provider's keys."""

    kid: str
    alg: str
    private: PrivateKey

    def jwk(self) -> dict[str, Any]:
        """The public JWK, as a JWKS lists it."""
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            found = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif isinstance(public, ec.EllipticCurvePublicKey):
            found = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            found = OKPAlgorithm.to_jwk(public, as_dict=True)
        return {**found, "kid": self.kid, "alg": self.alg, "use": "sig"}


def new_key(kid: str, alg: str = "RS256") -> SigningKey:
    """A fresh key pair for `alg` (RS256, ES256 or EdDSA)."""
    private: PrivateKey
    if alg == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        private = ed25519.Ed25519PrivateKey.generate()
    return SigningKey(kid, alg, private)


class FakeIdp:
    """The provider. Start it with `FakeIdp.start` (in the test's event loop)."""

    def __init__(self, keys: list[SigningKey], *, max_age: int | None = None) -> None:
        self.keys = {key.kid: key for key in keys}
        self.published = [key.kid for key in keys]
        self.max_age = max_age
        self.hits: Counter[str] = Counter()
        self.url = ""
        self._runner: web.AppRunner | None = None

    @property
    def issuer(self) -> str:
        """The ``iss`` of its tokens."""
        return self.url

    async def start(self) -> FakeIdp:
        """Serve on 127.0.0.1, a free port."""
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._jwks)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()

    def publish(self, *keys: SigningKey) -> None:
        """Publish exactly these keys from now on (a rotation)."""
        for key in keys:
            self.keys[key.kid] = key
        self.published = [key.kid for key in keys]

    def token(
        self,
        key: SigningKey | None = None,
        *,
        lifetime: float = 300,
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A token signed with `key` (default: the first published one) and the
        standard claims (issuer, audience, ``iat``, ``exp``), overridden by `claims`."""
        key = key or self.keys[self.published[0]]
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "iat": now,
            "exp": now + int(lifetime),
            "sub": "alice",
            **claims,
        }
        body = {name: value for name, value in body.items() if value is not None}
        return jwt.encode(
            body, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})}
        )

    async def _discovery(self, request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        return web.json_response(
            {
                "issuer": self.issuer,
                "jwks_uri": f"{self.url}/jwks",
                "id_token_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],
            }
        )

    async def _jwks(self, request: web.Request) -> web.Response:
        self.hits["jwks"] += 1
        response = web.json_response({"keys": [self.keys[kid].jwk() for kid in self.published]})
        if self.max_age is not None:
            response.headers["Cache-Control"] = f"public, max-age={self.max_age}"
        return response
