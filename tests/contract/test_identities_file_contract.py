"""The identities file over every store: what it no longer lists is unlinked at the next
start; links made by a link code, a verified e-mail or host code stay."""

from __future__ import annotations

from pathlib import Path

from bot.identities import apply_identities
from bot.settings import Settings
from runtime import Actor, Runtime
from runtime.store.base import Store

FIRST = """\
"oidc:ana@corp" = ["U024BE7LH", "123456789012345678"]
"oidc:bo@corp" = ["U0G9QF9C6"]
release-manager = ["U0CJ1TWKX", "oidc:rm@corp"]
"""

# Bo's line is gone, Ana's Discord id moved to the release manager, and one of the
# release manager's ids left the file.
SECOND = """\
"oidc:ana@corp" = ["U024BE7LH"]
release-manager = ["U0CJ1TWKX", "123456789012345678"]
"""


async def test_links_the_file_no_longer_lists_are_removed(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "identities.toml"
    path.write_text(FIRST, encoding="utf-8")
    settings = Settings(identities_file=path)
    runtime = Runtime(store)
    await apply_identities(settings, runtime)
    identities = runtime.identities
    # Made other ways: a link code, a verified e-mail, host code; one over a file link.
    code = await identities.new_link_code("oidc:bo@corp")
    assert await identities.redeem_link_code(code, "555555555555555555") == "oidc:bo@corp"
    await identities.link("U0EMAIL01", "oidc:bo@corp", "email")
    await identities.link("U0HOST001", "oidc:ana@corp", "api")
    # The release manager's console id, linked by the file, is linked again by a code.
    code = await identities.new_link_code("release-manager")
    assert await identities.redeem_link_code(code, "oidc:rm@corp") == "release-manager"
    async with store.transaction() as tx:
        assert await tx.links_from("file") == {
            "123456789012345678": "oidc:ana@corp",
            "U024BE7LH": "oidc:ana@corp",
            "U0CJ1TWKX": "release-manager",
            "U0G9QF9C6": "oidc:bo@corp",
        }
        assert await tx.links_from("email") == {"U0EMAIL01": "oidc:bo@corp"}
        assert await tx.links_from("code") == {
            "555555555555555555": "oidc:bo@corp",
            "oidc:rm@corp": "release-manager",
        }

    path.write_text(SECOND, encoding="utf-8")
    await apply_identities(settings, runtime)  # the next start
    assert await identities.person_of("U0G9QF9C6") is None
    assert await identities.person_of("123456789012345678") == "release-manager"
    assert await identities.person_of("U024BE7LH") == "oidc:ana@corp"
    # Not made by the file, so not the file's to remove.
    assert await identities.person_of("555555555555555555") == "oidc:bo@corp"
    assert await identities.person_of("U0EMAIL01") == "oidc:bo@corp"
    assert await identities.person_of("U0HOST001") == "oidc:ana@corp"
    assert await identities.person_of("oidc:rm@corp") == "release-manager"
    assert await identities.identities_of("oidc:bo@corp") == ["555555555555555555", "U0EMAIL01"]
    # Bo's Slack id is nobody's now: the checks see it alone.
    alone = await identities.as_person(Actor(id="U0G9QF9C6", platform="slack"))
    assert alone.aliases == frozenset()

    # Reading the same file again changes nothing.
    async with store.transaction() as tx:
        before = await tx.links_from("file")
    await apply_identities(settings, runtime)
    async with store.transaction() as tx:
        assert await tx.links_from("file") == before


async def test_without_the_setting_no_link_is_removed(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "identities.toml"
    path.write_text(FIRST, encoding="utf-8")
    runtime = Runtime(store)
    await apply_identities(Settings(identities_file=path), runtime)
    await apply_identities(Settings(), runtime)
    assert await runtime.identities.person_of("U0G9QF9C6") == "oidc:bo@corp"
