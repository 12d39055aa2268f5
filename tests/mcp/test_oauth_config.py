"""OAuth servers in the agents file and the settings they need, checked before anything
connects; and the sealing of their records."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from adapters.mcp import HttpServer
from adapters.mcp.oauth import SecretBox
from bot.agents_file import load_agents_file
from bot.settings import Settings
from bot.wiring import load_agent_set
from runtime import ConfigurationError

AGENT = """
[agents.crm]
description = "d"
instructions = "i"
model = "oauth_agents:crm_model"
servers = ["crm"]
"""


def agents_file(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(textwrap.dedent(server) + AGENT)
    return path


def test_the_documented_oauth_server_loads(tmp_path: Path) -> None:
    page = (Path(__file__).parents[2] / "docs" / "agents-file.md").read_text()
    [block] = [
        b.split("```", 1)[0]
        for b in page.split("```toml\n")[1:]
        if 'auth = "oauth"' in b.split("```", 1)[0]
    ]
    (tmp_path / "crm-secret.txt").write_text("from-the-file\n")
    [server] = load_agents_file(agents_file(tmp_path, block)).servers
    assert isinstance(server, HttpServer) and server.oauth is not None
    assert server.oauth.client_id == "signoff"
    assert server.oauth.client_secret == "from-the-file"
    assert server.oauth.scopes == ("crm.read",)


def test_an_oauth_server_with_its_client_and_secret_file(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s3cret\n")
    path = agents_file(
        tmp_path,
        """
        [servers.crm]
        url = "https://crm.example.com/mcp"
        auth = "oauth"
        client_id = "signoff"
        client_secret_file = "secret.txt"
        scopes = ["crm.read", "crm.write"]
        """,
    )
    [server] = load_agents_file(path).servers
    assert isinstance(server, HttpServer) and server.oauth is not None
    assert server.oauth.client_id == "signoff"
    assert server.oauth.client_secret == "s3cret"
    assert server.oauth.scopes == ("crm.read", "crm.write")
    assert "s3cret" not in repr(server)


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ('command = "x"\nauth = "oauth"', 'auth = "oauth" is for url servers'),
        ('url = "https://x/mcp"\nclient_id = "a"', 'need auth = "oauth"'),
        ('url = "https://x/mcp"\nauth = "oauth"\nclient_secret_file = "s"', "needs client_id"),
        ('url = "https://x/mcp"\nauth = "basic"', "auth"),
        (
            'url = "https://x/mcp"\nauth = "oauth"\nclient_id = "a"\nclient_secret_file = "no"',
            "servers.crm.client_secret_file",
        ),
    ],
)
def test_bad_oauth_settings_are_refused_with_their_key(
    tmp_path: Path, server: str, message: str
) -> None:
    path = agents_file(tmp_path, "[servers.crm]\n" + server + "\n")
    with pytest.raises(ConfigurationError) as refused:
        load_agents_file(path)
    assert message in str(refused.value)


def oauth_settings(tmp_path: Path, **values: str) -> Settings:
    path = agents_file(tmp_path, '[servers.crm]\nurl = "https://x/mcp"\nauth = "oauth"\n')
    return Settings(agents=str(path), **values)  # type: ignore[arg-type]


def test_oauth_servers_need_the_key_and_the_public_url(tmp_path: Path) -> None:
    key = "k" * 40
    with pytest.raises(ConfigurationError, match="SIGNOFF_SECRETS_KEY"):
        load_agent_set(oauth_settings(tmp_path, public_url="https://signoff.example.com"))
    with pytest.raises(ConfigurationError, match="SIGNOFF_PUBLIC_URL"):
        load_agent_set(oauth_settings(tmp_path, secrets_key=key))
    loaded = load_agent_set(
        oauth_settings(tmp_path, secrets_key=key, public_url="https://signoff.example.com/")
    )
    assert loaded.sign_ins is not None
    assert loaded.sign_ins.redirect_uri == "https://signoff.example.com/mcp/oauth/callback"


def test_records_are_sealed_and_open_only_with_their_key() -> None:
    box = SecretBox("a passphrase of more than thirty-two characters")
    sealed = box.seal({"tokens": {"access_token": "at-123"}})
    assert "at-123" not in sealed and "access_token" not in sealed
    assert box.open(sealed) == {"tokens": {"access_token": "at-123"}}
    assert SecretBox("another passphrase of more than thirty-two chars").open(sealed) is None
    assert box.open(sealed[:-4] + "AAAA") is None  # altered
    fernet = SecretBox(Fernet.generate_key().decode())
    assert fernet.open(fernet.seal({"a": 1})) == {"a": 1}
    with pytest.raises(ValueError, match="at least 32 characters"):
        SecretBox("short")
