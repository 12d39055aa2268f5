"""Decision tokens: the key (configured or derived), its thumbprint, the claims, and
verification by a tool server with nothing but the JWKS (PyJWT)."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from adapters.web.decision_tokens import (
    DecisionClaims,
    DecisionSigner,
    NotCanonical,
    args_digest,
)
from bot.app import api_tokens, decision_signer
from bot.settings import Settings, load_settings
from runtime import ConfigurationError

COOKIE = b"test-cookie-secret-0123456789abcdef"


def b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signer(**kwargs: Any) -> DecisionSigner:
    return DecisionSigner.derived(COOKIE, issuer="signoff", ttl_seconds=3600, **kwargs)


def claims(decided_at: datetime | None = None, **changes: Any) -> DecisionClaims:
    fields: dict[str, Any] = {
        "approval_id": "run_1",
        "ticket_id": "tk_1",
        "agent": "billing",
        "tool": "refund",
        "arguments": {"order": "A-1", "amount": 12.5},
        "decision": "allowed",
        "decided_by": "U2",
        "session_id": "conv-1",
        "decided_at": decided_at or datetime.now(UTC),
    }
    return DecisionClaims(**{**fields, **changes})


def verify(token: str, jwks: dict[str, Any], issuer: str = "signoff") -> dict[str, Any]:
    """What a tool server does: pick the key by kid from the JWKS, check it all."""
    header = jwt.get_unverified_header(token)
    [jwk] = [key for key in jwks["keys"] if key["kid"] == header["kid"]]
    return jwt.decode(
        token,
        jwt.PyJWK(jwk),
        algorithms=["EdDSA"],
        issuer=issuer,
        options={"require": ["exp", "iat", "iss", "sub"]},
    )


# -- the key ---------------------------------------------------------------------------


def test_the_kid_is_the_rfc7638_thumbprint_of_rfc8037s_example_key() -> None:
    # RFC 8037, appendix A.1 (the key) and A.3 (its JWK thumbprint).
    d = b64url("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A")
    key = DecisionSigner(Ed25519PrivateKey.from_private_bytes(d))

    assert key.public_jwk()["x"] == "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    assert key.kid == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_the_jwks_holds_the_public_key_only() -> None:
    [jwk] = signer().jwks()["keys"]

    assert set(jwk) == {"kty", "crv", "x", "kid", "alg", "use"}
    assert (jwk["kty"], jwk["crv"], jwk["alg"], jwk["use"]) == ("OKP", "Ed25519", "EdDSA", "sig")


def test_a_derived_key_depends_on_the_cookie_secret_only() -> None:
    again = DecisionSigner.derived(COOKIE, issuer="elsewhere", ttl_seconds=60)
    other = DecisionSigner.derived(COOKIE + b"!", issuer="signoff", ttl_seconds=3600)

    assert signer().kid == again.kid
    assert signer().kid != other.kid


def pem(key: Ed25519PrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def test_a_configured_pem_key_signs_and_wins_over_the_cookie_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "signing.pem"
    path.write_text(pem(key))
    monkeypatch.setenv("SIGNOFF_SIGNING_KEY_FILE", str(path))
    monkeypatch.setenv("SIGNOFF_PUBLIC_URL", "https://signoff.example.com/")
    monkeypatch.setenv("SIGNOFF_DECISION_TOKEN_TTL_SECONDS", "600")

    settings = load_settings()
    configured = decision_signer(settings, COOKIE)

    assert configured.kid == DecisionSigner(key).kid != signer().kid
    assert configured.issuer == "https://signoff.example.com"
    assert configured.ttl == timedelta(seconds=600)
    decided = claims(decided_at=datetime.now(UTC))
    payload = verify(configured.sign(decided), configured.jwks(), configured.issuer)
    assert payload["exp"] - payload["iat"] == 600


def test_without_a_key_the_signer_derives_one_from_the_cookie_secret() -> None:
    derived = decision_signer(Settings(), COOKIE)

    assert derived.kid == signer().kid
    assert derived.issuer == "signoff"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not a key", "not an unencrypted PEM private key"),
        (pem(ec.generate_private_key(ec.SECP256R1())), "expected an Ed25519 key"),
    ],
)
def test_a_bad_signing_key_stops_the_process_with_its_name(text: str, problem: str) -> None:
    settings = Settings(signing_key=text)

    with pytest.raises(ConfigurationError, match=f"SIGNOFF_SIGNING_KEY: {problem}"):
        decision_signer(settings, COOKIE)


def test_a_public_url_must_be_http() -> None:
    with pytest.raises(ConfigurationError, match="SIGNOFF_PUBLIC_URL: expected an http"):
        load_settings(overrides={"public_url": "signoff.example.com"})


# -- on behalf of ----------------------------------------------------------------------


def test_api_tokens_may_name_users_they_act_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "SIGNOFF_API_TOKENS",
        json.dumps(
            [
                {"token": "agent-token-0123456789", "actor": "svc:agent", "on_behalf_of": ["U*"]},
                {"token": "plain-token-0123456789", "actor": "U9"},
            ]
        ),
    )
    _operator, agent, plain = api_tokens(load_settings(), "operator-token-0123456789")

    assert agent.on_behalf_of == ("U*",)
    assert agent.may_act_for("U123") and agent.may_act_for("svc:agent")
    assert not agent.may_act_for("u123") and not agent.may_act_for("W1")
    assert plain.may_act_for("U9") and not plain.may_act_for("U1")


# -- the claims and their verification -----------------------------------------------


def test_the_args_digest_is_sha256_of_rfc8785_canonical_json() -> None:
    arguments = {"b": [1.0, "é", None, True], "a": {"z": 1e21, "y": 0.5}}
    expected = b'{"a":{"y":0.5,"z":1e+21},"b":[1,"\xc3\xa9",null,true]}'

    assert args_digest(arguments) == "sha256:" + hashlib.sha256(expected).hexdigest()


@pytest.mark.parametrize("value", [2**53, "\ud800"])
def test_arguments_without_a_canonical_form_are_refused(value: Any) -> None:
    with pytest.raises(NotCanonical):
        args_digest({"x": value})


def test_a_token_states_the_decision_and_verifies_with_the_jwks() -> None:
    decided_at = datetime.now(UTC).replace(microsecond=0)
    token = signer().sign(claims(decided_at=decided_at))

    header = jwt.get_unverified_header(token)
    payload = verify(token, signer().jwks())

    assert header == {"alg": "EdDSA", "kid": signer().kid, "typ": "signoff-decision+jwt"}
    assert payload == {
        "iss": "signoff",
        "sub": "run_1",
        "jti": "run_1",
        "ticket_id": "tk_1",
        "agent": "billing",
        "tool": "refund",
        "args_digest": args_digest({"amount": 12.5, "order": "A-1"}),
        "decision": "allowed",
        "decided_by": "U2",
        "session_id": "conv-1",
        "iat": int(decided_at.timestamp()),
        "exp": int(decided_at.timestamp()) + 3600,
    }


def test_a_decision_always_gets_the_same_token() -> None:
    decided_at = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)

    assert signer().sign(claims(decided_at)) == signer().sign(claims(decided_at))
    assert signer().sign(claims(decided_at)) != signer().sign(claims(decided_at, decided_by="U3"))


def test_an_expired_token_fails() -> None:
    long_ago = datetime.now(UTC) - timedelta(hours=2)

    with pytest.raises(jwt.ExpiredSignatureError):
        verify(signer().sign(claims(long_ago)), signer().jwks())


def test_a_token_of_another_key_fails() -> None:
    forger = DecisionSigner(Ed25519PrivateKey.generate())
    forged = forger.sign(claims())
    # Even claiming the real key's kid does not help.
    header, payload, signature = forged.split(".")
    real_kid = json.loads(b64url(header)) | {"kid": signer().kid}
    relabelled = ".".join(
        [
            base64.urlsafe_b64encode(json.dumps(real_kid).encode()).decode().rstrip("="),
            payload,
            signature,
        ]
    )

    with pytest.raises(jwt.InvalidSignatureError):
        verify(relabelled, signer().jwks())


def test_a_token_with_altered_claims_fails() -> None:
    header, payload, signature = signer().sign(claims()).split(".")
    altered = json.loads(b64url(payload)) | {"args_digest": args_digest({"amount": 9999})}
    body = base64.urlsafe_b64encode(json.dumps(altered).encode()).decode().rstrip("=")

    with pytest.raises(jwt.InvalidSignatureError):
        verify(f"{header}.{body}.{signature}", signer().jwks())


def test_a_token_of_another_issuer_fails() -> None:
    other = DecisionSigner.derived(COOKIE, issuer="https://elsewhere", ttl_seconds=3600)

    with pytest.raises(jwt.InvalidIssuerError):
        verify(other.sign(claims()), other.jwks(), issuer="signoff")
