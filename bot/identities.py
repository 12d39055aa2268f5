"""Identity links from the settings: the identities file and the unlinked-user rule."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bot.settings import Settings
from runtime import ConfigurationError, Runtime


def read_identities(path: Path) -> dict[str, list[str]]:
    """The people of an identities file: each person with the ids that are them.

    The file is TOML, one key per person::

        "oidc:ana@corp" = ["U024BE7LH", "123456789012345678"]

    Raises:
        ConfigurationError: The file cannot be read or is not of that shape.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"SIGNOFF_IDENTITIES_FILE {path}: {exc}") from exc
    people: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for person, ids in data.items():
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise ConfigurationError(
                f"SIGNOFF_IDENTITIES_FILE {path}: {person!r} must be a list of ids"
            )
        for identity in ids:
            other = seen.setdefault(identity, person)
            if other != person:
                raise ConfigurationError(
                    f"SIGNOFF_IDENTITIES_FILE {path}: {identity!r} is listed under both "
                    f"{other!r} and {person!r}"
                )
        people[person] = list(ids)
    return people


async def apply_identities(settings: Settings, runtime: Runtime) -> None:
    """Apply the identity settings to `runtime`: how unlinked chat users are treated,
    and the links of ``SIGNOFF_IDENTITIES_FILE`` (added, moved, and removed when the file
    no longer lists them, in one transaction; links made another way stay).

    Raises:
        ConfigurationError: The identities file is unreadable or malformed.
    """
    runtime.identities.configure(unlinked=settings.identity_unlinked)
    if settings.identities_file is not None:
        people = read_identities(settings.identities_file)
        await runtime.identities.link_all(people, "file", exact=True)


__all__ = ["apply_identities", "read_identities"]
