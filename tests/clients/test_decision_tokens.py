"""Decision tokens from a real `signoff serve`, verified as a tool server would."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from adapters.client import (
    Decision,
    DecisionTokenError,
    SignoffClient,
    args_digest,
    verify_decision_token,
)
from tests.clients.serving import Server

ARGS = {"order": "A-7", "lines": [{"sku": "X", "qty": 2}], "note": "é"}


@pytest.fixture
def allowed(client: SignoffClient) -> Decision:
    decision = client.request_approval(
        agent="billing", tool="lookup_order", arguments=ARGS, session_id="tokens"
    )
    assert decision.allowed and decision.decision_token is not None
    return decision


def _token(decision: Decision) -> str:
    assert decision.decision_token is not None
    return decision.decision_token


def _claims_and_kid(token: str) -> tuple[dict[str, Any], str]:
    claims = jwt.decode(token, options={"verify_signature": False})
    return claims, str(jwt.get_unverified_header(token)["kid"])


def _sign(claims: dict[str, Any], key: Ed25519PrivateKey, kid: str) -> str:
    return jwt.encode(
        claims, key, algorithm="EdDSA", headers={"kid": kid, "typ": "signoff-decision+jwt"}
    )


def test_a_real_token_verifies_with_the_served_keys(
    server: Server, client: SignoffClient, allowed: Decision
) -> None:
    token = _token(allowed)
    by_dict = verify_decision_token(
        token, jwks=client.jwks(), tool="lookup_order", arguments=ARGS, agent="billing"
    )
    by_url = verify_decision_token(
        token,
        jwks_url=f"{server.url}/.well-known/jwks.json",
        tool="lookup_order",
        arguments=dict(reversed(list(ARGS.items()))),  # key order does not matter
        issuer=by_dict["iss"],
    )
    assert by_dict == by_url
    assert by_dict["args_digest"] == args_digest(ARGS)
    assert by_dict["jti"] == allowed.approval_id
    assert by_dict["exp"] > by_dict["iat"]
    # The same token on every read.
    assert client.get(allowed.approval_id).decision_token == token


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"arguments": {**ARGS, "order": "A-8"}}, "other arguments"),
        ({"tool": "refund"}, "tool"),
        ({"agent": "support"}, "agent"),
        ({"decision": "denied"}, "decision"),
        ({"issuer": "https://elsewhere.example"}, "iss"),
    ],
)
def test_a_token_for_another_call_fails(
    client: SignoffClient, allowed: Decision, change: dict[str, Any], why: str
) -> None:
    expect: dict[str, Any] = {"tool": "lookup_order", "arguments": ARGS, "agent": "billing"}
    expect.update(change)
    with pytest.raises(DecisionTokenError):
        verify_decision_token(_token(allowed), jwks=client.jwks(), **expect)


def test_a_forged_token_fails(client: SignoffClient, allowed: Decision) -> None:
    claims, kid = _claims_and_kid(_token(allowed))
    jwks = client.jwks()

    other_key = _sign(
        {**claims, "args_digest": args_digest({"order": "A-666"})},
        Ed25519PrivateKey.generate(),
        kid,
    )
    with pytest.raises(DecisionTokenError, match="does not verify"):
        verify_decision_token(
            other_key, jwks=jwks, tool="lookup_order", arguments={"order": "A-666"}
        )

    head, _payload, signature = _token(allowed).split(".")
    swapped = (
        base64.urlsafe_b64encode(
            json.dumps({**claims, "args_digest": args_digest({"order": "A-666"})}).encode()
        )
        .rstrip(b"=")
        .decode()
    )
    with pytest.raises(DecisionTokenError, match="does not verify"):
        verify_decision_token(
            f"{head}.{swapped}.{signature}",
            jwks=jwks,
            tool="lookup_order",
            arguments={"order": "A-666"},
        )

    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": kid})
    with pytest.raises(DecisionTokenError):
        verify_decision_token(unsigned, jwks=jwks, tool="lookup_order", arguments=ARGS)

    with pytest.raises(DecisionTokenError, match="no signoff key"):
        verify_decision_token(
            _sign(claims, Ed25519PrivateKey.generate(), "some-other-kid"),
            jwks=jwks,
            tool="lookup_order",
            arguments=ARGS,
        )

    with pytest.raises(DecisionTokenError):
        verify_decision_token("not.a.token", jwks=jwks, tool="lookup_order", arguments=ARGS)


def test_an_expired_token_fails(
    client: SignoffClient, allowed: Decision, key: Ed25519PrivateKey
) -> None:
    claims, kid = _claims_and_kid(_token(allowed))
    now = int(time.time())
    # Signed with the server's own key, as it would have been an hour ago.
    expired = _sign({**claims, "iat": now - 3600, "exp": now - 60}, key, kid)
    jwks = client.jwks()
    with pytest.raises(DecisionTokenError, match="expired"):
        verify_decision_token(expired, jwks=jwks, tool="lookup_order", arguments=ARGS)
    # The same claims unexpired pass: it is the expiry that failed.
    fresh = _sign({**claims, "iat": now, "exp": now + 60}, key, kid)
    assert verify_decision_token(fresh, jwks=jwks, tool="lookup_order", arguments=ARGS)


def test_the_digest_is_rfc_8785_canonical_json() -> None:
    # The RFC's own sorting and number rules: keys by UTF-16 code units, 1e21 and 1.5.
    assert args_digest({"b": 1, "a": [1.5, 1e21, "x"]}) == args_digest(
        {"a": [1.5, 1e21, "x"], "b": 1}
    )
    import hashlib

    expected = hashlib.sha256(b'{"a":[1.5,1e+21,"x"],"b":1}').hexdigest()
    assert args_digest({"b": 1, "a": [1.5, 1e21, "x"]}) == f"sha256:{expected}"
    with pytest.raises(ValueError):
        args_digest({"x": float("nan")})
