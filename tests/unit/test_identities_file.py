"""The identities file and `Runtime.identities`, as docs/identity.md shows them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bot.identities import apply_identities, read_identities
from bot.settings import Settings
from runtime import Actor, ConfigurationError, MemoryStore, Runtime, Unauthorized

PAGE = Path(__file__).resolve().parents[2] / "docs" / "identity.md"


def _block(language: str, index: int = 0) -> str:
    found = re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    return str(found[index])


async def test_the_pages_identities_file_links_every_id(tmp_path: Path) -> None:
    path = tmp_path / "identities.toml"
    path.write_text(re.sub(r"(?m)^   ", "", _block("toml")), encoding="utf-8")
    settings = Settings(identities_file=path, identity_unlinked="refuse")
    runtime = Runtime(MemoryStore())
    await apply_identities(settings, runtime)
    assert await runtime.identities.identities_of("oidc:ana@corp") == [
        "123456789012345678",
        "U024BE7LH",
    ]
    assert await runtime.identities.person_of("oidc:rm@corp") == "release-manager"
    assert runtime.identities.rules.unlinked == "refuse"
    person = await runtime.identities.as_person(Actor(id="U0CJ1TWKX", platform="slack"))
    assert person.aliases == {"release-manager", "oidc:rm@corp", "998877665544332211"}
    with pytest.raises(Unauthorized):
        await runtime.identities.as_person(Actor(id="U404", platform="slack"))
    # Read again at the next start: nothing changes.
    await apply_identities(settings, runtime)
    assert await runtime.identities.person_of("U0G9QF9C6") == "oidc:bo@corp"


@pytest.mark.parametrize(
    "text",
    ['a = ["U1"]\nb = ["U1"]', 'a = "U1"', "a = [1]", "not toml ["],
)
def test_a_malformed_identities_file_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "identities.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigurationError, match="SIGNOFF_IDENTITIES_FILE"):
        read_identities(path)


async def test_the_pages_python_links_slack_and_discord() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_block("python"), str(PAGE), "exec"), namespace)
    runtime = Runtime(MemoryStore())
    assert await namespace["link_ana"](runtime) == ["123456789012345678", "U024BE7LH"]
