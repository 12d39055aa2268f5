"""Verifying a decision token: was *this exact call* decided so, by signoff?

A tool server (a payments or deploy API) that receives a call together with its
decision token checks, without trusting the agent in between, that signoff signed the
decision (Ed25519, keys from ``/.well-known/jwks.json``), that it has not expired, and
that it is about this agent, tool and these very arguments: the token carries
``args_digest``, the sha256 of the arguments' RFC 8785 canonical JSON, which any
language computes the same way.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx
import jwt
import rfc8785

from adapters.client.errors import DecisionTokenError

TOKEN_TYPE = "signoff-decision+jwt"
ALGORITHM = "EdDSA"
JWKS_TTL = 300.0
"""Seconds a JWKS fetched from a URL is reused (a token with an unknown key refetches)."""
JWKS_MIN_REFETCH = 30.0
"""Seconds between two fetches, so tokens naming unknown keys cannot flood signoff."""
_REQUIRED = ["exp", "iat", "sub", "jti", "iss"]

_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_cache_lock = threading.Lock()


def args_digest(arguments: Mapping[str, Any]) -> str:
    """The digest a decision token carries for `arguments`.

    Returns:
        ``"sha256:"`` followed by the hex sha256 of the RFC 8785 canonical JSON.

    Raises:
        ValueError: The arguments have no canonical JSON (NaN, integers beyond 2**53 …).
    """
    try:
        canonical = rfc8785.dumps(dict(arguments))
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(f"the arguments have no canonical JSON: {exc}") from exc
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def verify_decision_token(
    token: str,
    jwks: Mapping[str, Any] | None = None,
    jwks_url: str | None = None,
    *,
    tool: str,
    arguments: Mapping[str, Any],
    agent: str | None = None,
    issuer: str | None = None,
    decision: str | None = "allowed",
    leeway: float = 0.0,
) -> dict[str, Any]:
    """Check a decision token against the call about to run.

    Args:
        token: The compact JWS (``Decision.decision_token``).
        jwks: signoff's public keys as a JWKS object; or
        jwks_url: where to fetch them (``https://signoff.example.com/.well-known/jwks.json``),
            cached for five minutes.
        tool: The tool about to run.
        arguments: The arguments it is about to run with.
        agent: The agent that must have asked, if it matters.
        issuer: The ``iss`` signoff signs with (its ``SIGNOFF_PUBLIC_URL``), if checked.
        decision: The decision required (``allowed``); None accepts any.
        leeway: Seconds of clock skew tolerated on ``exp`` and ``iat``.

    Returns:
        The token's claims.

    Raises:
        DecisionTokenError: The token is malformed, forged, expired, or about another
            agent, tool, arguments or decision.
    """
    if (jwks is None) == (jwks_url is None):
        raise ValueError("give exactly one of jwks and jwks_url")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise DecisionTokenError(f"not a decision token: {exc}") from exc
    if header.get("alg") != ALGORITHM:
        raise DecisionTokenError(f"decision tokens are signed with {ALGORITHM} only")
    if header.get("typ") != TOKEN_TYPE:
        raise DecisionTokenError(f"not a decision token (typ {header.get('typ')!r})")
    kid = header.get("kid")
    if not isinstance(kid, str):
        raise DecisionTokenError("the token names no key (kid)")
    key = _key(kid, jwks, jwks_url)
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[ALGORITHM],
            issuer=issuer,
            leeway=leeway,
            options={"require": _REQUIRED, "verify_iss": issuer is not None},
        )
    except jwt.PyJWTError as exc:
        raise DecisionTokenError(f"the decision token does not verify: {exc}") from exc
    _expect(claims, "tool", tool)
    if agent is not None:
        _expect(claims, "agent", agent)
    if decision is not None:
        _expect(claims, "decision", decision)
    try:
        digest = args_digest(arguments)
    except ValueError as exc:
        raise DecisionTokenError(str(exc)) from exc
    if claims.get("args_digest") != digest:
        raise DecisionTokenError("the decision token is for other arguments")
    return claims


def _expect(claims: dict[str, Any], name: str, value: str) -> None:
    if claims.get(name) != value:
        raise DecisionTokenError(
            f"the decision token has {name} {claims.get(name)!r}, not {value!r}"
        )


def _key(kid: str, jwks: Mapping[str, Any] | None, jwks_url: str | None) -> jwt.PyJWK:
    if jwks is not None:
        found = _find(kid, jwks)
    else:
        assert jwks_url is not None
        found = _find(kid, _fetch(jwks_url, fresh=False))
        if found is None:
            found = _find(kid, _fetch(jwks_url, fresh=True))
    if found is None:
        raise DecisionTokenError(f"no signoff key has id {kid!r}")
    return found


def _find(kid: str, jwks: Mapping[str, Any]) -> jwt.PyJWK | None:
    keys = jwks.get("keys")
    if not isinstance(keys, list):
        raise DecisionTokenError("the JWKS has no keys")
    for entry in keys:
        if isinstance(entry, dict) and entry.get("kid") == kid:
            try:
                return jwt.PyJWK.from_dict(entry, algorithm=ALGORITHM)
            except jwt.PyJWTError as exc:
                raise DecisionTokenError(f"key {kid!r} is not usable: {exc}") from exc
    return None


def _fetch(url: str, *, fresh: bool) -> dict[str, Any]:
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get(url)
    if cached is not None:
        age = now - cached[0]
        if age < JWKS_MIN_REFETCH or (not fresh and age < JWKS_TTL):
            return cached[1]
    try:
        response = httpx.get(url, timeout=10.0)
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise DecisionTokenError(f"could not fetch signoff's keys from {url}: {exc}") from exc
    if not isinstance(body, dict):
        raise DecisionTokenError(f"{url} is not a JWKS")
    with _cache_lock:
        _cache[url] = (now, body)
    return body
