"""Who reads ``GET /api/audit`` when the settings say: ``"auditor": true`` on a token of
``SIGNOFF_API_TOKENS``, and JWT users in a ``SIGNOFF_OIDC_AUDITOR_GROUPS`` group.

`signoff serve`'s application is built from settings as in production, against a
provider served on 127.0.0.1 by `fake_oidc.FakeIdp`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from fake_oidc import AUDIENCE, FakeIdp, new_key

from bot.bootstrap import Parts, build_service
from bot.settings import Settings, load_settings
from runtime import ConfigurationError

OPERATOR_TOKEN = "tok-ops-0123456789abcdef"
AUDITOR = "tok-auditor-0123456789"
PLAIN = "tok-plain-u1-012345678"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[FakeIdp, TestClient[Any, Any]]]:
    idp = await FakeIdp([new_key("k-rsa")]).start()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'signoff.db'}",
        operator_token=OPERATOR_TOKEN,
        cookie_secret="c" * 32,
        api_tokens=[
            {"token": AUDITOR, "actor": "audit:carol", "auditor": True},
            {"token": PLAIN, "actor": "U1"},
        ],
        oidc_issuer=idp.issuer,
        oidc_audience=AUDIENCE,
        oidc_operator_groups=["sre"],
        oidc_auditor_groups=["compliance", "audit"],
    )
    service = await build_service(
        settings,
        agents=[],
        parts=Parts(listen=False, outbox=False, deadlines=False, wake_ups=False),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(service.app, host="127.0.0.1", port=0))
    try:
        await client.start_server()
        await service.start()
        yield idp, client
    finally:
        await client.close()
        await service.stop(grace_seconds=1)
        await idp.close()


async def status_of(client: TestClient[Any, Any], token: str) -> int:
    response = await client.get("/api/audit", headers={"Authorization": f"Bearer {token}"})
    await response.read()
    return response.status


async def test_auditor_tokens_and_groups_read_the_audit_and_nobody_else(
    served: tuple[FakeIdp, TestClient[Any, Any]],
) -> None:
    idp, client = served
    assert await status_of(client, AUDITOR) == 200
    assert await status_of(client, OPERATOR_TOKEN) == 200
    assert await status_of(client, PLAIN) == 403
    assert await status_of(client, idp.token(sub="carol", groups=["compliance"])) == 200
    assert await status_of(client, idp.token(sub="ann", groups="audit")) == 200
    assert await status_of(client, idp.token(sub="sam", groups=["sre"])) == 200
    assert await status_of(client, idp.token(sub="bob", groups=["release-managers"])) == 403
    assert await status_of(client, idp.token(sub="eve")) == 403
    assert await status_of(client, idp.token(sub="eve", lifetime=-120)) == 401


def test_auditor_groups_need_an_issuer_and_read_comma_lists(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIGNOFF_OIDC_AUDITOR_GROUPS", "compliance")
    with pytest.raises(ConfigurationError, match="SIGNOFF_OIDC_AUDITOR_GROUPS: needs"):
        load_settings(None)
    monkeypatch.setenv("SIGNOFF_OIDC_ISSUER", "https://idp.example.com")
    monkeypatch.setenv("SIGNOFF_OIDC_AUDIENCE", "signoff")
    monkeypatch.setenv("SIGNOFF_OIDC_AUDITOR_GROUPS", "compliance, audit")
    assert load_settings(None).oidc_auditor_groups == ["compliance", "audit"]
