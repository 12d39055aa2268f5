"""One person across edges: the links from each platform's user id to a person.

A person is an id of their own: the identity provider's (``oidc:ana@corp``) or a name
from the identities file. Each platform-qualified user id (a Slack ``U024BE7LH``, a
Discord ``1234...``, a console or API ``oidc:ana@corp``) may be linked to one person. The
runtime gives an `Actor` every id of its person (`Actor.aliases`) before it checks who
may decide, so a four-eyes requester is refused on every edge under any of their ids.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

Unlinked = Literal["allow", "refuse"]
"""What becomes of a decision from a chat user linked to nobody: ``allow`` checks it
under their chat id alone (as without links), ``refuse`` refuses it."""

LinkSource = Literal["file", "email", "code", "api"]
"""How a link was made: the identities file, a verified e-mail, a one-time link code,
or host code."""

CHAT_PLATFORMS = frozenset({"slack", "discord"})
"""The platforms whose users `Unlinked` applies to."""

LINK_CODE_SECONDS = 600.0
"""How long a link code shown in the console may be redeemed."""


@dataclass(frozen=True, slots=True)
class IdentityRules:
    """How the runtime treats people's ids.

    Attributes:
        unlinked: What becomes of a decision from a chat user linked to nobody.
        code_seconds: How long a link code lasts.
    """

    unlinked: Unlinked = "allow"
    code_seconds: float = LINK_CODE_SECONDS


def code_digest(code: str) -> str:
    """What the store keeps of a link code: its SHA-256, so a database read cannot
    redeem one."""
    return hashlib.sha256(code.strip().encode("utf-8", "surrogatepass")).hexdigest()
