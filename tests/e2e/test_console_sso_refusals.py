"""Single sign-on to the console against `sso_kit.CodeIdp`, a provider on 127.0.0.1 that
approves at once, checks the PKCE verifier and lets the test bend the ID token: a public
client (no secret) signs in with PKCE; an ID token with a wrong nonce, another issuer,
another audience, an expiry in the past or a foreign key, and an error from the provider,
are each refused with a page that says why, and sign nobody in; so are more groups than a
session cookie can hold."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_oidc import new_key
from sso_kit import COOKIE_SECRET, CodeIdp, Console, ConsoleClient, serve_console

from adapters.web import SessionCodec

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def idp() -> AsyncIterator[CodeIdp]:
    provider = await CodeIdp().start()
    try:
        yield provider
    finally:
        await provider.close()


@pytest.fixture
async def console(tmp_path: Path, idp: CodeIdp) -> AsyncIterator[Console]:
    async with serve_console(tmp_path, idp.issuer, []) as running:
        yield running


@pytest.fixture
async def client(console: Console) -> AsyncIterator[ConsoleClient]:
    browser = ConsoleClient(console.url)
    try:
        yield browser
    finally:
        await browser.close()


def signed_in_as(client: ConsoleClient) -> Any:
    session = SessionCodec(COOKIE_SECRET.encode()).unsign(client.cookie("signoff_session"))
    return None if session is None else session.get("actor")


async def test_a_public_client_signs_in_with_pkce(idp: CodeIdp, client: ConsoleClient) -> None:
    landed = await client.come_back(await client.leave_for_provider("/grants"))
    assert (landed.status, landed.path) == (200, "/grants")
    assert idp.pkce_checked == 1  # the code was redeemed with the verifier of its challenge
    assert signed_in_as(client) == "oidc:alice@example.com"
    assert '<span class="who">alice@example.com</span>' in landed.text


@pytest.mark.parametrize(
    ("bend", "why"),
    [
        pytest.param({"claims": {"nonce": "another-sign-in"}}, "nonce mismatch", id="nonce"),
        pytest.param({"claims": {"nonce": None}}, "nonce mismatch", id="no-nonce"),
        pytest.param({"lifetime": -120}, "ID token was refused", id="expired"),
        pytest.param(
            {"claims": {"iss": "http://127.0.0.1:9/elsewhere"}},
            "ID token was refused",
            id="foreign-issuer",
        ),
        pytest.param({"claims": {"aud": "another-client"}}, "ID token was refused", id="audience"),
        pytest.param(
            {"claims": {"aud": ["signoff-console", "another-client"], "azp": "another-client"}},
            "another client",
            id="azp",
        ),
        pytest.param({"claims": {"email": None}}, "ID token was refused", id="no-user"),
        pytest.param({"error": "access_denied"}, "refused the sign-in: access_denied", id="error"),
        pytest.param(
            {"claims": {"groups": [f"team-{n:04}-with-a-long-name" for n in range(200)]}},
            "too many groups for you (200)",
            id="groups-too-many-for-a-cookie",
        ),
    ],
)
async def test_a_bad_answer_is_refused_and_signs_nobody_in(
    idp: CodeIdp, client: ConsoleClient, bend: dict[str, Any], why: str
) -> None:
    for name, value in bend.items():
        setattr(idp, name, value)
    refused = await client.come_back(await client.leave_for_provider())
    assert refused.status == 403
    assert "Sign-in refused" in refused.text and why in refused.text
    assert signed_in_as(client) is None
    assert (await client.page("/runs")).path == "/login?next=/runs"


async def test_a_token_signed_with_a_foreign_key_is_refused(
    idp: CodeIdp, client: ConsoleClient
) -> None:
    stranger = new_key("k1")  # the published key's id, another key
    minted = idp.token

    def forged(**claims: Any) -> str:
        return minted(stranger, **claims)

    idp.token = forged  # type: ignore[method-assign]
    refused = await client.come_back(await client.leave_for_provider())
    assert refused.status == 403 and "ID token was refused" in refused.text
    assert signed_in_as(client) is None
