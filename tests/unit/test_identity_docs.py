"""The settings example of docs/identity.md's single sign-on section is valid: it loads as
settings and makes the console's single sign-on client with the documented redirect URI."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bot.app import sso_client
from bot.settings import Settings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "identity.md"


def settings_block() -> dict[str, str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Single sign-on", 1)[1]
    found = re.search(r"```bash\n(.*?)```", section, re.S)
    assert found is not None
    pairs = (line.split("=", 1) for line in shlex.split(found.group(1), comments=True))
    return {name: value for name, value in pairs}


def test_the_example_makes_the_console_client(monkeypatch: pytest.MonkeyPatch) -> None:
    env = settings_block()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings(operator_token="o" * 20, cookie_secret="c" * 32)

    client = sso_client(settings)

    assert client is not None
    config = client.config
    assert config.redirect_uri == "https://signoff.example.com/login/sso/callback"
    assert config.scopes == ("openid", "email", "profile", "groups")
    assert config.client_secret == "change-me"
    assert config.operator_groups == frozenset({"sre"})
    assert config.shown_name == "Corp SSO"
    assert config.client_id == "signoff-console"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SIGNOFF_PUBLIC_URL": None}, "needs SIGNOFF_PUBLIC_URL"),
        ({"SIGNOFF_OIDC_SCOPES": "email profile"}, "must include openid"),
        ({"SIGNOFF_OIDC_CLIENT_ID": None}, "needs SIGNOFF_OIDC_CLIENT_ID"),
    ],
)
def test_an_incomplete_setup_is_refused(
    monkeypatch: pytest.MonkeyPatch, change: dict[str, str | None], message: str
) -> None:
    env: dict[str, str | None] = {**settings_block(), **change}
    for name, value in env.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        Settings(operator_token="o" * 20, cookie_secret="c" * 32)


def test_token_sign_in_is_turned_off_only_with_single_sign_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SIGNOFF_CONSOLE_TOKEN_SIGN_IN", "false")
    with pytest.raises(ValueError, match="nobody could sign in to the console"):
        Settings(operator_token="o" * 20, cookie_secret="c" * 32)
