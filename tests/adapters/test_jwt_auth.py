"""JWT access tokens of one OpenID Connect issuer on the JSON API and the approvals API.

`signoff serve`'s application is built as in production (`build_service` from settings
naming a provider served on 127.0.0.1 by `fake_oidc.FakeIdp`): a valid JWT acts as
``oidc:<sub>``; every kind of bad token is refused with 401 ``invalid_token`` and changes
nothing; groups and operator groups come from the token; verifying a request never
fetches, and a token naming an unknown key id asks for one rate-limited refresh.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives import serialization
from fake_oidc import AUDIENCE, FakeIdp, SigningKey, new_key
from testkit import echo_model, until

from adapters.web import ApiToken, TokenAuth
from adapters.web.oidc import (
    ACTOR_PREFIX,
    ALLOWED_ALGORITHMS,
    DEFAULT_ALGORITHMS,
    OidcConfig,
    OidcVerifier,
)
from bot import settings as settings_module
from bot.app import api_tokens, oidc_verifier
from bot.bootstrap import Parts, Service, build_service
from bot.settings import Settings, load_settings
from runtime import Agent, ConfigurationError, tool

OPERATOR_TOKEN = "tok-ops-0123456789abcdef"
STATIC = "tok-static-u1-0123456789"
CHALLENGE = 'Bearer realm="signoff"'
INVALID = 'Bearer realm="signoff", error="invalid_token"'


@tool(permission="ask", approvers=["group:release-managers"])
async def deploy(service: str) -> str:
    """Deploy a service (release managers decide)."""
    return f"deployed {service}"


@dataclass
class Served:
    idp: FakeIdp
    service: Service
    client: TestClient[Any, Any]
    keys: dict[str, SigningKey]

    verifier: OidcVerifier

    async def call(
        self, method: str, path: str, token: str | None, body: Any = None
    ) -> tuple[int, Any, str | None]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        async with self.client.request(method, path, json=body, headers=headers) as response:
            found = await response.json()
            return response.status, found, response.headers.get("WWW-Authenticate")

    async def ask(self, token: str, **extra: Any) -> tuple[int, Any, str | None]:
        body = {"agent": "coder", "tool": "push", "arguments": {"branch": "main"}, **extra}
        return await self.call("POST", "/api/approvals", token, body)

    async def everything(self) -> tuple[list[Any], list[Any]]:
        """Every approval and run, as the operator sees them."""
        _, approvals, _ = await self.call("GET", "/api/approvals", OPERATOR_TOKEN)
        _, runs, _ = await self.call("GET", "/api/runs", OPERATOR_TOKEN)
        return approvals["approvals"], runs["runs"]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    keys = {"rsa": new_key("k-rsa"), "ec": new_key("k-ec", "ES256"), "ed": new_key("k-ed", "EdDSA")}
    idp = await FakeIdp(list(keys.values())).start()
    path = tmp_path / "signoff.db"
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{path}",
        operator_token=OPERATOR_TOKEN,
        cookie_secret="c" * 32,
        poll_seconds=0.05,
        api_tokens=[{"token": STATIC, "actor": "U1"}],
        oidc_issuer=idp.issuer,
        oidc_audience=AUDIENCE,
        oidc_operator_groups=["sre"],
    )
    agents = [
        Agent("deployer", "Deploy.", echo_model(("deploy", {"service": "api"})), tools=[deploy])
    ]
    # What build_web makes of the settings, kept at hand to look into its cache.
    verifier = oidc_verifier(settings)
    assert verifier is not None
    auth = TokenAuth(api_tokens(settings, OPERATOR_TOKEN), jwt=verifier)
    service = await build_service(
        settings,
        agents=agents,
        auth=auth,
        parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    try:
        await client.start_server()
        await service.start()
        yield Served(idp, service, client, keys, verifier)
    finally:
        await client.close()
        await service.stop(grace_seconds=1)
        await idp.close()


async def eventually(check: Callable[[], Awaitable[Any]], what: str, seconds: float = 20) -> Any:
    """Poll the async `check` until it answers something truthy."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, Any], claims: dict[str, Any], sign: Any = None) -> str:
    head = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
    return head + "." + (_b64(sign(head.encode())) if sign is not None else "")


def _claims(idp: FakeIdp, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {
        "iss": idp.issuer,
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + 300,
        "sub": "alice",
        **extra,
    }


def bad_tokens(idp: FakeIdp, keys: dict[str, SigningKey]) -> dict[str, str]:
    """A token of each kind the API must refuse."""
    now = int(time.time())
    rsa = keys["rsa"]
    public_pem = rsa.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    def hs256(signing_input: bytes) -> bytes:
        return hmac.new(public_pem, signing_input, hashlib.sha256).digest()

    return {
        "expired": idp.token(rsa, lifetime=-120),
        "not yet valid": idp.token(rsa, nbf=now + 600),
        "issued in the future": idp.token(rsa, iat=now + 600),
        "wrong audience": idp.token(rsa, aud="another-api"),
        "wrong issuer": idp.token(rsa, iss=idp.issuer + "/other"),
        "no expiry": idp.token(rsa, exp=None),
        "no subject": idp.token(rsa, sub=None),
        "empty subject": idp.token(rsa, sub=""),
        "subject not a string": idp.token(rsa, sub=42),
        "signed by another key": idp.token(new_key(rsa.kid)),
        "alg none": _unsigned({"alg": "none", "typ": "JWT", "kid": rsa.kid}, _claims(idp)),
        "HS256 with the public key": _unsigned(
            {"alg": "HS256", "typ": "JWT", "kid": rsa.kid}, _claims(idp), hs256
        ),
        "RS256 header on the EC key": _unsigned(
            {"alg": "RS256", "kid": keys["ec"].kid}, _claims(idp), lambda _: b"x" * 256
        ),
        "garbage": "abc.def.ghi",
        "tampered": _tamper(idp.token(rsa)),
    }


def _tamper(token: str) -> str:
    head, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["sub"] = "ops:alice"
    return f"{head}.{_b64(json.dumps(claims).encode())}.{signature}"


@pytest.mark.parametrize("kind", ["rsa", "ec", "ed"])
async def test_a_valid_jwt_reads_and_asks_as_its_own_user(served: Served, kind: str) -> None:
    token = served.idp.token(served.keys[kind], sub="alice@example.com", name="Alice")
    status, listed, _ = await served.call("GET", "/api/approvals", token)
    assert (status, listed["approvals"]) == (200, [])

    status, approval, _ = await served.ask(token)
    assert status == 201, approval
    assert approval["status"] == "pending"
    assert approval["requester"] == "oidc:alice@example.com"
    assert approval["requested_by"] == "oidc:alice@example.com"

    status, again, _ = await served.call("GET", f"/api/approvals/{approval['approval_id']}", token)
    assert status == 200 and again["approval_id"] == approval["approval_id"]
    [stored], _ = await served.everything()
    assert stored["requester"] == "oidc:alice@example.com"


async def test_every_bad_token_is_refused_and_changes_nothing(served: Served) -> None:
    for kind, token in bad_tokens(served.idp, served.keys).items():
        for method, path, body in (
            ("GET", "/api/approvals", None),
            ("POST", "/api/approvals", {"agent": "coder", "tool": "push", "arguments": {}}),
            ("POST", "/api/runs", {"agent": "deployer", "input": "go"}),
        ):
            status, answer, challenge = await served.call(method, path, token, body)
            assert status == 401, (kind, path, answer)
            assert answer["error"] == "unauthenticated"
            assert challenge == INVALID, kind
    assert await served.everything() == ([], [])


async def test_a_missing_or_unknown_static_token_keeps_the_plain_challenge(served: Served) -> None:
    for token in (None, "not-a-configured-token"):
        status, _, challenge = await served.call("GET", "/api/approvals", token)
        assert (status, challenge) == (401, CHALLENGE)
    status, _, _ = await served.call("GET", "/api/approvals", STATIC)
    assert status == 200


async def test_a_jwt_user_never_passes_for_a_static_user_or_an_operator(served: Served) -> None:
    status, mine, _ = await served.ask(STATIC)
    assert status == 201 and mine["requester"] == "U1"
    for sub in ("operator", "U1", "ops:alice", "oidc:U1"):
        token = served.idp.token(sub=sub)
        status, listed, _ = await served.call("GET", "/api/approvals", token)
        assert (status, listed["approvals"]) == (200, [])  # not U1's, not an operator's
        status, _, _ = await served.call("GET", f"/api/approvals/{mine['approval_id']}", token)
        assert status == 404
        status, asked, _ = await served.ask(token)
        assert asked["requester"] == f"oidc:{sub}"
    # on_behalf_of is never granted to a JWT
    status, refused, _ = await served.ask(served.idp.token(sub="bot"), on_behalf_of="U1")
    assert status == 403, refused
    approvals, _ = await served.everything()
    assert sorted(a["requester"] for a in approvals) == [
        "U1",
        "oidc:U1",
        "oidc:oidc:U1",
        "oidc:operator",
        "oidc:ops:alice",
    ]


async def test_a_jwt_user_sees_only_their_own_approvals(served: Served) -> None:
    alice = served.idp.token(sub="alice")
    bob = served.idp.token(sub="bob")
    status, asked, _ = await served.ask(alice)
    assert status == 201
    for token in (bob, STATIC):
        status, listed, _ = await served.call("GET", "/api/approvals", token)
        assert (status, listed["approvals"]) == (200, [])
        status, _, _ = await served.call("GET", f"/api/approvals/{asked['approval_id']}", token)
        assert status == 404
        status, _, _ = await served.call(
            "POST", f"/api/tickets/{asked['ticket_id']}/decision", token, {"decision": "allow"}
        )
        assert status == 404
    status, listed, _ = await served.call("GET", "/api/approvals", alice)
    assert [a["approval_id"] for a in listed["approvals"]] == [asked["approval_id"]]


async def test_group_claims_make_approvers_and_operator_groups_operators(served: Served) -> None:
    status, started, _ = await served.call(
        "POST", "/api/runs", STATIC, {"agent": "deployer", "input": "deploy the api"}
    )
    assert status == 202, started
    run_id = started["run_id"]

    async def parked() -> Any:
        _, run, _ = await served.call("GET", f"/api/runs/{run_id}", STATIC)
        return run["pending"] if run["status"] == "awaiting" else None

    [pending] = await eventually(parked, "the deploy waiting for a release manager")
    decide = f"/api/tickets/{pending['ticket_id']}/decision"

    outsider = served.idp.token(sub="dave", groups=["developers"])
    status, _, _ = await served.call("POST", decide, outsider, {"decision": "allow"})
    assert status == 404

    # An operator group: an operator sees every approval (the requester still decides).
    status, asked, _ = await served.ask(STATIC)
    assert status == 201
    operator = served.idp.token(sub="erin", groups=["sre"])
    status, listed, _ = await served.call("GET", "/api/approvals", operator)
    assert [a["approval_id"] for a in listed["approvals"]] == [asked["approval_id"]]
    status, _, _ = await served.call("GET", "/api/approvals", outsider)
    assert status == 200

    manager = served.idp.token(sub="carol", groups=["developers", "release-managers"])
    status, decided, _ = await served.call("POST", decide, manager, {"decision": "allow"})
    assert status == 200, decided

    async def done() -> Any:
        _, run, _ = await served.call("GET", f"/api/runs/{run_id}", STATIC)
        return run if run["status"] == "done" else None

    finished = await eventually(done, "the deploy running")
    assert "deployed api" in finished["text"]
    _, events, _ = await served.call("GET", f"/api/runs/{run_id}/events", STATIC)
    decided_by = [e for e in events["events"] if e["kind"] == "ticket_decided"]
    assert decided_by and decided_by[0]["data"]["actor"] == "oidc:carol"


async def test_verifying_requests_never_fetches_keys(served: Served) -> None:
    assert served.idp.hits == {"discovery": 1, "jwks": 1}  # once, when the server started
    token = served.idp.token()
    for _ in range(20):
        status, _, _ = await served.call("GET", "/api/approvals", token)
        assert status == 200
    for token in bad_tokens(served.idp, served.keys).values():
        await served.call("GET", "/api/approvals", token)
    assert served.idp.hits == {"discovery": 1, "jwks": 1}
    assert not served.verifier.refresh_pending


async def test_an_unknown_key_id_is_refused_and_fetches_the_rotated_keys_once(
    served: Served,
) -> None:
    rotated = new_key("k-rotated")
    served.idp.publish(served.keys["rsa"], rotated)  # the provider rotated a key in
    token = served.idp.token(rotated, sub="alice")
    status, _, challenge = await served.call("GET", "/api/approvals", token)
    assert (status, challenge) == (401, INVALID)
    await until(lambda: "k-rotated" in served.verifier.kids, "the rotated key fetched")
    assert served.idp.hits["jwks"] == 2
    status, _, _ = await served.call("GET", "/api/approvals", token)
    assert status == 200

    # Forged key ids do not make the server ask the provider again (30 s apart at most).
    for _ in range(10):
        forged = served.idp.token(new_key(f"k-{uuid.uuid4().hex}"))
        status, _, _ = await served.call("GET", "/api/approvals", forged)
        assert status == 401
    assert not served.verifier.refresh_pending
    assert served.idp.hits["jwks"] == 2
    assert await served.everything() == ([], [])


# -- the verifier on its own -----------------------------------------------------------


@pytest.fixture
async def idp() -> AsyncIterator[FakeIdp]:
    provider = await FakeIdp([new_key("k1")]).start()
    try:
        yield provider
    finally:
        await provider.close()


async def test_unknown_key_ids_refresh_at_most_once_per_cooldown(idp: FakeIdp) -> None:
    clock = [1000.0]
    verifier = OidcVerifier(
        OidcConfig(idp.issuer, AUDIENCE), monotonic=lambda: clock[0], unknown_kid_cooldown=30
    )
    await verifier.start()
    try:
        assert (idp.hits["jwks"], verifier.fetches) == (1, 1)
        assert verifier.verify(idp.token(new_key("forged-1"))) is None
        assert verifier.refresh_pending
        await until(lambda: verifier.fetches == 2, "the early refresh")
        clock[0] += 29
        assert verifier.verify(idp.token(new_key("forged-2"))) is None
        assert not verifier.refresh_pending  # within the cooldown: no fetch asked for
        clock[0] += 1
        assert verifier.verify(idp.token(new_key("forged-3"))) is None
        assert verifier.refresh_pending
        await until(lambda: verifier.fetches == 3, "the next early refresh")
        assert idp.hits["jwks"] == 3
        # A known key id with a wrong signature never asks for a refresh.
        clock[0] += 60
        assert verifier.verify(idp.token(new_key("k1"))) is None
        assert not verifier.refresh_pending
    finally:
        await verifier.close()


@pytest.mark.parametrize(("max_age", "expected"), [(None, 600), (5, 60), (120, 120), (10**6, 3600)])
async def test_the_refresh_period_honours_max_age_within_bounds(
    max_age: int | None, expected: float
) -> None:
    provider = await FakeIdp([new_key("k1")], max_age=max_age).start()
    verifier = OidcVerifier(OidcConfig(provider.issuer, AUDIENCE, jwks_url=provider.url + "/jwks"))
    try:
        await verifier.start()
        assert verifier.refresh_in == expected
        assert provider.hits == {"jwks": 1}  # a configured JWKS URL: no discovery
    finally:
        await verifier.close()
        await provider.close()


async def test_an_unreachable_provider_at_start_leaves_static_tokens_working(
    idp: FakeIdp, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens on the discovery URL's port once the provider is closed.
    issuer = idp.issuer
    token = idp.token()
    await idp.close()
    verifier = OidcVerifier(OidcConfig(issuer, AUDIENCE))
    await verifier.start()
    try:
        assert verifier.fetches == 0 and verifier.kids == frozenset()
        assert verifier.verify(token) is None
        assert "JWT signing keys of " + issuer + " not refreshed" in caplog.text
        assert verifier.refresh_in == 60
    finally:
        await verifier.close()


async def test_a_discovery_document_of_another_issuer_is_not_trusted(
    idp: FakeIdp, caplog: pytest.LogCaptureFixture
) -> None:
    verifier = OidcVerifier(OidcConfig(idp.issuer + "/", AUDIENCE))
    await verifier.start()
    try:
        assert verifier.kids == frozenset() and idp.hits == {"discovery": 1}
        assert "must match it exactly" in caplog.text
    finally:
        await verifier.close()


async def test_close_ends_the_refresh_task_and_the_session(idp: FakeIdp) -> None:
    verifier = OidcVerifier(OidcConfig(idp.issuer, AUDIENCE))
    await verifier.start()
    task, session = verifier._task, verifier._session
    assert task is not None and session is not None
    await verifier.close()
    assert task.done() and session.closed
    await verifier.close()  # twice is harmless


async def test_static_tokens_may_not_take_jwt_user_ids() -> None:
    verifier = OidcVerifier(OidcConfig("https://idp.example.com", AUDIENCE))
    with pytest.raises(ValueError, match="JWT users"):
        TokenAuth([ApiToken("tok-0123456789abcdef", "oidc:alice")], jwt=verifier)
    TokenAuth([ApiToken("tok-0123456789abcdef", "oidc:alice")])  # without JWTs: any id
    for algorithms in (("none",), ("HS256",), ("RS256", "HS512"), ()):
        with pytest.raises(ValueError, match="algorithms"):
            OidcConfig("https://idp.example.com", AUDIENCE, algorithms=algorithms)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"oidc_issuer": "https://idp.example.com"}, "SIGNOFF_OIDC_AUDIENCE: required with"),
        ({"oidc_audience": "api"}, "SIGNOFF_OIDC_AUDIENCE: needs SIGNOFF_OIDC_ISSUER"),
        ({"oidc_operator_groups": "sre"}, "SIGNOFF_OIDC_OPERATOR_GROUPS: needs"),
        (
            {"oidc_issuer": "http://idp.example.com", "oidc_audience": "api"},
            "SIGNOFF_OIDC_ISSUER: expected an https:// URL",
        ),
        (
            {"oidc_issuer": "https://i.example", "oidc_audience": "a", "oidc_algorithms": "HS256"},
            "SIGNOFF_OIDC_ALGORITHMS: expected some of",
        ),
        (
            {
                "oidc_issuer": "https://i.example",
                "oidc_audience": "a",
                "api_tokens": '[{"token": "tok-0123456789abcdef", "actor": "oidc:bob"}]',
            },
            "SIGNOFF_OIDC_ISSUER: SIGNOFF_API_TOKENS names oidc:bob",
        ),
    ],
)
def test_bad_combinations_are_refused_at_start(
    values: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.upper().startswith("SIGNOFF_")]:
        monkeypatch.delenv(name)
    for name, value in values.items():
        monkeypatch.setenv(f"SIGNOFF_{name.upper()}", value)
    with pytest.raises(ConfigurationError, match=message):
        load_settings()


def test_comma_separated_lists_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.upper().startswith("SIGNOFF_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SIGNOFF_OIDC_ISSUER", "http://localhost:9000")
    monkeypatch.setenv("SIGNOFF_OIDC_AUDIENCE", "api")
    monkeypatch.setenv("SIGNOFF_OIDC_OPERATOR_GROUPS", "sre, platform")
    settings = load_settings()
    assert settings.oidc_operator_groups == ["sre", "platform"]
    assert settings.oidc_algorithms == ["RS256", "ES256", "EdDSA"]
    assert (settings.oidc_user_claim, settings.oidc_groups_claim) == ("sub", "groups")
    assert settings_module.ALLOWED_ALGORITHMS == ALLOWED_ALGORITHMS
    assert settings_module.DEFAULT_ALGORITHMS == DEFAULT_ALGORITHMS
    assert settings_module.ACTOR_PREFIX == ACTOR_PREFIX
